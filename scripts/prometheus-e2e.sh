#!/usr/bin/env bash
# End to end with a real Prometheus and the Grafana dashboard: the simulator (sb-sim, all
# three engines, label `engine`) serves /metrics on loopback, Prometheus scrapes it every
# second, and every panel query of docs/dashboards/state-builder.json must return data
# over Prometheus' HTTP API while the simulation runs (scripts/dashboard-queries.py).
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

# The simulation on its embedded workload, shortened: a restart backlog (incomplete builds,
# waits, rehydrate) and 10 s of live load per engine, about 45 s in a debug build.
# SB_SIM_BIN picks the binary; without it, the one `cargo test --workspace` builds
# (scripts/test-build-binary.sh).
SIM=${SB_SIM_BIN:-$(bash scripts/test-build-binary.sh sb-sim)}
"$SIM" simulate --duration 10 --lose-events 2 --stall-secs 1 --checkpoint-secs 2 --metrics-addr "127.0.0.1:$APP_PORT" >"$WORK/sim.out" 2>"$WORK/sim.log" &
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

if python3 scripts/dashboard-queries.py "http://127.0.0.1:$PROM_PORT" \
    docs/dashboards/state-builder.json "$APP_PID" 240; then
  echo "prometheus-e2e OK"
  exit 0
fi
echo "--- the simulation's last lines and Prometheus' log:"
tail -n 5 "$WORK/sim.log" "$WORK/sim.out" "$WORK/prom.log"
exit 1
