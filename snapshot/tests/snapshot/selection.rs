//! `verify_selected_baseline` (reference §4.2, every code in order), `select_read_only_files`
//! (§4.3 and the §15 inventory), classifiers and host policy as the selection checks use them.

use std::sync::Mutex;

use pretty_assertions::assert_eq;
use serde_json::json;
use snapshot::{
    ApprovedExecutionContext, BaselineFiles, DefaultPathGuard, MAX_READ_ONLY_INSPECTION_BYTES,
    MAX_READ_ONLY_INSPECTION_FILES, PathGuard, RepoPath, RepositorySnapshotEvidence, SnapshotError,
    select_read_only_files, verify_selected_baseline,
};
use vocab::Sha256;

use crate::support::{
    SCHEMAS, SCHEMAS_TEXT, SERVICE, SERVICE_TEXT, context, context_with, evidence, evidence_value,
    p,
};

/// A host policy that records every call and refuses the listed paths with its own error.
#[derive(Debug, Default)]
struct RecordingPolicy {
    calls: Mutex<Vec<String>>,
    refuse: Vec<&'static str>,
}

impl RecordingPolicy {
    fn refusing(refuse: &[&'static str]) -> Self {
        Self {
            calls: Mutex::default(),
            refuse: refuse.to_vec(),
        }
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl PathGuard for RecordingPolicy {
    fn validate_path(&self, path: &RepoPath) -> Result<(), SnapshotError> {
        self.calls.lock().unwrap().push(path.as_str().to_owned());
        if self.refuse.contains(&path.as_str()) {
            return Err(SnapshotError::PolicyConfig {
                detail: "custom refusal".into(),
            });
        }
        Ok(())
    }
}

fn baseline(files: &[(&str, &str)]) -> BaselineFiles {
    files.iter().map(|(k, v)| (p(k), (*v).to_owned())).collect()
}

fn standard_snapshot() -> RepositorySnapshotEvidence {
    evidence(&[(SERVICE, SERVICE_TEXT), (SCHEMAS, SCHEMAS_TEXT)])
}

fn verify(
    ctx: &ApprovedExecutionContext,
    snap: &RepositorySnapshotEvidence,
    selected: &[&str],
    files: &[(&str, &str)],
) -> Result<std::collections::BTreeMap<RepoPath, Sha256>, SnapshotError> {
    let selected: Vec<RepoPath> = selected.iter().map(|s| p(s)).collect();
    verify_selected_baseline(
        ctx,
        snap,
        &selected,
        &baseline(files),
        &DefaultPathGuard::default(),
        None,
    )
}

/// [`verify`] of the one edit most cases make: `SERVICE`, selected with its baseline text.
fn verify_service(
    ctx: &ApprovedExecutionContext,
    snap: &RepositorySnapshotEvidence,
) -> Result<std::collections::BTreeMap<RepoPath, Sha256>, SnapshotError> {
    verify(ctx, snap, &[SERVICE], &[(SERVICE, SERVICE_TEXT)])
}

fn code(result: Result<impl std::fmt::Debug, SnapshotError>) -> &'static str {
    result.unwrap_err().code()
}

#[test]
fn an_approved_selection_returns_the_expected_hashes() {
    let policy = RecordingPolicy::default();
    let got = verify_selected_baseline(
        &context(),
        &standard_snapshot(),
        &[p(SERVICE), p(SCHEMAS)],
        &baseline(&[(SERVICE, SERVICE_TEXT), (SCHEMAS, SCHEMAS_TEXT)]),
        &policy,
        None,
    )
    .unwrap();
    assert_eq!(
        got,
        [
            (p(SERVICE), Sha256::of(SERVICE_TEXT.as_bytes())),
            (p(SCHEMAS), Sha256::of(SCHEMAS_TEXT.as_bytes()))
        ]
        .into_iter()
        .collect()
    );
    // Baseline keys (mapping order), then each selected path.
    assert_eq!(policy.calls(), [SCHEMAS, SERVICE, SERVICE, SCHEMAS]);
}

#[test]
fn identity_and_version_are_checked_first() {
    let v2 = context_with(|m| {
        m.insert(
            "schema_version".into(),
            json!("managed_refinement.execution_context.v2"),
        );
    });
    // Even an otherwise empty selection reports the version first.
    assert_eq!(
        code(verify(&v2, &standard_snapshot(), &[], &[])),
        "REPOSITORY_PATCH_CONTEXT_VERSION"
    );
    for (field, value) in [
        ("plan_id", json!("plan-2")),
        ("request_id", json!("request-2")),
        ("app_id", json!("app-2")),
        ("repository_full_name", json!("acme/other")),
        ("baseline_commit_sha", json!("f".repeat(40))),
        (
            "snapshot_digest",
            json!(format!("sha256:{}", "2".repeat(64))),
        ),
    ] {
        let mut v = evidence_value(&[(SERVICE, SERVICE_TEXT)]);
        v[field] = value;
        let snap = RepositorySnapshotEvidence::from_json(&v.to_string()).unwrap();
        assert_eq!(
            code(verify_service(&context(), &snap)),
            "REPOSITORY_PATCH_SNAPSHOT_IDENTITY",
            "{field}"
        );
    }
}

#[test]
fn selection_shape_budget_and_grants_come_next_in_order() {
    let snap = standard_snapshot();
    let ctx = context();
    assert_eq!(
        code(verify(&ctx, &snap, &[], &[])),
        "REPOSITORY_PATCH_SELECTION"
    );
    let twin = "app/modules/support/backend/Service.py";
    let err = verify(&ctx, &snap, &[SERVICE, twin], &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPOSITORY_PATCH_SELECTION: selected paths must be unique and nonempty"
    );
    let many: Vec<String> = (0..51)
        .map(|i| format!("app/modules/support/f{i}.py"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let err = verify(&ctx, &snap, &many, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPOSITORY_PATCH_SELECTION: selected paths exceed repository budget"
    );
    // 49 selected + 2 creates also exceeds the budget.
    let creating = context_with(|m| {
        m.insert(
            "create_paths".into(),
            json!(["app/modules/support/n1.py", "app/modules/support/n2.py"]),
        );
    });
    assert_eq!(
        code(verify(&creating, &snap, &many[..49], &[])),
        "REPOSITORY_PATCH_SELECTION"
    );
    let deleting = context_with(|m| {
        m.insert("delete_paths".into(), json!([SCHEMAS]));
    });
    assert_eq!(
        code(verify_service(&deleting, &snap)),
        "REPOSITORY_PATCH_GRANTS"
    );
}

#[test]
fn baseline_keys_pass_host_policy_before_the_set_comparison() {
    let snap = standard_snapshot();
    let ctx = context();
    let cases: [(&[(&str, &str)], &str); 3] = [
        // A protected baseline key is refused even though the set also differs.
        (
            &[(".github/workflows/ci.yml", "x")],
            "REPOSITORY_PATCH_HOST_POLICY",
        ),
        (&[(SCHEMAS, SCHEMAS_TEXT)], "REPOSITORY_PATCH_BASELINE_SET"),
        (
            &[(SERVICE, SERVICE_TEXT), (SCHEMAS, SCHEMAS_TEXT)],
            "REPOSITORY_PATCH_BASELINE_SET",
        ),
    ];
    for (files, want) in cases {
        assert_eq!(code(verify(&ctx, &snap, &[SERVICE], files)), want);
    }
    // A custom policy's own error propagates unchanged.
    let policy = RecordingPolicy::refusing(&[SERVICE]);
    let err = verify_selected_baseline(
        &ctx,
        &snap,
        &[p(SERVICE)],
        &baseline(&[(SERVICE, SERVICE_TEXT)]),
        &policy,
        None,
    )
    .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_POLICY_CONFIG");
}

#[test]
fn a_colliding_manifest_is_refused() {
    let snap = evidence(&[
        (SERVICE, SERVICE_TEXT),
        ("app/modules/support/backend/SERVICE.py", "x"),
    ]);
    assert_eq!(
        code(verify_service(&context(), &snap)),
        "REPOSITORY_PATCH_MANIFEST_COLLISION"
    );
}

#[test]
fn create_grants_are_checked_in_reference_order() {
    let snap = standard_snapshot();
    let with_create = |allowed: &[&str], create: &str| {
        let mut scopes = vec!["app/modules/support/"];
        scopes.extend_from_slice(allowed);
        context_with(|m| {
            m.insert("allowed_paths".into(), json!(scopes));
            m.insert("create_paths".into(), json!([create]));
        })
    };
    let cases = [
        (
            with_create(&[], "app/modules/support/token.txt"),
            "REPOSITORY_PATCH_SECRET_PATH",
        ),
        (
            with_create(&["app/security"], "app/security/secrets.yaml"),
            "REPOSITORY_PATCH_SECRET_PATH",
        ),
        (
            with_create(&[".env.example"], ".env.example"),
            "REPOSITORY_PATCH_ENV_TEMPLATE",
        ),
        (
            with_create(&[], "app/modules/support/backend/SERVICE.py"),
            "REPOSITORY_PATCH_CREATE_EXISTS",
        ),
        (
            with_create(&[".github"], ".github/workflows/new.yml"),
            "REPOSITORY_PATCH_HOST_POLICY",
        ),
        (
            with_create(&[], "app/modules/support/new.py"),
            "REPOSITORY_PATCH_CREATE_PROOF",
        ),
    ];
    for (ctx, want) in cases {
        assert_eq!(code(verify_service(&ctx, &snap)), want);
    }
    let err = verify(
        &with_create(&[], "app/modules/support/new.py"),
        &snap,
        &[],
        &[],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPOSITORY_PATCH_CREATE_PROOF: complete baseline tree proof is required"
    );
}

#[test]
fn selected_paths_are_checked_in_reference_order() {
    let token = "app/modules/support/token.txt";
    let snap = evidence(&[
        (SERVICE, SERVICE_TEXT),
        (token, "t"),
        (".env.example", "A=\n"),
        ("app/other.py", "o"),
        ("app/security/secrets.yaml", "secrets:\n"),
    ]);
    let ctx = context();
    assert_eq!(
        code(verify(&ctx, &snap, &[token], &[(token, "t")])),
        "REPOSITORY_PATCH_SECRET_PATH"
    );
    let env_ctx = context_with(|m| {
        m.insert("allowed_paths".into(), json!([".env.example"]));
    });
    assert_eq!(
        code(verify(
            &env_ctx,
            &snap,
            &[".env.example"],
            &[(".env.example", "A=\n")]
        )),
        "REPOSITORY_PATCH_ENV_TEMPLATE"
    );
    assert_eq!(
        code(verify(
            &ctx,
            &snap,
            &["app/other.py"],
            &[("app/other.py", "o")]
        )),
        "REPOSITORY_PATCH_SCOPE"
    );
    for (field, scope) in [
        ("prohibited_paths", "APP/Modules/Support/Backend"),
        ("read_only_paths", "app/modules/support/BACKEND/"),
    ] {
        let scoped = context_with(|m| {
            m.insert(field.into(), json!([scope]));
        });
        let err = verify_service(&scoped, &snap).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("REPOSITORY_PATCH_SCOPE: '{SERVICE}' is not editable"),
            "{field}"
        );
    }
    let stale = verify(
        &ctx,
        &snap,
        &[SERVICE],
        &[(SERVICE, "def answer():\n    return 3\n")],
    );
    assert_eq!(
        stale.unwrap_err().to_string(),
        format!("REPOSITORY_PATCH_BASELINE_HASH: '{SERVICE}' differs from approved snapshot")
    );
    // The secrets contract is content-gated later, not refused here.
    let contract_ctx = context_with(|m| {
        m.insert("allowed_paths".into(), json!(["app/security"]));
    });
    verify(
        &contract_ctx,
        &snap,
        &["app/security/secrets.yaml"],
        &[("app/security/secrets.yaml", "secrets:\n")],
    )
    .unwrap();
}

#[test]
fn a_protected_descendant_of_a_broad_scope_is_refused_by_the_default_policy() {
    let snap = evidence(&[
        (".github/workflows/ci.yml", "on: push\n"),
        (".vscode/settings.json", "{}"),
        ("src/lib.rs", ""),
    ]);
    let ctx = context_with(|m| {
        m.insert("allowed_paths".into(), json!([".github", ".vscode", "src"]));
    });
    for path in [".github/workflows/ci.yml", ".vscode/settings.json"] {
        let text = if path.ends_with("ci.yml") {
            "on: push\n"
        } else {
            "{}"
        };
        assert_eq!(
            code(verify(&ctx, &snap, &[path], &[(path, text)])),
            "REPOSITORY_PATCH_HOST_POLICY",
            "{path}"
        );
    }
    verify(&ctx, &snap, &["src/lib.rs"], &[("src/lib.rs", "")]).unwrap();
}

// ---- read-only inspection selection -------------------------------------------------------

const TEST_FILE: &str = "app/modules/support/tests/test_service.py";
const TEST_TEXT: &str = "def test_answer():\n    assert answer() == 1\n";

fn read_only_context() -> ApprovedExecutionContext {
    context_with(|m| {
        m.insert(
            "read_only_paths".into(),
            json!(["app/modules/support/tests/"]),
        );
    })
}

fn read_only_snapshot() -> RepositorySnapshotEvidence {
    evidence(&[(SERVICE, SERVICE_TEXT), (TEST_FILE, TEST_TEXT)])
}

fn select(
    ctx: &ApprovedExecutionContext,
    snap: &RepositorySnapshotEvidence,
    selected: &[&str],
    files: &[(&str, &str)],
    policy: &dyn PathGuard,
    limits: (usize, usize),
) -> Result<BaselineFiles, SnapshotError> {
    let selected: Vec<RepoPath> = selected.iter().map(|s| p(s)).collect();
    select_read_only_files(
        ctx,
        snap,
        &selected,
        &baseline(files),
        policy,
        limits.0,
        limits.1,
    )
}

const LIMITS: (usize, usize) = (
    MAX_READ_ONLY_INSPECTION_FILES,
    MAX_READ_ONLY_INSPECTION_BYTES,
);

#[test]
fn read_only_selection_is_accepted_inside_allowed_and_read_only_scopes() {
    let policy = RecordingPolicy::default();
    let got = select(
        &read_only_context(),
        &read_only_snapshot(),
        &[TEST_FILE],
        &[(TEST_FILE, TEST_TEXT)],
        &policy,
        LIMITS,
    )
    .unwrap();
    assert_eq!(got, baseline(&[(TEST_FILE, TEST_TEXT)]));
    assert_eq!(policy.calls(), [TEST_FILE]);
    // An empty selection is allowed.
    assert!(
        select(
            &read_only_context(),
            &read_only_snapshot(),
            &[],
            &[],
            &policy,
            LIMITS
        )
        .unwrap()
        .is_empty()
    );
    // The documented limits.
    assert_eq!(
        (
            MAX_READ_ONLY_INSPECTION_FILES,
            MAX_READ_ONLY_INSPECTION_BYTES
        ),
        (45, 8 * 1_048_576)
    );
}

#[test]
fn read_only_selection_requires_allowed_and_read_only_scope() {
    let policy = DefaultPathGuard::default();
    let snap = evidence(&[
        (TEST_FILE, TEST_TEXT),
        ("other/tests/t.py", "t"),
        (SERVICE, SERVICE_TEXT),
    ]);
    let missing_allowed = context_with(|m| {
        m.insert("read_only_paths".into(), json!(["other/tests"]));
    });
    let missing_read_only = context();
    let prohibited = context_with(|m| {
        m.insert(
            "read_only_paths".into(),
            json!(["app/modules/support/tests/"]),
        );
        m.insert(
            "prohibited_paths".into(),
            json!(["App/Modules/Support/Tests"]),
        );
    });
    for (ctx, path, text) in [
        (&missing_allowed, "other/tests/t.py", "t"),
        (&missing_read_only, TEST_FILE, TEST_TEXT),
        (&prohibited, TEST_FILE, TEST_TEXT),
    ] {
        let err = select(ctx, &snap, &[path], &[(path, text)], &policy, LIMITS).unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_PATCH_INSPECTION_SCOPE", "{path}");
    }
    // Read-only context cannot be selected as editable.
    let err = verify(
        &read_only_context(),
        &read_only_snapshot(),
        &[TEST_FILE],
        &[(TEST_FILE, TEST_TEXT)],
    )
    .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_SCOPE");
}

#[test]
fn read_only_selection_rejects_stale_or_unbounded_content() {
    let ctx = read_only_context();
    let snap = read_only_snapshot();
    let policy = DefaultPathGuard::default();
    let files = [(TEST_FILE, TEST_TEXT)];
    let stale = select(
        &ctx,
        &snap,
        &[TEST_FILE],
        &[(TEST_FILE, "changed")],
        &policy,
        LIMITS,
    );
    assert_eq!(code(stale), "REPOSITORY_PATCH_BASELINE_HASH");
    let mut other = evidence_value(&[(TEST_FILE, TEST_TEXT)]);
    other["plan_id"] = json!("plan-2");
    let replay = RepositorySnapshotEvidence::from_json(&other.to_string()).unwrap();
    assert_eq!(
        code(select(&ctx, &replay, &[TEST_FILE], &files, &policy, LIMITS)),
        "REPOSITORY_PATCH_SNAPSHOT_IDENTITY"
    );
    for limits in [
        (0, 10),
        (MAX_READ_ONLY_INSPECTION_FILES + 1, 10),
        (1, 0),
        (1, MAX_READ_ONLY_INSPECTION_BYTES + 1),
    ] {
        let err = select(&ctx, &snap, &[TEST_FILE], &files, &policy, limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "REPOSITORY_PATCH_INSPECTION_BUDGET: invalid file or byte limit"
        );
    }
    let err = select(&ctx, &snap, &[TEST_FILE], &files, &policy, (1, 5)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPOSITORY_PATCH_INSPECTION_BUDGET: contents exceed limit"
    );
    assert_eq!(
        code(select(&ctx, &snap, &[TEST_FILE], &[], &policy, LIMITS)),
        "REPOSITORY_PATCH_INSPECTION_SET"
    );
    assert_eq!(
        code(select(
            &ctx,
            &snap,
            &[TEST_FILE, TEST_FILE],
            &files,
            &policy,
            LIMITS
        )),
        "REPOSITORY_PATCH_INSPECTION_SELECTION"
    );
    let two = [(TEST_FILE, TEST_TEXT), (SERVICE, SERVICE_TEXT)];
    assert_eq!(
        code(select(
            &ctx,
            &snap,
            &[TEST_FILE, SERVICE],
            &two,
            &policy,
            (1, 100)
        )),
        "REPOSITORY_PATCH_INSPECTION_SELECTION"
    );
    let refusing = RecordingPolicy::refusing(&[TEST_FILE]);
    assert_eq!(
        code(select(&ctx, &snap, &[TEST_FILE], &files, &refusing, LIMITS)),
        "REPOSITORY_PATCH_POLICY_CONFIG"
    );
    let protected_ctx = context_with(|m| {
        m.insert("allowed_paths".into(), json!([".github"]));
        m.insert("read_only_paths".into(), json!([".github"]));
    });
    let protected_snap = evidence(&[(".github/workflows/ci.yml", "x")]);
    let got = select(
        &protected_ctx,
        &protected_snap,
        &[".github/workflows/ci.yml"],
        &[(".github/workflows/ci.yml", "x")],
        &policy,
        LIMITS,
    );
    assert_eq!(code(got), "REPOSITORY_PATCH_HOST_POLICY");
}

#[test]
fn read_only_selection_rejects_secret_and_template_paths() {
    let ctx = context_with(|m| {
        m.insert(
            "allowed_paths".into(),
            json!([".env.example", "app", "tests"]),
        );
        m.insert(
            "read_only_paths".into(),
            json!([".env.example", "app", "tests"]),
        );
    });
    let files = [
        (".env.example", "A=\n"),
        ("app/security/secrets.yaml", "secrets:\n"),
        ("tests/token.txt", "t"),
    ];
    let snap = evidence(&files);
    let policy = DefaultPathGuard::default();
    for ((path, text), want) in files.iter().zip([
        "REPOSITORY_PATCH_ENV_TEMPLATE",
        "REPOSITORY_PATCH_SECRET_PATH",
        "REPOSITORY_PATCH_SECRET_PATH",
    ]) {
        assert_eq!(
            code(select(
                &ctx,
                &snap,
                &[path],
                &[(path, text)],
                &policy,
                LIMITS
            )),
            want,
            "{path}"
        );
    }
}

#[test]
fn classifiers_are_segment_wise() {
    use snapshot::{is_repository_env_template_path, is_secret_sensitive_path};
    for path in [
        "a/b:token/c.txt",
        "deploy/Service-Role.json",
        "keys/ID_ED25519",
        "conf/private key.txt",
        "x/.env.production",
        "x/db.PASSWORD.bak",
        "certs/tls.KEY",
        "a/secret./b",
        "home/.npmrc",
    ] {
        assert!(is_secret_sensitive_path(path), "{path}");
    }
    for path in [
        "keys/id_ed25519.pub",
        "src/lexer.rs",
        "docs/environment.md",
        "a/keyboard.rs",
    ] {
        assert!(!is_secret_sensitive_path(path), "{path}");
    }
    assert!(!is_repository_env_template_path("sub/.env.example"));
    assert!(is_repository_env_template_path(".Env.Production.Example"));
}
