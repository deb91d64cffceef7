# Sourced by benches/environments/run.sh (python) and rust.sh (not run on its own): a temporary
# state directory and a download cache of its own (the .debs and root file systems shared with the
# real cache, the stack's packages starting empty), the gate runner built, and three steps.
#
#   env_build NAME FLAG LOCKFILE [--no-cache]   build the environment NAME; prints the seconds
#   env_sizes NAME TAG...                        the environment's size and each tag's
#   env_suite FIXTURE WARMUP RUNS SUITE BARE HARDENED
#       the fixture repository's pristine tree piped into SUITE (a shell line) in the
#       environment, `docker run` with the flags BARE vs HARDENED, timed by hyperfine
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PATCH_CANDIDATE_STATE_DIR PATCH_CANDIDATE_CACHE_DIR
PATCH_CANDIDATE_STATE_DIR="$(mktemp -d)"
cache_root="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}"
PATCH_CANDIDATE_CACHE_DIR="$(mktemp -d)"
mkdir -p "$cache_root/debs" "$cache_root/gate-rootfs"
ln -s "$cache_root/debs" "$PATCH_CANDIDATE_CACHE_DIR/debs"
ln -s "$cache_root/gate-rootfs" "$PATCH_CANDIDATE_CACHE_DIR/gate-rootfs"
trap 'rm -rf "$PATCH_CANDIDATE_STATE_DIR" "$PATCH_CANDIDATE_CACHE_DIR"' EXIT
cargo build --release --locked -p gate-runner --bins >&2
bins="$(dirname "$(find "${CARGO_TARGET_DIR:-target}" -path '*release/gate-runner' -type f | head -n 1)")"

env_build() {
  local name="$1" flag="$2" lock="$3" stack start end
  shift 3
  stack=python
  [ "$flag" = --cargo-lock ] && stack=rust
  start="$(date +%s.%N)"
  bash images/build.sh --bin-dir "$bins" "$@" --gate "$stack" "$flag" "$lock" --name "$name" >/dev/null
  end="$(date +%s.%N)"
  python3 -c "print(f'{$end - $start:.2f}')"
}

env_id_of() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gates"][sys.argv[2]]["image_id"])' \
    "$PATCH_CANDIDATE_STATE_DIR/gate-images.json" "$1"
}

env_sizes() {
  local tag
  echo "environment image: $(docker image inspect --format '{{.Size}}' "$(env_id_of "$1")") bytes"
  shift
  for tag in "$@"; do
    echo "$tag: $(docker image inspect --format '{{.Size}}' "$tag" 2>/dev/null || echo absent) bytes"
  done
}

env_suite() {
  local fixture="$1" warmup="$2" runs="$3" suite="$4" bare="$5" hardened="$6" env_id tree tar md
  env_id="$(env_id_of "$ENV_NAME")"
  tree="$(PATCH_CANDIDATE_CACHE_DIR="$cache_root" bash fixtures/gates/fetch.sh)/$fixture"
  tar="$(mktemp)"
  git -C "$tree" archive --format=tar pristine > "$tar"
  # The table goes to a file of its own: /dev/stdout redirected to a file would be truncated.
  md="$(mktemp)"
  hyperfine --warmup "$warmup" --runs "$runs" --export-markdown "$md" \
    -n bare "docker run --rm -i $bare --entrypoint /bin/sh $env_id -c '$suite' < $tar" \
    -n hardened "docker run --rm -i $hardened --entrypoint /bin/sh $env_id -c '$suite' < $tar"
  cat "$md"
  rm -f "$tar" "$md"
}
