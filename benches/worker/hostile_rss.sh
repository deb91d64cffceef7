#!/usr/bin/env bash
# Host peak RSS (`/usr/bin/time -v`, "Maximum resident set size") of `patch-candidate run` over the
# hostile output shapes, next to a normal turn, in one run. Each shape is a hostile-image mode
# `shape-<kind>-<position>` (images/turn-runner/src/hostile.rs): the `valid` document with the
# value at <position> replaced by <kind>, filled to 39,900,000 bytes (the stdout cap is
# 40,000,000). Every shape must be refused; the table shows the exit status, the error code and
# the peak RSS of each binary given.
#
# usage: [KINDS="…"] [POSITIONS="…"] benches/worker/hostile_rss.sh [BIN…]
#   BIN defaults to this tree's target/x86_64-unknown-linux-gnu/release/patch-candidate; give an
#   older build as a second BIN to compare side by side. Needs Docker, python3, GNU time and the
#   images (images/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=("$@")
[ ${#bins[@]} -eq 0 ] && bins=("$PWD/target/x86_64-unknown-linux-gnu/release/patch-candidate")
state="${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$state/images.json" "$1"; }
image="$(field image)"
image_id="$(field image_id)"
hostile="$(field hostile_image)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
bash fixtures/demo/make-demo.sh "$work/demo" "${bins[0]}" >/dev/null
commit="$(cat "$work/demo/commit")"

# KINDS / POSITIONS (space-separated) narrow the corpus; the default is every shape.
read -r -a kinds <<<"${KINDS:-widearray wideobject deep hugestring hugeescaped}"
read -r -a positions <<<"${POSITIONS:-usage proposalid summary ownedpaths changedfiles content commands events eventsummary archive}"

# One tag per shape: FROM the hostile image, CMD [mode].
tag_for() {
  local mode="$1" tag="patch-candidate-bench-$1:bench"
  printf 'FROM %s\nCMD ["%s"]\n' "$hostile" "$mode" | docker build -q -t "$tag" - >/dev/null
  echo "$tag $(docker image inspect --format '{{.Id}}' "$tag")"
}

# run BIN TAG ID -> "exit code rss_kib"
run_one() {
  local bin="$1" tag="$2" id="$3"
  set +e
  /usr/bin/time -v -o "$work/time" "$bin" run --repo "$work/demo/repo" --commit "$commit" \
    --approval "$work/demo/approval.json" --task "$(cat "$work/demo/task")" \
    --image "$tag" --image-id "$id" --store "$work/store" --no-ledger --json \
    >"$work/out" 2>"$work/err"
  local status=$?
  set -e
  local code
  code="$(python3 -c 'import json,sys
try:
    d = json.load(open(sys.argv[1]))
    print(d.get("error", {}).get("code") or d.get("code") or ("ok" if "digest" in d else "?"))
except Exception:
    print("?")' "$work/out")"
  if [ "$code" = "?" ]; then code="$(head -c 60 "$work/err" | tr -d '\n' | cut -d: -f1)"; fi
  local rss
  rss="$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/time")"
  echo "$status $code $rss"
}

header="| output | "
for b in "${bins[@]}"; do header+="$(basename "$b"): exit, code, peak RSS | "; done
echo "$header"
echo "|---|$(for _ in "${bins[@]}"; do printf -- '---|'; done)"

row() {
  local label="$1" tag="$2" id="$3" line="| $1 | "
  for b in "${bins[@]}"; do
    read -r status code rss < <(run_one "$b" "$tag" "$id")
    line+="$status, $code, $(awk -v k="$rss" 'BEGIN {printf "%.1f MiB", k/1024}') | "
  done
  echo "$line"
}

row "normal turn (proof image)" "$image" "$image_id"
for kind in "${kinds[@]}"; do
  for position in "${positions[@]}"; do
    read -r tag id < <(tag_for "shape-$kind-$position")
    row "$kind in $position" "$tag" "$id"
    docker image rm -f "$tag" >/dev/null
  done
done
