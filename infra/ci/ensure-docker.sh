#!/usr/bin/env bash
# Make sure a Docker daemon answers on /var/run/docker.sock: install Debian's docker.io when
# dockerd is missing, start it without a bridge or iptables (no network is ever given to a turn).
#
# It also installs Debian's gVisor (`runsc`) and registers it in the daemon's configuration as the
# runtime `runsc` with exactly the arguments the worker's pre-start inspection expects
# (docs/WORKER.md, "Runtimes"). The registration is idempotent: an existing daemon.json keeps its
# other keys; a running daemon that lacks the registration reloads its configuration (SIGHUP, which
# applies `runtimes` without a restart) instead of being restarted.
#
# Set PATCH_CANDIDATE_SKIP_RUNSC=1 to leave gVisor alone (runc-only hosts).
set -euo pipefail

daemon_json=/etc/docker/daemon.json
runsc_path=/usr/bin/runsc
# Keep in step with worker/container/src/profile.rs (RUNSC_EXPECTED_ARGS).
runsc_args='["--network=none", "--oci-seccomp"]'

api_version() { docker version --format '{{.Server.APIVersion}}' 2>/dev/null; }

runsc_registered() {
  docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
want_path, want_args = sys.argv[1], json.loads(sys.argv[2])
runtimes = json.load(sys.stdin) or {}
entry = runtimes.get("runsc") or {}
sys.exit(0 if entry.get("path") == want_path and (entry.get("runtimeArgs") or []) == want_args else 1)
' "$runsc_path" "$runsc_args"
}

# Writes the runsc entry into daemon.json (keeping every other key); exits 0 when it changed.
register_runsc() {
  mkdir -p "$(dirname "$daemon_json")"
  python3 - "$daemon_json" "$runsc_path" "$runsc_args" <<'PY'
import json, os, sys
path, runsc_path, runsc_args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
try:
    with open(path, encoding="utf-8") as handle:
        config = json.load(handle)
except FileNotFoundError:
    config = {}
want = {"path": runsc_path, "runtimeArgs": runsc_args}
runtimes = config.setdefault("runtimes", {})
if runtimes.get("runsc") == want:
    sys.exit(1)
runtimes["runsc"] = want
tmp = path + ".tmp"
with open(tmp, "w", encoding="utf-8") as handle:
    json.dump(config, handle, indent=2, sort_keys=True)
    handle.write("\n")
os.replace(tmp, path)
sys.exit(0)
PY
}

wait_for_daemon() {
  for _ in $(seq 1 60); do
    if api_version >/dev/null; then
      return 0
    fi
    sleep 1
  done
  echo "ensure-docker: dockerd did not come up" >&2
  tail -n 50 /var/log/dockerd-ci.log >&2 || true
  return 1
}

export DEBIAN_FRONTEND=noninteractive
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
if [ "${PATCH_CANDIDATE_SKIP_RUNSC:-0}" != 1 ] && [ ! -x "$runsc_path" ]; then
  missing+=(runsc)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "ensure-docker: installing ${missing[*]}" >&2
  apt-get update -qq >&2
  apt-get install -y -qq "${missing[@]}" >&2
fi

changed=0
if [ "${PATCH_CANDIDATE_SKIP_RUNSC:-0}" != 1 ]; then
  if register_runsc; then
    echo "ensure-docker: registered runsc in $daemon_json" >&2
    changed=1
  fi
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "ensure-docker: starting dockerd" >&2
  mkdir -p /var/log
  # The daemon must not inherit any descriptor beyond stdio: callers run this script under
  # `flock`, and a daemon holding the lock file open would hold the lock for its whole life.
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      n="${fd##*/}"
      if [ "$n" -gt 2 ]; then eval "exec $n>&-"; fi
    done 2>/dev/null
    exec nohup dockerd --bridge=none --iptables=false </dev/null >/var/log/dockerd-ci.log 2>&1
  ) &
  wait_for_daemon
elif ! api_version >/dev/null; then
  wait_for_daemon
elif [ "$changed" = 1 ] || { [ "${PATCH_CANDIDATE_SKIP_RUNSC:-0}" != 1 ] && ! runsc_registered; }; then
  echo "ensure-docker: reloading the daemon configuration (runtimes)" >&2
  kill -HUP "$(pgrep -xo dockerd)"
  for _ in $(seq 1 20); do
    runsc_registered && break
    sleep 0.5
  done
fi

if [ "${PATCH_CANDIDATE_SKIP_RUNSC:-0}" != 1 ] && ! runsc_registered; then
  echo "ensure-docker: the daemon does not list runsc as $runsc_path $runsc_args" >&2
  exit 1
fi
echo "ensure-docker: daemon API $(api_version)" >&2
