#!/usr/bin/env bash
# Miri over the code with `unsafe` (chain-fold's append-only log and event allocation, and
# wal-index's snapshot cell and its reclamation domain) and over a small concurrent smoke
# test of the engine (the snapshot cell, event-listener, parking_lot).
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
# Tree Borrows for the engine: crossbeam-epoch (the directory's cell) is known not to fit
# Stacked Borrows' rules, and crossbeam checks it under Tree Borrows itself
# (crossbeam-rs/crossbeam#545, #996). Leaks are not checked there: crossbeam-epoch's global
# collector registers each thread in a list that lives as long as the process (by design),
# which Miri reports; chain-fold's tests above keep the leak check.
MIRIFLAGS="$MIRIFLAGS -Zmiri-tree-borrows -Zmiri-ignore-leaks" cargo +nightly miri test -p wal-index --test miri_smoke
# The snapshot cell's domain is a static that lives as long as the process, with whatever
# its last reclaims had not freed yet: leaks are not checked there either.
MIRIFLAGS="$MIRIFLAGS -Zmiri-tree-borrows -Zmiri-ignore-leaks" cargo +nightly miri test -p wal-index --lib sync::snapshot_cell
