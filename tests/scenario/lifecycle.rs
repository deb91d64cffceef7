//! Cleanup that survives signals and many workers, against the real daemon and the proof image:
//! SIGINT / SIGTERM sent to a real `run` mid-turn, and runs plus a janitor in separate PID
//! namespaces (`unshare --pid --fork --mount-proc`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use container::{BollardRuntime, ContainerRuntime as _};

use crate::proof::demo_files;
use crate::support::*;

/// The proof agent sleeps for this long: the turn is mid-run until the test acts.
const SLEEPING_TASK: &str = "Update the dashboard.\nmode: sleep=600";

struct Setup {
    _dir: tempfile::TempDir,
    state: PathBuf,
    tmp: PathBuf,
    repo: PathBuf,
    commit: String,
    approval: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let tmp = dir.path().join("tmp");
    for d in [&state, &tmp] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(
        state.join("images.json"),
        serde_json::to_vec(&proof_images()).unwrap(),
    )
    .unwrap();
    let (repo_dir, commit) = git_repo(&demo_files());
    let repo = dir.path().join("repo");
    std::fs::rename(repo_dir.path(), &repo).unwrap();
    let context = app_approval(&repo, &commit, SLEEPING_TASK);
    let approval = write_approval(dir.path(), &context);
    Setup {
        _dir: dir,
        state,
        tmp,
        repo,
        commit,
        approval,
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        == Some("0")
}

/// The command, in a fresh PID namespace with its own procfs when `namespaced` (without root, in
/// a user namespace of its own too). The namespace's processes die with `unshare`.
fn command(namespaced: bool) -> Command {
    if !namespaced {
        return Command::new(workspace_bin("patch-candidate"));
    }
    let mut c = Command::new("unshare");
    if !is_root() {
        c.args(["--user", "--map-root-user"]);
    }
    c.args(["--pid", "--fork", "--kill-child", "--mount-proc"])
        .arg(workspace_bin("patch-candidate"));
    c
}

/// `patch-candidate --json run …` (optionally inside `unshare`), stderr into `log`.
fn spawn_run(s: &Setup, wall: u64, namespaced: bool, log: &Path) -> Child {
    let mut cmd = command(namespaced);
    cmd.args(["--json", "run", "--repo"])
        .arg(&s.repo)
        .args(["--commit", &s.commit, "--approval"])
        .arg(&s.approval)
        .args(["--task", SLEEPING_TASK, "--no-ledger"])
        .args(["--max-wall-seconds", &wall.to_string()])
        .env_remove("DOCKER_HOST")
        .env("PATCH_CANDIDATE_STATE_DIR", &s.state)
        .env("TMPDIR", &s.tmp)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// `patch-candidate --json janitor --grace-seconds 0` (optionally in a PID namespace of its own);
/// returns the names it removed.
fn janitor(s: &Setup, namespaced: bool) -> Vec<String> {
    let out = run_ok(
        command(namespaced)
            .args(["--json", "janitor", "--grace-seconds", "0"])
            .env_remove("DOCKER_HOST")
            .env("PATCH_CANDIDATE_STATE_DIR", &s.state),
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

/// The names of running turn containers.
async fn running_turns(docker: &BollardRuntime) -> Vec<String> {
    let mut running = Vec::new();
    for c in docker.list_turns().await.unwrap() {
        if let Ok(inspect) = docker.inspect(&c.id).await
            && inspect.state.and_then(|st| st.running) == Some(true)
        {
            running.push(c.names[0].trim_start_matches('/').to_owned());
        }
    }
    running.sort();
    running
}

/// Waits until `n` turn containers run; returns their names.
async fn wait_running(docker: &BollardRuntime, n: usize, logs: &[&Path]) -> Vec<String> {
    let started = Instant::now();
    loop {
        let running = running_turns(docker).await;
        if running.len() >= n {
            return running;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let logs: Vec<String> = logs
                .iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect();
            panic!("{n} turn containers never ran ({running:?}): {logs:#?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -s {sig} {pid}");
}

/// Waits (bounded) for `child` to exit.
async fn wait_exit(child: &mut Child, log: &Path) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "no exit: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The only child of `pid` (the command `unshare --fork` started, as seen from here).
fn only_child(pid: u32) -> u32 {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let pids: Vec<u32> = children
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 1, "children of {pid}: {children:?}");
    pids[0]
}

fn staging_trees(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("patch-candidate-stage-"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_sigint_and_sigterm_mid_turn_remove_container_and_staging_tree() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    assert_no_turn_containers(&docker).await;
    for (sig, expected) in [("INT", 130), ("TERM", 143)] {
        let s = setup();
        let log = s.tmp.with_file_name(format!("run-{sig}.log"));
        let mut child = spawn_run(&s, 300, false, &log);
        wait_running(&docker, 1, &[&log]).await;
        // Mid-turn: the agent is sleeping inside the running container.
        tokio::time::sleep(Duration::from_millis(500)).await;
        signal(child.id(), sig);
        let status = wait_exit(&mut child, &log).await;
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert_eq!(status.code(), Some(expected), "SIG{sig}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "PATCH_CANDIDATE_INTERRUPTED: interrupted by SIG{sig}; turn container and staging tree removed"
            )),
            "SIG{sig}: {stderr}"
        );
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
        // `--json`: the same error document every failed command writes, and nothing else.
        let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!("SIG{sig}: stdout is not one JSON document ({e}): {stdout:?}")
        });
        assert_eq!(
            doc["error"]["code"], "PATCH_CANDIDATE_INTERRUPTED",
            "SIG{sig}: {stdout}"
        );
        assert!(
            error_message(&doc).starts_with(&format!(
                "PATCH_CANDIDATE_INTERRUPTED: interrupted by SIG{sig}"
            )),
            "SIG{sig}: {stdout}"
        );
        assert_no_turn_containers(&docker).await;
        assert_eq!(staging_trees(&s.tmp), Vec::<String>::new(), "SIG{sig}");
    }
    tally("docker_sigint_and_sigterm_mid_turn_remove_container_and_staging_tree");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_janitor_in_another_pid_namespace_keeps_live_turns_and_removes_expired_ones() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    assert_no_turn_containers(&docker).await;
    let s = setup();
    let logs: Vec<PathBuf> = ["a", "b", "killed"]
        .iter()
        .map(|n| s.tmp.with_file_name(format!("run-{n}.log")))
        .collect();
    // Two live turns, each run in a PID namespace of its own (each sweeps first on start-up).
    let mut a = spawn_run(&s, 300, true, &logs[0]);
    let mut b = spawn_run(&s, 300, true, &logs[1]);
    let live = wait_running(&docker, 2, &[&logs[0], &logs[1]]).await;
    // A third with a 5 s wall budget, SIGKILLed mid-turn: nobody is left to remove its container.
    let mut killed = spawn_run(&s, 5, true, &logs[2]);
    let all = wait_running(&docker, 3, &[&logs[0], &logs[1], &logs[2]]).await;
    killed.kill().unwrap();
    killed.wait().unwrap();
    let orphan: Vec<String> = all.into_iter().filter(|n| !live.contains(n)).collect();
    assert_eq!(orphan.len(), 1);
    let orphan = orphan[0].clone();
    let inspect = docker.inspect(&orphan).await.unwrap();
    let deadline: i64 = inspect.config.unwrap().labels.unwrap()[container::DEADLINE_LABEL_KEY]
        .parse()
        .unwrap();

    // Before the deadline no janitor removes anything: in a third namespace or in this one, the
    // owners are not provably gone (and the killed owner's namespace is not theirs).
    assert_eq!(janitor(&s, true), Vec::<String>::new());
    assert_eq!(janitor(&s, false), Vec::<String>::new());
    let mut names = docker
        .list_turns()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.names[0].trim_start_matches('/').to_owned())
        .collect::<Vec<_>>();
    names.sort();
    let mut expected = live.clone();
    expected.push(orphan.clone());
    expected.sort();
    assert_eq!(names, expected);

    // After its deadline the orphan goes; the live turns stay.
    while vocab::now_unix() <= deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(janitor(&s, true), vec![orphan.clone()]);
    assert_eq!(running_turns(&docker).await, live);

    // The live runs end cleanly on SIGTERM inside their namespaces.
    for (child, log) in [(&mut a, &logs[0]), (&mut b, &logs[1])] {
        signal(only_child(child.id()), "TERM");
        let status = wait_exit(child, log).await;
        assert_eq!(
            status.code(),
            Some(143),
            "{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    assert_no_turn_containers(&docker).await;
    assert_eq!(staging_trees(&s.tmp), Vec::<String>::new());
    tally("docker_janitor_in_another_pid_namespace_keeps_live_turns_and_removes_expired_ones");
}
