#!/usr/bin/env bash
# Headless Chromium and its WebDriver (Debian's packages) for the review UI's browser tests
# (tests/scenario/ui_browser.rs). Idempotent: installs only what is missing.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" fonts-dejavu-core >/dev/null
fi
chromium --version
chromedriver --version
