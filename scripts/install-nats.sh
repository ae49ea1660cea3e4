#!/usr/bin/env bash
# Makes sure a nats-server binary exists (Debian's package, 2.9), installing it when it can.
# Exit 0 and print its path when there is one; exit 1 when it cannot be installed here.
#
# Usage: scripts/install-nats.sh
set -euo pipefail

find_server() {
  if [ -n "${NATS_SERVER:-}" ] && [ -x "$NATS_SERVER" ]; then echo "$NATS_SERVER"; return 0; fi
  command -v nats-server 2>/dev/null && return 0
  for dir in /usr/sbin /usr/local/bin; do
    [ -x "$dir/nats-server" ] && { echo "$dir/nats-server"; return 0; }
  done
  return 1
}

if ! find_server >/dev/null; then
  if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || command -v sudo >/dev/null; }; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get install -y -q nats-server >/dev/null 2>&1 \
      || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q nats-server >/dev/null 2>&1; } \
      || true
  fi
fi
find_server
