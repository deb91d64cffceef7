#!/usr/bin/env bash
# Eight full turns from one process: sequential vs all at once, and the host process's peak RSS
# per concurrent turn (examples/concurrent_turns.rs).
#
# usage: benches/worker/concurrent.sh [N]   (needs Docker and the recorded proof image)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-8}"
cargo build --release --locked -p turn --example concurrent_turns >/dev/null
cargo build --release --locked -p patch-candidate >/dev/null
bin="$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate"
state="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"
image="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$state/images.json")"
image_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image_id"])' "$state/images.json")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/demo"
bash fixtures/demo/make-demo.sh "$work/demo" "$bin" >/dev/null
/usr/bin/time -v target/x86_64-unknown-linux-gnu/release/examples/concurrent_turns \
  "$work/demo" "$n" "$image" "$image_id" 2> "$work/time.txt"
grep -E 'Maximum resident set size|Elapsed \(wall' "$work/time.txt"
