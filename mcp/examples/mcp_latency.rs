//! Latency benchmark of the built `patch-candidate-mcp` binary over real stdio (see
//! benches/mcp/run.sh): startup to the first `tools/list` answer, and p50/p99 per tool over N
//! sequential calls, with the JSON-RPC `ping` round trip on the same pipe as the transport floor.
//!
//! Usage: mcp_latency BINARY WORKSPACE STORE [CALLS] [STARTS]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::print_stdout
)]
// mcp/clippy.toml's disallowed methods bind the server; this driver spawns the built server.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "../tests/mcp/surface.rs"]
mod surface;
use surface::{every_tool_call, spawn_stdio_server};

struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Session {
    fn start(bin: &str, root: &str, store: &str) -> Self {
        let mut child = spawn_stdio_server(bin, Path::new(root), Some(Path::new(store)));
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
            next_id: 1,
        }
    }

    fn send(&mut self, frame: &Value) {
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).unwrap() > 0,
                "server closed stdout"
            );
            let reply: Value = serde_json::from_str(&line).unwrap();
            if reply["id"] == json!(id) {
                return reply;
            }
        }
    }

    fn initialize(&mut self) {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        assert!(init.get("result").is_some());
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    fn finish(mut self) {
        drop(self.stdin);
        self.child.wait().unwrap();
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx].as_secs_f64() * 1e3
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len() as f64 * 1e3;
    println!(
        "| {name} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
        samples.len(),
        percentile(&samples, 0.50),
        percentile(&samples, 0.99),
        mean,
        samples.last().unwrap().as_secs_f64() * 1e3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (bin, root, store) = (&args[1], &args[2], &args[3]);
    let calls: usize = args.get(4).map_or(1000, |n| n.parse().unwrap());
    let starts: usize = args.get(5).map_or(200, |n| n.parse().unwrap());
    let digest = std::fs::read_dir(store)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .find_map(|n| n.strip_suffix(".json").map(|h| format!("sha256:{h}")))
        .unwrap();

    println!("| measurement | n | p50 ms | p99 ms | mean ms | max ms |");
    println!("|---|---|---|---|---|---|");

    // Startup: spawn → initialize → initialized → first tools/list answer.
    let mut to_list = Vec::new();
    let mut to_init = Vec::new();
    for _ in 0..starts {
        let t0 = Instant::now();
        let mut s = Session::start(bin, root, store);
        s.initialize();
        to_init.push(t0.elapsed());
        let list = s.request("tools/list", json!({}));
        to_list.push(t0.elapsed());
        assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 11);
        s.finish();
    }
    report("startup: spawn → initialize answer", to_init);
    report("startup: spawn → first tools/list answer", to_list);

    let mut s = Session::start(bin, root, store);
    s.initialize();
    let mut ping = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t0 = Instant::now();
        let r = s.request("ping", json!({}));
        ping.push(t0.elapsed());
        assert!(r.get("result").is_some());
    }
    report("baseline: ping round trip (transport floor)", ping);

    let mut tools = every_tool_call("app/modules/notes/module.yaml", &digest);
    tools.push((
        "resolve_artifact_location (refused: traversal)",
        json!({"path": "../x"}),
    ));
    for (label, arguments) in tools {
        let name = label.split_whitespace().next().unwrap();
        let mut samples = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t0 = Instant::now();
            let r = s.request("tools/call", json!({"name": name, "arguments": arguments}));
            samples.push(t0.elapsed());
            assert!(
                r["result"]["structuredContent"]["protocol_schema_version"]
                    == json!("mozaiks.mcp.v1")
            );
        }
        report(label, samples);
    }
    s.finish();
}
