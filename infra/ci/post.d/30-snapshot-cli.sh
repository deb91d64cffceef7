#!/usr/bin/env bash
# Drives the release `patch-candidate snapshot` binary against a repository made here with git:
# exit codes (0 ok, 1 rejected, 2 usage, 3 environment), the `--json` document, byte-identical
# output across runs, and the digest recomputed by the independent Python implementation.
set -euo pipefail
cd "$(dirname "$0")/../../.."

cargo build --release --locked --quiet --workspace --bins ${PATCH_CANDIDATE_CARGO_WITH_TESTS:+--tests}
# CARGO_TARGET_DIR, relative or absolute, is honoured as cargo honours it.
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
bin="$target/x86_64-unknown-linux-gnu/release/patch-candidate"
recompute="$PWD/snapshot/tests/snapshot/recompute_digest.py"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo="$work/repo"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main "$repo"
mkdir -p "$repo/src" "$repo/docs"
printf 'fn main() {}\n' > "$repo/src/main.rs"
printf '# Straße\n' > "$repo/docs/Straße.md"
printf 'caf\xe9\n' > "$repo/latin1.txt"
ln -s src/main.rs "$repo/link.rs"
git -C "$repo" add -A
git -C "$repo" -c user.name=CI -c user.email=ci@example.invalid commit -q -m fixture
commit=$(git -C "$repo" rev-parse HEAD)

snap() {
  "$bin" snapshot --repository-full-name acme/demo --plan-id plan-1 --request-id request-1 \
    --app-id app-1 "$@"
}

expect_exit() {
  local want=$1 code=$2
  shift 2
  local out status=0
  out=$("$@" 2>/dev/null) || status=$?
  if [ "$status" != "$want" ]; then
    echo "snapshot-cli: expected exit $want, got $status: $*" >&2
    exit 1
  fi
  if [ -n "$code" ] && ! printf '%s' "$out" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
assert doc["error"]["code"] == sys.argv[1], doc
' "$code"; then
    echo "snapshot-cli: expected error code $code: $*" >&2
    exit 1
  fi
}

# Success: the evidence plus the excluded list; identical bytes on a second run.
snap --repo "$repo" --commit "$commit" --json > "$work/a.json"
snap --repo "$repo" --commit "$commit" --json > "$work/b.json"
cmp -s "$work/a.json" "$work/b.json" || { echo "snapshot-cli: output differs between runs" >&2; exit 1; }
python3 - "$work/a.json" "$commit" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
assert sorted(doc) == ["app_id", "baseline_commit_sha", "excluded", "file_manifest", "plan_id",
                       "repository_full_name", "request_id", "snapshot_digest"], sorted(doc)
assert doc["baseline_commit_sha"] == sys.argv[2]
assert sorted(doc["file_manifest"]) == ["docs/Straße.md", "src/main.rs"], doc["file_manifest"]
assert [(e["path"], e["kind"]) for e in doc["excluded"]] == [
    ("latin1.txt", "non_utf8_content"), ("link.rs", "symlink")], doc["excluded"]
PY
# The first line, taken without `| head`: head closing the pipe early made the script fail with
# EPIPE under pipefail when its one write outran head.
want=$(python3 "$recompute" "$repo" "$commit" acme/demo)
want=${want%%$'\n'*}
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot_digest"])' "$work/a.json")
[ "$want" = "$got" ] || { echo "snapshot-cli: digest $got, independent $want" >&2; exit 1; }
snap --repo "$repo" --commit "$commit" | grep -q "^excluded:   2 (non_utf8_content 1, symlink 1)$"

# A dirty worktree changes nothing.
printf 'changed\n' > "$repo/src/main.rs"
snap --repo "$repo" --commit "$commit" --json | cmp -s - "$work/a.json" \
  || { echo "snapshot-cli: dirty worktree changed the snapshot" >&2; exit 1; }

# Inherited git variables cannot redirect the read (the CLI clears git's environment).
other="$work/other"
git init -q -b main "$other"
GIT_DIR="$other/.git" GIT_WORK_TREE="$other" GIT_OBJECT_DIRECTORY="$other/.git/objects" \
  GIT_INDEX_FILE="$other/.git/index" GIT_CONFIG_PARAMETERS="'core.bare=true'" \
  snap --repo "$repo" --commit "$commit" --json | cmp -s - "$work/a.json" \
  || { echo "snapshot-cli: inherited GIT_* variables changed the snapshot" >&2; exit 1; }

# Rejections (exit 1), usage (exit 2), environment (exit 3).
expect_exit 1 REPOSITORY_SNAPSHOT_COMMIT snap --repo "$repo" --commit not-a-sha --json
expect_exit 1 REPOSITORY_SNAPSHOT_COMMIT snap --repo "$repo" --commit "$(printf '0%.0s' {1..40})" --json
expect_exit 2 PATCH_CANDIDATE_PATH_MISSING snap --repo "$work/missing" --commit "$commit" --json
expect_exit 1 REPOSITORY_SNAPSHOT_REPOSITORY snap --repo "$repo/src" --commit "$commit" --json
expect_exit 2 "" "$bin" snapshot --repo "$repo"
expect_exit 3 REPOSITORY_SNAPSHOT_GIT env -i PATH=/nonexistent "$bin" snapshot --repo "$repo" \
  --commit "$commit" --repository-full-name acme/demo --plan-id p --request-id r --app-id a --json
echo "snapshot-cli: ok" >&2
