#!/usr/bin/env bash
# A complete live turn with the scripted upstream (real codex-acp in the live image, two model
# requests: an apply_patch edit, then "Done."): wall time and host peak RSS of `run --live`.
# Usage: bash benches/gateway/live_turn.sh IMAGE IMAGE_ID [RUNS]   (default 5 runs)
# Needs the live image (`patch-candidate image build --live`) and the release binaries
# (`cargo build --release --locked --workspace --bins` and the gateway's scripted_upstream
# example, built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
image="$1"; image_id="$2"; runs="${3:-5}"
cargo build --release --locked -p gateway --features testkit --example scripted_upstream >&2
bin=target/x86_64-unknown-linux-gnu/release
. benches/live/scratch_repo.sh
printf 'sk-bench-not-a-key\n' > "$work/key"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$runs"); do
  "$bin/examples/scripted_upstream" edit src/app.py "    return 1" "    return 2" > "$work/up$i.log" &
  up=$!
  until grep -q "/v1$" "$work/up$i.log" 2>/dev/null; do sleep 0.1; done
  url="$(head -1 "$work/up$i.log")"
  /usr/bin/time -f "run $i: wall %e s, peak RSS %M KB" "$bin/patch-candidate" run --live \
    --model gpt-5.3-codex --upstream "$url" --credential-file "$work/key" \
    --repo "$work/repo" --approval "$work/approval.json" --image "$image" --image-id "$image_id" \
    --no-ledger 2>&1 >/dev/null | grep -E "^run |turn [0-9]+ ms|gateway:|[A-Z_]{12,}: " || true
  kill "$up"; wait "$up" 2>/dev/null || true; up=
done
