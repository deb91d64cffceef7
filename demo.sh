#!/usr/bin/env bash
# The whole loop on the built-in demo: make sure a Docker daemon runs, then build and run
# `patch-candidate demo` (builds the FROM-scratch proof image and the python gate image if
# needed, creates a fixture repository, approval and bare remote, runs the sandboxed turn with its
# gates and a follow-up until green, checks that `git apply --check` accepts the last candidate,
# accepts it in the local review store, publishes it to a new branch of the bare remote and says
# how to open the review page). Extra arguments go to `patch-candidate demo`.
set -euo pipefail
cd "$(dirname "$0")"
bash infra/ci/ensure-docker.sh
# The python gate image (built by the demo when none is recorded) is made of pinned Debian
# packages: dpkg-deb, binutils and python3 build it, and `apt-get download` needs the lists.
. infra/ci/apt_missing.sh
missing=()
command -v dpkg-deb >/dev/null || missing+=(dpkg)
command -v readelf >/dev/null && command -v strip >/dev/null || missing+=(binutils)
command -v python3 >/dev/null || missing+=(python3)
install_missing demo "${missing[@]}"
if ! apt-cache show coreutils >/dev/null 2>&1; then
  apt-get update -qq >&2
fi
# One build for the whole workspace (the unit graph images/build.sh uses for the proof images, so
# their build compiles nothing again; the gate image's `-p gate-runner` build may compile the
# runner once more, a few seconds).
cargo build --release --locked --workspace --bins
exec "${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release/patch-candidate" demo "$@"
