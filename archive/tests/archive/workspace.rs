//! Workspace materialisation and harvest (reference §7).

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

use archive::{HarvestOptions, StagedWorkspace, Violation, ViolationKind, materialize_workspace};
use pretty_assertions::assert_eq;
use snapshot::{BaselineFiles, FileOp};
use vocab::Sha256;

use crate::common::{p, tree};

fn files(list: &[(&str, &str)]) -> BaselineFiles {
    list.iter().map(|(k, v)| (p(k), (*v).to_owned())).collect()
}

fn editable() -> BaselineFiles {
    files(&[
        (
            "app/modules/support/backend/service.py",
            "def answer():\n    return 1\n",
        ),
        ("app/modules/support/backend/schemas.py", "X = 1\n"),
    ])
}

fn violations(list: &[(ViolationKind, &str)]) -> Vec<Violation> {
    list.iter()
        .map(|(k, path)| Violation {
            kind: *k,
            path: (*path).to_owned(),
        })
        .collect()
}

#[test]
fn materialize_writes_private_files_and_hashes_them() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let ro = files(&[
        ("app/tests/test_service.py", "assert True\n"),
        (".env.example", "A=\n"),
    ]);
    let ws = materialize_workspace(&root, &editable(), &ro).unwrap();
    assert_eq!(
        std::fs::metadata(&root).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let service = root.join("app/modules/support/backend/service.py");
    assert_eq!(
        std::fs::read_to_string(&service).unwrap(),
        "def answer():\n    return 1\n"
    );
    assert_eq!(std::fs::metadata(&service).unwrap().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(root.join("app/modules")).unwrap().mode() & 0o777,
        0o700
    );
    assert_eq!(
        ws.editable_manifest()[&p("app/modules/support/backend/service.py")],
        Sha256::of(b"def answer():\n    return 1\n")
    );
    assert_eq!(ws.read_only_manifest().len(), 2);
    assert!(
        root.join(".env.example").exists(),
        "root env template is preserved"
    );
    ws.cleanup().unwrap();
    assert!(!root.exists());
    ws.cleanup().unwrap();
}

#[test]
fn materialize_refuses_existing_roots_secret_paths_and_collisions() {
    let tmp = tempfile::tempdir().unwrap();
    let e = materialize_workspace(tmp.path(), &editable(), &BTreeMap::new()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_WORKSPACE: target must not exist"
    );
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), &link).unwrap();
    let e = materialize_workspace(&link, &editable(), &BTreeMap::new()).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_WORKSPACE");
    assert!(!tmp.path().join("nowhere").exists());

    let root = tmp.path().join("ws");
    let e = materialize_workspace(&root, &files(&[("keys/id_rsa", "k")]), &BTreeMap::new())
        .unwrap_err();
    assert_eq!(e.code(), "WORKSPACE_SECRET_PATH");
    let e = materialize_workspace(
        &root,
        &files(&[("a/B.txt", "1")]),
        &files(&[("a/b.txt", "2")]),
    )
    .unwrap_err();
    assert_eq!(e.code(), "WORKSPACE_UNSAFE_PATH");
    let e = materialize_workspace(&root, &files(&[("a", "1"), ("a/b", "2")]), &BTreeMap::new())
        .unwrap_err();
    assert_eq!(e.code(), "WORKSPACE_UNSAFE_PATH");
    assert!(!root.exists());
}

#[test]
fn untouched_tree_is_clean_and_counts_its_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = materialize_workspace(
        &tmp.path().join("ws"),
        &editable(),
        &files(&[("app/ro.txt", "ro\n")]),
    )
    .unwrap();
    let h = ws.harvest(HarvestOptions::default()).unwrap();
    assert!(h.violations.is_empty(), "{:?}", h.violations);
    assert_eq!(
        h.total_content_bytes,
        ("def answer():\n    return 1\n".len() + "X = 1\n".len()) as u64
    );
    assert_eq!(h.files.len(), 2);
    assert!(
        h.files
            .iter()
            .all(|f| f.op == FileOp::Update && !f.modified)
    );
    assert!(
        h.files.iter().all(|f| f.path.as_str() != "app/ro.txt"),
        "read-only files never appear"
    );
}

#[test]
fn harvest_reports_modifications_new_files_and_deletes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let ws = materialize_workspace(&root, &editable(), &BTreeMap::new()).unwrap();
    std::fs::write(
        root.join("app/modules/support/backend/service.py"),
        "def answer():\n    return 2\n",
    )
    .unwrap();
    std::fs::remove_file(root.join("app/modules/support/backend/schemas.py")).unwrap();
    std::fs::write(root.join("app/new.py"), "N = 1\n").unwrap();

    let strict = ws.harvest(HarvestOptions::default()).unwrap();
    assert_eq!(
        strict.violations,
        violations(&[
            (ViolationKind::OutsideAllowlist, "app/new.py"),
            (
                ViolationKind::DeleteDenied,
                "app/modules/support/backend/schemas.py"
            ),
        ])
    );
    let service = &strict.files[0];
    assert_eq!(
        service.path.as_str(),
        "app/modules/support/backend/service.py"
    );
    assert!(service.modified);
    assert_eq!(
        service.previous_sha256,
        Some(Sha256::of(b"def answer():\n    return 1\n"))
    );
    assert_eq!(
        service.new_sha256,
        Some(Sha256::of(b"def answer():\n    return 2\n"))
    );
    assert_eq!(
        service.content.as_deref(),
        Some(&b"def answer():\n    return 2\n"[..])
    );

    let open = ws
        .harvest(HarvestOptions {
            allow_new_files: true,
            allow_deletes: true,
        })
        .unwrap();
    assert!(open.violations.is_empty());
    let ops: Vec<(&str, FileOp, bool)> = open
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.op, f.modified))
        .collect();
    assert_eq!(
        ops,
        [
            (
                "app/modules/support/backend/service.py",
                FileOp::Update,
                true
            ),
            ("app/new.py", FileOp::Create, true),
            (
                "app/modules/support/backend/schemas.py",
                FileOp::Delete,
                true
            ),
        ]
    );
    let deleted = &open.files[2];
    assert_eq!((deleted.new_sha256, deleted.content.as_ref()), (None, None));
    ws.cleanup().unwrap();
}

/// Regression: links are reported, never read or followed, whether they point at files or
/// directories, inside or outside the tree.
#[test]
fn r_symlinks_are_never_followed_in_harvest() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP SECRET\n").unwrap();
    let root = tmp.path().join("ws");
    let ws = materialize_workspace(&root, &editable(), &BTreeMap::new()).unwrap();
    let backend = root.join("app/modules/support/backend");
    std::fs::remove_file(backend.join("schemas.py")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), backend.join("schemas.py")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("app/linked")).unwrap();
    let h = ws
        .harvest(HarvestOptions {
            allow_new_files: true,
            allow_deletes: true,
        })
        .unwrap();
    assert_eq!(
        h.violations,
        violations(&[
            (ViolationKind::Symlink, "app/linked"),
            (
                ViolationKind::Symlink,
                "app/modules/support/backend/schemas.py"
            ),
        ])
    );
    for f in &h.files {
        assert_ne!(f.content.as_deref(), Some(&b"TOP SECRET\n"[..]));
    }
    ws.cleanup().unwrap();
    assert!(
        outside.join("secret.txt").exists(),
        "cleanup does not follow links out of the tree"
    );
}

#[test]
fn harvest_flags_unsafe_names_special_files_secrets_and_read_only_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let ro = files(&[("app/ro/one.txt", "1\n"), ("app/ro/two.txt", "2\n")]);
    let ws = materialize_workspace(&root, &editable(), &ro).unwrap();
    std::fs::write(root.join("app/ro/one.txt"), "changed\n").unwrap();
    std::fs::remove_file(root.join("app/ro/two.txt")).unwrap();
    std::fs::write(root.join("app/bad:name.txt"), "x").unwrap();
    std::fs::write(root.join("app/.env"), "TOKEN=1\n").unwrap();
    let fifo = root.join("app/pipe");
    snapshot::testkit::mkfifo(&fifo);
    let h = ws
        .harvest(HarvestOptions {
            allow_new_files: true,
            allow_deletes: false,
        })
        .unwrap();
    assert_eq!(
        h.violations,
        violations(&[
            (ViolationKind::UnsafePath, "app/bad:name.txt"),
            (ViolationKind::UnsafePath, "app/pipe"),
            (ViolationKind::SecretPath, "app/.env"),
            (ViolationKind::ReadOnlyModified, "app/ro/one.txt"),
            (ViolationKind::ReadOnlyMissing, "app/ro/two.txt"),
        ])
    );
    assert!(
        h.files
            .iter()
            .all(|f| !f.path.as_str().starts_with("app/ro/"))
    );
    ws.cleanup().unwrap();
    assert!(!root.exists());
}

#[test]
fn open_existing_never_removes_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let made = materialize_workspace(&root, &editable(), &BTreeMap::new()).unwrap();
    let ws =
        StagedWorkspace::open_existing(&root, made.editable_manifest().clone(), BTreeMap::new())
            .unwrap();
    assert!(
        ws.harvest(HarvestOptions::default())
            .unwrap()
            .violations
            .is_empty()
    );
    ws.cleanup().unwrap();
    assert!(root.exists());
    assert_eq!(tree(&root).len(), 6);
    let e = StagedWorkspace::open_existing(
        &tmp.path().join("missing"),
        BTreeMap::new(),
        BTreeMap::new(),
    )
    .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_WORKSPACE");
    made.cleanup().unwrap();
}

/// A tree the container filled beyond reason is refused, not walked or read without bound.
#[test]
fn harvest_is_bounded_in_entries_and_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let ws = materialize_workspace(&root, &editable(), &BTreeMap::new()).unwrap();
    let big = std::fs::File::create(root.join("app/big.txt")).unwrap();
    big.set_len(archive::MAX_HARVEST_BYTES + 1).unwrap();
    let e = ws
        .harvest(HarvestOptions {
            allow_new_files: true,
            allow_deletes: false,
        })
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: staged tree exceeds harvest limit"
    );
    std::fs::remove_file(root.join("app/big.txt")).unwrap();
    let junk = root.join("app/junk");
    std::fs::create_dir(&junk).unwrap();
    for i in 0..archive::MAX_HARVEST_ENTRIES {
        std::fs::File::create(junk.join(format!("f{i}"))).unwrap();
    }
    let e = ws.harvest(HarvestOptions::default()).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_BUDGET");
    ws.cleanup().unwrap();
    assert!(!root.exists());
}

#[test]
fn build_byproducts_are_removed_before_the_harvest_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::create_dir(outside.join("keep")).unwrap();
    // A committed file under a byproduct name is part of the approval: never removed.
    let ro = files(&[("vendored/__pycache__/kept.py", "K = 1\n")]);
    let ws = materialize_workspace(&root, &editable(), &ro).unwrap();
    let backend = root.join("app/modules/support/backend");
    for dir in [
        backend.join("__pycache__"),
        root.join(".pytest_cache"),
        root.join(".pytest_cache/v"),
        root.join("app/__pycache__"),
        root.join("app/__pycache__/nested"),
        root.join("app/__pycache__/nested/__pycache__"),
    ] {
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("x.pyc"), b"\0bytecode").unwrap();
    }
    std::fs::write(root.join("vendored/__pycache__/new.pyc"), b"\0").unwrap();
    // A link with a byproduct name is never followed nor removed: the harvest reports it.
    std::os::unix::fs::symlink(&outside, backend.join(".pytest_cache")).unwrap();

    let removed = ws
        .remove_byproducts(&["__pycache__", ".pytest_cache"])
        .unwrap();
    assert_eq!(removed, 3);
    assert!(outside.join("keep").is_dir());
    assert!(!backend.join("__pycache__").exists());
    assert!(!root.join(".pytest_cache").exists());
    assert!(!root.join("app/__pycache__").exists());
    let h = ws.harvest(HarvestOptions::default()).unwrap();
    assert_eq!(
        h.violations,
        violations(&[
            (
                ViolationKind::Symlink,
                "app/modules/support/backend/.pytest_cache"
            ),
            (
                ViolationKind::OutsideAllowlist,
                "vendored/__pycache__/new.pyc"
            ),
        ])
    );
    // Nothing left to remove the second time.
    assert_eq!(
        ws.remove_byproducts(&["__pycache__", ".pytest_cache"])
            .unwrap(),
        0
    );
}
