#!/usr/bin/env bash
# Smoke-runs the archive fuzz targets (fuzz/, outside the workspace) for about a minute in total,
# only when a nightly toolchain and cargo-fuzz are installed; otherwise it says so and does nothing.
# Seeds: the hostile corpus in fixtures/hostile-zips/. A crash or a failed invariant fails CI.
set -euo pipefail
cd "$(dirname "$0")/../../.."

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz-archive: no nightly toolchain; fuzz targets not run" >&2
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz-archive: cargo-fuzz not installed; fuzz targets not run" >&2
  exit 0
fi

corpus=fuzz/corpus/archive_reader
mkdir -p "$corpus" fuzz/corpus/archive_paths
cp fixtures/hostile-zips/*.zip "$corpus/"

cd fuzz
run() {
  local target=$1 seconds=$2
  shift 2
  echo "fuzz-archive: $target for ${seconds}s" >&2
  local log
  log=$(mktemp)
  if ! cargo +nightly fuzz run "$target" "$@" -- -max_total_time="$seconds" -max_len=65536 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    rm -f "$log"
    echo "fuzz-archive: $target FAILED (artifacts in fuzz/artifacts/$target)" >&2
    return 1
  fi
  grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/fuzz-archive: $target: /" >&2 || true
  rm -f "$log"
}
run archive_reader 45 "corpus/archive_reader"
run archive_paths 15 "corpus/archive_paths"
echo "fuzz-archive: both targets ran without a crash or invariant failure" >&2
