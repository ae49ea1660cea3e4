#!/usr/bin/env bash
# The worker-pool example (crates/sb-sim/examples/worker_pool.rs) as a pool's engineer runs
# it: first on its default WAL (in process, for 10 s, a clean shutdown by itself); then a
# roll on a JSON-lines WAL that outlives the run (stopped with SIGTERM, started again: the
# second run must restore the first one's last checkpoint, replay nothing, and serve
# drives); then through a real NATS JetStream broker for 5 s, then through the real EHDB
# writer for 5 s. Each run must exit 0 having served drives.
#
# Usage: scripts/worker-example.sh     (NATS_SERVER=/path/to/nats-server to pick the binary;
#        without one the broker run is skipped, or fails when SB_REQUIRE_NATS is set;
#        EHDB_WRITER=/path/to/ehdb-writer, as scripts/ehdb-writer.sh prints it, for the
#        writer run, skipped without it, or failing when SB_REQUIRE_EHDB is set;
#        WORKER_POOL_BIN and SB_SIM_BIN to pick the binaries; without them, the ones
#        `cargo test --workspace` builds, built here if the tests have not run:
#        scripts/test-build-binary.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
# Exits 0 when the URL answers 200 (a 503 or no answer: 1).
probe() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" 2>/dev/null; }
WORKER_POOL_BIN=${WORKER_POOL_BIN:-$(bash scripts/test-build-binary.sh worker_pool)}
SB_SIM_BIN=${SB_SIM_BIN:-$(bash scripts/test-build-binary.sh sb-sim)}
run() { "$WORKER_POOL_BIN" --metrics-addr "127.0.0.1:$(free_port)" "$@"; }

echo "worker_pool on its default (in-process WAL):"
run --duration 10

echo "worker_pool checkpointing every second (NOETL_STATE_INDEX_CHECKPOINT_DIR):"
cdir=$(mktemp -d)
NOETL_STATE_INDEX_CHECKPOINT_DIR="$cdir" NOETL_STATE_INDEX_CHECKPOINT_SECS=1 run --duration 5
ls "$cdir"/checkpoint-*.sbix >/dev/null || { echo "no checkpoint was written to $cdir"; exit 1; }
rm -rf "$cdir"

# A roll: the example's binary run directly (cargo run would not pass SIGTERM on), on a WAL
# file, stopped with SIGTERM once it is ready, then started again on the same file and
# checkpoint directory.
# The state-spine route over HTTP while the pool runs: the newest line's execution is
# served whole up to that line once the drain has applied it (fail closed until then), a
# head past the WAL is incomplete with no events, a bad id is a 400.
check_state_spine() {
  python3 - "$1" "$2" <<'PY'
import json, sys, time, urllib.error, urllib.request
port, wal = sys.argv[1], sys.argv[2]
def get(query):
    url = "http://127.0.0.1:%s/ehdb/state-spine?%s" % (port, query)
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
for _ in range(100):
    last = json.loads(open(wal).read().splitlines()[-1])
    status, body = get("execution=%d&head=%d" % (last["execution_id"], last["event_id"]))
    assert status == 200 and body["action"] == "ehdb.state.spine", body
    if body["complete"]:
        events = body["events"]
        assert body["outcome"] == "ok" and body["count"] == len(events) > 0, body
        assert events[-1]["event_id"] == last["event_id"], events[-1]
        assert events[0]["event_type"] == "playbook_started", events[0]
        assert body["execution_id"] == str(last["execution_id"]), body
        break
    assert body["events"] == [] and body["count"] == 0, body
    time.sleep(0.05)
else:
    sys.exit("state-spine: never complete for the newest line")
status, body = get("execution=%d&head=%d" % (last["execution_id"], 2**62))
assert status == 200 and body["outcome"] == "incomplete" and body["events"] == [], body
status, body = get("execution=abc")
assert status == 400 and body["outcome"] == "invalid", body
print("state-spine: served %d events of execution %d; a head past the WAL: incomplete, no events; a bad id: 400"
      % (len(events), last["execution_id"]))
PY
}

roll_on_a_file() {
  local rdir port pid lines
  rdir=$(mktemp -d)
  port=$(free_port)
  echo "worker_pool rolled on a JSON-lines WAL ($rdir/wal.jsonl): SIGTERM, then a warm start"
  NOETL_STATE_INDEX_CHECKPOINT_DIR="$rdir/ckpt" NOETL_STATE_SHARD_WRITE=1 NOETL_STATE_SHARD_URL="$rdir/shards" \
    "$WORKER_POOL_BIN" --wal "file:$rdir/wal.jsonl" --duration 0 \
    --metrics-addr "127.0.0.1:$port" >"$rdir/first.out" 2>"$rdir/first.err" &
  pid=$!
  for _ in $(seq 200); do
    probe "http://127.0.0.1:$port/ready" && break
    sleep 0.05
  done
  probe "http://127.0.0.1:$port/ready" || { echo "the first run never became ready"; cat "$rdir/first.err"; exit 1; }
  probe "http://127.0.0.1:$port/livez" || { echo "the first run is not live"; exit 1; }
  sleep 3
  # A sealed state shard needs a finished execution, and the example's first one finishes
  # about 720 events in (~4 s at its rate, later on a loaded machine): wait for a terminal
  # event in the WAL rather than trust a fixed sleep. The drain applies what the WAL holds
  # before it exits, so the writer sees it.
  local terminal='"event_type":"playbook[._](completed|failed|cancelled)"'
  for _ in $(seq 600); do
    grep -qE "$terminal" "$rdir/wal.jsonl" && break
    sleep 0.1
  done
  grep -qE "$terminal" "$rdir/wal.jsonl" \
    || { echo "no execution of the first run finished within 60 s"; exit 1; }
  check_state_spine "$port" "$rdir/wal.jsonl"
  kill -TERM "$pid"
  wait "$pid" || { echo "the first run did not exit 0 after SIGTERM"; cat "$rdir/first.err"; exit 1; }
  cat "$rdir/first.out"
  grep -q '^worker pool: last checkpoint written' "$rdir/first.out" \
    || { echo "the first run took no last checkpoint"; exit 1; }
  grep -q 'state shards: WriterStats {.*sealed_written: [1-9]' "$rdir/first.err" \
    || { echo "the first run wrote no sealed state shard"; cat "$rdir/first.err"; exit 1; }
  # One of the shards it wrote, as an operator looks at it.
  local shard
  shard=$(find "$rdir/shards" -name sealed.feather | head -1)
  "$SB_SIM_BIN" shard show "$shard" | grep -q 'the chain reaches genesis' \
    || { echo "sb-sim shard show: $shard does not reach genesis"; exit 1; }
  lines=$(wc -l <"$rdir/wal.jsonl")
  NOETL_STATE_INDEX_CHECKPOINT_DIR="$rdir/ckpt" "$WORKER_POOL_BIN" --wal "file:$rdir/wal.jsonl" --duration 3 \
    --metrics-addr "127.0.0.1:$(free_port)" >"$rdir/second.out" 2>"$rdir/second.err" \
    || { echo "the second run failed"; cat "$rdir/second.err"; exit 1; }
  cat "$rdir/second.out"
  # Restored the first run's last checkpoint, which holds every line the file had: nothing
  # of the first run is replayed.
  grep -q "^worker pool: restored checkpoint-.*resumed after lines $lines;" "$rdir/second.out" \
    || { echo "the second run did not resume after line $lines, the first run's last"; exit 1; }
  grep -Eq '^drives: [1-9][0-9]* \([1-9][0-9]* served' "$rdir/second.out" \
    || { echo "the second run served no drive"; exit 1; }
  rm -rf "$rdir"
}
roll_on_a_file

through_writer() {
  if [ -z "${EHDB_WRITER:-}" ]; then
    echo "SKIP worker_pool through the EHDB writer: EHDB_WRITER is not set"
    [ -z "${SB_REQUIRE_EHDB:-}" ] || exit 1
    return 0
  fi
  local wdir
  wdir=$(mktemp -d)
  "$EHDB_WRITER" --dir "$wdir" >"$wdir/ready" 2>"$wdir/writer.log" &
  local wpid=$!
  for _ in $(seq 100); do grep -q '^ready' "$wdir/ready" 2>/dev/null && break; sleep 0.1; done
  local feed ingest
  feed=$(sed -n 's/^ready feed=\([^ ]*\) .*/\1/p' "$wdir/ready")
  ingest=$(sed -n 's/.* ingest=[^ ]*:\([0-9]*\) .*/\1/p' "$wdir/ready")
  echo "worker_pool through the EHDB writer (ehdb://$feed?ingest=$ingest):"
  local status=0
  run --wal "ehdb://$feed?ingest=$ingest" --duration 5 || status=$?
  kill "$wpid" 2>/dev/null || true
  wait "$wpid" 2>/dev/null || true
  rm -rf "$wdir"
  return "$status"
}
through_writer

server=${NATS_SERVER:-$(command -v nats-server || true)}
if [ -z "$server" ]; then
  echo "SKIP worker_pool through a broker: no nats-server"
  [ -z "${SB_REQUIRE_NATS:-}" ] || exit 1
  exit 0
fi
port=$(free_port)
dir=$(mktemp -d)
"$server" -js -a 127.0.0.1 -p "$port" -sd "$dir" >"$dir/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
  sleep 0.1
done
echo "worker_pool through a JetStream broker (nats://127.0.0.1:$port):"
run --wal "nats://127.0.0.1:$port" --duration 5
