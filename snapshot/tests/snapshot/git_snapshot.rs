//! Git snapshots of real repositories built with `git` in temporary directories.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use serde_json::json;
use snapshot::{
    BaselineFiles, CreateAbsence, DefaultPathGuard, EntryKind, GitSnapshot, RepoPath,
    RepositorySnapshotEvidence, verify_selected_baseline,
};
use vocab::Sha256;

use crate::support::{TempRepo, context_with, p};

const NAME: &str = "acme/support";

fn load(repo: &TempRepo, commit: &str) -> GitSnapshot {
    GitSnapshot::load(repo.path(), commit).unwrap()
}

fn kinds(snap: &GitSnapshot) -> BTreeMap<String, EntryKind> {
    snap.entries()
        .iter()
        .map(|e| {
            (
                e.path()
                    .map_or_else(|| format!("hex:{}", e.path_hex()), str::to_owned),
                e.kind(),
            )
        })
        .collect()
}

/// A repository holding one entry of every kind.
fn hostile_repo() -> (TempRepo, String) {
    let repo = TempRepo::new();
    repo.write("README.md", b"# readme\n");
    repo.write("src/lib.rs", "pub fn straße() {}\n".as_bytes());
    repo.write("docs/Straße.md", "ß\n".as_bytes());
    repo.write("empty.txt", b"");
    repo.write("Twin.txt", b"upper\n");
    repo.write("twin.txt", b"lower\n");
    repo.write("Guide", b"a file named like a directory\n");
    repo.write("guide/intro.md", b"intro\n");
    repo.write("latin1.txt", b"caf\xe9\n");
    repo.write(std::ffi::OsStr::from_bytes(b"raw\xffname.txt"), b"x\n");
    repo.write("CON.txt", b"device\n");
    repo.write("colon:name.txt", b"colon\n");
    repo.write("cafe\u{301}.txt", b"decomposed\n");
    let script = repo.write("run.sh", b"#!/bin/sh\necho hi\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", repo.path().join("link.rs")).unwrap();
    repo.git(["add", "-A"]);
    let gitlink = "1234567890abcdef1234567890abcdef12345678";
    repo.git([
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{gitlink},vendor/sub"),
    ]);
    repo.git(["commit", "-q", "-m", "hostile"]);
    let head = repo.head();
    (repo, head)
}

#[test]
fn manifest_holds_exactly_the_regular_utf8_files_with_git_blob_hashes() {
    let (repo, head) = hostile_repo();
    let snap = load(&repo, &head);
    let manifest: Vec<&str> = snap.manifest().keys().map(RepoPath::as_str).collect();
    assert_eq!(
        manifest,
        ["README.md", "docs/Straße.md", "empty.txt", "src/lib.rs"]
    );
    for (path, hash) in snap.manifest() {
        let bytes = repo.blob_bytes(&head, path.as_str());
        assert_eq!(*hash, Sha256::of(&bytes), "{path}");
    }
    let selected: Vec<RepoPath> = snap.manifest().keys().cloned().collect();
    let files = snap.read_files(&selected).unwrap();
    for (path, text) in &files {
        assert_eq!(
            text.as_bytes(),
            repo.blob_bytes(&head, path.as_str()),
            "{path}"
        );
    }
    assert_eq!(files.len(), 4);
    assert_eq!(snap.commit(), head);
}

#[test]
fn every_other_entry_is_typed_excluded_evidence() {
    let (repo, head) = hostile_repo();
    let snap = load(&repo, &head);
    let want: BTreeMap<String, EntryKind> = [
        ("CON.txt", EntryKind::NonPortablePath),
        ("Guide", EntryKind::CaseFoldCollision),
        ("README.md", EntryKind::File),
        ("Twin.txt", EntryKind::CaseFoldCollision),
        ("cafe\u{301}.txt", EntryKind::NonPortablePath),
        ("colon:name.txt", EntryKind::NonPortablePath),
        ("docs/Straße.md", EntryKind::File),
        ("empty.txt", EntryKind::File),
        ("guide/intro.md", EntryKind::CaseFoldCollision),
        ("hex:726177ff6e616d652e747874", EntryKind::NonUtf8Path),
        ("latin1.txt", EntryKind::NonUtf8Content),
        ("link.rs", EntryKind::Symlink),
        ("run.sh", EntryKind::Executable),
        ("src/lib.rs", EntryKind::File),
        ("twin.txt", EntryKind::CaseFoldCollision),
        ("vendor/sub", EntryKind::Submodule),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(kinds(&snap), want);
    let excluded: Vec<_> = snap.excluded().collect();
    assert_eq!(excluded.len(), 12);
    // Asked by path (also through the `CreateAbsence` view a finaliser holds): the excluded kind,
    // never a manifest file or a path the tree does not hold.
    let absence: &dyn CreateAbsence = &snap;
    for (path, kind) in [
        ("run.sh", Some(EntryKind::Executable)),
        ("link.rs", Some(EntryKind::Symlink)),
        ("vendor/sub", Some(EntryKind::Submodule)),
        ("src/lib.rs", None),
        ("nothing.txt", None),
        ("vendor", None),
    ] {
        assert_eq!(snap.excluded_kind(path), kind, "{path}");
        assert_eq!(
            absence.excluded_reason(path),
            kind.map(EntryKind::reason),
            "{path}"
        );
    }
    assert_eq!(
        EntryKind::Executable.reason(),
        "committed executable (100755)"
    );
    let sub = excluded
        .iter()
        .find(|e| e.kind() == EntryKind::Submodule)
        .unwrap();
    assert_eq!(
        (sub.mode(), sub.size(), sub.content_sha256()),
        ("160000", None, None)
    );
    assert_eq!(sub.object_id(), "1234567890abcdef1234567890abcdef12345678");
    let link = excluded
        .iter()
        .find(|e| e.kind() == EntryKind::Symlink)
        .unwrap();
    assert_eq!(link.content_sha256(), Some(Sha256::of(b"src/lib.rs")));
    assert_eq!(link.mode(), "120000");
    let raw = excluded
        .iter()
        .find(|e| e.kind() == EntryKind::NonUtf8Path)
        .unwrap();
    assert_eq!(
        (raw.path(), raw.raw_path()),
        (None, b"raw\xffname.txt".as_slice())
    );
    // The JSON form of an excluded entry (as the CLI prints it).
    assert_eq!(
        serde_json::to_value(raw).unwrap(),
        json!({
            "content_sha256": Sha256::of(b"x\n").to_string(),
            "kind": "non_utf8_path",
            "mode": "100644",
            "object_id": raw.object_id(),
            "path": null,
            "path_hex": "726177ff6e616d652e747874",
            "size": 2,
        })
    );
    // Every excluded path is refused by read_files.
    for path in ["Twin.txt", "latin1.txt", "link.rs", "run.sh", "nope.txt"] {
        let err = snap.read_files(&[p(path)]).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_SNAPSHOT_PATH", "{path}");
    }
}

#[test]
fn deep_and_wide_trees_load_completely() {
    let repo = TempRepo::new();
    let deep: Vec<String> = (0..60).map(|i| format!("d{i}")).collect();
    let deep_path = format!("{}/leaf.txt", deep.join("/"));
    repo.write(&deep_path, b"deep\n");
    for i in 0..300 {
        repo.write(
            format!("wide/{:03}/f.txt", i % 17).replace("/f.txt", &format!("/f{i}.txt")),
            format!("{i}\n").as_bytes(),
        );
    }
    let head = repo.commit("deep");
    let snap = load(&repo, &head);
    assert_eq!(snap.manifest().len(), 301);
    assert_eq!(snap.manifest()[&p(&deep_path)], Sha256::of(b"deep\n"));
    let listed = repo.git(["ls-tree", "-r", "-z", "--name-only", &head]);
    assert_eq!(
        listed.split(|b| *b == 0).filter(|r| !r.is_empty()).count(),
        snap.entries().len()
    );
}

#[test]
fn the_digest_is_stable_and_bound_to_every_tree_entry() {
    let (repo, head) = hostile_repo();
    let first = load(&repo, &head).snapshot_digest(NAME);
    assert_eq!(
        load(&repo, &head).snapshot_digest(NAME),
        first,
        "stable across loads"
    );
    assert_ne!(
        load(&repo, &head).snapshot_digest("acme/other"),
        first,
        "bound to the identity"
    );

    // The same commit in a bare clone has the same digest.
    let bare = tempfile::tempdir().unwrap();
    let out = repo
        .command()
        .args(["clone", "-q", "--bare", "--no-local", "."])
        .arg(bare.path().join("copy.git"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let cloned = GitSnapshot::load(&bare.path().join("copy.git"), &head).unwrap();
    assert_eq!(cloned.snapshot_digest(NAME), first);

    let mut seen = vec![first];
    let mut change = |edit: &dyn Fn(&TempRepo)| {
        edit(&repo);
        let commit = repo.commit("change");
        let digest = load(&repo, &commit).snapshot_digest(NAME);
        assert!(!seen.contains(&digest), "digest must change");
        seen.push(digest);
    };
    change(&|r| {
        r.write("README.md", b"# readme!\n");
    });
    change(&|r| {
        // Content of an excluded entry.
        r.write("latin1.txt", b"caf\xe9!\n");
    });
    change(&|r| {
        std::fs::set_permissions(
            r.path().join("empty.txt"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    });
    change(&|r| {
        std::fs::remove_file(r.path().join("link.rs")).unwrap();
        std::os::unix::fs::symlink("README.md", r.path().join("link.rs")).unwrap();
    });
    change(&|r| {
        r.git([
            "update-index",
            "--add",
            "--cacheinfo",
            "160000,fedcba0987654321fedcba0987654321fedcba09,vendor/sub",
        ]);
    });
    change(&|r| {
        r.git(["mv", "src/lib.rs", "src/Lib.rs"]);
    });
    change(&|r| {
        r.write("new/empty.txt", b"");
    });
}

#[test]
fn a_dirty_worktree_and_index_do_not_change_the_snapshot() {
    let (repo, head) = hostile_repo();
    let before = load(&repo, &head);
    repo.write("README.md", b"dirty worktree\n");
    repo.write("staged.txt", b"staged\n");
    repo.git(["add", "staged.txt"]);
    repo.write("untracked.txt", b"untracked\n");
    std::fs::remove_file(repo.path().join("src/lib.rs")).unwrap();
    let after = load(&repo, &head);
    assert_eq!(after.snapshot_digest(NAME), before.snapshot_digest(NAME));
    assert_eq!(after.manifest(), before.manifest());
    let files = after
        .read_files(&[p("README.md"), p("src/lib.rs")])
        .unwrap();
    assert_eq!(files[&p("README.md")], "# readme\n");
    assert_eq!(files[&p("src/lib.rs")], "pub fn straße() {}\n");
}

#[test]
fn replace_refs_cannot_redirect_the_snapshot() {
    let repo = TempRepo::new();
    repo.write("a.txt", b"original\n");
    let head = repo.commit("one");
    let original = repo.git_text(["rev-parse", &format!("{head}:a.txt")]);
    let forged = String::from_utf8(
        repo.command()
            .args(["hash-object", "-w", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write as _;
                c.stdin.take().unwrap().write_all(b"forged\n")?;
                c.wait_with_output()
            })
            .unwrap()
            .stdout,
    )
    .unwrap();
    repo.git(["replace", &original, forged.trim()]);
    // Plain git now shows the forged bytes …
    assert_eq!(repo.blob_bytes(&head, "a.txt"), b"forged\n");
    // … the snapshot does not.
    let snap = load(&repo, &head);
    assert_eq!(snap.manifest()[&p("a.txt")], Sha256::of(b"original\n"));
    assert_eq!(
        snap.read_files(&[p("a.txt")]).unwrap()[&p("a.txt")],
        "original\n"
    );
}

#[test]
fn an_independent_python_implementation_recomputes_the_digest() {
    let (repo, head) = hostile_repo();
    let snap = load(&repo, &head);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshot/recompute_digest.py");
    let stdout = snapshot::testkit::stdout_of(
        Command::new("python3")
            .arg(script)
            .arg(repo.path())
            .arg(&head)
            .arg(NAME),
    );
    let text = String::from_utf8(stdout).unwrap();
    let mut lines = text.lines();
    let digest = lines.next().unwrap();
    let document = lines.next().unwrap();
    assert_eq!(
        document.as_bytes(),
        snap.canonical_document(NAME).unwrap().as_slice()
    );
    assert_eq!(digest, snap.snapshot_digest(NAME).to_string());
    assert_eq!(Sha256::of(document.as_bytes()), snap.snapshot_digest(NAME));
}

#[test]
fn absence_proofs_cover_every_collision_kind() {
    let (repo, head) = hostile_repo();
    let snap = load(&repo, &head);
    let cases = [
        ("README.md", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("readme.MD", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("docs/STRASSE.md", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("link.rs", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("Run.sh", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("LATIN1.txt", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("vendor/sub", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("README.md/child.md", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("Readme.md/deeper/child.md", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("vendor/sub/file.rs", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("link.rs/x", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("src", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("SRC", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("vendor", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("DOCS", "REPOSITORY_PATCH_CREATE_PROOF"),
    ];
    for (path, want) in cases {
        let err = snap.prove_absent(&p(path)).unwrap_err();
        assert_eq!(err.code(), want, "{path}");
    }
    for absent in [
        "src/new.rs",
        "docs/new/deeper.md",
        "NEW.md",
        "vendor/other",
        "srcs",
        "README.md.bak",
    ] {
        snap.prove_absent(&p(absent)).unwrap();
    }
    // Entries the manifest excludes for their name still occupy the tree: the decomposed
    // spelling collides with the composed one (NFC before case folding).
    let err = snap.prove_absent(&p("CAF\u{c9}.txt")).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_CREATE_EXISTS");
}

#[test]
fn create_grants_verify_end_to_end_against_the_snapshot() {
    let (repo, head) = hostile_repo();
    let snap = load(&repo, &head);
    let evidence = snap.evidence("plan-1", "request-1", "app-1", NAME).unwrap();
    let ctx_for = |create: &str| {
        context_with(|m| {
            m.insert("baseline_commit_sha".into(), json!(head));
            m.insert("snapshot_digest".into(), json!(evidence.snapshot_digest()));
            m.insert("allowed_paths".into(), json!(["src", "vendor", "docs"]));
            m.insert("create_paths".into(), json!([create]));
        })
    };
    let selected = [p("src/lib.rs")];
    let baseline: BaselineFiles = snap.read_files(&selected).unwrap();
    let policy = DefaultPathGuard::default();
    let run = |create: &str| {
        verify_selected_baseline(
            &ctx_for(create),
            &evidence,
            &selected,
            &baseline,
            &policy,
            Some(&snap as &dyn CreateAbsence),
        )
    };
    let expected = run("src/new.rs").unwrap();
    assert_eq!(
        expected,
        [(p("src/lib.rs"), snap.manifest()[&p("src/lib.rs")])]
            .into_iter()
            .collect()
    );
    for (path, code) in [
        ("vendor/sub/x.rs", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("docs", "REPOSITORY_PATCH_CREATE_PROOF"),
        ("docs/straße.md", "REPOSITORY_PATCH_CREATE_EXISTS"),
        ("vendor/sub", "REPOSITORY_PATCH_CREATE_EXISTS"),
    ] {
        assert_eq!(run(path).unwrap_err().code(), code, "{path}");
    }
}

#[test]
fn evidence_carries_identity_digest_and_manifest() {
    let (repo, head) = hostile_repo();
    let snap = load(&repo, &head);
    let evidence = snap.evidence("plan-1", "request-1", "app-1", NAME).unwrap();
    assert_eq!(evidence.baseline_commit_sha(), head);
    assert_eq!(
        evidence.snapshot_digest(),
        snap.snapshot_digest(NAME).to_string()
    );
    assert_eq!(evidence.file_manifest(), snap.manifest());
    let text = serde_json::to_string(&evidence).unwrap();
    assert_eq!(
        RepositorySnapshotEvidence::from_json(&text).unwrap(),
        evidence
    );
    assert_eq!(
        snap.evidence("", "r", "a", NAME).unwrap_err().code(),
        "REPOSITORY_PATCH_SNAPSHOT_INVALID"
    );
}

#[test]
fn bad_commits_and_repositories_are_rejected_with_codes() {
    let repo = TempRepo::new();
    repo.write("a.txt", b"a\n");
    let head = repo.commit("one");
    let tree = repo.git_text(["rev-parse", &format!("{head}^{{tree}}")]);
    let blob = repo.git_text(["rev-parse", &format!("{head}:a.txt")]);
    repo.git(["tag", "-a", "-m", "annotated", "v1"]);
    let tag = repo.git_text(["rev-parse", "v1"]);
    let code = |path: &Path, commit: &str| GitSnapshot::load(path, commit).unwrap_err().code();
    for bad in [
        "HEAD",
        "main",
        &head[..12],
        &head.to_uppercase(),
        &format!("{head}0"),
        "--output=/tmp/x",
    ] {
        assert_eq!(
            code(repo.path(), bad),
            "REPOSITORY_SNAPSHOT_COMMIT",
            "{bad}"
        );
    }
    for not_commit in [&tree, &blob, &tag, &"0".repeat(40)] {
        assert_eq!(
            code(repo.path(), not_commit),
            "REPOSITORY_SNAPSHOT_COMMIT",
            "{not_commit}"
        );
    }
    let missing = repo.path().join("does-not-exist");
    assert_eq!(code(&missing, &head), "REPOSITORY_SNAPSHOT_REPOSITORY");
    assert_eq!(
        code(&repo.path().join("a.txt"), &head),
        "REPOSITORY_SNAPSHOT_REPOSITORY"
    );
    let plain = tempfile::tempdir().unwrap();
    assert_eq!(code(plain.path(), &head), "REPOSITORY_SNAPSHOT_REPOSITORY");
    // A subdirectory of a repository is not the repository: discovery never walks upwards.
    let sub = repo.path().join("subdir");
    std::fs::create_dir(&sub).unwrap();
    assert_eq!(code(&sub, &head), "REPOSITORY_SNAPSHOT_REPOSITORY");
    // An empty commit is a valid snapshot with an empty manifest.
    let empty = TempRepo::new();
    let root = empty.commit("empty");
    let snap = GitSnapshot::load(empty.path(), &root).unwrap();
    assert!(snap.entries().is_empty() && snap.manifest().is_empty());
    assert!(snap.read_files(&[]).unwrap().is_empty());
}

#[test]
fn large_blobs_stream_through_chunk_boundaries() {
    let repo = TempRepo::new();
    // Two-, three- and four-byte characters straddle every read boundary of a multi-MiB blob.
    let text = "ß€𝄞a".repeat(300_000);
    repo.write("big/text.txt", text.as_bytes());
    let mut broken = text.clone().into_bytes();
    broken.push(0xe2); // a truncated three-byte sequence at the very end
    repo.write("big/truncated.txt", &broken);
    let mut middle = text.clone().into_bytes();
    middle.insert(1_500_001, 0xff);
    repo.write("big/middle.txt", &middle);
    let head = repo.commit("big");
    let snap = load(&repo, &head);
    assert_eq!(
        snap.manifest()[&p("big/text.txt")],
        Sha256::of(text.as_bytes())
    );
    let kinds = kinds(&snap);
    assert_eq!(kinds["big/truncated.txt"], EntryKind::NonUtf8Content);
    assert_eq!(kinds["big/middle.txt"], EntryKind::NonUtf8Content);
    let entry = snap
        .entries()
        .iter()
        .find(|e| e.path() == Some("big/middle.txt"))
        .unwrap();
    assert_eq!(entry.size(), Some(middle.len() as u64));
    assert_eq!(entry.content_sha256(), Some(Sha256::of(&middle)));
    assert_eq!(
        snap.read_files(&[p("big/text.txt")]).unwrap()[&p("big/text.txt")],
        text
    );
}

#[test]
fn a_repository_missing_a_blob_fails_with_the_git_code() {
    let repo = TempRepo::new();
    for i in 0..200 {
        repo.write(format!("f{i:03}.txt"), format!("file {i}\n").as_bytes());
    }
    let head = repo.commit("many");
    let victim = repo.git_text(["rev-parse", &format!("{head}:f100.txt")]);
    let loose = repo
        .path()
        .join(".git/objects")
        .join(&victim[..2])
        .join(&victim[2..]);
    std::fs::remove_file(loose).unwrap();
    let err = GitSnapshot::load(repo.path(), &head).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_SNAPSHOT_GIT");
    assert!(err.is_environment());
    assert!(
        err.to_string().contains("missing from the repository"),
        "{err}"
    );
}
