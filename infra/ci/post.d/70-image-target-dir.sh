#!/usr/bin/env bash
# images/build.sh honours CARGO_TARGET_DIR: it builds the proof images from the binaries where
# cargo put them, never from an assumed ./target. Cheap: CARGO_TARGET_DIR is another name (a
# symlink in a temp dir) for the target directory cargo test just filled, so the cargo build
# inside build.sh is a no-op. Run once with that name absolute and once relative (cargo resolves
# it against build.sh's working directory, the checkout). Each run must report that name as the
# binaries' directory, build both images under throwaway tags, and the proof image must hold
# exactly the stripped turn-runner from that directory. Only the tags, container and temp dir
# made here are removed.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD

REAL_TARGET=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
WORK=$(mktemp -d)
TAG_SUFFIX="ctd-check-$$"
PROOF_TAG="patch-candidate-proof:$TAG_SUFFIX"
HOSTILE_TAG="patch-candidate-proof-hostile:$TAG_SUFFIX"
CONTAINER="patch-candidate-ctd-check-$$"
cleanup() {
  docker rm --force "$CONTAINER" >/dev/null 2>&1 || true
  docker image rm "$PROOF_TAG" "$HOSTILE_TAG" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

ln -s "$REAL_TARGET" "$WORK/shared-target"
ABSOLUTE="$WORK/shared-target"
RELATIVE=$(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$ABSOLUTE" "$ROOT")

for target_dir in "$ABSOLUTE" "$RELATIVE"; do
  echo "image-target-dir: images/build.sh with CARGO_TARGET_DIR=$target_dir" >&2
  CARGO_TARGET_DIR="$target_dir" PATCH_CANDIDATE_STATE_DIR="$WORK/state" \
    PROOF_IMAGE_TAG="$PROOF_TAG" PROOF_HOSTILE_IMAGE_TAG="$HOSTILE_TAG" \
    bash images/build.sh >"$WORK/ids" 2>"$WORK/stderr" || {
    cat "$WORK/stderr" >&2
    echo "image-target-dir: FAILED: build.sh with CARGO_TARGET_DIR=$target_dir" >&2
    exit 1
  }
  # cargo names the binaries under the directory as it was given (absolute, or joined to the
  # checkout when relative), with the target triple of .cargo/config.toml below it.
  case "$target_dir" in
    /*) expected="$target_dir" ;;
    *) expected="$ROOT/$target_dir" ;;
  esac
  expected="$expected/x86_64-unknown-linux-gnu/release"
  # Compared lexically (`..` folded, the symlink kept): resolving it would make ./target match.
  if ! python3 - "$WORK/stderr" "$expected" <<'PY'
import os, sys

prefix = "build.sh: binaries from "
with open(sys.argv[1], encoding="utf-8") as err:
    used = [line[len(prefix):].rstrip("\n") for line in err if line.startswith(prefix)]
sys.exit(0 if [os.path.normpath(p) for p in used] == [os.path.normpath(sys.argv[2])] else 1)
PY
  then
    cat "$WORK/stderr" >&2
    echo "image-target-dir: FAILED: build.sh did not take the binaries from $expected" >&2
    exit 1
  fi
  for tag in "$PROOF_TAG" "$HOSTILE_TAG"; do
    grep -qE "^$tag sha256:[0-9a-f]{64}\$" "$WORK/ids" || {
      echo "image-target-dir: FAILED: no image id printed for $tag" >&2
      exit 1
    }
  done
  docker create --name "$CONTAINER" "$PROOF_TAG" >/dev/null
  docker cp "$CONTAINER:/turn-runner" - | tar -xOf - turn-runner >"$WORK/in-image"
  docker rm "$CONTAINER" >/dev/null
  strip --strip-all -o "$WORK/expected" "$expected/turn-runner"
  cmp -s "$WORK/in-image" "$WORK/expected" || {
    echo "image-target-dir: FAILED: the image's turn-runner is not the one under $expected" >&2
    exit 1
  }
done
echo "image-target-dir: build.sh honours CARGO_TARGET_DIR (absolute and relative)" >&2
