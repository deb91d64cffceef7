#!/usr/bin/env bash
# One agent's live image and a cold live turn with the scripted upstream: the image size, then
# RUNS turns of `patch-candidate run --live --agent AGENT` (the real agent in its live image under
# the turn's full container spec, two model requests through the tunnel and the gateway: an edit,
# then "Done."), each with its wall time and the host peak RSS of `patch-candidate`
# (`/usr/bin/time -v`).
# Usage: bash benches/live/agent_turn.sh AGENT IMAGE IMAGE_ID [RUNS]   (AGENT: codex | gemini | claude)
# Needs the agent's live image (`patch-candidate image build --live --agent AGENT`) and the
# release binaries (`cargo build --release --locked --workspace --bins`; the gateway's
# scripted_upstream example is built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
agent="$1"; image="$2"; image_id="$3"; runs="${4:-3}"
case "$agent" in
  codex) model=${BENCH_MODEL:-gpt-5.5}; flag=(); suffix=/v1 ;;
  gemini) model=gemini-2.5-flash; flag=(--gemini); suffix=/v1 ;;
  claude) model=claude-sonnet-4-5; flag=(--claude); suffix=/v1 ;;
  *) echo "agent_turn.sh: AGENT is codex, gemini or claude" >&2; exit 2 ;;
esac
cargo build --release --locked -p gateway --features testkit --example scripted_upstream >&2
bin="${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/release"
. benches/live/scratch_repo.sh
printf 'bench-not-a-key\n' > "$work/key"
echo "agent $agent, image $image: $(docker image inspect --format '{{.Size}}' "$image") bytes"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  "$bin/examples/scripted_upstream" "${flag[@]}" edit src/app.py "return 1" "return 2" > "$work/up$i.log" &
  up=$!
  until grep -q "$suffix\$" "$work/up$i.log" 2>/dev/null; do sleep 0.1; done
  url="$(head -1 "$work/up$i.log")"
  /usr/bin/time -v -o "$work/time$i" "$bin/patch-candidate" run --live --agent "$agent" \
    --model "$model" --upstream "$url" --credential-file "$work/key" \
    --repo "$work/repo" --approval "$work/approval.json" --image "$image" --image-id "$image_id" \
    --no-ledger --json > "$work/out$i.json" 2> "$work/err$i" || true
  wall="$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$work/time$i")"
  rss="$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$work/time$i")"
  requests="$(grep -c "^POST " "$work/up$i.log" || true)"
  tokens="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("gateway",{}).get("gateway",{}).get("total_tokens","-"))' "$work/out$i.json" 2>/dev/null || echo -)"
  status="$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("digest") or d.get("code") or "-")' "$work/out$i.json" 2>/dev/null || echo -)"
  echo "run $i: wall $wall, peak RSS $rss KB, $requests model requests, $tokens tokens, $status"
  [ -s "$work/err$i" ] && [ "$status" = - ] && tail -3 "$work/err$i" >&2
  kill "$up"; wait "$up" 2>/dev/null || true; up=
done
