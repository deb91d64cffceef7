#!/usr/bin/env bash
# Fetches the real projects the gate scenarios run (fixtures/gates/fetch.sh: a PyPI sdist and a
# crates.io crate, pinned versions, SHA-256 checked, cached outside the repository) and turns
# each into a Git repository, before cargo test runs tests/scenario/gates.rs. The gate images
# themselves come from 30-gate-images.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
bash fixtures/gates/fetch.sh >/dev/null
