#!/usr/bin/env bash
# Builds both gate images (images/build.sh --gate python|rust): the static gate runner on a root
# file system made of the pinned Debian packages (images/gate/*.pin), plus, for rust, the pinned
# rustup toolchain (images/gate/rust.toolchain); recorded in gate-images.json before cargo test
# runs the runner's container tests. The .debs and the root file systems are cached outside the
# repository keyed by checksum (see images/gate/build-gate.sh), so a warm run only re-checks them.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. infra/ci/apt_missing.sh

missing=()
command -v dpkg-deb >/dev/null || missing+=(dpkg)
command -v readelf >/dev/null && command -v strip >/dev/null || missing+=(binutils)
command -v python3 >/dev/null || missing+=(python3)
install_missing 30-gate-images "${missing[@]}"
# apt-get download needs the package lists the pins were resolved against.
if ! apt-cache show coreutils >/dev/null 2>&1; then
  apt-get update -qq >&2
fi

# The toolchain the rust image copies (its files are checked against the pinned manifest).
toolchain="$(sed -n 's/^toolchain=//p' images/gate/rust.toolchain)"
if [ -z "${PATCH_CANDIDATE_RUST_SYSROOT:-}" ] && \
   [ ! -x "${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$toolchain/bin/rustc" ]; then
  echo "30-gate-images: rustup toolchain install ${toolchain%%-x86_64*}" >&2
  rustup toolchain install "${toolchain%%-x86_64*}" --profile minimal >&2
fi

bash images/build.sh --gate python
bash images/build.sh --gate rust
