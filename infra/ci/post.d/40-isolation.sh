#!/usr/bin/env bash
# The Docker isolation job (see infra/ci/isolation.sh): every expected Docker case must run.
set -euo pipefail
exec bash "$(dirname "$0")/../isolation.sh"
