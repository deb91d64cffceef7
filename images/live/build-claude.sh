# Sourced by images/build.sh --live --agent claude (not run on its own): builds the Claude live
# image in $CTX from $BIN_DIR/turn-runner, the npm tree of images/live/claude/package-lock.json
# (see live_npm_tree_into in images/live/common.sh), Node >= 20 with the shared libraries it
# links, the native `claude` binary with its own libraries, and a static busybox, then records it
# in $STATE_DIR/live-image-claude.json. Uses build.sh's docker_cli, record_state, CACHE, REV and
# LIVE_IMAGE.
#
# The native `claude` binary is proprietary (Anthropic's licence, not the project's): the image is
# built on the operator's machine from the registry and must never be pushed or published.

source images/live/common.sh
# A cold build downloads about 110 MB, most of it the native binary.
live_npm_tree_into images/live/claude @agentclientprotocol/claude-agent-acp
# Only this platform's native package (an npm without --libc also installs the musl one).
for other in "$MODULES"/@anthropic-ai/claude-agent-sdk-*; do
  [ "$other" = "$MODULES/@anthropic-ai/claude-agent-sdk-linux-x64" ] || rm -rf "$other"
done
NATIVE="$MODULES/@anthropic-ai/claude-agent-sdk-linux-x64/claude"
ENTRY="$MODULES/@agentclientprotocol/claude-agent-acp/dist/index.js"
if [ ! -f "$ENTRY" ] || [ ! -f "$NATIVE" ] || [ -L "$NATIVE" ]; then
  echo "build.sh: npm ci left no adapter entry and native claude binary" >&2
  exit 3
fi

ROOT="$CTX/root"
mkdir -p "$ROOT/opt/claude"
mv "$NATIVE" "$ROOT/opt/claude/claude"
mv "$MODULES" "$ROOT/opt/claude/node_modules"
rm -rf "$CTX/install"

live_runner_into "$ROOT"
live_node_into "$ROOT" "${NPM_CACHE%/npm/cacache}/pypi"
live_libraries_into "$ROOT/opt/claude/claude" "$ROOT" >/dev/null
live_busybox_into "$ROOT"
live_build_image "$ROOT" turn-runner bin/node bin/busybox opt/claude/claude lib64/ld-linux-x86-64.so.2
echo "build.sh: $LIVE_IMAGE is $LIVE_SIZE bytes (node $NODE_VERSION sha256:$NODE_SHA256; lockfile sha256:$LOCK_SHA256)" >&2
echo "build.sh: $LIVE_IMAGE holds Anthropic's proprietary claude binary: never push or publish it" >&2

printf '{"image": "%s", "image_id": "%s", "agent": "claude-agent-acp", "agent_version": "%s", "agent_tarball_sha256": "sha256:%s", "source_revision": "%s"%s}\n' \
  "$LIVE_IMAGE" "$LIVE_ID" "$AGENT_VERSION" "$AGENT_SHA256" "$REV" "$(live_env_fields)" | record_state live-image-claude.json

echo "$LIVE_IMAGE $LIVE_ID"
