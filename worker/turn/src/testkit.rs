//! Test support for the turn's own tests: approval fixtures, and the container crate's recording
//! fake runtime re-exported beside them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::sync::Mutex;

use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, BaselineFiles, CreateAbsence, PathGuard, RepoPath,
    RepositorySnapshotEvidence, SnapshotError,
};

use vocab::Sha256;

use crate::error::TurnError;
use crate::request::{CodingWorkerRequest, check_request_fields};

pub use container::testkit::*;

pub const SERVICE: &str = "app/modules/support/backend/service.py";
pub const SCHEMAS: &str = "app/modules/support/backend/schemas.py";
pub const READ_ONLY_TEST: &str = "tests/test_dashboard.py";
pub const NEW_PAGE: &str = "app/modules/support/ui/New.jsx";
pub use snapshot::testkit::COMMIT;

/// Binds `request`'s editable files as the approved turn, after the request's own checks (the
/// order the pipeline checks in).
pub fn approve<'a>(
    request: &'a CodingWorkerRequest,
    context: &'a ApprovedExecutionContext,
    snapshot: &'a RepositorySnapshotEvidence,
    policy: &'a dyn PathGuard,
    create_absence: Option<&'a dyn CreateAbsence>,
) -> Result<ApprovedTurn<'a>, TurnError> {
    check_request_fields(request, context)?;
    let selected = request.files.keys().cloned().collect();
    Ok(ApprovedTurn::new(
        context,
        snapshot,
        policy,
        create_absence,
        selected,
        &request.files,
    )?)
}

pub fn p(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

/// The deterministic archive of `entries` (path, text).
pub fn archive_of(entries: &[(&str, &str)]) -> Vec<u8> {
    let entries: Vec<(RepoPath, Vec<u8>)> = entries
        .iter()
        .map(|(k, v)| (p(k), v.as_bytes().to_vec()))
        .collect();
    archive::build_deterministic_archive(&entries).unwrap()
}

pub fn baseline() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        (SERVICE, "def answer():\n    return 1\n"),
        (SCHEMAS, "class Answer:\n    pass\n"),
        (READ_ONLY_TEST, "def test_answer():\n    assert True\n"),
    ])
}

pub fn context(create: &[&str], delete: &[&str]) -> ApprovedExecutionContext {
    let doc = snapshot::testkit::approval(serde_json::json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "raw_request": "Return 2 from answer.",
        "request_type": "change",
        "approved_plan_digest": "a".repeat(64),
        "snapshot_digest": "snapshot-digest",
        "graph_identity_digest": "graph",
        "impact_report_digest": "impact",
        "execution_strategy_id": "strategy",
        "rationale": "approved",
        "allowed_paths": ["app/modules/support/", "tests/"],
        "prohibited_paths": [],
        "read_only_paths": ["tests/"],
        "create_paths": create,
        "delete_paths": delete,
    }));
    ApprovedExecutionContext::from_json(&doc.to_string()).unwrap()
}

pub fn snapshot_evidence() -> RepositorySnapshotEvidence {
    let manifest = baseline()
        .into_iter()
        .map(|(k, v)| (p(k), Sha256::of(v.as_bytes())))
        .collect();
    RepositorySnapshotEvidence::new(
        "plan-1".into(),
        "request-1".into(),
        "app-1".into(),
        "acme/support".into(),
        COMMIT.into(),
        "snapshot-digest".into(),
        manifest,
    )
    .unwrap()
}

pub fn files(paths: &[&str]) -> BaselineFiles {
    let base = baseline();
    paths.iter().map(|k| (p(k), base[k].to_owned())).collect()
}

/// A create-absence proof over the fixture manifest, counting calls.
#[derive(Debug, Default)]
pub struct ManifestAbsence {
    pub calls: Mutex<usize>,
}

impl CreateAbsence for ManifestAbsence {
    fn prove_absent(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        *self.calls.lock().unwrap() += 1;
        if baseline().contains_key(path.as_str()) {
            return Err(SnapshotError::CreateExists {
                path: path.as_str().to_owned(),
            });
        }
        Ok(())
    }
}
