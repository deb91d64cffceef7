//! Export of a workspace (reference §6.2).

use std::collections::BTreeMap;

use archive::{
    ArchiveLimits, EMPTY_ARCHIVE_MARKER, StagedWorkspace, export_workspace_archive,
    materialize_workspace, read_archive_entries,
};
use pretty_assertions::assert_eq;
use snapshot::{BaselineFiles, RepoPath};

use crate::common::p;

const SERVICE: &str = "app/modules/support/backend/service.py";
const SCHEMAS: &str = "app/modules/support/backend/schemas.py";

fn setup(tmp: &tempfile::TempDir, ro: &[(&str, &str)]) -> StagedWorkspace {
    let editable: BaselineFiles = [
        (p(SERVICE), "def answer():\n    return 1\n".to_owned()),
        (p(SCHEMAS), "X = 1\n".to_owned()),
    ]
    .into_iter()
    .collect();
    let ro: BaselineFiles = ro.iter().map(|(k, v)| (p(k), (*v).to_owned())).collect();
    materialize_workspace(&tmp.path().join("ws"), &editable, &ro).unwrap()
}

fn read(bytes: &[u8]) -> Vec<(String, String)> {
    read_archive_entries(bytes, &ArchiveLimits::default())
        .unwrap()
        .into_iter()
        .map(|(p, c)| (p.to_string(), String::from_utf8(c).unwrap()))
        .collect()
}

#[test]
fn export_includes_unchanged_editable_files_and_never_read_only_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = setup(&tmp, &[("app/tests/test_service.py", "assert True\n")]);
    std::fs::write(ws.root().join(SERVICE), "def answer():\n    return 2\n").unwrap();
    let bytes = export_workspace_archive(&ws, 50, archive::MAX_ARCHIVE_BYTES, &[], &[]).unwrap();
    assert_eq!(
        read(&bytes),
        [
            (SCHEMAS.to_owned(), "X = 1\n".to_owned()),
            (
                SERVICE.to_owned(),
                "def answer():\n    return 2\n".to_owned()
            )
        ]
    );
}

#[test]
fn export_rejects_unselected_files_and_non_utf8_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = setup(&tmp, &[]);
    std::fs::write(ws.root().join("app/extra.py"), "x").unwrap();
    let e = export_workspace_archive(&ws, 50, 1000, &[], &[]).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_SCOPE");
    assert!(e.to_string().contains("outside_allowlist"), "{e}");
    std::fs::remove_file(ws.root().join("app/extra.py")).unwrap();
    std::fs::write(ws.root().join(SERVICE), b"\xff\n").unwrap();
    let e = export_workspace_archive(&ws, 50, 1000, &[], &[]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("REPOSITORY_PATCH_ARCHIVE_UTF8: '{SERVICE}' is not exact UTF-8")
    );
}

#[test]
fn export_checks_limits_and_grants_in_reference_order() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = setup(&tmp, &[("app/ro.txt", "r")]);
    let msg = |r: Result<Vec<u8>, archive::ArchiveError>| r.unwrap_err().to_string();
    // The message of an export with no grants under the file and byte limits.
    let budget = |max_files, max_bytes| {
        msg(export_workspace_archive(
            &ws,
            max_files,
            max_bytes,
            &[],
            &[],
        ))
    };
    assert_eq!(
        budget(0, 10),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: invalid file limit"
    );
    assert_eq!(
        budget(1, 16_777_217),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: invalid byte limit"
    );
    let new = p("app/new.py");
    assert_eq!(
        msg(export_workspace_archive(
            &ws,
            50,
            1000,
            std::slice::from_ref(&new),
            &[p("app/NEW.py")]
        )),
        "REPOSITORY_PATCH_ARCHIVE_GRANTS: duplicate operation path"
    );
    for (creates, deletes) in [
        (vec![p("app/modules/support/backend/SERVICE.py")], vec![]),
        (vec![p("app/ro.txt")], vec![]),
        (vec![], vec![p("app/ro.txt")]),
        (vec![], vec![p("app/missing.py")]),
    ] {
        assert_eq!(
            msg(export_workspace_archive(&ws, 50, 1000, &creates, &deletes)),
            "REPOSITORY_PATCH_ARCHIVE_GRANTS: operation paths conflict with staged baseline"
        );
    }
    assert_eq!(
        budget(2, 1000),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: staged file count exceeds limit"
    );
    assert_eq!(
        budget(3, 10),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: staged contents exceed limit"
    );
    assert_eq!(
        budget(3, 50),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: archive exceeds limit"
    );
}

#[test]
fn export_honours_exact_create_and_delete_grants() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = setup(&tmp, &[]);
    std::fs::write(ws.root().join("app/new.py"), "N = 1\n").unwrap();
    std::fs::write(ws.root().join("app/other.py"), "O = 1\n").unwrap();
    let e = export_workspace_archive(&ws, 50, 1000, &[p("app/new.py")], &[]).unwrap_err();
    assert_eq!(e.to_string(), "REPOSITORY_PATCH_ARCHIVE_OP: 'app/other.py'");
    std::fs::remove_file(ws.root().join("app/other.py")).unwrap();
    std::fs::remove_file(ws.root().join(SCHEMAS)).unwrap();
    let bytes = export_workspace_archive(&ws, 50, 1000, &[p("app/new.py")], &[p(SCHEMAS)]).unwrap();
    let names: Vec<String> = read(&bytes).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["app/modules/support/backend/service.py", "app/new.py"]
    );
    // A delete grant without the file being deleted keeps it (a granted delete is not required).
    std::fs::write(ws.root().join(SCHEMAS), "X = 1\n").unwrap();
    let kept = export_workspace_archive(&ws, 50, 1000, &[p("app/new.py")], &[p(SCHEMAS)]).unwrap();
    assert_eq!(read(&kept).len(), 3);
    // An unexpected delete without a grant is a scope violation.
    std::fs::remove_file(ws.root().join(SCHEMAS)).unwrap();
    let e = export_workspace_archive(&ws, 50, 1000, &[p("app/new.py")], &[]).unwrap_err();
    assert!(e.to_string().contains("delete_denied"), "{e}");
}

#[test]
fn deletion_only_export_is_the_empty_marker() {
    let tmp = tempfile::tempdir().unwrap();
    let editable: BaselineFiles = [(p("app/gone.py"), "G\n".to_owned())].into_iter().collect();
    let ws = materialize_workspace(&tmp.path().join("ws"), &editable, &BTreeMap::new()).unwrap();
    std::fs::remove_file(ws.root().join("app/gone.py")).unwrap();
    let bytes = export_workspace_archive(&ws, 50, 1000, &[], &[p("app/gone.py")]).unwrap();
    assert_eq!(bytes, EMPTY_ARCHIVE_MARKER);
}

#[test]
fn export_applies_the_output_content_gates_without_echoing_values() {
    let tmp = tempfile::tempdir().unwrap();
    let editable: BaselineFiles = [
        (
            p("app/security/secrets.yaml"),
            "secrets:\n  - name: STRIPE_KEY\n".to_owned(),
        ),
        (p(".env.example"), "A=\n".to_owned()),
    ]
    .into_iter()
    .collect();
    let ws = materialize_workspace(&tmp.path().join("ws"), &editable, &BTreeMap::new()).unwrap();
    let e = export_workspace_archive(&ws, 50, 10_000, &[], &[]).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ENV_TEMPLATE");
    std::fs::remove_file(ws.root().join(".env.example")).unwrap();
    std::fs::write(
        ws.root().join("app/security/secrets.yaml"),
        "secrets:\n  - name: STRIPE_KEY\nraw_token: sk-sentinel\n",
    )
    .unwrap();
    let deletes: Vec<RepoPath> = vec![p(".env.example")];
    let e = export_workspace_archive(&ws, 50, 10_000, &[], &deletes).unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_SECRET_CONTRACT");
    assert!(e.to_string().contains("names-only") && !e.to_string().contains("sk-sentinel"));
}
