#!/usr/bin/env bash
# Loom models of the wal-index protocols (loom-tests/), over the engine's own sync shim.
#
# Usage: scripts/loom.sh [PREEMPTIONS]   (default 2; 3 is the documented longer run)
#
# 1. Runs every model with the given preemption bound: the slot and accounting models
#    (tests/models.rs) and the models of WalIndex itself (tests/engine.rs).
# 2. Runs the deliberately weakened publication and each mutation (a wal-index feature that
#    re-introduces one concurrency bug) against the model that guards it, and requires loom
#    to fail there. A mutation loom does not catch fails this script.
# 3. Runs chain-fold's own models (`--cfg chain_fold_loom`, next to the code they model):
#    the append-only log's claim of a cell (src/append_log.rs) and a chain's claim of its
#    next version (src/lineage.rs), then each one's mutation, which its models must catch. chain-fold's shim switches on its own cfg: under wal_index_loom the engine's
#    models see chain-fold as plain code, which keeps their state spaces what they were.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS=${1:-2}
export RUSTFLAGS="${RUSTFLAGS:-} --cfg wal_index_loom"
# A separate target dir: the cfg changes every crate's fingerprint.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/loom}
echo "loom models, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS"
cargo test --locked -p loom-tests --test models --test engine

echo "loom must catch the weakened publication:"
cargo test --locked -p loom-tests --features weaken --test models loom_catches_a_relaxed_publication

# mutation -> the model that must fail with it
mutations=(
  "sweep-trusts-plan sweep_vs_apply_keeps_every_acknowledged_event"
  "sweep-totals-from-stats sweep_vs_evict_counts_each_execution_once"
  "listen-ignores-retirement drive_registration_vs_eviction_is_never_stranded"
  "apply-to-retired-slot apply_vs_eviction_never_writes_to_an_orphan"
  "unserialized-apply rehydrate_vs_drain_apply_keeps_both"
  "finished-after-wake terminal_eviction_vs_a_drive_ends_the_drive"
  "listen-after-build drive_loop_vs_publish_never_misses_the_tip"
  "max-id-after-notify drive_loop_vs_publish_never_misses_the_tip"
  "spine-publish-ignores-retirement spine_publish_vs_eviction_leaves_the_ledger_exact"
  "room-ignores-residency drive_for_an_unseen_execution_vs_its_first_event"
)
escaped=0
for entry in "${mutations[@]}"; do
  read -r mutation model <<<"$entry"
  log=$(mktemp)
  # Build first, so a compile error is not mistaken for loom catching the mutation.
  cargo test --locked -q -p loom-tests --features "mutation-$mutation" --test engine --no-run 2>"$log" \
    || { cat "$log"; echo "mutation $mutation does not build"; exit 1; }
  if cargo test --locked -q -p loom-tests --features "mutation-$mutation" --test engine -- \
      --exact "$model" >"$log" 2>&1; then
    echo "ESCAPED mutation-$mutation: $model passed with the bug re-introduced"
    escaped=$((escaped + 1))
  else
    why=$(grep -m1 -oE "deadlock|assertion .*failed.*|attempt to [a-z ]+ with overflow|panicked at [^:]*engine.rs[^ ]*" "$log" || echo "failed")
    echo "caught  mutation-$mutation by $model: $why"
  fi
  rm -f "$log"
done
if [ "$escaped" -ne 0 ]; then
  echo "$escaped mutation(s) escaped the loom models"
  exit 1
fi
echo "every mutation was caught"

echo "chain-fold's append-only log (its own cfg and target dir):"
chain_fold() {
  RUSTFLAGS="${RUSTFLAGS/--cfg wal_index_loom/} --cfg chain_fold_loom" \
    CARGO_TARGET_DIR="$CARGO_TARGET_DIR-chain-fold" \
    cargo test --locked -q -p chain-fold --lib "$@"
}
chain_fold append_log::loom_models
chain_fold lineage::loom_models
# mutation -> the models that must fail with it
for entry in "claim-without-cas append_log::loom_models" "lineage-claim-without-cas lineage::loom_models"; do
  read -r mutation models <<<"$entry"
  log=$(mktemp)
  chain_fold --features "mutation-$mutation" --no-run 2>"$log" \
    || { cat "$log"; echo "mutation $mutation does not build"; exit 1; }
  if chain_fold --features "mutation-$mutation" "$models" >"$log" 2>&1; then
    rm -f "$log"; echo "ESCAPED mutation-$mutation: $models passed"; exit 1
  fi
  echo "caught  mutation-$mutation by $(grep -m1 -oE "$models::[a-z_]+" "$log")"
  rm -f "$log"
done
