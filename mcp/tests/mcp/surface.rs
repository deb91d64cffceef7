//! The server's surface as the tests and the latency example (examples/mcp_latency.rs) drive it:
//! the built binary spawned over stdio, and one read-only call of every tool.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// Spawns the server binary `bin` bound to `root` (and the candidate `store`), with piped stdin
/// and stdout and a silenced stderr.
pub fn spawn_stdio_server(bin: &str, root: &Path, store: Option<&Path>) -> Child {
    let mut command = Command::new(bin);
    command.arg("--workspace-root").arg(root);
    if let Some(store) = store {
        command.arg("--candidate-store").arg(store);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// One read-only call of every tool against the fixture workspace, in `mcp::TOOL_NAMES` order.
///
/// `(tool, arguments)` for every tool: `resolve_path` is resolved and the stored candidate
/// `digest` fetched; the other tools read the fixture's review files.
pub fn every_tool_call(resolve_path: &str, digest: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("get_workspace_identity", json!({})),
        ("get_canonical_layout", json!({})),
        ("resolve_artifact_location", json!({"path": resolve_path})),
        ("list_modules", json!({})),
        ("list_pages", json!({})),
        ("validate_app_bundle", json!({})),
        ("plan_validation_commands", json!({})),
        ("list_patch_candidates", json!({})),
        ("get_patch_candidate", json!({"digest": digest})),
        (
            "verify_patch_candidate",
            json!({"path": "review/candidate.json"}),
        ),
        (
            "inspect_workspace_archive",
            json!({"path": "review/workspace-archive.zip"}),
        ),
    ]
}
