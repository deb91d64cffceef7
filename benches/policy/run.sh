#!/usr/bin/env bash
# Content policy benchmark: `policy::scan` over three generated 10 MiB candidates (created source
# files, updates whose diffs are walked, 1.7 million short lines), side by side in the same run
# with the candidate digest alone and a newline count over the same bytes.
# Usage: bash benches/policy/run.sh [RUNS]   (default 31)
set -euo pipefail
cd "$(dirname "$0")/../.."
TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release -p policy --example policy_bench
BIN=$(find "$TARGET_DIR" -path '*/release/examples/policy_bench' -type f | head -n 1)
"$BIN" "${1:-31}"
