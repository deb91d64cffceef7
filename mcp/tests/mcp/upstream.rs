//! The app bundle tools against bundles in the upstream formats: the canonical fixture, what
//! upstream `init` writes, and the broken variants (fixtures/mcp-bundles). Each answer is the one
//! the upstream core library gives for the same bundle.

use std::fs;
use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::support::{
    Copy, connect_root, copy_tree, diagnostic_codes, failed_paths, fallback_check, field_strs,
    fixture_copy,
};

/// `mkdir -p` one level at a time (test setup only).
fn mkdirs(path: impl AsRef<Path>) {
    let mut at = std::path::PathBuf::new();
    for part in path.as_ref().components() {
        at.push(part);
        if !at.exists() {
            fs::create_dir(&at).unwrap();
        }
    }
}

fn bundle_copy(name: &str) -> Copy {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(name);
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/mcp-bundles")
            .join(name),
        &root,
    );
    Copy { _tmp: tmp, root }
}

fn statuses(r: &Value) -> Vec<(String, String)> {
    let checks = &r["fallback_checks"];
    field_strs(checks, "name")
        .into_iter()
        .zip(field_strs(checks, "status"))
        .map(|(name, status)| (name.to_owned(), status.to_owned()))
        .collect()
}

fn extra_codes(r: &Value) -> Vec<(String, String)> {
    r["extra_findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert_eq!(f["source"], json!("patch-candidate-mcp"));
            (
                f["code"].as_str().unwrap().to_owned(),
                f["path"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_of_the_canonical_bundle() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let (env, _) = client.call("get_workspace_identity", json!({})).await;
    assert_eq!(env["workspace"]["app_id"], json!("sample-notes"));
    assert_eq!(env["workspace"]["app_name"], json!("Sample Notes"));
    assert_eq!(
        env["workspace"]["provenance_schema_version"],
        json!("mozaiks.provenance.v1")
    );
    assert_eq!(
        env["result"],
        json!({
            "app_id": "sample-notes",
            "app_name": "Sample Notes",
            "app_name_source": "appName",
            "app_manifest_path": "app/app.json",
            "preset": null,
            "provenance": {
                "path": "app/provenance.yaml",
                "valid": true,
                "schema_version": "mozaiks.provenance.v1",
                "app_kind": "hand_authored",
                "created_with_mode": "manual",
                "contracts": {
                    "app": "mozaiks.app.v1",
                    "mcp": "mozaiks.mcp.v1",
                    "module": "mozaiks.module.v1",
                    "provenance": "mozaiks.provenance.v1"
                },
                "contracts_defaulted": false,
                "problems": []
            },
            "mcp_contract_declared": true
        })
    );
    let state = &env["workspace_state"];
    assert!(
        state["content_notice"]
            .as_str()
            .unwrap()
            .contains("not instructions")
    );
    assert_eq!(
        state["revision"],
        json!({"kind": "none", "head_ref": null, "commit": null})
    );
    assert_eq!(state["changed_since_bind"], json!(false));
    assert_eq!(state["sources_read"], json!(2));
    assert!(
        state["sources_sha256"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    // Malformed app.json: a failure; missing: no app root.
    fs::write(copy.root.join("app/app.json"), b"[1, 2]").unwrap();
    client
        .assert_err("get_workspace_identity", json!({}), "invalid_manifest")
        .await;
    fs::remove_file(copy.root.join("app/app.json")).unwrap();
    client
        .assert_err("get_workspace_identity", json!({}), "app_root_not_found")
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_of_an_init_made_workspace_and_name_fallbacks() {
    let copy = bundle_copy("init-chat");
    let client = connect_root(&copy.root, false).await;
    let (env, _) = client.call("get_workspace_identity", json!({})).await;
    assert_eq!(
        env["result"],
        json!({
            "app_id": null,
            "app_name": "Chat Demo",
            "app_name_source": "appName",
            "app_manifest_path": "app/app.json",
            "preset": "chat",
            "provenance": null,
            "mcp_contract_declared": false
        })
    );
    assert_eq!(env["workspace"]["app_id"], Value::Null);
    assert_eq!(env["workspace"]["app_name"], json!("Chat Demo"));
    assert_eq!(
        diagnostic_codes(&env),
        vec!["app_id_absent", "provenance_absent"]
    );
    fs::write(
        copy.root.join("app/app.json"),
        br#"{"name": "Legacy Name"}"#,
    )
    .unwrap();
    let r = client.ok("get_workspace_identity", json!({})).await;
    assert_eq!(
        (r["app_name"].clone(), r["app_name_source"].clone()),
        (json!("Legacy Name"), json!("name"))
    );
    fs::write(copy.root.join("app/app.json"), b"{}").unwrap();
    let r = client.ok("get_workspace_identity", json!({})).await;
    assert_eq!(
        (r["app_name"].clone(), r["app_name_source"].clone()),
        (json!("init-chat"), json!("directory"))
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_provenance_is_a_diagnostic_not_a_failure() {
    let copy = bundle_copy("broken-provenance-list");
    let client = connect_root(&copy.root, false).await;
    let (env, is_error) = client.call("get_workspace_identity", json!({})).await;
    assert!(!is_error);
    let r = &env["result"];
    assert_eq!(r["app_name"], json!("Broken Provenance"));
    assert_eq!(r["provenance"]["valid"], json!(false));
    assert_eq!(
        r["provenance"]["problems"],
        json!(["contracts must be a mapping of contract key to contract reference"])
    );
    assert_eq!(r["mcp_contract_declared"], json!(false));
    assert_eq!(env["workspace"]["provenance_schema_version"], Value::Null);
    assert!(diagnostic_codes(&env).contains(&"provenance_invalid"));
    // Upstream's fallback checks pass (the file is valid YAML); the invalid provenance is an
    // extra finding that does not change the verdict.
    let r = client.ok("validate_app_bundle", json!({})).await;
    assert_eq!(
        (r["valid"].clone(), r["validation_status"].clone()),
        (json!(true), json!("passed"))
    );
    assert_eq!(
        extra_codes(&r),
        vec![(
            "provenance_invalid".to_owned(),
            "app/provenance.yaml".to_owned()
        )]
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_is_the_upstream_registry() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let layout = client.ok("get_canonical_layout", json!({})).await;
    assert_eq!(
        layout["layout_schema_version"],
        json!("mozaiks.app_layout.v2")
    );
    let families = layout["families"].as_array().unwrap();
    let has = |scope: &str, template: &str, kind: &str, requirement: &str| {
        families.iter().any(|f| {
            f["path_scope"] == scope
                && f["path_template"] == template
                && f["kind"] == kind
                && f["requirement"] == requirement
        })
    };
    assert!(has(
        "app_bundle_root",
        "data/contract.json",
        "app_data_contract",
        "conditional"
    ));
    assert!(has(
        "app_bundle_root",
        "config/auth.yaml",
        "app_auth_config",
        "conditional"
    ));
    assert!(has(
        "app_bundle_root",
        "ui/route_manifest.json",
        "app_ui_route_manifest",
        "optional"
    ));
    assert!(has(
        "app_bundle_root",
        "ui/pages/{page_id}.yaml",
        "app_ui_page_schema",
        "conditional"
    ));
    assert!(has(
        "module_relative",
        "module.yaml",
        "module_manifest",
        "required"
    ));
    assert!(has(
        "module_relative",
        "backend/handler.py",
        "module_backend_handler",
        "required"
    ));
    assert!(has(
        "module_relative",
        "contracts/events.yaml",
        "module_contract",
        "optional"
    ));
    assert!(has(
        "workspace_root",
        "workflows/{workflow_id}/orchestrator.yaml",
        "workflow_manifest",
        "conditional"
    ));
    assert!(has(
        "app_bundle_root",
        "config/secrets.yaml",
        "prohibited_legacy",
        "prohibited"
    ));
    assert!(has(
        "app_bundle_root",
        "modules/{module_id}/backend/models.py",
        "prohibited_legacy",
        "prohibited"
    ));
    // Sorted like upstream builds it.
    let keys: Vec<(String, String)> = families
        .iter()
        .map(|f| {
            (
                f["path_scope"].as_str().unwrap().to_owned(),
                f["path_template"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(
        layout["disallowed_legacy_app_paths"]
            .as_array()
            .unwrap()
            .contains(&json!("config/llm.yaml"))
    );
    client
        .assert_err(
            "get_canonical_layout",
            json!({"verbose": true}),
            "invalid_arguments",
        )
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_uses_the_registry_per_scope() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "app/modules/notes/module.yaml"}),
        )
        .await;
    assert_eq!(
        (r["registered"].clone(), r["prohibited"].clone()),
        (json!(true), json!(false))
    );
    assert_eq!(r["primary"]["path_scope"], json!("module_relative"));
    assert_eq!(r["primary"]["family"]["kind"], json!("module_manifest"));
    assert_eq!(r["primary"]["family"]["requirement"], json!("required"));
    let app_scope = r["matches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["path_scope"] == "app_bundle_root")
        .unwrap();
    assert_eq!(
        app_scope["family"]["path_template"],
        json!("modules/{module_id}/module.yaml")
    );
    assert_eq!(app_scope["values"], json!({"module_id": "notes"}));
    assert_eq!(
        (r["exists"].clone(), r["entry_type"].clone()),
        (json!(true), json!("file"))
    );
    let root = copy.root.canonicalize().unwrap();
    assert_eq!(
        r["absolute_path"],
        json!(format!("{}/app/modules/notes/module.yaml", root.display()))
    );

    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "workflows/NotesDigest/tools/summarize.py"}),
        )
        .await;
    assert_eq!(r["primary"]["path_scope"], json!("workflow_relative"));
    assert_eq!(r["primary"]["family"]["kind"], json!("workflow_tool"));

    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "app/config/secrets.yaml"}),
        )
        .await;
    assert_eq!(
        (r["registered"].clone(), r["prohibited"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(r["primary"]["family"]["kind"], json!("prohibited_legacy"));
    assert_eq!(r["exists"], json!(false));

    let r = client
        .ok(
            "resolve_artifact_location",
            json!({"path": "app/ui/pages/home.json"}),
        )
        .await;
    assert_eq!(r["registered"], json!(false));
    assert_eq!(r["primary"], Value::Null);
    assert_eq!(
        r["unregistered"],
        json!([
            "path is not registered for scope app_bundle_root",
            "path is not registered for scope workspace_root"
        ])
    );
    client
        .assert_err(
            "resolve_artifact_location",
            json!({"path": "../x"}),
            "path_traversal",
        )
        .await;
    client
        .assert_err("resolve_artifact_location", json!({}), "invalid_arguments")
        .await;
    client
        .assert_err(
            "resolve_artifact_location",
            json!({"path": 7}),
            "invalid_arguments",
        )
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modules_are_discovered_like_upstream() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("list_modules", json!({})).await;
    assert_eq!(
        r["modules"],
        json!([
            {"name": "notes", "path": "app/modules/notes", "manifest_path": "app/modules/notes/module.yaml",
             "status": "ok", "version": "1.2.0", "display_name": "Notes", "module_type": "standard",
             "handler_path": "app/modules/notes/backend/handler.py", "handler_exists": true,
             "actions": ["create_note", "list_notes"], "problems": []},
            {"name": "search", "path": "app/modules/search", "manifest_path": "app/modules/search/module.yaml",
             "status": "ok", "version": "0.3.1", "display_name": "Search", "module_type": "standard",
             "handler_path": "app/modules/search/backend/handler.py", "handler_exists": true,
             "actions": ["search_notes"], "problems": []}
        ])
    );
    // A manifest in our old shape (top-level id), a folder without module.yaml, one with only
    // module.json: upstream refuses the first and does not discover the other two.
    mkdirs(copy.root.join("app/modules/Broken"));
    fs::write(
        copy.root.join("app/modules/Broken/module.yaml"),
        "id: Broken\nname: Broken\n",
    )
    .unwrap();
    fs::create_dir(copy.root.join("app/modules/empty")).unwrap();
    fs::create_dir(copy.root.join("app/modules/jsononly")).unwrap();
    fs::write(copy.root.join("app/modules/jsononly/module.json"), "{}").unwrap();
    let (env, _) = client.call("list_modules", json!({})).await;
    let names: Vec<(&str, &str)> = env["result"]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap(), m["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("Broken", "invalid_manifest"),
            ("notes", "ok"),
            ("search", "ok")
        ]
    );
    let problems = &env["result"]["modules"][0]["problems"];
    assert!(
        problems
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "schema_version is required"),
        "{problems}"
    );
    let skipped: Vec<&str> = env["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "not_a_module")
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, vec!["app/modules/empty", "app/modules/jsononly"]);
    client
        .assert_err(
            "list_modules",
            json!({"confirm_execution": true}),
            "invalid_arguments",
        )
        .await;
    fs::remove_file(copy.root.join("app/app.json")).unwrap();
    client
        .assert_err("list_modules", json!({}), "app_root_not_found")
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_are_discovered_like_upstream() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("list_pages", json!({})).await;
    let len = |p: &str| fs::metadata(copy.root.join(p)).unwrap().len();
    assert_eq!(
        r["pages"],
        json!([
            {"name": "note-detail", "path": "app/ui/pages/note-detail/page.yaml", "form": "directory",
             "size_bytes": len("app/ui/pages/note-detail/page.yaml")},
            {"name": "notes", "path": "app/ui/pages/notes.yaml", "form": "file",
             "size_bytes": len("app/ui/pages/notes.yaml")}
        ])
    );
    // JSON pages and READMEs are not page schemas upstream; `.yml` is.
    fs::write(copy.root.join("app/ui/pages/home.json"), "{}").unwrap();
    fs::write(copy.root.join("app/ui/pages/README.md"), "x").unwrap();
    fs::write(copy.root.join("app/ui/pages/about.YML"), "name: about\n").unwrap();
    let r = client.ok("list_pages", json!({})).await;
    let names = field_strs(&r["pages"], "name");
    assert_eq!(names, vec!["about", "note-detail", "notes"]);
    let init = bundle_copy("init-chat");
    let init_client = connect_root(&init.root, false).await;
    assert_eq!(
        init_client.ok("list_pages", json!({})).await["pages"],
        json!([])
    );
    assert_eq!(
        init_client.ok("list_modules", json!({})).await["modules"],
        json!([])
    );
    init_client.close().await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_of_the_canonical_bundle_skips_node_modules() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("validate_app_bundle", json!({})).await;
    assert_eq!(
        (r["valid"].clone(), r["validation_status"].clone()),
        (json!(true), json!("passed")),
        "{r}"
    );
    assert_eq!(
        statuses(&r),
        vec![
            ("json_manifest_parse".to_owned(), "passed".to_owned()),
            ("python_syntax".to_owned(), "passed".to_owned()),
            ("yaml_manifest_parse".to_owned(), "passed".to_owned())
        ]
    );
    assert_eq!(
        fallback_check(&r, "json_manifest_parse")["artifacts"],
        json!(["app/package.json"])
    );
    assert_eq!(
        fallback_check(&r, "python_syntax")["artifacts"],
        json!([
            "app/modules/notes/backend/handler.py",
            "app/modules/search/__init__.py",
            "app/modules/search/backend/handler.py",
            "workflows/NotesDigest/tools/summarize.py"
        ])
    );
    assert_eq!(
        fallback_check(&r, "yaml_manifest_parse")["artifacts"],
        json!([
            "app/modules/notes/module.yaml",
            "app/modules/search/module.yaml",
            "app/provenance.yaml",
            "app/security/secrets.yaml",
            "app/ui/pages/note-detail/page.yaml",
            "app/ui/pages/notes.yaml",
            "workflows/NotesDigest/orchestrator.yaml"
        ])
    );
    assert_eq!(r["walk"]["skipped_dirs"], json!(["app/node_modules"]));
    assert_eq!(r["walk"]["complete"], json!(true));
    assert_eq!(r["extra_findings"], json!([]));
    assert!(
        r["scope"]
            .as_str()
            .unwrap()
            .contains("not an acceptance gate")
    );
    client
        .assert_err(
            "validate_app_bundle",
            json!({"confirm_execution": true}),
            "invalid_arguments",
        )
        .await;
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_variants_fail_the_upstream_check_they_break() {
    let cases = [
        (
            "broken-workflow-python",
            "python_syntax",
            "workflows/Intake/tools/triage.py",
            Some(2),
        ),
        (
            "broken-root-package-json",
            "json_manifest_parse",
            "package.json",
            Some(5),
        ),
        (
            "broken-multidoc-yaml",
            "yaml_manifest_parse",
            "app/config/auth.yaml",
            Some(2),
        ),
    ];
    for (bundle, failing, path, line) in cases {
        let copy = bundle_copy(bundle);
        let client = connect_root(&copy.root, false).await;
        let r = client.ok("validate_app_bundle", json!({})).await;
        assert_eq!(
            (r["valid"].clone(), r["validation_status"].clone()),
            (json!(false), json!("failed")),
            "{bundle}"
        );
        for (name, status) in statuses(&r) {
            if name == failing {
                assert_eq!(status, "failed", "{bundle}");
            } else {
                assert_ne!(status, "failed", "{bundle} {name}");
            }
        }
        assert_eq!(failed_paths(&r, failing), vec![path.to_owned()], "{bundle}");
        assert_eq!(
            fallback_check(&r, failing)["failures"][0]["line"],
            json!(line),
            "{bundle}"
        );
        client.close().await;
    }
    // The init-made workspace has nothing the checks look at: all three are skipped.
    let copy = bundle_copy("init-chat");
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("validate_app_bundle", json!({})).await;
    assert_eq!(
        (r["valid"].clone(), r["validation_status"].clone()),
        (json!(true), json!("skipped"))
    );
    assert_eq!(
        fallback_check(&r, "json_manifest_parse")["reason"],
        json!("No JSON manifests were found.")
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_rules_never_change_the_upstream_verdict() {
    let copy = fixture_copy();
    let secret_value = "hunter2-secret-value";
    fs::write(
        copy.root.join("app/security/secrets.yaml"),
        format!("secrets:\n  - name: API_KEY\n    value: {secret_value}\n"),
    )
    .unwrap();
    fs::write(copy.root.join("app/config/secrets.yaml"), "names: []\n").unwrap();
    fs::write(copy.root.join("app/config/settings.json"), "{}").unwrap();
    fs::write(
        copy.root.join("app/provenance.yaml"),
        "created_with: {mode: cli}\ncontracts: {app: mozaiks.app.v1}\n",
    )
    .unwrap();
    fs::write(
        copy.root.join("app/modules/search/module.yaml"),
        "id: search\nname: Search\n",
    )
    .unwrap();
    let client = connect_root(&copy.root, false).await;
    let (env, _) = client.call("validate_app_bundle", json!({})).await;
    let r = &env["result"];
    assert_eq!(
        (r["valid"].clone(), r["validation_status"].clone()),
        (json!(true), json!("passed"))
    );
    assert_eq!(
        extra_codes(r),
        vec![
            (
                "secrets_not_names_only".to_owned(),
                "app/security/secrets.yaml".to_owned()
            ),
            (
                "mcp_contract_not_declared".to_owned(),
                "app/provenance.yaml".to_owned()
            ),
            (
                "module_manifest_invalid".to_owned(),
                "app/modules/search/module.yaml".to_owned()
            ),
            (
                "prohibited_layout_path".to_owned(),
                "app/config/secrets.yaml".to_owned()
            ),
            (
                "noncanonical_config_path".to_owned(),
                "app/config/settings.json".to_owned()
            ),
        ]
    );
    assert!(
        !env.to_string().contains(secret_value),
        "a finding quoted file content"
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_trees_get_a_verdict_with_what_was_skipped() {
    let copy = fixture_copy();
    // 2,000 files under app/node_modules, broken ones included: pruned by the skip list.
    let nm = copy.root.join("app/node_modules");
    for i in 0..2_000 {
        let dir = nm.join(format!("pkg{}", i / 20));
        mkdirs(&dir);
        let (name, text) = match i % 4 {
            0 => ("package.json", "{ broken"),
            1 => ("x.py", "def f(:\n"),
            2 => ("x.yaml", "a: [1\n"),
            _ => ("x.js", "module.exports = 1;\n"),
        };
        fs::write(dir.join(format!("{i}-{name}")), text).unwrap();
    }
    // A tree deeper than the walk budget: reported, not walked.
    let mut deep = copy.root.join("docs");
    for i in 0..70 {
        deep = deep.join(format!("d{i}"));
    }
    mkdirs(&deep);
    fs::write(deep.join("bad.py"), "def f(:\n").unwrap();
    let client = connect_root(&copy.root, false).await;
    let (env, _) = client.call("validate_app_bundle", json!({})).await;
    let r = &env["result"];
    assert_eq!(r["valid"], json!(true), "{r}");
    assert!(r["walk"]["entries_visited"].as_u64().unwrap() < 200);
    assert_eq!(r["walk"]["complete"], json!(false));
    assert_eq!(r["walk"]["too_deep"].as_array().unwrap().len(), 1);
    assert!(diagnostic_codes(&env).contains(&"walk_incomplete"));
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_follow_upstream_detection() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    let r = client.ok("plan_validation_commands", json!({})).await;
    assert_eq!(
        (r["executed"].clone(), r["requires_confirmation"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(
        r["framework_detection"]["primary_framework_id"],
        json!("mozaiks_app")
    );
    assert_eq!(
        r["framework_detection"]["package_managers"],
        json!(["npm", "python"])
    );
    assert_eq!(
        r["commands"],
        json!([
            {"kind": "install", "command": "npm install", "working_directory": "app", "confidence": 0.7,
             "status": "skipped", "skip_reason": "install_commands_require_include_install"},
            {"kind": "lint", "command": "npm run lint", "working_directory": "app", "confidence": 0.9,
             "status": "planned", "skip_reason": null},
            {"kind": "lint", "command": "ruff check .", "working_directory": "app", "confidence": 0.55,
             "status": "planned", "skip_reason": null},
            {"kind": "test", "command": "python -m pytest", "working_directory": "app", "confidence": 0.65,
             "status": "planned", "skip_reason": null},
            {"kind": "build", "command": "npm run build", "working_directory": "app", "confidence": 0.9,
             "status": "planned", "skip_reason": null},
            {"kind": "dev", "command": "npm run dev", "working_directory": "app", "confidence": 0.9,
             "status": "skipped", "skip_reason": "command_kind_not_selected"}
        ])
    );
    client
        .assert_err(
            "plan_validation_commands",
            json!({"confirm_execution": true}),
            "invalid_arguments",
        )
        .await;
    client.close().await;
    for bundle in ["init-chat", "broken-root-package-json"] {
        let copy = bundle_copy(bundle);
        let client = connect_root(&copy.root, false).await;
        let (env, _) = client.call("plan_validation_commands", json!({})).await;
        assert_eq!(env["result"]["commands"], json!([]), "{bundle}");
        assert_eq!(
            env["result"]["requires_confirmation"],
            json!(false),
            "{bundle}"
        );
        assert!(
            diagnostic_codes(&env).contains(&"no_validation_commands_detected"),
            "{bundle}"
        );
        client.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_revision_sources_and_change() {
    let copy = fixture_copy();
    let git = copy.root.join(".git");
    mkdirs(git.join("refs/heads"));
    fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let first = "1111111111111111111111111111111111111111";
    fs::write(git.join("refs/heads/main"), format!("{first}\n")).unwrap();
    let client = connect_root(&copy.root, false).await;
    let (env, _) = client.call("list_pages", json!({})).await;
    let state = &env["workspace_state"];
    let expected = json!({"kind": "git", "head_ref": "refs/heads/main", "commit": first});
    assert_eq!(
        (state["revision"].clone(), state["bound_revision"].clone()),
        (expected.clone(), expected)
    );
    assert_eq!(state["changed_since_bind"], json!(false));
    // Failures carry it too.
    let (env, is_error) = client
        .call("resolve_artifact_location", json!({"path": "../x"}))
        .await;
    assert!(is_error);
    assert_eq!(env["workspace_state"]["changed_since_bind"], json!(false));
    // Same reads, same sources digest; a changed file changes it and the change flag.
    let a = client.call("get_workspace_identity", json!({})).await.0["workspace_state"]["sources_sha256"].clone();
    let b = client.call("get_workspace_identity", json!({})).await.0["workspace_state"]["sources_sha256"].clone();
    assert_eq!(a, b);
    fs::write(copy.root.join("app/app.json"), br#"{"appName": "Renamed"}"#).unwrap();
    let (env, _) = client.call("get_workspace_identity", json!({})).await;
    assert_ne!(env["workspace_state"]["sources_sha256"], a);
    assert_eq!(env["workspace_state"]["changed_since_bind"], json!(true));
    // A new commit moves the revision.
    let second = "2222222222222222222222222222222222222222";
    fs::write(git.join("refs/heads/main"), format!("{second}\n")).unwrap();
    let (env, _) = client.call("get_canonical_layout", json!({})).await;
    assert_eq!(env["workspace_state"]["revision"]["commit"], json!(second));
    assert_eq!(
        env["workspace_state"]["bound_revision"]["commit"],
        json!(first)
    );
    assert_eq!(env["workspace_state"]["sources_read"], json!(2));
    // Packed refs, a detached HEAD, and a ref that tries to leave the Git directory.
    fs::remove_file(git.join("refs/heads/main")).unwrap();
    fs::write(
        git.join("packed-refs"),
        format!("# pack-refs with: peeled\n{first} refs/heads/main\n"),
    )
    .unwrap();
    let (env, _) = client.call("list_pages", json!({})).await;
    assert_eq!(env["workspace_state"]["revision"]["commit"], json!(first));
    fs::write(git.join("HEAD"), format!("{second}\n")).unwrap();
    let (env, _) = client.call("list_pages", json!({})).await;
    assert_eq!(
        env["workspace_state"]["revision"],
        json!({"kind": "git", "head_ref": null, "commit": second})
    );
    fs::write(git.join("HEAD"), "ref: refs/../../../etc/passwd\n").unwrap();
    let (env, _) = client.call("list_pages", json!({})).await;
    assert_eq!(
        env["workspace_state"]["revision"],
        json!({"kind": "git", "head_ref": null, "commit": null})
    );
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipped_trees_do_not_count_as_changes() {
    let copy = fixture_copy();
    let client = connect_root(&copy.root, false).await;
    fs::write(copy.root.join("app/node_modules/left-pad/new.js"), "1").unwrap();
    let (env, _) = client.call("list_pages", json!({})).await;
    assert_eq!(env["workspace_state"]["changed_since_bind"], json!(false));
    fs::write(copy.root.join("app/config/targets.json"), "{}").unwrap();
    let (env, _) = client.call("list_pages", json!({})).await;
    assert_eq!(env["workspace_state"]["changed_since_bind"], json!(true));
    client.close().await;
}
