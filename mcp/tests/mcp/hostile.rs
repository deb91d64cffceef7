//! Hostile workspaces and hostile clients against the built binary over real stdio.
//!
//! Each case builds its inputs (deep YAML in every manifest position, alias bombs in keys and
//! values, FIFOs and devices in the workspace and the store, a file/FIFO swap race, oversized and
//! deeply nested JSON-RPC lines, 100k pipelined requests with stdout unread, 200k entries) and
//! asserts that every call is answered (a result, or a refusal with a code), that `ping` and
//! `tools/list` still answer afterwards, and that the server's peak resident memory (VmHWM from
//! `/proc/<pid>/status`) stays under the documented budget. There are no timing thresholds; a
//! watchdog only turns a hang into a failure instead of a stuck test run.

use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use snapshot::testkit::mkfifo;

use crate::support::{Copy, diagnostic_codes, failure_message, fixture_copy, store_dir};
use crate::surface::spawn_stdio_server;

const BIN: &str = env!("CARGO_BIN_EXE_patch-candidate-mcp");
/// The documented memory budget of the server (docs/MCP.md, "Limits").
const MEMORY_BUDGET_BYTES: u64 = mcp::MEMORY_BUDGET_BYTES;
/// A liveness guard, not a performance threshold: a server that stops answering fails the test.
const WATCHDOG: Duration = Duration::from_secs(600);

struct Server {
    child: Child,
    stdin: Arc<Mutex<Option<ChildStdin>>>,
    lines: Receiver<String>,
    next_id: u64,
    done: Arc<AtomicBool>,
    slowest: (u64, String),
}

impl Server {
    fn start(root: &Path, store: Option<&Path>) -> Self {
        let mut child = spawn_stdio_server(BIN, root, store);
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let stdin = Arc::new(Mutex::new(child.stdin.take()));
        let mut server = Self {
            child,
            stdin,
            lines,
            next_id: 1,
            done: Arc::new(AtomicBool::new(false)),
            slowest: (0, String::new()),
        };
        let id = server.send(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "hostile", "version": "0"}}),
        );
        let init = server.answer(id);
        assert!(init.get("result").is_some(), "{init}");
        server.write_line(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        );
        server
    }

    fn write_line(&self, line: &str) {
        let mut guard = self.stdin.lock().unwrap();
        let stdin = guard.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.write_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        id
    }

    fn next_line(&self) -> Value {
        match self.lines.recv_timeout(WATCHDOG) {
            Ok(line) => serde_json::from_str(&line).expect("stdout line is JSON"),
            Err(RecvTimeoutError::Timeout) => panic!("the server stopped answering"),
            Err(RecvTimeoutError::Disconnected) => panic!("the server closed stdout"),
        }
    }

    /// The answer to `id` (answers to other ids in between are checked and dropped).
    fn answer(&self, id: u64) -> Value {
        loop {
            let line = self.next_line();
            assert_answer(&line);
            if line["id"] == json!(id) {
                return line;
            }
        }
    }

    /// Calls a tool; the answer must be a result or a refusal with a code. Returns the envelope.
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let started = std::time::Instant::now();
        let id = self.send("tools/call", json!({"name": tool, "arguments": arguments}));
        let answer = self.answer(id);
        // Recorded for BENCHMARKS.md only; nothing asserts on it.
        let millis = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if millis > self.slowest.0 {
            self.slowest = (millis, tool.to_owned());
        }
        answer["result"]["structuredContent"].clone()
    }

    fn error_code(&mut self, tool: &str, arguments: Value) -> Option<String> {
        let envelope = self.call(tool, arguments);
        envelope["error"]["code"].as_str().map(str::to_owned)
    }

    /// `ping` and `tools/list` still answer.
    fn still_serves(&mut self) {
        let id = self.send("ping", json!({}));
        assert!(self.answer(id).get("result").is_some());
        let id = self.send("tools/list", json!({}));
        let tools = self.answer(id);
        assert_eq!(
            tools["result"]["tools"].as_array().map(Vec::len),
            Some(mcp::TOOL_NAMES.len())
        );
    }

    fn peak_rss(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .expect("VmHWM in /proc/<pid>/status");
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap();
        kib * 1024
    }

    /// Checks the memory budget, closes stdin and expects a clean exit.
    fn finish(mut self) -> u64 {
        self.still_serves();
        let peak = self.peak_rss();
        assert!(
            peak <= MEMORY_BUDGET_BYTES,
            "peak RSS {peak} exceeds the documented budget {MEMORY_BUDGET_BYTES}"
        );
        record_peak(peak, &self.slowest);
        self.done.store(true, Ordering::SeqCst);
        drop(self.stdin.lock().unwrap().take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}");
        peak
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.done.load(Ordering::SeqCst) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Appends a case's peak RSS and slowest call to `$MCP_HOSTILE_PEAKS` when set (for
/// BENCHMARKS.md).
fn record_peak(peak: u64, slowest: &(u64, String)) {
    if let Some(path) = std::env::var_os("MCP_HOSTILE_PEAKS") {
        let mut file = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(file, "{peak} {} {}", slowest.0, slowest.1).unwrap();
    }
}

/// A JSON-RPC answer: a result, or an error with a numeric code.
fn assert_answer(line: &Value) {
    assert_eq!(line["jsonrpc"], json!("2.0"), "{line}");
    if let Some(error) = line.get("error") {
        assert!(error["code"].is_i64(), "error without a code: {line}");
        return;
    }
    let result = line.get("result").expect("result or error");
    if let Some(structured) = result.get("structuredContent") {
        if result["isError"] == json!(true) {
            assert!(
                structured["error"]["code"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty()),
                "tool error without a code: {line}"
            );
        }
        assert!(structured["diagnostics"].is_array());
    }
}

/// A character device (the null device's numbers), or a FIFO where `mknod` is not permitted.
fn mkdev(path: &Path) {
    let made = Command::new("mknod")
        .arg(path)
        .args(["c", "1", "3"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        mkfifo(path);
    }
}

const ALL_NO_ARG_TOOLS: &[&str] = &[
    "get_workspace_identity",
    "get_canonical_layout",
    "list_modules",
    "list_pages",
    "validate_app_bundle",
    "plan_validation_commands",
];

fn every_tool(server: &mut Server, paths: &[&str]) {
    for tool in ALL_NO_ARG_TOOLS {
        server.call(tool, json!({}));
    }
    for path in paths {
        for tool in [
            "resolve_artifact_location",
            "verify_patch_candidate",
            "inspect_workspace_archive",
        ] {
            server.call(tool, json!({ "path": path }));
        }
    }
}

/// Creates `dir` and any missing parents (test fixture set-up, outside the server).
fn mkdirs(dir: &Path) {
    if dir.is_dir() {
        return;
    }
    if let Some(parent) = dir.parent() {
        mkdirs(parent);
    }
    fs::create_dir(dir).unwrap();
}

fn deep_block_yaml(levels: usize) -> String {
    format!("{}x\n", "- ".repeat(levels))
}

fn module(copy: &Copy, id: &str, file: &str, text: &str) {
    let dir = copy.root.join("app/modules").join(id);
    mkdirs(&dir);
    fs::write(dir.join(file), text).unwrap();
}

#[test]
fn deep_yaml_json_and_python_in_every_manifest_position() {
    let copy = fixture_copy();
    let deep = deep_block_yaml(200_000);
    let deep_flow = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    fs::write(copy.root.join("app/provenance.yaml"), &deep).unwrap();
    module(&copy, "deepyaml", "module.yaml", &deep);
    module(&copy, "deepflow", "module.yaml", &deep_flow);
    module(
        &copy,
        "deepjson",
        "module.json",
        &format!("{}{}", "[".repeat(200_000), "]".repeat(200_000)),
    );
    mkdirs(&copy.root.join("app/ui/pages"));
    fs::write(copy.root.join("app/ui/pages/deep.yaml"), &deep).unwrap();
    mkdirs(&copy.root.join("app/security"));
    fs::write(copy.root.join("app/security/secrets.yaml"), &deep_flow).unwrap();
    fs::write(copy.root.join("app/config/deep.yml"), &deep).unwrap();
    fs::write(
        copy.root.join("app/config/deep.py"),
        format!("x = {}1{}\n", "(".repeat(100_000), ")".repeat(100_000)),
    )
    .unwrap();
    fs::write(
        copy.root.join("app/config/chain.py"),
        format!("x = {}1\n", "1+".repeat(300_000)),
    )
    .unwrap();

    let mut server = Server::start(&copy.root, None);
    // A malformed provenance is part of the identity, never a failure that hides app.json; the
    // depth limit is what refused it.
    let identity = server.call("get_workspace_identity", json!({}));
    let provenance = &identity["result"]["provenance"];
    assert_eq!(provenance["valid"], json!(false), "{identity}");
    assert!(
        provenance["problems"][0]
            .as_str()
            .unwrap()
            .contains("nesting exceeds"),
        "{identity}"
    );
    let modules = server.call("list_modules", json!({}));
    let listed = modules["result"]["modules"].as_array().unwrap();
    for id in ["deepyaml", "deepflow"] {
        let m = listed.iter().find(|m| m["name"] == json!(id)).unwrap();
        assert_eq!(m["status"], json!("invalid_manifest"), "{m}");
    }
    // module.json alone is not an upstream module: not listed, never parsed.
    assert!(!listed.iter().any(|m| m["name"] == json!("deepjson")));
    let validation = server.call("validate_app_bundle", json!({}));
    let message_of = |path: &str| failure_message(&validation["result"], path);
    for path in [
        "app/config/deep.yml",
        "app/ui/pages/deep.yaml",
        "app/provenance.yaml",
        "app/modules/deepyaml/module.yaml",
    ] {
        let message = message_of(path).unwrap_or_default();
        assert!(message.contains("nesting exceeds"), "{path}: {message}");
    }
    // Deep flow nesting is refused by the scanner (255 levels) before the depth bound.
    let message = message_of("app/security/secrets.yaml").unwrap_or_default();
    assert!(
        message.contains("nesting exceeds") || message.contains("does not parse"),
        "secrets.yaml: {message}"
    );
    assert!(
        message_of("app/config/deep.py")
            .unwrap_or_default()
            .contains("nests brackets deeper")
    );
    every_tool(&mut server, &["app/provenance.yaml"]);
    server.finish();
}

fn billion_laughs(levels: usize) -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..levels {
        let prev = i - 1;
        let refs = vec![format!("*a{prev}"); 10].join(", ");
        text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    text
}

fn key_bomb(levels: usize) -> String {
    let mut text = String::from("k0: &k0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}\n");
    for i in 1..levels {
        let prev = i - 1;
        text.push_str(&format!(
            "k{i}: &k{i} {{? *k{prev} : 1, ? [*k{prev}] : 2, ? [[*k{prev}]] : 3, ? [[[*k{prev}]]] : 4, ? [[[[*k{prev}]]]] : 5, ? [[[[[*k{prev}]]]]] : 6, ? [[[[[[*k{prev}]]]]]] : 7, ? [[[[[[[*k{prev}]]]]]]] : 8}}\n"
        ));
    }
    text
}

#[test]
fn alias_bombs_in_keys_and_values() {
    let copy = fixture_copy();
    let big = "y".repeat(200_000);
    let refs = vec!["*s"; 10_000].join(", ");
    let string_bomb = format!("s: &s {big}\nl: [{refs}]\n");
    fs::write(
        copy.root.join("app/provenance.yaml"),
        format!("schema_version: v1\n{}", key_bomb(7)),
    )
    .unwrap();
    module(&copy, "laughs", "module.yaml", &billion_laughs(9));
    module(&copy, "keys", "module.yaml", &key_bomb(7));
    module(&copy, "strings", "module.yaml", &string_bomb);
    fs::write(copy.root.join("app/config/bomb.yaml"), billion_laughs(9)).unwrap();
    fs::write(copy.root.join("app/config/strings.yaml"), &string_bomb).unwrap();

    let mut server = Server::start(&copy.root, None);
    let identity = server.call("get_workspace_identity", json!({}));
    assert_eq!(
        identity["result"]["provenance"]["valid"],
        json!(false),
        "{identity}"
    );
    let layout = server.call("get_canonical_layout", json!({}));
    assert!(layout["result"].is_object(), "{layout}");
    let validation = server.call("validate_app_bundle", json!({}));
    let message_of = |path: &str| failure_message(&validation["result"], path);
    for path in ["app/config/bomb.yaml", "app/config/strings.yaml"] {
        let message = message_of(path).unwrap_or_default();
        assert!(
            message.contains("expands to more than"),
            "{path}: {message}"
        );
    }
    every_tool(&mut server, &[]);
    server.finish();
}

#[test]
fn fifos_and_devices_in_the_workspace_and_the_store_never_block() {
    let copy = fixture_copy();
    let store = store_dir(&copy.root);
    let stored: Vec<String> = fs::read_dir(&store)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert!(!stored.is_empty());
    mkfifo(&store.join(format!("{}.json", "a".repeat(64))));
    mkdev(&store.join(format!("{}.json", "b".repeat(64))));
    mkfifo(&copy.root.join("app/config/fifo.json"));
    mkdev(&copy.root.join("app/config/device.yaml"));
    mkfifo(&copy.root.join("review/fifo.json"));
    mkdev(&copy.root.join("review/device.zip"));
    fs::remove_file(copy.root.join("app/provenance.yaml")).unwrap();
    mkfifo(&copy.root.join("app/provenance.yaml"));
    let notes = copy.root.join("app/modules/notes/module.yaml");
    fs::remove_file(&notes).unwrap();
    mkfifo(&notes);

    let mut server = Server::start(&copy.root, Some(&store));
    for _ in 0..6 {
        let list = server.call("list_patch_candidates", json!({}));
        let entries = list["result"]["candidates"].as_array().unwrap();
        for special in ["a", "b"] {
            let digest = format!("sha256:{}", special.repeat(64));
            let entry = entries
                .iter()
                .find(|e| e["digest"] == json!(digest))
                .unwrap();
            assert_eq!(entry["verified"], json!(false));
            assert_eq!(entry["error_code"], json!("not_a_file"), "{entry}");
        }
        for special in ["a", "b"] {
            let digest = format!("sha256:{}", special.repeat(64));
            assert_eq!(
                server
                    .error_code("get_patch_candidate", json!({ "digest": digest }))
                    .as_deref(),
                Some("not_a_file")
            );
        }
    }
    for path in ["review/fifo.json", "app/config/fifo.json"] {
        assert_eq!(
            server
                .error_code("verify_patch_candidate", json!({ "path": path }))
                .as_deref(),
            Some("not_a_file")
        );
    }
    assert_eq!(
        server
            .error_code(
                "inspect_workspace_archive",
                json!({"path": "review/device.zip"})
            )
            .as_deref(),
        Some("not_a_file")
    );
    let identity = server.call("get_workspace_identity", json!({}));
    assert_eq!(
        identity["result"]["provenance"]["problems"],
        json!(["provenance.yaml is not a regular file"]),
        "{identity}"
    );
    let modules = server.call("list_modules", json!({}));
    let notes = modules["result"]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == json!("notes"))
        .cloned()
        .unwrap();
    assert_ne!(notes["status"], json!("ok"), "{notes}");
    let validation = server.call("validate_app_bundle", json!({}));
    assert!(
        validation["result"]["fallback_checks"].is_array(),
        "{validation}"
    );
    every_tool(
        &mut server,
        &[
            "review/fifo.json",
            "review/device.zip",
            "app/config/fifo.json",
        ],
    );
    server.finish();
}

#[test]
fn file_and_fifo_swapped_during_calls_never_block() {
    let copy = fixture_copy();
    let review = copy.root.join("review");
    let target = review.join("swap.json");
    let regular = review.join("swap-regular.json");
    let fifo = review.join("swap-fifo.json");
    fs::copy(review.join("candidate.json"), &regular).unwrap();
    mkfifo(&fifo);
    fs::copy(&regular, &target).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = Arc::clone(&stop);
        let (target, regular, fifo) = (target.clone(), regular.clone(), fifo.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // Hard links keep both sources; rename swaps the target atomically.
                let staging = target.with_extension("next");
                let source = if swaps.is_multiple_of(2) {
                    &fifo
                } else {
                    &regular
                };
                let _ = fs::remove_file(&staging);
                if fs::hard_link(source, &staging).is_ok() {
                    let _ = fs::rename(&staging, &target);
                }
                swaps += 1;
            }
            swaps
        })
    };
    let mut server = Server::start(&copy.root, None);
    let mut answered = 0;
    for _ in 0..300 {
        let envelope = server.call(
            "verify_patch_candidate",
            json!({"path": "review/swap.json"}),
        );
        let code = envelope["error"]["code"].as_str();
        assert!(
            code.is_none() || code == Some("not_a_file") || code == Some("not_found"),
            "{envelope}"
        );
        server.call(
            "resolve_artifact_location",
            json!({"path": "review/swap.json"}),
        );
        answered += 1;
    }
    stop.store(true, Ordering::SeqCst);
    assert!(swapper.join().unwrap() > 0);
    assert_eq!(answered, 300);
    server.finish();
}

/// A JSON-RPC 2.0 error for a request whose id could not be read: `"jsonrpc": "2.0"`, an `error`
/// object with an integer code and a message, and `"id": null` (present, not omitted).
fn assert_id_null(refusal: &Value) {
    let object = refusal.as_object().unwrap();
    assert_eq!(object.get("jsonrpc"), Some(&json!("2.0")), "{refusal}");
    assert_eq!(object.get("id"), Some(&Value::Null), "{refusal}");
    assert!(refusal["error"]["code"].is_i64(), "{refusal}");
    assert!(refusal["error"]["message"].is_string(), "{refusal}");
    assert_eq!(object.len(), 3, "{refusal}");
}

#[test]
fn oversized_and_deeply_nested_request_lines_are_refused_with_a_code() {
    let copy = fixture_copy();
    let mut server = Server::start(&copy.root, None);
    // 16 MiB of arguments (about 8M numbers): dropped unparsed at the line cap.
    let numbers = "1,".repeat(8 * 1024 * 1024);
    server.write_line(&format!(
        r#"{{"jsonrpc":"2.0","id":9001,"method":"tools/call","params":{{"name":"list_modules","arguments":{{"x":[{numbers}1]}}}}}}"#
    ));
    let refusal = server.next_line();
    assert_answer(&refusal);
    assert_eq!(refusal["error"]["code"], json!(-32600), "{refusal}");
    // Its id was never read: JSON-RPC 2.0 answers with `"id": null`.
    assert_id_null(&refusal);
    // Just over the cap, no newline for a while: still refused once the line ends.
    let over = "x".repeat(mcp::MAX_REQUEST_BYTES + 1);
    server.write_line(&over);
    let refusal = server.next_line();
    assert_eq!(refusal["error"]["code"], json!(-32600), "{refusal}");
    assert_id_null(&refusal);
    // Not JSON at all: a parse error, id null.
    server.write_line("{not json");
    let refusal = server.next_line();
    assert_eq!(refusal["error"]["code"], json!(-32700), "{refusal}");
    assert_id_null(&refusal);
    // Deep nesting inside the cap.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":9002,"method":"tools/call","params":{{"name":"list_modules","arguments":{{"x":{}1{}}}}}}}"#,
        "[".repeat(30_000),
        "]".repeat(30_000)
    );
    assert!(deep.len() < mcp::MAX_REQUEST_BYTES);
    server.write_line(&deep);
    let refusal = server.next_line();
    assert!(refusal["error"]["code"].is_i64(), "{refusal}");
    assert_id_null(&refusal);
    // Unknown arguments and tools are refused with codes.
    assert_eq!(
        server
            .error_code("list_modules", json!({"x": 1}))
            .as_deref(),
        Some("invalid_arguments")
    );
    let id = server.send(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert!(server.answer(id)["error"]["code"].is_i64());
    // A duplicate id while the first is in flight is refused, both are answered.
    server.finish();
}

#[test]
fn pipelined_requests_with_stdout_unread_are_bounded() {
    const REQUESTS: u64 = 100_000;
    let copy = fixture_copy();
    let mut server = Server::start(&copy.root, None);
    let first = server.next_id;
    server.next_id += REQUESTS;
    let writer = {
        let stdin = Arc::clone(&server.stdin);
        std::thread::spawn(move || {
            let mut guard = stdin.lock().unwrap();
            let stdin = guard.as_mut().unwrap();
            let mut buf = Vec::new();
            for i in 0..REQUESTS {
                let id = first + i;
                let frame = if i % 10 == 0 {
                    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                           "params": {"name": "get_workspace_identity", "arguments": {}}})
                } else {
                    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
                };
                buf.extend_from_slice(frame.to_string().as_bytes());
                buf.push(b'\n');
                if buf.len() > 64 * 1024 {
                    stdin.write_all(&buf).unwrap();
                    buf.clear();
                }
            }
            stdin.write_all(&buf).unwrap();
            stdin.flush().unwrap();
        })
    };
    // Nothing is read from stdout until the writer has pushed everything it can; the server must
    // stop reading instead of queueing. The writer can only finish once answers are drained, so
    // its state is not asserted; the memory bound is.
    std::thread::sleep(Duration::from_secs(2));
    let mid_peak = server.peak_rss();
    let mut seen = std::collections::HashSet::new();
    while seen.len() < usize::try_from(REQUESTS).unwrap() {
        let line = server.next_line();
        assert_answer(&line);
        let id = line["id"].as_u64().unwrap();
        assert!((first..first + REQUESTS).contains(&id), "{line}");
        seen.insert(id);
    }
    writer.join().unwrap();
    assert!(mid_peak <= MEMORY_BUDGET_BYTES);
    server.finish();
}

#[test]
fn two_hundred_thousand_entries_are_listed_with_a_cap() {
    const ENTRIES: usize = 200_000;
    let copy = fixture_copy();
    let modules = copy.root.join("app/modules");
    for i in 0..ENTRIES {
        fs::create_dir(modules.join(format!("m{i:06}"))).unwrap();
    }
    let store = store_dir(&copy.root);
    for i in 0..ENTRIES {
        fs::write(store.join(format!("{:064x}.json", i + 1)), b"").unwrap();
    }
    let mut server = Server::start(&copy.root, Some(&store));
    let listed = server.call("list_modules", json!({}));
    let count = listed["result"]["modules"].as_array().unwrap().len();
    assert!(count <= mcp::MAX_DIR_ENTRIES, "{count}");
    assert!(
        diagnostic_codes(&listed).contains(&"truncated"),
        "no truncation marker"
    );
    let candidates = server.call("list_patch_candidates", json!({}));
    assert_eq!(candidates["result"]["truncated"], json!(true));
    assert!(candidates["result"]["total"].as_u64().unwrap() >= u64::try_from(ENTRIES).unwrap());
    let validation = server.call("validate_app_bundle", json!({}));
    let code = validation["error"]["code"].as_str();
    assert!(
        code == Some("too_large") || validation["result"].is_object(),
        "{validation}"
    );
    every_tool(&mut server, &[]);
    server.finish();
}
