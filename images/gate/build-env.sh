# Sourced by images/build.sh --gate python --requirements FILE or --gate rust --cargo-lock FILE
# [--name NAME] (not run on its own): builds an environment image, the stack's gate image plus the
# repository's third-party dependencies pinned by its lockfile, and records it in
# $STATE_DIR/gate-images.json under NAME (default python-env or rust-env). Uses build.sh's
# docker_cli, record_state, CACHE, CTX, REV, BIN_DIR, GATE, LOCKFILE and ENV_NAME; builds (or
# reuses) the stack's gate image with build-gate.sh first.
#
# 1. The inputs' digest: the lockfile, the pins (pip's and the stack's), the gate runner binary
#    and every script and Dockerfile of the build. When gate-images.json already records NAME
#    with that digest and the daemon still holds its image ID, that record is the answer (a
#    lookup, no build).
# 2. The dependencies, checked on this host against the lockfile's SHA-256s, downloaded once and
#    cached outside the repository by their SHA-256:
#    python: images/gate/wheels.py reads the requirements strictly (every line pinned with == and
#      --hash=sha256:...), downloads the missing wheels (never an sdist) into
#      $CACHE_ROOT/wheels/<sha256>/, and copies the checked wheels into the build context;
#    rust: images/gate/crates.py reads Cargo.lock strictly (crates.io packages with checksums
#      only), downloads the missing .crate archives into $CACHE_ROOT/crates/<sha256>.crate and
#      vendors them into the build context as `cargo vendor` does.
# 3. The image: images/gate/<stack>-env.Dockerfile FROM the stack's gate image, built with
#    `docker build --network none`. python: pip, run from its pinned wheel, installs offline with
#    --require-hashes, and only /usr/local reaches the final image; rust: the vendored crates
#    under /usr/local/share/cargo-vendor and /.cargo/config.toml replacing crates.io with them,
#    offline, so `cargo test --offline --frozen` builds the repository's dependencies.

ENV_IMAGE="${ENV_IMAGE_TAG:-patch-candidate-env-$ENV_NAME:local}"
ENV_CACHE_ROOT="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}"
env_started_at="$(date +%s%N)"

case "$GATE" in
  python) ENV_TOOL=images/gate/wheels.py; ENV_PINS=(images/gate/pip.pin images/gate/python.pin) ;;
  rust) ENV_TOOL=images/gate/crates.py; ENV_PINS=(images/gate/rust.pin images/gate/rust.toolchain) ;;
esac
if [ ! -f "$LOCKFILE" ]; then
  echo "build.sh: no lockfile $LOCKFILE" >&2
  exit 3
fi
# Refused early, before anything is built or downloaded (the same parser as the download).
python3 "$ENV_TOOL" check "$LOCKFILE" >/dev/null

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
LOCKFILE_SHA256="$(sha_of "$LOCKFILE")"
if [ ! -x "$BIN_DIR/gate-runner" ]; then
  echo "build.sh: missing binary $BIN_DIR/gate-runner" >&2
  exit 3
fi
ENV_KEY="$( {
  echo "stack $GATE"
  echo "lockfile $LOCKFILE_SHA256"
  # `strip -o -` would write a file named `-`: the stripped copy goes to the build context.
  strip --strip-all -o "$CTX/gate-runner.key" "$BIN_DIR/gate-runner"
  echo "gate-runner $(sha_of "$CTX/gate-runner.key")"
  rm -f "$CTX/gate-runner.key"
  for f in "${ENV_PINS[@]}" "images/gate/$GATE.Dockerfile" "images/gate/$GATE-env.Dockerfile" \
    images/gate/build-gate.sh images/gate/build-env.sh "$ENV_TOOL"; do
    echo "$f $(sha_of "$f")"
  done
} | sha256sum | cut -d' ' -f1)"

# 1. A cache hit: the record names these inputs and the daemon holds the image.
hit_id="$(python3 - "$STATE_DIR/gate-images.json" "$ENV_NAME" "sha256:$ENV_KEY" <<'PY'
import json, os, sys

path, name, key = sys.argv[1:]
try:
    with open(path, encoding="utf-8") as f:
        record = json.load(f)["gates"][name]
    if record["environment"]["inputs_sha256"] == key:
        print(record["image_id"])
except (OSError, ValueError, KeyError, TypeError):
    pass
PY
)"
if [ -n "$hit_id" ] && [ "$(docker_cli image inspect --format '{{.Id}}' "$hit_id" 2>/dev/null)" = "$hit_id" ]; then
  # The tag follows the recorded ID (a rebuild elsewhere may have moved it).
  docker_cli tag "$hit_id" "$ENV_IMAGE" >/dev/null
  echo "build.sh: $ENV_NAME is up to date (inputs sha256:${ENV_KEY:0:16}…), no build" >&2
  echo "$ENV_IMAGE $hit_id"
  return 0
fi

# The stack's gate image underneath (cached by its own pins; records the stack's entry too).
source images/gate/build-gate.sh
BASE_ID="$GATE_ID"

# 2. The dependencies, into a fresh context.
ENV_CTX="$(mktemp -d)"
trap 'rm -rf "$CTX" "$CLI_CONFIG" "$MESSAGES" "$ENV_CTX"' EXIT
mkdir -p "$ENV_CTX/env"
case "$GATE" in
  python)
    PREPARED="$(python3 images/gate/wheels.py prepare "$LOCKFILE" images/gate/pip.pin \
      "$ENV_CACHE_ROOT/wheels" "$ENV_CTX/env")"
    PACKAGES_KEY=wheels ;;
  rust)
    PREPARED="$(python3 images/gate/crates.py prepare "$LOCKFILE" "$ENV_CACHE_ROOT/crates" "$ENV_CTX/env")"
    # crates.io replaced by the vendored crates, and cargo offline whatever its flags say.
    printf '%s\n' '[source.crates-io]' 'replace-with = "vendored-sources"' '' \
      '[source.vendored-sources]' 'directory = "/usr/local/share/cargo-vendor"' '' \
      '[net]' 'offline = true' > "$ENV_CTX/env/config.toml"
    PACKAGES_KEY=crates ;;
esac
PACKAGES_COUNT="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$PREPARED" "$PACKAGES_KEY")"
find "$ENV_CTX/env" -exec touch -h -d @0 {} +
cp "images/gate/$GATE-env.Dockerfile" "$ENV_CTX/Dockerfile"
printf 'Dockerfile\n' > "$ENV_CTX/.dockerignore"

# 3. The image, offline.
echo "build.sh: docker build --network none $ENV_IMAGE ($PACKAGES_COUNT $PACKAGES_KEY)" >&2
DOCKER_BUILDKIT=0 docker_cli build --quiet --network none "${CACHE[@]}" --build-arg "BASE=$BASE_ID" \
  --tag "$ENV_IMAGE" --file "$ENV_CTX/Dockerfile" "$ENV_CTX" >&2
ENV_ID="$(docker_cli image inspect --format '{{.Id}}' "$ENV_IMAGE")"
if ! [[ "$ENV_ID" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "build.sh: unexpected image id" >&2
  exit 3
fi
ENV_SIZE="$(docker_cli image inspect --format '{{.Size}}' "$ENV_IMAGE")"
echo "build.sh: $ENV_IMAGE is $ENV_SIZE bytes, built in $(( ($(date +%s%N) - env_started_at) / 1000000 )) ms" >&2

# 4. The record: the stack's gate image fields plus what the environment was built from.
python3 - "$STATE_DIR/gate-images.json" "$GATE" "$ENV_NAME" "$ENV_IMAGE" "$ENV_ID" "$BASE_ID" \
  "sha256:$LOCKFILE_SHA256" "$PACKAGES_COUNT" "sha256:$ENV_KEY" <<'PY' | record_state gate-images.json
import json, sys

path, stack, name, image, image_id, base_id, lockfile, packages, key = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    state = json.load(f)
record = dict(state["gates"][stack])
if record.get("image_id") != base_id:
    sys.exit(f"build.sh: the {stack} gate record does not name the image just built")
record.update({
    "image": image,
    "image_id": image_id,
    "environment": {
        "stack": stack,
        "base_image_id": base_id,
        "lockfile_sha256": lockfile,
        "packages": int(packages),
        "inputs_sha256": key,
    },
})
state["gates"][name] = record
print(json.dumps(state, sort_keys=True))
PY

echo "$ENV_IMAGE $ENV_ID"
