#!/usr/bin/env bash
# Make sure a Docker daemon answers on /var/run/docker.sock: install Debian's docker.io when
# dockerd is missing, start it without a bridge or iptables (no network is ever given to a turn).
set -euo pipefail

if docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "ensure-docker: installing docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq docker.io >&2
fi
if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "ensure-docker: starting dockerd" >&2
  mkdir -p /var/log
  nohup dockerd --bridge=none --iptables=false >/var/log/dockerd-ci.log 2>&1 &
fi
for _ in $(seq 1 60); do
  if docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; then
    echo "ensure-docker: daemon API $(docker version --format '{{.Server.APIVersion}}')" >&2
    exit 0
  fi
  sleep 1
done
echo "ensure-docker: dockerd did not come up" >&2
tail -n 50 /var/log/dockerd-ci.log >&2 || true
exit 1
