//! Staging (reference §6.3): checks before writing, approved-path writes, cleanup.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;

use archive::{
    EMPTY_ARCHIVE_MARKER, HarvestOptions, build_deterministic_archive, export_workspace_archive,
    materialize_workspace,
};
use pretty_assertions::assert_eq;
use snapshot::BaselineFiles;
use vocab::Sha256;

use crate::common::{Fixture, RefusingPolicy, Spec, entries, fixture, p, tree};

const SERVICE: &str = "app/modules/support/backend/service.py";
const SCHEMAS: &str = "app/modules/support/backend/schemas.py";
const V1: &str = "def answer():\n    return 1\n";
const V2: &str = "def answer():\n    return 2\n";

fn support() -> Fixture {
    fixture(&Spec {
        files: &[
            (SERVICE, V1),
            (SCHEMAS, "X = 1\n"),
            ("app/tests/test_service.py", "assert True\n"),
        ],
        selected: &[SERVICE, SCHEMAS],
        allowed: &["app/modules/support/"],
        ..Spec::default()
    })
}

fn both(service: &str) -> Vec<u8> {
    build_deterministic_archive(&entries(&[
        (SERVICE, service.as_bytes()),
        (SCHEMAS, b"X = 1\n"),
    ]))
    .unwrap()
}

#[test]
fn export_then_stage_round_trip_records_the_baseline_manifest() {
    let fx = support();
    let tmp = tempfile::tempdir().unwrap();
    let container = materialize_workspace(
        &tmp.path().join("container"),
        &fx.baseline,
        &BTreeMap::new(),
    )
    .unwrap();
    std::fs::write(container.root().join(SERVICE), V2).unwrap();
    let bytes =
        export_workspace_archive(&container, 50, archive::MAX_ARCHIVE_BYTES, &[], &[]).unwrap();
    container.cleanup().unwrap();

    let root = tmp.path().join("staged");
    let ws = fx.stage(&bytes, &root).unwrap();
    assert_eq!(
        ws.editable_manifest()[&p(SERVICE)],
        Sha256::of(V1.as_bytes()),
        "manifest is the baseline"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(SERVICE)).unwrap(),
        V2,
        "bytes are the new ones"
    );
    assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
    assert_eq!(
        std::fs::metadata(root.join(SERVICE)).unwrap().mode() & 0o777,
        0o600
    );
    let h = ws.harvest(HarvestOptions::default()).unwrap();
    assert!(h.violations.is_empty());
    assert_eq!(h.files.iter().filter(|f| f.modified).count(), 1);
    ws.cleanup().unwrap();
    assert!(!root.exists());
    ws.cleanup().unwrap();
}

#[test]
fn staging_rejects_extra_entries_and_non_utf8_before_writing() {
    let fx = support();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let extra = build_deterministic_archive(&entries(&[
        (SERVICE, V2.as_bytes()),
        (SCHEMAS, b"X = 1\n"),
        ("app/modules/support/backend/extra.py", b"E\n"),
    ]))
    .unwrap();
    // Three entries against a selection of two without grants: the preflight's exact count.
    assert_eq!(
        fx.stage(&extra, &root).unwrap_err().code(),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET"
    );
    let swapped = build_deterministic_archive(&entries(&[
        (SERVICE, V2.as_bytes()),
        ("app/modules/support/backend/extra.py", b"E\n"),
    ]))
    .unwrap();
    assert_eq!(
        fx.stage(&swapped, &root).unwrap_err().to_string(),
        "REPOSITORY_PATCH_ARCHIVE_SET: entries differ from approved operation grants"
    );
    let bad = build_deterministic_archive(&entries(&[(SERVICE, b"\xff\n"), (SCHEMAS, b"X = 1\n")]))
        .unwrap();
    assert_eq!(
        fx.stage(&bad, &root).unwrap_err().to_string(),
        format!("REPOSITORY_PATCH_ARCHIVE_UTF8: '{SERVICE}'")
    );
    assert!(!root.exists());
    assert!(tree(tmp.path()).is_empty());
}

#[test]
fn staging_enforces_policy_and_limits_before_writing() {
    let fx = support();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let bytes = both(V2);
    let refusing = RefusingPolicy(SCHEMAS.to_owned());
    let e = fx
        .stage_with(&bytes, &root, &refusing, 50, archive::MAX_ARCHIVE_BYTES)
        .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_HOST_POLICY");
    for (max_files, max_bytes, want) in [
        (
            1,
            archive::MAX_ARCHIVE_BYTES,
            "REPOSITORY_PATCH_ARCHIVE_BUDGET: input exceeds limit",
        ),
        (
            50,
            100,
            "REPOSITORY_PATCH_ARCHIVE_BUDGET: input exceeds limit",
        ),
        (
            0,
            100,
            "REPOSITORY_PATCH_ARCHIVE_BUDGET: invalid file limit",
        ),
    ] {
        let e = fx
            .stage_with(&bytes, &root, &fx.policy, max_files, max_bytes)
            .unwrap_err();
        assert_eq!(e.to_string(), want);
    }
    assert!(!root.exists());
}

#[test]
fn snapshot_replay_is_refused_before_writing() {
    let fx = fixture(&Spec {
        files: &[(SERVICE, V1), (SCHEMAS, "X = 1\n")],
        selected: &[SERVICE, SCHEMAS],
        allowed: &["app/modules/support/"],
        plan_id: "plan-2",
        ..Spec::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    assert_eq!(
        fx.stage(&both(V2), &root).unwrap_err().code(),
        "REPOSITORY_PATCH_SNAPSHOT_IDENTITY"
    );
    assert!(!root.exists());
}

#[test]
fn existing_or_linked_targets_are_refused() {
    let fx = support();
    let tmp = tempfile::tempdir().unwrap();
    let e = fx.stage(&both(V2), tmp.path()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_WORKSPACE: target must not exist"
    );
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), &link).unwrap();
    assert_eq!(
        fx.stage(&both(V2), &link).unwrap_err().code(),
        "REPOSITORY_PATCH_ARCHIVE_WORKSPACE"
    );
    assert!(!tmp.path().join("elsewhere").exists());
}

#[test]
fn read_only_context_cannot_enter_the_editable_archive() {
    let fx = fixture(&Spec {
        files: &[
            (SERVICE, V1),
            ("app/modules/support/tests/test_service.py", "assert True\n"),
        ],
        selected: &[SERVICE],
        allowed: &["app/modules/support/"],
        read_only: &["app/modules/support/tests/"],
        ..Spec::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let bytes = build_deterministic_archive(&entries(&[(SERVICE, V2.as_bytes())])).unwrap();
    fx.stage(&bytes, &root).unwrap().cleanup().unwrap();
    let sneaky = build_deterministic_archive(&entries(&[
        (SERVICE, V2.as_bytes()),
        (
            "app/modules/support/tests/test_service.py",
            b"assert False\n",
        ),
    ]))
    .unwrap();
    let e = fixture(&Spec {
        files: &[
            (SERVICE, V1),
            ("app/modules/support/tests/test_service.py", "assert True\n"),
        ],
        selected: &[SERVICE],
        creates: &["app/modules/support/new.py"],
        allowed: &["app/modules/support/"],
        read_only: &["app/modules/support/tests/"],
        ..Spec::default()
    })
    .stage(&sneaky, &root)
    .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_SET");
    assert!(!root.exists());
}

#[test]
fn create_and_delete_grants_round_trip() {
    let fx = fixture(&Spec {
        files: &[(SERVICE, V1), (SCHEMAS, "X = 1\n")],
        selected: &[SERVICE, SCHEMAS],
        creates: &["app/modules/support/ui/New.jsx"],
        deletes: &[SCHEMAS],
        allowed: &["app/modules/support/"],
        ..Spec::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let bytes = build_deterministic_archive(&entries(&[
        (SERVICE, V2.as_bytes()),
        ("app/modules/support/ui/New.jsx", b"export default 1;\n"),
    ]))
    .unwrap();
    let ws = fx.stage(&bytes, &root).unwrap();
    assert_eq!(
        tree(&root),
        [
            "app/",
            "app/modules/",
            "app/modules/support/",
            "app/modules/support/backend/",
            "app/modules/support/backend/service.py",
            "app/modules/support/ui/",
            "app/modules/support/ui/New.jsx",
        ]
    );
    let h = ws
        .harvest(HarvestOptions {
            allow_new_files: true,
            allow_deletes: true,
        })
        .unwrap();
    let ops: Vec<(&str, &str)> = h
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.op.as_str()))
        .collect();
    assert_eq!(
        ops,
        [
            (SERVICE, "update"),
            ("app/modules/support/ui/New.jsx", "create"),
            (SCHEMAS, "delete")
        ]
    );
    ws.cleanup().unwrap();
}

#[test]
fn deletion_only_turn_stages_from_the_empty_marker() {
    let fx = fixture(&Spec {
        files: &[(SCHEMAS, "X = 1\n")],
        selected: &[SCHEMAS],
        deletes: &[SCHEMAS],
        allowed: &["app/modules/support/"],
        ..Spec::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let ws = fx.stage(EMPTY_ARCHIVE_MARKER, &root).unwrap();
    assert!(!root.join(SCHEMAS).exists());
    ws.cleanup().unwrap();
    // Without a delete grant the marker drops a selected file: refused.
    let e = support().stage(EMPTY_ARCHIVE_MARKER, &root).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_SET");
    assert!(!root.exists());
}

#[test]
fn content_gates_apply_in_staging_without_echoing_values() {
    let fx = fixture(&Spec {
        files: &[(
            "app/security/secrets.yaml",
            "secrets:\n  - name: STRIPE_KEY\n",
        )],
        selected: &["app/security/secrets.yaml"],
        allowed: &["app/security/"],
        ..Spec::default()
    });
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ws");
    let bytes = build_deterministic_archive(&entries(&[(
        "app/security/secrets.yaml",
        b"secrets:\n  - name: STRIPE_KEY\nraw_token: sk-sentinel\n",
    )]))
    .unwrap();
    let e = fx.stage(&bytes, &root).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_SECRET_CONTRACT");
    assert!(e.to_string().contains("names-only") && !e.to_string().contains("sk-sentinel"));
    assert!(!root.exists());
}

#[test]
fn stale_baseline_is_refused() {
    let mut fx = support();
    let stale: BaselineFiles = [
        (p(SERVICE), "def answer():\n    return 0\n".to_owned()),
        (p(SCHEMAS), "X = 1\n".to_owned()),
    ]
    .into_iter()
    .collect();
    fx.baseline = stale;
    let tmp = tempfile::tempdir().unwrap();
    let e = fx.stage(&both(V2), &tmp.path().join("ws")).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_BASELINE_HASH");
}

mod round_trip {
    use std::collections::BTreeMap;

    use archive::{HarvestOptions, export_workspace_archive, materialize_workspace};
    use proptest::prelude::*;
    use snapshot::FileOp;

    use crate::common::{Spec, fixture};

    const NAMES: [&str; 6] = [
        "app/a.txt",
        "app/b/c.txt",
        "app/b/d.md",
        "app/é/straße.txt",
        "app/x/y/z.rs",
        "app/Upper.txt",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Whatever the container does to its editable files (edit, keep, delete under a grant),
        /// export → stage reproduces exactly that tree on the host, and the staged manifest is
        /// the approved baseline.
        #[test]
        fn export_then_stage_reproduces_the_container_tree(
            baseline in prop::collection::vec("[ -~]{0,40}\n", NAMES.len()),
            actions in prop::collection::vec(0_u8..3, NAMES.len()),
            edits in prop::collection::vec("[ -~é]{0,40}", NAMES.len()),
        ) {
            let files: Vec<(&str, &str)> = NAMES.iter().copied().zip(baseline.iter().map(String::as_str)).collect();
            let deletes: Vec<&str> = NAMES.iter().zip(&actions).filter(|(_, a)| **a == 2).map(|(n, _)| *n).collect();
            let fx = fixture(&Spec { files: &files, selected: &NAMES, deletes: &deletes, allowed: &["app/"], ..Spec::default() });
            let tmp = tempfile::tempdir().unwrap();
            let container = materialize_workspace(&tmp.path().join("c"), &fx.baseline, &BTreeMap::new()).unwrap();
            let mut expected = BTreeMap::new();
            for ((name, action), edit) in NAMES.iter().zip(&actions).zip(&edits) {
                let path = container.root().join(name);
                match action {
                    0 => { expected.insert((*name).to_owned(), std::fs::read_to_string(&path).unwrap()); }
                    1 => { std::fs::write(&path, edit).unwrap(); expected.insert((*name).to_owned(), edit.clone()); }
                    _ => std::fs::remove_file(&path).unwrap(),
                }
            }
            let grants: Vec<_> = fx.context.delete_paths().to_vec();
            let bytes = export_workspace_archive(&container, 50, archive::MAX_ARCHIVE_BYTES, &[], &grants).unwrap();
            let staged = fx.stage(&bytes, &tmp.path().join("s")).unwrap();
            let h = staged.harvest(HarvestOptions { allow_new_files: false, allow_deletes: true }).unwrap();
            prop_assert!(h.violations.is_empty());
            let got: BTreeMap<String, String> = h
                .files
                .iter()
                .filter(|f| f.op != FileOp::Delete)
                .map(|f| (f.path.to_string(), String::from_utf8(f.content.clone().unwrap()).unwrap()))
                .collect();
            prop_assert_eq!(got, expected);
            prop_assert_eq!(staged.editable_manifest(), container.editable_manifest());
            staged.cleanup().unwrap();
            container.cleanup().unwrap();
        }
    }
}
