# Sourced by images/build.sh --live [--agent codex] (not run on its own): builds the Codex live
# image in $CTX from $BIN_DIR/turn-runner, the npm tree of images/live/codex/package-lock.json
# (see live_npm_tree_into in images/live/common.sh), Node >= 20 with the shared libraries it
# links, the native static `codex` and its `rg`, and a static busybox, then records it in
# $STATE_DIR/live-image.json. Uses build.sh's docker_cli, record_state, CACHE, REV and LIVE_IMAGE.
#
# Codex's bubblewrap (`codex-resources/bwrap`) is left out: the turn runs Codex with its own
# sandbox off (the container is the sandbox; the turn's seccomp profile refuses the namespaces
# bubblewrap needs anyway), so nothing in the image can start it.

source images/live/common.sh
# A cold build downloads about 173 MB, most of it the native codex package.
live_npm_tree_into images/live/codex @agentclientprotocol/codex-acp
# Only this platform's native package.
for other in "$MODULES"/@openai/codex-*; do
  [ "$other" = "$MODULES/@openai/codex-linux-x64" ] || rm -rf "$other"
done
VENDOR="$MODULES/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl"
NATIVE="$VENDOR/bin/codex"
RG="$VENDOR/codex-path/rg"
ENTRY="$MODULES/@agentclientprotocol/codex-acp/dist/index.js"
for f in "$ENTRY" "$NATIVE" "$RG"; do
  if [ ! -f "$f" ] || [ -L "$f" ]; then
    echo "build.sh: npm ci left no adapter entry, native codex and rg" >&2
    exit 3
  fi
done
live_require_static "$NATIVE" "(the native codex) is not statically linked"
live_require_static "$RG" "(codex's rg) is not statically linked"

ROOT="$CTX/root"
mkdir -p "$ROOT/opt/codex" "$ROOT/bin"
mv "$NATIVE" "$ROOT/opt/codex/codex"
mv "$RG" "$ROOT/bin/rg"
# The rest of the native package (the code-mode host, bubblewrap, voice resources) stays out.
rm -rf "$MODULES/@openai/codex-linux-x64/vendor"
mv "$MODULES" "$ROOT/opt/codex/node_modules"
rm -rf "$CTX/install"

live_runner_into "$ROOT"
live_node_into "$ROOT" "${NPM_CACHE%/npm/cacache}/pypi"
live_busybox_into "$ROOT"
live_build_image "$ROOT" turn-runner bin/node bin/busybox bin/rg opt/codex/codex lib64/ld-linux-x86-64.so.2
echo "build.sh: $LIVE_IMAGE is $LIVE_SIZE bytes (node $NODE_VERSION sha256:$NODE_SHA256; lockfile sha256:$LOCK_SHA256)" >&2

printf '{"image": "%s", "image_id": "%s", "agent": "codex-acp", "agent_version": "%s", "agent_tarball_sha256": "sha256:%s", "source_revision": "%s"%s}\n' \
  "$LIVE_IMAGE" "$LIVE_ID" "$AGENT_VERSION" "$AGENT_SHA256" "$REV" "$(live_env_fields)" | record_state live-image.json

echo "$LIVE_IMAGE $LIVE_ID"
