//! The Docker turn against the real daemon with the fixture image: stdin delivery and EOF,
//! in-container isolation, timeout, OOM, image checks before create.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use container::BollardRuntime;
use snapshot::{ApprovedTurn, DefaultPathGuard, GitSnapshot, RepoPath};
use turn::{CodingWorkerRequest, TurnConfig, execute_repository_docker_turn, stdin_payload};
use turn::{RepositoryDockerTurn, TurnError};

use crate::support::*;

const TASK: &str = "Change nothing; report.";

struct Repo {
    dir: tempfile::TempDir,
    snap: GitSnapshot,
    context: snapshot::ApprovedExecutionContext,
    evidence: snapshot::RepositorySnapshotEvidence,
    request: CodingWorkerRequest,
}

fn repo(big: usize) -> Repo {
    let files = BTreeMap::from([
        ("app/a.txt", "one\n".to_owned()),
        ("app/big.txt", "é".repeat(big / 2) + "\n"),
        ("tests/t.txt", "inspect me\n".to_owned()),
    ]);
    let (dir, commit) = git_repo(&files);
    let context = app_approval(dir.path(), &commit, TASK);
    let snap = GitSnapshot::load(dir.path(), &commit).unwrap();
    let evidence = snap
        .evidence("plan-t", "request-t", "app-t", "acme/fixture")
        .unwrap();
    let editable: Vec<RepoPath> = ["app/a.txt", "app/big.txt"]
        .iter()
        .map(|p| RepoPath::parse(p).unwrap())
        .collect();
    let read_only = vec![RepoPath::parse("tests/t.txt").unwrap()];
    let request = CodingWorkerRequest::for_context(
        &context,
        TASK,
        snap.read_files(&editable).unwrap(),
        snap.read_files(&read_only).unwrap(),
    );
    Repo {
        dir,
        snap,
        context,
        evidence,
        request,
    }
}

impl Repo {
    /// The approval bound to the request's editable files.
    fn approved<'a>(&'a self, policy: &'a DefaultPathGuard) -> ApprovedTurn<'a> {
        let selected = self.request.files.keys().cloned().collect();
        let files = &self.request.files;
        ApprovedTurn::new(
            &self.context,
            &self.evidence,
            policy,
            Some(&self.snap),
            selected,
            files,
        )
        .unwrap()
    }
}

async fn turn(
    docker: &BollardRuntime,
    r: &Repo,
    image: &str,
    id: &str,
    wall: u64,
) -> Result<RepositoryDockerTurn, TurnError> {
    let config = TurnConfig::parse(image, id, wall, 700_000).unwrap();
    let policy = DefaultPathGuard::default();
    let approval = r.approved(&policy);
    execute_repository_docker_turn(docker, &r.request, &approval, &config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_api_version_is_negotiated() {
    let Some(docker) = docker().await else { return };
    let version = docker.api_version();
    let (major, minor) = version.split_once('.').unwrap();
    assert_eq!(major, "1");
    let minor: u32 = minor.parse().unwrap();
    assert!((41..=53).contains(&minor), "{version}");
    tally("docker_api_version_is_negotiated");
}

#[tokio::test]
async fn missing_socket_is_unavailable() {
    let err = BollardRuntime::connect(Path::new("/nonexistent/docker.sock"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_UNAVAILABLE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_stdin_is_delivered_whole_and_closed() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (id, _) = fixture_images();
    // ~4 MiB of payload: far beyond any pipe buffer, so delivery and EOF are both exercised.
    let r = repo(4 << 20);
    let t = turn(&docker, &r, FIXTURE_IMAGE, id, 60).await.unwrap();
    let payload = stdin_payload(&r.request, &r.context).unwrap();
    assert_eq!(
        t.proposal.owned_paths,
        vec![
            format!("stdin-bytes-{}", payload.len()),
            format!("stdin-sha256-{}", vocab::sha256_bare_hex(&payload))
        ]
    );
    assert_eq!(t.proposal.status, snapshot::ProposalStatus::Empty);
    assert_eq!(
        t.proposal.error.as_deref(),
        Some("Isolated coding turn reported empty.")
    );
    // What the container received equals an independent Python serialisation of the payload.
    let approval_file = r.dir.path().join("approval.json");
    std::fs::write(&approval_file, serde_json::to_vec(&r.context).unwrap()).unwrap();
    let oracle = run_ok(
        std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scenario/payload_oracle.py"
            ))
            .arg(r.dir.path())
            .arg(&approval_file)
            .arg("app/a.txt,app/big.txt")
            .arg("tests/t.txt"),
    );
    let oracle = String::from_utf8(oracle.stdout).unwrap();
    let (sha, len) = oracle.trim().split_once(' ').unwrap();
    assert_eq!(
        t.proposal.owned_paths,
        vec![format!("stdin-bytes-{len}"), format!("stdin-sha256-{sha}")]
    );
    assert_clean_and_tally(&docker, "docker_stdin_is_delivered_whole_and_closed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_container_is_isolated_from_the_inside() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (tag, id) = fixture_mode_image("probe");
    let r = repo(16);
    let t = turn(&docker, &r, &tag, &id, 60).await.unwrap();
    let facts = t.proposal.owned_paths;
    for expected in [
        "uid-10001",
        "capeff-0000000000000000",
        "capbnd-0000000000000000",
        "nonewprivs-1",
        "seccomp-2",
        "root-writable-false",
        "tmp-writable-true",
        "ifaces-lo",
        "env-PATH,HOSTNAME,HOME",
        "nofile-1024/1024",
        "shm-size=1024k",
        "pid1-docker-init",
    ] {
        assert!(
            facts.iter().any(|f| f == expected),
            "missing {expected} in {facts:?}"
        );
    }
    assert_clean_and_tally(&docker, "docker_container_is_isolated_from_the_inside").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_wall_timeout_kills_and_removes() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (tag, id) = fixture_mode_image("sleep");
    let r = repo(16);
    let started = Instant::now();
    let err = turn(&docker, &r, &tag, &id, 1).await.unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_TIMEOUT");
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    assert_clean_and_tally(&docker, "docker_wall_timeout_kills_and_removes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_oom_kill_has_its_own_code() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (tag, id) = fixture_mode_image("oom");
    let r = repo(16);
    let err = turn(&docker, &r, &tag, &id, 60).await.unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_OOM");
    assert_clean_and_tally(&docker, "docker_oom_kill_has_its_own_code").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_image_baked_secret_is_rejected_before_create() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (_, secret_id) = fixture_images();
    let r = repo(16);
    let err = turn(&docker, &r, SECRET_IMAGE, secret_id, 60)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_ISOLATION_MISMATCH");
    assert!(err.to_string().contains("Config.Env"));
    assert!(!err.to_string().contains("sk-test"));
    assert_clean_and_tally(
        &docker,
        "docker_image_baked_secret_is_rejected_before_create",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_wrong_image_id_is_rejected_before_create() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (_, secret_id) = fixture_images();
    let r = repo(16);
    // The tag resolves to the fixture image, not the approved (secret image) ID.
    let err = turn(&docker, &r, FIXTURE_IMAGE, secret_id, 60)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_IMAGE_ID_MISMATCH");
    let err = turn(
        &docker,
        &r,
        "patch-candidate-no-such-image:none",
        secret_id,
        60,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_IMAGE_MISSING");
    assert_clean_and_tally(&docker, "docker_wrong_image_id_is_rejected_before_create").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_configured_runtime_is_used_and_verified() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (id, _) = fixture_images();
    let r = repo(16);
    let policy = DefaultPathGuard::default();
    let approval = r.approved(&policy);
    // The daemon's own runc, named explicitly: created, verified and run under it.
    let config = TurnConfig::parse(FIXTURE_IMAGE, id, 60, 700_000)
        .unwrap()
        .with_runtime(Some("runc".parse().unwrap()));
    let t = execute_repository_docker_turn(&docker, &r.request, &approval, &config)
        .await
        .unwrap();
    assert_eq!(t.proposal.status, snapshot::ProposalStatus::Empty);
    // A runtime the daemon does not know: the create fails and nothing is left behind.
    let config = TurnConfig::parse(FIXTURE_IMAGE, id, 60, 700_000)
        .unwrap()
        .with_runtime(Some("no-such-runtime".parse().unwrap()));
    let err = execute_repository_docker_turn(&docker, &r.request, &approval, &config)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_COMMAND_FAILED");
    assert_clean_and_tally(&docker, "docker_configured_runtime_is_used_and_verified").await;
}

/// Runs the fixture's system call probes in a real turn (under the turn seccomp profile) and
/// returns the outcome label of `probe` (`errno-N` or `ok`).
async fn turn_syscall_outcome(docker: &BollardRuntime, probe: &str) -> String {
    let (tag, id) = fixture_mode_image("syscalls");
    let r = repo(16);
    let t = turn(docker, &r, &tag, &id, 60).await.unwrap();
    let prefix = format!("syscall-{probe}-");
    let facts = t.proposal.owned_paths;
    facts
        .iter()
        .find_map(|f| f.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {probe} report in {facts:?}"))
        .to_owned()
}

async fn assert_turn_denies(probe: &str, test: &str) {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let outcome = turn_syscall_outcome(&docker, probe).await;
    // EPERM (1) is the profile's default action, ENOSYS (38) its answer for io_uring.
    assert!(
        outcome == "errno-1" || outcome == "errno-38",
        "{probe} was not denied by the turn profile: {outcome}"
    );
    assert_clean_and_tally(&docker, test).await;
}

macro_rules! denied_syscall_tests {
    ($($name:ident => $probe:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            assert_turn_denies($probe, stringify!($name)).await;
        }
    )*};
}

denied_syscall_tests! {
    docker_seccomp_denies_io_uring_setup => "io_uring_setup";
    docker_seccomp_denies_socket_af_vsock => "socket_vsock";
    docker_seccomp_denies_ptrace => "ptrace";
    docker_seccomp_denies_perf_event_open => "perf_event_open";
    docker_seccomp_denies_bpf => "bpf";
    docker_seccomp_denies_userfaultfd => "userfaultfd";
    docker_seccomp_denies_keyctl => "keyctl";
    docker_seccomp_denies_init_module => "init_module";
    docker_seccomp_denies_mount => "mount";
}

/// The same probes under the daemon's default profile (and otherwise the same flags): the calls
/// the turn profile newly denies reach the kernel there, so the denial above is the turn
/// profile's doing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_seccomp_daemon_default_allows_what_the_turn_profile_denies() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let (tag, _) = fixture_mode_image("syscalls");
    let out = docker_cli(
        &[
            "run",
            "--rm",
            "-i",
            "--network",
            "none",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            "10001:10001",
            "--log-driver",
            "none",
            &tag,
        ],
        Some(b"{}".as_slice()),
    );
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let facts: Vec<String> =
        serde_json::from_value(doc["proposal"]["owned_paths"].clone()).unwrap();
    // keyctl is left out: under the daemon default its probe already gets EPERM from the kernel
    // (no key permission for the unprivileged user), so it cannot show the profile's effect.
    for probe in ["io_uring_setup", "socket_vsock", "ptrace"] {
        let prefix = format!("syscall-{probe}-");
        let outcome = facts.iter().find_map(|f| f.strip_prefix(&prefix)).unwrap();
        assert!(
            outcome != "errno-1" && outcome != "errno-38",
            "{probe} is already denied by the daemon default: {outcome}"
        );
    }
    assert_clean_and_tally(
        &docker,
        "docker_seccomp_daemon_default_allows_what_the_turn_profile_denies",
    )
    .await;
}
