# Sourced by images/build.sh --live (not run on its own): builds the live image in $CTX from
# $BIN_DIR/turn-runner, the pinned codex-acp tarball, the shared libraries it links and a static
# busybox, then records it in $STATE_DIR/live-image.json. Uses build.sh's docker_cli,
# record_state, CACHE, REV and LIVE_IMAGE, and the shared steps of images/live/common.sh.

source images/live/common.sh
pin() { sed -n "s/^$1=//p" images/live/codex-acp.pin; }
AGENT_PACKAGE="$(pin package)"
AGENT_VERSION="$(pin version)"
AGENT_SHA256="$(pin sha256)"
if ! [[ "$AGENT_SHA256" =~ ^[0-9a-f]{64}$ ]] || [ -z "$AGENT_PACKAGE" ] || [ -z "$AGENT_VERSION" ]; then
  echo "build.sh: images/live/codex-acp.pin is malformed" >&2
  exit 3
fi

# The tarball is downloaded once per cache (CI: once per run) and checked on every use.
CACHE_DIR="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}/npm"
TARBALL="$CACHE_DIR/codex-acp-linux-x64-$AGENT_VERSION.tgz"
mkdir -p "$CACHE_DIR"
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
live_pinned_tarball_into "$TARBALL" "$AGENT_PACKAGE" "$AGENT_VERSION" sha256_of "$AGENT_SHA256" SHA-256

ROOT="$CTX/root"
mkdir -p "$ROOT/bin" "$CTX/unpack"
# Only the one member, as a regular file (tar refuses a missing member).
tar -xzf "$TARBALL" -C "$CTX/unpack" --no-same-owner --no-same-permissions package/bin/codex-acp
AGENT_BIN="$CTX/unpack/package/bin/codex-acp"
if [ ! -f "$AGENT_BIN" ] || [ -L "$AGENT_BIN" ]; then
  echo "build.sh: the tarball holds no regular package/bin/codex-acp" >&2
  exit 3
fi
strip --strip-all -o "$ROOT/codex-acp" "$AGENT_BIN"
rm -rf "$CTX/unpack"

# The runner is static (no program interpreter); the agent needs exactly the loader and these six
# libraries, resolved by the host's loader and copied to the same paths in the image.
live_runner_into "$ROOT"

EXPECTED_LIBS="libc.so.6 libcrypto.so.3 libgcc_s.so.1 libm.so.6 libssl.so.3 libz.so.1"
interp="$(readelf -l "$ROOT/codex-acp" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')"
if [ "$interp" != /lib64/ld-linux-x86-64.so.2 ]; then
  echo "build.sh: codex-acp asks for an unexpected loader" >&2
  exit 3
fi
if ldd "$ROOT/codex-acp" | grep -q "not found"; then
  echo "build.sh: codex-acp needs libraries this host lacks (Debian: libssl3 zlib1g libgcc-s1)" >&2
  exit 3
fi
found=""
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue
  case "$path" in /*) ;; *) continue ;; esac
  found="$found $name"
  mkdir -p "$ROOT$(dirname "$path")"
  cp -L "$path" "$ROOT$path"
done < <(ldd "$ROOT/codex-acp")
if [ "$(echo "$found" | tr ' ' '\n' | sed '/^$/d' | sort | tr '\n' ' ')" != "$EXPECTED_LIBS " ]; then
  echo "build.sh: codex-acp links$found, expected $EXPECTED_LIBS" >&2
  exit 3
fi
mkdir -p "$ROOT/lib64"
cp -L "$interp" "$ROOT$interp"

# The agent's shell: a static busybox (its sh runs applets without further links).
live_busybox_into "$ROOT"
live_build_image "$ROOT" turn-runner codex-acp bin/busybox "${interp#/}"
echo "build.sh: $LIVE_IMAGE is $LIVE_SIZE bytes" >&2

printf '{"image": "%s", "image_id": "%s", "agent": "codex-acp", "agent_version": "%s", "agent_tarball_sha256": "sha256:%s", "source_revision": "%s"%s}\n' \
  "$LIVE_IMAGE" "$LIVE_ID" "$AGENT_VERSION" "$AGENT_SHA256" "$REV" "$(live_env_fields)" | record_state live-image.json

echo "$LIVE_IMAGE $LIVE_ID"
