#!/usr/bin/env bash
# Gate image build times and sizes: cold (empty download and root caches), with the .debs cached
# but a new root file system, and fully cached, for both stacks.
#
#   benches/gate-images/run.sh [python|rust ...]
#
# The cold runs use a fresh temporary cache directory (they download every pinned .deb again) and
# a temporary state directory; the images they build replace the local gate tags.
set -euo pipefail
cd "$(dirname "$0")/../.."
stacks=("$@")
[ "${#stacks[@]}" -gt 0 ] || stacks=(python rust)
export PATCH_CANDIDATE_CACHE_DIR
PATCH_CANDIDATE_CACHE_DIR="$(mktemp -d)"
export PATCH_CANDIDATE_STATE_DIR
PATCH_CANDIDATE_STATE_DIR="$(mktemp -d)"
trap 'rm -rf "$PATCH_CANDIDATE_CACHE_DIR" "$PATCH_CANDIDATE_STATE_DIR"' EXIT
# The runner binary first, so no build below pays for cargo.
cargo build --release --locked -p gate-runner --bins >&2
timed() {
  local start end
  start="$(date +%s.%N)"
  bash images/build.sh --gate "$1" >/dev/null
  end="$(date +%s.%N)"
  python3 -c "print(f'{$end - $start:.1f}')"
}
for stack in "${stacks[@]}"; do
  # Untag the imported base (the gate image keeps its layers) so the cold run imports again.
  docker image ls --format '{{.Repository}}:{{.Tag}}' "patch-candidate-gate-base-$stack" \
    | xargs -r docker image rm >/dev/null
  cold="$(timed "$stack")"
  rm -rf "$PATCH_CANDIDATE_CACHE_DIR/gate-rootfs"
  new_root="$(timed "$stack")"
  cached="$(timed "$stack")"
  size="$(docker image inspect --format '{{.Size}}' "patch-candidate-gate-$stack:local")"
  echo "$stack: size ${size} bytes; cold ${cold} s; debs cached ${new_root} s; cached ${cached} s"
done
