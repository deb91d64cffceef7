# Sourced by images/build.sh --gate python|rust (not run on its own): builds a gate image in $CTX
# from $BIN_DIR/gate-runner and a root file system made of the pinned Debian packages
# (images/gate/$GATE.pin; for rust also the pinned host toolchain, images/gate/rust.toolchain),
# imported with `docker import`; then records it in $STATE_DIR/gate-images.json. Uses build.sh's
# docker_cli, record_state, CACHE, REV and GATE.
#
# Caches, outside the repository, in ${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}:
#   debs/<sha256>.deb             every pinned package, checked against its pin on every use
#   gate-rootfs/<key>.tar         the root file system, keyed by the SHA-256 of the pins and this script
# and in the daemon the imported base image, tagged patch-candidate-gate-base-$GATE:<key prefix>.

GATE_IMAGE="${GATE_IMAGE_TAG:-patch-candidate-gate-$GATE:local}"
PIN_FILE="images/gate/$GATE.pin"
CACHE_ROOT="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}"
DEB_CACHE="$CACHE_ROOT/debs"
ROOTFS_CACHE="$CACHE_ROOT/gate-rootfs"
mkdir -p "$DEB_CACHE" "$ROOTFS_CACHE"
started_at="$(date +%s)"

if [ ! -f "$PIN_FILE" ]; then
  echo "build.sh: no pin file $PIN_FILE" >&2
  exit 3
fi

# The pins: "name version sha256" lines.
mapfile -t PINS < <(sed -e '/^#/d' -e '/^$/d' "$PIN_FILE")
for line in "${PINS[@]}"; do
  read -r name version sha extra <<<"$line"
  if [ -n "${extra:-}" ] || [ -z "$name" ] || [ -z "$version" ] || ! [[ "$sha" =~ ^[0-9a-f]{64}$ ]]; then
    echo "build.sh: $PIN_FILE is malformed" >&2
    exit 3
  fi
done

TOOLCHAIN_DIGEST=""
TOOLCHAIN_RUSTC=""
if [ "$GATE" = rust ]; then
  tpin() { sed -n "s/^$1=//p" images/gate/rust.toolchain; }
  TOOLCHAIN_NAME="$(tpin toolchain)"
  TOOLCHAIN_RUSTC="$(tpin rustc)"
  TOOLCHAIN_DIGEST="$(tpin manifest_sha256)"
  SYSROOT="${PATCH_CANDIDATE_RUST_SYSROOT:-${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$TOOLCHAIN_NAME}"
  if [ ! -x "$SYSROOT/bin/rustc" ]; then
    echo "build.sh: no toolchain at $SYSROOT (rustup toolchain install ${TOOLCHAIN_NAME%%-*})" >&2
    exit 3
  fi
  toolchain_files() {
    (cd "$SYSROOT" && { echo bin/rustc; echo bin/cargo; find lib -maxdepth 1 -type f -name '*.so*';
      find lib/rustlib/x86_64-unknown-linux-gnu -type f; } | LC_ALL=C sort)
  }
  actual="$(cd "$SYSROOT" && toolchain_files | xargs sha256sum | sha256sum | cut -d' ' -f1)"
  if [ "$actual" != "$TOOLCHAIN_DIGEST" ]; then
    echo "build.sh: toolchain at $SYSROOT has manifest SHA-256 $actual, pinned $TOOLCHAIN_DIGEST" >&2
    exit 3
  fi
fi

# 1. Every .deb, downloaded once with apt (which checks it against the signed index) and checked
#    against its pin on every use.
for line in "${PINS[@]}"; do
  read -r name version sha <<<"$line"
  deb="$DEB_CACHE/$sha.deb"
  if [ ! -f "$deb" ]; then
    dl="$(mktemp -d "$DEB_CACHE/.dl.XXXXXX")"
    echo "build.sh: apt-get download $name=$version" >&2
    if ! (cd "$dl" && apt-get download -qq "$name=$version" >&2); then
      rm -rf "$dl"
      echo "build.sh: $name=$version is not in this host's apt lists (apt-get update, or regenerate the pins with images/gate/pin.sh $GATE)" >&2
      exit 3
    fi
    got=("$dl"/*.deb)
    mv -f "${got[0]}" "$deb.partial"
    rm -rf "$dl"
    mv -f "$deb.partial" "$deb"
  fi
  actual="$(sha256sum "$deb" | cut -d' ' -f1)"
  if [ "$actual" != "$sha" ]; then
    echo "build.sh: $deb has SHA-256 $actual, pinned $sha (delete it to download again)" >&2
    exit 3
  fi
done

# 2. The root file system, cached by the digest of what it is made of.
PINS_SHA256="$(sha256sum "$PIN_FILE" | cut -d' ' -f1)"
KEY="$( { cat "$PIN_FILE"; echo "$TOOLCHAIN_DIGEST"; cat images/gate/build-gate.sh; } | sha256sum | cut -d' ' -f1)"
ROOTFS_TAR="$ROOTFS_CACHE/$KEY.tar"
if [ ! -f "$ROOTFS_TAR" ]; then
  ROOT="$(mktemp -d "$ROOTFS_CACHE/.root.XXXXXX")"
  # Merged /usr, as Debian's installers lay it out.
  mkdir -p "$ROOT/usr/bin" "$ROOT/usr/sbin" "$ROOT/usr/lib" "$ROOT/usr/lib64" "$ROOT/etc"
  for d in bin sbin lib lib64; do ln -s "usr/$d" "$ROOT/$d"; done
  for line in "${PINS[@]}"; do
    read -r name version sha <<<"$line"
    # Only the data; maintainer scripts never run (nothing here is configured at install time).
    dpkg-deb --fsys-tarfile "$DEB_CACHE/$sha.deb" \
      | tar -x --keep-directory-symlink --no-same-owner -C "$ROOT"
  done
  # Documentation other than the licences, manuals and translations: not needed to run tests.
  find "$ROOT/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
  rm -rf "$ROOT/usr/share/man" "$ROOT/usr/share/info" "$ROOT/usr/share/locale"
  if [ "$GATE" = rust ]; then
    # `cc` is an alternative (set up by a maintainer script in a normal install).
    ln -sf gcc "$ROOT/usr/bin/cc"
    mkdir -p "$ROOT/opt/rust" "$ROOT/usr/local/bin"
    (cd "$SYSROOT" && toolchain_files | tar -c --no-recursion -T - -f -) | tar -x -C "$ROOT/opt/rust"
    ln -s /opt/rust/bin/rustc "$ROOT/usr/local/bin/rustc"
    ln -s /opt/rust/bin/cargo "$ROOT/usr/local/bin/cargo"
  fi
  # The gate runner's mount points (Docker gives a tmpfs over an image directory that directory's
  # mode) and a passwd for tools that look the user up.
  mkdir -p "$ROOT/workspace" "$ROOT/tmp"
  chmod 1777 "$ROOT/workspace" "$ROOT/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:10001:10001:sandbox:/tmp:/bin/sh\n' > "$ROOT/etc/passwd"
  printf 'root:x:0:\nsandbox:x:10001:\n' > "$ROOT/etc/group"
  chmod 0644 "$ROOT/etc/passwd" "$ROOT/etc/group"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$ROOT" -cf "$ROOTFS_TAR.partial" .
  rm -rf "$ROOT"
  mv -f "$ROOTFS_TAR.partial" "$ROOTFS_TAR"
fi

# 3. The base image: imported once per root file system (an import makes a new ID each time).
BASE="patch-candidate-gate-base-$GATE:${KEY:0:16}"
if ! docker_cli image inspect "$BASE" >/dev/null 2>&1; then
  echo "build.sh: docker import $BASE" >&2
  docker_cli import "$ROOTFS_TAR" "$BASE" >/dev/null
fi

# 4. The gate image: the base, the static runner, the layout.
src="$BIN_DIR/gate-runner"
if [ ! -x "$src" ] || readelf -l "$src" | grep -q "program interpreter"; then
  echo "build.sh: $src is missing or not statically linked" >&2
  exit 3
fi
strip --strip-all -o "$CTX/gate-runner" "$src"
chmod 0555 "$CTX/gate-runner"
touch -d @0 "$CTX/gate-runner"
mkdir -p "$CTX/layout/workspace" "$CTX/layout/tmp"
chmod 0755 "$CTX/layout"
chmod 1777 "$CTX/layout/workspace" "$CTX/layout/tmp"
find "$CTX/layout" -exec touch -h -d @0 {} +
cp "images/gate/$GATE.Dockerfile" "$CTX/Dockerfile"
printf 'Dockerfile\n' > "$CTX/.dockerignore"

echo "build.sh: docker build $GATE_IMAGE" >&2
DOCKER_BUILDKIT=0 docker_cli build --quiet "${CACHE[@]}" --build-arg "BASE=$BASE" \
  --tag "$GATE_IMAGE" --file "$CTX/Dockerfile" "$CTX" >&2
GATE_ID="$(docker_cli image inspect --format '{{.Id}}' "$GATE_IMAGE")"
if ! [[ "$GATE_ID" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "build.sh: unexpected image id" >&2
  exit 3
fi
GATE_SIZE="$(docker_cli image inspect --format '{{.Size}}' "$GATE_IMAGE")"
echo "build.sh: $GATE_IMAGE is $GATE_SIZE bytes, built in $(( $(date +%s) - started_at )) s" >&2

# 5. The record: one entry per gate image name in gate-images.json, the others kept.
existing="$STATE_DIR/gate-images.json"
python3 - "$existing" "$GATE" "$GATE_IMAGE" "$GATE_ID" "$REV" "sha256:$PINS_SHA256" \
  "${#PINS[@]}" "$TOOLCHAIN_RUSTC" "${TOOLCHAIN_DIGEST:+sha256:$TOOLCHAIN_DIGEST}" <<'PY' | record_state gate-images.json
import json, os, sys

path, name, image, image_id, rev, pins, count, rustc, toolchain = sys.argv[1:]
state = {"gates": {}}
if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
state["gates"][name] = {
    "origin": "built",
    "image": image,
    "image_id": image_id,
    "source_revision": rev,
    "pins_sha256": pins,
    "packages": int(count),
    "toolchain": ({"rustc": rustc, "manifest_sha256": toolchain} if toolchain else None),
}
print(json.dumps(state, sort_keys=True))
PY

echo "$GATE_IMAGE $GATE_ID"
