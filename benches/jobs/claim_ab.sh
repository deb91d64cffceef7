#!/usr/bin/env bash
# The quota check at claim against an earlier build, interleaved (BENCHMARKS.md, "The quota check
# at claim"): ROUNDS rounds of three runs each on fresh PostgreSQL databases (pool 32, 100 loops,
# JOBS jobs): BASE's `claim_bench` (an earlier build's example binary), this build's plain claim,
# and this build's claim reading the day's spend (`--quota`). One JSON line per run, prefixed
# with its configuration.
#
#   BASE=/path/to/earlier/claim_bench benches/jobs/claim_ab.sh [JOBS] [ROUNDS]   (20000, 3)
#
# Build BASE from another commit in its own worktree and target directory, e.g.
#   git worktree add ../base c53011b && (cd ../base && CARGO_TARGET_DIR=../base-target \
#     cargo build --release --locked -p jobs --example claim_bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
JOBS=${1:-20000}
ROUNDS=${2:-3}
: "${BASE:?set BASE to the claim_bench binary of an earlier build}"

cargo build --release --locked -p jobs --example claim_bench >&2
NEW=target/x86_64-unknown-linux-gnu/release/examples/claim_bench

# shellcheck source=infra/ci/postgres.sh
source infra/ci/postgres.sh
trap 'postgres_stop' EXIT
trap 'exit 130' INT TERM
postgres_start

n=0
for round in $(seq 1 "$ROUNDS"); do
  for cfg in base plain quota; do
    n=$((n + 1))
    db=claim_ab_${n}
    pg_as_owner "$PG_BIN/psql" -h "$PATCH_CANDIDATE_TEST_POSTGRES_DIR" -d postgres -qc "CREATE DATABASE $db" >&2
    url=${PATCH_CANDIDATE_TEST_POSTGRES%/postgres}/$db
    case $cfg in
      base) bin=$BASE; extra=() ;;
      plain) bin=$NEW; extra=() ;;
      quota) bin=$NEW; extra=(--quota) ;;
    esac
    echo "$cfg round $round: $("$bin" --database "$url" --jobs "$JOBS" --loops 100 --pool 32 "${extra[@]}")"
  done
done
