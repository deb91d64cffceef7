//! The live image's container side on its own: the real codex-acp agent in the live image under
//! the turn's hardened flags (`--network none`, read-only root, no capabilities, pids/memory
//! limits, `--init`), driven over the framed stdio protocol by a harness that plays the worker
//! and a scripted Responses-API model (answering each tunnelled `POST /v1/responses` with an SSE
//! script). No gateway is involved: this proves the runner's tunnel, the agent configuration and
//! the harvest's judgement independently of the worker's side.
//!
//! The image is built with a throwaway tag from the binaries under test (`images/build.sh
//! --live`; the locked npm tree comes from the shared cache). With
//! `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon or a failed build fails these tests.

use std::io::{Read as _, Write as _};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use snapshot::ProposalStatus;
use tunnel::{ChannelId, Decoder, Frame};
use turn::Agent;
use turn_runner::testkit::{spawn_piped, text_map};

use crate::support::{
    LOCKED_DOWN, TMPFS_AND_USER, TURN_SECCOMP_OPT, build_live_image, container_exists,
    docker_cli_case, docker_lock, tally,
};

pub const TEST_LIVE_IMAGE: &str = "patch-candidate-live:selftest";

/// The task of the scripted live turns through a gateway (`cli_live`, `service_live`).
pub const LIVE_TASK: &str = "Make answer return 2 and add app/new.py.";

/// A repository with `app/service.py` at one commit, and an approval of [`LIVE_TASK`] over `app/`
/// that may create `app/new.py`: (repository, the approval's directory, the approval file).
pub fn live_fixture() -> (tempfile::TempDir, tempfile::TempDir, std::path::PathBuf) {
    let files = std::collections::BTreeMap::from([(
        "app/service.py",
        "def answer():\n    return 1\n".to_owned(),
    )]);
    let (repo, commit) = crate::support::git_repo(&files);
    let context = crate::support::approval(
        repo.path(),
        &commit,
        LIVE_TASK,
        &["app/"],
        &[],
        &["app/new.py"],
        &[],
    );
    let approvals = tempfile::tempdir().unwrap();
    let approval = crate::support::write_approval(approvals.path(), &context);
    (repo, approvals, approval)
}
const MODEL: &str = "gpt-5.5";
const PORT: u16 = 8417;

/// The runsc turn profile (`turn-runsc.json`: `clone3` allowed, gVisor ignores `errnoRet`).
const TURN_RUNSC_SECCOMP_OPT: &str = concat!(
    "seccomp=",
    env!("CARGO_MANIFEST_DIR"),
    "/../worker/container/seccomp/turn-runsc.json"
);

/// The turn's create flags as `docker run` arguments (the live turn uses the offline spec),
/// under runc: [`TURN_SECCOMP_OPT`] and 64 pids; under runsc the runtime, its own profile and
/// its pids limit (the Sentry's host threads count: 64 ends the sandbox before the agent runs).
fn hardened(runtime: Option<&str>) -> Vec<&'static str> {
    assert_eq!(
        (container::RUNC_PIDS_LIMIT, container::RUNSC_PIDS_LIMIT),
        (64, 512),
        "the harness's pids limits follow the worker's"
    );
    let mut args = match runtime {
        Some("runsc") => vec![
            "--runtime",
            "runsc",
            "--security-opt",
            TURN_RUNSC_SECCOMP_OPT,
            "--pids-limit",
            "512",
        ],
        None => vec!["--security-opt", TURN_SECCOMP_OPT, "--pids-limit", "64"],
        Some(other) => panic!("no test profile for runtime {other}"),
    };
    args.extend_from_slice(LOCKED_DOWN);
    args.extend_from_slice(&[
        "--memory",
        "768m",
        "--memory-swap",
        "768m",
        "--cpus",
        "1",
        "--ulimit",
        "nofile=1024:1024",
        "--ipc",
        "private",
    ]);
    args.extend_from_slice(TMPFS_AND_USER);
    args
}

static IMAGE: OnceLock<Result<String, String>> = OnceLock::new();
static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Builds the live image with a throwaway tag from the runner under test.
pub fn live_image() -> String {
    IMAGE
        .get_or_init(|| build_live_image(Agent::Codex, TEST_LIVE_IMAGE, "codex-acp", "2.6.0"))
        .clone()
        .expect("live image build failed")
}

/// One model turn of the script: the output items of one Responses-API answer, or a stall (the
/// harness never answers; it sends STOP after `stop_after`).
#[derive(Clone, Debug)]
pub enum Step {
    Items(Vec<Value>),
    Stall,
}

/// An `apply_patch` call (Codex's freeform tool).
pub fn apply_patch(call_id: &str, patch: &str) -> Value {
    json!({"type": "custom_tool_call", "name": "apply_patch", "call_id": call_id, "input": patch})
}

/// An `exec_command` call.
pub fn exec_command(call_id: &str, cmd: &str) -> Value {
    json!({"type": "function_call", "name": "exec_command", "call_id": call_id,
           "arguments": json!({"cmd": cmd}).to_string()})
}

/// A final assistant message.
pub fn message(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": "msg-1",
           "content": [{"type": "output_text", "text": text}]})
}

/// The SSE body of one scripted answer.
pub fn sse_body(index: usize, items: &[Value]) -> Vec<u8> {
    let id = format!("resp-{index}");
    let mut events = vec![json!({"type": "response.created", "response": {"id": id}})];
    events.extend(
        items
            .iter()
            .map(|item| json!({"type": "response.output_item.done", "item": item})),
    );
    events.push(json!({"type": "response.completed", "response": {"id": id,
        "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120,
                  "input_tokens_details": null, "output_tokens_details": null}}}));
    let mut body = Vec::new();
    for e in events {
        body.extend_from_slice(
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()).as_bytes(),
        );
    }
    body
}

/// One tunnelled HTTP request as the harness parsed it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub head: String,
    pub body: Value,
}

/// What one harness run observed.
#[derive(Debug, Default)]
pub struct LiveRun {
    pub result: Option<Vec<u8>>,
    pub requests: Vec<Seen>,
    pub events: Vec<Value>,
    pub resets: Vec<(u32, String)>,
    pub exit: Option<i32>,
    pub stderr: String,
    /// Every byte the container wrote to stdout.
    pub raw_out: Vec<u8>,
    pub elapsed: Duration,
}

impl LiveRun {
    /// What a failed assertion prints: the runner's stderr, its events, the model requests and
    /// the resets it saw.
    pub fn diagnosis(&self) -> String {
        format!(
            "stderr: {}\nevents: {:?}\n{} model requests, resets {:?}, {} bytes out in {:?}",
            self.stderr,
            self.events,
            self.requests.len(),
            self.resets,
            self.raw_out.len(),
            self.elapsed
        )
    }

    pub fn document(&self) -> Value {
        let bytes = self
            .result
            .as_ref()
            .unwrap_or_else(|| panic!("no RESULT_END; stderr: {}", self.stderr));
        serde_json::from_slice(bytes).unwrap()
    }

    pub fn status(&self) -> ProposalStatus {
        serde_json::from_value(self.document()["proposal"]["status"].clone()).unwrap()
    }

    /// (path, content) of the archive's entries.
    pub fn archive(&self) -> Vec<(String, String)> {
        let doc = self.document();
        let b64 = doc["workspace_archive_base64"].as_str().expect("archive");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        archive::read_archive_entries(&bytes, &archive::ArchiveLimits::default())
            .expect("canonical archive")
            .into_iter()
            .map(|(p, bytes)| (p.to_string(), String::from_utf8(bytes).unwrap()))
            .collect()
    }
}

/// The turn request: `files` editable, `read_only` inspection files, creates granted.
pub fn live_request(
    files: &[(&str, &str)],
    read_only: &[(&str, &str)],
    creates: &[&str],
) -> Vec<u8> {
    let mut request = json!({
        "app_id": "app", "build_family": "app_bundle", "build_record_id": "build-1",
        "change_class": "patch", "raw_user_request": "Edit the files as asked.",
        "files": text_map(files), "read_only_files": text_map(read_only),
        "live": {"agent": "codex", "model": MODEL, "port": PORT},
    });
    if !creates.is_empty() {
        request["create_paths"] = json!(creates);
        request["delete_paths"] = json!([]);
    }
    serde_json::to_vec(&request).unwrap()
}

/// Options of a harness run.
#[derive(Clone, Debug)]
pub struct Harness {
    pub script: Vec<Step>,
    /// The container runtime (`None`: the daemon's default, runc).
    pub runtime: Option<&'static str>,
    /// Send STOP this long after a stall began.
    pub stop_after: Duration,
    pub deadline: Duration,
}

impl Harness {
    /// The same harness under `runtime`.
    pub fn under(self, runtime: Option<&'static str>) -> Self {
        Self { runtime, ..self }
    }

    pub fn new(script: Vec<Step>) -> Self {
        Self {
            script,
            runtime: None,
            stop_after: Duration::from_secs(3),
            deadline: Duration::from_secs(120),
        }
    }
}

fn send(stdin: &mut ChildStdin, frame: &Frame) {
    let _ = stdin.write_all(&frame.to_bytes());
}

/// Parses a complete HTTP/1.1 request with a content-length body, when `buf` holds one.
fn parse_request(buf: &[u8]) -> Option<Seen> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8(buf[..end].to_vec()).ok()?;
    let length: usize = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    })?;
    let body = buf.get(end + 4..end + 4 + length)?;
    Some(Seen {
        head,
        body: serde_json::from_slice(body).ok()?,
    })
}

/// Runs the live image once: plays the worker (HELLO, the request, STOP on a stall) and the model
/// (each complete tunnelled request is answered with the next scripted SSE body, then FIN).
pub fn run_live(request: &[u8], harness: &Harness) -> LiveRun {
    let image = live_image();
    let name = format!(
        "patch-candidate-live-test-{}-{}",
        crate::support::process_tag(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let started = Instant::now();
    let (mut child, mut stdin) = spawn_piped(
        Command::new("docker")
            .args(["run", "-i", "--rm", "--name", &name])
            .args(hardened(harness.runtime))
            .arg(&image),
    );
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    // Deadline guard: the container is killed when the test's deadline passes.
    let done = std::sync::Arc::new(Mutex::new(false));
    let guard_done = done.clone();
    let guard_name = name.clone();
    let deadline = harness.deadline;
    let guard = std::thread::spawn(move || {
        let start = Instant::now();
        while start.elapsed() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            if *guard_done.lock().unwrap() {
                return;
            }
        }
        let _ = Command::new("docker")
            .args(["rm", "-f", &guard_name])
            .output();
    });

    send(&mut stdin, &Frame::Hello);
    for frame in Frame::request_frames(request) {
        send(&mut stdin, &frame);
    }
    send(&mut stdin, &Frame::RequestEnd);

    // Frames arrive on a reader thread so a stall can be timed.
    let (tx, rx) = std::sync::mpsc::channel::<Option<Vec<u8>>>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.send(None);
                    return;
                }
                Ok(n) => {
                    if tx.send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });

    let mut run = LiveRun::default();
    let mut decoder = Decoder::new();
    let mut channels: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
    let mut answered = 0usize;
    let mut result = Vec::new();
    let mut stall_since: Option<Instant> = None;
    let mut stopped = false;
    'outer: loop {
        let chunk = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(_) => {
                if let Some(since) = stall_since
                    && !stopped
                    && since.elapsed() >= harness.stop_after
                {
                    send(&mut stdin, &Frame::Stop);
                    stopped = true;
                }
                continue;
            }
        };
        run.raw_out.extend_from_slice(&chunk);
        let frames = decoder.push(&chunk).expect("the runner's frames decode");
        for frame in frames {
            match frame {
                Frame::Hello => {}
                Frame::Open(n) => {
                    channels.insert(n.get(), Vec::new());
                }
                Frame::Data(n, bytes) => {
                    let buf = channels.entry(n.get()).or_default();
                    buf.extend_from_slice(bytes.as_bytes());
                    if let Some(seen) = parse_request(buf) {
                        buf.clear();
                        run.requests.push(seen);
                        let step = harness
                            .script
                            .get(answered)
                            .cloned()
                            .unwrap_or_else(|| Step::Items(vec![message("done")]));
                        answered += 1;
                        match step {
                            Step::Items(items) => {
                                let body = sse_body(answered, &items);
                                let mut response = format!(
                                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                                    body.len()
                                )
                                .into_bytes();
                                response.extend_from_slice(&body);
                                for f in Frame::data_frames(n, &response) {
                                    send(&mut stdin, &f);
                                }
                                send(&mut stdin, &Frame::Fin(n));
                            }
                            Step::Stall => stall_since = Some(Instant::now()),
                        }
                    }
                }
                Frame::Fin(_) => {}
                Frame::Reset(n, code) => run.resets.push((n.get(), code.as_str().to_owned())),
                Frame::Event(payload) => run.events.push(Value::Object(payload.object())),
                Frame::Result(chunk) => result.extend_from_slice(chunk.as_bytes()),
                Frame::ResultEnd => {
                    run.result = Some(std::mem::take(&mut result));
                    break 'outer;
                }
                other => panic!("unexpected frame from the container: {other:?}"),
            }
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    *done.lock().unwrap() = true;
    let _ = guard.join();
    run.exit = status.code();
    run.stderr = stderr_thread.join().unwrap();
    run.elapsed = started.elapsed();
    assert!(!container_exists(&name), "container {name} left behind");
    run
}

const A_TXT: &str = "hello\n";

fn files() -> Vec<(&'static str, &'static str)> {
    vec![("src/a.txt", A_TXT), ("src/b.txt", "bee\n")]
}

fn edit_and_create() -> Vec<Step> {
    vec![
        Step::Items(vec![apply_patch(
            "call-1",
            "*** Begin Patch\n*** Update File: src/a.txt\n@@\n-hello\n+hello world\n*** Add File: src/new.txt\n+created\n*** End Patch",
        )]),
        Step::Items(vec![message("Edited src/a.txt and created src/new.txt.")]),
    ]
}

/// Asserts that `run` exited 0 with a `rejected_scope` proposal carrying `error` and no
/// workspace archive; its document.
fn assert_rejected_scope(run: &LiveRun, error: &str) -> Value {
    assert_eq!(run.exit, Some(0), "{}", run.diagnosis());
    let doc = run.document();
    assert_eq!(run.status(), ProposalStatus::RejectedScope, "{doc}");
    assert_eq!(doc["proposal"]["error"], error);
    assert_eq!(doc["workspace_archive_base64"], Value::Null);
    doc
}

fn permission_events(run: &LiveRun, decision: &str) -> usize {
    run.events
        .iter()
        .filter(|e| e["event"] == "permission" && e["decision"] == decision)
        .count()
}

#[test]
fn docker_live_container_edits_an_approved_file_and_creates_a_granted_one() {
    docker_cli_case(
        "docker_live_container_edits_an_approved_file_and_creates_a_granted_one",
        || assert_edits_and_creates(None),
    );
}

/// The same Codex cases under runsc (gVisor, the runsc turn profile): an edit and a granted
/// create, an ungranted create and an edit of a read-only file refused by the harvest, a stalled
/// turn stopped and harvested.
#[test]
fn docker_live_container_runsc_codex_cases() {
    if !crate::support::docker_cli_ready() {
        return;
    }
    let runsc = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(crate::runtimes::docker_for("runsc"));
    if runsc.is_none() {
        return;
    }
    let _lock = docker_lock().blocking_lock();
    let runtime = Some("runsc");
    assert_edits_and_creates(runtime);
    for call in refused_calls() {
        assert_refused_under(call, runtime);
    }
    assert_stops_and_harvests(runtime);
    tally("docker_live_container_runsc_codex_cases");
}

/// The runner exited 0 with a completed proposal.
fn assert_completed(run: &LiveRun) {
    assert_eq!(run.exit, Some(0), "{}", run.diagnosis());
    assert_eq!(
        run.status(),
        ProposalStatus::Completed,
        "{}\nstderr: {}",
        run.document(),
        run.stderr
    );
}

/// An edit of an approved file and a granted create under `runtime`: a completed proposal with
/// both, two Responses requests without a credential, no permission request (Codex runs with its
/// own sandbox and approvals off: the container is the sandbox, the harvest the judge).
fn assert_edits_and_creates(runtime: Option<&'static str>) {
    let request = live_request(
        &files(),
        &[("docs/readme.md", "read me\n")],
        &["src/new.txt"],
    );
    let run = run_live(&request, &Harness::new(edit_and_create()).under(runtime));
    assert_completed(&run);
    assert_eq!(
        run.archive(),
        vec![
            ("src/a.txt".to_owned(), "hello world\n".to_owned()),
            ("src/b.txt".to_owned(), "bee\n".to_owned()),
            ("src/new.txt".to_owned(), "created\n".to_owned()),
        ]
    );
    assert_eq!(run.document()["proposal"]["provider_model"], MODEL);
    // Two model requests, both the Responses API over the loopback listener, no credential.
    assert_eq!(run.requests.len(), 2);
    for seen in &run.requests {
        assert!(
            seen.head.starts_with("POST /v1/responses HTTP/1.1\r\n"),
            "{}",
            seen.head
        );
        assert!(!seen.head.to_ascii_lowercase().contains("authorization"));
        assert_eq!(seen.body["model"], MODEL);
        assert_eq!(seen.body["stream"], true);
        let tools: Vec<&str> = seen.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str().or(t["type"].as_str()))
            .collect();
        assert!(tools.contains(&"apply_patch"), "{tools:?}");
        assert!(!tools.contains(&"web_search"), "{tools:?}");
    }
    assert_eq!(
        (
            permission_events(&run, "allowed"),
            permission_events(&run, "refused")
        ),
        (0, 0),
        "{:?}",
        run.events
    );
    assert!(run.events.iter().any(|e| {
        e["event"] == "tool_call"
            && e["files"]
                .as_array()
                .is_some_and(|f| f.contains(&json!("src/a.txt")))
    }));
}

/// One action outside the grants: Codex makes it (no permission is asked), its output goes back
/// to the model, the turn ends, and the harvest refuses the tree: `rejected_scope` with
/// `REPOSITORY_PATCH_ARCHIVE_SCOPE` and no archive.
fn assert_refused(call: Value) {
    assert_refused_under(call, None);
}

/// [`assert_refused`] under `runtime`.
fn assert_refused_under(call: Value, runtime: Option<&'static str>) {
    let request = live_request(&files(), &[("docs/readme.md", "read me\n")], &[]);
    let run = run_live(
        &request,
        &Harness::new(vec![
            Step::Items(vec![call]),
            Step::Items(vec![message("Done.")]),
        ])
        .under(runtime),
    );
    let doc = assert_rejected_scope(&run, "REPOSITORY_PATCH_ARCHIVE_SCOPE");
    assert_eq!(permission_events(&run, "refused"), 0, "{:?}", run.events);
    assert_eq!(permission_events(&run, "allowed"), 0);
    assert!(
        doc["proposal"]["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("out-of-scope modifications: ")),
        "{doc}"
    );
    assert_eq!(run.requests.len(), 2);
}

/// The actions the harvest refuses: an ungranted create, an edit of a read-only file.
fn refused_calls() -> Vec<Value> {
    vec![
        apply_patch(
            "call-1",
            "*** Begin Patch\n*** Add File: src/other.txt\n+nope\n*** End Patch",
        ),
        apply_patch(
            "call-1",
            "*** Begin Patch\n*** Update File: docs/readme.md\n@@\n-read me\n+changed\n*** End Patch",
        ),
    ]
}

/// Docker test `name`: the runner refuses [`refused_calls`]`[index]` (skipped without a daemon).
fn refused_case(index: usize, name: &str) {
    docker_cli_case(name, || assert_refused(refused_calls().swap_remove(index)));
}

#[test]
fn docker_live_container_refuses_an_ungranted_create() {
    refused_case(0, "docker_live_container_refuses_an_ungranted_create");
}

#[test]
fn docker_live_container_refuses_an_edit_of_a_read_only_file() {
    refused_case(
        1,
        "docker_live_container_refuses_an_edit_of_a_read_only_file",
    );
}

/// A command runs (the container is the sandbox; Codex asks nothing). Its write outside the
/// workspace is never harvested; its write to a file outside the grants fails the turn at the
/// harvest, exactly as an edit tool's would.
#[test]
fn docker_live_container_allows_a_shell_command_and_the_harvest_refuses_its_ungranted_write() {
    docker_cli_case(
        "docker_live_container_allows_a_shell_command_and_the_harvest_refuses_its_ungranted_write",
        || {
            let request = live_request(&files(), &[("docs/readme.md", "read me\n")], &[]);
            let run = run_live(
                &request,
                &Harness::new(vec![
                    Step::Items(vec![exec_command(
                        "call-1",
                        "echo x > /tmp/outside.txt && echo y > src/other.txt && printf 'ran-%s' ok",
                    )]),
                    Step::Items(vec![message("Done.")]),
                ]),
            );
            assert_rejected_scope(&run, "REPOSITORY_PATCH_ARCHIVE_SCOPE");
            assert_eq!(permission_events(&run, "allowed"), 0, "{:?}", run.events);
            assert_eq!(permission_events(&run, "refused"), 0);
            // The runner counted the command (a tool call of kind `execute`).
            assert!(
                run.events
                    .iter()
                    .any(|e| e["event"] == "tool_call" && e["kind"] == "execute"),
                "{:?}",
                run.events
            );
            // The command's output went back to the model: it ran.
            assert_eq!(run.requests.len(), 2);
            assert!(
                run.requests[1].body.to_string().contains("ran-ok"),
                "the command did not run"
            );
        },
    );
}

#[test]
fn docker_live_container_stops_a_stalled_turn_and_harvests() {
    docker_cli_case(
        "docker_live_container_stops_a_stalled_turn_and_harvests",
        || assert_stops_and_harvests(None),
    );
}

/// A stall after the first edit under `runtime`: STOP halts the agent, the edit is harvested.
fn assert_stops_and_harvests(runtime: Option<&'static str>) {
    let request = live_request(&files(), &[], &["src/new.txt"]);
    let mut script = edit_and_create();
    script.truncate(1);
    script.push(Step::Stall);
    let run = run_live(&request, &Harness::new(script).under(runtime));
    // STOP halts the agent mid-turn; the edit made before the stall is harvested.
    assert_completed(&run);
    let summaries: Vec<Value> = run.document()["proposal"]["provider_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["summary"].clone())
        .collect();
    assert!(
        summaries.contains(&json!("turn stopped by the worker")),
        "{summaries:?}"
    );
    assert_eq!(run.archive().len(), 3);
}

#[test]
fn docker_live_container_ends_without_a_result_on_a_protocol_violation() {
    docker_cli_case(
        "docker_live_container_ends_without_a_result_on_a_protocol_violation",
        || {
            let image = live_image();
            // A frame type from the container's own direction (OPEN) sent by the worker.
            let mut input = Frame::Hello.to_bytes();
            input.extend(Frame::Open(ChannelId::try_from(1).unwrap()).to_bytes());
            let out = Command::new("docker")
                .args(["run", "-i", "--rm"])
                .args(hardened(None))
                .arg(&image)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    c.stdin.take().unwrap().write_all(&input)?;
                    c.wait_with_output()
                })
                .unwrap();
            let frames = Decoder::new().push(&out.stdout).unwrap();
            assert_eq!(frames, vec![Frame::Hello], "only HELLO, never a result");
            assert_eq!(out.status.code(), Some(2));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("PATCH_CANDIDATE_TUNNEL_DIRECTION"),
                "{stderr}"
            );
        },
    );
}
