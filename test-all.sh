#!/usr/bin/env bash
# Runs every test: unit and integration tests of all crates (release profile, one build), with the
# real Docker daemon required (Docker tests fail, never skip, when it is missing).
set -euo pipefail
cd "$(dirname "$0")"

bash infra/ci/ensure-docker.sh
export PATCH_CANDIDATE_REQUIRE_DOCKER=1

cargo test --workspace --release --locked
