#!/usr/bin/env bash
# Host peak RSS of the gateway's body check for the hostile body-shape corpus (issue 22): four
# bodies of about 8 MiB each (the default body cap) checked at once, one process per shape.
# Usage: bash benches/gateway-bodies/run.sh [PARALLEL]   (default 4)
set -euo pipefail
cd "$(dirname "$0")/../.."
parallel="${1:-4}"
cargo build --release --locked -p gateway --example body_shapes >&2
target="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/examples/body_shapes"
printf '%-16s %-10s %s\n' shape peak_rss result
for shape in tiny-array deep huge-string many-keys duplicate-model tiny-array-max many-keys-max deep-max; do
    out=$(/usr/bin/time -v "$target" "$shape" "$parallel" 2>"/tmp/body_shapes.$$.time")
    rss=$(awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}' "/tmp/body_shapes.$$.time")
    printf '%-16s %-10s %s\n' "$shape" "$((rss / 1024)) MiB" "$out"
done
rm -f "/tmp/body_shapes.$$.time"
