#!/usr/bin/env bash
# The archive fuzz targets (fuzz/, outside the workspace, with its own lock file), on every run:
#
# 1. compiles the cargo-fuzz targets with the stable toolchain (libFuzzer linked, no sanitizers),
#    so a change that breaks a target fails CI even where no nightly toolchain exists;
# 2. runs the same target bodies with the stable corpus runner over the seed corpora
#    (fixtures/hostile-zips/ and any fuzz/corpus/<target>/) plus deterministic mutations of every
#    seed: a crash or a failed invariant fails CI, and the input is kept in target/fuzz/artifacts;
# 3. where a nightly toolchain and cargo-fuzz are installed, also fuzzes each target for a short
#    while with coverage guidance.
set -euo pipefail
cd "$(dirname "$0")/../../.."

manifest=fuzz/Cargo.toml
target_dir=target/fuzz
cargo build --release --locked --manifest-path "$manifest" --target-dir "$target_dir" --bins
echo "fuzz: archive_reader and archive_paths compile with $(rustc --version)" >&2

corpora() {
  local target=$1
  shift
  local dirs=("$@")
  if [ -d "fuzz/corpus/$target" ]; then
    dirs+=("fuzz/corpus/$target")
  fi
  printf '%s\n' "${dirs[@]}"
}
# Built by the same `--bins` build (it does not link libFuzzer).
runner() {
  "$target_dir/x86_64-unknown-linux-gnu/release/corpus" "$@" --artifacts "$target_dir/artifacts"
}
mapfile -t reader_seeds < <(corpora archive_reader fixtures/hostile-zips)
mapfile -t paths_seeds < <(corpora archive_paths fixtures/hostile-zips)
runner archive_reader --mutations 64 "${reader_seeds[@]}"
runner archive_paths --mutations 16 --random 4000 "${paths_seeds[@]}"

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain; coverage-guided fuzzing skipped (the stable runs above passed)" >&2
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz not installed; coverage-guided fuzzing skipped (the stable runs above passed)" >&2
  exit 0
fi

corpus=fuzz/corpus/archive_reader
mkdir -p "$corpus" fuzz/corpus/archive_paths
cp fixtures/hostile-zips/*.zip "$corpus/"

cd fuzz
run() {
  local target=$1 seconds=$2
  shift 2
  echo "fuzz: $target for ${seconds}s" >&2
  local log
  log=$(mktemp)
  if ! cargo +nightly fuzz run "$target" "$@" -- -max_total_time="$seconds" -max_len=65536 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    rm -f "$log"
    echo "fuzz: $target FAILED (artifacts in fuzz/artifacts/$target)" >&2
    return 1
  fi
  grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/fuzz: $target: /" >&2 || true
  rm -f "$log"
}
run archive_reader 45 "corpus/archive_reader"
run archive_paths 15 "corpus/archive_paths"
echo "fuzz: both targets ran without a crash or invariant failure" >&2
