#!/usr/bin/env bash
# Gate benchmarks (BENCHMARKS.md, "Validation gates"), side by side in one run:
#   1. one gate run (`patch-candidate gate`, baseline cached) vs a bare `docker run --rm -i` of
#      the same image with the same tree on stdin (tar) and the same command (more-itertools'
#      pytest suite, fixtures/gates/fetch.sh);
#   2. tree transfer of a 20,000-file repository into the gate (command `true`) vs
#      `git archive | docker run -i … tar x`;
#   3. host peak RSS (`/usr/bin/time -v`) of a gate whose command floods 2 GB of output.
# Uses hyperfine when installed, else the median of RUNS timed runs. Needs the python gate image
# (images/build.sh --gate python) and a release build of patch-candidate.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS="${RUNS:-5}"
BIN="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/patch-candidate"
[ -x "$BIN" ] || BIN="${CARGO_TARGET_DIR:-target}/release/patch-candidate"
IMG="$(docker image inspect --format '{{.Id}}' patch-candidate-gate-python:local)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export PATCH_CANDIDATE_STATE_DIR="$WORK/state"
mkdir -p "$PATCH_CANDIDATE_STATE_DIR"

# A candidate touching one file (a trailing newline in a README), as the gate command sees it.
make_candidate() { # repo out
  python3 - "$1" "$2" <<'PY'
import hashlib, json, subprocess, sys
repo, out = sys.argv[1], sys.argv[2]
commit = subprocess.check_output(["git", "-C", repo, "rev-parse", "HEAD"], text=True).strip()
path = "BENCH_NOTE.txt"
content = "bench\n"
sha = lambda b: "sha256:" + hashlib.sha256(b).hexdigest()
cand = {
  "schema_version": "mozaiks.refinement.repository_patch.v2", "write_back_mode": "external_patch",
  "validation_state": "pending", "mutation_allowed": False, "handoff_id": "h", "request_id": "r",
  "plan_id": "p", "app_id": "a", "build_registry_id": "b", "repository_full_name": "bench/repo",
  "baseline_commit_sha": commit, "approved_plan_digest": "d", "snapshot_digest": "s",
  "proposal_id": "x", "provider_id": "bench", "summary": "bench", "rationale": "bench",
  "changed_files": [{"path": path, "op": "create", "previous_sha256": None,
                     "new_sha256": sha(content.encode()), "content": content, "diff": ""}],
  "required_validation_gates": ["bench"], "required_security_gates": [], "required_ci_checks": [],
}
json.dump(cand, open(out, "w"))
PY
}

gates_file() { # out argv-json workspace_mib
  cat >"$1" <<TOML
version = 1
[gates.bench]
image = "$IMG"
argv = $2
cwd = "."
wall_seconds = 900
kill_grace_ms = 1000
memory_mib = 2048
pids = 512
cpu_millis = 2000
workspace_mib = $3
tmp_mib = 256
log_tail_bytes = 65536
[gates.bench.env]
HOME = "/tmp/home"
PATH = "/usr/bin:/bin"
PYTHONDONTWRITEBYTECODE = "1"
TOML
}

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
timeit() { # label command...
  # hyperfine runs commands in its own shell, which cannot see this script's functions.
  if command -v hyperfine >/dev/null && [ "$(type -t "$1")" != function ]; then
    hyperfine --warmup 1 --runs "$RUNS" --export-json "$WORK/h.json" "$*" >&2
    python3 -c "import json;print(json.load(open('$WORK/h.json'))['results'][0]['median'])"
  else
    "$@" >/dev/null 2>&1 # warm-up
    for _ in $(seq "$RUNS"); do
      s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
      echo "$e - $s" | bc -l
    done | median
  fi
}

# 1. The real suite.
FIX="$(bash fixtures/gates/fetch.sh)"
REPO="$WORK/more-itertools"
git clone -q "$FIX/more-itertools" "$REPO"
git -C "$REPO" checkout -q pristine
make_candidate "$REPO" "$WORK/cand.json"
gates_file "$WORK/gates.toml" '["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]' 256
"$BIN" gate "$WORK/cand.json" --repo "$REPO" --gates "$WORK/gates.toml" --out "$WORK/ev" >/dev/null 2>&1 # fills the baseline cache
# The candidate's tree for the bare run: the commit plus the candidate's one new file.
git -C "$REPO" archive --format=tar -o "$WORK/tree.tar" HEAD
mkdir -p "$WORK/extra" && printf 'bench\n' >"$WORK/extra/BENCH_NOTE.txt"
tar --owner=0 --group=0 -rf "$WORK/tree.tar" -C "$WORK/extra" BENCH_NOTE.txt
bare() {
  docker run --rm -i --network none --read-only --cap-drop ALL --security-opt no-new-privileges \
    --user 10001:10001 --tmpfs /workspace:rw,size=256m,mode=1777 --tmpfs /tmp:rw,size=256m,mode=1777 \
    --memory 2g --pids-limit 512 --cpus 2 --log-driver none --entrypoint /bin/sh \
    -e HOME=/tmp/home -e PATH=/usr/bin:/bin -e PYTHONDONTWRITEBYTECODE=1 "$IMG" \
    -c 'cd /workspace && tar xf - && python3 -m pytest -q -p no:cacheprovider' <"$WORK/tree.tar"
}
gate_run() { "$BIN" gate "$WORK/cand.json" --repo "$REPO" --gates "$WORK/gates.toml" --out "$WORK/ev"; }
T_GATE=$(timeit gate_run)
T_BARE=$(timeit bare)

# 2. Tree transfer: 20,000 files (16 KiB each in 200 folders), command `true`.
BIG="$WORK/big"
mkdir -p "$BIG"
python3 - "$BIG" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(200):
    os.makedirs(f"{root}/d{d:03}", exist_ok=True)
    for f in range(100):
        with open(f"{root}/d{d:03}/f{f:03}.txt", "w") as fh:
            fh.write((f"{d}-{f}\n") * 1800)
PY
git -C "$BIG" init -q && git -C "$BIG" add -A && git -C "$BIG" -c user.name=b -c user.email=b@e.invalid commit -qm big
make_candidate "$BIG" "$WORK/big.json"
gates_file "$WORK/big.toml" '["true"]' 1024
"$BIN" gate "$WORK/big.json" --repo "$BIG" --gates "$WORK/big.toml" --out "$WORK/ev" >/dev/null 2>&1
big_gate() { "$BIN" gate "$WORK/big.json" --repo "$BIG" --gates "$WORK/big.toml" --out "$WORK/ev"; }
big_bare() {
  git -C "$BIG" archive --format=tar HEAD | docker run --rm -i --network none --read-only --user 10001:10001 \
    --tmpfs /workspace:rw,size=1024m,mode=1777 --log-driver none --entrypoint /bin/sh "$IMG" \
    -c 'cd /workspace && tar xf -'
}
T_BIG_GATE=$(timeit big_gate)
T_BIG_BARE=$(timeit big_bare)

# 3. Host peak RSS under a 2 GB output flood.
gates_file "$WORK/flood.toml" '["sh", "-c", "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c 2000000000"]' 256
/usr/bin/time -v "$BIN" gate "$WORK/cand.json" --repo "$REPO" --gates "$WORK/flood.toml" --out "$WORK/ev" \
  >"$WORK/flood.out" 2>"$WORK/flood.time"
RSS_KB=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/flood.time")
FLOOD_VERDICT=$(grep '^gate bench' "$WORK/flood.out" | cut -d';' -f1)

printf 'gate run (pytest, more-itertools, baseline cached): %.2f s   bare docker run -i: %.2f s   ratio %.2f\n' \
  "$T_GATE" "$T_BARE" "$(echo "$T_GATE / $T_BARE" | bc -l)"
printf 'tree transfer 20,000 files (true):                  %.2f s   git archive | docker run -i tar x: %.2f s   ratio %.2f\n' \
  "$T_BIG_GATE" "$T_BIG_BARE" "$(echo "$T_BIG_GATE / $T_BIG_BARE" | bc -l)"
printf 'host peak RSS, 2 GB output flood: %d KiB (%s)\n' "$RSS_KB" "$FLOOD_VERDICT"
