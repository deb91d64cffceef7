#!/usr/bin/env bash
# Environment image builds (images/build.sh --gate python --requirements FILE): cold (an empty
# wheel cache and no daemon build cache, the python gate image's .debs and root file system
# cached), and a cache hit (the same inputs again: a lookup); the sizes of the environment and of
# the live images on it; and the repository's test command (isodate 0.6.1's own suite) in a
# container of the environment with the turn's hardened flags vs a bare `docker run` of the
# same image on the same tree.
#
#   benches/environments/run.sh [REQUIREMENTS]   (default fixtures/gates/isodate-requirements.txt)
#
# Uses a temporary state directory and wheel cache; needs Docker, hyperfine and PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
req="${1:-fixtures/gates/isodate-requirements.txt}"
export PATCH_CANDIDATE_STATE_DIR
PATCH_CANDIDATE_STATE_DIR="$(mktemp -d)"
cache_root="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}"
# A cache of its own whose wheels/ starts empty; the .debs and root file systems are shared.
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
  bash images/build.sh --bin-dir "$bins" "$@" --gate python --requirements "$req" --name bench-env >/dev/null
  end="$(date +%s.%N)"
  python3 -c "print(f'{$end - $start:.2f}')"
}
echo "cold (empty wheel cache, --no-cache): $(build --no-cache) s"
echo "cache hit (same inputs): $(build) s"
env_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gates"]["bench-env"]["image_id"])' "$PATCH_CANDIDATE_STATE_DIR/gate-images.json")"
echo "environment image: $(docker image inspect --format '{{.Size}}' "$env_id") bytes"
for tag in patch-candidate-gate-python:local patch-candidate-live-python:live-commands \
  patch-candidate-live-claude-python:live-commands patch-candidate-live-gemini-python:live-commands; do
  size="$(docker image inspect --format '{{.Size}}' "$tag" 2>/dev/null || echo absent)"
  echo "$tag: $size bytes"
done

# The test command: isodate's suite in the environment, hardened (the turn's flags) vs bare.
tree="$(PATCH_CANDIDATE_CACHE_DIR="$cache_root" bash fixtures/gates/fetch.sh)/isodate"
tar_of_tree="$(mktemp)"
git -C "$tree" archive --format=tar pristine > "$tar_of_tree"
run_suite='mkdir -p /tmp/w && tar -x -C /tmp/w && cd /tmp/w && python3 -m pytest -q -p no:cacheprovider >/dev/null'
# The table goes to a file of its own: /dev/stdout redirected to a file would be truncated.
md="$(mktemp)"
hyperfine --warmup 2 --runs 15 --export-markdown "$md" \
  -n bare "docker run --rm -i --entrypoint /bin/sh $env_id -c '$run_suite' < $tar_of_tree" \
  -n hardened "docker run --rm -i --network none --read-only --tmpfs /tmp:size=64m --tmpfs /workspace:size=64m --cap-drop ALL --security-opt no-new-privileges --pids-limit 64 --memory 768m --cpus 1 --user 10001:10001 --entrypoint /bin/sh $env_id -c '$run_suite' < $tar_of_tree"
cat "$md"
rm -f "$tar_of_tree" "$md"
