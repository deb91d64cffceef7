#!/usr/bin/env bash
# MCP server latency (BENCHMARKS.md, section "mcp"): startup to the first tools/list answer, and
# p50/p99 per tool over sequential calls through the real binary over stdio, against a copy of
# fixtures/mcp-workspace. Usage: benches/mcp/run.sh [CALLS=1000] [STARTS=200]
set -euo pipefail
cd "$(dirname "$0")/../.."
calls="${1:-1000}"
starts="${2:-200}"
cargo build --release --locked -p mcp --bin patch-candidate-mcp --example mcp_latency >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -R fixtures/mcp-workspace "$work/ws"
target/x86_64-unknown-linux-gnu/release/examples/mcp_latency \
  "$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate-mcp" "$work/ws" "$work/ws/review/store" \
  "$calls" "$starts"
