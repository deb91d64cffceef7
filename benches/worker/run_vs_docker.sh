#!/usr/bin/env bash
# `patch-candidate run` of the demo fixture turn vs `docker run --rm -i` of the same image with the
# same isolation flags (including the turn seccomp profile and the 1 MiB /dev/shm) and the same
# stdin payload (hyperfine, side by side, one run).
#
# usage: benches/worker/run_vs_docker.sh [RUNS]   (needs Docker, hyperfine, python3, the images)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-20}"
cargo build --release --locked -p patch-candidate >/dev/null
bin="$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate"
state="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"
image="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$state/images.json")"
image_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image_id"])' "$state/images.json")"

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

docker_cmd="docker run --rm -i --init --network none --read-only --log-driver none --cap-drop ALL \
 --security-opt no-new-privileges --security-opt seccomp=$PWD/worker/container/seccomp/turn.json --shm-size 1m --pids-limit 64 --memory 768m --memory-swap 768m --cpus 1 \
 --ipc private --ulimit nofile=1024:1024 \
 --tmpfs /tmp:rw,nosuid,nodev,size=64m,mode=1777 --tmpfs /workspace:rw,nosuid,nodev,size=64m,mode=1777 \
 --tmpfs /home/sandbox:rw,nosuid,nodev,size=16m,mode=1777 --user 10001:10001 $image_id < $work/payload.json > /dev/null"
run_cmd="$bin run --repo $work/demo/repo --commit $commit --approval $work/demo/approval.json \
 --task \"\$(cat $work/demo/task)\" --image $image --image-id $image_id --store $work/store --no-ledger > /dev/null 2>&1"

hyperfine --warmup 3 --runs "$runs" --export-json "$work/hyperfine.json" \
  -n "docker run --rm -i (same flags, same stdin)" "$docker_cmd" \
  -n "patch-candidate run (snapshot+turn+stage+finalize+store)" "$run_cmd"
python3 - "$work/hyperfine.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
base, ours = r[0]["median"], r[1]["median"]
print(f"median docker run: {base*1000:.0f} ms; median patch-candidate run: {ours*1000:.0f} ms; ratio {ours/base:.3f}")
PY
