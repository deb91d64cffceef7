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
. benches/worker/demo_env.sh
demo_binary_and_image
"$bin" doctor --require-runsc >/dev/null
demo_work
demo_payload

docker_cmd() {
  # Each runtime's own turn seccomp profile, as the worker sends it.
  local profile=turn.json
  [ "$1" = runsc ] && profile=turn-runsc.json
  turn_docker_cmd "$profile" "$2" "$1"
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
