#!/usr/bin/env bash
# The main job on the built-in demo: make sure a Docker daemon runs, then build and run
# `patch-candidate demo` (builds the FROM-scratch proof image if needed, creates a fixture
# repository and approval, runs one sandboxed turn, prints the candidate and checks that
# `git apply --check` accepts it). Extra arguments go to `patch-candidate demo`.
set -euo pipefail
cd "$(dirname "$0")"
bash infra/ci/ensure-docker.sh
# One build for the whole workspace (the unit graph images/build.sh uses, so the image build
# that `demo` may start compiles nothing again).
cargo build --release --locked --workspace --bins
exec target/x86_64-unknown-linux-gnu/release/patch-candidate demo "$@"
