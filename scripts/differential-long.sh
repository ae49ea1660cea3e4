#!/usr/bin/env bash
# The widened differential suites, for as long as they are given.
#
# Usage: scripts/differential-long.sh [MINUTES]   (default 30)
#
# Runs, in rounds until MINUTES have passed, each with fresh random seeds:
#  - chain-fold's `tests/reference.rs`: every build on every path (today's SpineCache, the
#    engine's advance with its prefix path, advance fed any last spine, forks of a chain fed
#    to the same caches) against a reference walk written from docs/domain.md;
#  - wal-index's `tests/differential.rs`: random op sequences on WalIndex, MutexIndex,
#    ShardedMutexIndex and the sequential model, every build checked against the reference
#    walk and today's bytes.
# CI runs both with their default case counts (2,000 and 1,000) in the test stage. A failing
# case stops the script with proptest's minimal failing input. Release build (its own
# profile, so the debug target CI uses is not touched).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-30}
per_round=${CASES_PER_ROUND:-20000}
deadline=$((SECONDS + minutes * 60))

cargo test --release --locked -p chain-fold --test reference --no-run -q
cargo test --release --locked -p wal-index --test differential --no-run -q

rounds=0 reference=0 differential=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while [ "$SECONDS" -lt "$deadline" ]; do
  for suite in "chain-fold reference REFERENCE_CASES" "wal-index differential DIFFERENTIAL_CASES"; do
    read -r crate test knob <<<"$suite"
    if ! env "$knob=$per_round" cargo test --release --locked -q -p "$crate" --test "$test" >"$log" 2>&1; then
      cat "$log"
      echo "FAILED in round $((rounds + 1)): $crate $test (see the minimal failing input above)"
      exit 1
    fi
  done
  rounds=$((rounds + 1))
  reference=$((reference + per_round))
  differential=$((differential + per_round))
  echo "round $rounds passed at ${SECONDS}s: $reference reference cases, $differential differential cases"
done
echo "differential suites clean for ${SECONDS}s: $reference random chain-fold reference cases" \
  "and $differential random op sequences on the three indexes, in $rounds rounds of $per_round each"
