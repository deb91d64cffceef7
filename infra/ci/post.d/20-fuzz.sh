#!/usr/bin/env bash
# The fuzz targets (fuzz/, outside the workspace, with its own lock file): the archive reader and
# paths, the gate wire contract, the tunnel's frame decoder and the gateway's request parsers and
# SSE usage scanner. On every run it:
#
# 1. compiles the cargo-fuzz targets with the stable toolchain (libFuzzer linked, no sanitizers),
#    so a change that breaks a target fails CI even where no nightly toolchain exists;
# 2. runs the same target bodies with the stable corpus runner over the seed corpora
#    (fixtures/hostile-zips/ and any fuzz/corpus/<target>/) plus deterministic mutations of every
#    seed, and random inputs (the gate, tunnel and gateway seeds are written here): a crash or a
#    failed invariant fails CI, and the input is kept in target/fuzz/artifacts;
# 3. where a nightly toolchain and cargo-fuzz are installed, also fuzzes each target for a short
#    while with coverage guidance.
set -euo pipefail
cd "$(dirname "$0")/../../.."

manifest=fuzz/Cargo.toml
target_dir=target/fuzz
cargo build --release --locked --manifest-path "$manifest" --target-dir "$target_dir" --bins
echo "fuzz: archive_reader, archive_paths, gate_wire, tunnel_decoder, gateway_http, gateway_sse and forge_webhook compile with $(rustc --version)" >&2

corpora() {
  local target=$1
  shift
  local dirs=("$@")
  if [ -d "fuzz/corpus/$target" ]; then
    dirs+=("fuzz/corpus/$target")
  fi
  printf '%s\n' "${dirs[@]}"
}
# Built by the same `--bins` build (it does not link libFuzzer).
runner() {
  "$target_dir/x86_64-unknown-linux-gnu/release/corpus" "$@" --artifacts "$target_dir/artifacts"
}
mapfile -t reader_seeds < <(corpora archive_reader fixtures/hostile-zips)
mapfile -t paths_seeds < <(corpora archive_paths fixtures/hostile-zips)
runner archive_reader --mutations 64 "${reader_seeds[@]}"
runner archive_paths --mutations 16 --random 4000 "${paths_seeds[@]}"

# The gate wire target: seeds written here (a canonical report, its frame, a request, JUnit
# documents benign and hostile), then their mutations and random inputs.
gate_seeds="$(mktemp -d)"
python3 - "$gate_seeds" <<'PY'
import json, struct, sys
out = sys.argv[1]
def canon(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
nonce = "ab" * 32
report = {"version": 1, "nonce": nonce, "status": "completed", "runner_error": None,
          "exit": {"code": 1}, "wall_ms": 12,
          "log": {"total_bytes": 5, "tail_b64": "dGFpbAo="},
          "junit": {"state": "ok", "truncated": False,
                    "cases": [{"id": "t::a", "outcome": "failed"}, {"id": "t::b", "outcome": "passed"}]}}
request = {"version": 1, "nonce": nonce, "argv": ["python3", "-m", "pytest"], "cwd": ".",
           "env": [["HOME", "/tmp"], ["PATH", "/usr/bin:/bin"]], "wall_ms": 60000,
           "kill_grace_ms": 2000, "log_tail_bytes": 65536,
           "junit": {"path": "out/j.xml", "max_bytes": 1048576, "max_cases": 100, "max_depth": 16},
           "tree": {"entries": 3, "bytes": 100}}
seeds = {
    "report.json": canon(report),
    "report.frame": struct.pack(">I", len(canon(report))) + canon(report),
    "timed-out.json": canon(dict(report, status="timed_out", exit={"signal": 9}, junit=None)),
    "runner-error.json": canon(dict(report, status="runner_error", runner_error="GATE_RUNNER_TREE", exit=None, junit=None)),
    "request.json": canon(request),
    "junit.xml": b'<testsuites><testsuite><testcase classname="t" name="a"><failure/></testcase><testcase name="b"/></testsuite></testsuites>',
    "junit-doctype.xml": b'<!DOCTYPE x [<!ENTITY a "b">]><testsuites><testcase name="&a;"/></testsuites>',
    "junit-deep.xml": b"<testsuites>" + b"<a>" * 40 + b"</a>" * 40 + b"</testsuites>",
}
for name, data in seeds.items():
    with open(f"{out}/{name}", "wb") as f:
        f.write(data)
PY
mapfile -t wire_seeds < <(corpora gate_wire "$gate_seeds")
runner gate_wire --mutations 64 --random 2000 "${wire_seeds[@]}"
rm -rf "$gate_seeds"

# The tunnel decoder and the gateway's parsers: seeds written here (frame streams of every type,
# valid and hostile; requests of each provider with their bodies; SSE streams and JSON answers
# with each provider's usage events), then their mutations and random inputs.
live_seeds="$(mktemp -d)"
python3 - "$live_seeds" <<'PY'
import json, os, struct, sys
out = sys.argv[1]
for d in ("tunnel", "http", "sse"):
    os.makedirs(f"{out}/{d}")
def frame(kind, channel, payload=b""):
    return struct.pack(">BII", kind, channel, len(payload)) + payload
hello = frame(0x01, 0, b"patch-candidate.tunnel.v1")
tunnel = {
    "worker-to-container": hello + frame(0x02, 0, b'{"turn":1}') + frame(0x03, 0) + frame(0x11, 1, b"HTTP/1.1 200 OK\r\n\r\n") + frame(0x12, 1) + frame(0x21, 0),
    "container-to-worker": hello + frame(0x10, 1) + frame(0x11, 1, b"GET / HTTP/1.1\r\n\r\n") + frame(0x12, 1) + frame(0x13, 2, b"PATCH_CANDIDATE_X") + frame(0x20, 0, b'{"kind":"progress"}') + frame(0x30, 0, b'{"ok":true}') + frame(0x31, 0),
    "truncated": hello + frame(0x11, 1, b"abcdef")[:-3],
    "oversize": struct.pack(">BII", 0x11, 1, 65537),
    "bad-type": frame(0x7f, 0),
    "bad-channel": frame(0x02, 5, b"x"),
    "bad-hello": frame(0x01, 0, b"patch-candidate.tunnel.v0"),
    "event-not-object": frame(0x20, 0, b"[1]"),
    "reset-not-ascii": frame(0x13, 1, "\u00e9".encode()),
}
def request(target, body, extra=b""):
    return (b"POST " + target + b" HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
            + extra + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
responses = json.dumps({"model": "gpt-5.3-codex", "stream": True, "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
                        "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]}).encode()
anthropic = json.dumps({"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 64, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}).encode()
gemini = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}, {"fileData": {"fileUri": "gs://x/y"}}]}], "tools": [{"functionDeclarations": [{"name": "f"}]}]}).encode()
http = {
    "responses": request(b"/v1/responses", responses, b"openai-beta: responses=experimental\r\n"),
    "anthropic": request(b"/v1/messages?beta=true", anthropic, b"anthropic-version: 2023-06-01\r\n"),
    "anthropic-count": request(b"/v1/messages/count_tokens?beta=true", anthropic),
    "anthropic-models": b"GET /v1/models?limit=1000 HTTP/1.1\r\nhost: localhost\r\n\r\n",
    "gemini": request(b"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", gemini),
    "smuggle": b"POST /v1/responses HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\nabc",
    "obs-fold": b"POST /v1/responses HTTP/1.1\r\nhost: a\r\n b\r\n\r\n",
    "bare-lf": b"POST /v1/responses HTTP/1.1\nhost: a\n\n",
    "upgrade": b"GET /v1/models HTTP/1.1\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
    "body-deep": b"[" * 40 + b"]" * 40,
    "body-duplicate-model": b'{"model":"gpt-5.3-codex","model":"other","stream":true}',
    "body-url": b'{"model":"gpt-5.3-codex","stream":true,"input":[{"type":"input_image","image_url":"https://example.invalid/a.png"}]}',
    "body-stored": b'{"model":"gpt-5.3-codex","stream":true,"previous_response_id":"r"}',
}
def sse(events):
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
usage = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
sse_seeds = {
    "responses.sse": sse([{"type": "response.created"}, {"type": "response.completed", "response": {"usage": usage}}]),
    "anthropic.sse": b"event: message_start\n" + sse([{"type": "message_start", "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 2, "output_tokens": 1}}},
                                                     {"type": "message_delta", "usage": {"output_tokens": 7}}, {"type": "message_stop"}]),
    "gemini.sse": sse([{"candidates": [{"content": {}}], "usageMetadata": {"promptTokenCount": 3}},
                       {"candidates": [{"finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "thoughtsTokenCount": 2, "totalTokenCount": 9}}]),
    "gemini-answer.json": json.dumps({"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4}}).encode(),
    "crlf.sse": sse([{"type": "response.completed", "response": {"usage": usage}}]).replace(b"\n", b"\r\n"),
    "no-newline.sse": b"data: " + json.dumps({"type": "response.completed", "response": {"usage": usage}}).encode(),
}
for d, seeds in (("tunnel", tunnel), ("http", http), ("sse", sse_seeds)):
    for name, data in seeds.items():
        with open(f"{out}/{d}/{name}", "wb") as f:
            f.write(data)
PY
mapfile -t tunnel_seeds < <(corpora tunnel_decoder "$live_seeds/tunnel")
mapfile -t http_seeds < <(corpora gateway_http "$live_seeds/http")
mapfile -t sse_seeds < <(corpora gateway_sse "$live_seeds/sse")
runner tunnel_decoder --mutations 256 --random 4000 "${tunnel_seeds[@]}"
runner gateway_http --mutations 256 --random 4000 "${http_seeds[@]}"
runner gateway_sse --mutations 256 --random 4000 "${sse_seeds[@]}"
rm -rf "$live_seeds"

# Forge webhooks: the forge crate's documented payload fixtures as seeds, each prefixed with its
# forge and event header bytes (byte 0: 0 GitHub, 1 Gitea, 2 GitLab; byte 1: the event's index
# in the target's list), then their mutations and random inputs. Every input is signed by the
# target itself, so the mutations reach the payload parser.
forge_seeds="$(mktemp -d)"
python3 - "$forge_seeds" <<'PY'
import os, sys
out = sys.argv[1]
src = "worker/forge/tests/fixtures"
prefix = {
    "github-issues-labeled.json": (0, 0),
    "github-issue-comment-issue.json": (0, 1),
    "github-issue-comment-pull.json": (0, 1),
    "gitea-issue-label-updated.json": (1, 1),
    "gitea-issue-comment.json": (1, 2),
    "gitlab-issue-hook-labels.json": (2, 0),
    "gitlab-note-issue.json": (2, 1),
    "gitlab-note-merge-request.json": (2, 1),
}
for name, (kind, event) in prefix.items():
    with open(os.path.join(src, name), "rb") as f:
        data = f.read()
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([kind, event]) + data)
PY
mapfile -t forge_seed_dirs < <(corpora forge_webhook "$forge_seeds")
runner forge_webhook --mutations 64 --random 2000 "${forge_seed_dirs[@]}"
rm -rf "$forge_seeds"

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain; coverage-guided fuzzing skipped (the stable runs above passed)" >&2
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz: cargo-fuzz not installed; coverage-guided fuzzing skipped (the stable runs above passed)" >&2
  exit 0
fi

corpus=fuzz/corpus/archive_reader
mkdir -p "$corpus" fuzz/corpus/archive_paths
cp fixtures/hostile-zips/*.zip "$corpus/"

cd fuzz
run() {
  local target=$1 seconds=$2
  shift 2
  echo "fuzz: $target for ${seconds}s" >&2
  local log
  log=$(mktemp)
  if ! cargo +nightly fuzz run "$target" "$@" -- -max_total_time="$seconds" -max_len=65536 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    rm -f "$log"
    echo "fuzz: $target FAILED (artifacts in fuzz/artifacts/$target)" >&2
    return 1
  fi
  grep -E '^Done [0-9]+ runs' "$log" | sed "s/^/fuzz: $target: /" >&2 || true
  rm -f "$log"
}
run archive_reader 45 "corpus/archive_reader"
run archive_paths 15 "corpus/archive_paths"
mkdir -p corpus/gate_wire
run gate_wire 15 "corpus/gate_wire"
for target in tunnel_decoder gateway_http gateway_sse forge_webhook; do
  mkdir -p "corpus/$target"
  run "$target" 15 "corpus/$target"
done
echo "fuzz: every target ran without a crash or invariant failure" >&2
