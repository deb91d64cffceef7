#!/usr/bin/env bash
# The review page and document of a 35 MB candidate against a real `serve`, cached check vs the
# first (uncached) load: runs the measurement case of the scenario suite, which is marked
# `#[ignore]` so the test run never spends its time on it (it asserts nothing about speed).
# Needs Docker (the case starts the service as the scenario suite does).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --locked -p patch-candidate --bins
cargo test --release --locked -p scenario-tests --test scenario -- --ignored --nocapture \
  bench_review_page 2>&1 | grep REVIEW_BENCH
