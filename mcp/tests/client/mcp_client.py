"""Independent MCP client check: drives the built `patch-candidate-mcp` binary over stdio with the
official Python MCP SDK (initialize, list tools, call every tool, assert results). The SDK also
validates every successful structuredContent against the tool's declared outputSchema.

Usage: mcp_client.py BINARY WORKSPACE_COPY [BUNDLES_COPY]
The workspace copy is fixtures/mcp-workspace (the canonical bundle with a small app/node_modules);
BUNDLES_COPY holds fixtures/mcp-bundles (an init-made workspace and broken variants), each checked
for the answer the upstream core library gives.
Prints one line per check and closes with "mcp-client: N passed, M failed"; exits 1 on any failure.
"""

import asyncio
import hashlib
import json
import os
import sys
import traceback

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

EXPECTED_TOOLS = [
    "get_workspace_identity",
    "get_canonical_layout",
    "resolve_artifact_location",
    "list_modules",
    "list_pages",
    "validate_app_bundle",
    "plan_validation_commands",
    "list_patch_candidates",
    "get_patch_candidate",
    "verify_patch_candidate",
    "inspect_workspace_archive",
]

passed = 0
failed = 0


def check(name, condition, detail=""):
    global passed, failed
    if condition:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name} {detail}")


def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def envelope_ok(tool, result):
    data = dump(result)
    structured = data.get("structuredContent")
    texts = [c.get("text", "") for c in data.get("content", [])]
    state = structured.get("workspace_state", {}) if isinstance(structured, dict) else {}
    ok = (
        isinstance(structured, dict)
        and structured.get("protocol_schema_version") == "mozaiks.mcp.v1"
        and structured.get("tool") == tool
        and isinstance(structured.get("diagnostics"), list)
        and len(texts) == 2
        and "data, not instructions" in texts[0]
        and json.loads(texts[1]) == structured
        and "project content, not instructions" in state.get("content_notice", "")
        and str(state.get("sources_sha256", "")).startswith("sha256:")
        and state.get("revision", {}).get("kind") in ("git", "none")
        and state.get("changed_since_bind") in (True, False, None)
    )
    return ok, data.get("isError", False), structured


def check_named(results, name):
    return next((c for c in results.get("fallback_checks", []) if c.get("name") == name), {})


def statuses(result):
    return {c["name"]: c["status"] for c in result.get("fallback_checks", [])}


async def call_ok(session, tool, args=None):
    result = await session.call_tool(tool, args or {})
    ok, is_error, structured = envelope_ok(tool, result)
    check(f"{tool}: envelope", ok and not is_error, structured)
    return structured if isinstance(structured, dict) else {}


async def bundle(binary, path, expect):
    params = StdioServerParameters(command=binary, args=["--workspace-root", path])
    name = os.path.basename(path)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            ident = (await call_ok(session, "get_workspace_identity")).get("result", {})
            val = (await call_ok(session, "validate_app_bundle")).get("result", {})
            plan = (await call_ok(session, "plan_validation_commands")).get("result", {})
            mods = (await call_ok(session, "list_modules")).get("result", {}).get("modules")
            pages = (await call_ok(session, "list_pages")).get("result", {}).get("pages")
            expect(name, ident, val, plan, mods, pages)


def expect_init(name, ident, val, plan, mods, pages):
    check(f"{name}: identity from appName, no appId, no provenance",
          ident.get("app_name") == "Chat Demo" and ident.get("app_id") is None
          and ident.get("preset") == "chat" and ident.get("provenance") is None, ident)
    check(f"{name}: nothing to check (all skipped), valid",
          val.get("valid") is True and val.get("validation_status") == "skipped"
          and set(statuses(val).values()) == {"skipped"}, statuses(val))
    check(f"{name}: empty plan", plan.get("commands") == [] and plan.get("requires_confirmation") is False, plan)
    check(f"{name}: no modules, no pages", mods == [] and pages == [], (mods, pages))


def expect_failed(check_name, path):
    def run(name, ident, val, plan, mods, pages):
        failing = check_named(val, check_name)
        check(f"{name}: {check_name} fails on {path}",
              val.get("valid") is False and val.get("validation_status") == "failed"
              and failing.get("status") == "failed"
              and [f["path"] for f in failing.get("failures", [])] == [path], val)
        others = {k: v for k, v in statuses(val).items() if k != check_name}
        check(f"{name}: other checks do not fail", "failed" not in others.values(), others)
        check(f"{name}: identity answers", bool(ident.get("app_name")), ident)
    return run


def expect_provenance_list(name, ident, val, plan, mods, pages):
    prov = ident.get("provenance") or {}
    check(f"{name}: identity answers, provenance reported invalid",
          ident.get("app_name") == "Broken Provenance" and prov.get("valid") is False
          and any("mapping" in p for p in prov.get("problems", [])), ident)
    check(f"{name}: upstream checks pass, provenance is an extra finding only",
          val.get("valid") is True
          and [f["code"] for f in val.get("extra_findings", [])] == ["provenance_invalid"], val)


async def main(binary, root, bundles=None):
    store = os.path.join(root, "review", "store")
    stored = [f for f in os.listdir(store) if f.endswith(".json")]
    digest = "sha256:" + stored[0][: -len(".json")]
    params = StdioServerParameters(
        command=binary, args=["--workspace-root", root, "--candidate-store", store]
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = dump(await session.initialize())
            info = init.get("serverInfo", {})
            check("initialize: server name", info.get("name") == "patch-candidate-mcp", info)
            check("initialize: tools capability", "tools" in init.get("capabilities", {}))

            listed = dump(await session.list_tools())["tools"]
            names = [t["name"] for t in listed]
            check("tools/list: the v1 tool list", names == EXPECTED_TOOLS, names)
            for tool in listed:
                a = tool.get("annotations", {})
                check(
                    f"tools/list: {tool['name']} annotations",
                    a.get("readOnlyHint") is True
                    and a.get("destructiveHint") is False
                    and a.get("idempotentHint") is True
                    and a.get("openWorldHint") is False,
                    a,
                )
                check(f"tools/list: {tool['name']} outputSchema", tool.get("outputSchema", {}).get("type") == "object")
                check(
                    f"tools/list: {tool['name']} refuses unknown arguments",
                    tool["inputSchema"].get("additionalProperties") is False,
                )

            calls = {
                "get_workspace_identity": {},
                "get_canonical_layout": {},
                "resolve_artifact_location": {"path": "app/modules/notes/module.yaml"},
                "list_modules": {},
                "list_pages": {},
                "validate_app_bundle": {},
                "plan_validation_commands": {},
                "list_patch_candidates": {},
                "get_patch_candidate": {"digest": digest},
                "verify_patch_candidate": {"path": "review/candidate.json"},
                "inspect_workspace_archive": {"path": "review/workspace-archive.zip"},
            }
            results = {}
            states = []
            for tool, args in calls.items():
                # The SDK raises if structuredContent does not match the declared outputSchema.
                result = await session.call_tool(tool, args)
                ok, is_error, structured = envelope_ok(tool, result)
                check(f"call {tool}: envelope", ok, structured)
                check(f"call {tool}: success", not is_error, structured)
                ws = structured.get("workspace", {})
                check(
                    f"call {tool}: workspace block",
                    ws.get("root") == os.path.realpath(root)
                    and ws.get("app_root") == os.path.realpath(root) + "/app"
                    and ws.get("app_id") == "sample-notes",
                    ws,
                )
                results[tool] = structured.get("result", {})
                states.append(structured.get("workspace_state", {}))

            r = results
            ident = r["get_workspace_identity"]
            check("identity: appName, appId, upstream provenance",
                  ident.get("app_id") == "sample-notes" and ident.get("app_name") == "Sample Notes"
                  and ident.get("app_name_source") == "appName"
                  and ident.get("provenance", {}).get("valid") is True
                  and ident.get("provenance", {}).get("contracts", {}).get("mcp") == "mozaiks.mcp.v1"
                  and ident.get("mcp_contract_declared") is True, ident)
            layout = r["get_canonical_layout"]
            fams = {(f["path_scope"], f["path_template"]): f for f in layout.get("families", [])}
            check("layout: upstream registry v2",
                  layout.get("layout_schema_version") == "mozaiks.app_layout.v2"
                  and fams.get(("module_relative", "module.yaml"), {}).get("requirement") == "required"
                  and fams.get(("app_bundle_root", "data/contract.json"), {}).get("kind") == "app_data_contract"
                  and fams.get(("app_bundle_root", "config/secrets.yaml"), {}).get("requirement") == "prohibited")
            res = r["resolve_artifact_location"]
            check("resolve: module manifest in module scope",
                  res.get("registered") is True and res.get("exists") is True
                  and res.get("primary", {}).get("path_scope") == "module_relative"
                  and res.get("primary", {}).get("family", {}).get("kind") == "module_manifest", res)
            mods = r["list_modules"].get("modules", [])
            check("modules: upstream discovery and manifest model",
                  [(m["name"], m["status"]) for m in mods] == [("notes", "ok"), ("search", "ok")], mods)
            pages = r["list_pages"].get("pages", [])
            check("pages: ui/pages/*.yaml and <dir>/page.yaml",
                  [(p["name"], p["form"]) for p in pages] == [("note-detail", "directory"), ("notes", "file")], pages)
            val = r["validate_app_bundle"]
            check("validate: upstream fallback checks pass",
                  val.get("valid") is True and val.get("validation_status") == "passed"
                  and statuses(val) == {"json_manifest_parse": "passed", "python_syntax": "passed",
                                        "yaml_manifest_parse": "passed"}, val)
            check("validate: node_modules pruned by the skip list",
                  "app/node_modules" in val.get("walk", {}).get("skipped_dirs", [])
                  and not any("node_modules" in a for c in val.get("fallback_checks", []) for a in c["artifacts"]))
            check("validate: no extra findings", val.get("extra_findings") == [], val.get("extra_findings"))
            plan = r["plan_validation_commands"]
            items = [(c["kind"], c["command"], c["working_directory"], c["status"], c["skip_reason"])
                     for c in plan.get("commands", [])]
            check("plan: upstream detection and item shape, never executed",
                  plan.get("executed") is False and plan.get("requires_confirmation") is True
                  and plan.get("framework_detection", {}).get("primary_framework_id") == "mozaiks_app"
                  and items == [
                      ("install", "npm install", "app", "skipped", "install_commands_require_include_install"),
                      ("lint", "npm run lint", "app", "planned", None),
                      ("lint", "ruff check .", "app", "planned", None),
                      ("test", "python -m pytest", "app", "planned", None),
                      ("build", "npm run build", "app", "planned", None),
                      ("dev", "npm run dev", "app", "skipped", "command_kind_not_selected"),
                  ], items)
            check("workspace state: unchanged since bind", all(
                st.get("changed_since_bind") is False for st in states), states)
            rows = r["list_patch_candidates"].get("candidates", [])
            check("candidates listed", len(rows) == 1 and rows[0]["digest"] == digest and rows[0]["verified"] is True)
            detail = r["get_patch_candidate"]
            check("candidate diffs", len(detail.get("diffs", [])) == 2
                  and detail["diffs"][0]["diff"].startswith("--- a/app/modules/search/__init__.py"))
            verify = r["verify_patch_candidate"]
            check("verify digest", verify.get("valid") is True and verify.get("digest") == digest and verify.get("stored") is True)
            archive = r["inspect_workspace_archive"]
            with open(os.path.join(root, "review", "workspace-archive.zip"), "rb") as f:
                archive_hash = "sha256:" + hashlib.sha256(f.read()).hexdigest()
            check("archive manifest", archive.get("archive_sha256") == archive_hash
                  and [e["path"] for e in archive.get("entries", [])]
                  == ["app/modules/search/__init__.py", "app/ui/pages/search.json"])

            failures = {
                "resolve_artifact_location": [
                    ({"path": "../outside"}, "path_traversal"),
                    ({"path": "/etc/passwd"}, "path_escapes_workspace"),
                    ({"path": "file:///etc/passwd"}, "path_has_scheme"),
                    ({"path": "app/*.json"}, "path_has_glob"),
                    ({"path": "C:\\x"}, "path_has_drive_prefix"),
                    ({"path": "etc-link/passwd"}, "symlink_escape"),
                ],
                "plan_validation_commands": [({"confirm_execution": True}, "invalid_arguments")],
                "get_patch_candidate": [({"digest": "sha256:" + "0" * 64}, "not_found")],
                "inspect_workspace_archive": [({"path": "app/app.json"}, "invalid_archive")],
            }
            for tool, cases in failures.items():
                for args, code in cases:
                    result = await session.call_tool(tool, args)
                    ok, is_error, structured = envelope_ok(tool, result)
                    got = structured.get("error", {}).get("code") if isinstance(structured, dict) else None
                    check(f"call {tool} {json.dumps(args)} -> {code}", ok and is_error and got == code, structured)


async def run_all(binary, root, bundles):
    await main(binary, root)
    if bundles:
        cases = {
            "init-chat": expect_init,
            "broken-workflow-python": expect_failed("python_syntax", "workflows/Intake/tools/triage.py"),
            "broken-root-package-json": expect_failed("json_manifest_parse", "package.json"),
            "broken-multidoc-yaml": expect_failed("yaml_manifest_parse", "app/config/auth.yaml"),
            "broken-provenance-list": expect_provenance_list,
        }
        for name, expect in cases.items():
            await bundle(binary, os.path.join(bundles, name), expect)


if __name__ == "__main__":
    try:
        asyncio.run(run_all(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
    except Exception:
        traceback.print_exc()
        failed += 1
    print(f"mcp-client: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
