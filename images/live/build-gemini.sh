# Sourced by images/build.sh --live --agent gemini (not run on its own): builds the Gemini live
# image in $CTX from $BIN_DIR/turn-runner, Gemini CLI's bundle from the pinned npm tarball
# (images/live/gemini-cli.pin, SHA-512 integrity checked), Node >= 20 (the build host's, or the
# pinned PyPI wheel) with the shared libraries it links, the read-only system settings (images/live/gemini-settings.json:
# usage statistics, telemetry and auto-update off) and a static busybox, then records it in
# $STATE_DIR/live-image-gemini.json. Uses build.sh's docker_cli, record_state, CACHE, REV and
# LIVE_IMAGE, and the shared steps of images/live/common.sh.

source images/live/common.sh
pin() { sed -n "s/^$1=//p" images/live/gemini-cli.pin; }
AGENT_PACKAGE="$(pin package)"
AGENT_VERSION="$(pin version)"
AGENT_INTEGRITY="$(pin integrity)"
if ! [[ "$AGENT_INTEGRITY" =~ ^sha512-[A-Za-z0-9+/]{86}==$ ]] || [ -z "$AGENT_PACKAGE" ] || [ -z "$AGENT_VERSION" ]; then
  echo "build.sh: images/live/gemini-cli.pin is malformed" >&2
  exit 3
fi
integrity_of() { printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

# Downloaded once per cache (CI: once per run, or restored), checked on every use; the cache file
# is named by the integrity it must have.
CACHE_DIR="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}/npm"
KEY="$(printf '%s' "$AGENT_INTEGRITY" | sha256sum | cut -c1-16)"
TARBALL="$CACHE_DIR/gemini-cli-$AGENT_VERSION-$KEY.tgz"
mkdir -p "$CACHE_DIR"
live_pinned_tarball_into "$TARBALL" "$AGENT_PACKAGE" "$AGENT_VERSION" integrity_of "$AGENT_INTEGRITY" integrity
AGENT_SHA256="$(sha256sum "$TARBALL" | cut -d' ' -f1)"

ROOT="$CTX/root"
mkdir -p "$ROOT/bin" "$ROOT/opt/gemini" "$ROOT/etc/gemini-cli" "$CTX/unpack"
# Only the bundle and the licence, as regular files: a link or a device in the tarball fails.
tar -xzf "$TARBALL" -C "$CTX/unpack" --no-same-owner --no-same-permissions package/bundle package/LICENSE package/package.json
if [ -n "$(find "$CTX/unpack" ! -type f ! -type d)" ] || [ ! -f "$CTX/unpack/package/bundle/gemini.js" ]; then
  echo "build.sh: the tarball holds no plain package/bundle/gemini.js tree" >&2
  exit 3
fi
mv "$CTX/unpack/package/bundle" "$CTX/unpack/package/LICENSE" "$CTX/unpack/package/package.json" "$ROOT/opt/gemini/"
rm -rf "$CTX/unpack"
cp images/live/gemini-settings.json "$ROOT/etc/gemini-cli/settings.json"

live_runner_into "$ROOT"
live_node_into "$ROOT" "${CACHE_DIR%/npm}/pypi"
live_busybox_into "$ROOT"
live_build_image "$ROOT" turn-runner bin/node bin/busybox lib64/ld-linux-x86-64.so.2
echo "build.sh: $LIVE_IMAGE is $LIVE_SIZE bytes (node $NODE_VERSION sha256:$NODE_SHA256)" >&2

printf '{"image": "%s", "image_id": "%s", "agent": "gemini-cli", "agent_version": "%s", "agent_tarball_sha256": "sha256:%s", "source_revision": "%s"%s}\n' \
  "$LIVE_IMAGE" "$LIVE_ID" "$AGENT_VERSION" "$AGENT_SHA256" "$REV" "$(live_env_fields)" | record_state live-image-gemini.json

echo "$LIVE_IMAGE $LIVE_ID"
