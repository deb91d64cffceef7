#!/usr/bin/env bash
# Added latency of the gateway's content-part scan (issue 38): a 1 MiB request of 500 content
# parts per provider, direct to the scripted upstream vs through the tunnel and the gateway, run
# with this tree's gateway and with the baseline's (default `main`) side by side, in alternating
# rounds, plus the provider's body check alone. The baseline is exported with `git archive` into
# a temporary folder, this tree's `examples/overhead.rs` copied into it (it uses only API the
# baseline has), and built with the same target directory.
# Usage: bash benches/gateway/parts.sh [RUNS] [ROUNDS] [BASE]   (default 100 runs, 2 rounds, main)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-100}"
rounds="${2:-2}"
base="${3:-main}"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
export CARGO_TARGET_DIR="$target_dir"
bin="$target_dir/x86_64-unknown-linux-gnu/release/examples/overhead"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$base" | tar -x -C "$tmp"
cp worker/gateway/examples/overhead.rs "$tmp/worker/gateway/examples/overhead.rs"
(cd "$tmp" && cargo build --release --locked -p gateway --features testkit --example overhead >&2)
cp "$bin" "$tmp/overhead-base"
cargo build --release --locked -p gateway --features testkit --example overhead >&2
cp "$bin" "$tmp/overhead-new"
echo "baseline: $base ($(git rev-parse --short "$base")); this tree: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- worker/gateway || echo ' + changes')"
for round in $(seq 1 "$rounds"); do
    for provider in openai-responses anthropic-messages gemini; do
        for which in base new; do
            echo "== round $round, $which, load average $(cut -d' ' -f1-3 /proc/loadavg)"
            "$tmp/overhead-$which" "$runs" "$provider" parts
        done
    done
done
