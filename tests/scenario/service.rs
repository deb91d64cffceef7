//! `patch-candidate serve` end to end: the built binary, the real Docker daemon with the proof
//! image, a real SQLite job store in a fresh state directory (and PostgreSQL for many hosts).
//! Jobs go in through `jobs submit` (and the HTTP API), come out as candidates in the store.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::proof::demo_files;
use crate::support::*;

pub fn bin() -> Command {
    let mut cmd = Command::new(workspace_bin("patch-candidate"));
    cmd.env_remove("DOCKER_HOST")
        .env_remove("PATCH_CANDIDATE_FAULT");
    cmd
}

/// A fresh state directory holding a copy of the recorded images.
pub fn state_with_images() -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    let images = proof_images();
    std::fs::write(
        state.path().join("images.json"),
        serde_json::to_vec(&images).unwrap(),
    )
    .unwrap();
    state
}

pub fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout is not JSON: {} / stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A repository and one approval per task.
pub struct Fixture {
    pub repo: tempfile::TempDir,
    pub commit: String,
    pub approvals: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        let (repo, commit) = git_repo(&demo_files());
        Self {
            repo,
            commit,
            approvals: tempfile::tempdir().unwrap(),
        }
    }

    /// Writes the approval of `task` and returns its path.
    pub fn approval(&self, task: &str) -> PathBuf {
        let context = approval(
            self.repo.path(),
            &self.commit,
            task,
            &["app/", "tests/"],
            &["tests/"],
            &[],
            &[],
        );
        let name = format!("{}.json", vocab::sha256_bare_hex(task.as_bytes()));
        let path = self.approvals.path().join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(&context).unwrap()).unwrap();
        path
    }
}

/// `jobs submit` of `task` against the fixture; returns the JSON answer.
pub fn submit(state: &Path, database: Option<&str>, f: &Fixture, task: &str) -> serde_json::Value {
    let out = submit_raw(
        state,
        database,
        f.repo.path().to_str().unwrap(),
        &f.approval(task),
        &[],
    );
    assert!(
        out.status.success(),
        "submit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(&out)
}

pub fn submit_raw(
    state: &Path,
    database: Option<&str>,
    repo: &str,
    approval: &Path,
    extra: &[&str],
) -> Output {
    let mut cmd = bin();
    cmd.args(["--json", "jobs", "submit", "--repo", repo, "--approval"])
        .arg(approval)
        .args(extra)
        .env("PATCH_CANDIDATE_STATE_DIR", state);
    if let Some(db) = database {
        cmd.args(["--database", db]);
    }
    cmd.output().unwrap()
}

/// `jobs <args…> --json` against the store.
pub fn jobs(state: &Path, database: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = bin();
    cmd.arg("--json")
        .arg("jobs")
        .args(args)
        .env("PATCH_CANDIDATE_STATE_DIR", state);
    if let Some(db) = database {
        cmd.args(["--database", db]);
    }
    cmd.output().unwrap()
}

pub fn show(state: &Path, database: Option<&str>, id: &str) -> serde_json::Value {
    let out = jobs(state, database, &["show", id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_of(&out)["job"].clone()
}

/// Waits until job `id` is in one of `states`; returns the job.
pub fn wait_state(
    state: &Path,
    database: Option<&str>,
    id: &str,
    states: &[&str],
    limit: Duration,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let job = show(state, database, id);
        if states.iter().any(|s| job["state"] == *s) {
            return job;
        }
        assert!(
            started.elapsed() < limit,
            "job {id} still {} after {limit:?}: {job}",
            job["state"]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A running `serve` process, its stderr (JSON log lines) collected.
pub struct Service {
    pub child: Child,
    pub lines: Arc<Mutex<Vec<String>>>,
    pub addr: SocketAddr,
    pub state: PathBuf,
}

/// Options of one serve process in a test.
#[derive(Clone)]
pub struct ServeOpts<'a> {
    pub database: Option<&'a str>,
    pub host_id: Option<&'a str>,
    pub max_turns: usize,
    pub lease: &'a str,
    pub heartbeat: &'a str,
    pub drain_timeout: &'a str,
    pub fault: Option<&'a str>,
    pub extra: Vec<&'a str>,
    /// Environment variables of the serve process (e.g. a model credential).
    pub env: Vec<(&'a str, &'a str)>,
}

impl Default for ServeOpts<'_> {
    fn default() -> Self {
        Self {
            database: None,
            host_id: None,
            max_turns: 2,
            lease: "3s",
            heartbeat: "500ms",
            drain_timeout: "60s",
            fault: None,
            extra: Vec::new(),
            env: Vec::new(),
        }
    }
}

impl Service {
    /// Starts `serve` and waits until it runs (its store open).
    pub fn start(state: &Path, opts: &ServeOpts<'_>) -> Self {
        Self::start_until(state, opts, "PATCH_CANDIDATE_SERVICE_STARTED")
    }

    /// Starts `serve` and waits for the log line `code` carrying the listen address
    /// (`PATCH_CANDIDATE_SERVICE_LISTENING`: bound, the store perhaps not open yet).
    pub fn start_until(state: &Path, opts: &ServeOpts<'_>, code: &str) -> Self {
        let mut cmd = bin();
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--poll-interval",
            "100ms",
        ])
        .args(["--lease", opts.lease, "--heartbeat", opts.heartbeat])
        .args(["--drain-timeout", opts.drain_timeout, "--snooze", "1s"])
        .args(["--retry-base", "200ms"])
        .args(["--max-turns", &opts.max_turns.to_string()])
        .args(&opts.extra)
        .envs(opts.env.iter().copied())
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(db) = opts.database {
            cmd.args(["--database", db]);
        }
        if let Some(h) = opts.host_id {
            cmd.args(["--host-id", h]);
        }
        if let Some(fault) = opts.fault {
            cmd.env("PATCH_CANDIDATE_FAULT", fault);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if std::env::var_os("SERVICE_TEST_ECHO").is_some() {
                    eprintln!("[serve] {line}");
                }
                sink.lock().unwrap().push(line);
            }
        });
        let started = Instant::now();
        let addr = loop {
            let found = lines.lock().unwrap().iter().find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                (v["fields"]["code"] == code)
                    .then(|| v["fields"]["listen"].as_str().unwrap().parse().unwrap())
            });
            if let Some(addr) = found {
                break addr;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!(
                    "serve exited with {status} before starting: {:?}",
                    lines.lock().unwrap()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "serve did not start: {:?}",
                lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        Self {
            child,
            lines,
            addr,
            state: state.to_path_buf(),
        }
    }

    /// Whether a log line with `code` was written.
    pub fn logged(&self, code: &str) -> bool {
        self.lines.lock().unwrap().iter().any(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["fields"]["code"] == code)
        })
    }

    /// Waits for a log line with `code`.
    pub fn wait_logged(&self, code: &str, limit: Duration) {
        let started = Instant::now();
        while !self.logged(code) {
            assert!(
                started.elapsed() < limit,
                "no {code} log line after {limit:?}: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGKILL and reap.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then waits for the exit status.
    pub fn stop(self) -> std::process::ExitStatus {
        self.signal("-TERM");
        self.wait()
    }

    /// Waits for the exit status.
    pub fn wait(mut self) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "serve did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.state.join("api-token"))
            .unwrap()
            .trim()
            .to_owned()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request (Connection: close); returns the status and body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    if let Some(b) = body {
        // The server may answer (413) and close before reading everything.
        let _ = stream.write_all(b);
    }
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(&raw)));
    let head = String::from_utf8_lossy(&raw[..text_end]).to_string();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[text_end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
}

/// Staging trees left in a state directory.
pub fn staging_left(state: &Path) -> Vec<String> {
    match std::fs::read_dir(state.join("serve-staging")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// The store's view, read directly (candidate bytes, usage rows).
pub async fn open_store(state: &Path, database: Option<&str>) -> jobs::JobStore {
    jobs::JobStore::open(database, state).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_runs_submitted_jobs_on_sqlite() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let state = state_with_images();
    let f = Fixture::new();
    let service = Service::start(state.path(), &ServeOpts::default());

    let first = submit(state.path(), None, &f, "Update the dashboard.");
    assert_eq!(first["created"], true);
    let id = first["job"]["id"].as_str().unwrap().to_owned();
    // The same inputs again: the existing job, not a second one.
    let again = submit(state.path(), None, &f, "Update the dashboard.");
    assert_eq!(again["created"], false);
    assert_eq!(again["job"]["id"], id.as_str());
    let second = submit(state.path(), None, &f, "Update the dashboard again.");
    let id2 = second["job"]["id"].as_str().unwrap().to_owned();

    for id in [&id, &id2] {
        let job = wait_state(
            state.path(),
            None,
            id,
            &["completed", "failed"],
            Duration::from_secs(120),
        );
        assert_eq!(job["state"], "completed", "{job}");
        assert_eq!(job["attempts"], 1);
        let digest = job["candidate_digest"].as_str().unwrap().to_owned();
        let store = open_store(state.path(), None).await;
        let job_id = vocab::JobId::parse(id).unwrap();
        let bytes = store.candidate(&job_id).await.unwrap().unwrap();
        let candidate = finalizer::validate_candidate_json(&bytes).unwrap();
        assert_eq!(
            finalizer::repository_patch_digest(&candidate)
                .unwrap()
                .to_string(),
            digest
        );
        assert_eq!(store.usage(&job_id).await.unwrap().len(), 1);
    }
    let listed = json_of(&jobs(state.path(), None, &["list", "--state", "completed"]));
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 2);
    let logs = json_of(&jobs(state.path(), None, &["logs", &id]));
    let codes: Vec<&str> = logs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert!(
        codes.contains(&"PATCH_CANDIDATE_JOB_COMPLETED"),
        "{codes:?}"
    );
    let workers = bin()
        .args(["--json", "workers"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path())
        .output()
        .unwrap();
    assert_eq!(json_of(&workers)["hosts"].as_array().unwrap().len(), 1);

    // Every log line is one JSON object; a job's lines carry its job, attempt and host ids.
    let lines = service.lines.lock().unwrap().clone();
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}"));
        if v["fields"]["code"] == "PATCH_CANDIDATE_JOB_COMPLETED" {
            assert!(
                v["span"]["job"].is_string()
                    && v["span"]["attempt"].is_string()
                    && v["span"]["host"].is_string(),
                "{l}"
            );
        }
    }
    assert!(
        !lines.iter().any(|l| l.contains("Dashboard()")),
        "source text in the log"
    );

    let status = service.stop();
    assert_eq!(status.code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_runs_submitted_jobs_on_sqlite");
}

/// The store's events of job `id`: their codes.
pub fn event_codes(state: &Path, database: Option<&str>, id: &str) -> Vec<String> {
    let logs = json_of(&jobs(state, database, &["logs", id]));
    logs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap().to_owned())
        .collect()
}

/// SIGKILL the service at each point of a job's life, restart it: exactly one recorded result,
/// one candidate, one usage row (the attempt that ran to the end), no container, no staging tree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_crash_matrix_records_exactly_one_result() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    for point in turn::fault::POINTS {
        let state = state_with_images();
        let f = Fixture::new();
        let fault = format!("{point}:pause");
        let opts = ServeOpts {
            lease: "2s",
            heartbeat: "300ms",
            fault: Some(&fault),
            ..ServeOpts::default()
        };
        let crashing = Service::start(state.path(), &opts);
        let id = submit(state.path(), None, &f, "Update the dashboard.")["job"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        crashing.wait_logged("PATCH_CANDIDATE_FAULT", Duration::from_secs(60));
        crashing.kill();
        assert_eq!(show(state.path(), None, &id)["state"], "running", "{point}");

        let restarted = Service::start(
            state.path(),
            &ServeOpts {
                lease: "2s",
                heartbeat: "300ms",
                ..ServeOpts::default()
            },
        );
        let job = wait_state(
            state.path(),
            None,
            &id,
            &["completed", "failed"],
            Duration::from_secs(120),
        );
        assert_eq!(job["state"], "completed", "{point}: {job}");
        assert_eq!(
            job["attempts"], 2,
            "{point}: the killed attempt is spent, the second completes"
        );
        let store = open_store(state.path(), None).await;
        let job_id = vocab::JobId::parse(&id).unwrap();
        assert!(store.candidate(&job_id).await.unwrap().is_some());
        let usage = store.usage(&job_id).await.unwrap();
        assert_eq!(
            usage.len(),
            1,
            "{point}: one usage row, of the attempt that ran to the end"
        );
        let codes = event_codes(state.path(), None, &id);
        let completed = codes
            .iter()
            .filter(|c| *c == "PATCH_CANDIDATE_JOB_COMPLETED")
            .count();
        assert_eq!(completed, 1, "{point}: {codes:?}");
        // The janitor removes the killed attempt's container once that attempt is over.
        let started = Instant::now();
        loop {
            let left = own_turns(&docker).await.unwrap();
            if left.is_empty() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{point}: containers left: {:?}",
                left.iter().map(|c| &c.names).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(restarted.stop().code(), Some(0));
        assert!(staging_left(state.path()).is_empty(), "{point}");
        assert_no_turn_containers(&docker).await;
    }
    tally("docker_service_crash_matrix_records_exactly_one_result");
}

fn error_code(status_body: &(u16, Vec<u8>)) -> String {
    let v: serde_json::Value = serde_json::from_slice(&status_body.1).unwrap_or_else(|_| {
        panic!(
            "error body is not JSON: {}",
            String::from_utf8_lossy(&status_body.1)
        )
    });
    assert!(v["error"]["message"].is_string(), "{v}");
    v["error"]["code"].as_str().unwrap().to_owned()
}

/// The HTTP API: bearer token, strict bounded JSON, ids through their types, 1,000 concurrent
/// requests; a job submitted over HTTP runs and its candidate is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_api_auth_bad_input_and_a_job() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let state = state_with_images();
    let f = Fixture::new();
    let service = Service::start(state.path(), &ServeOpts::default());
    let addr = service.addr;
    let token = service.token();
    let mode = std::fs::metadata(state.path().join("api-token")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );

    assert_eq!(http(addr, "GET", "/healthz", None, None).0, 200);
    assert_eq!(http(addr, "GET", "/readyz", None, None).0, 200);
    for (path, method) in [
        ("/v1/jobs", "GET"),
        ("/metrics", "GET"),
        ("/v1/jobs", "POST"),
    ] {
        let r = http(addr, method, path, None, Some(b"{}"));
        assert_eq!(r.0, 401, "{method} {path}");
        assert_eq!(error_code(&r), "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED");
        let wrong = format!("{}x", &token[..token.len() - 1]);
        let r = http(addr, method, path, Some(&wrong), Some(b"{}"));
        assert_eq!(r.0, 401, "{method} {path}");
    }
    let t = Some(token.as_str());
    let r = http(addr, "POST", "/v1/jobs", t, Some(b"{\"repository\": "));
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (400, "PATCH_CANDIDATE_SERVICE_BODY")
    );
    let r = http(
        addr,
        "POST",
        "/v1/jobs",
        t,
        Some(b"{\"repository\":\"/x\",\"approval\":\"{}\",\"sneaky\":1}"),
    );
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (400, "PATCH_CANDIDATE_SERVICE_BODY")
    );
    assert!(!String::from_utf8_lossy(&r.1).contains("sneaky\":1"));
    let r = http(addr, "POST", "/v1/jobs", t, Some(b"{} []"));
    assert_eq!(r.0, 400);
    let big = vec![b' '; 6 * 1024 * 1024];
    let r = http(addr, "POST", "/v1/jobs", t, Some(&big));
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (413, "PATCH_CANDIDATE_SERVICE_BODY")
    );
    for path in [
        "/v1/jobs/..%2F..%2Fetc%2Fpasswd",
        "/v1/jobs/job_..%2F",
        "/v1/jobs/JOB_0123456789abcdef0123456789abcdef",
        "/v1/jobs/job_0123456789abcdef0123456789abcdef%00",
        "/v1/jobs/job_0123456789abcdef0123456789abcdeg/candidate",
    ] {
        let r = http(addr, "GET", path, t, None);
        assert_eq!(
            (r.0, error_code(&r).as_str()),
            (400, "PATCH_CANDIDATE_JOBS_ID"),
            "{path}"
        );
    }
    let r = http(
        addr,
        "GET",
        "/v1/jobs/job_0123456789abcdef0123456789abcdef",
        t,
        None,
    );
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (404, "PATCH_CANDIDATE_JOBS_NOT_FOUND")
    );
    let r = http(addr, "GET", "/v1/jobs?state=bogus", t, None);
    assert_eq!(r.0, 400, "{}", String::from_utf8_lossy(&r.1));
    let r = http(addr, "GET", "/v1/nothing/../jobs", t, None);
    assert_ne!(r.0, 200);
    let r = http(addr, "DELETE", "/v1/jobs", t, None);
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (405, "PATCH_CANDIDATE_SERVICE_METHOD")
    );
    // Nothing half-written: the store is still empty.
    let r = http(addr, "GET", "/v1/jobs", t, None);
    let listed: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 0);

    // A job over HTTP: the approval as its JSON text.
    let approval = std::fs::read_to_string(f.approval("Update the dashboard.")).unwrap();
    let body = serde_json::to_vec(&serde_json::json!({
        "repository": f.repo.path().to_str().unwrap(),
        "approval": approval,
    }))
    .unwrap();
    let r = http(addr, "POST", "/v1/jobs", t, Some(&body));
    assert_eq!(r.0, 201, "{}", String::from_utf8_lossy(&r.1));
    let created: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
    let id = created["job"]["id"].as_str().unwrap().to_owned();
    let r = http(addr, "POST", "/v1/jobs", t, Some(&body));
    assert_eq!(r.0, 200);
    let again: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
    assert_eq!(again["job"]["id"], id.as_str());
    assert_eq!(again["created"], false);
    // A tampered approval never enters the queue.
    let tampered = approval.replace("Update the dashboard.", "Update the dashboard!");
    let bad = serde_json::to_vec(&serde_json::json!({
        "repository": f.repo.path().to_str().unwrap(),
        "approval": tampered,
        "task": "Update the dashboard.",
    }))
    .unwrap();
    let r = http(addr, "POST", "/v1/jobs", t, Some(&bad));
    assert!(
        r.0 == 422 || r.0 == 400,
        "{}",
        String::from_utf8_lossy(&r.1)
    );
    error_code(&r);

    let started = Instant::now();
    let job = loop {
        let r = http(addr, "GET", &format!("/v1/jobs/{id}"), t, None);
        let v: serde_json::Value = serde_json::from_slice(&r.1).unwrap();
        if v["job"]["state"] == "completed" || v["job"]["state"] == "failed" {
            break v["job"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(job["state"], "completed", "{job}");
    let r = http(addr, "GET", &format!("/v1/jobs/{id}/candidate"), t, None);
    assert_eq!(r.0, 200);
    let candidate = finalizer::validate_candidate_json(&r.1).unwrap();
    assert_eq!(
        finalizer::repository_patch_digest(&candidate)
            .unwrap()
            .to_string(),
        job["candidate_digest"].as_str().unwrap()
    );
    let r = http(addr, "POST", &format!("/v1/jobs/{id}/retry"), t, None);
    assert_eq!(
        (r.0, error_code(&r).as_str()),
        (409, "PATCH_CANDIDATE_JOBS_STATE")
    );

    // 1,000 concurrent requests: every one answered, the service still healthy.
    let handles: Vec<_> = (0..1000)
        .map(|i| {
            let token = token.clone();
            std::thread::spawn(move || {
                let path = if i % 2 == 0 {
                    "/v1/jobs?state=completed"
                } else {
                    "/metrics"
                };
                http(addr, "GET", path, Some(&token), None).0
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{:?}",
        statuses.iter().filter(|s| **s != 200).collect::<Vec<_>>()
    );
    let (status, metrics) = http(addr, "GET", "/metrics", t, None);
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(
        metrics.contains("patch_candidate_job_attempts_total{outcome=\"completed\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains(&id), "job ids never label a metric");

    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    tally("docker_service_api_auth_bad_input_and_a_job");
}

/// Cancel a running turn (killed within a heartbeat), cancel and retry a queued job, drain on
/// SIGTERM (readyz 503, the running job released without spending an attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_cancel_retry_and_drain() {
    let Some(docker) = docker().await else { return };
    let _guard = docker_lock().lock().await;
    let state = state_with_images();
    let f = Fixture::new();
    let opts = ServeOpts {
        max_turns: 1,
        drain_timeout: "2s",
        ..ServeOpts::default()
    };
    let service = Service::start(state.path(), &opts);
    let slow = submit(
        state.path(),
        None,
        &f,
        "Update the dashboard.\nmode: sleep=60\n",
    );
    let slow_id = slow["job"]["id"].as_str().unwrap().to_owned();
    wait_state(
        state.path(),
        None,
        &slow_id,
        &["running"],
        Duration::from_secs(60),
    );
    // Let the container start.
    let started = Instant::now();
    while own_turns(&docker).await.unwrap().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let out = jobs(state.path(), None, &["cancel", &slow_id]);
    assert!(out.status.success());
    assert_eq!(json_of(&out)["job"]["cancel_requested"], true);
    let job = wait_state(
        state.path(),
        None,
        &slow_id,
        &["cancelled"],
        Duration::from_secs(10),
    );
    assert_eq!(job["state"], "cancelled");
    let started = Instant::now();
    while !own_turns(&docker).await.unwrap().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "cancelled turn's container remains"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Retry brings the cancelled job back with one more attempt; cancel it again while queued.
    let out = jobs(state.path(), None, &["retry", &slow_id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_state(
        state.path(),
        None,
        &slow_id,
        &["running"],
        Duration::from_secs(30),
    );

    // Drain: the running slow job is released after the drain timeout, attempt not spent.
    let before = show(state.path(), None, &slow_id)["attempts"]
        .as_u64()
        .unwrap();
    service.signal("-TERM");
    let started = Instant::now();
    loop {
        let (status, _) = http(service.addr, "GET", "/readyz", None, None);
        if status == 503 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "readyz still {status}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // One signal only: a second would stop at once.
    let status = service.wait();
    assert_eq!(status.code(), Some(0));
    let job = show(state.path(), None, &slow_id);
    assert_eq!(job["state"], "queued", "{job}");
    assert_eq!(
        job["attempts"].as_u64().unwrap(),
        before - 1,
        "release gives the attempt back"
    );
    assert_no_turn_containers(&docker).await;
    // A queued job is cancelled at once.
    let out = jobs(state.path(), None, &["cancel", &slow_id]);
    assert_eq!(json_of(&out)["job"]["state"], "cancelled");
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_cancel_retry_and_drain");
}

/// Three hosts on one PostgreSQL database, 60 jobs, one host SIGKILLed mid-run: every job
/// completes exactly once; a job is claimed twice only after its lease expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_three_hosts_on_postgres() {
    let Some(docker) = docker().await else { return };
    let url = match jobs::testkit::fresh_postgres_url().await {
        Ok(url) => url,
        Err(e) if jobs::testkit::postgres_required() => panic!("PostgreSQL required: {e:?}"),
        Err(e) => {
            eprintln!("SKIPPED (PostgreSQL unavailable): {e:?}");
            return;
        }
    };
    let _guard = docker_lock().lock().await;
    let db = Some(url.as_str());
    let f = Fixture::new();
    let states: Vec<_> = (0..3).map(|_| state_with_images()).collect();
    let mut ids = Vec::new();
    for i in 0..60 {
        let job = submit(
            states[0].path(),
            db,
            &f,
            &format!("Update the dashboard ({i})."),
        );
        ids.push(job["job"]["id"].as_str().unwrap().to_owned());
    }
    let hosts = ["host-a", "host-b", "host-c"];
    let mut services: Vec<Option<Service>> = states
        .iter()
        .zip(hosts)
        .map(|(s, h)| {
            Some(Service::start(
                s.path(),
                &ServeOpts {
                    database: db,
                    host_id: Some(h),
                    max_turns: 2,
                    lease: "2s",
                    heartbeat: "300ms",
                    ..ServeOpts::default()
                },
            ))
        })
        .collect();
    let store = open_store(states[0].path(), db).await;
    let started = Instant::now();
    loop {
        let done = store
            .list(Some(jobs::JobState::Completed), 1000)
            .await
            .unwrap()
            .len();
        if done >= 10 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(300));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    services[1].take().unwrap().kill();
    loop {
        let done = store
            .list(Some(jobs::JobState::Completed), 1000)
            .await
            .unwrap()
            .len();
        if done == 60 {
            break;
        }
        let failed = store
            .list(Some(jobs::JobState::Failed), 1000)
            .await
            .unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{done} of 60 completed"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for id in &ids {
        let id = vocab::JobId::parse(id).unwrap();
        assert!(store.candidate(&id).await.unwrap().is_some());
        let events = store.events(&id).await.unwrap();
        let count = |code: &str| events.iter().filter(|e| e.code == code).count();
        assert_eq!(count("PATCH_CANDIDATE_JOB_COMPLETED"), 1, "{id}");
        assert!(
            count("PATCH_CANDIDATE_JOB_CLAIMED")
                <= 1 + count("PATCH_CANDIDATE_JOBS_LEASE_EXPIRED")
                    + count("PATCH_CANDIDATE_JOB_RELEASED"),
            "{id}: claimed again without an expired lease: {events:?}"
        );
    }
    for s in services.iter_mut() {
        if let Some(s) = s.take() {
            assert_eq!(s.stop().code(), Some(0));
        }
    }
    let started = Instant::now();
    while !own_turns(&docker).await.unwrap().is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "containers left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tally("docker_service_three_hosts_on_postgres");
}
