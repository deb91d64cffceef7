use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use pretty_assertions::assert_eq;
use vocab::FailureClass;

use super::*;

use crate::outfile::tests::names;
use crate::test_git::git;

/// A fresh repository: two editable sources, a secret-named file, a symlink, a committed
/// executable, a test file and a README; returns (dir, HEAD).
fn repo() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    git(root, &["init", "-q", "."]);
    std::fs::create_dir(root.join("src")).unwrap();
    std::fs::create_dir(root.join("tests")).unwrap();
    std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
    std::fs::write(root.join("src/b.rs"), "fn b() {}\n").unwrap();
    std::fs::write(root.join("src/api_token.txt"), "x\n").unwrap();
    std::os::unix::fs::symlink("a.rs", root.join("src/link.rs")).unwrap();
    std::fs::write(root.join("src/run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        root.join("src/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(root.join("tests/t.rs"), "#[test] fn t() {}\n").unwrap();
    std::fs::write(root.join("README.md"), "# r\n").unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "one"]);
    let head = git(root, &["rev-parse", "HEAD"]);
    (dir, head)
}

fn args(repo: &Path) -> ApproveArgs {
    ApproveArgs {
        repo: repo.to_owned(),
        commit: "HEAD".to_owned(),
        allow: vec!["src/".to_owned()],
        read_only: vec!["tests".to_owned()],
        prohibit: Vec::new(),
        create: vec!["src/new.rs".to_owned()],
        delete: vec!["src/b.rs".to_owned()],
        task: "Add new.rs and drop b.rs.".to_owned(),
        plan_id: Some("plan-1".to_owned()),
        request_id: None,
        app_id: None,
        repository_full_name: None,
        out: None,
        force: false,
        gate: Vec::new(),
        gates: None,
    }
}

#[test]
fn an_approval_binds_the_commit_its_snapshot_and_the_grants() {
    let (dir, head) = repo();
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("approval.json");
    let mut a = args(dir.path());
    a.out = Some(out.clone());
    let outcome = run(&a).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(names(out_dir.path()), ["approval.json"]);
    let context = ApprovedExecutionContext::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(context.baseline_commit_sha(), head);
    assert_eq!(context.raw_request(), "Add new.rs and drop b.rs.");
    assert_eq!(context.plan_id(), "plan-1");
    assert!(context.request_id().starts_with("request-"));
    assert!(context.app_id().starts_with("app-"));
    assert!(context.handoff_id().starts_with("handoff-"));
    let name = format!(
        "local/{}",
        dir.path().file_name().unwrap().to_string_lossy()
    );
    assert_eq!(context.repository_full_name(), name);
    let snap = GitSnapshot::load(dir.path(), &head).unwrap();
    assert_eq!(
        context.snapshot_digest(),
        snap.snapshot_digest(&name).to_string()
    );
    assert_eq!(context.allowed_paths(), ["src", "tests"]);
    assert_eq!(context.read_only_paths(), ["tests"]);
    let strs = |v: &[RepoPath]| v.iter().map(|p| p.as_str().to_owned()).collect::<Vec<_>>();
    assert_eq!(strs(context.create_paths()), ["src/new.rs"]);
    assert_eq!(strs(context.delete_paths()), ["src/b.rs"]);
    assert_eq!(context.approved_plan_digest().len(), 64);
    // The --json document says what was granted.
    assert_eq!(
        outcome.json["editable_paths"],
        serde_json::json!(["src/a.rs", "src/b.rs"])
    );
    assert_eq!(
        outcome.json["read_only_paths"],
        serde_json::json!(["tests/t.rs"])
    );
    // … and what inside the scopes will not be editable, with why.
    assert_eq!(
        outcome.json["not_editable"],
        serde_json::json!([
            {"path": "src/api_token.txt", "reason": "secret-sensitive name (never sent)"},
            {"path": "src/link.rs", "reason": "symlink (120000)"},
            {"path": "src/run.sh", "reason": "committed executable (100755)"},
        ])
    );
    assert_eq!(outcome.json["not_editable_count"], 3);
    assert_eq!(
        outcome.json["generated"],
        serde_json::json!(["request_id", "app_id", "handoff_id", "build_registry_id"])
    );
}

#[test]
fn without_out_the_approval_is_the_output_and_round_trips() {
    let (dir, head) = repo();
    let mut a = args(dir.path());
    a.commit = head[..12].to_owned();
    let outcome = run(&a).unwrap();
    let context = ApprovedExecutionContext::from_json(&outcome.text).unwrap();
    assert_eq!(context.baseline_commit_sha(), head);
    assert_eq!(serde_json::to_value(&context).unwrap(), outcome.json);
    assert!(outcome.text.ends_with("}\n"));
}

#[test]
fn the_summary_lists_grants_and_why_in_scope_entries_are_excluded() {
    let (dir, head) = repo();
    let snap = GitSnapshot::load(dir.path(), &head).unwrap();
    let a = args(dir.path());
    let grants = Grants::check(&a.grant_input(), &snap).unwrap();
    let policy = DefaultPathGuard::default();
    let excluded = not_editable(&snap, &grants, &policy);
    assert_eq!(
        excluded,
        [
            (
                "src/api_token.txt".to_owned(),
                Some("secret-sensitive name (never sent)")
            ),
            ("src/link.rs".to_owned(), Some("symlink (120000)")),
            (
                "src/run.sh".to_owned(),
                Some("committed executable (100755)")
            ),
        ]
    );
    let context = snapshot::context_from_value(serde_json::json!({
        "handoff_id": "h\u{1b}[2K", "request_id": "r", "plan_id": "p", "app_id": "a",
        "build_registry_id": "b", "repository_full_name": "o/\u{202e}n",
        "baseline_commit_sha": head, "raw_request": "t", "request_type": "change",
        "approved_plan_digest": "0".repeat(64), "snapshot_digest": "s",
        "graph_identity_digest": "g", "impact_report_digest": "i",
        "execution_strategy_id": "e", "rationale": "r", "allowed_paths": ["src"],
    }))
    .unwrap();
    let editable = vec![RepoPath::parse("src/a.rs").unwrap()];
    let text = summary(
        &context,
        &editable,
        &[],
        &excluded,
        &[("app_id", "app-\u{1b}]0;x\u{7}".to_owned())],
    );
    assert!(text.contains("editable (1):\n  src/a.rs\n"), "{text}");
    assert!(
        text.contains("not editable inside the scopes (3):\n"),
        "{text}"
    );
    assert!(
        text.contains("  src/link.rs  [symlink (120000)]\n"),
        "{text}"
    );
    assert!(
        text.contains("  src/run.sh  [committed executable (100755)]\n"),
        "{text}"
    );
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!text.contains(c), "{text}");
    }
}

/// The list of entries that will not be editable is bounded (the rest counted), and hostile or
/// non-UTF-8 names are escaped.
#[test]
fn the_not_editable_list_is_bounded_and_escaped() {
    let excluded: Vec<(String, Option<&'static str>)> = (0..60)
        .map(|i| {
            (
                format!("src/x{i:02}.sh"),
                Some("committed executable (100755)"),
            )
        })
        .chain([(
            "src/\u{1b}[2J\u{202e}\u{fffd}.sh".to_owned(),
            Some("committed executable (100755)"),
        )])
        .collect();
    let mut text = String::new();
    list_bounded(
        &mut text,
        NOT_EDITABLE_TITLE,
        &excluded,
        MAX_NOT_EDITABLE_LISTED,
    );
    assert!(
        text.starts_with("not editable inside the scopes (61):\n"),
        "{text}"
    );
    assert!(
        text.contains("  src/x49.sh  [committed executable (100755)]\n"),
        "{text}"
    );
    assert!(!text.contains("src/x50.sh"), "{text}");
    assert!(text.ends_with("  … and 11 more\n"), "{text}");
    assert_eq!(not_editable_json(&excluded).as_array().unwrap().len(), 50);
    let mut text = String::new();
    list_bounded(
        &mut text,
        NOT_EDITABLE_TITLE,
        &excluded[60..],
        MAX_NOT_EDITABLE_LISTED,
    );
    for c in ['\u{1b}', '\u{202e}'] {
        assert!(!text.contains(c), "{text}");
    }
}

/// Each bad input fails with its stable code and class, names the flag, and writes nothing.
#[test]
fn bad_input_fails_early_with_a_code_naming_the_flag_and_writes_nothing() {
    let (dir, _) = repo();
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("approval.json");
    type Edit = Box<dyn Fn(&mut ApproveArgs)>;
    let cases: Vec<(&str, Edit, &str, &str)> = vec![
        (
            "unknown allow",
            Box::new(|a| a.allow = vec!["nope/".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--allow",
        ),
        (
            "unsafe allow",
            Box::new(|a| a.allow = vec!["../src".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--allow",
        ),
        (
            "repaired allow",
            Box::new(|a| a.allow = vec!["./src".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--allow",
        ),
        (
            "unknown read-only",
            Box::new(|a| a.read_only = vec!["Tests".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--read-only",
        ),
        (
            "unknown prohibit",
            Box::new(|a| a.prohibit = vec!["gone".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--prohibit",
        ),
        (
            "create exists",
            Box::new(|a| a.create = vec!["src/a.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--create",
        ),
        (
            "create folded exists",
            Box::new(|a| a.create = vec!["SRC/A.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--create",
        ),
        (
            "create outside",
            Box::new(|a| a.create = vec!["docs/new.md".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--create",
        ),
        (
            "delete missing",
            Box::new(|a| a.delete = vec!["src/zz.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--delete",
        ),
        (
            "delete link",
            Box::new(|a| a.delete = vec!["src/link.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--delete",
        ),
        (
            "delete read-only",
            Box::new(|a| a.delete = vec!["tests/t.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_PATH",
            "--delete",
        ),
        (
            "allow = read-only",
            Box::new(|a| a.read_only = vec!["src".into()]),
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--read-only",
        ),
        (
            "allow inside prohibit",
            Box::new(|a| a.prohibit = vec!["SRC".into()]),
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--prohibit",
        ),
        (
            "read-only inside prohibit",
            Box::new(|a| {
                a.allow = vec!["src".into(), "tests".into()];
                a.read_only = vec!["tests/t.rs".into()];
                a.prohibit = vec!["tests".into()];
            }),
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--prohibit",
        ),
        (
            "create twice folded",
            Box::new(|a| a.create = vec!["src/n.rs".into(), "src/N.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--create",
        ),
        (
            "create under create",
            Box::new(|a| a.create = vec!["src/d".into(), "src/d/x.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--create",
        ),
        (
            "create = delete",
            Box::new(|a| a.create = vec!["src/B.rs".into()]),
            "PATCH_CANDIDATE_APPROVE_GRANTS",
            "--delete",
        ),
        (
            "no such commit",
            Box::new(|a| a.commit = "no-such-branch".into()),
            "PATCH_CANDIDATE_APPROVE_COMMIT",
            "--commit",
        ),
        (
            "zero commit",
            Box::new(|a| a.commit = "0".repeat(40)),
            "PATCH_CANDIDATE_APPROVE_COMMIT",
            "--commit",
        ),
        (
            "option commit",
            Box::new(|a| a.commit = "--all".into()),
            "PATCH_CANDIDATE_APPROVE_COMMIT",
            "--commit",
        ),
        (
            "empty task",
            Box::new(|a| a.task.clear()),
            "PATCH_CANDIDATE_APPROVE_VALUE",
            "--task",
        ),
        (
            "empty app id",
            Box::new(|a| a.app_id = Some(String::new())),
            "PATCH_CANDIDATE_APPROVE_VALUE",
            "--app-id",
        ),
    ];
    for (what, edit, code, flag) in cases {
        let mut a = args(dir.path());
        a.out = Some(out.clone());
        edit(&mut a);
        let err = run(&a).unwrap_err();
        assert_eq!(
            (err.code, err.class),
            (code, FailureClass::Usage),
            "{what}: {}",
            err.message()
        );
        assert!(err.message().contains(flag), "{what}: {}", err.message());
        assert!(names(out_dir.path()).is_empty(), "{what}");
    }
}

/// Checks `run` makes come from the same code, with the same codes.
#[test]
fn approval_checks_are_the_ones_run_makes() {
    let (dir, _) = repo();
    // A secret-named create passes the flag checks and fails the turn request's baseline check.
    let mut a = args(dir.path());
    a.create = vec!["src/server.pem".into()];
    let err = run(&a).unwrap_err();
    assert_eq!(
        err.code,
        "REPOSITORY_PATCH_SECRET_PATH",
        "{}",
        err.message()
    );
    // Nothing editable: the turn request's file budget.
    let mut a = args(dir.path());
    a.allow = vec!["src/link.rs".into()];
    a.create.clear();
    a.delete.clear();
    let err = run(&a).unwrap_err();
    assert_eq!(
        err.code,
        "REPOSITORY_DOCKER_FILE_BUDGET",
        "{}",
        err.message()
    );
}

#[test]
fn outputs_inside_the_repository_or_over_a_file_are_refused() {
    let (dir, _) = repo();
    let mut a = args(dir.path());
    a.out = Some(dir.path().join("src/approval.json"));
    let err = run(&a).unwrap_err();
    assert_eq!(err.code, "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY");
    assert!(err.message().contains("--out"));
    a.out = Some(dir.path().join(".git/approval.json"));
    let err = run(&a).unwrap_err();
    assert_eq!(err.code, "PATCH_CANDIDATE_OUTPUT_IN_REPOSITORY");
    assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");

    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("approval.json");
    std::fs::write(&out, "keep").unwrap();
    a.out = Some(out.clone());
    let err = run(&a).unwrap_err();
    assert_eq!(
        (err.code, err.class),
        ("PATCH_CANDIDATE_OUTPUT_EXISTS", FailureClass::Usage)
    );
    assert_eq!(std::fs::read(&out).unwrap(), b"keep");
    a.force = true;
    run(&a).unwrap();
    ApprovedExecutionContext::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(names(out_dir.path()), ["approval.json"]);
}

#[test]
fn a_dirty_work_tree_is_fine_the_commit_is_what_counts() {
    let (dir, head) = repo();
    std::fs::write(dir.path().join("src/a.rs"), "changed\n").unwrap();
    std::fs::write(dir.path().join("src/untracked.rs"), "u\n").unwrap();
    let outcome = run(&args(dir.path())).unwrap();
    let context = ApprovedExecutionContext::from_json(&outcome.text).unwrap();
    assert_eq!(context.baseline_commit_sha(), head);
    let snap = GitSnapshot::load(dir.path(), &head).unwrap();
    assert_eq!(
        context.snapshot_digest(),
        snap.snapshot_digest(context.repository_full_name())
            .to_string()
    );
}

#[test]
fn gates_are_recorded_and_an_unknown_gate_is_refused_first() {
    let (dir, _) = repo();
    let gates = dir.path().join("gates.toml");
    let image = format!("sha256:{}", "ab".repeat(32));
    std::fs::write(
        &gates,
        gate::init_definitions(gate::GateKind::Python, &image.parse().unwrap()),
    )
    .unwrap();
    let mut a = args(dir.path());
    a.gate = vec!["pytest".to_owned()];
    a.gates = Some(gates.clone());
    let out = run(&a).unwrap();
    assert_eq!(
        out.json["required_validation_gates"],
        serde_json::json!(["pytest"])
    );
    // Unknown to the definitions: refused with the gate code, before the repository is read.
    let mut bad = args(&dir.path().join("missing-repo-is-never-reached"));
    bad.repo = dir.path().to_owned();
    bad.gate = vec!["pytest".to_owned(), "lint".to_owned()];
    bad.gates = Some(gates);
    bad.allow = vec!["no/such/scope".to_owned()];
    assert_eq!(run(&bad).unwrap_err().code, "PATCH_CANDIDATE_GATE_UNKNOWN");
    let mut badname = args(dir.path());
    badname.gate = vec!["Bad Name".to_owned()];
    assert_eq!(
        run(&badname).unwrap_err().code,
        "PATCH_CANDIDATE_GATE_DEFINITION"
    );
}

#[test]
fn a_read_only_test_suite_is_bounded_with_the_files_a_turn_stages() {
    let (dir, _) = repo();
    let root = dir.path();
    // 45 read-only files are within the limit; with src/'s 2 editable files and a create, 48
    // files are staged (at most 50).
    for i in 1..45 {
        std::fs::write(
            root.join(format!("tests/t{i:02}.rs")),
            "#[test] fn t() {}\n",
        )
        .unwrap();
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "tests"]);
    let out_dir = tempfile::tempdir().unwrap();
    // `--read-only tests` is inside the approved scope too (the approval's allowed paths are the
    // --allow and --read-only scopes): the agent and its commands see the suite, never change it.
    let mut a = args(root);
    a.out = Some(out_dir.path().join("ok.json"));
    let ok = run(&a).unwrap();
    let read_only = ok.json["read_only_paths"].as_array().unwrap();
    assert_eq!(read_only.len(), 45);
    let editable = ok.json["editable_paths"].as_array().unwrap();
    assert!(
        !editable.iter().any(|p| read_only.contains(p)),
        "{editable:?}"
    );
    assert_eq!(
        ok.json["approval"]["allowed_paths"],
        serde_json::json!(["src", "tests"])
    );
    // One more is over the read-only limit: refused before anything is written.
    std::fs::write(root.join("tests/t45.rs"), "#[test] fn t() {}\n").unwrap();
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "one more"]);
    a.out = Some(out_dir.path().join("over.json"));
    let e = run(&a).unwrap_err();
    assert_eq!(e.code, "REPOSITORY_PATCH_SELECTION");
    assert!(!out_dir.path().join("over.json").exists());
    // Back to 45 read-only files, but 4 more editable ones: 6 editable, 1 create and 45
    // read-only are more than the 50 files a turn stages.
    git(root, &["rm", "-q", "tests/t45.rs"]);
    for name in ["c", "d", "e", "f"] {
        std::fs::write(root.join(format!("src/{name}.rs")), "fn x() {}\n").unwrap();
    }
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "more sources"]);
    let e = run(&a).unwrap_err();
    assert_eq!(e.code, "REPOSITORY_PATCH_SELECTION");
    assert!(format!("{e:?}").contains("together exceed the 50"), "{e:?}");
    assert!(!out_dir.path().join("over.json").exists());
}
