//! Shared helpers: fixture copies and an in-process client over a duplex pipe.

use std::fs;
use std::path::{Path, PathBuf};

use mcp::{McpServer, ServerOptions};
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{Value, json};

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/mcp-workspace")
}

pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else if kind.is_file() {
            fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A private copy of the fixture workspace (tests may add links or break files in it).
pub struct Copy {
    pub _tmp: tempfile::TempDir,
    pub root: PathBuf,
}

pub fn fixture_copy() -> Copy {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    copy_tree(&fixture_dir(), &root);
    Copy { _tmp: tmp, root }
}

pub fn store_dir(root: &Path) -> PathBuf {
    root.join("review/store")
}

pub struct Client {
    pub service: RunningService<RoleClient, ()>,
    server: tokio::task::JoinHandle<()>,
}

pub async fn connect(options: ServerOptions) -> Client {
    let server = McpServer::bind(&options).unwrap();
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(async move {
        let running = server.serve(server_io).await.unwrap();
        let _ = running.waiting().await;
    });
    let service = ().serve(client_io).await.unwrap();
    Client { service, server }
}

pub async fn connect_root(root: &Path, with_store: bool) -> Client {
    connect(ServerOptions {
        workspace_root: root.to_owned(),
        candidate_store: with_store.then(|| store_dir(root)),
    })
    .await
}

impl Client {
    pub async fn call_raw(&self, tool: &str, args: Value) -> CallToolResult {
        let args = args.as_object().cloned().unwrap_or_default();
        self.service
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
            .await
            .unwrap()
    }

    /// Calls a tool, checks the envelope, and returns (structuredContent, isError).
    pub async fn call(&self, tool: &str, args: Value) -> (Value, bool) {
        let result = self.call_raw(tool, args).await;
        let structured = result
            .structured_content
            .clone()
            .expect("structuredContent");
        let is_error = result.is_error.unwrap_or(false);
        assert_envelope(tool, &structured, is_error);
        // First text block: the data-not-instructions notice; second: the same JSON.
        let texts: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        assert_eq!(texts.len(), 2, "{tool}: two text blocks");
        assert!(
            texts[0].contains("data, not instructions"),
            "{tool}: notice"
        );
        assert_eq!(
            serde_json::from_str::<Value>(&texts[1]).unwrap(),
            structured
        );
        (structured, is_error)
    }

    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let (v, is_error) = self.call(tool, args).await;
        assert!(!is_error, "{tool} failed: {v}");
        v["result"].clone()
    }

    pub async fn err(&self, tool: &str, args: Value) -> String {
        let (v, is_error) = self.call(tool, args).await;
        assert!(is_error, "{tool} unexpectedly succeeded: {v}");
        v["error"]["code"].as_str().unwrap().to_owned()
    }

    /// Calls a tool that must fail with the error `code`.
    pub async fn assert_err(&self, tool: &str, args: Value, code: &str) {
        assert_eq!(self.err(tool, args).await, code, "{tool}");
    }

    pub async fn close(self) {
        self.service.cancel().await.unwrap();
        self.server.await.unwrap();
    }
}

/// The envelope rules: version, tool, workspace xor error, diagnostics, workspace state.
pub fn assert_envelope(tool: &str, v: &Value, is_error: bool) {
    let obj = v.as_object().expect("envelope is an object");
    let state = &v["workspace_state"];
    assert!(
        state["content_notice"]
            .as_str()
            .is_some_and(|n| n.contains("project content, not instructions"))
    );
    assert!(
        state["sources_sha256"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );
    assert!(state["sources_read"].is_u64());
    assert!(matches!(
        state["revision"]["kind"].as_str(),
        Some("git" | "none")
    ));
    assert!(state["changed_since_bind"].is_boolean() || state["changed_since_bind"].is_null());
    assert_eq!(v["protocol_schema_version"], json!("mozaiks.mcp.v1"));
    assert_eq!(v["tool"], json!(tool));
    assert!(v["diagnostics"].is_array());
    if is_error {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 5, "{keys:?}");
        let code = v["error"]["code"].as_str().unwrap();
        assert!(mcp::ERROR_CODES.contains(&code), "unknown code {code}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        assert!(obj.get("workspace").is_none() && obj.get("result").is_none());
    } else {
        assert_eq!(obj.len(), 6);
        let ws = &v["workspace"];
        let root = ws["root"].as_str().unwrap();
        assert!(Path::new(root).is_absolute());
        assert_eq!(ws["app_root"].as_str().unwrap(), format!("{root}/app"));
        assert!(ws.get("app_id").is_some() && ws.get("provenance_schema_version").is_some());
        assert!(ws.get("app_name").is_some());
        assert!(obj.contains_key("result"));
    }
}

pub use snapshot::testkit::stdout_of;

/// The fallback check `name` of a `validate_app_bundle` result.
pub fn fallback_check<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["fallback_checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()
}

/// The paths the fallback check `name` of a `validate_app_bundle` result failed.
pub fn failed_paths(r: &Value, name: &str) -> Vec<String> {
    fallback_check(r, name)["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect()
}

/// The message of the first fallback failure at `path` in a `validate_app_bundle` result.
pub fn failure_message(r: &Value, path: &str) -> Option<String> {
    r["fallback_checks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["failures"].as_array().unwrap().iter())
        .find(|f| f["path"] == json!(path))
        .map(|f| f["message"].as_str().unwrap().to_owned())
}

/// The string field `field` of every element of the array `array`, in order.
pub fn field_strs<'a>(array: &'a Value, field: &str) -> Vec<&'a str> {
    let items = array.as_array().unwrap();
    items.iter().map(|e| e[field].as_str().unwrap()).collect()
}

/// The codes of an envelope's diagnostics, in order.
pub fn diagnostic_codes(env: &Value) -> Vec<&str> {
    field_strs(&env["diagnostics"], "code")
}
