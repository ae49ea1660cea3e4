#!/usr/bin/env bash
# Randomized-schedule tests (shuttle-tests/): every engine under shuttle's random and PCT
# schedulers, with the whole index on shuttle's primitives (`--cfg wal_index_shuttle`).
#
# Usage: scripts/shuttle.sh [ITERATIONS]   (default 300 per scheduler and engine)
#
# Then each mutation the randomized test is documented to catch (docs/verification.md) is
# built in, and the test must fail. `mutation-listen-ignores-retirement` is loom's alone:
# its window needs a drive on an execution that is evicted and replayed while it waits,
# which this workload does not drive (scripts/loom.sh catches it).
set -euo pipefail
cd "$(dirname "$0")/.."
export SHUTTLE_ITERATIONS=${1:-300}
export RUSTFLAGS="${RUSTFLAGS:-} --cfg wal_index_shuttle"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/shuttle}
echo "shuttle, $SHUTTLE_ITERATIONS iterations per scheduler and engine"
cargo test --locked -p shuttle-tests --test randomized

# The mutations run 5x the iterations: a caught mutation stops at its first failing
# schedule, so this costs little, and a race that only some schedules reach (the sweep
# planning against totals read after its scan, since an evicted slot drops its chain at
# once) is still found on every run.
export SHUTTLE_ITERATIONS=$((SHUTTLE_ITERATIONS * 5))
mutations=(sweep-trusts-plan sweep-totals-from-stats apply-to-retired-slot unserialized-apply
  finished-after-wake listen-after-build room-ignores-residency)
escaped=0
for mutation in "${mutations[@]}"; do
  log=$(mktemp)
  cargo test --locked -q -p shuttle-tests --features "mutation-$mutation" --test randomized \
    --no-run 2>"$log" || { cat "$log"; echo "mutation $mutation does not build"; exit 1; }
  if cargo test --locked -q -p shuttle-tests --features "mutation-$mutation" \
      --test randomized >"$log" 2>&1; then
    echo "ESCAPED mutation-$mutation"
    escaped=$((escaped + 1))
  else
    why=$(grep -m1 -oE "deadlock!|lost an acknowledged event|totals equal a recount|attempt to [a-z ]+ with overflow|drive for [0-9]+" "$log" || echo "failed")
    echo "caught  mutation-$mutation: $why"
  fi
  rm -f "$log"
done
if [ "$escaped" -ne 0 ]; then
  echo "$escaped mutation(s) escaped shuttle"
  exit 1
fi
echo "every listed mutation was caught"
