//! The v1 tool-list contract: names, titles, descriptions, annotations, input and output schemas
//! are compared with the committed snapshot `tool_contract.json`. Changing the surface is a
//! deliberate act: regenerate with `MCP_UPDATE_CONTRACT=1` and review the diff.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::Value;

use crate::support::{connect_root, fixture_copy};

fn snapshot_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/tool_contract.json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_list_matches_the_committed_contract() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let tools = client.service.list_all_tools().await.unwrap();
    client.close().await;
    let served = serde_json::to_value(&tools).unwrap();
    let text = format!("{}\n", serde_json::to_string_pretty(&served).unwrap());
    if std::env::var_os("MCP_UPDATE_CONTRACT").is_some() {
        std::fs::write(snapshot_path(), &text).unwrap();
    }
    let committed: Value =
        serde_json::from_str(&std::fs::read_to_string(snapshot_path()).unwrap()).unwrap();
    assert_eq!(served, committed);

    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, mcp::TOOL_NAMES);
    for tool in &tools {
        let a = tool.annotations.as_ref().unwrap();
        assert_eq!(
            (
                a.read_only_hint,
                a.destructive_hint,
                a.idempotent_hint,
                a.open_world_hint
            ),
            (Some(true), Some(false), Some(true), Some(false)),
            "{}",
            tool.name
        );
        let output = tool.output_schema.as_ref().unwrap();
        assert_eq!(output.get("type"), Some(&Value::String("object".into())));
        let input = serde_json::to_value(tool.input_schema.as_ref()).unwrap();
        assert_eq!(input["type"], "object");
        assert_eq!(
            input["additionalProperties"], false,
            "{}: unknown arguments are refused",
            tool.name
        );
        assert!(input["properties"].get("confirm_execution").is_none());
        // Startup binding: no tool can name a root, store, command or scope.
        let keys: Vec<&String> = input["properties"].as_object().unwrap().keys().collect();
        assert!(
            keys.iter().all(|k| *k == "path" || *k == "digest"),
            "{}: {keys:?}",
            tool.name
        );
        let text = serde_json::to_string(&input).unwrap();
        assert!(!text.contains("confirm"), "{}", tool.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_tool_accepts_confirm_execution() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, true).await;
    for tool in mcp::TOOL_NAMES {
        for value in [serde_json::json!(true), serde_json::json!("yes")] {
            let args = serde_json::json!({ "confirm_execution": value, "path": "app/app.json", "digest": "sha256:00" });
            assert_eq!(client.err(tool, args).await, "invalid_arguments", "{tool}");
        }
    }
    client.close().await;
}

#[test]
fn excluded_tools_are_absent() {
    for excluded in [
        "run_app_source_validation",
        "run_refinement_validations",
        "confirm_execution",
        "write_file",
        "stage_workspace_archive",
        "finalize_repository_patch",
        "promote",
    ] {
        assert!(
            !mcp::TOOL_NAMES.iter().any(|n| n.contains(excluded)),
            "{excluded}"
        );
    }
    assert!(mcp::TOOL_NAMES.iter().all(|n| n.starts_with("get_")
        || n.starts_with("list_")
        || n.starts_with("resolve_")
        || n.starts_with("validate_")
        || n.starts_with("verify_")
        || n.starts_with("plan_")
        || n.starts_with("inspect_")));
}
