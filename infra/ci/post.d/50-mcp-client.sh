#!/usr/bin/env bash
# The independent MCP client: the official Python MCP SDK (from PyPI, in a cached venv under
# target/) drives the built patch-candidate-mcp binary over stdio against a copy of the fixture
# workspace and against each upstream-format bundle in fixtures/mcp-bundles (an init-made workspace
# and broken variants), asserting the answers the upstream core library gives. Fails loudly on any
# mismatch.
#
# The SDK and every transitive dependency are pinned to exact versions and sha256 hashes in
# mcp/tests/client/requirements.txt (generated from requirements.in by
# `pip-compile --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url
# --no-emit-find-links`); pip installs with --require-hashes, wheels only.
set -euo pipefail
cd "$(dirname "$0")/../../.."

REQUIREMENTS="mcp/tests/client/requirements.txt"
# CARGO_TARGET_DIR, relative or absolute, is honoured as cargo honours it.
TARGET="${CARGO_TARGET_DIR:-target}"
case "$TARGET" in /*) ;; *) TARGET="$PWD/$TARGET" ;; esac
BIN="$TARGET/x86_64-unknown-linux-gnu/release/patch-candidate-mcp"
VENV="$TARGET/mcp-client-venv"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The shipped server is built for itself (`-p mcp`), never inside a `--workspace` build: cargo
# unifies features across every package of one build, so there the worker's `effects` features
# and tokio's `process` and `fs` would be compiled into the server too (and a later `--workspace`
# build puts such a binary back at $BIN). Built alone it has the graph mcp/tests/mcp/hygiene.rs
# proves; mcp_build_check.py verifies it from the features cargo reports it compiled with.
cargo build --release --locked -p mcp --bin patch-candidate-mcp \
  --message-format=json-render-diagnostics > "$work/build.jsonl"
python3 infra/ci/mcp_build_check.py "$work/build.jsonl" "$BIN"

stamp="$VENV/.requirements-$(sha256sum "$REQUIREMENTS" | cut -c1-64)"
if [ ! -f "$stamp" ]; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --require-hashes --only-binary :all: --no-deps -r "$REQUIREMENTS"
  "$VENV/bin/pip" check
  touch "$stamp"
fi

cp -R fixtures/mcp-workspace "$work/ws"
cp -R fixtures/mcp-bundles "$work/bundles"
ln -s /etc "$work/ws/etc-link"   # a link that leads out of the root: must fail closed

"$VENV/bin/python" mcp/tests/client/mcp_client.py "$BIN" "$work/ws" "$work/bundles"
