#!/usr/bin/env bash
# The randomized "nothing acknowledged is lost" checker (crates/wal-index/tests/soak.rs)
# must catch each `soak` mutation of scripts/mutations.table (a sweep that evicts on a
# stale plan): with it switched on (`SB_MUTATION`) the named check must fail. The check is
# randomized, so each mutation gets three tries; it fails this script only if the mutation
# escapes all three. (The loom models catch every mutation exhaustively: scripts/loom.sh.)
# It also runs the `test` lines: a deterministic test that must fail with its mutation.
#
# Usage: scripts/mutations.sh [SECONDS]   (default 3 per try)
set -euo pipefail
cd "$(dirname "$0")/.."
export LEDGER_SECS=${1:-3}
unset SB_MUTATION
# Every line's crate is built once with its `mutations` feature; SB_MUTATION picks the one.
# Each `test` mutation: the named integration test (FILE::NAME) must fail with it, once.
while read -r crate mutation checker check; do
  [ "$checker" = test ] || continue
  file=${check%%::*} name=${check#*::}
  if [ "$file" = lib ]; then target=(--lib) exact=(); else target=(--test "$file") exact=(--exact); fi
  cargo test --locked -q -p "$crate" --features mutations "${target[@]}" --no-run
  if SB_MUTATION=$mutation cargo test --locked -q -p "$crate" --features mutations "${target[@]}" \
      "$name" -- "${exact[@]}" >/dev/null 2>&1; then
    echo "mutation $mutation escaped $check"
    exit 1
  fi
  echo "caught mutation $mutation by $check"
done < <(grep -v '^#' scripts/mutations.table)

while read -r crate mutation checker check; do
  [ "$checker" = soak ] || continue
  cargo test --locked -q -p "$crate" --features mutations --test soak --no-run
  caught=0
  for try in 1 2 3; do
    if out=$(SB_MUTATION=$mutation cargo test --locked -q -p "$crate" --features mutations \
        --test soak "$check" -- --nocapture 2>&1); then
      echo "try $try: mutation $mutation escaped: $(grep -m1 '^ledger' <<<"$out")"
    else
      echo "caught mutation $mutation: $(grep -m1 '^ledger' <<<"$out")"
      caught=1
      break
    fi
  done
  if [ "$caught" -eq 0 ]; then
    echo "mutation $mutation escaped the acknowledged-events checker three times"
    exit 1
  fi
done < <(grep -v '^#' scripts/mutations.table)
