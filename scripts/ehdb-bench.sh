#!/usr/bin/env bash
# The feed benchmark: the real EHDB writer on loopback, loaded with production's retained
# volume (17,803 envelopes of ~73 KB, one shard), read by each row of
# crates/wal-source-ehdb/examples/feed_bench.rs in a process of its own:
#
#   floor            the first frame read and discarded
#   today            today's decode (whole frame -> String payloads -> serde_json::Value)
#   engine           EhdbSource + the drain into a WalIndex storing whole events
#   engine-slim      the same into a WalIndex storing slim events (production's setting)
#   engine, cut      a proxy cuts the connection halfway through the frame; resume from the cursor
#   today, cut       the same cut; today's client subscribes from 0 again
#
# Usage: EHDB_SRC=/path/to/ehdb scripts/ehdb-bench.sh   (ENVELOPES=N to change the volume,
# KEEP=1 to keep the writer's directory, ROWS to pick rows). Writes
# target/ehdb-bench/results.jsonl and prints a table. Needs ~8 GB of disk (the load file and the writer's two tiers) while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
envelopes=${ENVELOPES:-17803}
work=$PWD/target/ehdb-bench
mkdir -p "$work"
writer_bin=$(scripts/ehdb-writer.sh)
cargo build --release -q -p sb-sim --bin sb-sim
cargo build --release -q -p wal-source-ehdb --example feed_bench
load=$work/retained.jsonl
if [ ! -s "$load" ] || [ "$(wc -l <"$load")" -ne "$envelopes" ]; then
  target/release/sb-sim generate --events "$envelopes" --out "$load"
fi
dir=$work/writer
rm -rf "$dir"
mkdir -p "$dir"
echo "loading $(du -h "$load" | cut -f1) ($envelopes envelopes) into the writer..." >&2
loaded=$(date +%s)
"$writer_bin" --dir "$dir" --load "$load" >"$work/writer.out" 2>"$work/writer.err" &
writer=$!
trap 'kill $writer 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
until grep -q '^ready' "$work/writer.out" 2>/dev/null; do
  kill -0 $writer 2>/dev/null || { cat "$work/writer.err" >&2; exit 1; }
  sleep 1
done
feed=$(sed -n 's/^ready feed=\([^ ]*\) .*/\1/p' "$work/writer.out")
echo "writer ready on $feed after $(( $(date +%s) - loaded )) s: $(head -1 "$work/writer.out")" >&2
results=$work/results.jsonl
: >"$results"
# ROWS (space-separated modes, commas for spaces: "floor engine-slim engine,--cut-at-half")
# picks rows; default every row.
rows=${ROWS:-floor today engine engine-slim engine,--cut-at-half today,--cut-at-half}
for row in $rows; do
  row=${row//,/ }
  echo "row: $row" >&2
  # shellcheck disable=SC2086
  target/release/examples/feed_bench --feed "$feed" --records "$envelopes" --mode $row | tee -a "$results"
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def f(v, fmt="{:.1f}"):
    return "-" if v is None else fmt.format(v)
print()
print("| row | first byte (s) | first event (s) | caught up (s) | MB/s | peak RSS (MB) | index peak (MB) | subscriptions |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    name = r["mode"] + (", cut at 50%" if r["cut_at_half"] else "")
    print(f"| {name} | {f(r['first_byte_s'])} | {f(r['first_event_s'])} | {r['caught_up_s']:.1f} | {r['mb_per_s']:.0f} | {r['peak_rss_mb']:.0f} | {r['held_mb']:.0f} | {r['subscriptions']} |")
PY
