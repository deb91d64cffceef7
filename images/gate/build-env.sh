# Sourced by images/build.sh --gate python --requirements FILE [--name NAME] (not run on its own):
# builds a python environment image, the python gate image plus the third-party packages of a
# hash-pinned requirements file, and records it in $STATE_DIR/gate-images.json under NAME
# (default python-env). Uses build.sh's docker_cli, record_state, CACHE, CTX, REV, BIN_DIR,
# REQUIREMENTS and ENV_NAME; builds (or reuses) the python gate image with build-gate.sh first.
#
# 1. The inputs' digest: the requirements file, the pip pin, the python pins, the gate runner
#    binary and every script and Dockerfile of the build. When gate-images.json already records
#    NAME with that digest and the daemon still holds its image ID, that record is the answer
#    (a lookup, no build).
# 2. The wheels: images/gate/wheels.py reads the requirements strictly (every line pinned with ==
#    and --hash=sha256:...), downloads the missing wheels once (never an sdist) into
#    $CACHE_ROOT/wheels/<sha256>/, and copies the checked wheels into the build context.
# 3. The image: images/gate/python-env.Dockerfile FROM the python gate image, built with
#    `docker build --network none`: pip, run from its pinned wheel, installs offline with
#    --require-hashes; only /usr/local reaches the final image.

ENV_IMAGE="${ENV_IMAGE_TAG:-patch-candidate-env-$ENV_NAME:local}"
ENV_CACHE_ROOT="${PATCH_CANDIDATE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/patch-candidate}"
env_started_at="$(date +%s%N)"

if [ ! -f "$REQUIREMENTS" ]; then
  echo "build.sh: no requirements file $REQUIREMENTS" >&2
  exit 3
fi
# Refused early, before anything is built or downloaded (the same parser as the download).
python3 images/gate/wheels.py check "$REQUIREMENTS" >/dev/null

sha_of() { sha256sum "$1" | cut -d' ' -f1; }
REQUIREMENTS_SHA256="$(sha_of "$REQUIREMENTS")"
if [ ! -x "$BIN_DIR/gate-runner" ]; then
  echo "build.sh: missing binary $BIN_DIR/gate-runner" >&2
  exit 3
fi
ENV_KEY="$( {
  echo "requirements $REQUIREMENTS_SHA256"
  echo "gate-runner $(strip --strip-all -o - "$BIN_DIR/gate-runner" | sha256sum | cut -d' ' -f1)"
  for f in images/gate/pip.pin images/gate/python.pin images/gate/python.Dockerfile \
    images/gate/python-env.Dockerfile images/gate/build-gate.sh images/gate/build-env.sh \
    images/gate/wheels.py; do
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

# The python gate image underneath (cached by its own pins; records the `python` entry too).
source images/gate/build-gate.sh
BASE_ID="$GATE_ID"

# 2. The wheels, into a fresh context.
ENV_CTX="$(mktemp -d)"
trap 'rm -rf "$CTX" "$CLI_CONFIG" "$MESSAGES" "$ENV_CTX"' EXIT
mkdir -p "$ENV_CTX/env"
WHEELS_JSON="$(python3 images/gate/wheels.py prepare "$REQUIREMENTS" images/gate/pip.pin \
  "$ENV_CACHE_ROOT/wheels" "$ENV_CTX/env")"
WHEELS_COUNT="$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["wheels"])' "$WHEELS_JSON")"
find "$ENV_CTX/env" -exec touch -h -d @0 {} +
cp images/gate/python-env.Dockerfile "$ENV_CTX/Dockerfile"
printf 'Dockerfile\n' > "$ENV_CTX/.dockerignore"

# 3. The image, offline.
echo "build.sh: docker build --network none $ENV_IMAGE ($WHEELS_COUNT wheels)" >&2
DOCKER_BUILDKIT=0 docker_cli build --quiet --network none "${CACHE[@]}" --build-arg "BASE=$BASE_ID" \
  --tag "$ENV_IMAGE" --file "$ENV_CTX/Dockerfile" "$ENV_CTX" >&2
ENV_ID="$(docker_cli image inspect --format '{{.Id}}' "$ENV_IMAGE")"
if ! [[ "$ENV_ID" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "build.sh: unexpected image id" >&2
  exit 3
fi
ENV_SIZE="$(docker_cli image inspect --format '{{.Size}}' "$ENV_IMAGE")"
echo "build.sh: $ENV_IMAGE is $ENV_SIZE bytes, built in $(( ($(date +%s%N) - env_started_at) / 1000000 )) ms" >&2

# 4. The record: the python gate image's fields plus what the environment was built from.
python3 - "$STATE_DIR/gate-images.json" "$ENV_NAME" "$ENV_IMAGE" "$ENV_ID" "$BASE_ID" \
  "sha256:$REQUIREMENTS_SHA256" "$WHEELS_COUNT" "sha256:$ENV_KEY" <<'PY' | record_state gate-images.json
import json, sys

path, name, image, image_id, base_id, requirements, wheels, key = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    state = json.load(f)
record = dict(state["gates"]["python"])
if record.get("image_id") != base_id:
    sys.exit("build.sh: the python gate record does not name the image just built")
record.update({
    "image": image,
    "image_id": image_id,
    "environment": {
        "stack": "python",
        "base_image_id": base_id,
        "requirements_sha256": requirements,
        "wheels": int(wheels),
        "inputs_sha256": key,
    },
})
state["gates"][name] = record
print(json.dumps(state, sort_keys=True))
PY

echo "$ENV_IMAGE $ENV_ID"
