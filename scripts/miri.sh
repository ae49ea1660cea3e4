#!/usr/bin/env bash
# Miri over the code with `unsafe` (chain-fold's append-only log) and over a small concurrent
# smoke test of the engine (atomics via arc-swap, event-listener, parking_lot).
#
# Usage: scripts/miri.sh [SEEDS]   (default 8: every test runs under seeds 0..SEEDS, which
# vary scheduling and weak-memory choices)
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${1:-8}
if ! cargo +nightly miri --version >/dev/null 2>&1; then
  rustup component add --toolchain nightly miri rust-src
fi
export MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-many-seeds=0..$SEEDS"
cargo +nightly miri test -p chain-fold --lib
cargo +nightly miri test -p wal-index --test miri_smoke
