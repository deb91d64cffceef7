#!/usr/bin/env bash
# The job store's claim benchmark, PostgreSQL and SQLite side by side (BENCHMARKS.md, "Job store:
# claims"). 100 worker loops (no Docker: no-op jobs) claim one job at a time and complete it
# until the queue is empty; each line reports claims/s, claim latency p50/p99 and the
# double-claim check. Exits non-zero when any job was claimed twice or left undone.
#
#   benches/jobs/claim.sh [JOBS] [LOOPS]       (defaults: 20000 jobs, 100 loops)
#
# With PATCH_CANDIDATE_BENCH_QUOTA=1 every run is made twice, on fresh databases, side by side:
# without and with the quota check at claim (`claim_bench --quota`: each claim also reads the
# claimed job's spend of the day, BENCHMARKS.md "Quota check at claim").
#
# PostgreSQL: a throwaway cluster (infra/ci/postgres.sh) on a unix socket; durable commits
# (fsync on) with PATCH_CANDIDATE_PG_DURABLE=1, otherwise the test cluster's fsync=off.
# SQLite: a file in a temp dir, as the service opens it (WAL, synchronous=FULL).
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${1:-20000}
LOOPS=${2:-100}

cargo build --release --locked -p jobs --example claim_bench >&2
BIN=target/x86_64-unknown-linux-gnu/release/examples/claim_bench

# shellcheck source=infra/ci/postgres.sh
source infra/ci/postgres.sh
work=$(mktemp -d)
trap 'postgres_stop; rm -rf -- "$work"' EXIT
trap 'exit 130' INT TERM
postgres_start

modes=("")
if [[ ${PATCH_CANDIDATE_BENCH_QUOTA:-0} == 1 ]]; then
  modes=("" --quota)
fi

for pool in 8 32 100; do
  for mode in "${modes[@]}"; do
    db=bench_pool_$pool${mode:+_quota}
    pg_as_owner "$PG_BIN/psql" -h "$PATCH_CANDIDATE_TEST_POSTGRES_DIR" -d postgres -qc "CREATE DATABASE $db" >&2
    url=${PATCH_CANDIDATE_TEST_POSTGRES%/postgres}/$db
    "$BIN" --database "$url" --jobs "$JOBS" --loops "$LOOPS" --pool "$pool" ${mode:+"$mode"}
  done
done
for mode in "${modes[@]}"; do
  "$BIN" --database "sqlite:$work/bench${mode:+_quota}.sqlite3" --jobs "$JOBS" --loops "$LOOPS" \
    ${mode:+"$mode"}
done
