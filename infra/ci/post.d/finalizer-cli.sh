#!/usr/bin/env bash
# End-to-end check of `patch-candidate finalize | digest | verify | show` on a real repository:
# the candidate digest must equal the independent Python implementation of the reference
# canonicalisation, `verify --repo` must pass, tampering must fail with its code, and the
# repository must be untouched.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# A no-op after `cargo test --release` unless the binary is stale.
cargo build --release --locked --workspace --bins ${PATCH_CANDIDATE_CARGO_WITH_TESTS:+--tests}
# CARGO_TARGET_DIR, relative or absolute, is honoured as cargo honours it.
TARGET="${CARGO_TARGET_DIR:-target}"
case "$TARGET" in /*) ;; *) TARGET="$(pwd)/$TARGET" ;; esac
BIN=$TARGET/x86_64-unknown-linux-gnu/release/patch-candidate
ORACLE=$(pwd)/finalizer/tests/py/digest_oracle.py
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
g() { git -C "$T/repo" -c user.name=ci -c user.email=ci@example.invalid "$@"; }

mkdir -p "$T/repo/app/lib" "$T/base/app/lib" "$T/staged/app/lib"
printf 'def answer():\n    return 1\n' > "$T/repo/app/service.py"
printf 'one\r\ntwo\r\n' > "$T/repo/app/lib/crlf.txt"
printf 'keep\n' > "$T/repo/README.md"
g init -q -b main && g add -A && g commit -q -m baseline
COMMIT=$(g rev-parse HEAD)
cp "$T/repo/app/service.py" "$T/base/app/service.py"
cp "$T/repo/app/lib/crlf.txt" "$T/base/app/lib/crlf.txt"
printf 'def answer():\n    return 2\n' > "$T/staged/app/service.py"
printf 'one\r\n2\r\nthree' > "$T/staged/app/lib/crlf.txt"
printf 'NEW = "\\u00e9 \xe2\x80\xa8"\n' > "$T/staged/app/lib/new.py"
STATUS_BEFORE=$(g status --porcelain --ignored; sha256sum "$T/repo/.git/index")

# The snapshot digest as the repository gives it (`verify --repo` recomputes it).
SNAP=$("$BIN" --json snapshot --repo "$T/repo" --commit "$COMMIT" --repository-full-name acme/ci \
  --plan-id plan-1 --request-id req-1 --app-id app-1 \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["snapshot_digest"])')

python3 - "$T" "$COMMIT" "$SNAP" <<'PY'
import hashlib, json, sys
t, commit, snap = sys.argv[1], sys.argv[2], sys.argv[3]
def h(p): return "sha256:" + hashlib.sha256(open(p, "rb").read()).hexdigest()
manifest = {p: h(f"{t}/repo/{p}") for p in ["app/service.py", "app/lib/crlf.txt", "README.md"]}
json.dump({"plan_id": "plan-1", "request_id": "req-1", "app_id": "app-1",
           "repository_full_name": "acme/ci", "baseline_commit_sha": commit,
           "snapshot_digest": snap, "file_manifest": manifest}, open(f"{t}/snapshot.json", "w"))
json.dump({"schema_version": "managed_refinement.execution_context.v1", "handoff_id": "h-1",
           "request_id": "req-1", "plan_id": "plan-1", "app_id": "app-1", "build_registry_id": "b-1",
           "repository_full_name": "acme/ci", "baseline_commit_sha": commit, "raw_request": "bump",
           "request_type": "patch", "approved_plan_digest": "ab" * 32, "snapshot_digest": snap,
           "graph_identity_digest": "g", "impact_report_digest": "i", "execution_strategy_id": "s",
           "rationale": "r", "allowed_paths": ["app/"], "create_paths": ["app/lib/new.py"],
           "required_validation_gates": ["pytest", "lint"], "required_security_gates": ["secret_scan"],
           "required_ci_checks": []}, open(f"{t}/approval.json", "w"))
read = lambda p: open(f"{t}/staged/{p}", encoding="utf-8", newline="").read()
json.dump({"proposal_id": "prop-1", "provider_id": "synthetic", "status": "completed",
           "changed_files": [{"path": p, "op": op, "content": read(p)} for p, op in
                             [("app/service.py", "update"), ("app/lib/crlf.txt", "update"),
                              ("app/lib/new.py", "create")]],
           "owned_paths": ["app/service.py", "app/lib/crlf.txt", "app/lib/new.py"]},
          open(f"{t}/proposal.json", "w"))
PY

"$BIN" finalize --approval "$T/approval.json" --snapshot "$T/snapshot.json" --baseline-dir "$T/base" \
  --staged "$T/staged" --proposal "$T/proposal.json" --repo "$T/repo" --store "$T/store" --json > "$T/out.json"
DIGEST=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$T/out.json")
FILE="$T/store/${DIGEST#sha256:}.json"
[ -f "$FILE" ]
ORACLE_DIGEST=$(python3 -c 'import json,subprocess,sys
c = json.load(open(sys.argv[1]))
out = subprocess.run([sys.executable, sys.argv[2]], input=json.dumps([c]).encode(), capture_output=True, check=True)
print(json.loads(out.stdout)[0]["digest"])' "$FILE" "$ORACLE")
[ "$DIGEST" = "$ORACLE_DIGEST" ] || { echo "digest $DIGEST != python $ORACLE_DIGEST" >&2; exit 1; }
[ "$("$BIN" digest "$FILE")" = "$DIGEST" ]
"$BIN" verify "$FILE" --repo "$T/repo" >/dev/null
"$BIN" verify "$FILE" --digest "$DIGEST" --repo "$T/repo" >/dev/null
# A copy under another name, with one gate edited: --digest refuses it.
sed 's/"lint"/"lint2"/' "$FILE" > "$T/renamed.json"
set +e
"$BIN" --json verify "$T/renamed.json" --digest "$DIGEST" > "$T/err.json"; RC=$?
set -e
[ "$RC" = 1 ]
grep -q REPOSITORY_PATCH_VERIFY_DIGEST "$T/err.json"
"$BIN" show "$FILE" | grep -q '^+    return 2$'
# Tampering: one changed byte of content breaks the digest input check (exit 1, with the code).
sed 's/return 2/return 3/' "$FILE" > "$T/tampered.json"
set +e
"$BIN" --json digest "$T/tampered.json" > "$T/err.json"; RC=$?
set -e
[ "$RC" = 1 ]
grep -q REPOSITORY_PATCH_DIGEST_HASH "$T/err.json"
STATUS_AFTER=$(g status --porcelain --ignored; sha256sum "$T/repo/.git/index")
[ "$STATUS_BEFORE" = "$STATUS_AFTER" ]
echo "finalizer CLI: ok ($DIGEST)" >&2
