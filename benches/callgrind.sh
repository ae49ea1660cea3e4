#!/usr/bin/env bash
# Instruction counts per operation for the single-threaded paths, under valgrind's
# callgrind: repeatable to the instruction for the same binary, whatever else the machine
# is doing, so a regression shows up even on a noisy 2-core box.
#
# Usage: benches/callgrind.sh [COUNT]   (default 2000)
# Each operation runs twice, COUNT and 2*COUNT times; the difference divided by COUNT is
# the cost of one operation, with setup cancelled out.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-2000}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
cargo build --release --locked -q -p sb-benches --bin callgrind-ops
BIN=target/release/callgrind-ops

instructions() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN" "$1" "$2" 2>&1 \
    | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

printf '%-26s %14s\n' operation instructions/op
for op in $("$BIN" list); do
  one=$(instructions "$op" "$COUNT")
  two=$(instructions "$op" $((COUNT * 2)))
  printf '%-26s %14d\n' "$op" $(((two - one) / COUNT))
done
