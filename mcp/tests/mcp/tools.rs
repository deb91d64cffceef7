//! Every tool through the in-process client: one success and at least one failure each.

use std::fs;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::fixture::candidate_digest;
use crate::support::{connect_root, fixture_copy};

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
async fn workspace_identity() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let (env, _) = client.call("get_workspace_identity", json!({})).await;
    assert_eq!(env["workspace"]["app_id"], json!("sample-notes"));
    assert_eq!(
        env["workspace"]["provenance_schema_version"],
        json!("mozaiks.app_provenance.v1")
    );
    assert_eq!(
        env["result"],
        json!({
            "app_id": "sample-notes",
            "app_name": "Sample Notes",
            "app_manifest_path": "app/app.json",
            "provenance_path": "app/provenance.yaml",
            "provenance_schema_version": "mozaiks.app_provenance.v1",
            "contracts": ["mozaiks.mcp.v1", "mozaiks.portable_path.v1"],
            "mcp_contract_declared": true
        })
    );
    // Failure: identity without a valid app manifest.
    fs::write(
        copy.root.join("app/app.json"),
        br#"{"appId": "bad id", "appName": "x"}"#,
    )
    .unwrap();
    assert_eq!(
        client.err("get_workspace_identity", json!({})).await,
        "invalid_manifest"
    );
    fs::remove_file(copy.root.join("app/app.json")).unwrap();
    assert_eq!(
        client.err("get_workspace_identity", json!({})).await,
        "app_root_not_found"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canonical_layout() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let layout = client.ok("get_canonical_layout", json!({})).await;
    assert_eq!(layout["app_root"], json!("app"));
    let ids: Vec<&str> = layout["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    for id in [
        "app_manifest",
        "provenance",
        "module_manifest_yaml",
        "page_schema_json",
        "secrets_contract",
    ] {
        assert!(ids.contains(&id), "{id}");
    }
    assert_eq!(
        client
            .err("get_canonical_layout", json!({"verbose": true}))
            .await,
        "invalid_arguments"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_artifact_location() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "app/modules/notes/module.yaml"}),
        )
        .await;
    assert_eq!(r["artifact"], json!("module_manifest_yaml"));
    assert_eq!(
        (r["exists"].clone(), r["entry_type"].clone()),
        (json!(true), json!("file"))
    );
    assert_eq!(r["inside_app_root"], json!(true));
    let root = copy.root.canonicalize().unwrap();
    assert_eq!(
        r["absolute_path"],
        json!(format!("{}/app/modules/notes/module.yaml", root.display()))
    );
    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "app/modules/billing"}),
        )
        .await;
    assert_eq!(
        (r["artifact"].clone(), r["exists"].clone()),
        (json!("module_dir"), json!(false))
    );
    let r = client
        .ok("resolve_artifact_location", json!({"path": "README.md"}))
        .await;
    assert_eq!(
        (r["registered"].clone(), r["artifact"].clone()),
        (json!(false), Value::Null)
    );
    assert_eq!(
        client
            .err("resolve_artifact_location", json!({"path": "../x"}))
            .await,
        "path_traversal"
    );
    assert_eq!(
        client.err("resolve_artifact_location", json!({})).await,
        "invalid_arguments"
    );
    assert_eq!(
        client
            .err("resolve_artifact_location", json!({"path": 7}))
            .await,
        "invalid_arguments"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_modules() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("list_modules", json!({})).await;
    assert_eq!(
        r["modules"],
        json!([
            {"id": "notes", "path": "app/modules/notes", "status": "ok", "manifest_path": "app/modules/notes/module.yaml",
             "manifest_format": "yaml", "name": "Notes", "version": "1.2.0", "problem": null},
            {"id": "search", "path": "app/modules/search", "status": "ok", "manifest_path": "app/modules/search/module.json",
             "manifest_format": "json", "name": "Search", "version": "0.3.1", "problem": null}
        ])
    );
    // A module whose manifest names another id, and one without a manifest.
    fs::create_dir(copy.root.join("app/modules/broken")).unwrap();
    fs::write(
        copy.root.join("app/modules/broken/module.yaml"),
        "id: other\n",
    )
    .unwrap();
    fs::create_dir(copy.root.join("app/modules/empty")).unwrap();
    let r = client.ok("list_modules", json!({})).await;
    let status: Vec<(&str, &str)> = r["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        status,
        vec![
            ("broken", "invalid_manifest"),
            ("empty", "missing_manifest"),
            ("notes", "ok"),
            ("search", "ok")
        ]
    );
    assert_eq!(
        client
            .err("list_modules", json!({"confirm_execution": true}))
            .await,
        "invalid_arguments"
    );
    fs::remove_file(copy.root.join("app/app.json")).unwrap();
    assert_eq!(
        client.err("list_modules", json!({})).await,
        "app_root_not_found"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_pages() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("list_pages", json!({})).await;
    let home_len = fs::metadata(copy.root.join("app/ui/pages/home.json"))
        .unwrap()
        .len();
    let detail_len = fs::metadata(copy.root.join("app/ui/pages/note-detail.yaml"))
        .unwrap()
        .len();
    assert_eq!(
        r["pages"],
        json!([
            {"name": "home", "path": "app/ui/pages/home.json", "format": "json", "size_bytes": home_len},
            {"name": "note-detail", "path": "app/ui/pages/note-detail.yaml", "format": "yaml", "size_bytes": detail_len}
        ])
    );
    fs::write(copy.root.join("app/ui/pages/notes.txt"), "x").unwrap();
    let (env, _) = client.call("list_pages", json!({})).await;
    assert_eq!(env["result"]["pages"].as_array().unwrap().len(), 2);
    assert!(
        env["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["code"] == "not_a_page")
    );
    fs::remove_file(copy.root.join("app/app.json")).unwrap();
    assert_eq!(
        client.err("list_pages", json!({})).await,
        "app_root_not_found"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_app_bundle() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("validate_app_bundle", json!({})).await;
    assert_eq!(r["valid"], json!(true), "{r}");
    assert_eq!(r["findings"], json!([]));
    assert_eq!(
        r["counts"],
        json!({"json": 4, "yaml": 4, "python": 3, "other": 0})
    );
    assert_eq!(r["files_checked"], json!(11));
    assert!(
        r["scope"]
            .as_str()
            .unwrap()
            .contains("not an acceptance gate")
    );

    let secret_value = "hunter2-secret-value";
    fs::write(copy.root.join("app/config/bad.json"), "{\"a\": 1,}").unwrap();
    fs::write(
        copy.root.join("app/modules/notes/broken.py"),
        "def f(:\n    pass\n",
    )
    .unwrap();
    fs::write(copy.root.join("app/ui/pages/bad.yaml"), "a: [1, 2\n").unwrap();
    fs::write(
        copy.root.join("app/security/secrets.yaml"),
        format!("secrets:\n  - API_KEY\nAPI_KEY: {secret_value}\n"),
    )
    .unwrap();
    fs::write(
        copy.root.join("app/provenance.yaml"),
        "schema_version: v1\ncontracts: []\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/passwd", copy.root.join("app/config/link.json")).unwrap();
    let (env, _) = client.call("validate_app_bundle", json!({})).await;
    let r = &env["result"];
    assert_eq!(r["valid"], json!(false));
    let found: Vec<(String, String, Option<u64>)> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["code"].as_str().unwrap().to_owned(),
                f["line"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        found,
        vec![
            ("app/config/bad.json".into(), "invalid_json".into(), Some(1)),
            (
                "app/config/link.json".into(),
                "symlink_in_bundle".into(),
                None
            ),
            (
                "app/modules/notes/broken.py".into(),
                "invalid_python".into(),
                Some(1)
            ),
            (
                "app/provenance.yaml".into(),
                "mcp_contract_not_declared".into(),
                None
            ),
            (
                "app/security/secrets.yaml".into(),
                "secrets_not_names_only".into(),
                None
            ),
            (
                "app/ui/pages/bad.yaml".into(),
                "invalid_yaml".into(),
                Some(2)
            ),
        ]
    );
    assert!(
        !env.to_string().contains(secret_value),
        "a finding quoted file content"
    );
    assert_eq!(
        client
            .err("validate_app_bundle", json!({"confirm_execution": true}))
            .await,
        "invalid_arguments"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_app_bundle_is_bounded() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let many = copy.root.join("app/config/many");
    fs::create_dir(&many).unwrap();
    for i in 0..=mcp::bundle::MAX_BUNDLE_FILES {
        fs::write(many.join(format!("f{i}.txt")), "").unwrap();
    }
    let (env, is_error) = client.call("validate_app_bundle", json!({})).await;
    assert!(is_error);
    assert_eq!(env["error"]["code"], json!("too_large"));
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_validation_commands() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("plan_validation_commands", json!({})).await;
    assert_eq!(
        (r["executed"].clone(), r["requires_confirmation"].clone()),
        (json!(false), json!(true))
    );
    let commands = r["commands"].as_array().unwrap();
    assert_eq!(
        commands[0]["argv"],
        json!([
            "python3",
            "-m",
            "py_compile",
            "app/modules/notes/handlers.py",
            "app/modules/search/__init__.py",
            "app/tests/test_notes.py"
        ])
    );
    assert!(commands.iter().any(|c| c["id"] == "pytest"));
    assert_eq!(
        commands
            .iter()
            .filter(|c| c["id"].as_str().unwrap().starts_with("json_parse:"))
            .count(),
        4
    );
    for c in commands {
        assert_eq!(c["cwd"], json!("."));
        for arg in c["argv"].as_array().unwrap() {
            assert!(
                !arg.as_str()
                    .unwrap()
                    .starts_with(copy.root.to_str().unwrap())
            );
        }
    }
    assert_eq!(
        client
            .err(
                "plan_validation_commands",
                json!({"confirm_execution": true})
            )
            .await,
        "invalid_arguments"
    );
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
    assert_eq!(
        client
            .err("get_patch_candidate", json!({"digest": missing}))
            .await,
        "not_found"
    );
    assert_eq!(
        client
            .err("get_patch_candidate", json!({"digest": "abc"}))
            .await,
        "invalid_arguments"
    );
    assert_eq!(
        client
            .err("verify_patch_candidate", json!({"path": "app/app.json"}))
            .await,
        "invalid_candidate"
    );
    assert_eq!(
        client
            .err(
                "verify_patch_candidate",
                json!({"path": "review/nope.json"})
            )
            .await,
        "not_found"
    );
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
    assert_eq!(
        client
            .err("get_patch_candidate", json!({"digest": digest}))
            .await,
        "invalid_candidate"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidate_tools_without_store() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    assert_eq!(
        client.err("list_patch_candidates", json!({})).await,
        "candidate_store_not_configured"
    );
    assert_eq!(
        client
            .err("get_patch_candidate", json!({"digest": candidate_digest()}))
            .await,
        "candidate_store_not_configured"
    );
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
    let paths: Vec<&str> = r["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        vec!["app/modules/search/__init__.py", "app/ui/pages/search.json"]
    );
    let bytes = fs::read(copy.root.join("review/workspace-archive.zip")).unwrap();
    assert_eq!(
        r["archive_sha256"],
        json!(snapshot::Sha256::of(&bytes).to_string())
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
    assert_eq!(
        client
            .err("inspect_workspace_archive", json!({"path": "app/app.json"}))
            .await,
        "invalid_archive"
    );
    let mut trailing = bytes.clone();
    trailing.push(0);
    fs::write(copy.root.join("review/trailing.zip"), trailing).unwrap();
    assert_eq!(
        client
            .err(
                "inspect_workspace_archive",
                json!({"path": "review/trailing.zip"})
            )
            .await,
        "invalid_archive"
    );
    assert_eq!(
        client
            .err("inspect_workspace_archive", json!({"path": "review"}))
            .await,
        "not_a_file"
    );
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
    for i in 0..mcp::candidates::MAX_LISTED_CANDIDATES {
        fs::write(store.join(format!("{i:064x}.json")), "{}").unwrap();
    }
    let client = connect_root(&copy.root, true).await;
    let (env, _) = client.call("list_patch_candidates", json!({})).await;
    let r = &env["result"];
    let total = mcp::candidates::MAX_LISTED_CANDIDATES + 1;
    assert_eq!(
        (r["total"].clone(), r["truncated"].clone()),
        (json!(total), json!(true))
    );
    assert_eq!(
        r["candidates"].as_array().unwrap().len(),
        mcp::candidates::MAX_LISTED_CANDIDATES
    );
    assert_eq!(r["candidates"][0]["verified"], json!(false));
    assert!(
        env["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["code"] == "truncated")
    );
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
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
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
    assert_eq!(
        client
            .err(
                "verify_patch_candidate",
                json!({"path": "app/config/pipe.json"})
            )
            .await,
        "not_a_file"
    );
    assert_eq!(
        client
            .err(
                "inspect_workspace_archive",
                json!({"path": "review/big.zip"})
            )
            .await,
        "too_large"
    );
    let r = client.ok("validate_app_bundle", json!({})).await;
    let codes: Vec<(&str, &str)> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["code"].as_str().unwrap()))
        .collect();
    assert!(
        codes.contains(&("app/config/pipe.json", "special_file")),
        "{codes:?}"
    );
    assert!(
        !codes.iter().any(|(p, _)| p.ends_with("deep.py")),
        "{codes:?}"
    );
    // The server is still alive afterwards.
    client.ok("get_canonical_layout", json!({})).await;
    client.close().await;
}
