#!/usr/bin/env bash
# A follow-up turn against a first turn on the same repository (BENCHMARKS.md, "Follow-up
# turns"; worker/turn/examples/follow_up_bench.rs). A generated repository of 300 files (40
# editable under app/, 10 read-only tests, the rest outside the approval); the parent candidate
# edits 8 of the editable files and sits in a candidate store. Both measurements interleave a
# first turn and a follow-up, and print one JSON line each:
#
#   prep    the trusted side before the container (snapshot, approval, selection, baseline,
#           request, stdin payload; the follow-up adds the parent read from the store and its
#           starting tree)
#   docker  whole pipelines on the real daemon with the synthetic proof agent
#
# usage: benches/follow-up/run.sh [PREP_RUNS] [DOCKER_RUNS]   (defaults 300 and 20; needs Docker
#        and the recorded proof image, images/build.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
prep_runs="${1:-300}"
docker_runs="${2:-20}"
cargo build --release --locked -p turn --example follow_up_bench >&2
bin=target/x86_64-unknown-linux-gnu/release/examples/follow_up_bench
state="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$state/images.json" "$1"; }
"$bin" prep --runs "$prep_runs"
"$bin" docker "$(field image)" "$(field image_id)" --runs "$docker_runs"
