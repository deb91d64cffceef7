"""Independent MCP client check: drives the built `patch-candidate-mcp` binary over stdio with the
official Python MCP SDK (initialize, list tools, call every tool, assert results). The SDK also
validates every successful structuredContent against the tool's declared outputSchema.

Usage: mcp_client.py BINARY WORKSPACE_COPY
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
    ok = (
        isinstance(structured, dict)
        and structured.get("protocol_schema_version") == "mozaiks.mcp.v1"
        and structured.get("tool") == tool
        and isinstance(structured.get("diagnostics"), list)
        and len(texts) == 2
        and "data, not instructions" in texts[0]
        and json.loads(texts[1]) == structured
    )
    return ok, data.get("isError", False), structured


async def main(binary, root):
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

            r = results
            check("identity", r["get_workspace_identity"].get("app_id") == "sample-notes"
                  and r["get_workspace_identity"].get("mcp_contract_declared") is True)
            check("layout", any(e["id"] == "app_manifest" for e in r["get_canonical_layout"].get("entries", [])))
            check("resolve", r["resolve_artifact_location"].get("artifact") == "module_manifest_yaml"
                  and r["resolve_artifact_location"].get("exists") is True)
            check("modules", [m["id"] for m in r["list_modules"].get("modules", [])] == ["notes", "search"])
            check("pages", [p["name"] for p in r["list_pages"].get("pages", [])] == ["home", "note-detail"])
            check("validate", r["validate_app_bundle"].get("valid") is True
                  and r["validate_app_bundle"].get("counts") == {"json": 4, "yaml": 4, "python": 3, "other": 0})
            plan = r["plan_validation_commands"]
            check("plan never executes", plan.get("executed") is False and plan.get("requires_confirmation") is True
                  and plan["commands"][0]["argv"][:3] == ["python3", "-m", "py_compile"])
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


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    except Exception:
        traceback.print_exc()
        failed += 1
    print(f"mcp-client: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
