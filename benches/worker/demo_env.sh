# Sourced by the worker benches from the repository root.

# Builds `patch-candidate` and reads the recorded proof image. Sets: bin, state, image, image_id.
demo_binary_and_image() {
  cargo build --release --locked -p patch-candidate >/dev/null
  bin="$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate"
  state="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"
  image="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image"])' "$state/images.json")"
  image_id="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["image_id"])' "$state/images.json")"
}

# A temporary work directory removed on exit, holding the demo fixture (fixtures/demo) in
# `$work/demo`. Sets: work, commit.
demo_work() {
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  bash fixtures/demo/make-demo.sh "$work/demo" "$bin" >/dev/null
  commit="$(cat "$work/demo/commit")"
}

# `$work/payload.json`: the exact stdin payload the worker sends for the demo turn (reference
# §10.3), rebuilt independently in Python.
demo_payload() {
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
}

# The hardened `docker run` of the proof image with the turn's isolation flags and the payload on
# stdin, as one command line: `turn_docker_cmd SECCOMP_PROFILE PIDS [RUNTIME]`.
turn_docker_cmd() {
  echo "docker run --rm -i ${3:+--runtime $3 }--init --network none --read-only --log-driver none --cap-drop ALL \
 --security-opt no-new-privileges --security-opt seccomp=$PWD/worker/container/seccomp/$1 --shm-size 1m --pids-limit $2 --memory 768m --memory-swap 768m --cpus 1 \
 --ipc private --ulimit nofile=1024:1024 \
 --tmpfs /tmp:rw,nosuid,nodev,size=64m,mode=1777 --tmpfs /workspace:rw,nosuid,nodev,size=64m,mode=1777 \
 --tmpfs /home/sandbox:rw,nosuid,nodev,size=16m,mode=1777 --user 10001:10001 $image_id < $work/payload.json > /dev/null"
}
