#!/usr/bin/env bash
# Builds the proof worker images locally (nothing is pulled) and records them as approved build
# evidence in ${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}/images.json.
#
#   images/build.sh                 cargo build --release --workspace --bins, then both images
#                                   from the binaries where cargo says it put them (so
#                                   CARGO_TARGET_DIR, relative or absolute, is honoured)
#   images/build.sh --bin-dir DIR   use already built static binaries from DIR (no cargo)
#   images/build.sh --no-cache      rebuild without the daemon's build cache (reproducibility check)
#   PATCH_CANDIDATE_CARGO_WITH_TESTS=1 images/build.sh ...
#                                   the cargo build of the test run (test-all.sh): workspace-wide,
#                                   with --tests, so `cargo test` after it compiles nothing again
#   images/build.sh --live          build the live image instead (images/live/): the runner, the
#                                   npm tree of images/live/codex/package-lock.json (codex-acp and
#                                   the native static codex; npm ci, SHA-512 integrity of every
#                                   package, no install scripts, cached outside the repository in
#                                   ${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}),
#                                   this host's Node (>= 20) with its libraries and a static busybox
#                                   (Debian's busybox-static); recorded in live-image.json
#   images/build.sh --live --agent gemini
#                                   the Gemini live image: the runner, Gemini CLI's bundle from the
#                                   pinned npm tarball (images/live/gemini-cli.pin, SHA-512
#                                   integrity checked, cached like the npm trees), this host's Node
#                                   (>= 20) with its libraries, read-only system settings, a static
#                                   busybox; recorded in live-image-gemini.json
#   images/build.sh --live --agent claude
#                                   the Claude live image: the runner, the npm tree of
#                                   images/live/claude/package-lock.json (npm ci, SHA-512 integrity
#                                   of every package, no install scripts) with the native claude
#                                   binary, Node as for Gemini, a static busybox; recorded in
#                                   live-image-claude.json. The native claude is proprietary: the
#                                   image is for this machine, never to be pushed or published
#   images/build.sh --live --agent A --env NAME
#                                   a live image on an environment: the gate image recorded as
#                                   NAME in gate-images.json (python, rust, or an environment
#                                   built with --requirements or --cargo-lock) plus the runner and the agent,
#                                   so the agent's commands find the repository's toolchain and
#                                   packages; the record names the environment
#   images/build.sh --live --agent A --env NAME --build-tmp-mib N
#                                   the same, its turns given a build /tmp of N MiB (1..4096,
#                                   mounted exec) instead of the stack's default (512 for rust,
#                                   none otherwise): e.g. an operator's environment approved by ID
#   images/build.sh --gate python|rust
#                                   build a gate image instead (images/gate/): the static
#                                   gate-runner on a root file system made of pinned Debian packages
#                                   (images/gate/<name>.pin, SHA-256 checked; rust adds the pinned
#                                   host toolchain, images/gate/rust.toolchain), imported with
#                                   `docker import`; cached outside the repository like the live
#                                   image's download; recorded in gate-images.json
#   images/build.sh --gate python --requirements FILE [--name NAME]
#                                   a python environment image: the python gate image plus the
#                                   packages of a hash-pinned requirements file (every line
#                                   `name==version --hash=sha256:...`, pip-compile
#                                   --generate-hashes output), wheels only, downloaded once and
#                                   cached by SHA-256, installed with `docker build --network
#                                   none`; recorded in gate-images.json under NAME (default
#                                   python-env) with the digest of its inputs, so a second build
#                                   of the same inputs is a lookup (images/gate/build-env.sh)
#   images/build.sh --gate rust --cargo-lock FILE [--name NAME]
#                                   a rust environment image: the rust gate image plus the crates
#                                   of a repository's Cargo.lock, each downloaded once from
#                                   crates.io, checked against the lock's SHA-256, cached by it and
#                                   vendored (as `cargo vendor` does) where cargo finds them
#                                   offline; recorded like a python environment (default name
#                                   rust-env)
#
# Prints the image IDs on stdout (`<tag> <id>` per line); progress goes to stderr.
#
# Image IDs: the context holds only the stripped binaries with a fixed mtime and mode, so
# identical binaries give identical layers. The image ID also covers the config's `created`
# timestamp: a rebuild that hits the daemon's build cache keeps the ID; after the cache is pruned
# (or on another daemon) the same binaries give a new ID with the same layer digests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Fixed tags; the overrides exist for the crate's own Docker tests, which build throwaway tags
# from the binaries under test.
IMAGE="${PROOF_IMAGE_TAG:-patch-candidate-proof:local}"
HOSTILE_IMAGE="${PROOF_HOSTILE_IMAGE_TAG:-patch-candidate-proof-hostile:local}"
LIVE=0
AGENT=codex
GATE=""
REQUIREMENTS=""
CARGO_LOCK=""
ENV_NAME=""
LIVE_ENV_NAME=""
LIVE_ENV_BASE=""
# The build /tmp a live image on an environment asks of its turns (MiB, 1..4096), when given: it
# replaces the stack's default (512 for rust, none otherwise), e.g. for an operator's own
# environment approved by ID.
BUILD_TMP_MIB=""
BUILD_TMP_GIVEN=0
BIN_DIR=""
CACHE=(--no-cache=false)

while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) BIN_DIR="$2"; shift 2 ;;
    --no-cache) CACHE=(--no-cache); shift ;;
    --live) LIVE=1; shift ;;
    --agent)
      case "${2:-}" in
        codex|claude|gemini) AGENT="$2" ;;
        *) echo "build.sh: --agent takes codex, claude or gemini" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --gate)
      case "${2:-}" in
        python|rust) GATE="$2" ;;
        *) echo "build.sh: --gate takes python or rust" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --env) LIVE_ENV_NAME="${2:-}"; shift 2 ;;
    --build-tmp-mib) BUILD_TMP_MIB="${2:-}"; BUILD_TMP_GIVEN=1; shift 2 ;;
    --requirements) REQUIREMENTS="${2:-}"; shift 2 ;;
    --cargo-lock) CARGO_LOCK="${2:-}"; shift 2 ;;
    --name) ENV_NAME="${2:-}"; shift 2 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -n "$REQUIREMENTS" ] && [ "$GATE" != python ]; then
  echo "build.sh: --requirements needs --gate python" >&2
  exit 2
fi
if [ -n "$CARGO_LOCK" ] && [ "$GATE" != rust ]; then
  echo "build.sh: --cargo-lock needs --gate rust" >&2
  exit 2
fi
# The environment's lockfile: a python requirements file or a rust Cargo.lock.
LOCKFILE="$REQUIREMENTS$CARGO_LOCK"
if [ -n "$ENV_NAME" ] && [ -z "$LOCKFILE" ]; then
  echo "build.sh: --name needs --requirements or --cargo-lock" >&2
  exit 2
fi
ENV_NAME="${ENV_NAME:-$GATE-env}"
# An environment's name is a gate image name of its own; python and rust stay the stacks' images.
if [ -n "$LOCKFILE" ] && { ! [[ "$ENV_NAME" =~ ^[a-z][a-z0-9_-]{0,63}$ ]] || [ "$ENV_NAME" = python ] || [ "$ENV_NAME" = rust ]; }; then
  echo "build.sh: --name must be [a-z][a-z0-9_-]{0,63}, other than python and rust" >&2
  exit 2
fi

if [ "$AGENT" != codex ] && [ "$LIVE" != 1 ]; then
  echo "build.sh: --agent needs --live" >&2
  exit 2
fi
if [ -n "$LIVE_ENV_NAME" ] && [ "$LIVE" != 1 ]; then
  echo "build.sh: --env needs --live" >&2
  exit 2
fi
if [ "$BUILD_TMP_GIVEN" = 1 ]; then
  if [ -z "$LIVE_ENV_NAME" ]; then
    echo "build.sh: --build-tmp-mib needs --live --env" >&2
    exit 2
  fi
  if ! [[ "$BUILD_TMP_MIB" =~ ^[1-9][0-9]{0,3}$ ]] || [ "$BUILD_TMP_MIB" -gt 4096 ]; then
    echo "build.sh: --build-tmp-mib takes a whole number of MiB from 1 to 4096" >&2
    exit 2
  fi
fi
# Each agent's live image has its own default tag (LIVE_IMAGE_TAG overrides, for tests); on an
# environment the environment's name is part of it.
case "$AGENT" in
  codex) LIVE_IMAGE="${LIVE_IMAGE_TAG:-patch-candidate-live${LIVE_ENV_NAME:+-$LIVE_ENV_NAME}:local}" ;;
  *) LIVE_IMAGE="${LIVE_IMAGE_TAG:-patch-candidate-live-$AGENT${LIVE_ENV_NAME:+-$LIVE_ENV_NAME}:local}" ;;
esac

CTX="$(mktemp -d)"
CLI_CONFIG="$(mktemp -d)"
MESSAGES="$(mktemp)"
trap 'rm -rf "$CTX" "$CLI_CONFIG" "$MESSAGES"' EXIT

if [ -n "$GATE" ]; then
  CARGO_SCOPE=(-p gate-runner)
  WANTED=(gate-runner)
else
  CARGO_SCOPE=(--workspace)
  WANTED=(turn-runner fake-agent hostile-entry)
fi
# PATCH_CANDIDATE_CARGO_WITH_TESTS=1 (test-all.sh sets it): build in the test run's unit graph
# (the whole workspace with `--tests`, so dev-dependency features are unified as `cargo test`
# unifies them) and the test run compiles nothing a second time. Without it the binaries are
# what a user's build makes.
CARGO_EXTRA=()
if [ "${PATCH_CANDIDATE_CARGO_WITH_TESTS:-}" = 1 ]; then
  CARGO_SCOPE=(--workspace)
  CARGO_EXTRA=(--tests)
fi

if [ -z "$BIN_DIR" ]; then
  echo "build.sh: cargo build --release ${CARGO_SCOPE[*]} --bins ${CARGO_EXTRA[*]}" >&2
  # Cargo reports where it put every binary (its artifact messages; rendered diagnostics still go
  # to stderr), so CARGO_TARGET_DIR and build.target-dir are honoured, relative or absolute,
  # with the target triple of .cargo/config.toml below them. Nothing assumes ./target.
  cargo build --release --locked "${CARGO_SCOPE[@]}" --bins "${CARGO_EXTRA[@]}" \
    --message-format=json-render-diagnostics > "$MESSAGES"
  BIN_DIR="$(python3 - "$MESSAGES" "${WANTED[@]}" <<'PY'
import json, os, sys

messages, wanted = sys.argv[1], set(sys.argv[2:])
found = {}
with open(messages, encoding="utf-8") as lines:
    for line in lines:
        msg = json.loads(line)
        target = msg.get("target") or {}
        # A bin's unit-test harness (built with --tests) has the bin's name too: not it.
        if (msg.get("reason") == "compiler-artifact" and msg.get("executable")
                and not (msg.get("profile") or {}).get("test")
                and "bin" in target.get("kind", []) and target.get("name") in wanted):
            found[target["name"]] = msg["executable"]
missing = sorted(wanted - found.keys())
dirs = {os.path.dirname(path) for path in found.values()}
if missing or len(dirs) != 1:
    print("build.sh: cargo reported no single directory for " + ", ".join(sorted(wanted)),
          file=sys.stderr)
    sys.exit(3)
print(dirs.pop())
PY
)"
  echo "build.sh: binaries from $BIN_DIR" >&2
fi

# Talk to the local daemon only, with no inherited client configuration.
docker_cli() {
  local cfg
  cfg="$CLI_CONFIG"
  env -i PATH="$PATH" docker --config "$cfg" --host unix:///var/run/docker.sock "$@"
}
REV="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
STATE_DIR="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"

# Writes stdin to $STATE_DIR/$1 atomically, mode 0600.
record_state() {
  mkdir -p "$STATE_DIR"
  chmod 0700 "$STATE_DIR"
  local tmp
  tmp="$(mktemp "$STATE_DIR/.$1.XXXXXX")"
  cat > "$tmp"
  chmod 0600 "$tmp"
  mv -f "$tmp" "$STATE_DIR/$1"
}

if [ "$LIVE" = 1 ]; then
  if [ -n "$LIVE_ENV_NAME" ]; then
    # The environment: a gate image recorded in gate-images.json (built here or approved), by
    # the ID recorded there, which the daemon must hold.
    # A rust environment (the rust gate image, or one built from a Cargo.lock) compiles in the
    # turn: its record asks for a build /tmp of LIVE_ENV_BUILD_TMP_MIB, mounted exec.
    read -r LIVE_ENV_BASE LIVE_ENV_BUILD_TMP_MIB < <(python3 - "$STATE_DIR/gate-images.json" "$LIVE_ENV_NAME" <<'PY'
import json, re, sys

try:
    with open(sys.argv[1], encoding="utf-8") as f:
        record = json.load(f)["gates"][sys.argv[2]]
    image_id = record["image_id"]
    environment = record.get("environment") or {}
    rust = record.get("toolchain") is not None or environment.get("stack") == "rust"
except (OSError, ValueError, KeyError, TypeError, AttributeError):
    sys.exit(0)
if isinstance(image_id, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", image_id):
    print(image_id, 512 if rust else "")
PY
) || true
    if [ -z "$LIVE_ENV_BASE" ] || [ "$(docker_cli image inspect --format '{{.Id}}' "$LIVE_ENV_BASE" 2>/dev/null)" != "$LIVE_ENV_BASE" ]; then
      echo "build.sh: no environment $LIVE_ENV_NAME in gate-images.json whose image this daemon holds (build it with --gate python|rust [--requirements FILE|--cargo-lock FILE --name NAME])" >&2
      exit 3
    fi
    LIVE_ENV_BUILD_TMP_MIB="${BUILD_TMP_MIB:-$LIVE_ENV_BUILD_TMP_MIB}"
  fi
  case "$AGENT" in
    codex) source images/live/build-codex.sh ;;
    gemini) source images/live/build-gemini.sh ;;
    claude) source images/live/build-claude.sh ;;
  esac
  exit 0
fi

if [ -n "$LOCKFILE" ]; then
  source images/gate/build-env.sh
  exit 0
fi
if [ -n "$GATE" ]; then
  source images/gate/build-gate.sh
  exit 0
fi

for bin in turn-runner fake-agent hostile-entry; do
  src="$BIN_DIR/$bin"
  if [ ! -x "$src" ]; then
    echo "build.sh: missing binary $src" >&2
    exit 3
  fi
  # A static binary has no program interpreter (readelf and strip both come with binutils).
  if readelf -l "$src" | grep -q "program interpreter"; then
    echo "build.sh: $src is not statically linked" >&2
    exit 3
  fi
  strip --strip-all -o "$CTX/$bin" "$src"
  chmod 0555 "$CTX/$bin"
  touch -d @0 "$CTX/$bin"
done
mkdir -p "$CTX/layout/workspace" "$CTX/layout/home/sandbox" "$CTX/layout/tmp"
chmod 0755 "$CTX/layout" "$CTX/layout/home"
chmod 1777 "$CTX/layout/workspace" "$CTX/layout/home/sandbox" "$CTX/layout/tmp"
find "$CTX/layout" -exec touch -h -d @0 {} +
cp images/turn-runner/Dockerfile "$CTX/Dockerfile"
cp images/turn-runner/Dockerfile.hostile "$CTX/Dockerfile.hostile"
printf 'Dockerfile*\n' > "$CTX/.dockerignore"

build() {
  local tag="$1" file="$2"
  echo "build.sh: docker build $tag" >&2
  DOCKER_BUILDKIT=0 docker_cli build --quiet "${CACHE[@]}" --tag "$tag" --file "$CTX/$file" "$CTX" >&2
  docker_cli image inspect --format '{{.Id}}' "$tag"
}

IMAGE_ID="$(build "$IMAGE" Dockerfile)"
HOSTILE_ID="$(build "$HOSTILE_IMAGE" Dockerfile.hostile)"
for id in "$IMAGE_ID" "$HOSTILE_ID"; do
  if ! [[ "$id" =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "build.sh: unexpected image id" >&2
    exit 3
  fi
done

printf '{"image": "%s", "image_id": "%s", "hostile_image": "%s", "hostile_image_id": "%s", "source_revision": "%s"}\n' \
  "$IMAGE" "$IMAGE_ID" "$HOSTILE_IMAGE" "$HOSTILE_ID" "$REV" | record_state images.json

echo "$IMAGE $IMAGE_ID"
echo "$HOSTILE_IMAGE $HOSTILE_ID"
