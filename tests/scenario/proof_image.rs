//! The real proof images under the real Docker daemon, run with the hardened flags of reference
//! §10.4 via plain `docker run -i`. With `PATCH_CANDIDATE_REQUIRE_DOCKER=1` a missing daemon fails
//! these tests; otherwise they print that they skipped.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, OnceLock, mpsc};
use std::time::{Duration, Instant};

use snapshot::ProposalStatus;
use turn_runner::testkit::{Run, archive_entries, outcomes, spawn_fed, standard};

use crate::support::{
    LOCKED_DOWN, TMPFS_AND_USER, TURN_SECCOMP_OPT, container_exists, docker_cli_case, target_dir,
    workspace_bin,
};

const TEST_IMAGE: &str = "patch-candidate-proof:selftest";
const TEST_HOSTILE_IMAGE: &str = "patch-candidate-proof-hostile:selftest";

/// Reference §10.4 `create` flags (without name/label) plus the worker's turn seccomp profile and
/// `/dev/shm` size, as `docker run` arguments.
static HARDENED: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    [
        &["--security-opt", TURN_SECCOMP_OPT][..],
        LOCKED_DOWN,
        &["--pids-limit", "64", "--memory", "768m", "--cpus", "1"],
        TMPFS_AND_USER,
    ]
    .concat()
});

#[derive(Debug, Clone)]
struct Images {
    proof: String,
    hostile: String,
}

static IMAGES: OnceLock<Result<Images, String>> = OnceLock::new();
static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Builds throwaway-tagged images from the binaries under test with `images/build.sh`.
fn images() -> Images {
    IMAGES
        .get_or_init(|| {
            for bin in ["turn-runner", "fake-agent", "hostile-entry"] {
                workspace_bin(bin);
            }
            let bin_dir = target_dir();
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/build.sh");
            let state = tempfile::tempdir().unwrap();
            let out = Command::new("bash")
                .arg(&script)
                .arg("--bin-dir")
                .arg(&bin_dir)
                .env("PATCH_CANDIDATE_STATE_DIR", state.path())
                .env("PROOF_IMAGE_TAG", TEST_IMAGE)
                .env("PROOF_HOSTILE_IMAGE_TAG", TEST_HOSTILE_IMAGE)
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
            let state_json: serde_json::Value =
                serde_json::from_slice(&std::fs::read(state.path().join("images.json")).unwrap())
                    .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let proof = state_json["image_id"].as_str().unwrap().to_owned();
            let hostile = state_json["hostile_image_id"].as_str().unwrap().to_owned();
            assert!(
                stdout.contains(&proof) && stdout.contains(&hostile),
                "{stdout}"
            );
            assert_eq!(state_json["image"], TEST_IMAGE);
            Ok(Images { proof, hostile })
        })
        .clone()
        .expect("image build failed")
}

/// `docker run -i --rm --name N <flags> <image> <args>` with `stdin`; on the deadline the
/// container is force-removed. Asserts the container is gone afterwards.
fn docker_run(flags: &[&str], image: &str, args: &[&str], stdin: &[u8], deadline: Duration) -> Run {
    let name = format!(
        "turn-runner-test-{}-{}",
        crate::support::process_tag(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let mut cmd = Command::new("docker");
    cmd.args(["run", "-i", "--rm", "--name", &name])
        .args(flags)
        .arg(image)
        .args(args);
    let start = Instant::now();
    let (child, writer) = spawn_fed(&mut cmd, stdin);
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let watch_name = name.clone();
    let watcher = std::thread::spawn(move || {
        if done_rx.recv_timeout(deadline).is_err() {
            let _ = Command::new("docker")
                .args(["rm", "-f", &watch_name])
                .output();
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = done_tx.send(());
    let _ = writer.join();
    let _ = watcher.join();
    let elapsed = start.elapsed();
    // `--rm` removal is asynchronous in the daemon; give it a moment before asserting.
    let gone_by = Instant::now() + Duration::from_secs(10);
    while container_exists(&name) && Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!container_exists(&name), "container {name} left behind");
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed,
    }
}

fn hardened_turn(extra: &[&str], args: &[&str], task: &str) -> Run {
    let images = images();
    let flags: Vec<&str> = HARDENED.iter().chain(extra).copied().collect();
    docker_run(
        &flags,
        &images.proof,
        args,
        &standard(task),
        Duration::from_secs(90),
    )
}

/// Replaces one hardened flag's value (e.g. `--network`, `--user`).
fn with_override(flag: &str, value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut it = HARDENED.iter();
    while let Some(f) = it.next() {
        out.push((*f).to_owned());
        if *f == flag {
            it.next();
            out.push(value.to_owned());
        }
    }
    out
}

fn turn_with_flags(flags: &[String], task: &str) -> Run {
    let images = images();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    docker_run(
        &flags,
        &images.proof,
        &[],
        &standard(task),
        Duration::from_secs(90),
    )
}

/// The host's primary non-loopback address, if it has one (no packet is sent).
fn host_address() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("10.255.255.255:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// Probes for a loopback listener and, when the host has one, a listener on its own address
/// (returned, so it stays open while the turn runs).
fn probe_task(listener: &std::net::TcpListener) -> (String, Option<std::net::TcpListener>) {
    let mut task = format!(
        "Edit the dashboard.\nprobe: isolation\nprobe-tcp: {}\nprobe-env: PROOF_SENTINEL\nprobe-file: /run/proof-sentinel",
        listener.local_addr().unwrap()
    );
    let wide = host_address().map(|ip| std::net::TcpListener::bind((ip, 0)).unwrap());
    if let Some(wide) = &wide {
        task.push_str(&format!("\nprobe-tcp: {}", wide.local_addr().unwrap()));
    }
    (task, wide)
}

/// A probe turn (`turn` runs the given probe task, its TCP target listening meanwhile) whose
/// probes report each of `exposures`.
fn assert_probe_exposes(exposures: &[&str], turn: impl FnOnce(&str) -> Run) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let run = turn(&probe_task(&listener).0);
    for exposure in exposures {
        assert_exposed(&run, exposure);
    }
}

fn assert_exposed(run: &Run, exposure: &str) {
    assert_eq!(run.code, Some(4), "{}", run.stderr);
    assert!(run.stdout.is_empty());
    assert!(
        run.stderr.contains(exposure),
        "expected {exposure}: {}",
        run.stderr
    );
}

#[test]
fn docker_image_is_small_scratch_and_nonroot() {
    docker_cli_case("docker_image_is_small_scratch_and_nonroot", || {
        let images = images();
        let out = Command::new("docker")
            .args(["image", "inspect", &images.proof])
            .output()
            .unwrap();
        let inspect: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let image = &inspect[0];
        let size = image["Size"].as_u64().unwrap();
        eprintln!(
            "proof image size: {size} bytes, layers: {}",
            image["RootFS"]["Layers"].as_array().unwrap().len()
        );
        assert!(size < 15_000_000, "image is {size} bytes");
        assert_eq!(image["Config"]["User"], "10001:10001");
        assert_eq!(image["Config"]["WorkingDir"], "/workspace");
        assert_eq!(
            image["Config"]["Entrypoint"],
            serde_json::json!(["/turn-runner"])
        );
        let env: Vec<&str> = image["Config"]["Env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let names: Vec<&str> = env.iter().map(|e| e.split_once('=').unwrap().0).collect();
        assert_eq!(names, vec!["PATH", "HOME"]);
        // Two layers: the binaries and the mount-point directories. Nothing from a base image.
        assert_eq!(image["RootFS"]["Layers"].as_array().unwrap().len(), 2);
    });
}

#[test]
fn docker_hardened_turn_reports_no_exposure() {
    docker_cli_case("docker_hardened_turn_reports_no_exposure", || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let run = hardened_turn(&[], &[], &probe_task(&listener).0);
        let out = run.output();
        assert_eq!(out.proposal.status, ProposalStatus::Completed);
        assert_eq!(archive_entries(&out).len(), 2);
        let report = run.report();
        let probes = report.probes.expect("probe report");
        assert!(probes.exposures().is_empty(), "{probes:?}");
        assert_eq!(probes.uid, Some(10001));
        assert_eq!(probes.seccomp_mode, Some(2));
        assert_eq!(probes.undenied_syscalls, Some(vec![]));
        assert_eq!(probes.tcp_reachable, Some(false));
        eprintln!("hardened no-exposure turn: {:?}", run.elapsed);
    });
}

/// Under the daemon's default seccomp profile (all other flags the same), the agent's probes see
/// the system call families the turn profile denies: io_uring, vsock, ptrace, keyrings.
#[test]
fn docker_probes_detect_the_daemon_default_seccomp_profile() {
    docker_cli_case(
        "docker_probes_detect_the_daemon_default_seccomp_profile",
        || {
            let mut flags: Vec<String> = Vec::new();
            let mut it = HARDENED.iter();
            while let Some(f) = it.next() {
                if *f == "--security-opt" && it.as_slice().first() == Some(&TURN_SECCOMP_OPT) {
                    it.next();
                    continue;
                }
                flags.push((*f).to_owned());
            }
            assert_probe_exposes(
                &["agent:syscall_not_denied", "runner:syscall_not_denied"],
                |task| turn_with_flags(&flags, task),
            );
        },
    );
}

#[test]
fn docker_probes_detect_host_network() {
    docker_cli_case("docker_probes_detect_host_network", || {
        assert_probe_exposes(
            &["agent:tcp_reachable", "agent:network_interfaces"],
            |task| turn_with_flags(&with_override("--network", "host"), task),
        );
    });
}

#[test]
fn docker_probes_detect_a_sentinel_variable() {
    docker_cli_case("docker_probes_detect_a_sentinel_variable", || {
        assert_probe_exposes(&["runner:sentinel_env"], |task| {
            hardened_turn(&["-e", "PROOF_SENTINEL=leaked"], &[], task)
        });
    });
}

#[test]
fn docker_probes_detect_a_bind_mounted_sentinel_file() {
    docker_cli_case("docker_probes_detect_a_bind_mounted_sentinel_file", || {
        let sentinel = tempfile::NamedTempFile::new().unwrap();
        let mount = format!("{}:/run/proof-sentinel:ro", sentinel.path().display());
        assert_probe_exposes(&["agent:sentinel_file"], |task| {
            hardened_turn(&["-v", &mount], &[], task)
        });
    });
}

#[test]
fn docker_probes_detect_root() {
    docker_cli_case("docker_probes_detect_root", || {
        assert_probe_exposes(&["agent:uid_zero"], |task| {
            turn_with_flags(&with_override("--user", "0"), task)
        });
    });
}

#[test]
fn docker_resource_bombs_end_inside_the_limits() {
    docker_cli_case("docker_resource_bombs_end_inside_the_limits", || {
        // Fork bomb: the pids limit (64) stops it; the turn still completes.
        let run = hardened_turn(&[], &[], "Edit.\nmode: fork-bomb");
        let fork = outcomes(&run.report(), "fork_bomb").join("");
        assert!(fork.contains("then refused"), "{fork}");
        let spawned: usize = fork
            .split_whitespace()
            .nth(1)
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap();
        assert!(spawned < 64, "{fork}");
        // Memory bomb: the 768 MiB cgroup limit kills the agent; the runner reports a failed turn.
        let run = hardened_turn(&[], &[], "Edit.\nmode: memory-bomb");
        assert_eq!(
            run.output().proposal.status,
            ProposalStatus::Failed,
            "{}",
            run.stderr
        );
        assert!(run.elapsed < Duration::from_secs(60));
        // tmpfs fill: the 64 MiB workspace fills up; the file is outside the allowlist.
        let run = hardened_turn(&[], &[], "Edit.\nmode: fill-tmpfs");
        let out = run.output();
        assert_eq!(
            out.proposal.status,
            ProposalStatus::RejectedScope,
            "{}",
            out.proposal.summary
        );
        assert!(
            out.proposal
                .summary
                .contains("fill.bin (outside_allowlist)")
        );
        assert_eq!(out.workspace_archive_base64, None);
    });
}

#[test]
fn docker_filesystem_escapes_hit_the_read_only_root() {
    docker_cli_case("docker_filesystem_escapes_hit_the_read_only_root", || {
        let run = hardened_turn(
            &[],
            &[],
            "Edit.\nmode: escape-fs\nescape-target: /etc/escape.txt\nescape-target: /escape.txt\nmode: escape-acp\nmode: terminal",
        );
        let report = run.report();
        for target in ["fs_write /etc/escape.txt", "fs_write /escape.txt"] {
            let outcome = outcomes(&report, target);
            assert_eq!(outcome.len(), 1);
            assert!(outcome[0].starts_with("failed:"), "{target}: {outcome:?}");
        }
        assert!(
            outcomes(&report, "acp_")
                .iter()
                .all(|o| o.starts_with("refused: FS_"))
        );
        assert!(outcomes(&report, "terminal_create")[0].starts_with("refused:"));
        assert_eq!(run.output().proposal.status, ProposalStatus::Empty);
    });
}

#[test]
fn docker_turn_deadline_times_out() {
    docker_cli_case("docker_turn_deadline_times_out", || {
        let run = hardened_turn(&[], &["--turn-timeout-ms", "2000"], "Edit.\nmode: sleep");
        assert_eq!(run.output().proposal.status, ProposalStatus::Timeout);
        assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    });
}

#[test]
fn docker_hostile_image_modes() {
    docker_cli_case("docker_hostile_image_modes", || {
        let images = images();
        let input = standard("x");
        let run = |mode: &str, secs: u64| {
            docker_run(
                &HARDENED,
                &images.hostile,
                &[mode],
                &input,
                Duration::from_secs(secs),
            )
        };
        let valid = run("valid", 60);
        assert!(
            vocab::from_slice_strict::<turn_runner::TurnOutput>(&valid.stdout, 1 << 20).is_ok()
        );
        let dup = run("duplicate-keys", 60);
        assert_eq!(
            vocab::from_slice_strict::<turn_runner::TurnOutput>(&dup.stdout, 1 << 20).unwrap_err(),
            vocab::StrictJsonError::DuplicateKey
        );
        assert_eq!(run("exit-nonzero", 60).code, Some(3));
        assert!(run("print-nothing", 60).stdout.is_empty());
        assert!(run("oversized-output", 60).stdout.len() > 40_000_000);
        let hang = run("sleep-forever", 3);
        assert!(hang.elapsed < Duration::from_secs(30));
    });
}

#[test]
fn docker_agent_cannot_write_into_the_runner_output() {
    docker_cli_case("docker_agent_cannot_write_into_the_runner_output", || {
        // The runner is non-dumpable, so the agent (same uid, no capabilities) cannot reopen its
        // stdout through /proc; the output stays one strict JSON document.
        let run = hardened_turn(&[], &[], "Edit.\nmode: hijack-stdout");
        let report = run.report();
        let hijack = outcomes(&report, "hijack_stdout");
        assert_eq!(hijack.len(), 1);
        assert!(hijack[0].starts_with("failed:"), "{hijack:?}");
        assert!(!String::from_utf8_lossy(&run.stdout).contains("hijacked"));
    });
}

#[test]
fn docker_channel_floods_end_as_budget_exceeded() {
    docker_cli_case("docker_channel_floods_end_as_budget_exceeded", || {
        // Default caps: 96 MiB inbound in total, 40 MiB per message, inside a 768 MiB container.
        for mode in ["flood", "giant-message"] {
            let run = hardened_turn(&[], &[], &format!("Edit.\nmode: {mode}"));
            let out = run.output();
            assert_eq!(
                out.proposal.status,
                ProposalStatus::BudgetExceeded,
                "{mode}"
            );
            assert_eq!(out.workspace_archive_base64, None);
        }
    });
}
