use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use archive::{StagedWorkspace, materialize_workspace};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use snapshot::testkit::COMMIT;
use snapshot::{
    ApprovedExecutionContext, BaselineFiles, CreateAbsence, DefaultPathGuard, PathGuard,
    RepositorySnapshotEvidence,
};

use super::*;
use crate::digest::repository_patch_digest;

const SERVICE: &str = "app/modules/support/backend/service.py";
const SCHEMAS: &str = "app/modules/support/backend/schemas.py";
const BEFORE: &str = "def answer():\n    return 1\n";
const AFTER: &str = "def answer():\n    return 2\n";
const SCHEMAS_TEXT: &str = "class Schema:\n    pass\n";
const SNAPSHOT_DIGEST: &str =
    "sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn p(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

/// The fixture's snapshot evidence for `plan_id`, with `manifest`.
fn evidence(plan_id: &str, manifest: BTreeMap<RepoPath, Sha256>) -> RepositorySnapshotEvidence {
    RepositorySnapshotEvidence::new(
        plan_id.into(),
        "request-1".into(),
        "app-1".into(),
        "acme/support".into(),
        COMMIT.into(),
        SNAPSHOT_DIGEST.into(),
        manifest,
    )
    .unwrap()
}

/// Counts calls and refuses the listed paths (in addition to the default host policy).
#[derive(Debug, Default)]
struct CountingPolicy {
    calls: AtomicUsize,
    refuse: Vec<String>,
}

impl PathGuard for CountingPolicy {
    fn validate_path(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.refuse.iter().any(|r| r == path.as_str()) {
            return Err(SnapshotError::HostPolicy {
                path: path.as_str().to_owned(),
            });
        }
        DefaultPathGuard::default().validate_path(path)
    }
}

/// An absence proof over a fixed set of existing tree entries.
#[derive(Debug)]
struct Tree(BTreeSet<String>);

impl CreateAbsence for Tree {
    fn prove_absent(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        if self.0.contains(&path.collision_key()) {
            return Err(SnapshotError::CreateExists {
                path: path.as_str().to_owned(),
            });
        }
        Ok(())
    }
}

/// A tree that holds the fixture's files plus entries the snapshot excluded (by kind).
#[derive(Debug)]
struct Excluding(BTreeMap<&'static str, snapshot::EntryKind>);

impl CreateAbsence for Excluding {
    fn prove_absent(&self, _path: &RepoPath) -> Result<(), SnapshotError> {
        Ok(())
    }

    fn excluded_reason(&self, path: &str) -> Option<&'static str> {
        self.0.get(path).copied().map(snapshot::EntryKind::reason)
    }
}

fn context_value() -> Value {
    snapshot::testkit::approval(json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "raw_request": "Make answer return 2",
        "request_type": "patch",
        "approved_plan_digest": "ab".repeat(32),
        "snapshot_digest": SNAPSHOT_DIGEST,
        "graph_identity_digest": "graph",
        "impact_report_digest": "impact",
        "execution_strategy_id": "strategy",
        "rationale": "approved",
        "allowed_paths": ["app/modules/support/"],
        "prohibited_paths": [],
        "read_only_paths": [],
        "create_paths": [],
        "delete_paths": [],
        "required_validation_gates": ["pytest", "lint", "pytest"],
        "required_security_gates": ["secret_scan"],
        "required_ci_checks": [],
    }))
}

struct Fixture {
    tmp: tempfile::TempDir,
    context: ApprovedExecutionContext,
    snapshot: RepositorySnapshotEvidence,
    selected: Vec<RepoPath>,
    baseline: BaselineFiles,
    workspace: StagedWorkspace,
    proposal: StagedPatchProposal,
    policy: CountingPolicy,
    tree: Tree,
}

impl Fixture {
    fn with(context_overrides: Value, files: &[(&str, &str)]) -> Self {
        let mut ctx = context_value();
        for (k, v) in context_overrides.as_object().unwrap() {
            ctx[k] = v.clone();
        }
        let context = ApprovedExecutionContext::from_json(&ctx.to_string()).unwrap();
        let baseline: BaselineFiles = files
            .iter()
            .map(|(path, text)| (p(path), (*text).to_owned()))
            .collect();
        let manifest = baseline
            .iter()
            .map(|(k, v)| (k.clone(), Sha256::of(v.as_bytes())))
            .collect();
        let snapshot = evidence("plan-1", manifest);
        let tmp = tempfile::tempdir().unwrap();
        let workspace =
            materialize_workspace(&tmp.path().join("ws"), &baseline, &BaselineFiles::new())
                .unwrap();
        let proposal = proposal(
            json!([{"path": SERVICE, "op": "update", "content": AFTER}]),
            json!([SERVICE]),
        );
        let tree = Tree(baseline.keys().map(RepoPath::collision_key).collect());
        Self {
            tmp,
            context,
            snapshot,
            selected: baseline.keys().cloned().collect(),
            baseline,
            workspace,
            proposal,
            policy: CountingPolicy::default(),
            tree,
        }
    }

    fn standard() -> Self {
        Self::with(json!({}), &[(SERVICE, BEFORE), (SCHEMAS, SCHEMAS_TEXT)])
    }

    fn root(&self) -> &Path {
        self.workspace.root()
    }

    /// The approval of this fixture's selection over `snapshot`, `create_absence` the proof.
    fn approve<'a>(
        &'a self,
        snapshot: &'a RepositorySnapshotEvidence,
        create_absence: Option<&'a dyn CreateAbsence>,
    ) -> Result<ApprovedTurn<'a>, snapshot::SnapshotError> {
        ApprovedTurn::new(
            &self.context,
            snapshot,
            &self.policy,
            create_absence,
            self.selected.clone(),
            &self.baseline,
        )
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "test writes into its own workspace tree"
    )]
    fn write(&self, path: &str, content: &[u8]) {
        let full = self.root().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }

    fn run(&self) -> Result<RepositoryPatchCandidate, FinalizeError> {
        finalize(self, Some(&self.tree))
    }

    fn code(&self) -> &'static str {
        self.run().unwrap_err().code()
    }
}

fn proposal(changed: Value, owned: Value) -> StagedPatchProposal {
    serde_json::from_value(json!({
        "proposal_id": "proposal-1",
        "provider_id": "synthetic",
        "status": "completed",
        "summary": "PROVIDER SUMMARY MUST NOT APPEAR",
        "rationale": "PROVIDER RATIONALE MUST NOT APPEAR",
        "changed_files": changed,
        "owned_paths": owned,
    }))
    .unwrap()
}

fn tree_snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push((
                    e.path().display().to_string(),
                    std::fs::read(e.path()).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn an_observed_update_finalises_into_an_unvalidated_external_patch() {
    let f = Fixture::standard();
    f.write(SERVICE, AFTER.as_bytes());
    let before = tree_snapshot(f.root());
    let c = f.run().unwrap();
    assert_eq!(tree_snapshot(f.root()), before, "finalize only reads");
    assert_eq!(
        f.policy.calls.load(Ordering::SeqCst),
        7,
        "2 baseline + 2 selected + 2 harvested + 1 proposed"
    );
    assert_eq!(c.schema_version(), "mozaiks.refinement.repository_patch.v2");
    assert_eq!(c.write_back_mode(), "external_patch");
    assert_eq!(c.validation_state(), "pending");
    assert!(!c.mutation_allowed());
    assert_eq!(
        (
            c.handoff_id(),
            c.request_id(),
            c.plan_id(),
            c.app_id(),
            c.build_registry_id()
        ),
        ("handoff-1", "request-1", "plan-1", "app-1", "build-1")
    );
    assert_eq!(c.repository_full_name(), "acme/support");
    assert_eq!(c.baseline_commit_sha(), COMMIT);
    assert_eq!(c.approved_plan_digest(), "ab".repeat(32));
    assert_eq!(c.snapshot_digest(), SNAPSHOT_DIGEST);
    assert_eq!(
        (c.proposal_id(), c.provider_id()),
        ("proposal-1", "synthetic")
    );
    assert_eq!(c.summary(), "Approved repository file operations: 1.");
    assert_eq!(c.rationale(), CANDIDATE_RATIONALE);
    assert_eq!(
        c.required_validation_gates(),
        ["pytest", "lint", "pytest"],
        "copied as given"
    );
    assert_eq!(c.required_security_gates(), ["secret_scan"]);
    let [file] = c.changed_files() else {
        panic!("one file")
    };
    assert_eq!(file.path().as_str(), SERVICE);
    assert_eq!(file.op(), FileOp::Update);
    assert_eq!(file.previous_sha256(), Some(&Sha256::of(BEFORE.as_bytes())));
    assert_eq!(file.new_sha256(), Some(&Sha256::of(AFTER.as_bytes())));
    assert_eq!(file.content(), Some(AFTER));
    assert_eq!(
        file.diff(),
        format!(
            "--- a/{SERVICE}\n+++ b/{SERVICE}\n@@ -1,2 +1,2 @@\n def answer():\n-    return 1\n+    return 2\n"
        )
    );
    let json = String::from_utf8(c.to_json_pretty().unwrap()).unwrap();
    assert!(!json.contains("PROVIDER"));
    // The finalizer's own hashes skip the digest's content re-hash; a re-parsed copy (which
    // re-hashes) must give the same digest and compare equal.
    let reparsed = crate::model::validate_candidate_json(json.as_bytes()).unwrap();
    assert_eq!(reparsed, c);
    assert!(c.hashes_derived() && !reparsed.hashes_derived());
    assert_eq!(
        repository_patch_digest(&c).unwrap(),
        repository_patch_digest(&reparsed).unwrap()
    );
}

#[test]
fn a_missing_final_newline_is_marked_in_the_diff() {
    let mut f = Fixture::standard();
    f.write(SERVICE, b"def answer():\n    return 2");
    f.proposal = proposal(
        json!([{"path": SERVICE, "op": "update", "content": "def answer():\n    return 2"}]),
        json!([SERVICE]),
    );
    let c = f.run().unwrap();
    assert!(
        c.changed_files()[0]
            .diff()
            .ends_with("+    return 2\n\\ No newline at end of file\n")
    );
}

#[test]
fn forged_or_failed_provider_claims_are_rejected() {
    let mut f = Fixture::standard();
    f.write(SERVICE, AFTER.as_bytes());
    f.proposal = proposal(
        json!([{"path": SERVICE, "op": "update", "content": "forged\n"}]),
        json!([SERVICE]),
    );
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_MISMATCH");
    f.proposal = proposal(json!([]), json!([SERVICE]));
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_MISMATCH");
    f.proposal = proposal(
        json!([{"path": SERVICE, "op": "update", "content": AFTER}, {"path": SCHEMAS, "op": "update", "content": SCHEMAS_TEXT}]),
        json!([SERVICE, SCHEMAS]),
    );
    assert_eq!(
        f.code(),
        "REPOSITORY_PATCH_PROPOSAL_MISMATCH",
        "an unchanged file claimed as changed"
    );
    let mut failed = proposal(
        json!([{"path": SERVICE, "op": "update", "content": AFTER}]),
        json!([SERVICE]),
    );
    failed.status = ProposalStatus::Failed;
    f.proposal = failed;
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_STATUS");
    f.proposal = proposal(
        json!([{"path": "app/modules/support/new.py", "op": "create", "content": "x"}]),
        json!([SERVICE]),
    );
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_SCOPE");
    f.proposal = proposal(
        json!([{"path": SERVICE, "op": "update", "content": AFTER}, {"path": SERVICE, "op": "update", "content": AFTER}]),
        json!([SERVICE]),
    );
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_SCOPE");
    f.proposal = proposal(json!([{"path": SERVICE, "op": "delete"}]), json!([SERVICE]));
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_SCOPE");
    f.proposal = proposal(
        json!([{"path": "../app/x.py", "op": "update", "content": AFTER}]),
        json!([SERVICE]),
    );
    assert_eq!(f.code(), "REPOSITORY_PATCH_UNSAFE_PATH");
    for owned in [
        json!(["app"]),
        json!([]),
        json!([SERVICE, SERVICE]),
        json!([SCHEMAS]),
    ] {
        f.proposal = proposal(
            json!([{"path": SERVICE, "op": "update", "content": AFTER}]),
            owned.clone(),
        );
        assert_eq!(f.code(), "REPOSITORY_PATCH_OWNERSHIP", "{owned}");
    }
    f.proposal = proposal(
        json!([{"path": SERVICE, "op": "update", "content": AFTER}]),
        json!([SERVICE, "../x"]),
    );
    assert_eq!(f.code(), "REPOSITORY_PATCH_UNSAFE_PATH");
}

#[test]
fn no_effective_change_is_not_a_candidate() {
    let f = Fixture::standard();
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_STATUS");
}

#[test]
fn workspace_violations_are_reported_by_kind() {
    let f = Fixture::standard();
    f.write(SERVICE, AFTER.as_bytes());
    f.write("app/modules/support/backend/extra.py", b"x = 1\n");
    let err = f.run().unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_WORKSPACE_SCOPE");
    assert!(
        err.to_string()
            .contains("outside_allowlist:app/modules/support/backend/extra.py")
    );

    let f = Fixture::standard();
    std::fs::remove_file(f.root().join(SCHEMAS)).unwrap();
    let err = f.run().unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_WORKSPACE_SCOPE");
    assert!(err.to_string().contains("delete_denied"));

    let f = Fixture::standard();
    std::fs::remove_file(f.root().join(SCHEMAS)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", f.root().join(SCHEMAS)).unwrap();
    let err = f.run().unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_WORKSPACE_SCOPE");
    assert!(err.to_string().contains("symlink"));

    let f = Fixture::standard();
    f.write(SERVICE, b"def answer():\n    return \xff\n");
    assert_eq!(f.code(), "REPOSITORY_PATCH_WORKSPACE_HASH");

    // A violation at a non-canonical name fails the canonical-path check first.
    let f = Fixture::standard();
    f.write("app/modules/support/bad*name.py", b"x");
    assert_eq!(f.code(), "REPOSITORY_PATCH_UNSAFE_PATH");
}

#[test]
fn staged_manifest_must_equal_the_selected_baseline() {
    let mut f = Fixture::standard();
    let other: BaselineFiles = [
        (p(SERVICE), "changed baseline\n".to_owned()),
        (p(SCHEMAS), SCHEMAS_TEXT.to_owned()),
    ]
    .into();
    f.workspace =
        materialize_workspace(&f.tmp.path().join("ws2"), &other, &BaselineFiles::new()).unwrap();
    assert_eq!(f.code(), "REPOSITORY_PATCH_WORKSPACE_BASELINE");
}

#[test]
fn approval_and_snapshot_checks_run_first() {
    let mut f = Fixture::standard();
    f.write(SERVICE, AFTER.as_bytes());
    let good = f.snapshot.clone();
    f.snapshot = evidence("plan-2", good.file_manifest().clone());
    assert_eq!(f.code(), "REPOSITORY_PATCH_SNAPSHOT_IDENTITY");
    let mut stale = good.file_manifest().clone();
    stale.insert(p(SERVICE), Sha256::of(b"stale"));
    f.snapshot = evidence("plan-1", stale);
    assert_eq!(f.code(), "REPOSITORY_PATCH_BASELINE_HASH");
    f.snapshot = good;
    f.selected = vec![p(SERVICE)];
    assert_eq!(f.code(), "REPOSITORY_PATCH_BASELINE_SET");
    f.selected = vec![p(SERVICE), p(SERVICE)];
    assert_eq!(f.code(), "REPOSITORY_PATCH_SELECTION");
    f.selected = f.baseline.keys().cloned().collect();
    f.policy.refuse = vec![SCHEMAS.to_owned()];
    assert_eq!(f.code(), "REPOSITORY_PATCH_HOST_POLICY");

    for (overrides, code) in [
        (
            json!({"schema_version": "managed_refinement.execution_context.v2"}),
            "REPOSITORY_PATCH_CONTEXT_VERSION",
        ),
        (
            json!({"prohibited_paths": ["app/modules/support/backend/"]}),
            "REPOSITORY_PATCH_SCOPE",
        ),
        (
            json!({"read_only_paths": ["APP/modules/support/backend/schemas.py"]}),
            "REPOSITORY_PATCH_SCOPE",
        ),
        (
            json!({"allowed_paths": ["app/modules/other/"]}),
            "REPOSITORY_PATCH_SCOPE",
        ),
    ] {
        let f = Fixture::with(
            overrides.clone(),
            &[(SERVICE, BEFORE), (SCHEMAS, SCHEMAS_TEXT)],
        );
        f.write(SERVICE, AFTER.as_bytes());
        assert_eq!(f.code(), code, "{overrides}");
    }
}

#[test]
fn content_gates_apply_to_changed_files() {
    let secrets = "app/security/secrets.yaml";
    let f = Fixture::with(
        json!({"allowed_paths": ["app/"]}),
        &[(secrets, "secrets:\n  - API_TOKEN\n")],
    );
    f.write(
        secrets,
        b"secrets:\n  - API_TOKEN\nraw_token: sk-sentinel\n",
    );
    let mut f = f;
    f.proposal = proposal(
        json!([{"path": secrets, "op": "update", "content": "secrets:\n  - API_TOKEN\nraw_token: sk-sentinel\n"}]),
        json!([secrets]),
    );
    let err = f.run().unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_SECRET_CONTRACT");
    assert!(err.to_string().contains("names-only"));
    assert!(!err.to_string().contains("sk-sentinel"));
    for template in [
        ".env.example",
        ".ENV.EXAMPLE",
        ".env.staging.example",
        ".env.production.example",
    ] {
        let f = Fixture::with(json!({"allowed_paths": ["."]}), &[(template, "A=\n")]);
        assert_eq!(f.code(), "REPOSITORY_PATCH_ENV_TEMPLATE", "{template}");
    }
}

#[test]
fn a_granted_create_needs_an_absence_proof_and_finalises() {
    let new = "app/modules/support/ui/New.jsx";
    let mut f = Fixture::with(json!({"create_paths": [new]}), &[(SERVICE, BEFORE)]);
    f.write(new, b"export const New = () => null;\n");
    f.proposal = proposal(
        json!([{"path": new, "op": "create", "content": "export const New = () => null;\n"}]),
        json!([new]),
    );
    let c = f.run().unwrap();
    let [file] = c.changed_files() else {
        panic!("one file")
    };
    assert_eq!((file.op(), file.previous_sha256()), (FileOp::Create, None));
    assert_eq!(
        file.diff(),
        format!("--- /dev/null\n+++ b/{new}\n@@ -0,0 +1 @@\n+export const New = () => null;\n")
    );
    assert_eq!(f.policy.calls.load(Ordering::SeqCst), 1 + 1 + 1 + 2 + 1);

    let err = finalize(&f, None).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_CREATE_PROOF");
    f.tree.0.insert(p(new).collision_key());
    assert_eq!(f.code(), "REPOSITORY_PATCH_CREATE_EXISTS");
    f.tree.0.clear();
    // An ungranted new file next to a granted one.
    f.write("app/modules/support/ui/Other.jsx", b"x\n");
    assert_eq!(f.code(), "REPOSITORY_PATCH_WORKSPACE_SET");
}

/// Binds the fixture's approval (with `create_absence` as the proof) and finalises its tree.
fn finalize(
    f: &Fixture,
    create_absence: Option<&dyn CreateAbsence>,
) -> Result<RepositoryPatchCandidate, FinalizeError> {
    let approved = f.approve(&f.snapshot, create_absence)?;
    finalize_repository_patch(&approved, &f.workspace, &f.proposal)
}

#[test]
fn a_granted_delete_finalises_and_an_ungranted_one_is_denied() {
    let mut f = Fixture::with(
        json!({"delete_paths": [SCHEMAS]}),
        &[(SERVICE, BEFORE), (SCHEMAS, SCHEMAS_TEXT)],
    );
    std::fs::remove_file(f.root().join(SCHEMAS)).unwrap();
    f.proposal = proposal(json!([{"path": SCHEMAS, "op": "delete"}]), json!([SCHEMAS]));
    let c = f.run().unwrap();
    let [file] = c.changed_files() else {
        panic!("one file")
    };
    assert_eq!(file.op(), FileOp::Delete);
    assert_eq!(
        file.previous_sha256(),
        Some(&Sha256::of(SCHEMAS_TEXT.as_bytes()))
    );
    assert_eq!((file.new_sha256(), file.content()), (None, None));
    assert_eq!(
        file.diff(),
        format!("--- a/{SCHEMAS}\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-class Schema:\n-    pass\n")
    );
    // The provider must not smuggle content into a delete.
    f.proposal = proposal(
        json!([{"path": SCHEMAS, "op": "delete", "content": ""}]),
        json!([SCHEMAS]),
    );
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_MISMATCH");
    // Deleting the other (ungranted) file is a harvest delete that is not granted.
    std::fs::remove_file(f.root().join(SERVICE)).unwrap();
    assert_eq!(f.code(), "REPOSITORY_PATCH_WORKSPACE_OP");
}

#[test]
fn several_changes_are_sorted_by_path_and_counted() {
    let mut f = Fixture::standard();
    f.write(SERVICE, AFTER.as_bytes());
    f.write(SCHEMAS, b"class Schema:\n    x: int\n");
    f.proposal = proposal(
        json!([{"path": SERVICE, "op": "update", "content": AFTER}, {"path": SCHEMAS, "op": "update", "content": "class Schema:\n    x: int\n"}]),
        json!([SERVICE, SCHEMAS]),
    );
    let c = f.run().unwrap();
    let paths: Vec<&str> = c
        .changed_files()
        .iter()
        .map(|x| x.path().as_str())
        .collect();
    assert_eq!(paths, [SCHEMAS, SERVICE]);
    assert_eq!(c.summary(), "Approved repository file operations: 2.");
}

#[test]
fn violation_messages_are_bounded_and_escaped() {
    use archive::{Violation, ViolationKind};
    let many: Vec<Violation> = (0..25)
        .map(|i| Violation {
            kind: ViolationKind::OutsideAllowlist,
            path: format!("x{i}"),
        })
        .collect();
    let f = Fixture::standard();
    let approved = f.approve(&f.snapshot, None).unwrap();
    let text = describe_violations(&approved, &many);
    assert!(text.starts_with("outside_allowlist:x0, outside_allowlist:x1"));
    assert!(text.ends_with("outside_allowlist:x19, and 5 more"));
    let hostile = [Violation {
        kind: ViolationKind::UnsafePath,
        path: "a\u{1b}[2J\nb\u{202e}c\u{200b}".into(),
    }];
    // Bidi and zero-width characters used to pass through (only C0/C1 were escaped).
    assert_eq!(
        describe_violations(&approved, &hostile),
        "unsafe_path:a\\x1b[2J\\nb\\u202ec\\u200b"
    );
}

/// A staged tree that writes a path the snapshot excluded (a committed executable, a symlink)
/// keeps the `WORKSPACE_SCOPE` code and `outside_allowlist` kind, and says why the path can never
/// be edited; the reason comes from the host's tree, not from the staged tree.
#[test]
fn an_excluded_entry_written_in_the_tree_names_the_real_reason() {
    use snapshot::EntryKind;
    let script = "app/modules/support/run.sh";
    let link = "app/modules/support/current";
    let other = "app/modules/support/new.py";
    let f = Fixture::standard();
    f.write(SERVICE, AFTER.as_bytes());
    for path in [script, link, other] {
        f.write(path, b"echo hi\n");
    }
    let tree = Excluding(BTreeMap::from([
        (script, EntryKind::Executable),
        (link, EntryKind::Symlink),
    ]));
    let err = finalize(&f, Some(&tree)).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_WORKSPACE_SCOPE");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "outside_allowlist:{script} (committed executable (100755), excluded from the snapshot, never editable)"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "outside_allowlist:{link} (symlink (120000), excluded from the snapshot, never editable)"
        )),
        "{text}"
    );
    // A path the tree does not hold is named as before.
    assert!(
        text.contains(&format!("outside_allowlist:{other}")),
        "{text}"
    );
    assert!(!text.contains(&format!("{other} (")), "{text}");
    assert!(!text.contains("echo"), "{text}");

    // Without a tree to ask, the message is the old one.
    let err = finalize(&f, None).unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_WORKSPACE_SCOPE");
    assert!(!err.to_string().contains("never editable"), "{err}");
}

#[test]
fn a_manifest_file_outside_the_selection_is_said_to_be_not_granted() {
    use archive::{Violation, ViolationKind};
    let f = Fixture::standard();
    let mut manifest = f.snapshot.file_manifest().clone();
    manifest.insert(p("docs/guide.md"), Sha256::of(b"guide\n"));
    let snapshot = evidence("plan-1", manifest);
    let approved = f.approve(&snapshot, None).unwrap();
    let violations = [
        Violation {
            kind: ViolationKind::OutsideAllowlist,
            path: "docs/guide.md".into(),
        },
        Violation {
            kind: ViolationKind::Symlink,
            path: "docs/guide.md".into(),
        },
    ];
    assert_eq!(
        describe_violations(&approved, &violations),
        "outside_allowlist:docs/guide.md (in the snapshot but not editable under this approval), \
         symlink:docs/guide.md"
    );
}

/// A proposal derived from the staged tree claims exactly the observed changes (updates, creates,
/// deletes), finalises, is stable for the same tree, and leaves every check to finalisation.
#[test]
fn a_proposal_derived_from_the_staged_tree_finalises() {
    let new = "app/modules/support/ui/New.jsx";
    let mut f = Fixture::with(
        json!({"create_paths": [new], "delete_paths": [SCHEMAS]}),
        &[(SERVICE, BEFORE), (SCHEMAS, SCHEMAS_TEXT)],
    );
    // No change yet: an empty claim, which finalisation refuses.
    f.proposal = crate::proposal_from_staged_tree(&f.context, &f.workspace).unwrap();
    assert!(f.proposal.changed_files.is_empty());
    assert_eq!(f.code(), "REPOSITORY_PATCH_PROPOSAL_STATUS");

    f.write(SERVICE, AFTER.as_bytes());
    f.write(new, b"export const New = () => null;\n");
    std::fs::remove_file(f.root().join(SCHEMAS)).unwrap();
    f.proposal = crate::proposal_from_staged_tree(&f.context, &f.workspace).unwrap();
    assert_eq!(f.proposal.provider_id, crate::STAGED_TREE_PROVIDER_ID);
    assert!(f.proposal.proposal_id.starts_with("staged-"));
    assert_eq!(f.proposal.proposal_id.len(), "staged-".len() + 32);
    let claims: Vec<(&str, FileOp)> = f
        .proposal
        .changed_files
        .iter()
        .map(|c| (c.path.as_str(), c.op))
        .collect();
    assert_eq!(
        claims,
        [
            (SCHEMAS, FileOp::Delete),
            (SERVICE, FileOp::Update),
            (new, FileOp::Create)
        ]
    );
    let c = f.run().unwrap();
    assert_eq!(c.changed_files().len(), 3);
    assert_eq!(c.proposal_id(), f.proposal.proposal_id);
    let again = crate::proposal_from_staged_tree(&f.context, &f.workspace).unwrap();
    assert_eq!(again, f.proposal, "the same tree gives the same proposal");

    // Violations are finalisation's to report, with its own codes.
    f.write("app/modules/support/ui/Other.jsx", b"x\n");
    f.proposal = crate::proposal_from_staged_tree(&f.context, &f.workspace).unwrap();
    assert_eq!(f.code(), "REPOSITORY_PATCH_WORKSPACE_SET");
}
