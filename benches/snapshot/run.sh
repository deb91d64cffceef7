#!/usr/bin/env bash
# Benchmarks `patch-candidate snapshot --json` (complete tree, every blob hashed with SHA-256,
# canonical digest, JSON evidence) against git's own bare read of the same data:
# `git ls-tree -r COMMIT` piped into `git cat-file --batch --buffer` over every blob (no hashing).
#
# usage: benches/snapshot/run.sh            (FILES=20000 MEAN_BYTES=2048 RUNS=20 to override)
# Writes the hyperfine tables to stdout and keeps nothing else.
set -euo pipefail
cd "$(dirname "$0")/../.."

FILES=${FILES:-20000}
MEAN_BYTES=${MEAN_BYTES:-2048}
RUNS=${RUNS:-20}
BIN=target/x86_64-unknown-linux-gnu/release/patch-candidate

cargo build --release --quiet -p patch-candidate --bin patch-candidate

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo="$work/repo"
python3 benches/snapshot/make_repo.py "$repo" "$FILES" "$MEAN_BYTES"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
commit=$(git -C "$repo" rev-parse HEAD)
echo "repository: $FILES files, mean $MEAN_BYTES bytes, $(du -sh "$repo/.git" | cut -f1) packed, commit $commit" >&2

snapshot_cmd="$BIN snapshot --repo $repo --commit $commit --repository-full-name bench/repo --plan-id p --request-id r --app-id a --json > /dev/null"
git_cmd="git -C $repo ls-tree -r --format='%(objectname)' $commit | git -C $repo cat-file --batch --buffer > /dev/null"

# Sanity: the snapshot saw every file.
count=$("$BIN" snapshot --repo "$repo" --commit "$commit" --repository-full-name bench/repo \
  --plan-id p --request-id r --app-id a --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["file_manifest"]))')
[ "$count" = "$FILES" ] || { echo "manifest has $count files, expected $FILES" >&2; exit 1; }

hyperfine --shell bash --warmup 3 --runs "$RUNS" --export-markdown "$work/table.md" \
  -n "git ls-tree | git cat-file --batch (bare read)" "$git_cmd" \
  -n "patch-candidate snapshot --json" "$snapshot_cmd"
cat "$work/table.md"

/usr/bin/time -f "patch-candidate snapshot: max RSS %M KiB, wall %e s" \
  bash -c "$snapshot_cmd"
