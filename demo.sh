#!/usr/bin/env bash
# The main job on the built-in demo: make sure a Docker daemon runs, then build and run
# `patch-candidate demo` (builds the FROM-scratch proof image if needed, creates a fixture
# repository and approval, runs one sandboxed turn, prints the candidate and checks that
# `git apply --check` accepts it). Extra arguments go to `patch-candidate demo`.
set -euo pipefail
cd "$(dirname "$0")"
bash infra/ci/ensure-docker.sh
exec cargo run --release --locked -q -p worker --bin patch-candidate -- demo "$@"
