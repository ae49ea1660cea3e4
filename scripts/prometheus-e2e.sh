#!/usr/bin/env bash
# End to end with a real Prometheus: the sb-metrics example serves /metrics on loopback,
# Prometheus scrapes it every second, and a PromQL query over its HTTP API must return
# rate(noetl_worker_state_builder_builds_total[1m]) for every build outcome.
#
# Usage: scripts/prometheus-e2e.sh            (installs Debian's prometheus if missing)
# Skips with a message (exit 0) only when prometheus cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v prometheus >/dev/null; then
  if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; }; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get install -y -q prometheus >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q prometheus >/dev/null 2>&1; } \
      || true
  fi
fi
if ! command -v prometheus >/dev/null; then
  echo "SKIP prometheus-e2e: the prometheus package could not be installed here"
  exit 0
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
APP_PORT=$(free_port)
PROM_PORT=$(free_port)
WORK=$(mktemp -d)
cleanup() { kill "${APP_PID:-}" "${PROM_PID:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# The example as `cargo test --workspace` builds it (after that command this compiles
# nothing: the same feature resolution, the same artifacts).
APP=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "serve_metrics" and msg.get("executable"):
        print(msg["executable"])
')
[ -x "$APP" ] || { echo "prometheus-e2e: could not build the serve_metrics example"; exit 1; }
"$APP" "127.0.0.1:$APP_PORT" 60 2>"$WORK/app.log" &
APP_PID=$!

cat >"$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: state-builder
    static_configs:
      - targets: ["127.0.0.1:$APP_PORT"]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$WORK/prom.log" 2>&1 &
PROM_PID=$!

QUERY='sum by (outcome) (rate(noetl_worker_state_builder_builds_total[1m]))'
for attempt in $(seq 1 20); do
  sleep 1
  body=$(curl -sf -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$QUERY" || true)
  result=$(python3 - "$body" <<'PY'
import json, sys
try:
    data = json.loads(sys.argv[1])
except Exception:
    sys.exit(1)
rows = {r["metric"].get("outcome"): float(r["value"][1]) for r in data.get("data", {}).get("result", [])}
need = {"cache_hit", "incremental", "cold_rebuild", "incomplete"}
if need <= set(rows) and rows["incremental"] > 0:
    print(" ".join(f"{k}={rows[k]:.2f}/s" for k in sorted(rows)))
else:
    sys.exit(1)
PY
  ) && { echo "prometheus-e2e OK after ${attempt}s: $result"; exit 0; }
done
echo "prometheus-e2e FAILED: no rate per outcome after 45s"
echo "--- last query answer: $body"
tail -n 5 "$WORK/prom.log" "$WORK/app.log"
curl -s "http://127.0.0.1:$APP_PORT/metrics" | grep -E "builds_total|wal_events" || true
exit 1
