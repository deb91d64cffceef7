# Sourced by images/build.sh --live --agent gemini (not run on its own): builds the Gemini live
# image in $CTX from $BIN_DIR/turn-runner, Gemini CLI's bundle from the pinned npm tarball
# (images/live/gemini-cli.pin, SHA-512 integrity checked), the build host's Node (>= 20) with the
# shared libraries it links, the read-only system settings (images/live/gemini-settings.json:
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

# Node from the build host (PATCH_CANDIDATE_NODE overrides), at least 20, with the loader and
# every library its loader resolves, copied to the same paths.
NODE_BIN="$(readlink -f "${PATCH_CANDIDATE_NODE:-$(command -v node || true)}")"
if [ ! -x "$NODE_BIN" ]; then
  echo "build.sh: no node on this host (Debian: apt-get install nodejs)" >&2
  exit 3
fi
NODE_VERSION="$("$NODE_BIN" --version)"
if ! [[ "$NODE_VERSION" =~ ^v([0-9]+)\. ]] || [ "${BASH_REMATCH[1]}" -lt 20 ]; then
  echo "build.sh: node $NODE_VERSION is older than 20" >&2
  exit 3
fi
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
