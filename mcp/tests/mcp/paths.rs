//! The fail-closed path table: every path-taking tool refuses the same inputs with the same code.

use std::os::unix::fs::symlink;

use mcp::{McpServer, ServerOptions};
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::support::{connect_root, fixture_copy};

const PATH_TOOLS: &[&str] = &[
    "resolve_artifact_location",
    "verify_patch_candidate",
    "inspect_workspace_archive",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_path_table() {
    let copy = fixture_copy();
    let outside = copy.root.parent().unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.json"), "{}").unwrap();
    symlink("/etc", copy.root.join("etc-link")).unwrap();
    symlink("../../outside", copy.root.join("app/escape")).unwrap();
    symlink(
        "../../outside/secret.json",
        copy.root.join("review/escape.json"),
    )
    .unwrap();
    symlink("/etc/passwd", copy.root.join("review/passwd.zip")).unwrap();
    symlink("candidate.json", copy.root.join("review/inside-link.json")).unwrap();
    let root = copy.root.canonicalize().unwrap();
    let inside_abs = format!("{}/app/app.json", root.display());
    let outside_abs = format!("{}/secret.json", outside.display());

    let client = connect_root(&copy.root, false).await;
    let table: Vec<(String, &str)> = vec![
        (inside_abs, "path_not_relative"),
        ("/etc/passwd".into(), "path_escapes_workspace"),
        (outside_abs, "path_escapes_workspace"),
        ("~/.ssh/id_rsa".into(), "path_not_relative"),
        ("../outside/secret.json".into(), "path_traversal"),
        ("app/../../outside/secret.json".into(), "path_traversal"),
        ("app/..".into(), "path_traversal"),
        ("file:///etc/passwd".into(), "path_has_scheme"),
        ("https://example.com/app.json".into(), "path_has_scheme"),
        ("data:text/plain,hello".into(), "path_has_scheme"),
        ("C:\\app\\app.json".into(), "path_has_drive_prefix"),
        ("C:app.json".into(), "path_has_drive_prefix"),
        ("\\\\host\\share\\x".into(), "path_has_drive_prefix"),
        ("app/*.json".into(), "path_has_glob"),
        ("app/**".into(), "path_has_glob"),
        ("app/modules/?".into(), "path_has_glob"),
        ("app/[ab].json".into(), "path_has_glob"),
        ("etc-link/passwd".into(), "symlink_escape"),
        ("app/escape/secret.json".into(), "symlink_escape"),
        ("review/escape.json".into(), "symlink_escape"),
        ("review/passwd.zip".into(), "symlink_escape"),
        ("".into(), "invalid_path"),
        ("app\\app.json".into(), "invalid_path"),
        ("app/./app.json".into(), "invalid_path"),
        ("app//app.json".into(), "invalid_path"),
        ("app/app.json\u{0}".into(), "invalid_path"),
    ];
    for tool in PATH_TOOLS {
        for (path, code) in &table {
            let got = client.err(tool, json!({ "path": path })).await;
            assert_eq!(
                (tool, path.as_str(), got.as_str()),
                (tool, path.as_str(), *code)
            );
        }
    }
    // An in-root link is followed inside the root.
    let r = client
        .ok(
            "verify_patch_candidate",
            json!({"path": "review/inside-link.json"}),
        )
        .await;
    assert_eq!(r["valid"], json!(true));
    client.close().await;
}

#[test]
fn missing_or_non_directory_root_refuses_to_bind() {
    let copy = fixture_copy();
    for root in [
        copy.root.join("does-not-exist"),
        copy.root.join("app/app.json"),
    ] {
        let err = McpServer::bind(&ServerOptions {
            workspace_root: root,
            candidate_store: None,
        })
        .unwrap_err();
        assert_eq!(err.code(), "workspace_not_found");
        assert_eq!(
            err.to_string(),
            "Workspace root could not be resolved inside the allowed root."
        );
    }
    // The candidate store is never created: a missing one refuses startup.
    let store = copy.root.join("no-store");
    let err = McpServer::bind(&ServerOptions {
        workspace_root: copy.root.clone(),
        candidate_store: Some(store.clone()),
    })
    .unwrap_err();
    assert_eq!(err.code(), "candidate_store_not_configured");
    assert!(!store.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_given_through_a_symlink_is_resolved_once() {
    let copy = fixture_copy();
    let link = copy.root.parent().unwrap().join("ws-link");
    symlink(&copy.root, &link).unwrap();
    let client = connect_root(&link, false).await;
    let (env, _) = client.call("get_canonical_layout", json!({})).await;
    assert_eq!(
        env["workspace"]["root"],
        json!(copy.root.canonicalize().unwrap().to_str().unwrap())
    );
    client.close().await;
}
