#!/usr/bin/env bash
# Makes sure an s3s-fs binary exists (the S3-protocol server the bucket-checkpoint tests
# start on loopback), building it from crates.io into target/s3s-fs when it can.
# Exit 0 and print its path when there is one; exit 1 when it cannot be built here.
#
# 0.14.0 is the newest s3s-fs whose rust-version (1.92) stable here meets; it honours
# If-Match and If-None-Match on PUT, which the checkpoints' pointer relies on.
#
# Usage: scripts/install-s3s.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.14.0
ROOT=target/s3s-fs
BIN="$ROOT/bin/s3s-fs"

if [ -n "${S3S_FS:-}" ] && [ -x "$S3S_FS" ]; then echo "$S3S_FS"; exit 0; fi
if ! { [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "$VERSION"; }; then
  # Its own target dir, deleted after: nothing else reads it. A debug build: the tests
  # send it a few small objects, and it builds in about 70 s on 2 cores against 115 s
  # optimized.
  CARGO_TARGET_DIR=target/s3s-fs-build cargo install s3s-fs --version "$VERSION" \
    --features binary --locked --debug --root "$ROOT" >&2 || exit 1
  rm -rf target/s3s-fs-build
fi
echo "$(pwd)/$BIN"
