#!/usr/bin/env bash
# CI isolation job: makes sure a Docker daemon answers, builds the proof and hostile images, runs
# every Docker case of every test binary in the workspace with Docker required (a missing daemon
# or image fails, never skips), and fails unless every expected Docker case actually ran. Prints
# the count.
#
# A Docker case is a test whose name (last path component) starts with `docker_`, in any unit or
# integration test binary of any workspace crate. Names are unique across the workspace; each case
# appends its name to $PATCH_CANDIDATE_DOCKER_TALLY once it has run to completion. Under
# test-all.sh the cases already ran in its `cargo test`: the job checks that run's tally.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash infra/ci/ensure-docker.sh

# Build everything first and in the open: a build error fails the job here with its message.
targets=(--workspace --lib --bins --tests)
cargo build --release --locked --workspace --bins ${PATCH_CANDIDATE_CARGO_WITH_TESTS:+--tests}
cargo test --release --locked "${targets[@]}" --no-run
bash images/build.sh --bin-dir "${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release" >/dev/null

export PATCH_CANDIDATE_REQUIRE_DOCKER=1
listing="$(mktemp)"
# After test-all.sh's `cargo test` (which ran every case with Docker required and its own tally,
# PATCH_CANDIDATE_DOCKER_TALLY_DONE=1) the job checks that run's tally instead of running every
# Docker case a second time; run on its own, it runs them here into a fresh tally.
if [ "${PATCH_CANDIDATE_DOCKER_TALLY_DONE:-}" = 1 ] && [ -s "${PATCH_CANDIDATE_DOCKER_TALLY:-}" ]; then
  tally="$PATCH_CANDIDATE_DOCKER_TALLY"
  rerun=0
  trap 'rm -f "$listing"' EXIT
else
  tally="$(mktemp)"
  rerun=1
  trap 'rm -f "$tally" "$listing"' EXIT
  export PATCH_CANDIDATE_DOCKER_TALLY="$tally"
fi

# The expected cases: every test named docker_* in every test binary (`--list` runs nothing).
cargo test --release --locked "${targets[@]}" -- --list >"$listing"
expected="$(sed -n 's/^\(.*::\)\{0,1\}\(docker_[A-Za-z0-9_]*\): test$/\2/p' "$listing" | sort)"
expected_count="$(printf '%s\n' "$expected" | grep -c . || true)"
if [ "$expected_count" -eq 0 ]; then
  echo "isolation: no Docker test cases found" >&2
  exit 1
fi
duplicates="$(printf '%s\n' "$expected" | uniq -d)"
if [ -n "$duplicates" ]; then
  echo "isolation: Docker case names must be unique across the workspace:" >&2
  printf '  %s\n' $duplicates >&2
  exit 1
fi

if [ "$rerun" = 1 ]; then
  cargo test --release --locked "${targets[@]}" -- docker_
fi

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
