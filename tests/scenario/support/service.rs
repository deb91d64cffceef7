//! A running `patch-candidate serve` process, its job store, and the job commands and HTTP API
//! it answers; completed jobs planted in the store without a turn.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::cli::{bin, json_of};
use super::git::git_repo;
use super::http::{exchange, parse_answer};
use super::json::field_strs;
use super::state::app_approval;
use crate::proof::demo_files;

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
        let context = app_approval(self.repo.path(), &self.commit, task);
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

/// Waits until job `id` is `completed` or `failed`; returns the job.
pub fn wait_finished(
    state: &Path,
    database: Option<&str>,
    id: &str,
    limit: Duration,
) -> serde_json::Value {
    wait_state(state, database, id, &["completed", "failed"], limit)
}

/// The job's id in an answer that holds one job (`jobs submit`, `POST /v1/jobs`).
pub fn job_id(answer: &serde_json::Value) -> String {
    answer["job"]["id"].as_str().unwrap().to_owned()
}

/// [`submit`] of `task`; returns the job's id.
pub fn submit_id(state: &Path, database: Option<&str>, f: &Fixture, task: &str) -> String {
    job_id(&submit(state, database, f, task))
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

/// Waits until a turn container of this process exists, polling every 100 ms; panics with
/// `what` after `limit_secs` seconds.
pub async fn wait_turn_container(docker: &container::BollardRuntime, limit_secs: u64, what: &str) {
    let (limit, poll) = (Duration::from_secs(limit_secs), Duration::from_millis(100));
    super::docker::wait_for_own_turn(docker, limit, poll, what).await;
}

/// A fresh service under the Docker lock: the lock's guard, the state directory, the service,
/// its address and its API token.
pub type FreshService = (
    tokio::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    Service,
    SocketAddr,
    String,
);

/// A serve process on a fresh state directory (no images: for tests that accept no job), started
/// under the Docker lock; `None` where Docker is not there.
pub async fn serve_fresh() -> Option<FreshService> {
    let (_docker, guard) = super::docker::locked_docker().await?;
    let state = tempfile::tempdir().unwrap();
    let service = Service::start(state.path(), &ServeOpts::default());
    let (addr, token) = (service.addr, service.token());
    Some((guard, state, service, addr, token))
}

/// One HTTP/1.1 request (Connection: close); returns the status and body.
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> (u16, Vec<u8>) {
    let headers = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let raw = exchange(
        addr,
        method,
        path,
        &headers,
        body.map(|b| ("application/json", b)),
        Duration::from_secs(120),
    );
    let (status, _, body) = parse_answer(&raw);
    (status, body)
}

/// [`http`] with `body` sent as JSON (if any); the status and the answer parsed as JSON.
pub fn http_json(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
    let (status, answer) = http(addr, method, path, token, bytes.as_deref());
    (status, serde_json::from_slice(&answer).unwrap())
}

/// `GET path` with `token`, which must answer 200; the answer parsed as JSON.
pub fn get_json_ok(addr: SocketAddr, path: &str, token: &str) -> serde_json::Value {
    let (status, body) = http(addr, "GET", path, Some(token), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// `GET /metrics` with `token`, which must answer 200; the exposition text.
pub fn metrics_text(addr: SocketAddr, token: &str) -> String {
    let (status, body) = http(addr, "GET", "/metrics", Some(token), None);
    assert_eq!(status, 200);
    String::from_utf8(body).unwrap()
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

/// How many of the store's jobs (at most `limit`) are in `state`.
pub async fn count_in(store: &jobs::JobStore, state: jobs::JobState, limit: usize) -> usize {
    store.list(Some(state), limit).await.unwrap().len()
}

/// The store's events of job `id`: their codes.
pub fn event_codes(state: &Path, database: Option<&str>, id: &str) -> Vec<String> {
    let logs = json_of(&jobs(state, database, &["logs", id]));
    field_strs(&logs["events"], "code")
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// A fresh PostgreSQL database's URL. Without PostgreSQL: panics when it is required, else
/// `None` (the test skips, and says so).
pub async fn postgres_url_or_skip() -> Option<String> {
    match jobs::testkit::fresh_postgres_url().await {
        Ok(url) => Some(url),
        Err(e) if jobs::testkit::postgres_required() => panic!("PostgreSQL required: {e:?}"),
        Err(e) => {
            eprintln!("SKIPPED (PostgreSQL unavailable): {e:?}");
            None
        }
    }
}
