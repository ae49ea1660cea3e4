#!/usr/bin/env bash
# The broker figures of docs/benchmarks.md: starts a throwaway nats-server (JetStream, free
# loopback port, temporary store), then
#   1. the broker_bench example: rebuild time of N retained events (replay-on-boot) and
#      tip-through-the-broker drive latency, every engine side by side;
#   2. sb-sim simulate --wal nats://... (unless SKIP_SIM=1), the production table through
#      the broker.
#
# Usage: scripts/nats-bench.sh [N=100000] [extra sb-sim simulate flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${1:-100000}"
shift || true

SERVER=$(bash scripts/install-nats.sh) || { echo "nats-server is not installed and cannot be installed here"; exit 1; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
STORE=$(mktemp -d)
"$SERVER" -js -a 127.0.0.1 -p "$PORT" -sd "$STORE" >"$STORE/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$STORE"' EXIT
for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $("$SERVER" --version)"
cargo run --release -q -p wal-source-nats --example broker_bench -- "nats://127.0.0.1:$PORT" "$EVENTS"
if [ "${SKIP_SIM:-0}" != 1 ]; then
  cargo run --release -q -p sb-sim -- simulate --wal "nats://127.0.0.1:$PORT" "$@"
fi
