#!/usr/bin/env bash
# Proof image benchmarks: image size, cold `docker run` of a no-op turn with the hardened flags
# (reference §10.4) against a bare container start, and the runner's own stdin→stdout time on a
# 50-file payload against the agent-free baseline. Needs hyperfine (shell mode: its measured
# shell start-up is subtracted), python3 and a Docker daemon.
#
#   bash benches/image/run.sh              (cargo build + images/build.sh first)
#   bash benches/image/run.sh --prebuilt   (images from the binaries already in target/)
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=target/x86_64-unknown-linux-gnu/release
if [ "${1:-}" = "--prebuilt" ]; then
  bash images/build.sh --bin-dir "$BIN" >/dev/null
else
  bash images/build.sh >/dev/null
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

HARD=(--init --network none --read-only --log-driver none --cap-drop ALL
  --security-opt no-new-privileges --pids-limit 64 --memory 768m --cpus 1
  --tmpfs /tmp:rw,nosuid,nodev,size=64m,mode=1777
  --tmpfs /workspace:rw,nosuid,nodev,size=64m,mode=1777
  --tmpfs /home/sandbox:rw,nosuid,nodev,size=16m,mode=1777
  --user 10001:10001)

python3 benches/image/make_payload.py 50 2048 noop > "$WORK/noop-50.json"
python3 benches/image/make_payload.py 50 2048 edit-all > "$WORK/edit-50.json"
python3 benches/image/make_payload.py 50 160000 edit-all > "$WORK/edit-50-large.json"
python3 benches/image/make_payload.py 6 64 noop > "$WORK/noop-small.json"

echo "== image size"
docker image inspect --format '{{.Size}} bytes  {{len .RootFS.Layers}} layers  {{.Id}}' patch-candidate-proof:local
docker image inspect --format '{{.Size}} bytes  (hostile, test-only)' patch-candidate-proof-hostile:local
ls -l "$BIN/turn-runner" "$BIN/fake-agent" | awk '{print $5, $9, "(unstripped)"}'

echo "== runner stdin→stdout on host (50 files)"
hyperfine --warmup 3 --runs 30 \
  --command-name "baseline: static binary reads the payload, prints nothing" \
  "$BIN/hostile-entry print-nothing < $WORK/noop-50.json" \
  --command-name "runner noop, 50 files x 2 KiB" \
  "$BIN/turn-runner --workspace-root $WORK --agent $PWD/$BIN/fake-agent < $WORK/noop-50.json" \
  --command-name "runner edit-all, 50 files x 2 KiB (45 ACP read+write, archive)" \
  "$BIN/turn-runner --workspace-root $WORK --agent $PWD/$BIN/fake-agent < $WORK/edit-50.json" \
  --command-name "runner edit-all, 50 files x 156 KiB (7.6 MiB payload)" \
  "$BIN/turn-runner --workspace-root $WORK --agent $PWD/$BIN/fake-agent < $WORK/edit-50-large.json" \
  --output=null

echo "== cold docker run, hardened flags"
hyperfine --warmup 2 --runs 15 \
  --command-name "baseline: hostile image print-nothing (bare container start)" \
  "docker run -i --rm ${HARD[*]} patch-candidate-proof-hostile:local print-nothing < $WORK/noop-small.json" \
  --command-name "proof image no-op turn" \
  "docker run -i --rm ${HARD[*]} patch-candidate-proof:local < $WORK/noop-small.json" \
  --command-name "proof image edit-all turn, 50 files" \
  "docker run -i --rm ${HARD[*]} patch-candidate-proof:local < $WORK/edit-50.json" \
  --output=null

echo "== peak memory of the runner (edit-all, 50 x 156 KiB)"
/usr/bin/time -v "$BIN/turn-runner" --workspace-root "$WORK" --agent "$PWD/$BIN/fake-agent" \
  < "$WORK/edit-50-large.json" 2>&1 >/dev/null | grep -E "Maximum resident|Elapsed"
