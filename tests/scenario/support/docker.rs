//! Docker access (fail-not-skip), the process-wide Docker lock, the fixture images built from
//! this crate's `turn-fixture` binary, the recorded proof images, and the leftover-container check.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use container::BollardRuntime;
use container::ContainerRuntime as _;

pub const FIXTURE_IMAGE: &str = "patch-candidate-turn-fixture:test";
pub const SECRET_IMAGE: &str = "patch-candidate-turn-fixture-secret:test";

/// The worker's turn seccomp profile (`worker/container/seccomp/turn.json`), as a `--security-opt`
/// value.
pub const TURN_SECCOMP_OPT: &str = concat!(
    "seccomp=",
    env!("CARGO_MANIFEST_DIR"),
    "/../worker/container/seccomp/turn.json"
);

/// The `docker run` flags every hardened harness run starts from (reference §10.4): a 1 MiB
/// `/dev/shm`, an init, no network, a read-only root, no log driver, no capabilities, no new
/// privileges.
pub const LOCKED_DOWN: &[&str] = &[
    "--shm-size",
    "1m",
    "--init",
    "--network",
    "none",
    "--read-only",
    "--log-driver",
    "none",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
];

/// The `docker run` flags every hardened harness run ends with: the writable tmpfs mounts
/// (`/tmp`, `/workspace`, the sandbox home) and the unprivileged user.
pub const TMPFS_AND_USER: &[&str] = &[
    "--tmpfs",
    "/tmp:rw,nosuid,nodev,size=64m,mode=1777",
    "--tmpfs",
    "/workspace:rw,nosuid,nodev,size=64m,mode=1777",
    "--tmpfs",
    "/home/sandbox:rw,nosuid,nodev,size=16m,mode=1777",
    "--user",
    "10001:10001",
];

/// The process-wide Docker test lock (tests share one daemon).
pub fn docker_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// Whether `PATCH_CANDIDATE_REQUIRE_DOCKER=1`: a missing daemon or image fails, never skips.
pub fn docker_required() -> bool {
    std::env::var("PATCH_CANDIDATE_REQUIRE_DOCKER").is_ok_and(|v| v == "1")
}

/// Connects to the daemon. Without it: panics when Docker is required, else `None` (and says so).
pub async fn docker() -> Option<BollardRuntime> {
    match BollardRuntime::connect(Path::new(container::DEFAULT_DOCKER_SOCKET)).await {
        Ok(d) => Some(d),
        Err(e) if docker_required() => panic!("Docker is required but unavailable: {e}"),
        Err(e) => {
            eprintln!("SKIPPED (Docker unavailable, PATCH_CANDIDATE_REQUIRE_DOCKER unset): {e}");
            None
        }
    }
}

/// [`docker`], then the process-wide Docker lock (held as long as the returned guard): `None`
/// (the test skips) without a daemon.
pub async fn locked_docker() -> Option<(BollardRuntime, tokio::sync::MutexGuard<'static, ()>)> {
    let docker = docker().await?;
    let guard = docker_lock().lock().await;
    Some((docker, guard))
}

/// The end of a Docker test: no labelled turn container of this process is left
/// ([`assert_no_turn_containers`]), then test `name` is tallied.
pub async fn assert_clean_and_tally(docker: &BollardRuntime, name: &str) {
    assert_no_turn_containers(docker).await;
    tally(name);
}

/// Two Docker tests of one body, an `async fn(&BollardRuntime, Option<&'static str>)` given
/// the runtime: `$runc` on the daemon's default runtime (`None`), `$runsc` under gVisor's runsc
/// (`Some("runsc")`; skipped like [`crate::runtimes::docker_for`] says). Each holds the Docker
/// lock while its body runs and is tallied under its own name.
macro_rules! runc_and_runsc_tests {
    (
        $body:path,
        $(#[$runc_attr:meta])* $runc:ident,
        $(#[$runsc_attr:meta])* $runsc:ident $(,)?
    ) => {
        $(#[$runc_attr])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $runc() {
            let Some(docker) = $crate::support::docker().await else {
                return;
            };
            let _guard = $crate::support::docker_lock().lock().await;
            $body(&docker, None).await;
            $crate::support::tally(stringify!($runc));
        }

        $(#[$runsc_attr])*
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $runsc() {
            let Some(docker) = $crate::runtimes::docker_for("runsc").await else {
                return;
            };
            let _guard = $crate::support::docker_lock().lock().await;
            $body(&docker, Some("runsc")).await;
            $crate::support::tally(stringify!($runsc));
        }
    };
}
pub(crate) use runc_and_runsc_tests;

/// Records that Docker test `name` ran to completion.
pub fn tally(name: &str) {
    if let Some(path) = std::env::var_os("PATCH_CANDIDATE_DOCKER_TALLY") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(f, "{name}").unwrap();
    }
}

/// The owner label of a turn container (`<pid>:<process start ticks>`, see the container crate's
/// label table).
const TURN_OWNER_LABEL: &str = "mozaiks.refinement.repository_turn.owner";

/// Whether `pid` is this process or one of its descendants (its parent chain reaches us), read
/// from `/proc/<pid>/stat`.
fn is_self_or_descendant(pid: u32) -> bool {
    let me = std::process::id();
    let mut p = pid;
    for _ in 0..64 {
        if p == me {
            return true;
        }
        if p <= 1 {
            return false;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            return false;
        };
        // `pid (comm) state ppid …`: comm may hold spaces and parentheses, so split at the last `)`.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
        else {
            return false;
        };
        p = ppid;
    }
    false
}

/// Whether a turn container belongs to another process that is still running (another test run
/// on the shared daemon): its owner label names a live PID that is neither this process nor one
/// of its descendants (a `serve` or CLI child this test started). (A plain `/proc/<pid>` check:
/// the container crate keeps its procfs liveness private.)
fn owned_by_another_live_process(labels: &std::collections::HashMap<String, String>) -> bool {
    labels
        .get(TURN_OWNER_LABEL)
        .map(String::as_str)
        .and_then(container::ProcessIdentity::parse)
        .is_some_and(|owner| {
            Path::new(&format!("/proc/{}", owner.pid())).exists()
                && !is_self_or_descendant(owner.pid())
        })
}

/// A name for this test process that is unique on the shared daemon: its PID, and its PID
/// namespace's inode when it has its own (module processes in separate PID namespaces may share
/// a PID). For per-process image tags and container names.
pub fn process_tag() -> String {
    match own_pid_namespace() {
        Some(ns) => format!("{}-{ns}", std::process::id()),
        None => std::process::id().to_string(),
    }
}

/// The PID-namespace label of a turn container (see the container crate's label table).
const TURN_PID_NAMESPACE_LABEL: &str = "mozaiks.refinement.repository_turn.pid_namespace";

/// The inode of this process's PID namespace, as the container crate writes it in its label
/// (`/proc/self/ns/pid` reads `pid:[<inode>]`).
fn own_pid_namespace() -> Option<&'static str> {
    static NS: OnceLock<Option<String>> = OnceLock::new();
    NS.get_or_init(|| {
        let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let text = link.to_str()?;
        Some(text.strip_prefix("pid:[")?.strip_suffix(']')?.to_owned())
    })
    .as_deref()
}

/// Whether a turn container was started in another PID namespace than this process's. The
/// scenario runner (infra/ci/scenario.py) gives each module process its own PID namespace when
/// it runs several at once, so a turn that another module's killed `serve` left behind (owner
/// dead, not yet swept) is never counted as this module's.
pub fn from_another_pid_namespace(labels: &std::collections::HashMap<String, String>) -> bool {
    match (own_pid_namespace(), labels.get(TURN_PID_NAMESPACE_LABEL)) {
        (Some(mine), Some(theirs)) => theirs != mine,
        _ => false,
    }
}

/// The labelled turn containers of this test process: its own, its children's (running or
/// exited), never those of another live process on the shared daemon or of another PID
/// namespace.
pub async fn own_turns(
    docker: &BollardRuntime,
) -> Result<Vec<container::TurnContainer>, container::RuntimeError> {
    let mut turns = docker.list_turns().await?;
    turns.retain(|c| {
        !from_another_pid_namespace(&c.labels) && !owned_by_another_live_process(&c.labels)
    });
    Ok(turns)
}

/// Asserts that no labelled turn container of this process or its children exists; turns of
/// other live processes on the daemon are not counted.
pub async fn assert_no_turn_containers(docker: &BollardRuntime) {
    let left = own_turns(docker).await.unwrap();
    assert!(
        left.is_empty(),
        "labelled turn containers left behind: {:?}",
        left.iter().map(|c| &c.names).collect::<Vec<_>>()
    );
}

pub fn docker_cli(args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut cmd = Command::new("docker");
    cmd.args(args)
        .env_remove("DOCKER_HOST")
        .env_remove("DOCKER_CONTEXT");
    let out = if let Some(input) = stdin {
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    } else {
        cmd.output().unwrap()
    };
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Builds (once per process) the fixture image from this crate's `turn-fixture` binary, and a
/// variant with an image-baked secret. Returns (fixture id, secret id).
pub fn fixture_images() -> &'static (String, String) {
    static IDS: OnceLock<(String, String)> = OnceLock::new();
    IDS.get_or_init(|| {
        let bin = Path::new(env!("CARGO_BIN_EXE_turn-fixture"));
        let ctx = tempfile::tempdir().unwrap();
        std::fs::copy(bin, ctx.path().join("turn_fixture")).unwrap();
        std::fs::write(
            ctx.path().join("Dockerfile"),
            "FROM scratch\nCOPY turn_fixture /turn_fixture\nENV PATH=/\nUSER 10001:10001\nENTRYPOINT [\"/turn_fixture\"]\nCMD [\"stdin\"]\n",
        )
        .unwrap();
        let dir = ctx.path().to_str().unwrap();
        docker_cli(&["build", "-q", "-t", FIXTURE_IMAGE, dir], None);
        let secret_ctx = tempfile::tempdir().unwrap();
        std::fs::write(
            secret_ctx.path().join("Dockerfile"),
            format!("FROM {FIXTURE_IMAGE}\nENV SOME_API_KEY=sk-test-not-a-real-key\n"),
        )
        .unwrap();
        docker_cli(&["build", "-q", "-t", SECRET_IMAGE, secret_ctx.path().to_str().unwrap()], None);
        let id = |tag: &str| docker_cli(&["image", "inspect", "--format", "{{.Id}}", tag], None);
        (id(FIXTURE_IMAGE), id(SECRET_IMAGE))
    })
}

/// Builds a variant of the fixture image whose default command is `mode`, tagged for this test
/// process only; returns (tag, ID). It is built from this crate's binary, not `FROM` the shared
/// [`FIXTURE_IMAGE`] tag, and its ID is the build's own output: another run on the same daemon
/// that retags either meanwhile (with its own binary) cannot change what this process runs.
pub fn fixture_mode_image(mode: &str) -> (String, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_turn-fixture"));
    let ctx = tempfile::tempdir().unwrap();
    std::fs::copy(bin, ctx.path().join("turn_fixture")).unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!(
            "FROM scratch\nCOPY turn_fixture /turn_fixture\nENV PATH=/\nUSER 10001:10001\nENTRYPOINT [\"/turn_fixture\"]\nCMD [\"{mode}\"]\n"
        ),
    )
    .unwrap();
    let tag = format!("patch-candidate-turn-fixture-{mode}:test-{}", process_tag());
    let id = docker_cli(
        &["build", "-q", "-t", &tag, ctx.path().to_str().unwrap()],
        None,
    );
    assert!(id.starts_with("sha256:"), "unexpected build output {id:?}");
    (tag, id)
}

/// The recorded proof images (`images.json`), required for the proof and hostile suites.
pub fn proof_images() -> turn::ImagesState {
    let state = state::StateDir::locate().unwrap().into_path();
    turn::ImagesState::load(&state)
        .unwrap()
        .unwrap_or_else(|| panic!("{} lacks images.json: run images/build.sh", state.display()))
}

/// Waits until this process (or a child) has a labelled turn container, polling every `poll`;
/// panics with `what` after `limit`.
pub async fn wait_for_own_turn(
    docker: &BollardRuntime,
    limit: Duration,
    poll: Duration,
    what: &str,
) {
    let started = Instant::now();
    while own_turns(docker).await.unwrap().is_empty() {
        assert!(started.elapsed() < limit, "{what}");
        tokio::time::sleep(poll).await;
    }
}

/// Waits until no labelled turn container of this process (or a child) is left, polling every
/// `poll`; panics with `what` and the names of those left after `limit`.
pub async fn wait_own_turns_gone(
    docker: &BollardRuntime,
    limit: Duration,
    poll: Duration,
    what: &str,
) {
    let started = Instant::now();
    loop {
        let left = own_turns(docker).await.unwrap();
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{what}: {:?}",
            left.iter().map(|c| &c.names).collect::<Vec<_>>()
        );
        tokio::time::sleep(poll).await;
    }
}

/// Waits until a running container matches every `docker ps` filter; returns the first one's
/// full ID, or `None` once `limit` has passed.
pub fn wait_running_container(filters: &[&str], limit: Duration) -> Option<String> {
    let started = Instant::now();
    let mut args = vec!["ps", "-q", "--no-trunc"];
    for f in filters {
        args.extend(["--filter", f]);
    }
    args.extend(["--filter", "status=running"]);
    loop {
        let found = docker_cli(&args, None);
        if let Some(first) = found.lines().next() {
            return Some(first.to_owned());
        }
        if started.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether the `docker` client reaches a daemon. Without one: panics when Docker is required,
/// else `false` (and says so).
pub fn docker_cli_ready() -> bool {
    let ok = Command::new("docker")
        .args(["version", "--format", "{{.Server.APIVersion}}"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            !docker_required(),
            "Docker is required (PATCH_CANDIDATE_REQUIRE_DOCKER=1) but the daemon does not answer"
        );
        eprintln!("SKIPPED: Docker daemon unavailable and PATCH_CANDIDATE_REQUIRE_DOCKER is not 1");
    }
    ok
}

/// A synchronous Docker test: `body` under the process-wide Docker lock, then test `name` is
/// tallied; skipped without a daemon ([`docker_cli_ready`]).
pub fn docker_cli_case(name: &str, body: impl FnOnce()) {
    if !docker_cli_ready() {
        return;
    }
    let _lock = docker_lock().blocking_lock();
    body();
    tally(name);
}

/// Whether a container named exactly `name` exists (running or not).
pub fn container_exists(name: &str) -> bool {
    let out = Command::new("docker")
        .args(["ps", "-a", "-q", "--filter", &format!("name=^/{name}$")])
        .output()
        .unwrap();
    !out.stdout.is_empty()
}
