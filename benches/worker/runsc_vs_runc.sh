#!/usr/bin/env bash
# gVisor (`runsc`) vs `runc`, side by side in one hyperfine run: a plain hardened `docker run` of
# the proof image with the turn's flags and stdin payload under each runtime (each with its
# profile's pids limit: 64 under runc, 256 under runsc), and `patch-candidate run` of the demo
# fixture turn under each (`--runtime runc` / `--runtime runsc`).
#
# usage: benches/worker/runsc_vs_runc.sh [RUNS]
# Needs Docker with runsc registered as the worker expects (infra/ci/ensure-docker.sh), hyperfine,
# python3 and the recorded images (images/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-20}"
cargo build --release --locked -p patch-candidate >/dev/null
bin="$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate"
state="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"
image="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$state/images.json")"
image_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image_id"])' "$state/images.json")"
"$bin" doctor --require-runsc >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bash fixtures/demo/make-demo.sh "$work/demo" "$bin" >/dev/null
commit="$(cat "$work/demo/commit")"

# The exact stdin payload the worker sends (reference §10.3), rebuilt independently in Python.
python3 - "$work/demo" > "$work/payload.json" <<'PY'
import json, os, sys
d = sys.argv[1]
a = json.load(open(os.path.join(d, "approval.json")))
def read(p):
    return open(os.path.join(d, "repo", p), encoding="utf-8").read()
doc = {
    "app_id": a["app_id"], "build_family": "app_bundle", "build_record_id": a["build_registry_id"],
    "change_class": "patch", "raw_user_request": a["raw_request"],
    "files": {p: read(p) for p in ["app/ui/pages/Dashboard.jsx", "app/ui/pages/Legacy.jsx"]},
    "read_only_files": {"tests/test_dashboard.py": read("tests/test_dashboard.py")},
    "create_paths": sorted(a["create_paths"]), "delete_paths": sorted(a["delete_paths"]),
}
sys.stdout.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
PY

docker_cmd() {
  # Each runtime's own turn seccomp profile, as the worker sends it.
  local profile=turn.json
  [ "$1" = runsc ] && profile=turn-runsc.json
  echo "docker run --rm -i --runtime $1 --init --network none --read-only --log-driver none --cap-drop ALL \
 --security-opt no-new-privileges --security-opt seccomp=$PWD/worker/container/seccomp/$profile --shm-size 1m --pids-limit $2 --memory 768m --memory-swap 768m --cpus 1 \
 --ipc private --ulimit nofile=1024:1024 \
 --tmpfs /tmp:rw,nosuid,nodev,size=64m,mode=1777 --tmpfs /workspace:rw,nosuid,nodev,size=64m,mode=1777 \
 --tmpfs /home/sandbox:rw,nosuid,nodev,size=16m,mode=1777 --user 10001:10001 $image_id < $work/payload.json > /dev/null"
}
run_cmd() {
  echo "$bin run --runtime $1 --repo $work/demo/repo --commit $commit --approval $work/demo/approval.json \
 --task \"\$(cat $work/demo/task)\" --image $image --image-id $image_id --store $work/store-$1 --no-ledger > /dev/null 2>&1"
}

hyperfine --warmup 3 --runs "$runs" --export-json "$work/hyperfine.json" \
  -n "docker run, runc (pids 64)" "$(docker_cmd runc 64)" \
  -n "docker run, runsc (pids 256)" "$(docker_cmd runsc 256)" \
  -n "patch-candidate run --runtime runc" "$(run_cmd runc)" \
  -n "patch-candidate run --runtime runsc" "$(run_cmd runsc)"
python3 - "$work/hyperfine.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
def row(name):
    x = r[name]
    return x["median"] * 1000, x["mean"] * 1000, x["stddev"] * 1000
print("| command | median | mean ± σ |")
print("|---|---|---|")
for name in r:
    m, mean, sd = row(name)
    print(f"| `{name}` | {m:.0f} ms | {mean:.1f} ± {sd:.1f} ms |")
d = r["docker run, runsc (pids 256)"]["median"] / r["docker run, runc (pids 64)"]["median"]
p = r["patch-candidate run --runtime runsc"]["median"] / r["patch-candidate run --runtime runc"]["median"]
print(f"\nratio runsc/runc (median): docker run {d:.2f}x, patch-candidate run {p:.2f}x")
PY
