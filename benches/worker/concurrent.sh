#!/usr/bin/env bash
# Eight full turns from one process: sequential vs all at once, and the host process's peak RSS
# per concurrent turn (examples/concurrent_turns.rs).
#
# usage: benches/worker/concurrent.sh [N]   (needs Docker and the recorded proof image)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-8}"
cargo build --release --locked -p turn --example concurrent_turns >/dev/null
. benches/worker/demo_env.sh
demo_binary_and_image
demo_work
/usr/bin/time -v target/x86_64-unknown-linux-gnu/release/examples/concurrent_turns \
  "$work/demo" "$n" "$image" "$image_id" 2> "$work/time.txt"
grep -E 'Maximum resident set size|Elapsed \(wall' "$work/time.txt"
