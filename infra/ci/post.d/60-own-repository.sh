#!/usr/bin/env bash
# The README's "On your own repository" commands, run exactly as written (taken from the README
# between the own-repository markers, `<digest>` replaced by the digest `run` stored) on a fresh
# repository: the candidate must verify against the digest, the exported patch must apply with
# `git apply` in a fresh clone and reproduce the candidate's bytes, and the repository must be
# left untouched. Fails when the README block no longer has its four commands in order.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
cargo build --release --locked --quiet --workspace --bins ${PATCH_CANDIDATE_CARGO_WITH_TESTS:+--tests}
# CARGO_TARGET_DIR, relative or absolute, is honoured as cargo honours it.
TARGET="${CARGO_TARGET_DIR:-target}"
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
export PATH="$TARGET/x86_64-unknown-linux-gnu/release:$PATH"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null

# The commands, from the README itself.
mapfile -t COMMANDS < <(python3 - "$ROOT/README.md" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
block = re.search(r"<!-- own-repository:begin[^>]*-->\s*```sh\n(.*?)```\s*<!-- own-repository:end -->", text, re.S)
if not block:
    sys.exit("README: no own-repository block")
for line in block.group(1).splitlines():
    if line.strip():
        print(line)
PY
)
[ "${#COMMANDS[@]}" = 4 ] || { echo "README block has ${#COMMANDS[@]} commands, expected 4" >&2; exit 1; }
for i in 0 1 2 3; do
  want=(approve run verify export)
  case "${COMMANDS[$i]}" in
    "patch-candidate ${want[$i]} "*) ;;
    *) echo "README command $((i + 1)) is not 'patch-candidate ${want[$i]} …'" >&2; exit 1 ;;
  esac
done

T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/work/repo/src"
cd "$T/work/repo"
printf 'def greet(name):\n    return "hello " + name\n' > src/greet.py
printf '# demo\n' > README.md
git init -q -b main
git add -A
git -c user.name=ci -c user.email=ci@example.invalid commit -q -m baseline
COMMIT=$(git rev-parse HEAD)
BEFORE=$(git status --porcelain --ignored; git rev-parse HEAD; sha256sum .git/index)

eval "${COMMANDS[0]}"
eval "${COMMANDS[1]}"
shopt -s nullglob
stored=(../candidates/*.json)
[ "${#stored[@]}" = 1 ] || { echo "expected one stored candidate, found ${#stored[@]}" >&2; exit 1; }
HEX=$(basename "${stored[0]}" .json)
eval "${COMMANDS[2]//<digest>/$HEX}"
eval "${COMMANDS[3]//<digest>/$HEX}"

AFTER=$(git status --porcelain --ignored; git rev-parse HEAD; sha256sum .git/index)
[ "$BEFORE" = "$AFTER" ] || { echo "the repository changed" >&2; exit 1; }
[ -s ../change.patch ]
git clone -q . "$T/clone"
git -C "$T/clone" checkout -q "$COMMIT"
git -C "$T/clone" apply "$T/work/change.patch"
# Every changed file now holds exactly the candidate's bytes.
python3 - "${stored[0]}" "$T/clone" <<'PY'
import json, os, sys
candidate = json.load(open(sys.argv[1], encoding="utf-8"))
for f in candidate["changed_files"]:
    full = os.path.join(sys.argv[2], f["path"])
    if f["content"] is None:
        assert not os.path.exists(full), f["path"]
    else:
        assert open(full, "rb").read() == f["content"].encode("utf-8"), f["path"]
print(f"own repository: {len(candidate['changed_files'])} file(s) applied exactly", file=sys.stderr)
PY
[ -n "$(git -C "$T/clone" status --porcelain)" ]
echo "own repository: ok (sha256:$HEX)" >&2
