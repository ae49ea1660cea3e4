#!/usr/bin/env bash
# Randomized-schedule tests (crates/wal-index/src/shuttle_models.rs): every engine under
# shuttle's random and PCT schedulers, with the whole index on shuttle's primitives
# (`--cfg wal_index_shuttle`).
#
# Usage: scripts/shuttle.sh [ITERATIONS]   (default 300 per scheduler and engine)
#
# Then, for each `shuttle` line of scripts/mutations.table, the tests it names (a test-name
# filter) must fail with its mutation switched on (`SB_MUTATION`; one build with the
# `mutations` feature serves the models and every mutation). Mutations without a shuttle line are loom's alone (their windows need a schedule
# this workload does not drive: a drive on an execution that is evicted and replayed while
# it waits, two creators racing one execution's first event).
set -euo pipefail
cd "$(dirname "$0")/.."
export SHUTTLE_ITERATIONS=${1:-300}
export RUSTFLAGS="${RUSTFLAGS:-} --cfg wal_index_shuttle"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/shuttle}
unset SB_MUTATION
# shuttle_test FILTER [CARGO ARGS...]
shuttle_test() {
  local filter=$1
  shift
  cargo test --locked -q -p wal-index --features baselines,mutations --lib "$@" "$filter"
}
echo "shuttle, $SHUTTLE_ITERATIONS iterations per scheduler and engine"
shuttle_test shuttle_models

# The mutations run 5x the iterations: a caught mutation stops at its first failing
# schedule, so this costs little, and a race that only some schedules reach is still found
# on every run. (The sweep planning against totals read after its scan is loom's alone:
# since the directory's walk holds the writers' lock, the random schedules reach that race
# too rarely for every run to find it, and the loom model finds it exhaustively.)
export SHUTTLE_ITERATIONS=$((SHUTTLE_ITERATIONS * 5))
escaped=0
while read -r crate mutation checker filter; do
  [ "$checker" = shuttle ] || continue
  # The models are wal-index's own.
  [ "$crate" = wal-index ] || { echo "a shuttle line for $crate: the models are wal-index's"; exit 1; }
  log=$(mktemp)
  if SB_MUTATION=$mutation shuttle_test "$filter" >"$log" 2>&1; then
    echo "ESCAPED mutation $mutation ($filter)"
    escaped=$((escaped + 1))
  else
    why=$(grep -m1 -oE "deadlock!|lost an acknowledged event|totals equal a recount|attempt to [a-z ]+ with overflow|drive for [0-9]+|read its execution|replay permit" "$log" || echo "failed")
    echo "caught  mutation $mutation ($filter): $why"
  fi
  rm -f "$log"
done < <(grep -v '^#' scripts/mutations.table)
if [ "$escaped" -ne 0 ]; then
  echo "$escaped mutation(s) escaped shuttle"
  exit 1
fi
echo "every shuttle mutation was caught"
