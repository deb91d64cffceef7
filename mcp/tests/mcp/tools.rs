//! The candidate and archive tools and the server surface through the in-process client (the app
//! bundle tools are in `upstream.rs`): one success and at least one failure each.

use std::fs;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::fixture::candidate_digest;
use crate::support::{connect_root, diagnostic_codes, field_strs, fixture_copy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_identity_and_capabilities() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let info = client.service.peer_info().unwrap();
    let server_info = info.server_info.clone().unwrap();
    assert_eq!(server_info.name, "patch-candidate-mcp");
    assert_eq!(server_info.version, env!("CARGO_PKG_VERSION"));
    assert!(info.capabilities.tools.is_some());
    assert!(info.capabilities.resources.is_none() && info.capabilities.prompts.is_none());
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_tools_with_store() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, true).await;
    let digest = candidate_digest();
    let r = client.ok("list_patch_candidates", json!({})).await;
    let rows = r["candidates"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (r["total"].clone(), r["truncated"].clone()),
        (json!(1), json!(false))
    );
    assert_eq!(
        (rows[0]["digest"].clone(), rows[0]["verified"].clone()),
        (json!(digest), json!(true))
    );
    assert_eq!(rows[0]["candidate"]["validation_state"], json!("pending"));
    assert_eq!(rows[0]["candidate"]["mutation_allowed"], json!(false));

    let r = client
        .ok("get_patch_candidate", json!({"digest": digest}))
        .await;
    let diffs = r["diffs"].as_array().unwrap();
    assert_eq!(diffs.len(), 2);
    assert!(diffs[0]["diff"].as_str().unwrap().starts_with(
        "--- a/app/modules/search/__init__.py\n+++ b/app/modules/search/__init__.py\n"
    ));
    assert_eq!(diffs[1]["op"], json!("create"));
    assert_eq!(
        r["candidate"]["schema_version"],
        json!("mozaiks.refinement.repository_patch.v2")
    );

    let r = client
        .ok(
            "verify_patch_candidate",
            json!({"path": "review/candidate.json"}),
        )
        .await;
    assert_eq!(
        (r["valid"].clone(), r["digest"].clone(), r["stored"].clone()),
        (json!(true), json!(digest), json!(true))
    );
    assert_eq!(r["file_name_matches_digest"], Value::Null);
    let stored_name = format!("review/store/{}.json", digest.trim_start_matches("sha256:"));
    let r = client
        .ok("verify_patch_candidate", json!({"path": stored_name}))
        .await;
    assert_eq!(r["file_name_matches_digest"], json!(true));

    // Failures.
    let missing = format!("sha256:{}", "0".repeat(64));
    client
        .assert_err(
            "get_patch_candidate",
            json!({"digest": missing}),
            "not_found",
        )
        .await;
    client
        .assert_err(
            "get_patch_candidate",
            json!({"digest": "abc"}),
            "invalid_arguments",
        )
        .await;
    client
        .assert_err(
            "verify_patch_candidate",
            json!({"path": "app/app.json"}),
            "invalid_candidate",
        )
        .await;
    client
        .assert_err(
            "verify_patch_candidate",
            json!({"path": "review/nope.json"}),
            "not_found",
        )
        .await;
    // A tampered stored candidate no longer verifies.
    let stored = copy.root.join(format!(
        "review/store/{}.json",
        digest.trim_start_matches("sha256:")
    ));
    let text = fs::read_to_string(&stored)
        .unwrap()
        .replace("Add a search page", "Add a search PAGE");
    fs::write(&stored, text).unwrap();
    let r = client.ok("list_patch_candidates", json!({})).await;
    assert_eq!(r["candidates"][0]["verified"], json!(false));
    assert!(
        r["candidates"][0]["error_code"]
            .as_str()
            .unwrap()
            .starts_with("REPOSITORY_PATCH_")
    );
    client
        .assert_err(
            "get_patch_candidate",
            json!({"digest": digest}),
            "invalid_candidate",
        )
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_tools_without_store() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    client
        .assert_err(
            "list_patch_candidates",
            json!({}),
            "candidate_store_not_configured",
        )
        .await;
    client
        .assert_err(
            "get_patch_candidate",
            json!({"digest": candidate_digest()}),
            "candidate_store_not_configured",
        )
        .await;
    let r = client
        .ok(
            "verify_patch_candidate",
            json!({"path": "review/candidate.json"}),
        )
        .await;
    assert_eq!(r["stored"], Value::Null);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_workspace_archive() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client
        .ok(
            "inspect_workspace_archive",
            json!({"path": "review/workspace-archive.zip"}),
        )
        .await;
    assert_eq!(
        r["schema_version"],
        json!("mozaiks.deterministic_archive.v1")
    );
    assert_eq!(r["empty_marker"], json!(false));
    let paths = field_strs(&r["entries"], "path");
    assert_eq!(
        paths,
        vec!["app/modules/search/__init__.py", "app/ui/pages/search.json"]
    );
    let bytes = fs::read(copy.root.join("review/workspace-archive.zip")).unwrap();
    assert_eq!(
        r["archive_sha256"],
        json!(vocab::Sha256::of(&bytes).to_string())
    );
    let r = client
        .ok(
            "inspect_workspace_archive",
            json!({"path": "review/empty-archive.marker"}),
        )
        .await;
    assert_eq!(
        (r["empty_marker"].clone(), r["entries"].clone()),
        (json!(true), json!([]))
    );
    client
        .assert_err(
            "inspect_workspace_archive",
            json!({"path": "app/app.json"}),
            "invalid_archive",
        )
        .await;
    let mut trailing = bytes.clone();
    trailing.push(0);
    fs::write(copy.root.join("review/trailing.zip"), trailing).unwrap();
    client
        .assert_err(
            "inspect_workspace_archive",
            json!({"path": "review/trailing.zip"}),
            "invalid_archive",
        )
        .await;
    client
        .assert_err(
            "inspect_workspace_archive",
            json!({"path": "review"}),
            "not_a_file",
        )
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tool_is_a_protocol_error() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let args = json!({}).as_object().cloned().unwrap();
    let err = client
        .service
        .call_tool(
            rmcp::model::CallToolRequestParams::new("run_app_source_validation")
                .with_arguments(args),
        )
        .await;
    assert!(err.is_err());
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_patch_candidates_is_bounded() {
    let copy = fixture_copy();
    let store = crate::support::store_dir(&copy.root);
    for i in 0..mcp::MAX_LISTED_CANDIDATES {
        fs::write(store.join(format!("{i:064x}.json")), "{}").unwrap();
    }
    let client = connect_root(&copy.root, true).await;
    let (env, _) = client.call("list_patch_candidates", json!({})).await;
    let r = &env["result"];
    let total = mcp::MAX_LISTED_CANDIDATES + 1;
    assert_eq!(
        (r["total"].clone(), r["truncated"].clone()),
        (json!(total), json!(true))
    );
    assert_eq!(
        r["candidates"].as_array().unwrap().len(),
        mcp::MAX_LISTED_CANDIDATES
    );
    assert_eq!(r["candidates"][0]["verified"], json!(false));
    assert!(diagnostic_codes(&env).contains(&"truncated"));
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_calls_all_answer() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, true).await;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let peer = client.service.peer().clone();
        let tool = mcp::TOOL_NAMES[i % 7];
        tasks.spawn(async move {
            let result = peer
                .call_tool(
                    rmcp::model::CallToolRequestParams::new(tool).with_arguments(
                        if tool == "resolve_artifact_location" {
                            json!({"path": "app/app.json"})
                                .as_object()
                                .cloned()
                                .unwrap()
                        } else {
                            serde_json::Map::new()
                        },
                    ),
                )
                .await
                .unwrap();
            (tool, result)
        });
    }
    let mut answered = 0;
    while let Some(joined) = tasks.join_next().await {
        let (tool, result) = joined.unwrap();
        let structured = result.structured_content.unwrap();
        crate::support::assert_envelope(tool, &structured, false);
        answered += 1;
    }
    assert_eq!(answered, 64);
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_workspace_files_fail_closed_without_hanging() {
    let copy = fixture_copy();
    // A FIFO would block a naive open: it is reported, never opened.
    let fifo = copy.root.join("app/config/pipe.json");
    snapshot::testkit::mkfifo(&fifo);
    // Oversized archive (sparse): refused before it is read.
    let big = fs::File::create(copy.root.join("review/big.zip")).unwrap();
    big.set_len(u64::try_from(archive::MAX_ARCHIVE_BYTES).unwrap() + 1)
        .unwrap();
    // Deep nesting that would overflow a small stack when the tree is dropped.
    fs::write(
        copy.root.join("app/modules/notes/deep.py"),
        format!("x = {}1\n", "1+".repeat(400_000)),
    )
    .unwrap();
    fs::write(
        copy.root.join("app/config/deep.yaml"),
        "[".repeat(200_000) + &"]".repeat(200_000),
    )
    .unwrap();

    let client = connect_root(&copy.root, false).await;
    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "app/config/pipe.json"}),
        )
        .await;
    assert_eq!(r["entry_type"], json!("other"));
    client
        .assert_err(
            "verify_patch_candidate",
            json!({"path": "app/config/pipe.json"}),
            "not_a_file",
        )
        .await;
    client
        .assert_err(
            "inspect_workspace_archive",
            json!({"path": "review/big.zip"}),
            "too_large",
        )
        .await;
    let r = client.ok("validate_app_bundle", json!({})).await;
    let failed = |check: &str| crate::support::failed_paths(&r, check);
    // The FIFO is never opened (not a regular file), the 400,000-term chain is refused before it
    // is parsed (as CPython's compiler refuses it), the deep YAML is refused by the depth bound
    // instead of overflowing.
    assert_eq!(
        failed("python_syntax"),
        vec!["app/modules/notes/deep.py".to_owned()],
        "{r}"
    );
    assert_eq!(
        failed("yaml_manifest_parse"),
        vec!["app/config/deep.yaml".to_owned()]
    );
    assert!(!r.to_string().contains("pipe.json"), "the FIFO was read");
    // The server is still alive afterwards.
    client.ok("get_canonical_layout", json!({})).await;
    client.close().await;
}
