#!/usr/bin/env bash
# Finalizer benchmarks: finalize + digest of a worst-case turn (50 changed files of ~300 KB) side
# by side with `git diff --no-index` over the same two trees, and the two adversarial diff inputs.
# Usage: bash benches/finalizer/run.sh   (needs hyperfine, git, python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p finalizer --example finalize_bench
BIN=target/x86_64-unknown-linux-gnu/release/examples/finalize_bench
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
python3 benches/finalizer/gen.py "$DATA"
W="$DATA/worst_turn"
A="$DATA/adversarial"
"$BIN" turn "$W/before" "$W/after"
hyperfine --warmup 2 --runs 10 -N \
  -n "finalize+digest (50 x 300 KB)" "$BIN turn $W/before $W/after" \
  -n "git diff --no-index (same trees)" "git diff --no-index --no-color $W/before $W/after" \
  -i
"$BIN" diff "$A/unrelated_a.txt" "$A/unrelated_b.txt"
"$BIN" diff "$A/identical_a.txt" "$A/identical_b.txt"
hyperfine --warmup 1 --runs 5 -N -i \
  -n "diff: unrelated 300 KB pair" "$BIN diff $A/unrelated_a.txt $A/unrelated_b.txt" \
  -n "git diff: unrelated 300 KB pair" "git diff --no-index --no-color $A/unrelated_a.txt $A/unrelated_b.txt" \
  -n "diff: 30k identical lines + 1" "$BIN diff $A/identical_a.txt $A/identical_b.txt" \
  -n "git diff: 30k identical lines + 1" "git diff --no-index --no-color $A/identical_a.txt $A/identical_b.txt"
/usr/bin/time -v "$BIN" turn "$W/before" "$W/after" 2>&1 | grep -E "Maximum resident|Elapsed" >&2
