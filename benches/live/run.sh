#!/usr/bin/env bash
# Host peak RSS of the live loop over the frame-pattern corpus (issue 22): a simulated container
# (the recording fake runtime) opens channels whose model requests a stalled scripted upstream
# holds, then floods them with DATA frames. The example prints the turn's outcome code and VmHWM;
# /usr/bin/time -v gives "Maximum resident set size" for the whole process.
#
#   big          1 channel,  8 MiB in 64 KiB frames (the reference shape)
#   one          1 channel,  ~8 M one-byte frames (the per-channel cap)
#   two          2 channels, ~8 M one-byte frames each, one after the other
#   interleaved  2 channels, ~8 M one-byte frames each, alternating
#   many         16 channels (the open cap), 512 KiB of one-byte frames each, round robin
#   wide         8 channels, ~8 M one-byte frames each (the per-turn 64 MiB cap), round robin
#
# usage: [PATTERNS="…"] benches/live/run.sh [BIN…]
#   BIN defaults to this tree's live_frames example (built here); give a second binary built from
#   another commit to compare side by side. Needs GNU time.
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
  cargo build --release --locked -p turn --example live_frames >&2
  bins=("$target/x86_64-unknown-linux-gnu/release/examples/live_frames")
  [ -x "${bins[0]}" ] || bins=("$target/release/examples/live_frames")
fi
read -r -a patterns <<<"${PATTERNS:-big one two interleaved many wide}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for bin in "${bins[@]}"; do
  echo "== $bin"
  for p in "${patterns[@]}"; do
    /usr/bin/time -f "$p: peak RSS %M KB, wall %e s" "$bin" "$p"
  done
done
