#!/usr/bin/env bash
# CI isolation job: makes sure a Docker daemon answers, builds the proof and hostile images, runs
# the worker's Docker test suite with Docker required (a missing daemon or image fails, never
# skips), and fails unless every expected Docker case actually ran. Prints the count.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash infra/ci/ensure-docker.sh
bash images/build.sh >/dev/null

export PATCH_CANDIDATE_REQUIRE_DOCKER=1
tally="$(mktemp)"
trap 'rm -f "$tally"' EXIT
export PATCH_CANDIDATE_DOCKER_TALLY="$tally"

# The expected cases: every test of the worker's integration binary named docker_*.
expected="$(cargo test --release --locked --workspace --test worker -- --list 2>/dev/null \
  | sed -n 's/^\(.*::\)\{0,1\}\(docker_[A-Za-z0-9_]*\): test$/\2/p' | sort -u)"
expected_count="$(printf '%s\n' "$expected" | grep -c . || true)"
if [ "$expected_count" -eq 0 ]; then
  echo "isolation: no Docker test cases found" >&2
  exit 1
fi

cargo test --release --locked --workspace --test worker -- docker_

ran="$(sort -u "$tally")"
ran_count="$(printf '%s\n' "$ran" | grep -c . || true)"
missing="$(comm -23 <(printf '%s\n' "$expected") <(printf '%s\n' "$ran"))"
echo "isolation: $ran_count of $expected_count Docker cases ran against the real daemon" >&2
if [ -n "$missing" ]; then
  echo "isolation: cases that did not run:" >&2
  printf '  %s\n' $missing >&2
  exit 1
fi

leftover="$(docker ps -aq --filter label=mozaiks.refinement.repository_turn=offline)"
if [ -n "$leftover" ]; then
  echo "isolation: labelled turn containers left behind: $leftover" >&2
  exit 1
fi
