#!/usr/bin/env bash
# Builds the proof worker image and the test-only hostile image (static binaries, FROM scratch)
# and records their IDs in the state file, before cargo test runs the Docker tests.
set -euo pipefail
cd "$(dirname "$0")/../../.."
bash images/build.sh
