#!/usr/bin/env bash
# A pool's restart on the real EHDB writer loaded with production's retained volume
# (17,803 envelopes of ~73 KB, one shard), from a checkpoint and from the beginning:
# crates/wal-source-ehdb/examples/restart_bench.rs, one mode per process:
#
#   checkpoint   a pool drains the feed from 0, checkpointing every second, and ends
#                without a last checkpoint (a rolled pod); it leaves 20 probe executions
#   resume       a new process restores the newest checkpoint and resumes after it
#   replay       a new process replays the feed from 0 (a pool without checkpoints)
#
# Usage: EHDB_SRC=/path/to/ehdb scripts/ehdb-restart-bench.sh   (ENVELOPES=N to change the
# volume; ROUNDS=N resume/replay pairs, default 2). Writes target/ehdb-restart/results.jsonl
# and prints a table. Needs ~8 GB of disk while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
envelopes=${ENVELOPES:-17803}
rounds=${ROUNDS:-2}
work=$PWD/target/ehdb-restart
mkdir -p "$work"
writer_bin=$(scripts/ehdb-writer.sh)
cargo build --release -q -p sb-sim --bin sb-sim
cargo build --release -q -p wal-source-ehdb --example restart_bench
load=$work/retained.jsonl
if [ ! -s "$load" ] || [ "$(wc -l <"$load")" -ne "$envelopes" ]; then
  target/release/sb-sim generate --events "$envelopes" --out "$load"
fi
dir=$work/writer
checkpoints=$work/checkpoints
rm -rf "$dir" "$checkpoints"
mkdir -p "$dir" "$checkpoints"
echo "loading $(du -h "$load" | cut -f1) ($envelopes envelopes) into the writer..." >&2
"$writer_bin" --dir "$dir" --load "$load" >"$work/writer.out" 2>"$work/writer.err" &
writer=$!
trap 'kill $writer 2>/dev/null || true; rm -rf "$dir" "$checkpoints"' EXIT
until grep -q '^ready' "$work/writer.out" 2>/dev/null; do
  kill -0 $writer 2>/dev/null || { cat "$work/writer.err" >&2; exit 1; }
  sleep 1
done
feed=$(sed -n 's/^ready feed=\([^ ]*\) .*/\1/p' "$work/writer.out")
results=$work/results.jsonl
: >"$results"
run() { target/release/examples/restart_bench --feed "$feed" --records "$envelopes" --dir "$checkpoints" --mode "$1" | tee -a "$results"; }
run checkpoint
for _ in $(seq "$rounds"); do
  run resume
  run replay
done
python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = lambda v: "-" if v is None else f"{v:.2f}"
c = rows[0]
print(f"\ncheckpoint run: caught up in {c['caught_up_s']:.1f} s, {c['checkpoints_written']} checkpoints written, the last {c['last_bytes']/1e6:.0f} MB")
print("| restart | restore (s) | checkpoint (MB) | first probe served (s) | all 20 served (s) | first event applied (s) | caught up (s) | records replayed |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for r in rows[1:]:
    print(f"| {r['mode']} | {f(r['restore_s'])} | {r['checkpoint_bytes']/1e6:.0f} | {f(r['first_probe_s'])} | {f(r['all_probes_s'])} | {f(r['first_event_s'])} | {f(r['caught_up_s'])} | {r['records_replayed']} |")
PY
