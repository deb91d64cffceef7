#!/usr/bin/env bash
# `patch-candidate run` of the demo fixture turn vs `docker run --rm -i` of the same image with the
# same isolation flags (including the turn seccomp profile and the 1 MiB /dev/shm) and the same
# stdin payload (hyperfine, side by side, one run).
#
# usage: benches/worker/run_vs_docker.sh [RUNS]   (needs Docker, hyperfine, python3, the images)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-20}"
. benches/worker/demo_env.sh
demo_binary_and_image
demo_work
demo_payload

docker_cmd="$(turn_docker_cmd turn.json 64)"
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
