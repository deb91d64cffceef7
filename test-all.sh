#!/usr/bin/env bash
# Runs every test: unit and integration tests of all crates (release profile, one build), with the
# real Docker daemon and a real PostgreSQL required (their tests fail, never skip, when missing).
#
# Steps: ensure Docker → a throwaway PostgreSQL cluster (infra/ci/postgres.sh, stopped and removed
# on every exit) → infra/ci/pre.d/*.sh (build images, fixtures) → cargo test (every target but the
# scenario suite, then doctests) → the scenario suite (by module, two processes at a time) →
# infra/ci/post.d/*.sh (checks that drive built binaries, e.g. the independent MCP client).
set -euo pipefail
cd "$(dirname "$0")"

bash infra/ci/ensure-docker.sh
export PATCH_CANDIDATE_REQUIRE_DOCKER=1
# The review UI's browser tests fail, never skip, without Chromium and chromedriver.
export PATCH_CANDIDATE_REQUIRE_BROWSER=1

# PostgreSQL 15 (installed when missing) on a unix socket in a fresh temp dir, as the postgres
# user: exports PATCH_CANDIDATE_TEST_POSTGRES. The trap stops it on success, failure or signal.
# shellcheck source=infra/ci/postgres.sh
source infra/ci/postgres.sh
trap postgres_stop EXIT
trap 'exit 130' INT TERM
postgres_start
export PATCH_CANDIDATE_REQUIRE_POSTGRES=1

# The image and CLI builds before and after `cargo test` use its unit graph (`--tests`: the
# dev-dependency features unified), so the workspace and its dependencies compile once, not once
# for the binaries and again for the tests (images/build.sh, infra/ci/post.d/*.sh).
export PATCH_CANDIDATE_CARGO_WITH_TESTS=1

# shellcheck source=infra/ci/timed.sh
source infra/ci/timed.sh
TIMED_LABEL=test-all

for step in infra/ci/pre.d/*.sh; do
  [ -e "$step" ] || continue
  echo "== $step" >&2
  timed bash "$step"
done

# Every Docker case appends its name to this tally once it has run to completion; the isolation
# check (infra/ci/post.d/40-isolation.sh) compares it with every docker_* test instead of running
# them all a second time.
PATCH_CANDIDATE_DOCKER_TALLY="$(mktemp)"
export PATCH_CANDIDATE_DOCKER_TALLY
trap 'postgres_stop; rm -f "$PATCH_CANDIDATE_DOCKER_TALLY"' EXIT

# Every test target but the scenario suite. Selected by target, not with `--exclude
# scenario-tests`: a package left out of the selection drops its dev-dependencies' features, and
# every crate they reach would compile a second time (so would the scenario binary's build after
# it). Integration test targets are named from cargo's metadata; doctests run on their own.
mapfile -t unit_tests < <(cargo metadata --no-deps --locked --format-version 1 | python3 -c '
import json, sys
meta = json.load(sys.stdin)
names = sorted({t["name"] for p in meta["packages"] for t in p["targets"]
                if "test" in t["kind"] and t["name"] != "scenario"})
print("\n".join("--test=" + n for n in names))')
timed cargo test --workspace --release --locked --lib --bins "${unit_tests[@]}"
timed cargo test --workspace --release --locked --doc
# The scenario suite (one test binary, most of the Docker cases) runs as one process per module,
# two at a time, each in its own PID namespace (infra/ci/scenario.py says why;
# PATCH_CANDIDATE_SCENARIO_JOBS=1 runs them one after another).
timed python3 infra/ci/scenario.py
export PATCH_CANDIDATE_DOCKER_TALLY_DONE=1

for step in infra/ci/post.d/*.sh; do
  [ -e "$step" ] || continue
  echo "== $step" >&2
  timed bash "$step"
done
