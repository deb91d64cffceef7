#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster for the tests: a fresh directory, listening on a unix socket
# only (no TCP), trust authentication, owned by the `postgres` user when run as root (PostgreSQL
# refuses to run as root). Installs Debian's postgresql-15 when the binaries are missing.
#
# As a command:
#   postgres.sh start DIR   create the cluster in DIR when it has none, start it, print its URL
#   postgres.sh stop DIR    stop it (fast shutdown; DIR and the data stay)
# Sourced (test-all.sh):
#   postgres_start          a cluster in a new temp dir; exports PATCH_CANDIDATE_TEST_POSTGRES
#                           (its URL), PATCH_CANDIDATE_TEST_POSTGRES_DIR and
#                           PATCH_CANDIDATE_POSTGRES_SCRIPT (this file)
#   postgres_stop           stops that cluster and removes its directory
set -euo pipefail

PG_VERSION=15
PG_BIN=${PATCH_CANDIDATE_PG_BIN:-/usr/lib/postgresql/$PG_VERSION/bin}

pg_ensure_installed() {
  if [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ]; then
    return 0
  fi
  echo "postgres.sh: installing postgresql-$PG_VERSION" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  # The package starts its own default cluster; that one is stopped again: the tests use theirs.
  apt-get install -y -qq "postgresql-$PG_VERSION" >&2
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster "$PG_VERSION" main stop >/dev/null 2>&1 || true
  fi
}

# Runs a command as the cluster's owner: `postgres` when we are root, ourselves otherwise.
pg_as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# The URL of the `postgres` database on DIR's socket (percent-encoded socket directory).
pg_url() {
  local dir=$1
  python3 -c 'import sys, urllib.parse; print("postgres://postgres@" + urllib.parse.quote(sys.argv[1], safe="") + "/postgres")' "$dir"
}

pg_cluster_start() {
  local dir=$1
  pg_ensure_installed
  if [ "$(id -u)" = 0 ]; then
    id -u postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/sh postgres
    chown postgres: "$dir"
  fi
  chmod 0700 "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    pg_as_owner "$PG_BIN/initdb" --pgdata="$dir/data" --auth=trust --username=postgres \
      --encoding=UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 || {
      cat "$dir/initdb.log" >&2
      return 1
    }
  fi
  # Socket only: listen_addresses='' turns TCP off. fsync off: a throwaway test cluster, unless
  # PATCH_CANDIDATE_PG_DURABLE=1 (benchmarks that must pay for durable commits).
  local opts="-k $dir -c listen_addresses='' -c max_connections=300"
  if [ "${PATCH_CANDIDATE_PG_DURABLE:-0}" != 1 ]; then
    opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  fi
  pg_as_owner "$PG_BIN/pg_ctl" --pgdata="$dir/data" --log="$dir/server.log" --wait --timeout=60 \
    -o "$opts" start >/dev/null || {
    cat "$dir/server.log" >&2
    return 1
  }
  pg_url "$dir"
}

pg_cluster_stop() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] || return 0
  pg_as_owner "$PG_BIN/pg_ctl" --pgdata="$dir/data" --mode=fast --wait --timeout=60 stop >/dev/null
}

postgres_start() {
  local dir
  dir=$(mktemp -d /tmp/pc-pg.XXXXXX)
  # Exported first, so that postgres_stop cleans up even when the start fails half-way.
  export PATCH_CANDIDATE_TEST_POSTGRES_DIR=$dir
  PATCH_CANDIDATE_TEST_POSTGRES=$(pg_cluster_start "$dir")
  export PATCH_CANDIDATE_TEST_POSTGRES
  export PATCH_CANDIDATE_POSTGRES_SCRIPT
  PATCH_CANDIDATE_POSTGRES_SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
  echo "postgres.sh: cluster on $dir" >&2
}

postgres_stop() {
  local dir=${PATCH_CANDIDATE_TEST_POSTGRES_DIR:-}
  [ -n "$dir" ] || return 0
  pg_cluster_stop "$dir" || true
  rm -rf -- "$dir"
  unset PATCH_CANDIDATE_TEST_POSTGRES PATCH_CANDIDATE_TEST_POSTGRES_DIR
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  case "${1:-}" in
    start) pg_cluster_start "${2:?usage: postgres.sh start DIR}" ;;
    stop) pg_cluster_stop "${2:?usage: postgres.sh stop DIR}" ;;
    *)
      echo "usage: postgres.sh start DIR | stop DIR (or source it: postgres_start / postgres_stop)" >&2
      exit 2
      ;;
  esac
fi
