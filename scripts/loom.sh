#!/usr/bin/env bash
# Loom models of the wal-index protocols (loom-tests/), over the engine's own sync shim.
#
# Usage: scripts/loom.sh [PREEMPTIONS]   (default 2; 3 is the documented longer run)
# Runs every model with the given preemption bound, then the deliberately weakened build
# (snapshot publication downgraded to Relaxed) and checks that loom catches it.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS=${1:-2}
export RUSTFLAGS="${RUSTFLAGS:-} --cfg wal_index_loom"
# A separate target dir: the cfg changes every crate's fingerprint.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/loom}
echo "loom models, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS"
cargo test --locked -p loom-tests --test models
echo "loom must catch the weakened publication:"
cargo test --locked -p loom-tests --features weaken --test models loom_catches_a_relaxed_publication
