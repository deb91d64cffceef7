#!/usr/bin/env bash
# Rust environment image builds (images/build.sh --gate rust --cargo-lock FILE): cold (an empty
# crate cache and no daemon build cache; the rust gate image's .debs and root file system
# cached), and a cache hit (the same inputs again: a lookup); the environment's size; and the
# crate's own `cargo test --offline --frozen` (either 1.13.0, which builds serde_json from the
# vendored crates) in a container of the environment with the turn's hardened flags (its build
# /tmp mounted exec) vs a bare `docker run` of the same image on the same tree with the same CPU
# and memory budget (a compile scales with CPUs: the budget is the turn's policy, not the
# sandbox's cost).
#
#   benches/environments/rust.sh [CARGO_LOCK]   (default fixtures/gates/either-Cargo.lock)
#
# Uses a temporary state directory and crate cache (benches/environments/common.sh); needs
# Docker, hyperfine and crates.io.
set -euo pipefail
lock="$(realpath "${1:-$(dirname "$0")/../../fixtures/gates/either-Cargo.lock}")"
ENV_NAME=bench-rust-env
source "$(dirname "$0")/common.sh"
echo "cold (empty crate cache, --no-cache): $(env_build "$ENV_NAME" --cargo-lock "$lock" --no-cache) s"
echo "cache hit (same inputs): $(env_build "$ENV_NAME" --cargo-lock "$lock") s"
env_sizes "$ENV_NAME" patch-candidate-gate-rust:local patch-candidate-live-gemini-either:live-commands

# The test command: either's suite in the environment; each run compiles the crate and its
# dev-dependencies from scratch.
env_suite either 1 5 \
  'mkdir -p /tmp/w && tar -x -C /tmp/w && cd /tmp/w && CARGO_TARGET_DIR=/tmp/cargo-target CARGO_INCREMENTAL=0 cargo test --offline --frozen --quiet >/dev/null 2>&1' \
  "--cpus 1 --memory 768m" \
  "--network none --read-only --tmpfs /tmp:rw,exec,size=512m --tmpfs /workspace:size=64m --tmpfs /home/sandbox:size=16m -e HOME=/home/sandbox --cap-drop ALL --security-opt no-new-privileges --pids-limit 64 --memory 768m --cpus 1 --user 10001:10001"
