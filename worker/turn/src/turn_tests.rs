#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::*;
use crate::config::TurnConfig;
use crate::limits::{MAX_REQUEST_BYTES, MAX_STDERR_BYTES};
use crate::request::stdin_payload;
use crate::testkit::*;
use container::ImageFacts;
use container::WALL_SLACK;
use pretty_assertions::assert_eq;
use snapshot::DefaultPathGuard;
use snapshot::{ApprovedExecutionContext, ApprovedTurn, CreateAbsence, RepositorySnapshotEvidence};
use std::time::Duration;

fn config() -> TurnConfig {
    TurnConfig::parse(IMAGE, &image_id(), 75, 700_000).unwrap()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn output(status: &str, changes: serde_json::Value, archive: Option<&[u8]>) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "proposal": {
            "proposal_id": "agent-id",
            "provider_id": "agent",
            "provider_model": "secret-model",
            "status": status,
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            "summary": "def answer(): SOURCE ECHO",
            "rationale": "SOURCE ECHO",
            "changed_files": changes,
            "owned_paths": [SERVICE],
            "provider_events": [{"kind": "plan", "summary": "SOURCE ECHO"}],
        },
        "workspace_archive_base64": archive.map(b64),
    }))
    .unwrap()
}

const NEW_SERVICE: &str = "def answer():\n    return 2\n";

fn update_output() -> Vec<u8> {
    let archive = archive_of(&[(SERVICE, NEW_SERVICE)]);
    output(
        "completed",
        serde_json::json!([{"path": SERVICE, "op": "update", "content": NEW_SERVICE}]),
        Some(&archive),
    )
}

struct Fixture {
    context: ApprovedExecutionContext,
    snapshot: RepositorySnapshotEvidence,
    policy: DefaultPathGuard,
    absence: crate::testkit::ManifestAbsence,
}

impl Fixture {
    fn new(create: &[&str], delete: &[&str]) -> Self {
        Self {
            context: context(create, delete),
            snapshot: snapshot_evidence(),
            policy: DefaultPathGuard::default(),
            absence: crate::testkit::ManifestAbsence::default(),
        }
    }
    fn approve<'a>(
        &'a self,
        request: &'a CodingWorkerRequest,
        create_absence: Option<&'a dyn CreateAbsence>,
    ) -> Result<ApprovedTurn<'a>, TurnError> {
        approve(
            request,
            &self.context,
            &self.snapshot,
            &self.policy,
            create_absence,
        )
    }
    fn approved<'a>(&'a self, request: &'a CodingWorkerRequest) -> ApprovedTurn<'a> {
        self.approve(request, Some(&self.absence)).unwrap()
    }
    fn request(&self, editable: &[&str], read_only: &[&str]) -> CodingWorkerRequest {
        CodingWorkerRequest::for_context(
            &self.context,
            self.context.raw_request(),
            files(editable),
            files(read_only),
        )
    }
}

async fn run(
    fake: &FakeRuntime,
    fx: &Fixture,
    request: &CodingWorkerRequest,
) -> Result<RepositoryDockerTurn, TurnError> {
    run_with(fake, fx, request, Some(&fx.absence)).await
}

/// Binds the approval (with `create_absence` as the proof) and runs the turn.
async fn run_with(
    fake: &FakeRuntime,
    fx: &Fixture,
    request: &CodingWorkerRequest,
    create_absence: Option<&dyn CreateAbsence>,
) -> Result<RepositoryDockerTurn, TurnError> {
    let approved = fx.approve(request, create_absence)?;
    execute_repository_docker_turn(fake, request, &approved, &config()).await
}

fn removal(fake: &FakeRuntime) -> String {
    let (name, _) = fake.created.lock().unwrap().clone().unwrap();
    format!("remove:{name}")
}

/// How many removals the fake recorded.
fn removals(fake: &FakeRuntime) -> usize {
    fake.calls()
        .iter()
        .filter(|c| c.starts_with("remove:"))
        .count()
}

/// The runtime calls of a turn that got as far as waiting for its container, then `rest`.
fn through_wait<'a>(rest: &[&'a str]) -> Vec<&'a str> {
    let mut calls = vec![
        "image_inspect",
        "create",
        "inspect",
        "attach",
        "start",
        "stdin",
        "wait",
    ];
    calls.extend_from_slice(rest);
    calls
}

/// The turn of the one editable file `SERVICE`, which must fail: its error.
async fn failure(fake: &FakeRuntime, fx: &Fixture) -> TurnError {
    run(fake, fx, &fx.request(&[SERVICE], &[]))
        .await
        .unwrap_err()
}

/// A runtime whose container answers with the update and exits 137, the daemon saying `oom`
/// and recording `kill_events`.
fn exit_137(oom: bool, kill_events: &[&str]) -> FakeRuntime {
    let mut fake = FakeRuntime::new(&update_output());
    fake.exit_code = 137;
    fake.oom = oom;
    fake.kill_events = kill_events.iter().map(|e| (*e).to_owned()).collect();
    fake
}

/// The security options of an inspected container's host config.
fn security_opt(i: &mut bollard::models::ContainerInspectResponse) -> &mut Vec<String> {
    i.host_config
        .as_mut()
        .unwrap()
        .security_opt
        .as_mut()
        .unwrap()
}

#[tokio::test]
async fn only_scoped_input_is_transmitted_and_output_is_scrubbed() {
    let fx = Fixture::new(&[], &[]);
    let fake = FakeRuntime::new(&update_output());
    let turn = run(&fake, &fx, &fx.request(&[SERVICE], &[READ_ONLY_TEST]))
        .await
        .unwrap();
    assert_eq!(fake.calls(), through_wait(&["inspect", &removal(&fake)]));
    let stdin = fake.stdin_json();
    // The key *set* (order is checked on the raw bytes below; serde_json's map order depends on
    // whether a workspace crate enables its `preserve_order` feature).
    let mut keys: Vec<&String> = stdin.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "app_id",
            "build_family",
            "build_record_id",
            "change_class",
            "files",
            "raw_user_request",
            "read_only_files"
        ]
    );
    let raw = String::from_utf8(fake.stdin.lock().unwrap().clone().unwrap()).unwrap();
    assert!(raw.starts_with(r#"{"app_id":"app-1","build_family":"app_bundle","build_record_id":"build-1","change_class":"patch","raw_user_request":"Return 2 from answer.","files":{"#));
    assert_eq!(
        stdin["files"],
        serde_json::json!({SERVICE: "def answer():\n    return 1\n"})
    );
    assert_eq!(stdin["read_only_files"].as_object().unwrap().len(), 1);
    for forbidden in ["plan-1", "handoff-1", "snapshot-digest", COMMIT] {
        assert!(!raw.contains(forbidden), "{forbidden} leaked into stdin");
    }
    let proposal = &turn.proposal;
    assert_eq!(proposal.provider_id, "acp_docker");
    assert_eq!(proposal.provider_model, None);
    assert_eq!(proposal.usage, None);
    assert!(proposal.provider_events.is_empty());
    assert_eq!(proposal.summary, "Isolated repository coding turn.");
    assert_eq!(proposal.rationale, "Pending host verification.");
    assert_ne!(proposal.proposal_id, "agent-id");
    assert_eq!(proposal.error, None);
    assert_eq!(turn.usage.unwrap().total_tokens(), 120);
    assert!(
        !serde_json::to_string(proposal)
            .unwrap()
            .contains("SOURCE ECHO")
    );
    assert_eq!(
        turn.workspace_archive.unwrap().bytes(),
        archive_of(&[(SERVICE, NEW_SERVICE)])
    );
}

#[tokio::test]
async fn create_flags_are_exact() {
    let fx = Fixture::new(&[], &[]);
    let fake = FakeRuntime::new(&update_output());
    run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
    let body = fake.created_body();
    let (name, _) = fake.created.lock().unwrap().clone().unwrap();
    assert!(name.parse::<ContainerName>().is_ok());
    assert_eq!(body.image.as_deref(), Some(image_id().as_str()));
    assert_eq!(body.user.as_deref(), Some("10001:10001"));
    assert_eq!(body.tty, Some(false));
    assert_eq!(body.open_stdin, Some(true));
    assert_eq!(body.env, Some(vec![]));
    let labels = body.labels.unwrap();
    assert_eq!(labels["mozaiks.refinement.repository_turn"], "offline");
    let host = body.host_config.unwrap();
    assert_eq!(host.network_mode.as_deref(), Some("none"));
    assert_eq!(host.readonly_rootfs, Some(true));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    // The turn seccomp profile travels inline, exactly as shipped in the repository.
    let opts = host.security_opt.clone().unwrap();
    assert_eq!(opts.len(), 2);
    assert_eq!(opts[0], "no-new-privileges");
    let profile = opts[1].strip_prefix("seccomp=").unwrap();
    assert_eq!(profile, include_str!("../../container/seccomp/turn.json"));
    let parsed: serde_json::Value = serde_json::from_str(profile).unwrap();
    assert_eq!(parsed["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(host.shm_size, Some(1_048_576));
    assert_eq!(
        (host.pids_limit, host.memory, host.memory_swap),
        (Some(64), Some(805_306_368), Some(805_306_368))
    );
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.init, Some(true));
    assert_eq!(host.ipc_mode.as_deref(), Some("private"));
    assert_eq!(host.log_config.unwrap().typ.as_deref(), Some("none"));
    assert_eq!(host.binds, None);
    assert_eq!(host.mounts, None);
    assert_eq!(host.port_bindings, None);
    assert_eq!(host.privileged, Some(false));
    assert_eq!(host.tmpfs.unwrap().len(), 3);
}

#[tokio::test]
async fn invalid_expected_image_id_is_rejected_before_docker() {
    assert_eq!(
        TurnConfig::parse(IMAGE, "latest", 90, 1000)
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID"
    );
    assert_eq!(
        TurnConfig::parse("latest", &image_id(), 90, 1000)
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_IMAGE"
    );
    assert_eq!(
        TurnConfig::parse(IMAGE, &image_id(), 0, 1000)
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_WALL_BUDGET"
    );
    assert_eq!(
        TurnConfig::parse(IMAGE, &image_id(), 3601, 1000)
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_WALL_BUDGET"
    );
    assert_eq!(
        TurnConfig::parse(IMAGE, &image_id(), 90, 16_777_217)
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_ARCHIVE_BUDGET"
    );
}

#[tokio::test]
async fn changed_tag_is_rejected_after_image_inspect_only() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(&update_output());
    fake.image = Ok(ImageFacts {
        id: format!("sha256:{}", "cd".repeat(32)),
        env: vec![],
    });
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_IMAGE_ID_MISMATCH");
    assert_eq!(fake.calls(), vec!["image_inspect"]);
    assert!(fake.stdin.lock().unwrap().is_none());
}

#[tokio::test]
async fn missing_image_and_malformed_id() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(b"");
    fake.image = Err(RuntimeError::NotFound);
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_IMAGE_MISSING");
    fake.image = Ok(ImageFacts {
        id: "sha256:XYZ".into(),
        env: vec![],
    });
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_IMAGE_ID");
}

#[tokio::test]
async fn container_from_another_image_is_removed_and_never_started() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(&update_output());
    fake.tamper = Some(|i| i.image = Some(format!("sha256:{}", "ee".repeat(32))));
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_ISOLATION_MISMATCH");
    assert_eq!(
        fake.calls(),
        vec![
            "image_inspect",
            "create",
            "inspect",
            removal(&fake).as_str()
        ]
    );
}

#[tokio::test]
async fn every_isolation_field_is_verified_before_start() {
    type Tamper = fn(&mut bollard::models::ContainerInspectResponse);
    let tampers: Vec<(&str, Tamper)> = vec![
        ("network", |i| {
            i.host_config.as_mut().unwrap().network_mode = Some("bridge".into())
        }),
        ("readonly", |i| {
            i.host_config.as_mut().unwrap().readonly_rootfs = Some(false)
        }),
        ("binds", |i| {
            i.host_config.as_mut().unwrap().binds = Some(vec!["/:/host".into()])
        }),
        ("privileged", |i| {
            i.host_config.as_mut().unwrap().privileged = Some(true)
        }),
        ("capdrop", |i| {
            i.host_config.as_mut().unwrap().cap_drop = Some(vec![])
        }),
        ("capadd", |i| {
            i.host_config.as_mut().unwrap().cap_add = Some(vec!["SYS_ADMIN".into()])
        }),
        ("seccomp", |i| {
            i.host_config.as_mut().unwrap().security_opt = Some(vec![
                "no-new-privileges".into(),
                "seccomp=unconfined".into(),
            ]);
        }),
        ("seccomp daemon default", |i| {
            i.host_config.as_mut().unwrap().security_opt = Some(vec!["no-new-privileges".into()]);
        }),
        ("seccomp profile altered", |i| {
            let opts = security_opt(i);
            opts[1] = opts[1]
                .replacen("\"ptrace\"", "\"ptrace\", \"ptrace\"", 1)
                .replacen("SCMP_ACT_ERRNO", "SCMP_ACT_LOG", 1);
        }),
        ("seccomp extra option", |i| {
            let opts = security_opt(i);
            opts.push("apparmor=unconfined".into());
        }),
        ("shm size", |i| {
            i.host_config.as_mut().unwrap().shm_size = Some(64 * 1024 * 1024)
        }),
        ("shm size unset", |i| {
            i.host_config.as_mut().unwrap().shm_size = None
        }),
        ("pids", |i| {
            i.host_config.as_mut().unwrap().pids_limit = Some(65)
        }),
        ("memory", |i| {
            i.host_config.as_mut().unwrap().memory = Some(1)
        }),
        ("swap", |i| {
            i.host_config.as_mut().unwrap().memory_swap = Some(-1)
        }),
        ("cpus", |i| {
            i.host_config.as_mut().unwrap().nano_cpus = Some(2_000_000_000)
        }),
        ("init", |i| {
            i.host_config.as_mut().unwrap().init = Some(false)
        }),
        ("ipc", |i| {
            i.host_config.as_mut().unwrap().ipc_mode = Some("host".into())
        }),
        ("pid", |i| {
            i.host_config.as_mut().unwrap().pid_mode = Some("host".into())
        }),
        ("devices", |i| {
            i.host_config.as_mut().unwrap().devices =
                Some(vec![bollard::models::DeviceMapping::default()]);
        }),
        ("extra hosts", |i| {
            i.host_config.as_mut().unwrap().extra_hosts = Some(vec!["a:1.1.1.1".into()])
        }),
        ("log", |i| i.host_config.as_mut().unwrap().log_config = None),
        ("ulimits", |i| {
            i.host_config.as_mut().unwrap().ulimits = None
        }),
        ("tmpfs", |i| {
            i.host_config
                .as_mut()
                .unwrap()
                .tmpfs
                .as_mut()
                .unwrap()
                .insert("/tmp".into(), "rw,exec".into());
        }),
        ("mounts", |i| {
            i.mounts = Some(vec![bollard::models::MountPoint {
                typ: Some("bind".into()),
                ..Default::default()
            }]);
        }),
        ("user", |i| {
            i.config.as_mut().unwrap().user = Some("0:0".into())
        }),
        ("label", |i| i.config.as_mut().unwrap().labels = None),
        ("env", |i| {
            i.config.as_mut().unwrap().env = Some(vec!["CUSTOM_PROVIDER_TOKEN=x".into()])
        }),
        ("state", |i| i.state = None),
        ("name", |i| i.name = Some("/other".into())),
    ];
    let fx = Fixture::new(&[], &[]);
    for (label, tamper) in tampers {
        let mut fake = FakeRuntime::new(&update_output());
        fake.tamper = Some(tamper);
        let err = failure(&fake, &fx).await;
        assert_eq!(
            err.code(),
            "REPOSITORY_DOCKER_ISOLATION_MISMATCH",
            "{label}"
        );
        assert!(!fake.calls().contains(&"start".to_owned()), "{label}");
        assert_eq!(removals(&fake), 1, "{label}");
    }
    let mut fake = FakeRuntime::new(&update_output());
    fake.tamper = Some(|i| i.host_config = None);
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_INSPECT_FORMAT");
}

#[tokio::test]
async fn image_baked_secrets_are_rejected_before_create() {
    let fx = Fixture::new(&[], &[]);
    for secret in [
        "ANTHROPIC_API_KEY=sk-x",
        "CUSTOM_PROVIDER_TOKEN=",
        "SOME_API_KEY=1",
        "NOEQUALS",
    ] {
        let mut fake = FakeRuntime::new(&update_output());
        fake.image = Ok(ImageFacts {
            id: image_id(),
            env: vec!["PATH=/bin".into(), secret.into()],
        });
        let err = failure(&fake, &fx).await;
        assert_eq!(
            err.code(),
            "REPOSITORY_DOCKER_ISOLATION_MISMATCH",
            "{secret}"
        );
        assert_eq!(fake.calls(), vec!["image_inspect"]);
    }
    let mut fake = FakeRuntime::new(&update_output());
    let allowed = [
        "PATH=/x",
        "NODE_VERSION=1",
        "PYTHONPATH=/p",
        "LANG=C",
        "GPG_KEY=k",
        "MOZAIKS_FACTORY_APP_PATH=/a",
    ];
    fake.image = Ok(ImageFacts {
        id: image_id(),
        env: allowed.iter().map(|s| (*s).to_owned()).collect(),
    });
    run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
}

#[tokio::test]
async fn create_grant_round_trips_with_one_absence_proof() {
    let fx = Fixture::new(&[NEW_PAGE], &[]);
    let content = "export default function New() {}\n";
    let archive = archive_of(&[(NEW_PAGE, content)]);
    let out = output(
        "completed",
        serde_json::json!([{"path": NEW_PAGE, "op": "create", "content": content}]),
        Some(&archive),
    );
    let fake = FakeRuntime::new(&out);
    let turn = run(&fake, &fx, &fx.request(&[], &[])).await.unwrap();
    assert_eq!(*fx.absence.calls.lock().unwrap(), 1);
    let stdin = fake.stdin_json();
    assert_eq!(stdin["files"], serde_json::json!({}));
    assert_eq!(stdin["create_paths"], serde_json::json!([NEW_PAGE]));
    assert_eq!(stdin["delete_paths"], serde_json::json!([]));
    assert_eq!(turn.workspace_archive.unwrap().bytes(), archive);
}

#[tokio::test]
async fn delete_grant_round_trips_through_the_empty_marker() {
    let fx = Fixture::new(&[], &[SERVICE]);
    let out = output(
        "completed",
        serde_json::json!([{"path": SERVICE, "op": "delete", "content": null}]),
        Some(archive::EMPTY_ARCHIVE_MARKER),
    );
    let fake = FakeRuntime::new(&out);
    let turn = run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
    assert_eq!(
        turn.workspace_archive
            .as_ref()
            .map(archive::VerifiedArchive::bytes),
        Some(archive::EMPTY_ARCHIVE_MARKER)
    );
    assert_eq!(
        fake.stdin_json()["delete_paths"],
        serde_json::json!([SERVICE])
    );
    // The marker is refused when a selected file is not granted for deletion.
    let fx = Fixture::new(&[], &[SERVICE]);
    let fake = FakeRuntime::new(&out);
    let err = run(&fake, &fx, &fx.request(&[SERVICE, SCHEMAS], &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_INVALID_OUTPUT");
}

#[tokio::test]
async fn approval_failures_never_reach_docker() {
    // A create without a proof of absence.
    let fx = Fixture::new(&[NEW_PAGE], &[]);
    let fake = FakeRuntime::new(b"");
    let err = run_with(&fake, &fx, &fx.request(&[], &[]), None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_PATCH_CREATE_PROOF");
    // A changed baseline.
    let fx = Fixture::new(&[], &[]);
    let mut request = fx.request(&[SERVICE], &[]);
    request.files.insert(p(SERVICE), "changed\n".into());
    assert_eq!(
        run(&fake, &fx, &request).await.unwrap_err().code(),
        "REPOSITORY_PATCH_BASELINE_HASH"
    );
    // An unapproved inspection file (editable scope, not read-only).
    let request = fx.request(&[SERVICE], &[SCHEMAS]);
    assert_eq!(
        run(&fake, &fx, &request).await.unwrap_err().code(),
        "REPOSITORY_PATCH_INSPECTION_SCOPE"
    );
    // A task that differs from the approved request.
    let mut request = fx.request(&[SERVICE], &[]);
    request.raw_user_request = "something else".into();
    assert_eq!(
        run(&fake, &fx, &request).await.unwrap_err().code(),
        "REPOSITORY_DOCKER_CONTEXT_MISMATCH"
    );
    // No files at all.
    assert_eq!(
        run(&fake, &fx, &fx.request(&[], &[]))
            .await
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_FILE_BUDGET"
    );
    // The input budget.
    let mut request = fx.request(&[SERVICE], &[]);
    request.raw_user_request = "x".repeat(MAX_REQUEST_BYTES);
    assert_eq!(
        stdin_payload(&request, &fx.context).unwrap_err().code(),
        "REPOSITORY_DOCKER_REQUEST_BUDGET"
    );
    assert!(fake.calls().is_empty());
}

#[test]
fn review_feedback_is_an_extra_key_only_when_present() {
    let fx = Fixture::new(&[], &[]);
    let plain = fx.request(&[SERVICE], &[]);
    let bytes = stdin_payload(&plain, &fx.context).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        doc.get("review_feedback").is_none(),
        "the reference payload is unchanged"
    );
    let mut follow_up = plain.clone();
    let digest: vocab::Sha256 = format!("sha256:{}", "b".repeat(64)).parse().unwrap();
    follow_up.review_feedback = Some(
        crate::ReviewFeedback::new(
            &digest,
            Some("keep the API"),
            [("unit", vocab::GateVerdict::Failed)],
        )
        .unwrap(),
    );
    let bytes = stdin_payload(&follow_up, &fx.context).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        doc["review_feedback"],
        serde_json::json!({
            "supersedes_candidate": digest.to_string(),
            "note": "keep the API",
            "gates": [{"gate": "unit", "verdict": "failed"}],
        })
    );
    // Every other key is the plain request's.
    let mut rest = doc.as_object().unwrap().clone();
    rest.remove("review_feedback");
    let plain_doc: serde_json::Value =
        serde_json::from_slice(&stdin_payload(&plain, &fx.context).unwrap()).unwrap();
    assert_eq!(serde_json::Value::Object(rest), plain_doc);
}

#[tokio::test]
async fn ungranted_and_invalid_outputs_fail_closed_after_removal() {
    let fx = Fixture::new(&[], &[]);
    let content = "x\n";
    let ungranted = output(
        "completed",
        serde_json::json!([{"path": NEW_PAGE, "op": "create", "content": content}]),
        Some(&archive_of(&[(SERVICE, NEW_SERVICE), (NEW_PAGE, content)])),
    );
    let valid = String::from_utf8(update_output()).unwrap();
    let duplicate = valid.replacen(
        "{\"proposal\"",
        "{\"workspace_archive_base64\":null,\"proposal\"",
        1,
    );
    let extra = valid.replacen("{\"proposal\"", "{\"extra\":1,\"proposal\"", 1);
    let good_b64 = b64(&archive_of(&[(SERVICE, NEW_SERVICE)]));
    let bad_b64 = valid.replace(&good_b64, &format!("{}\\n", &good_b64));
    let unpadded = valid.replace(&good_b64, &format!("{good_b64}="));
    let url_alphabet = valid.replace(&good_b64, &format!("-_{}", &good_b64[2..]));
    let mut noncanonical = archive_of(&[(SERVICE, NEW_SERVICE)]);
    noncanonical[10] ^= 1; // the local header's modification time
    let noncanonical = output(
        "completed",
        serde_json::json!([{"path": SERVICE, "op": "update", "content": NEW_SERVICE}]),
        Some(&noncanonical),
    );
    let wrong_set = output(
        "completed",
        serde_json::json!([{"path": SERVICE, "op": "update", "content": NEW_SERVICE}]),
        Some(&archive_of(&[(SCHEMAS, "x\n")])),
    );
    let proposal_extra = valid.replacen("\"proposal_id\"", "\"injected\":true,\"proposal_id\"", 1);
    let nan = valid.replacen("\"status\"", "\"x\":NaN,\"status\"", 1);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("ungranted create", ungranted),
        ("duplicate key", duplicate.into_bytes()),
        ("extra key", extra.into_bytes()),
        ("bad base64", bad_b64.into_bytes()),
        ("padding", unpadded.into_bytes()),
        ("url alphabet", url_alphabet.into_bytes()),
        ("non-canonical archive", noncanonical),
        ("wrong entry set", wrong_set),
        ("extra proposal key", proposal_extra.into_bytes()),
        ("NaN", nan.into_bytes()),
        ("not JSON", b"hello".to_vec()),
        (
            "trailing data",
            [update_output(), b"\n{}".to_vec()].concat(),
        ),
        (
            "completed without archive",
            output("completed", serde_json::json!([]), None),
        ),
        (
            "failed with archive",
            output("failed", serde_json::json!([]), Some(b"x")),
        ),
    ];
    for (label, out) in cases {
        let fake = FakeRuntime::new(&out);
        let Err(err) = run(&fake, &fx, &fx.request(&[SERVICE], &[])).await else {
            panic!("{label} was accepted");
        };
        assert_eq!(err.code(), "REPOSITORY_DOCKER_INVALID_OUTPUT", "{label}");
        assert!(!err.to_string().contains("answer"), "{label}");
        assert_eq!(fake.calls().last().unwrap(), &removal(&fake), "{label}");
        assert_eq!(removals(&fake), 1, "{label}");
    }
}

#[test]
fn base64_is_standard_padded_and_strict() {
    use base64::Engine as _;
    let engine = base64::engine::general_purpose::STANDARD;
    assert!(engine.decode("YQ==").is_ok());
    for bad in ["YQ", "YQ=", "Y Q==", "YQ==\n", "YR==", "-_8="] {
        assert!(engine.decode(bad).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn failed_turn_returns_no_archive_and_keeps_usage() {
    let fx = Fixture::new(&[], &[]);
    let fake = FakeRuntime::new(&output("rejected_scope", serde_json::json!([]), None));
    let turn = run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
    assert_eq!(
        turn.proposal.status,
        snapshot::ProposalStatus::RejectedScope
    );
    assert_eq!(turn.workspace_archive, None);
    assert_eq!(
        turn.proposal.error.as_deref(),
        Some("Isolated coding turn reported rejected_scope.")
    );
    assert_eq!(turn.usage.unwrap().total_tokens(), 120);
    assert!(
        !serde_json::to_string(&turn.proposal)
            .unwrap()
            .contains("SOURCE ECHO")
    );
}

#[tokio::test]
async fn malformed_usage_does_not_invalidate_the_patch() {
    let fx = Fixture::new(&[], &[]);
    let text = String::from_utf8(update_output())
        .unwrap()
        .replace("\"total_tokens\":120", "\"total_tokens\":true");
    let fake = FakeRuntime::new(text.as_bytes());
    let turn = run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
    assert_eq!(turn.usage, None);
    assert_eq!(turn.proposal.usage, None);
}

#[tokio::test]
async fn removed_by_name_when_start_fails_or_create_response_is_lost() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(&update_output());
    fake.start_fails = true;
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_COMMAND_FAILED");
    assert_eq!(fake.calls().last().unwrap(), &removal(&fake));

    for mode in [CreateMode::LostResponse, CreateMode::BadId] {
        let mut fake = FakeRuntime::new(&update_output());
        fake.create_mode = mode;
        let err = failure(&fake, &fx).await;
        let expected = if mode == CreateMode::BadId {
            "REPOSITORY_DOCKER_CONTAINER_ID"
        } else {
            "REPOSITORY_DOCKER_COMMAND_FAILED"
        };
        assert_eq!(err.code(), expected);
        assert_eq!(
            fake.calls(),
            vec!["image_inspect", "create", removal(&fake).as_str()]
        );
    }
}

#[tokio::test]
async fn cleanup_failure_replaces_the_turn_result() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(&update_output());
    fake.remove_result = Err(RuntimeError::Failed { status: Some(500) });
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_CLEANUP_FAILED");
    fake.start_fails = true;
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_CLEANUP_FAILED");
    // Already gone counts as removed.
    let mut fake = FakeRuntime::new(&update_output());
    fake.remove_result = Err(RuntimeError::NotFound);
    run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
}

#[tokio::test]
async fn output_cap_applies_while_streaming() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(b"");
    fake.output = vec![
        OutputChunk::Stdout(b"12345".to_vec()),
        OutputChunk::Stdout(b"678901".to_vec()),
    ];
    let cfg = config().with_stdout_cap(10);
    let request = fx.request(&[SERVICE], &[]);
    let err = execute_repository_docker_turn(&fake, &request, &fx.approved(&request), &cfg)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_OUTPUT_LIMIT");
    assert_eq!(fake.calls().last().unwrap(), &removal(&fake));

    let mut fake = FakeRuntime::new(&update_output());
    fake.output
        .push(OutputChunk::Stderr(vec![b'e'; MAX_STDERR_BYTES + 1]));
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_OUTPUT_LIMIT");
    // Bounded stderr is discarded, never part of the result.
    let mut fake = FakeRuntime::new(&update_output());
    fake.output
        .insert(0, OutputChunk::Stderr(b"def answer(): leaked".to_vec()));
    run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
}

#[tokio::test]
async fn nonzero_exit_and_oom_have_distinct_codes() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(&update_output());
    fake.exit_code = 3;
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_WORKER_FAILED");
    assert_eq!(fake.calls().last().unwrap(), &removal(&fake));
    let err = failure(&exit_137(true, &[]), &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_OOM");
}

/// A container the daemon says someone else killed (a `docker kill`: exit 137, a recorded `kill`
/// event, no OOM) failed through the environment, not the agent; the same status with no kill
/// event (an `exit 137` from inside) and an OOM kill stay the turn's own failures.
#[tokio::test]
async fn r_outside_kill_is_an_environment_failure_not_the_agents() {
    let fx = Fixture::new(&[], &[]);
    let fake = exit_137(false, &["9"]);
    let err = failure(&fake, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_KILLED_EXTERNALLY");
    assert!(err.is_environment());
    let calls = fake.calls();
    let wait = calls.iter().position(|c| c == "wait").unwrap();
    assert_eq!(
        calls[wait + 1..],
        ["inspect".to_owned(), "events".to_owned(), removal(&fake)],
        "OOM fact, then the daemon's kill events, then removal"
    );

    let err = failure(&exit_137(false, &[]), &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_WORKER_FAILED");
    assert!(!err.is_environment());

    let err = failure(&exit_137(true, &["9"]), &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_OOM");
    assert!(!err.is_environment());

    // The daemon cannot say why: never blamed on the agent.
    let mut unknown = exit_137(false, &[]);
    unknown.events_result = Err(RuntimeError::Unavailable);
    let err = failure(&unknown, &fx).await;
    assert_eq!(err.code(), "REPOSITORY_DOCKER_UNAVAILABLE");
    assert!(err.is_environment());
    assert_eq!(unknown.calls().last().unwrap(), &removal(&unknown));
}

#[tokio::test(start_paused = true)]
async fn wall_deadline_kills_then_removes() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(b"");
    fake.wait_hangs = true;
    let started = tokio::time::Instant::now();
    let err = failure(&fake, &fx).await;
    assert_eq!(
        err.code(),
        "REPOSITORY_DOCKER_TIMEOUT",
        "{:?}",
        fake.calls()
    );
    // Virtual time: exactly the wall budget plus the slack elapsed.
    assert_eq!(started.elapsed(), Duration::from_secs(75) + WALL_SLACK);
    assert_eq!(fake.calls(), through_wait(&["kill", &removal(&fake)]));
}

#[test]
fn base64_text_is_bounded_before_decoding() {
    let fx = Fixture::new(&[], &[]);
    let request = fx.request(&[SERVICE], &[]);
    let limits = crate::output::OutputLimits::for_turn(&request, &fx.context, 12);
    assert_eq!(limits.max_base64_len(), 16);
    let archive = archive_of(&[(SERVICE, NEW_SERVICE)]);
    let out = output(
        "completed",
        serde_json::json!([{"path": SERVICE, "op": "update", "content": NEW_SERVICE}]),
        Some(&archive),
    );
    let err = crate::output::parse_turn_output(out, &limits).unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPOSITORY_DOCKER_INVALID_OUTPUT: archive exceeds the budget"
    );
}

/// Cancels a turn (drops its future) once the fake has recorded `call`, then waits for the
/// removals the dropped guard handed off.
async fn cancel_at(fake: &FakeRuntime, call: &str) {
    let fx = Fixture::new(&[], &[]);
    let request = fx.request(&[SERVICE], &[]);
    let approved = fx.approved(&request);
    let cfg = config();
    let turn = execute_repository_docker_turn(fake, &request, &approved, &cfg);
    tokio::select! {
        result = turn => panic!("the turn finished before {call}: {:?}", result.map(|_| ())),
        () = fake.reached(call) => {}
    }
    assert_eq!(
        container::settle_pending_removals(Duration::from_secs(60)).await,
        0
    );
}

#[tokio::test]
async fn a_turn_cancelled_mid_run_removes_its_container() {
    let mut fake = FakeRuntime::new(b"");
    fake.wait_hangs = true;
    cancel_at(&fake, "wait").await;
    assert_eq!(fake.calls(), through_wait(&[&removal(&fake)]));
}

#[tokio::test]
async fn a_turn_cancelled_mid_create_removes_the_late_container_too() {
    let mut fake = FakeRuntime::new(b"");
    fake.create_hangs = true;
    cancel_at(&fake, "create").await;
    // The daemon may finish a create the turn stopped waiting for: removed, then removed again.
    assert_eq!(
        fake.calls(),
        vec!["image_inspect", "create", &removal(&fake), &removal(&fake)]
    );
}

#[tokio::test]
async fn a_turn_cancelled_before_create_touches_nothing() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(b"");
    fake.image = Err(RuntimeError::Unavailable);
    let request = fx.request(&[SERVICE], &[]);
    let err = run(&fake, &fx, &request).await.unwrap_err();
    assert_eq!(err.code(), "REPOSITORY_DOCKER_UNAVAILABLE");
    assert_eq!(
        container::settle_pending_removals(Duration::from_secs(60)).await,
        0
    );
    assert_eq!(fake.calls(), vec!["image_inspect"]);
}

#[tokio::test]
async fn a_failed_removal_of_a_cancelled_turn_is_not_retried_forever() {
    let mut fake = FakeRuntime::new(b"");
    fake.wait_hangs = true;
    fake.remove_result = Err(RuntimeError::Failed { status: Some(500) });
    cancel_at(&fake, "wait").await;
    assert_eq!(fake.calls().last().unwrap(), &removal(&fake));
    assert_eq!(removals(&fake), 1);
}

#[tokio::test]
async fn every_explicit_path_removes_exactly_once_and_hands_nothing_off() {
    let fx = Fixture::new(&[], &[]);
    let ok = FakeRuntime::new(&update_output());
    let mut start_fails = FakeRuntime::new(&update_output());
    start_fails.start_fails = true;
    let mut exit_fails = FakeRuntime::new(&update_output());
    exit_fails.exit_code = 2;
    let invalid = FakeRuntime::new(b"not json");
    for (label, fake) in [
        ("success", ok),
        ("start fails", start_fails),
        ("exit fails", exit_fails),
        ("invalid output", invalid),
    ] {
        let _ = run(&fake, &fx, &fx.request(&[SERVICE], &[])).await;
        assert_eq!(
            container::settle_pending_removals(Duration::from_secs(60)).await,
            0
        );
        assert_eq!(removals(&fake), 1, "{label}");
        assert_eq!(fake.calls().last().unwrap(), &removal(&fake), "{label}");
    }
}

#[tokio::test]
async fn containers_carry_their_owner_and_deadline() {
    let fx = Fixture::new(&[], &[]);
    let fake = FakeRuntime::new(&update_output());
    let before = vocab::now_unix();
    let turn = run(&fake, &fx, &fx.request(&[SERVICE], &[])).await.unwrap();
    let labels = fake.created_body().labels.unwrap();
    assert_eq!(labels["mozaiks.refinement.repository_turn"], "offline");
    assert_eq!(labels[container::ATTEMPT_LABEL_KEY], turn.attempt.as_str());
    let deadline: i64 = labels[container::DEADLINE_LABEL_KEY].parse().unwrap();
    let lifetime = i64::try_from(config().turn_lifetime().as_secs()).unwrap();
    assert!(deadline > before + lifetime && deadline <= vocab::now_unix() + lifetime + 1);
    let me = container::local_owner();
    assert_eq!(labels[container::HOST_LABEL_KEY], me.host().as_str());
    assert_eq!(labels.len(), 7);
    // A daemon that drops an owner label fails the pre-start inspection.
    let mut fake = FakeRuntime::new(&update_output());
    fake.tamper = Some(|i| {
        i.config
            .as_mut()
            .unwrap()
            .labels
            .as_mut()
            .unwrap()
            .remove(container::DEADLINE_LABEL_KEY);
    });
    let err = failure(&fake, &fx).await;
    assert_eq!(
        err.to_string(),
        "REPOSITORY_DOCKER_ISOLATION_MISMATCH: Config.Labels"
    );
}

#[test]
fn turn_config_keeps_its_checks() {
    let cfg = config();
    assert_eq!(cfg.turn_lifetime(), Duration::from_secs(75) + WALL_SLACK);
    let longest = TurnConfig::parse(IMAGE, &image_id(), container::MAX_WALL_SECONDS, 1).unwrap();
    assert_eq!(
        longest.turn_lifetime(),
        Duration::from_secs(container::MAX_WALL_SECONDS) + WALL_SLACK
    );
    assert_eq!(
        TurnConfig::parse(IMAGE, &image_id(), u64::MAX, 1)
            .unwrap_err()
            .code(),
        "REPOSITORY_DOCKER_WALL_BUDGET"
    );
}

async fn run_under(
    fake: &FakeRuntime,
    fx: &Fixture,
    runtime: &str,
) -> Result<RepositoryDockerTurn, TurnError> {
    let config = config().with_runtime(Some(runtime.parse().unwrap()));
    let request = fx.request(&[SERVICE], &[READ_ONLY_TEST]);
    execute_repository_docker_turn(fake, &request, &fx.approved(&request), &config).await
}

/// Under runsc the daemon's registration is read before create, and the container gets the runsc
/// profile's pids limit (verified back by the inspection); under runc `/info` is never read.
#[tokio::test]
async fn runsc_turn_checks_the_registration_and_uses_its_pids_limit() {
    let fx = Fixture::new(&[], &[]);
    let fake = FakeRuntime::new(&update_output());
    run_under(&fake, &fx, "runsc").await.unwrap();
    let calls = fake.calls();
    assert_eq!(&calls[..3], ["image_inspect", "info", "create"]);
    let host = fake.created_body().host_config.unwrap();
    assert_eq!(host.pids_limit, Some(container::RUNSC_PIDS_LIMIT));
    assert_eq!(host.runtime.as_deref(), Some("runsc"));
    assert_eq!(calls.last().unwrap(), &removal(&fake));

    let fake = FakeRuntime::new(&update_output());
    run_under(&fake, &fx, "runc").await.unwrap();
    assert!(!fake.calls().contains(&"info".to_owned()));
    let host = fake.created_body().host_config.unwrap();
    assert_eq!(host.pids_limit, Some(container::RUNC_PIDS_LIMIT));
}

/// A daemon whose `runsc` is another binary or runs with other arguments is refused before any
/// container exists.
#[tokio::test]
async fn runsc_turn_refuses_an_unexpected_registration() {
    use container::{RUNSC_PATH, RegisteredRuntime};
    let fx = Fixture::new(&[], &[]);
    for (label, entry) in [
        ("missing", None),
        (
            "path",
            Some(RegisteredRuntime {
                path: Some("/tmp/runsc".to_owned()),
                args: vec!["--network=none".to_owned(), "--oci-seccomp".to_owned()],
            }),
        ),
        (
            "runtimeArgs",
            Some(RegisteredRuntime {
                path: Some(RUNSC_PATH.to_owned()),
                args: vec!["--network=host".to_owned(), "--oci-seccomp".to_owned()],
            }),
        ),
    ] {
        let mut fake = FakeRuntime::new(&update_output());
        match entry {
            None => {
                fake.runtimes.remove("runsc");
            }
            Some(e) => {
                fake.runtimes.insert("runsc".to_owned(), e);
            }
        }
        let err = run_under(&fake, &fx, "runsc").await.unwrap_err();
        assert_eq!(err.code(), "REPOSITORY_DOCKER_RUNTIME_MISMATCH", "{label}");
        assert_eq!(fake.calls(), vec!["image_inspect", "info"], "{label}");
    }
}

/// The inspection refuses a runsc container whose pids limit is runc's.
#[tokio::test]
async fn runsc_inspection_refuses_the_runc_pids_limit() {
    let fx = Fixture::new(&[], &[]);
    let mut fake = FakeRuntime::new(&update_output());
    fake.tamper = Some(|inspect| {
        inspect.host_config.as_mut().unwrap().pids_limit = Some(container::RUNC_PIDS_LIMIT);
    });
    let err = run_under(&fake, &fx, "runsc").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "REPOSITORY_DOCKER_ISOLATION_MISMATCH: HostConfig.PidsLimit"
    );
    assert!(!fake.calls().contains(&"start".to_owned()));
}

/// Each runtime gets its own turn seccomp profile (runsc: `clone3` allowed, because gVisor fails
/// errno rules with EPERM), and the inspection refuses the other runtime's profile.
#[tokio::test]
async fn each_runtime_gets_and_verifies_its_own_seccomp_profile() {
    use container::{RuntimeProfile, security_opts};
    let fx = Fixture::new(&[], &[]);
    for (runtime, profile) in [
        ("runc", RuntimeProfile::Runc),
        ("runsc", RuntimeProfile::Runsc),
    ] {
        let fake = FakeRuntime::new(&update_output());
        run_under(&fake, &fx, runtime).await.unwrap();
        let host = fake.created_body().host_config.unwrap();
        assert_eq!(host.security_opt, Some(security_opts(profile)), "{runtime}");
    }
    type Tamper = fn(&mut bollard::models::ContainerInspectResponse);
    let swapped: [(&str, Tamper); 2] = [
        ("runsc", |i| {
            i.host_config.as_mut().unwrap().security_opt =
                Some(container::security_opts(container::RuntimeProfile::Runc));
        }),
        ("runc", |i| {
            i.host_config.as_mut().unwrap().security_opt =
                Some(container::security_opts(container::RuntimeProfile::Runsc));
        }),
    ];
    for (runtime, tamper) in swapped {
        let mut fake = FakeRuntime::new(&update_output());
        fake.tamper = Some(tamper);
        let err = run_under(&fake, &fx, runtime).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "REPOSITORY_DOCKER_ISOLATION_MISMATCH: HostConfig.SecurityOpt",
            "{runtime}"
        );
        assert!(!fake.calls().contains(&"start".to_owned()), "{runtime}");
    }
}
