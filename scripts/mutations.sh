#!/usr/bin/env bash
# The randomized "nothing acknowledged is lost" checker (crates/wal-index/tests/soak.rs,
# `nothing_acknowledged_is_lost_*`) must catch a sweep that evicts on a stale plan: this
# builds the engine with `mutation-sweep-trusts-plan` and requires the check to fail.
# The check is randomized, so it gets three tries; it fails this script only if the
# mutation escapes all three. (The loom models catch every mutation exhaustively:
# scripts/loom.sh.)
#
# Usage: scripts/mutations.sh [SECONDS]   (default 3 per try)
set -euo pipefail
cd "$(dirname "$0")/.."
export LEDGER_SECS=${1:-3}
cargo test --locked -q -p wal-index --features mutation-sweep-trusts-plan --test soak --no-run
for try in 1 2 3; do
  if out=$(cargo test --locked -q -p wal-index --features mutation-sweep-trusts-plan \
      --test soak nothing_acknowledged_is_lost_lockfree -- --nocapture 2>&1); then
    echo "try $try: the mutation escaped: $(grep -m1 '^ledger' <<<"$out")"
  else
    echo "caught mutation-sweep-trusts-plan: $(grep -m1 '^ledger' <<<"$out")"
    exit 0
  fi
done
echo "mutation-sweep-trusts-plan escaped the acknowledged-events checker three times"
exit 1
