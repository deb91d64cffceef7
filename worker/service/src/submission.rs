//! A job's inputs: what `jobs submit` and `POST /v1/jobs` take (the inputs of `run`), the full
//! approval check made before anything enters the queue, and the re-check a host makes of a
//! stored job before it runs it.

use std::path::Path;

use serde::{Deserialize, Serialize};
use snapshot::{ApprovedExecutionContext, DefaultPathPolicy, MAX_CONTEXT_JSON_BYTES, RepoPath};

use super::ServiceError;
use super::mirror::{Locator, MirrorCache};
use container::{IdError, ImageId, ImageReference, RuntimeName};
use turn::{
    DEFAULT_WALL_SECONDS, ImagesState, LIVE_IMAGE, LiveImageState, MAX_TURN_ARCHIVE_BYTES,
    PROOF_IMAGE, PipelineRequest, TurnConfig,
};

/// Largest host policy document accepted.
pub const MAX_POLICY_BYTES: usize = 1_048_576;
/// Attempts a job gets unless the submission says otherwise.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Most attempts a submission may ask for.
pub const MAX_ATTEMPTS: u32 = 20;
/// Most explicit `files` or `read_only` entries.
const MAX_SELECTION_ENTRIES: usize = 1000;

/// A submission: the inputs of `run`, with the repository as a locator (an absolute local path
/// or a Git URL the hosts can fetch) and the approval as its JSON text (kept byte for byte).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    pub repository: String,
    pub approval: String,
    #[serde(default)]
    pub commit: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub image_id: Option<String>,
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub read_only: Vec<String>,
    #[serde(default)]
    pub policy: Option<String>,
    #[serde(default)]
    pub runtime: Option<String>,
    #[serde(default)]
    pub max_wall_seconds: Option<u64>,
    #[serde(default)]
    pub max_archive_bytes: Option<usize>,
    #[serde(default)]
    pub max_attempts: Option<u32>,
    /// A live turn: `{"model": NAME}`. The image is then the live image (by default the one
    /// `image build --live` recorded). No credential is part of a submission: the serving
    /// host's gateway holds it.
    #[serde(default)]
    pub live: Option<jobs::LiveJob>,
}

/// The explicit selections and turn settings stored with a job (`JobSpec::selections`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Selections {
    pub image: String,
    pub files: Option<Vec<String>>,
    pub read_only: Option<Vec<String>>,
    pub policy: Option<String>,
    pub max_wall_seconds: u64,
    pub max_archive_bytes: usize,
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", snapshot::sha256_bare_hex(bytes))
}

fn parse_paths(raw: Option<&Vec<String>>) -> Result<Option<Vec<RepoPath>>, ServiceError> {
    let Some(raw) = raw else { return Ok(None) };
    if raw.len() > MAX_SELECTION_ENTRIES {
        return Err(ServiceError::Spec {
            detail: "too many selection entries",
        });
    }
    raw.iter()
        .map(|p| RepoPath::parse(p).map_err(|r| snapshot::SnapshotError::unsafe_path(p, r).into()))
        .collect::<Result<Vec<_>, ServiceError>>()
        .map(Some)
}

/// Everything a host needs to run a stored job, re-derived from its bytes and checked against
/// its recorded digests.
#[derive(Debug)]
pub struct JobInputs {
    pub context: ApprovedExecutionContext,
    pub locator: Locator,
    pub commit: String,
    pub task: String,
    pub selected: Option<Vec<RepoPath>>,
    pub read_only: Option<Vec<RepoPath>>,
    pub policy: DefaultPathPolicy,
    pub config: TurnConfig,
    /// The model of a live job; `None` offline.
    pub live_model: Option<String>,
}

impl JobInputs {
    /// The pipeline request of this job, reading the repository at `repo` (its mirror).
    #[must_use]
    pub fn pipeline_request<'a>(
        &'a self,
        repo: &'a Path,
        staging_parent: &'a Path,
        store: Option<&'a finalizer::CandidateStore>,
        user_id: &'a str,
    ) -> PipelineRequest<'a> {
        PipelineRequest {
            repo,
            commit: &self.commit,
            context: &self.context,
            task: &self.task,
            selected: self.selected.clone(),
            read_only: self.read_only.clone(),
            policy: &self.policy,
            config: &self.config,
            staging_parent,
            store,
            ledger: None,
            user_id,
        }
    }
}

fn policy_of(text: Option<&str>) -> Result<DefaultPathPolicy, ServiceError> {
    match text {
        Some(text) => {
            if text.len() > MAX_POLICY_BYTES {
                return Err(ServiceError::Spec {
                    detail: "policy document too large",
                });
            }
            Ok(DefaultPathPolicy::with_config_json(text)?)
        }
        None => Ok(DefaultPathPolicy::default()),
    }
}

/// Re-derives a stored job's inputs with the same parsers `run` uses, and checks each against the
/// job's recorded digest (approval bytes, snapshot digest, commit, task, policy, image ID).
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_BINDING` when bytes and digests disagree; the approval parser's own
/// codes; `PATCH_CANDIDATE_SERVICE_SPEC` for malformed selections.
pub fn reverify(spec: &jobs::JobSpec) -> Result<JobInputs, ServiceError> {
    if sha256(&spec.approval_json) != spec.approval_digest {
        return Err(ServiceError::Binding { field: "approval" });
    }
    if spec.approval_json.len() > MAX_CONTEXT_JSON_BYTES {
        return Err(ServiceError::Binding { field: "approval" });
    }
    let context = ApprovedExecutionContext::from_slice(&spec.approval_json)?;
    if context.snapshot_digest() != spec.snapshot_digest {
        return Err(ServiceError::Binding {
            field: "snapshot_digest",
        });
    }
    if context.baseline_commit_sha() != spec.commit {
        return Err(ServiceError::Binding { field: "commit" });
    }
    let task = context.raw_request().to_owned();
    if sha256(task.as_bytes()) != spec.task_sha256 {
        return Err(ServiceError::Binding { field: "task" });
    }
    let selections: Selections =
        serde_json::from_value(spec.selections.clone()).map_err(|_| ServiceError::Spec {
            detail: "stored selections are malformed",
        })?;
    if sha256(selections.policy.as_deref().unwrap_or_default().as_bytes()) != spec.policy_digest {
        return Err(ServiceError::Binding { field: "policy" });
    }
    let policy = policy_of(selections.policy.as_deref())?;
    let image: ImageReference = selections.image.parse()?;
    let image_id: ImageId = spec.image_id.parse()?;
    let runtime = spec
        .runtime
        .as_deref()
        .map(str::parse::<RuntimeName>)
        .transpose()?;
    let config = TurnConfig::new(
        image,
        image_id,
        selections.max_wall_seconds,
        selections.max_archive_bytes,
    )?
    .with_runtime(runtime);
    Ok(JobInputs {
        context,
        locator: Locator::parse(&spec.repository)?,
        commit: spec.commit.clone(),
        task,
        selected: parse_paths(selections.files.as_ref())?,
        read_only: parse_paths(selections.read_only.as_ref())?,
        policy,
        config,
        live_model: spec.live.as_ref().map(|l| l.model.clone()),
    })
}

/// The image and approved ID: explicit values win, else the `image build` record (as `run`).
///
/// # Errors
/// `REPOSITORY_DOCKER_IMAGE`, `REPOSITORY_DOCKER_EXPECTED_IMAGE_ID`.
pub fn resolve_image(
    image: Option<&str>,
    image_id: Option<&str>,
    state: &Path,
) -> Result<(ImageReference, ImageId), ServiceError> {
    let recorded = ImagesState::load(state)?.map(|r| (r.image, r.image_id));
    pick_image(image, image_id, recorded, PROOF_IMAGE)
}

/// The live image and approved ID: explicit values win, else the `image build --live` record
/// (as `run --live`).
///
/// # Errors
/// `REPOSITORY_DOCKER_IMAGE`, `REPOSITORY_DOCKER_EXPECTED_IMAGE_ID`.
pub fn resolve_live_image(
    image: Option<&str>,
    image_id: Option<&str>,
    state: &Path,
) -> Result<(ImageReference, ImageId), ServiceError> {
    let recorded = LiveImageState::load(state)?.map(|r| (r.image, r.image_id));
    pick_image(image, image_id, recorded, LIVE_IMAGE)
}

fn pick_image(
    image: Option<&str>,
    image_id: Option<&str>,
    recorded: Option<(ImageReference, ImageId)>,
    default: &str,
) -> Result<(ImageReference, ImageId), ServiceError> {
    let image: ImageReference = match (image, &recorded) {
        (Some(image), _) => image.parse()?,
        (None, Some((r, _))) => r.clone(),
        (None, None) => default.parse()?,
    };
    let id = match (image_id, recorded) {
        (Some(id), _) => id.parse()?,
        (None, Some((r, id))) if r == image => id,
        _ => return Err(container::ContainerError::from(IdError::ExpectedImageId).into()),
    };
    Ok((image, id))
}

/// Checks a submission fully — the approval parsed by the one parser, the task and commit equal
/// to the approval's, the repository fetched into this host's mirror and snapshotted at the
/// commit, the approval's snapshot identity, the selection and every turn-request check `run`
/// makes before Docker — and returns the job spec to enqueue.
///
/// # Errors
/// The first failing check's code (the codes `run` reports for the same input).
pub async fn prepare(
    sub: Submission,
    state: &Path,
    mirrors: &MirrorCache,
) -> Result<jobs::JobSpec, ServiceError> {
    if sub.approval.len() > MAX_CONTEXT_JSON_BYTES {
        return Err(ServiceError::Spec {
            detail: "approval document too large",
        });
    }
    let approval_json = sub.approval.into_bytes();
    let context = ApprovedExecutionContext::from_slice(&approval_json)?;
    let locator = Locator::parse(&sub.repository)?;
    let commit = sub
        .commit
        .unwrap_or_else(|| context.baseline_commit_sha().to_owned());
    let task = sub.task.unwrap_or_else(|| context.raw_request().to_owned());
    // A live job runs in the live image, as `run --live` does; its model is checked here (the
    // store checks it again) so a malformed one never reaches a host.
    if let Some(live) = &sub.live {
        live.validate()?;
    }
    let (image, image_id) = if sub.live.is_some() {
        resolve_live_image(sub.image.as_deref(), sub.image_id.as_deref(), state)?
    } else {
        resolve_image(sub.image.as_deref(), sub.image_id.as_deref(), state)?
    };
    let runtime = sub
        .runtime
        .as_deref()
        .map(str::parse::<RuntimeName>)
        .transpose()?;
    let selections = Selections {
        image: image.to_string(),
        files: (!sub.files.is_empty()).then_some(sub.files),
        read_only: (!sub.read_only.is_empty()).then_some(sub.read_only),
        policy: sub.policy,
        max_wall_seconds: sub.max_wall_seconds.unwrap_or(DEFAULT_WALL_SECONDS),
        max_archive_bytes: sub.max_archive_bytes.unwrap_or(MAX_TURN_ARCHIVE_BYTES),
    };
    let max_attempts = sub.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
        return Err(ServiceError::Spec {
            detail: "max_attempts must be 1..=20",
        });
    }
    let config = TurnConfig::new(
        image,
        image_id.clone(),
        selections.max_wall_seconds,
        selections.max_archive_bytes,
    )?
    .with_runtime(runtime.clone());
    let policy = policy_of(selections.policy.as_deref())?;
    let selected = parse_paths(selections.files.as_ref())?;
    let read_only = parse_paths(selections.read_only.as_ref())?;
    let repo = mirrors.ensure(&locator, &commit).await?;
    let request = PipelineRequest {
        repo: &repo,
        commit: &commit,
        context: &context,
        task: &task,
        selected,
        read_only,
        policy: &policy,
        config: &config,
        staging_parent: state,
        store: None,
        ledger: None,
        user_id: "service",
    };
    turn::verify_pipeline_request(&request)?;
    let selections = serde_json::to_value(&selections).map_err(|_| ServiceError::Spec {
        detail: "selections cannot be encoded",
    })?;
    Ok(jobs::JobSpec {
        kind: jobs::JobKind::Turn,
        approval_digest: sha256(&approval_json),
        snapshot_digest: context.snapshot_digest().to_owned(),
        repository: locator.as_str().to_owned(),
        commit,
        task_sha256: sha256(task.as_bytes()),
        image_id: image_id.to_string(),
        policy_digest: sha256(
            selections
                .get("policy")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .as_bytes(),
        ),
        selections,
        runtime: runtime.map(|r| r.as_str().to_owned()),
        max_attempts,
        live: sub.live,
        approval_json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_submission_body_names_a_live_model_and_nothing_else() {
        let body = r#"{"repository": "/r", "approval": "{}", "live": {"model": "gpt-5.3-codex"}}"#;
        let sub: Submission = serde_json::from_str(body).unwrap();
        assert_eq!(
            sub.live,
            Some(jobs::LiveJob {
                model: "gpt-5.3-codex".to_owned()
            })
        );
        let offline: Submission =
            serde_json::from_str(r#"{"repository": "/r", "approval": "{}"}"#).unwrap();
        assert_eq!(offline.live, None);
        // No credential (or anything else) can ride along in the live object.
        for bad in [
            r#"{"repository": "/r", "approval": "{}", "live": {"model": "m", "credential": "k"}}"#,
            r#"{"repository": "/r", "approval": "{}", "live": {}}"#,
            r#"{"repository": "/r", "approval": "{}", "live": true}"#,
        ] {
            assert!(serde_json::from_str::<Submission>(bad).is_err(), "{bad}");
        }
    }
}
