# Sourced by images/build.sh --live --agent claude (not run on its own): builds the Claude live
# image in $CTX from $BIN_DIR/turn-runner, the npm tree of images/live/claude/package-lock.json
# (`npm ci`: every package checked against the lockfile's SHA-512 integrity, no install scripts,
# only this platform's native package), Node >= 20 with the shared libraries it links, the native
# `claude` binary with its own libraries, and a static busybox, then records it in
# $STATE_DIR/live-image-claude.json. Uses build.sh's docker_cli, record_state, CACHE, REV and
# LIVE_IMAGE, and the shared steps of images/live/common.sh.
#
# The native `claude` binary is proprietary (Anthropic's licence, not the project's): the image is
# built on the operator's machine from the registry and must never be pushed or published.

LOCK_DIR=images/live/claude
LOCK_SHA256="$(sha256sum "$LOCK_DIR/package-lock.json" | cut -d' ' -f1)"
# The versions the runner and docs were verified with, read from the lockfile.
read -r AGENT_VERSION ADAPTER_INTEGRITY SDK_VERSION < <(python3 - "$LOCK_DIR/package-lock.json" <<'PY'
import json, re, sys

packages = json.load(open(sys.argv[1], encoding="utf-8"))["packages"]
adapter = packages["node_modules/@agentclientprotocol/claude-agent-acp"]
native = packages["node_modules/@anthropic-ai/claude-agent-sdk-linux-x64"]
for entry in packages.values():
    if entry is packages[""]:
        continue
    if not re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", entry.get("integrity", "")):
        sys.exit("a locked package has no SHA-512 integrity")
print(adapter["version"], adapter["integrity"], native["version"])
PY
)
if [ -z "${SDK_VERSION:-}" ]; then
  echo "build.sh: images/live/claude/package-lock.json is malformed" >&2
  exit 3
fi

# npm's own content-addressed cache, outside the repository: a cold build downloads the tree once
# (about 110 MB, most of it the native binary); every use is checked against the lockfile.
NPM_CACHE="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}/npm/cacache"
mkdir -p "$NPM_CACHE"
INSTALL="$CTX/install"
mkdir -p "$INSTALL"
cp "$LOCK_DIR/package.json" "$LOCK_DIR/package-lock.json" "$INSTALL/"
echo "build.sh: npm ci (claude-agent-acp $AGENT_VERSION, native claude $SDK_VERSION)" >&2
(cd "$INSTALL" && npm ci --silent --ignore-scripts --omit=dev --no-audit --no-fund \
  --cache "$NPM_CACHE" --prefer-offline --os=linux --cpu=x64 --libc=glibc >&2)
MODULES="$INSTALL/node_modules"
rm -rf "$MODULES/.bin"
# Only this platform's native package (an npm without --libc also installs the musl one).
for other in "$MODULES"/@anthropic-ai/claude-agent-sdk-*; do
  [ "$other" = "$MODULES/@anthropic-ai/claude-agent-sdk-linux-x64" ] || rm -rf "$other"
done
NATIVE="$MODULES/@anthropic-ai/claude-agent-sdk-linux-x64/claude"
ENTRY="$MODULES/@agentclientprotocol/claude-agent-acp/dist/index.js"
if [ -n "$(find "$MODULES" ! -type f ! -type d)" ] || [ ! -f "$ENTRY" ] || [ ! -f "$NATIVE" ]; then
  echo "build.sh: npm ci left no plain tree with the adapter and the native claude binary" >&2
  exit 3
fi

# The adapter's own tarball, for the record (its integrity is the lockfile's).
PACK_DIR="$CTX/pack"
mkdir -p "$PACK_DIR"
(cd "$PACK_DIR" && npm pack --silent --cache "$NPM_CACHE" --prefer-offline \
  "@agentclientprotocol/claude-agent-acp@$AGENT_VERSION" >/dev/null)
packed=("$PACK_DIR"/*.tgz)
if [ "${#packed[@]}" != 1 ] || [ ! -f "${packed[0]}" ] \
  || [ "sha512-$(openssl dgst -sha512 -binary "${packed[0]}" | base64 -w0)" != "$ADAPTER_INTEGRITY" ]; then
  echo "build.sh: the adapter tarball does not have the locked integrity" >&2
  exit 3
fi
AGENT_SHA256="$(sha256sum "${packed[0]}" | cut -d' ' -f1)"
rm -rf "$PACK_DIR"

ROOT="$CTX/root"
mkdir -p "$ROOT/opt/claude"
mv "$NATIVE" "$ROOT/opt/claude/claude"
mv "$MODULES" "$ROOT/opt/claude/node_modules"
rm -rf "$INSTALL"

source images/live/common.sh
live_runner_into "$ROOT"
live_node_into "$ROOT" "${NPM_CACHE%/npm/cacache}/pypi"
live_libraries_into "$ROOT/opt/claude/claude" "$ROOT" >/dev/null
live_busybox_into "$ROOT"
live_build_image "$ROOT" turn-runner bin/node bin/busybox opt/claude/claude lib64/ld-linux-x86-64.so.2
echo "build.sh: $LIVE_IMAGE is $LIVE_SIZE bytes (node $NODE_VERSION sha256:$NODE_SHA256; lockfile sha256:$LOCK_SHA256)" >&2
echo "build.sh: $LIVE_IMAGE holds Anthropic's proprietary claude binary: never push or publish it" >&2

printf '{"image": "%s", "image_id": "%s", "agent": "claude-agent-acp", "agent_version": "%s", "agent_tarball_sha256": "sha256:%s", "source_revision": "%s"}\n' \
  "$LIVE_IMAGE" "$LIVE_ID" "$AGENT_VERSION" "$AGENT_SHA256" "$REV" | record_state live-image-claude.json

echo "$LIVE_IMAGE $LIVE_ID"
