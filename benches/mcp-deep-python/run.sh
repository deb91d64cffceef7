#!/usr/bin/env bash
# Peak memory and CPU of patch-candidate-mcp on hostile Python bundles (issue 27): one and four
# concurrent validate_app_bundle calls (four is the tool slot count) on a bundle of eight deep
# 1 MiB chains, and on a bundle of dense Python within CPython's limits.
#
# Usage: benches/mcp-deep-python/run.sh [BINARY]   (default: the release build of -p mcp)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=${1:-}
if [ -z "$bin" ]; then
  (cd "$top" && cargo build --release -p mcp --bin patch-candidate-mcp >&2)
  bin="$top/target/x86_64-unknown-linux-gnu/release/patch-candidate-mcp"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/make_bundles.py" "$top/fixtures/mcp-workspace" "$work"
for bundle in deep dense; do
  for calls in 1 4; do
    printf '%s %s ' "$bundle" "$calls"
    python3 "$here/drive.py" "$bin" "$work/$bundle" "$calls"
  done
done
