#!/usr/bin/env bash
# Loom models, next to the code they model: wal-index's (`--cfg wal_index_loom`, in
# src/engine/loom_models.rs and src/engine/slot/loom_models.rs) and chain-fold's
# (`--cfg chain_fold_loom`, in src/append_log.rs, src/lineage.rs and
# src/event/allocation.rs); and the top-level loom-tests crate's models of the public
# surface a pool relies on (wal_index_loom).
#
# Usage: scripts/loom.sh [PREEMPTIONS]   (default 2; 3 is the documented longer run)
#
# 1. Runs every model with the given preemption bound.
# 2. Runs the model each `loom` line of scripts/mutations.table names with that mutation
#    switched on (`SB_MUTATION`) and requires it to fail. A mutation loom does not catch
#    fails this script. Every crate is built once, with its `mutations` feature, for the
#    models and all of its mutations alike.
#
# The two crates' shims switch on their own cfgs: under wal_index_loom the engine's models
# see chain-fold as plain code, which keeps their state spaces small.
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_MAX_PREEMPTIONS=${1:-2}
unset SB_MUTATION
# Separate target dirs: each cfg changes every crate's fingerprint.
target=${CARGO_TARGET_DIR:-target/loom}
unset CARGO_TARGET_DIR
loom_test() { # crate, then cargo test arguments
  local crate=$1
  shift
  local cfg=wal_index_loom dir=$target kind=--lib
  if [ "$crate" = chain-fold ]; then cfg=chain_fold_loom dir=$target-chain-fold; fi
  # The models of the public surface are integration tests of their own crate.
  if [ "$crate" = loom-tests ]; then kind=--tests; fi
  RUSTFLAGS="${RUSTFLAGS:-} --cfg $cfg" CARGO_TARGET_DIR=$dir \
    cargo test --locked -q -p "$crate" "$kind" --features mutations "$@"
}

echo "loom models, LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS"
loom_test wal-index loom_models
loom_test chain-fold loom_models
loom_test loom-tests

escaped=0
while read -r crate mutation checker model; do
  [ "$checker" = loom ] || continue
  log=$(mktemp)
  # A cargo failure (a crate the models do not know, a build error) is no catch: the build,
  # already made for the models, must be there.
  loom_test "$crate" --no-run 2>"$log" || { cat "$log"; echo "no loom build of $crate"; exit 1; }
  if SB_MUTATION=$mutation loom_test "$crate" "$model" >"$log" 2>&1; then
    echo "ESCAPED mutation $mutation: $model passed with the bug re-introduced"
    escaped=$((escaped + 1))
  else
    why=$(grep -m1 -oE "deadlock|assertion .*failed.*|attempt to [a-z ]+ with overflow|panicked at [^ ]*loom_models[^ ]*|Causality violation[^.]*" "$log" || echo "failed")
    echo "caught  mutation $mutation ($crate) by $model: $why"
  fi
  rm -f "$log"
done < <(grep -v '^#' scripts/mutations.table)
if [ "$escaped" -ne 0 ]; then
  echo "$escaped mutation(s) escaped the loom models"
  exit 1
fi
echo "every loom mutation was caught"
