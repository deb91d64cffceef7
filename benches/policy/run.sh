#!/usr/bin/env bash
# Content policy benchmark: the policy pass over three generated 10 MiB candidates (created source
# files, updates whose diffs are walked, 1.7 million short lines), side by side in the same run
# with the same pass under the 2026.12.1 rule file (32 secret rules, rules-2026.12.1.toml), the
# candidate digest alone and a newline count over the same bytes; then the recall by value of
# both rule sets over the generated corpus (worker/policy/tests/corpus/secrets.jsonl).
# Usage: bash benches/policy/run.sh [RUNS]   (default 31)
set -euo pipefail
cd "$(dirname "$0")/../.."
# The executable this build made (a shared target directory may hold another build's copy).
BIN=$(cargo build --release --locked -p policy --example policy_bench --message-format=json |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "policy_bench":
        print(m["executable"])')
"$BIN" "${1:-31}"
