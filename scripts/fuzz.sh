#!/usr/bin/env bash
# cargo-fuzz targets: `decode` (bytes into Event::from_json and the JSON-lines drain),
# `differential` (op sequences on all three indexes and the sequential model) and
# `checkpoint` (bytes as a checkpoint file, through both of its readers).
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
# FUZZ_SANITIZER=none skips AddressSanitizer (CI does, to build faster; Miri covers the one
# `unsafe` module); the default is address.
# Needs a nightly toolchain; installs cargo-fuzz if missing. Runs each target from its
# checked-in seed corpus (fuzz/corpus/<target>) for the given time.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in decode differential checkpoint; do
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$target/." "$work/"
  echo "fuzzing $target for ${SECONDS_PER_TARGET}s"
  (cd fuzz && cargo +nightly fuzz run --sanitizer "${FUZZ_SANITIZER:-address}" "$target" "$work" -- \
     -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 2>&1 | grep -E 'stat::number_of_executed_units|Done|ERROR|panicked' || true)
  rm -rf "$work"
  (cd fuzz && test -z "$(ls artifacts/$target 2>/dev/null)") || { echo "fuzz found a crash in $target: fuzz/artifacts/$target"; exit 1; }
done
