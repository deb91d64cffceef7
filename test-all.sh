#!/usr/bin/env bash
# Runs every test: unit and integration tests of all crates (release profile, one build), with the
# real Docker daemon required (Docker tests fail, never skip, when it is missing).
#
# Steps: ensure Docker → infra/ci/pre.d/*.sh (build images, fixtures) → cargo test → 
# infra/ci/post.d/*.sh (checks that drive built binaries, e.g. the independent MCP client).
set -euo pipefail
cd "$(dirname "$0")"

bash infra/ci/ensure-docker.sh
export PATCH_CANDIDATE_REQUIRE_DOCKER=1

for step in infra/ci/pre.d/*.sh; do
  [ -e "$step" ] || continue
  echo "== $step" >&2
  bash "$step"
done

cargo test --workspace --release --locked

for step in infra/ci/post.d/*.sh; do
  [ -e "$step" ] || continue
  echo "== $step" >&2
  bash "$step"
done
