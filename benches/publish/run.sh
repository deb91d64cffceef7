#!/usr/bin/env bash
# Publication benchmark: publishing a 50-file candidate (private mirror borrowing the source's
# objects, fast-import blobs, read-tree + update-index + write-tree on a temporary index,
# commit-tree, ls-remote recheck, create-only atomic push) side by side with the same commit made
# by hand (`git apply --cached` on a temporary index + write-tree + commit-tree + push), both to a
# bare repository on this machine. The source repository has FILES files (default 2000, ~2 KB).
# Usage: bash benches/publish/run.sh [FILES]   (needs hyperfine, git)
set -euo pipefail
cd "$(dirname "$0")/../.."
FILES=${1:-2000}
cargo build --release -p publish --example publish_bench
BIN=${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/examples/publish_bench
[ -x "$BIN" ] || BIN=${CARGO_TARGET_DIR:-target}/release/examples/publish_bench
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
git init -q -b main "$DATA/repo"
for i in $(seq -w 1 "$FILES"); do
  d="$DATA/repo/src/d$((10#$i % 40))"
  mkdir -p "$d"
  for l in $(seq 1 40); do echo "line $l of file $i: lorem ipsum dolor sit amet"; done > "$d/f$i.txt"
done
git -C "$DATA/repo" add -A
git -C "$DATA/repo" -c user.name=b -c user.email=b@example.invalid commit -q -m baseline
BASE=$(git -C "$DATA/repo" rev-parse HEAD)
git init -q --bare -b main "$DATA/remote.git"
git -C "$DATA/repo" push -q "$DATA/remote.git" main
git clone -q "$DATA/repo" "$DATA/clone"
mkdir "$DATA/in"
"$BIN" input "$DATA/repo" "$BASE" "$DATA/in" 50
# Both make the same tree (the commit messages differ, so the ids do not).
"$BIN" publish "$DATA/repo" "$DATA/remote.git" check "$DATA/in/candidate.json" >/dev/null
bash benches/publish/baseline.sh "$DATA/clone" "$BASE" "$DATA/in/candidate.patch" "$DATA/remote.git" check-base
[ "$(git --git-dir="$DATA/remote.git" rev-parse check^{tree})" = "$(git --git-dir="$DATA/remote.git" rev-parse check-base^{tree})" ]
R="$DATA/remote.git"
hyperfine --warmup 3 --runs 30 \
  -n "publish (50 files, $FILES-file repo)" \
  --prepare "git --git-dir=$R update-ref -d refs/heads/bench-pub 2>/dev/null || true" \
  "$BIN publish $DATA/repo $R bench-pub $DATA/in/candidate.json" \
  -n "git apply --cached + write-tree + commit-tree + push" \
  --prepare "git --git-dir=$R update-ref -d refs/heads/bench-base 2>/dev/null || true" \
  "bash benches/publish/baseline.sh $DATA/clone $BASE $DATA/in/candidate.patch $R bench-base"
