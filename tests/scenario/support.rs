//! Shared fixtures: Docker access (fail-not-skip), test images, approvals over real Git
//! repositories, and the leftover-container check.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use container::BollardRuntime;
use container::ContainerRuntime as _;
use snapshot::{ApprovedExecutionContext, GitSnapshot};

pub const FIXTURE_IMAGE: &str = "patch-candidate-turn-fixture:test";
pub const SECRET_IMAGE: &str = "patch-candidate-turn-fixture-secret:test";

/// The process-wide Docker test lock (tests share one daemon).
pub fn docker_lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

fn required() -> bool {
    std::env::var("PATCH_CANDIDATE_REQUIRE_DOCKER").is_ok_and(|v| v == "1")
}

/// Connects to the daemon. Without it: panics when Docker is required, else `None` (and says so).
pub async fn docker() -> Option<BollardRuntime> {
    match BollardRuntime::connect(Path::new(container::DEFAULT_DOCKER_SOCKET)).await {
        Ok(d) => Some(d),
        Err(e) if required() => panic!("Docker is required but unavailable: {e}"),
        Err(e) => {
            eprintln!("SKIPPED (Docker unavailable, PATCH_CANDIDATE_REQUIRE_DOCKER unset): {e}");
            None
        }
    }
}

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

/// The labelled turn containers of this test process: its own, its children's (running or
/// exited), never those of another live process on the shared daemon.
pub async fn own_turns(
    docker: &BollardRuntime,
) -> Result<Vec<container::TurnContainer>, container::RuntimeError> {
    let mut turns = docker.list_turns().await?;
    turns.retain(|c| !owned_by_another_live_process(&c.labels));
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

/// The directory holding the workspace's built binaries (this test runs from its `deps/`).
pub fn target_dir() -> PathBuf {
    // .../target/<triple>/release/deps/scenario-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// A binary of another workspace crate, built next to this test binary.
pub fn workspace_bin(name: &str) -> PathBuf {
    let bin = target_dir().join(name);
    assert!(
        bin.is_file(),
        "{} missing: build with `cargo build --release --locked --workspace --bins`",
        bin.display()
    );
    bin
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
    let tag = format!(
        "patch-candidate-turn-fixture-{mode}:test-{}",
        std::process::id()
    );
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

/// `git -C dir ARGS…`, which must succeed; its stdout, trimmed.
pub fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A real Git repository with `files`, committed; returns (dir, commit).
pub fn git_repo(files: &BTreeMap<&str, String>) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    git(&["init", "-q"]);
    for (path, content) in files {
        let full = dir.path().join(path);
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(full.parent().unwrap())
            .unwrap();
        std::fs::write(full, content).unwrap();
    }
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "commit.gpgsign=false",
        "commit",
        "-q",
        "-m",
        "fixture",
    ]);
    let commit = git(&["rev-parse", "HEAD"]);
    (dir, commit)
}

/// An approval for `repo@commit` with the snapshot digest computed from the repository.
pub fn approval(
    repo: &Path,
    commit: &str,
    task: &str,
    allowed: &[&str],
    read_only: &[&str],
    create: &[&str],
    delete: &[&str],
) -> ApprovedExecutionContext {
    let snap = GitSnapshot::load(repo, commit).unwrap();
    let digest = snap.snapshot_digest("acme/fixture").to_string();
    let doc = serde_json::json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "handoff_id": "handoff-t",
        "request_id": "request-t",
        "plan_id": "plan-t",
        "app_id": "app-t",
        "build_registry_id": "build-t",
        "repository_full_name": "acme/fixture",
        "baseline_commit_sha": commit,
        "raw_request": task,
        "request_type": "change",
        "approved_plan_digest": "0".repeat(64),
        "snapshot_digest": digest,
        "graph_identity_digest": "g",
        "impact_report_digest": "i",
        "execution_strategy_id": "s",
        "rationale": "test approval",
        "allowed_paths": allowed,
        "prohibited_paths": [],
        "read_only_paths": read_only,
        "create_paths": create,
        "delete_paths": delete,
    });
    ApprovedExecutionContext::from_json(&doc.to_string()).unwrap()
}

/// Writes an approval to a file for CLI tests.
pub fn write_approval(dir: &Path, context: &ApprovedExecutionContext) -> PathBuf {
    let path = dir.join("approval.json");
    std::fs::write(&path, serde_json::to_vec_pretty(context).unwrap()).unwrap();
    path
}

/// A candidate's changed files as (path, operation), in the candidate's order.
pub fn ops(candidate: &finalizer::RepositoryPatchCandidate) -> Vec<(String, snapshot::FileOp)> {
    candidate
        .changed_files()
        .iter()
        .map(|f| (f.path().as_str().to_owned(), f.op()))
        .collect()
}
