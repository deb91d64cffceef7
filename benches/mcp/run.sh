#!/usr/bin/env bash
# MCP server latency (BENCHMARKS.md, section "mcp"): startup to the first tools/list answer, and
# p50/p99 per tool over sequential calls through the real binary over stdio, against a copy of
# fixtures/mcp-workspace grown into a real bundle: a 2,000-file app/node_modules (100 packages of
# package.json, index.js, lib/*.js, types, a README; some broken on purpose) and a Git HEAD.
# Usage: benches/mcp/run.sh [CALLS=1000] [STARTS=200]
set -euo pipefail
cd "$(dirname "$0")/../.."
calls="${1:-1000}"
starts="${2:-200}"
cargo build --release --locked -p mcp --bin patch-candidate-mcp --example mcp_latency >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -R fixtures/mcp-workspace "$work/ws"
nm="$work/ws/app/node_modules"
for p in $(seq -w 0 99); do
  d="$nm/pkg-$p"
  mkdir -p "$d/lib" "$d/types"
  printf '{"name": "pkg-%s", "version": "1.0.%s", "main": "index.js"}\n' "$p" "$p" > "$d/package.json"
  printf 'module.exports = require("./lib/m0.js");\n' > "$d/index.js"
  printf '# pkg-%s\n' "$p" > "$d/README.md"
  printf 'export declare const v: number;\n' > "$d/types/index.d.ts"
  for m in $(seq 0 14); do printf 'exports.v%s = %s;\n' "$m" "$m" > "$d/lib/m$m.js"; done
  printf 'def broken(:\n' > "$d/lib/setup.py"
done
find "$nm" -type f | wc -l | xargs printf 'node_modules files: %s\n' >&2
mkdir -p "$work/ws/.git/refs/heads"
printf 'ref: refs/heads/main\n' > "$work/ws/.git/HEAD"
printf '0123456789abcdef0123456789abcdef01234567\n' > "$work/ws/.git/refs/heads/main"
target/x86_64-unknown-linux-gnu/release/examples/mcp_latency \
  "$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate-mcp" "$work/ws" "$work/ws/review/store" \
  "$calls" "$starts"
