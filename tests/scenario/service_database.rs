//! `patch-candidate serve` when its database goes away and comes back: a private PostgreSQL
//! cluster (its own, so stopping it disturbs no other test) stopped while turns run and started
//! again, and stopped before the service starts. The service waits and recovers; it does not
//! exit, lose a job or record one twice, and `/readyz` says what is going on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use jobs::testkit::{PrivateCluster, Unavailable};

use crate::support::*;

/// A private cluster; `None` (the test skips) only when PostgreSQL is not required.
fn private_cluster() -> Option<PrivateCluster> {
    match PrivateCluster::start() {
        Ok(c) => Some(c),
        Err(e @ Unavailable::Skip(_)) => {
            eprintln!("{e}");
            None
        }
        Err(e @ Unavailable::Fail(_)) => panic!("{e}"),
    }
}

/// The code of an error body (which must be `{"error":{"code","message"}}`, the message
/// starting with the code).
fn error_code(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(body)));
    let code = v["error"]["code"].as_str().unwrap_or_else(|| panic!("{v}"));
    let message = v["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    assert!(message.starts_with(&format!("{code}: ")), "{v}");
    code.to_owned()
}

/// Polls `/readyz` until it answers `status`; returns how long that took.
fn wait_readyz(addr: SocketAddr, status: u16, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (got, body) = http(addr, "GET", "/readyz", None, None);
        if got == status {
            if status == 503 {
                assert_eq!(error_code(&body), "PATCH_CANDIDATE_SERVICE_NOT_READY");
            }
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "/readyz still {got} after {limit:?}: {}",
            String::from_utf8_lossy(&body)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many log lines with `code` the service wrote.
fn count_logged(service: &Service, code: &str) -> usize {
    service
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["fields"]["code"] == code)
        })
        .count()
}

fn assert_alive(service: &mut Service) {
    assert!(
        service.child.try_wait().unwrap().is_none(),
        "serve exited: {:?}",
        service.lines.lock().unwrap()
    );
}

/// How a test takes the database away and brings it back.
trait Outage {
    fn go_away(&mut self);
    fn come_back(&mut self);
    /// Whether reads fail too (a stopped server) or still work (a locked SQLite file in WAL
    /// mode serves readers while every write waits past the busy timeout).
    fn reads_fail(&self) -> bool;
}

impl Outage for PrivateCluster {
    fn go_away(&mut self) {
        self.stop().unwrap();
    }
    fn come_back(&mut self) {
        self.restart().unwrap();
    }
    fn reads_fail(&self) -> bool {
        true
    }
}

/// Another process holds the SQLite file's write lock (`BEGIN EXCLUSIVE`) until it is told to let
/// go: every write of the service waits out its busy timeout and fails.
struct SqliteLock {
    path: std::path::PathBuf,
    holder: Option<std::process::Child>,
}

impl Outage for SqliteLock {
    fn go_away(&mut self) {
        use std::io::BufRead as _;
        let script = "import sqlite3, sys\n\
            con = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n\
            con.execute('BEGIN EXCLUSIVE')\n\
            print('locked', flush=True)\n\
            sys.stdin.read()\n\
            con.execute('ROLLBACK')\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&self.path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        self.holder = Some(child);
    }
    fn come_back(&mut self) {
        if let Some(mut child) = self.holder.take() {
            drop(child.stdin.take());
            assert!(child.wait().unwrap().success());
        }
    }
    fn reads_fail(&self) -> bool {
        false
    }
}

impl Drop for SqliteLock {
    fn drop(&mut self) {
        if let Some(mut child) = self.holder.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Four jobs of two slots; the database goes away while two turns run and stays away for longer
/// than a lease: the two attempts lose their lease and their containers are removed at once (by
/// the runner: the janitor cannot read the store meanwhile), `/readyz` goes 503. The database
/// comes back: `/readyz` 200, the lost attempts' jobs are rescued and run again, and every job
/// completes exactly once, with its attempts counted (one per claim, a lost one spent).
async fn survives_an_outage_mid_run(
    docker: &container::BollardRuntime,
    state: &tempfile::TempDir,
    db: Option<&str>,
    outage: &mut dyn Outage,
) {
    let f = Fixture::new();
    // Each turn sleeps 8 s inside its container: much longer than it takes the runner to notice
    // the outage (a lease of 3 s, renewed every 500 ms), so the turns running when the database
    // stops are still running when their lease ends.
    let ids: Vec<String> = (0..4)
        .map(|i| {
            let task = format!("Update the dashboard ({i}).\nmode: sleep=8\nmode: edit\n");
            submit_id(state.path(), db, &f, &task)
        })
        .collect();
    let mut service = Service::start(
        state.path(),
        &ServeOpts {
            database: db,
            max_turns: 2,
            lease: "3s",
            heartbeat: "500ms",
            ..ServeOpts::default()
        },
    );
    let token = service.token();
    assert_eq!(http(service.addr, "GET", "/readyz", None, None).0, 200);

    // Two turns run: the database goes away.
    let started = Instant::now();
    let running = loop {
        let turns = own_turns(docker).await.unwrap();
        if turns.len() >= 2 {
            break turns.len();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "two turns did not start: {:?}",
            service.lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    outage.go_away();
    let went_away = Instant::now();

    let unready_after = wait_readyz(service.addr, 503, Duration::from_secs(15));
    // Both attempts lose their lease; their containers go with them.
    let started = Instant::now();
    while count_logged(&service, "PATCH_CANDIDATE_JOB_LEASE_LOST") < running {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "leases not lost: {:?}",
            service.lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_own_turns_gone(
        docker,
        Duration::from_secs(20),
        Duration::from_millis(100),
        "containers of lost attempts left while the database is away",
    )
    .await;
    // The API answers meanwhile (no hang): the store's calls are 503, the metrics say why.
    let (status, body) = http(service.addr, "GET", "/v1/jobs", Some(&token), None);
    if outage.reads_fail() {
        assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
        assert_eq!(error_code(&body), "PATCH_CANDIDATE_JOBS_UNAVAILABLE");
    } else {
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let metrics = metrics_text(service.addr, &token);
    assert!(
        metrics.contains("patch_candidate_store_unreachable 1"),
        "{metrics}"
    );
    // Down for longer than a lease and several claim backoffs.
    let down = Duration::from_secs(6);
    if let Some(rest) = down.checked_sub(went_away.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    assert_alive(&mut service);
    wait_readyz(service.addr, 503, Duration::ZERO);

    outage.come_back();
    let outage_lasted = went_away.elapsed();
    let ready_after = wait_readyz(service.addr, 200, Duration::from_secs(30));
    eprintln!(
        "outage of {outage_lasted:?}: /readyz 503 after {unready_after:?}, 200 again {ready_after:?} after the restart"
    );

    let store = open_store(state.path(), db).await;
    let started = Instant::now();
    loop {
        let done = count_in(&store, jobs::JobState::Completed, 100).await;
        if done == ids.len() {
            break;
        }
        let failed = store.list(Some(jobs::JobState::Failed), 100).await.unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        assert_alive(&mut service);
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{done} of {} completed",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut expired = 0;
    for id in &ids {
        let id = vocab::JobId::parse(id).unwrap();
        let job = store.get(&id).await.unwrap().unwrap();
        let events = store.events(&id).await.unwrap();
        let count = |code: &str| events.iter().filter(|e| e.code == code).count();
        let codes: Vec<_> = events.iter().map(|e| e.code.as_str()).collect();
        assert_eq!(count("PATCH_CANDIDATE_JOB_COMPLETED"), 1, "{id}: {codes:?}");
        // One attempt per claim; each attempt but the completing one ended by losing its lease.
        let claims = count("PATCH_CANDIDATE_JOB_CLAIMED");
        let lost = count("PATCH_CANDIDATE_JOBS_LEASE_EXPIRED");
        assert_eq!(
            usize::try_from(job.attempts).unwrap(),
            claims,
            "{id}: {codes:?}"
        );
        assert_eq!(claims, lost + 1, "{id}: {codes:?}");
        expired += lost;
        assert!(store.candidate(&id).await.unwrap().is_some(), "{id}");
        assert_eq!(store.usage(&id).await.unwrap().len(), 1, "{id}");
    }
    assert!(
        expired >= running,
        "{running} turns ran when the database stopped, {expired} leases expired"
    );
    assert_alive(&mut service);
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(docker).await;
    assert!(staging_left(state.path()).is_empty());
}

/// The outage on PostgreSQL: a private cluster stopped and started again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_survives_postgres_going_away_mid_run() {
    let Some(docker) = docker().await else { return };
    let Some(mut cluster) = private_cluster() else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let url = cluster.url().to_owned();
    let state = state_with_images();
    survives_an_outage_mid_run(&docker, &state, Some(&url), &mut cluster).await;
    tally("docker_service_survives_postgres_going_away_mid_run");
}

/// The outage on SQLite: another process holds the file's write lock past the busy timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_survives_a_locked_sqlite_file_mid_run() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let mut lock = SqliteLock {
        path: state.path().join(jobs::DEFAULT_SQLITE_FILE),
        holder: None,
    };
    survives_an_outage_mid_run(&docker, &state, None, &mut lock).await;
    tally("docker_service_survives_a_locked_sqlite_file_mid_run");
}

/// `serve` started while its database is down: it binds and answers at once (`/healthz` 200,
/// `/readyz` and every other route 503 `PATCH_CANDIDATE_SERVICE_NOT_READY`, a wrong token 401)
/// and stops cleanly on SIGTERM; once the database is up the same socket serves the full API,
/// `/readyz` turns 200 and a submitted job completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_waits_for_a_database_that_is_down_at_start() {
    let Some(docker) = docker().await else { return };
    let Some(cluster) = private_cluster() else {
        return;
    };
    let _guard = docker_lock().lock().await;
    let url = cluster.url().to_owned();
    let db = Some(url.as_str());
    cluster.stop().unwrap();
    let state = state_with_images();
    let opts = ServeOpts {
        database: db,
        ..ServeOpts::default()
    };
    let mut service =
        Service::start_until(state.path(), &opts, "PATCH_CANDIDATE_SERVICE_LISTENING");
    let addr = service.addr;
    let token = service.token();
    let (status, body) = http(addr, "GET", "/healthz", None, None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    wait_readyz(addr, 503, Duration::ZERO);
    for (method, path) in [
        ("GET", "/v1/jobs"),
        ("POST", "/v1/jobs"),
        ("GET", "/metrics"),
        ("GET", "/v1/jobs/job_00000000000000000000000000000000"),
    ] {
        let (status, body) = http(addr, method, path, None, None);
        assert_eq!(status, 401, "{method} {path}");
        assert_eq!(error_code(&body), "PATCH_CANDIDATE_SERVICE_UNAUTHORIZED");
        let (status, body) = http(addr, method, path, Some(&token), None);
        assert_eq!(status, 503, "{method} {path}");
        assert_eq!(error_code(&body), "PATCH_CANDIDATE_SERVICE_NOT_READY");
    }
    // Still waiting a few backoff rounds later, alive, not started.
    std::thread::sleep(Duration::from_secs(3));
    assert_alive(&mut service);
    assert!(!service.logged("PATCH_CANDIDATE_SERVICE_STARTED"));
    wait_readyz(addr, 503, Duration::ZERO);

    // A second host waiting for the same database stops at once on SIGTERM (exit 0).
    let other_state = state_with_images();
    let other = Service::start_until(
        other_state.path(),
        &opts,
        "PATCH_CANDIDATE_SERVICE_LISTENING",
    );
    other.signal("-TERM");
    let asked = Instant::now();
    assert_eq!(other.wait().code(), Some(0));
    assert!(asked.elapsed() < Duration::from_secs(10));

    cluster.restart().unwrap();
    let ready_after = wait_readyz(addr, 200, Duration::from_secs(30));
    eprintln!("/readyz 200 {ready_after:?} after the database started");
    service.wait_logged("PATCH_CANDIDATE_SERVICE_STARTED", Duration::from_secs(10));
    let (status, body) = http(addr, "GET", "/v1/jobs", Some(&token), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));

    let f = Fixture::new();
    let id = submit_id(state.path(), db, &f, "Update the dashboard.");
    let job = wait_finished(state.path(), db, &id, Duration::from_secs(120));
    assert_eq!(job["state"], "completed", "{job}");
    assert_eq!(job["attempts"], 1, "{job}");
    let (status, _) = http(
        addr,
        "GET",
        &format!("/v1/jobs/{id}/candidate"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200);
    assert_alive(&mut service);
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_waits_for_a_database_that_is_down_at_start");
}
