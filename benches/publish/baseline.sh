#!/usr/bin/env bash
# The hand-made equivalent of one publication: `git apply --cached` of the candidate's patch on a
# temporary index in an existing clone, `write-tree`, `commit-tree` with the same fixed identity,
# `push` of a new branch. Usage: baseline.sh CLONE BASELINE PATCH REMOTE BRANCH
set -euo pipefail
clone=$1 base=$2 patch=$3 remote=$4 branch=$5
export GIT_INDEX_FILE
GIT_INDEX_FILE=$(mktemp)
trap 'rm -f "$GIT_INDEX_FILE"' EXIT
git -C "$clone" read-tree "$base"
git -C "$clone" apply --cached "$patch"
tree=$(git -C "$clone" write-tree)
export GIT_AUTHOR_NAME=Bench GIT_AUTHOR_EMAIL=bench@example.invalid GIT_AUTHOR_DATE="1700000000 +0000"
export GIT_COMMITTER_NAME=Bench GIT_COMMITTER_EMAIL=bench@example.invalid GIT_COMMITTER_DATE="1700000000 +0000"
commit=$(git -C "$clone" commit-tree -p "$base" -m "Publish patch candidate" "$tree")
git -C "$clone" push -q "$remote" "$commit:refs/heads/$branch"
