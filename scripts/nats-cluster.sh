#!/usr/bin/env bash
# A 3-node JetStream cluster on loopback (Debian's nats-server), and the fault drill.
#
# Usage:
#   scripts/nats-cluster.sh start [DIR]   three nodes n0..n2, clients on ports 4222..4224,
#                                         routes on 6222..6224, stores and logs under DIR
#                                         (default /tmp/sb-nats-cluster); prints the URL
#   scripts/nats-cluster.sh stop [DIR]    SIGTERM the three nodes (stores are kept)
#   [CLUSTER_SYNC_ALWAYS=1] scripts/nats-cluster.sh drill [RATE SETTLE_S DOWN_S PAUSE_S ROUNDS]
#                                         the fault table of docs/deployment.md: its own
#                                         cluster on free ports (examples/cluster_faults.rs)
#
# The nodes run Debian's nats-server 2.9 with its defaults; 2.9 has no `sync_interval`
# (2.10 and later: set `sync_interval: always` in the jetstream block; see
# docs/deployment.md). A stream with 3 replicas: `JetStreamPublisher::ensure_stream_replicated`.
set -euo pipefail
cd "$(dirname "$0")/.."
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
command=${1:-}
dir=${2:-/tmp/sb-nats-cluster}

case "$command" in
  start)
    mkdir -p "$dir"
    for i in 0 1 2; do
      routes=""
      for j in 0 1 2; do
        [ "$j" = "$i" ] || routes+="\"nats-route://127.0.0.1:$((6222 + j))\", "
      done
      cat >"$dir/n$i.conf" <<CONF
server_name: n$i
listen: "127.0.0.1:$((4222 + i))"
jetstream { store_dir: "$dir/n$i" }
cluster {
  name: sb
  listen: "127.0.0.1:$((6222 + i))"
  routes: [${routes%, }]
}
CONF
      "$NATS_SERVER" -c "$dir/n$i.conf" >"$dir/n$i.log" 2>&1 &
      echo $! >"$dir/n$i.pid"
    done
    echo "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224"
    ;;
  stop)
    for i in 0 1 2; do
      [ -f "$dir/n$i.pid" ] && kill "$(cat "$dir/n$i.pid")" 2>/dev/null || true
      rm -f "$dir/n$i.pid"
    done
    ;;
  drill)
    shift
    NATS_SERVER=$NATS_SERVER cargo run --locked --release -q -p wal-source-nats \
      --example cluster_faults -- "$@"
    ;;
  *)
    sed -n '2,15p' "$0"
    exit 2
    ;;
esac
