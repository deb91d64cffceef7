#!/usr/bin/env bash
# Archive benchmarks (numbers go to BENCHMARKS.md, section "archive"). Run from anywhere:
#   bash benches/archive/run.sh [WORKDIR]
# Needs hyperfine, python3, openssl, /usr/bin/time. Builds the CLI and the bench drivers first.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-$(mktemp -d)}
mkdir -p "$work"
cargo build --release -p patch-candidate --bin patch-candidate -p archive --examples >&2
bin=target/x86_64-unknown-linux-gnu/release
python3 benches/archive/make_inputs.py "$work"
ls -l "$work"/*.zip >&2

echo "== full-budget archive (50 entries, 16 MiB): inspect + stage vs Python vs openssl" >&2
hyperfine -N --warmup 5 --runs 40 \
  -n "openssl dgst -sha256" "openssl dgst -sha256 $work/full.zip" \
  -n "patch-candidate archive inspect" "$bin/patch-candidate archive inspect $work/full.zip" \
  -n "inspect (library: strict read, manifest, digest)" "$bin/examples/bench_stage $work/full.zip $work --inspect-only" \
  -n "inspect + stage + cleanup" "$bin/examples/bench_stage $work/full.zip $work" \
  -n "python zipfile + hashlib" "python3 benches/archive/python_read.py $work/full.zip" \
  --export-markdown "$work/full.md"
cat "$work/full.md"

echo "== forged 1,000,000-entry declarations: per-call time (in process)" >&2
for f in forged-zip64 forged-count; do
  "$bin/examples/bench_forged" "$work/$f.zip" 2000
done

echo "== forged declarations through the CLI: peak RSS (/usr/bin/time -v)" >&2
for f in forged-zip64 forged-count full; do
  /usr/bin/time -v "$bin/patch-candidate" archive inspect "$work/$f.zip" >/dev/null 2>"$work/$f.time" || true
  printf '%s: %s, %s\n' "$f" \
    "$(grep -o 'Maximum resident set size (kbytes): [0-9]*' "$work/$f.time")" \
    "$(grep -o 'REPOSITORY_PATCH_[A-Z_]*: [^"]*' "$work/$f.time" | head -1 || echo accepted)"
done
hyperfine -N --warmup 3 --runs 30 -i \
  -n "inspect forged-zip64 (54 MB)" "$bin/patch-candidate archive inspect $work/forged-zip64.zip" \
  -n "inspect forged-count (54 MB)" "$bin/patch-candidate archive inspect $work/forged-count.zip" \
  --export-markdown "$work/forged.md"
cat "$work/forged.md"
