#!/usr/bin/env bash
# Builds the live images (Codex: runner + codex-acp and the native codex from the locked npm tree
# + Node + a static busybox; Gemini: runner + Gemini CLI's bundle + Node) after 10-images.sh built
# the binaries, and records their IDs in live-image.json and live-image-gemini.json. The npm
# packages are fetched from the registry once per cache directory and checked against the
# lockfile's integrity on every build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. infra/ci/apt_missing.sh

missing=()
[ -x /bin/busybox ] && ! readelf -l /bin/busybox | grep -q "program interpreter" || missing+=(busybox-static)
for lib in libssl.so.3:libssl3 libz.so.1:zlib1g; do
  ldconfig -p | grep -q "${lib%%:*}" || missing+=("${lib#*:}")
done
command -v npm >/dev/null || missing+=(npm)
command -v openssl >/dev/null || missing+=(openssl)
install_missing 20-live-image "${missing[@]}"

# No --bin-dir: build.sh asks cargo where the binaries are (a no-op build after 10-images.sh), so
# a CARGO_TARGET_DIR is honoured here too.
bash images/build.sh --live
# The Gemini live image: Gemini CLI's pinned npm tarball (SHA-512 integrity checked) on this
# host's Node when it is at least 20, else on the pinned PyPI Node wheel; both downloads are
# cached outside the repository by their checksums.
bash images/build.sh --live --agent gemini
