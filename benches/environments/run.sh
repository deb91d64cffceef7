#!/usr/bin/env bash
# Environment image builds (images/build.sh --gate python --requirements FILE): cold (an empty
# wheel cache and no daemon build cache, the python gate image's .debs and root file system
# cached), and a cache hit (the same inputs again: a lookup); the sizes of the environment and of
# the live images on it; and the repository's test command (isodate 0.6.1's own suite) in a
# container of the environment with the turn's hardened flags vs a bare `docker run` of the
# same image on the same tree with the same CPU and memory budget.
#
#   benches/environments/run.sh [REQUIREMENTS]   (default fixtures/gates/isodate-requirements.txt)
#
# Uses a temporary state directory and wheel cache (benches/environments/common.sh); needs
# Docker, hyperfine and PyPI.
set -euo pipefail
req="$(realpath "${1:-$(dirname "$0")/../../fixtures/gates/isodate-requirements.txt}")"
ENV_NAME=bench-env
source "$(dirname "$0")/common.sh"
echo "cold (empty wheel cache, --no-cache): $(env_build "$ENV_NAME" --requirements "$req" --no-cache) s"
echo "cache hit (same inputs): $(env_build "$ENV_NAME" --requirements "$req") s"
env_sizes "$ENV_NAME" patch-candidate-gate-python:local patch-candidate-live-python:live-commands \
  patch-candidate-live-claude-python:live-commands patch-candidate-live-gemini-python:live-commands

# The test command: isodate's suite in the environment, hardened (the turn's flags) vs bare with
# the same CPU and memory budget (the budget is the turn's policy, not the sandbox's cost).
env_suite isodate 2 15 \
  'mkdir -p /tmp/w && tar -x -C /tmp/w && cd /tmp/w && python3 -m pytest -q -p no:cacheprovider >/dev/null' \
  "--cpus 1 --memory 768m" \
  "--network none --read-only --tmpfs /tmp:size=64m --tmpfs /workspace:size=64m --cap-drop ALL --security-opt no-new-privileges --pids-limit 64 --memory 768m --cpus 1 --user 10001:10001"
