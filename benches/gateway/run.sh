#!/usr/bin/env bash
# Gateway + tunnel overhead per model request vs the same request straight to the scripted
# upstream on loopback (p50 of the whole request and of the first SSE byte, interleaved runs).
# Usage: bash benches/gateway/run.sh [RUNS] [PROVIDER...]   (default 300; every provider:
# openai-responses, anthropic-messages, gemini)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-300}"
cargo build --release --locked -p gateway --features testkit --example overhead >&2
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
shift || true
providers=("$@")
[ ${#providers[@]} -gt 0 ] || providers=(openai-responses anthropic-messages gemini)
for provider in "${providers[@]}"; do
    "${CARGO_TARGET_DIR:-target}"/x86_64-unknown-linux-gnu/release/examples/overhead "$runs" "$provider"
done
