#!/usr/bin/env bash
# Rust environment image builds (images/build.sh --gate rust --cargo-lock FILE): cold (an empty
# crate cache and no daemon build cache; the rust gate image's .debs and root file system
# cached), and a cache hit (the same inputs again: a lookup); the environment's size; and the
# crate's own `cargo test --offline --frozen` (either 1.13.0, which builds serde_json from the
# vendored crates) in a container of the environment with the turn's hardened flags (its build
# /tmp mounted exec) vs a bare `docker run` of the same image on the same tree with the same CPU
# and memory budget (a compile scales with CPUs: the budget is the turn's policy, not the
# sandbox's cost).
#
#   benches/environments/rust.sh [CARGO_LOCK]   (default fixtures/gates/either-Cargo.lock)
#
# Uses a temporary state directory and crate cache; needs Docker, hyperfine and crates.io.
set -euo pipefail
cd "$(dirname "$0")/../.."
lock="${1:-fixtures/gates/either-Cargo.lock}"
export PATCH_CANDIDATE_STATE_DIR
PATCH_CANDIDATE_STATE_DIR="$(mktemp -d)"
cache_root="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}"
# A cache of its own whose crates/ starts empty; the .debs and root file systems are shared.
export PATCH_CANDIDATE_CACHE_DIR
PATCH_CANDIDATE_CACHE_DIR="$(mktemp -d)"
mkdir -p "$cache_root/debs" "$cache_root/gate-rootfs"
ln -s "$cache_root/debs" "$PATCH_CANDIDATE_CACHE_DIR/debs"
ln -s "$cache_root/gate-rootfs" "$PATCH_CANDIDATE_CACHE_DIR/gate-rootfs"
trap 'rm -rf "$PATCH_CANDIDATE_STATE_DIR" "$PATCH_CANDIDATE_CACHE_DIR"' EXIT
cargo build --release --locked -p gate-runner --bins >&2
bins="$(dirname "$(find target -path '*release/gate-runner' -type f | head -n 1)")"
build() {
  local start end
  start="$(date +%s.%N)"
  bash images/build.sh --bin-dir "$bins" "$@" --gate rust --cargo-lock "$lock" --name bench-rust-env >/dev/null
  end="$(date +%s.%N)"
  python3 -c "print(f'{$end - $start:.2f}')"
}
echo "cold (empty crate cache, --no-cache): $(build --no-cache) s"
echo "cache hit (same inputs): $(build) s"
env_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gates"]["bench-rust-env"]["image_id"])' "$PATCH_CANDIDATE_STATE_DIR/gate-images.json")"
echo "environment image: $(docker image inspect --format '{{.Size}}' "$env_id") bytes"
for tag in patch-candidate-gate-rust:local patch-candidate-live-gemini-either:live-commands; do
  size="$(docker image inspect --format '{{.Size}}' "$tag" 2>/dev/null || echo absent)"
  echo "$tag: $size bytes"
done

# The test command: either's suite in the environment, hardened (the turn's flags, its build
# /tmp) vs bare; each run compiles the crate and its dev-dependencies from scratch.
tree="$(PATCH_CANDIDATE_CACHE_DIR="$cache_root" bash fixtures/gates/fetch.sh)/either"
tar_of_tree="$(mktemp)"
git -C "$tree" archive --format=tar pristine > "$tar_of_tree"
run_suite='mkdir -p /tmp/w && tar -x -C /tmp/w && cd /tmp/w && CARGO_TARGET_DIR=/tmp/cargo-target CARGO_INCREMENTAL=0 cargo test --offline --frozen --quiet >/dev/null 2>&1'
md="$(mktemp)"
hyperfine --warmup 1 --runs 5 --export-markdown "$md" \
  -n bare "docker run --rm -i --cpus 1 --memory 768m --entrypoint /bin/sh $env_id -c '$run_suite' < $tar_of_tree" \
  -n hardened "docker run --rm -i --network none --read-only --tmpfs /tmp:rw,exec,size=512m --tmpfs /workspace:size=64m --tmpfs /home/sandbox:size=16m -e HOME=/home/sandbox --cap-drop ALL --security-opt no-new-privileges --pids-limit 64 --memory 768m --cpus 1 --user 10001:10001 --entrypoint /bin/sh $env_id -c '$run_suite' < $tar_of_tree"
cat "$md"
rm -f "$tar_of_tree" "$md"
