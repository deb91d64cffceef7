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
echo "fuzz: archive_reader, archive_paths and gate_wire compile with $(rustc --version)" >&2

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

# The gate wire target: seeds written here (a canonical report, its frame, a request, JUnit
# documents benign and hostile), then their mutations and random inputs.
gate_seeds="$(mktemp -d)"
python3 - "$gate_seeds" <<'PY'
import json, struct, sys
out = sys.argv[1]
def canon(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
nonce = "ab" * 32
report = {"version": 1, "nonce": nonce, "status": "completed", "runner_error": None,
          "exit": {"code": 1}, "wall_ms": 12,
          "log": {"total_bytes": 5, "tail_b64": "dGFpbAo="},
          "junit": {"state": "ok", "truncated": False,
                    "cases": [{"id": "t::a", "outcome": "failed"}, {"id": "t::b", "outcome": "passed"}]}}
request = {"version": 1, "nonce": nonce, "argv": ["python3", "-m", "pytest"], "cwd": ".",
           "env": [["HOME", "/tmp"], ["PATH", "/usr/bin:/bin"]], "wall_ms": 60000,
           "kill_grace_ms": 2000, "log_tail_bytes": 65536,
           "junit": {"path": "out/j.xml", "max_bytes": 1048576, "max_cases": 100, "max_depth": 16},
           "tree": {"entries": 3, "bytes": 100}}
seeds = {
    "report.json": canon(report),
    "report.frame": struct.pack(">I", len(canon(report))) + canon(report),
    "timed-out.json": canon(dict(report, status="timed_out", exit={"signal": 9}, junit=None)),
    "runner-error.json": canon(dict(report, status="runner_error", runner_error="GATE_RUNNER_TREE", exit=None, junit=None)),
    "request.json": canon(request),
    "junit.xml": b'<testsuites><testsuite><testcase classname="t" name="a"><failure/></testcase><testcase name="b"/></testsuite></testsuites>',
    "junit-doctype.xml": b'<!DOCTYPE x [<!ENTITY a "b">]><testsuites><testcase name="&a;"/></testsuites>',
    "junit-deep.xml": b"<testsuites>" + b"<a>" * 40 + b"</a>" * 40 + b"</testsuites>",
}
for name, data in seeds.items():
    with open(f"{out}/{name}", "wb") as f:
        f.write(data)
PY
mapfile -t wire_seeds < <(corpora gate_wire "$gate_seeds")
runner gate_wire --mutations 64 --random 2000 "${wire_seeds[@]}"
rm -rf "$gate_seeds"

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
mkdir -p corpus/gate_wire
run gate_wire 15 "corpus/gate_wire"
echo "fuzz: every target ran without a crash or invariant failure" >&2
