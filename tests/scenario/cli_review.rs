//! `patch-candidate review show|accept|reject|retry` of one-shot use, through the built binary,
//! against a real candidate store and the local review store of a fresh state directory.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Output;

use finalizer::{CandidateStore, RepositoryPatchCandidate, RepositoryPatchFile};
use snapshot::{FileOp, RepoPath};
use vocab::Sha256;

use crate::support::{
    assert_ok, assert_published_new_py, bare_clone, bin, create_new_py, fields_at, git, git_out,
    json_of, main_repo,
};

/// A candidate creating `src/new.py` with `body`, requiring `gates`, stored in `store`.
fn stored(store: &Path, gates: &[&str], body: &str) -> String {
    stored_at(store, gates, body, &"c".repeat(40))
}

/// [`stored`] at the baseline commit `commit`.
fn stored_at(store: &Path, gates: &[&str], body: &str, commit: &str) -> String {
    stored_files(store, gates, commit, vec![create_new_py(body)])
}

/// A candidate of `files` at `commit`, requiring `gates`, stored in `store`.
fn stored_files(
    store: &Path,
    gates: &[&str],
    commit: &str,
    files: Vec<RepositoryPatchFile>,
) -> String {
    let c = RepositoryPatchCandidate::new(fields_at(gates, commit), files).unwrap();
    CandidateStore::open(store)
        .unwrap()
        .put(&c)
        .unwrap()
        .to_string()
}

fn review(state: &Path, store: &Path, args: &[&str]) -> Output {
    bin()
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .env("USER", "alice")
        .arg("--json")
        .arg("review")
        .args(args)
        .arg("--store")
        .arg(store)
        .output()
        .unwrap()
}

fn code(out: &Output) -> String {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    v["error"]["code"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn cli_review_accept_needs_gates_and_a_clean_policy_or_a_recorded_override() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let store = tmp.path().join("candidates");
    let gated = stored(&store, &["pytest"], "print('a')\n");

    let show = review(&state, &store, &["show", &gated]);
    assert_ok(&show);
    let doc = json_of(&show);
    assert_eq!(doc["schema"], "patch_candidate.review_package.v1");
    assert_eq!(doc["validation_state"], "pending");
    assert_eq!(doc["gates"][0]["outcome"], "missing");

    let out = review(&state, &store, &["accept", &gated]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_GATES_UNMET");
    let out = review(&state, &store, &["accept", &gated, "--force"]);
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_REASON_REQUIRED");
    let out = review(&state, &store, &["reject", &gated]);
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_REASON_REQUIRED");
    let out = review(
        &state,
        &store,
        &["accept", &gated, "--force", "--reason", "reviewed by hand"],
    );
    assert_ok(&out);
    let v = json_of(&out);
    assert_eq!(v["seq"], 1);
    assert_eq!(v["decision"]["forced"], true);
    assert_eq!(
        v["decision"]["actor"],
        serde_json::json!({"kind": "local_user", "principal": "alice"})
    );
    assert_eq!(v["review"]["review_state"], "accepted");

    // A decision made against another digest is refused.
    let other = stored(&store, &[], "print('b')\n");
    let out = review(&state, &store, &["retry", &gated, "--digest", &other]);
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH");
    // The plain candidate (no gate, clean policy) is accepted without an override, and a
    // retry then wins; its history is its own.
    let out = review(&state, &store, &["accept", &other]);
    assert_ok(&out);
    let out = review(
        &state,
        &store,
        &["retry", &other, "--reason", "keep the API"],
    );
    assert_ok(&out);
    let v = json_of(&out);
    assert_eq!(v["review"]["review_state"], "retry_requested");
    assert_eq!(v["review"]["decisions"].as_array().unwrap().len(), 2);

    let dir = state
        .join("reviews")
        .join(gated.trim_start_matches("sha256:"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("00000001.json")), 0o600);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
}

#[test]
fn cli_review_accept_refuses_an_unclean_policy_and_never_prints_the_secret() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let store = tmp.path().join("candidates");
    let secret = "AKIAZ7QW3RT5YU6IOPLK";
    let body = format!("aws_access_key_id = \"{secret}\"\n");
    let digest = stored(&store, &[], &body);
    let out = review(&state, &store, &["accept", &digest]);
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_POLICY_UNCLEAN");
    let show = review(&state, &store, &["show", &digest]);
    let doc = json_of(&show);
    assert_eq!(doc["policy"]["clean"], false);
    assert_eq!(doc["risk_notes"][0]["kind"], "policy_finding");
    assert_eq!(doc["risk_notes"][0]["path"], "src/new.py");
    let text = bin()
        .env("PATCH_CANDIDATE_STATE_DIR", &state)
        .args(["review", "show", &digest, "--store"])
        .arg(&store)
        .output()
        .unwrap();
    for out in [&out, &show, &text] {
        assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
    }
    let forced = review(
        &state,
        &store,
        &[
            "accept",
            &digest,
            "--force",
            "--reason",
            "a documented test key",
        ],
    );
    let v = json_of(&forced);
    assert_eq!(v["decision"]["overridden"][0]["kind"], "policy");
    assert!(!String::from_utf8_lossy(&forced.stdout).contains(secret));
}

fn publish(
    state: &Path,
    store: &Path,
    repo: &Path,
    remote: &Path,
    digest: &str,
    branch: &str,
) -> Output {
    publish_cmd(state, store, repo, remote.as_os_str(), digest, branch)
        .output()
        .unwrap()
}

/// `publish DIGEST` from `repo` to `remote` as `branch` off `main`, in the state directory.
fn publish_cmd(
    state: &Path,
    store: &Path,
    repo: &Path,
    remote: &std::ffi::OsStr,
    digest: &str,
    branch: &str,
) -> std::process::Command {
    let mut cmd = bin();
    cmd.env("PATCH_CANDIDATE_STATE_DIR", state)
        .arg("--json")
        .args(["publish", digest, "--store"])
        .arg(store)
        .arg("--repo")
        .arg(repo)
        .arg("--remote")
        .arg(remote)
        .args(["--branch", branch, "--base", "main"]);
    cmd
}

/// r_update_with_empty_diff_scans_nothing: an update whose post-image adds a secret but whose
/// diff is empty would show and scan nothing; review refuses it (show and accept alike) by the
/// diff check's code, and never prints the value.
#[test]
fn cli_review_refuses_a_candidate_whose_diff_is_not_its_change() {
    let tmp = tempfile::tempdir().unwrap();
    let (state, store) = (tmp.path().join("state"), tmp.path().join("candidates"));
    let secret = "AKIAZ7QW3RT5YU6IOPLK";
    let before = "print('a')\n";
    let after = format!("print('a')\naws_access_key_id = \"{secret}\"\n");
    let file = RepositoryPatchFile::new(
        RepoPath::parse("src/app.py").unwrap(),
        FileOp::Update,
        Some(Sha256::of(before.as_bytes())),
        Some(Sha256::of(after.as_bytes())),
        Some(after.clone()),
        String::new(),
    )
    .unwrap();
    let digest = stored_files(&store, &[], &"c".repeat(40), vec![file]);
    for args in [
        vec!["accept", digest.as_str()],
        vec!["show", digest.as_str()],
    ] {
        let out = review(&state, &store, &args);
        assert_eq!(code(&out), "REPOSITORY_PATCH_VERIFY_DIFF", "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
        assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
    }
}

/// r_credential_copy_survives_sigkill: a publication killed outright (SIGKILL, mid-transfer)
/// leaves its private mirror and the credential copy in it; the next publication removes them
/// before it does anything else, even one that then fails.
#[test]
fn cli_publish_killed_mid_push_leaves_no_credential_copy_behind() {
    use std::io::Read as _;

    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let store = tmp.path().join("candidates");
    let temp = tmp.path().join("tmp");
    std::fs::create_dir(&temp).unwrap();
    let (repo, commit) = main_repo(&[("src/app.py", "print('app')\n")]);
    let digest = stored_at(&store, &[], "print('new')\n", &commit);
    let out = review(&state, &store, &["accept", &digest]);
    assert_ok(&out);

    // A "remote" that takes the connection and never answers: the publication waits in it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        for conn in listener.incoming().take(4) {
            let Ok(mut conn) = conn else { break };
            let mut buf = [0_u8; 1024];
            let _ = conn.set_read_timeout(Some(std::time::Duration::from_millis(200)));
            let _ = conn.read(&mut buf);
            conns.push(conn);
        }
        conns
    });
    let secret = "s3cret-token-0f9e8d7c6b5a";
    let creds = tmp.path().join("creds");
    std::fs::write(&creds, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
    let publish_to = |port: u16| {
        let remote = format!("http://127.0.0.1:{port}/r.git");
        let mut cmd = publish_cmd(
            &state,
            &store,
            repo.path(),
            remote.as_ref(),
            &digest,
            "c/killed",
        );
        cmd.env("TMPDIR", &temp)
            .arg("--credential-file")
            .arg(&creds)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        cmd
    };
    let holding_the_secret = || -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![temp.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                let meta = std::fs::symlink_metadata(&path).unwrap();
                if meta.is_dir() {
                    stack.push(path);
                } else if std::fs::read(&path)
                    .is_ok_and(|b| b.windows(secret.len()).any(|w| w == secret.as_bytes()))
                {
                    found.push(path);
                }
            }
        }
        found
    };
    let mut child = publish_to(port).spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while holding_the_secret().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the publication never wrote its credential copy"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the publication ended early"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // What a kill leaves: the private copy, still on disk.
    assert!(!holding_the_secret().is_empty());

    // The next publication (to a port nobody listens on: it fails) sweeps it first.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let status = publish_to(closed_port).status().unwrap();
    assert!(!status.success());
    assert_eq!(holding_the_secret(), Vec::<std::path::PathBuf>::new());
    let left: Vec<_> = std::fs::read_dir(&temp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Unblock the listener thread (its accepted connections close with it).
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    drop(held.join());
}

/// review accept → publish: only an accepted candidate is published, as one commit on a new
/// branch of a real bare remote whose tree is the baseline plus the candidate, with the
/// recorded id; a second publish and a taken branch name are refused; the user's repository
/// is untouched.
#[test]
fn cli_publish_lands_an_accepted_candidate_once_on_a_new_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let store = tmp.path().join("candidates");
    let (repo, commit) = main_repo(&[("README.md", "hello\n"), ("src/app.py", "print('app')\n")]);
    let remote = tmp.path().join("remote.git");
    bare_clone(repo.path(), &remote);
    // The user's repository: its head, its working tree and its refs.
    let repo_state = || {
        (
            git_out(repo.path(), &["rev-parse", "HEAD"]),
            git_out(repo.path(), &["status", "--porcelain", "--ignored"]),
            git_out(repo.path(), &["for-each-ref"]),
        )
    };
    let before = repo_state();
    let publish_as =
        |digest: &str, branch: &str| publish(&state, &store, repo.path(), &remote, digest, branch);

    let digest = stored_at(&store, &[], "print('new')\n", &commit);
    let out = publish_as(&digest, "candidate/one");
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_NOT_ACCEPTED");

    let out = review(&state, &store, &["accept", &digest]);
    assert_ok(&out);
    let out = publish_as(&digest, "candidate/one");
    assert_ok(&out);
    let record = json_of(&out);
    let id = record["commit_id"].as_str().unwrap().to_owned();
    assert_published_new_py(&remote, "candidate/one", &id, &commit);

    // The publication joined the review history; a second publish is refused.
    let out = review(&state, &store, &["show", &digest]);
    let doc = json_of(&out);
    assert_eq!(doc["publication"]["commit_id"], id.as_str());
    let out = publish_as(&digest, "candidate/two");
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_PUBLISHED");

    // Another accepted candidate cannot take the branch.
    let other = stored_at(&store, &[], "print('other')\n", &commit);
    assert!(review(&state, &store, &["accept", &other]).status.success());
    let out = publish_as(&other, "candidate/one");
    assert_eq!(code(&out), "PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS");
    assert_eq!(
        git_out(&remote, &["rev-parse", "refs/heads/candidate/one"]),
        id
    );

    assert_eq!(before, repo_state(), "the user's repository changed");
}

/// Commits `files` onto `parent` in the bare `remote` through a scratch clone and moves `main`.
fn push_main(tmp: &Path, remote: &Path, name: &str, files: &[(&str, &str)]) -> String {
    git_out(tmp, &["clone", "-q", remote.to_str().unwrap(), name]);
    let work = tmp.join(name);
    for (path, text) in files {
        std::fs::write(work.join(path), text).unwrap();
    }
    git_out(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", name]);
    git_out(&work, &["push", "-q", "origin", "HEAD:main"]);
    git_out(&work, &["rev-parse", "HEAD"])
}

/// `publish --rebase` onto a moved base re-runs the required gate in its sealed container on
/// exactly the merged tree: a base that broke the tests is refused with
/// `PATCH_CANDIDATE_PUBLISH_REGATE_FAILED` and no branch; without `--rebase` the moved base is
/// refused; once the base is fixed the merge is published, its parent the moved tip and its
/// tree the tip plus the candidate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cli_publish_rebase_regates_the_merged_tree() {
    let Some(_docker) = crate::support::docker().await else {
        return;
    };
    let Some(image) = crate::gates::python_image() else {
        return;
    };
    let _guard = crate::support::docker_lock().lock().await;
    use crate::gates::{CALC, TESTS};
    // `mul` adds: test_mul fails.
    const BROKEN: &str = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n";
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let store = tmp.path().join("candidates");
    let (repo, commit) = main_repo(&[
        ("calc.py", CALC),
        ("test_calc.py", TESTS),
        ("pytest.ini", "[pytest]\n"),
    ]);
    let remote = tmp.path().join("remote.git");
    bare_clone(repo.path(), &remote);
    let gates = tmp.path().join("gates.toml");
    std::fs::write(&gates, crate::gates::definitions_text(&image, 60, "")).unwrap();

    let digest = stored_at(&store, &["pytest"], "print('new')\n", &commit);
    let out = review(
        &state,
        &store,
        &["accept", &digest, "--force", "--reason", "gated on publish"],
    );
    assert_ok(&out);
    let broken = push_main(tmp.path(), &remote, "broken", &[("calc.py", BROKEN)]);

    let publish_rebase = |branch: &str, rebase: bool| {
        let mut cmd = publish_cmd(
            &state,
            &store,
            repo.path(),
            remote.as_os_str(),
            &digest,
            branch,
        );
        if rebase {
            cmd.arg("--rebase").arg("--gates").arg(&gates);
        }
        cmd.output().unwrap()
    };
    let out = publish_rebase("c/rebased", false);
    assert_eq!(code(&out), "PATCH_CANDIDATE_PUBLISH_BASE_MOVED");
    let out = publish_rebase("c/rebased", true);
    assert_eq!(
        code(&out),
        "PATCH_CANDIDATE_PUBLISH_REGATE_FAILED",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("gate pytest: failed"));
    assert!(git_out(&remote, &["for-each-ref", "refs/heads/c/rebased"]).is_empty());

    let fixed = push_main(
        tmp.path(),
        &remote,
        "fixed",
        &[("calc.py", CALC), ("README", "x\n")],
    );
    assert_ne!(fixed, broken);
    let out = publish_rebase("c/rebased", true);
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("gate pytest: passed"));
    let record = json_of(&out);
    assert_eq!(record["rebased"], true);
    let id = record["commit_id"].as_str().unwrap().to_owned();
    assert_eq!(git_out(&remote, &["rev-parse", "refs/heads/c/rebased"]), id);
    assert_eq!(git_out(&remote, &["rev-parse", &format!("{id}^")]), fixed);
    assert_eq!(
        git_out(&remote, &["ls-tree", "-r", "--name-only", &id]),
        "README\ncalc.py\npytest.ini\nsrc/new.py\ntest_calc.py"
    );
    crate::support::tally("docker_cli_publish_rebase_regates_the_merged_tree");
}

/// A self-digested "passed" evidence document for `digest`, claiming gate `gate` with
/// `definition_digest`.
fn planted(digest: &str, gate: &str, definition_digest: Sha256) -> (String, Vec<u8>) {
    let digest: Sha256 = digest.parse().unwrap();
    let evidence = gate::GateEvidence {
        schema: gate::EVIDENCE_SCHEMA.to_owned(),
        subject: gate::EvidenceSubject::Candidate,
        candidate_digest: Some(digest),
        baseline_commit_sha: "c".repeat(40),
        gate: gate.to_owned(),
        definition_digest,
        image_id: format!("sha256:{}", "ab".repeat(32)),
        runtime: "default".to_owned(),
        outcome: vocab::GateVerdict::Passed,
        code: None,
        exit: Some(gate_runner::ExitStatus::Code(0)),
        wall_ms: 1,
        tree: None,
        tests: None,
        failing: gate::IdList::default(),
        passing: None,
        comparison: None,
        pinned_changed: Vec::new(),
        log: gate::LogTail::empty(),
        baseline_evidence_digest: None,
    };
    let (bytes, _) = evidence.to_file_bytes().unwrap();
    (gate::evidence_file_name(&digest, gate), bytes)
}

/// Local gate evidence counts only where the host wrote it (the candidate store, or a folder
/// named with `--evidence-dir`) and only for the gate whose definition digest it carries in
/// the operator's `--gates` file: a planted, self-digested "passed" file next to a candidate
/// file, or one naming a gate it was not run for, satisfies nothing.
#[test]
fn cli_review_trusts_only_host_written_evidence_matched_by_definition_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("candidates");
    let digest = stored(&store, &["pytest"], "print('a')\n");
    let image = format!("sha256:{}", "ab".repeat(32));
    let gates_file = tmp.path().join("gates.toml");
    let text = format!(
        "{}\n{}",
        crate::gates::definitions_text(&image, 60, ""),
        crate::gates::definitions_text(&image, 60, "")
            .replace("version = 1\n", "")
            .replace("[gates.pytest", "[gates.lint")
    );
    std::fs::write(&gates_file, &text).unwrap();
    let defs = gate::GateDefinitions::parse(text.as_bytes()).unwrap();
    let pytest = *defs.get("pytest").unwrap().digest();
    let lint = *defs.get("lint").unwrap().digest();
    let gates_arg = gates_file.to_str().unwrap();

    // A candidate file in a folder an agent could write, with a planted evidence file for the
    // right gate and definition next to it.
    let loose = tmp.path().join("loose");
    std::fs::create_dir(&loose).unwrap();
    let cand_file = loose.join("candidate.json");
    std::fs::copy(
        store.join(format!("{}.json", digest.trim_start_matches("sha256:"))),
        &cand_file,
    )
    .unwrap();
    let (name, bytes) = planted(&digest, "pytest", pytest);
    std::fs::write(loose.join(&name), &bytes).unwrap();
    let file_arg = cand_file.to_str().unwrap();
    let state = tmp.path().join("state-1");
    for extra in [&[][..], &["--gates", gates_arg][..]] {
        let mut args = vec!["accept", file_arg, "--digest", &digest];
        args.extend_from_slice(extra);
        let out = review(&state, &store, &args);
        assert_eq!(
            code(&out),
            "PATCH_CANDIDATE_REVIEW_GATES_UNMET",
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    // In a folder the operator names, evidence counts for the gate its definition digest
    // names, whatever its own `gate` field says.
    let named = tmp.path().join("named");
    std::fs::create_dir(&named).unwrap();
    let (name, bytes) = planted(&digest, "pytest", lint);
    std::fs::write(named.join(&name), &bytes).unwrap();
    let named_arg = named.to_str().unwrap();
    let show = review(
        &state,
        &store,
        &[
            "show",
            &digest,
            "--gates",
            gates_arg,
            "--evidence-dir",
            named_arg,
        ],
    );
    let doc = json_of(&show);
    let gates = doc["gates"].as_array().unwrap();
    let outcome = |g: &str| {
        gates
            .iter()
            .find(|v| v["gate"] == g)
            .map(|v| v["outcome"].as_str().unwrap().to_owned())
    };
    assert_eq!(outcome("pytest").as_deref(), Some("missing"), "{doc}");
    assert_eq!(outcome("lint").as_deref(), Some("passed"), "{doc}");
    let out = review(
        &state,
        &store,
        &[
            "accept",
            &digest,
            "--gates",
            gates_arg,
            "--evidence-dir",
            named_arg,
        ],
    );
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_GATES_UNMET");
    // A definition digest the operator's file does not hold counts for nothing.
    let (name, bytes) = planted(&digest, "pytest", Sha256::of(b"another definition"));
    std::fs::write(store.join(&name), &bytes).unwrap();
    let out = review(&state, &store, &["accept", &digest, "--gates", gates_arg]);
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_GATES_UNMET");

    // In the candidate store, for the gate's own definition: accepted, with --gates only.
    let (name, bytes) = planted(&digest, "pytest", pytest);
    std::fs::write(store.join(&name), &bytes).unwrap();
    let out = review(&state, &store, &["accept", &digest]);
    assert_eq!(code(&out), "PATCH_CANDIDATE_REVIEW_GATES_UNMET");
    let out = review(&state, &store, &["accept", &digest, "--gates", gates_arg]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = json_of(&out);
    assert_eq!(v["decision"]["forced"], false);
}
