//! The turn plan: the one place where "what to run" — the inputs of `run`, of `jobs submit` and
//! the HTTP API's submission, and of the service's per-attempt re-verification — becomes typed.
//!
//! The shape is raw inputs → one lowering → a typed value: [`PlanInputs`] holds the operator's
//! text as given (borrowed), [`resolve_image_environment`] turns an image choice into the image
//! reference and its approved immutable ID (explicit values win, else the `image build` record),
//! and [`TurnPlan::lower`] parses and validates everything else once — runtime, budgets
//! ([`TurnConfig`]), the host path guard, the explicit selections, the commit and the task — in
//! that order. A caller then only borrows the plan ([`TurnPlan::pipeline_request`]).
//!
//! # Security
//! The plan never takes an image ID from a request or from the daemon: it is either the
//! operator's explicit value or the one `image build` recorded for the same reference.

use std::path::Path;

use container::{ImageId, ImageReference, JobBinding, RuntimeName};
use finalizer::CandidateStore;
use snapshot::{ApprovedExecutionContext, DefaultPathGuard, RepoPath, SnapshotError};

use crate::agent::Agent;
use crate::config::TurnConfig;
use crate::error::TurnError;
use crate::feedback::ReviewFeedback;
use crate::follow_up::ParentCandidate;
use crate::images::{ImagesState, LiveEnvironment, LiveImageState, PROOF_IMAGE};
use crate::ledger::UsageLedger;
use crate::live_exchange::LiveSettings;
use crate::pipeline::PipelineRequest;

/// Largest host path guard document accepted, in bytes (every command and the service read
/// the document bounded by this before it reaches [`TurnPlan::lower`]).
pub const MAX_PATH_GUARD_BYTES: usize = 1_048_576;

/// Which image a turn runs in, and so which `image build` record supplies the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// The proof image (`images.json`, default `PROOF_IMAGE`).
    Proof,
    /// The agent's live image ([`Agent::image_record`], default [`Agent::default_image`]).
    Live(Agent),
}

impl ImageKind {
    /// The agent's live image for a live turn, else the proof image.
    #[must_use]
    pub fn for_live(live: Option<Agent>) -> Self {
        live.map_or(Self::Proof, Self::Live)
    }
}

/// The image reference and the approved immutable image ID of a turn, and the environment a live
/// image's record names when the turn runs exactly the recorded image (its build `/tmp` is what
/// [`TurnPlan::with_build_tmp_mib`] applies).
///
/// Explicit values win; an omitted reference is the recorded one (or the default tag when
/// nothing is recorded); an omitted ID is the recorded one only when the record is for the same
/// reference. The record is read once, and read (and must be well-formed) even when both values
/// are given.
///
/// # Errors
/// `PATCH_CANDIDATE_STATE` for an unreadable or malformed record, `REPOSITORY_DOCKER_IMAGE` and
/// `REPOSITORY_DOCKER_EXPECTED_IMAGE_ID` for malformed values, and
/// `REPOSITORY_DOCKER_EXPECTED_IMAGE_ID` ([`TurnError::ImageNotRecorded`], an environment
/// failure) when no approved ID is given or recorded for the reference.
pub fn resolve_image_environment(
    kind: ImageKind,
    image: Option<&str>,
    image_id: Option<&str>,
    state: &Path,
) -> Result<((ImageReference, ImageId), Option<LiveEnvironment>), TurnError> {
    let (recorded, environment, default) = match kind {
        ImageKind::Proof => (
            ImagesState::load(state)?.map(|r| (r.image, r.image_id)),
            None,
            PROOF_IMAGE,
        ),
        ImageKind::Live(agent) => {
            let record = LiveImageState::load_for(state, agent)?;
            let environment = record.as_ref().and_then(|r| r.environment.clone());
            (
                record.map(|r| (r.image, r.image_id)),
                environment,
                agent.default_image(),
            )
        }
    };
    let image: ImageReference = match (image, &recorded) {
        (Some(image), _) => image.parse()?,
        (None, Some((r, _))) => r.clone(),
        (None, None) => default.parse()?,
    };
    let recorded_id = recorded
        .as_ref()
        .filter(|(r, _)| *r == image)
        .map(|(_, id)| id.clone());
    let id = match (image_id, recorded_id.clone()) {
        (Some(id), _) => id.parse()?,
        (None, Some(id)) => id,
        (None, None) => {
            return Err(TurnError::ImageNotRecorded {
                live_flags: match kind {
                    ImageKind::Proof => None,
                    ImageKind::Live(agent) => Some(agent.image_build_flags()),
                },
            });
        }
    };
    let environment = environment.filter(|_| recorded_id.as_ref() == Some(&id));
    Ok(((image, id), environment))
}

/// The raw inputs of a turn plan, as the operator (or a stored job) gave them.
#[derive(Debug, Clone, Copy)]
pub struct PlanInputs<'a> {
    /// The pinned commit; `None` is the approval's baseline commit.
    pub commit: Option<&'a str>,
    /// The task; `None` is the approval's `raw_request`.
    pub task: Option<&'a str>,
    /// The OCI runtime name (e.g. `runsc`); `None` is the daemon's default.
    pub runtime: Option<&'a str>,
    /// The wall budget in seconds.
    pub max_wall_seconds: u64,
    /// The largest archive the turn may return, in bytes.
    pub max_archive_bytes: usize,
    /// The host path guard document's text (already bounded by [`MAX_PATH_GUARD_BYTES`]); `None`
    /// is the built-in policy.
    pub policy: Option<&'a str>,
    /// Explicit editable files; `None` selects every file the approval makes editable.
    pub files: Option<&'a [String]>,
    /// Explicit read-only files; `None` selects every approved read-only file.
    pub read_only: Option<&'a [String]>,
    /// The model of a live turn; `None` offline.
    pub live_model: Option<&'a str>,
    /// The agent of a live turn (unused offline).
    pub live_agent: Agent,
}

/// One typed turn plan: the approval, the commit and task, the turn configuration (image
/// reference and approved ID, budgets, runtime), the host policy, the explicit selections and
/// the live settings of a live turn.
#[derive(Debug, Clone)]
pub struct TurnPlan {
    context: ApprovedExecutionContext,
    commit: String,
    task: String,
    config: TurnConfig,
    policy: DefaultPathGuard,
    selected: Option<Vec<RepoPath>>,
    read_only: Option<Vec<RepoPath>>,
    live: Option<LiveSettings>,
    review_feedback: Option<ReviewFeedback>,
    parent: Option<ParentCandidate>,
}

fn repo_paths(raw: Option<&[String]>) -> Result<Option<Vec<RepoPath>>, TurnError> {
    let Some(raw) = raw else { return Ok(None) };
    raw.iter()
        .map(|p| RepoPath::parse(p).map_err(|r| SnapshotError::unsafe_path(p, r).into()))
        .collect::<Result<Vec<_>, TurnError>>()
        .map(Some)
}

/// The host path guard: the built-in protections, extended by `text` when given.
///
/// # Errors
/// `REPOSITORY_PATCH_POLICY_CONFIG` for a malformed document.
pub fn host_path_guard(text: Option<&str>) -> Result<DefaultPathGuard, TurnError> {
    match text {
        Some(text) => Ok(DefaultPathGuard::with_config_json(text)?),
        None => Ok(DefaultPathGuard::default()),
    }
}

impl TurnPlan {
    /// Lowers the raw inputs once, for a turn in `image` (see [`resolve_image_environment`]): the
    /// runtime name, the budgets, the policy, the selected and the read-only paths, in that order.
    /// Omitted, the commit and the task are the approval's own; given, they are kept as given
    /// (the snapshot identity and the turn request checks refuse a mismatch with their codes).
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_RUNTIME`, `REPOSITORY_DOCKER_WALL_BUDGET`,
    /// `REPOSITORY_DOCKER_ARCHIVE_BUDGET`, `REPOSITORY_PATCH_POLICY_CONFIG`, and the portable
    /// path codes for a selection entry.
    pub fn lower(
        context: ApprovedExecutionContext,
        image: (ImageReference, ImageId),
        inputs: &PlanInputs<'_>,
    ) -> Result<Self, TurnError> {
        let runtime = inputs.runtime.map(str::parse::<RuntimeName>).transpose()?;
        let (image, image_id) = image;
        let config = TurnConfig::new(
            image,
            image_id,
            inputs.max_wall_seconds,
            inputs.max_archive_bytes,
        )?
        .with_runtime(runtime);
        let policy = host_path_guard(inputs.policy)?;
        let selected = repo_paths(inputs.files)?;
        let read_only = repo_paths(inputs.read_only)?;
        let commit = inputs
            .commit
            .unwrap_or_else(|| context.baseline_commit_sha())
            .to_owned();
        let task = inputs
            .task
            .unwrap_or_else(|| context.raw_request())
            .to_owned();
        Ok(Self {
            context,
            commit,
            task,
            config,
            policy,
            selected,
            read_only,
            live: inputs
                .live_model
                .map(|model| LiveSettings::new(inputs.live_agent, model)),
            review_feedback: None,
            parent: None,
        })
    }

    /// Makes the turn a follow-up carrying `feedback` to the agent as untrusted context (the
    /// approval, scope and grants are unchanged).
    #[must_use]
    pub fn with_review_feedback(mut self, feedback: Option<ReviewFeedback>) -> Self {
        self.review_feedback = feedback;
        self
    }

    /// Makes the follow-up continue `parent`: the turn starts from its post-images (its review
    /// feedback must name it; the pipeline checks the parent against the approval and baseline).
    #[must_use]
    pub fn with_parent(mut self, parent: Option<ParentCandidate>) -> Self {
        self.parent = parent;
        self
    }

    /// The candidate a follow-up continues.
    #[must_use]
    pub fn parent(&self) -> Option<&ParentCandidate> {
        self.parent.as_ref()
    }

    /// Gives a live turn's agent the operator's gate commands as validation hints
    /// ([`LiveSettings::with_validation_hints`]); nothing for an offline turn.
    #[must_use]
    pub fn with_validation_hints(mut self, hints: Vec<String>) -> Self {
        self.live = self.live.map(|l| l.with_validation_hints(hints));
        self
    }

    /// Gives the turn a build `/tmp` of `mib` MiB, mounted `exec` ([`TurnConfig::with_build_tmp_mib`]),
    /// as a stored job's environment asks; `None` keeps the turn's default `/tmp`.
    #[must_use]
    pub fn with_build_tmp_mib(mut self, mib: Option<u64>) -> Self {
        self.config = self.config.with_build_tmp_mib(mib);
        self
    }

    /// The review feedback of a follow-up turn.
    #[must_use]
    pub fn review_feedback(&self) -> Option<&ReviewFeedback> {
        self.review_feedback.as_ref()
    }

    /// Binds the turn to a service job (its container carries the job labels).
    #[must_use]
    pub fn with_job(mut self, job: Option<JobBinding>) -> Self {
        self.config = self.config.with_job(job);
        self
    }

    /// The approved execution context.
    #[must_use]
    pub fn context(&self) -> &ApprovedExecutionContext {
        &self.context
    }

    /// The pinned commit.
    #[must_use]
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The task.
    #[must_use]
    pub fn task(&self) -> &str {
        &self.task
    }

    /// The validated turn configuration (image reference and approved ID included).
    #[must_use]
    pub fn config(&self) -> &TurnConfig {
        &self.config
    }

    /// The host path guard.
    #[must_use]
    pub fn policy(&self) -> &DefaultPathGuard {
        &self.policy
    }

    /// The explicit editable selection (`None`: every approved editable file).
    #[must_use]
    pub fn selected(&self) -> Option<&[RepoPath]> {
        self.selected.as_deref()
    }

    /// The explicit read-only selection (`None`: every approved read-only file).
    #[must_use]
    pub fn read_only(&self) -> Option<&[RepoPath]> {
        self.read_only.as_deref()
    }

    /// The live settings of a live turn; `None` offline.
    #[must_use]
    pub fn live(&self) -> Option<&LiveSettings> {
        self.live.as_ref()
    }

    /// The pipeline request of this plan, reading the repository at `repo`.
    #[must_use]
    pub fn pipeline_request<'a>(
        &'a self,
        repo: &'a Path,
        staging_parent: &'a Path,
        store: Option<&'a CandidateStore>,
        ledger: Option<&'a UsageLedger>,
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
            ledger,
            user_id,
            review_feedback: self.review_feedback.as_ref(),
            parent: self.parent.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::FailureClass;

    fn id(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    /// The image reference and ID of [`resolve_image_environment`], without the environment.
    fn resolve_image(
        kind: ImageKind,
        image: Option<&str>,
        image_id: Option<&str>,
        state: &Path,
    ) -> Result<(ImageReference, ImageId), TurnError> {
        resolve_image_environment(kind, image, image_id, state).map(|(resolved, _)| resolved)
    }

    fn record(dir: &Path, image: &str, image_id: &str) {
        let doc = serde_json::json!({
            "image": image,
            "image_id": image_id,
            "hostile_image": "patch-candidate-proof-hostile:local",
            "hostile_image_id": id('c'),
            "source_revision": "x",
        });
        std::fs::write(dir.join("images.json"), doc.to_string()).unwrap();
    }

    #[test]
    fn explicit_values_win_and_the_record_fills_in_only_its_own_reference() {
        let dir = tempfile::tempdir().unwrap();
        record(dir.path(), PROOF_IMAGE, &id('a'));
        let (image, image_id) = resolve_image(ImageKind::Proof, None, None, dir.path()).unwrap();
        assert_eq!(
            (image.as_str(), image_id.as_str()),
            (PROOF_IMAGE, id('a').as_str())
        );
        let (image, image_id) = resolve_image(
            ImageKind::Proof,
            Some("other:1"),
            Some(&id('b')),
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            (image.as_str(), image_id.as_str()),
            ("other:1", id('b').as_str())
        );
        // Another reference never borrows the recorded ID.
        let e = resolve_image(ImageKind::Proof, Some("other:1"), None, dir.path()).unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID");
    }

    #[test]
    fn a_missing_record_is_an_environment_failure_and_a_malformed_id_a_rejection() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [
            ImageKind::Proof,
            ImageKind::Live(Agent::Codex),
            ImageKind::Live(Agent::Gemini),
        ] {
            let e = resolve_image(kind, None, None, dir.path()).unwrap_err();
            assert_eq!(e.code(), "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID");
            assert_eq!(vocab::Coded::class(&e), FailureClass::Environment);
        }
        // A live turn never falls back to the proof image's record.
        record(dir.path(), PROOF_IMAGE, &id('a'));
        let e = resolve_image(ImageKind::Live(Agent::Codex), None, None, dir.path()).unwrap_err();
        assert_eq!(
            e.to_string(),
            TurnError::ImageNotRecorded {
                live_flags: Some(Agent::Codex.image_build_flags())
            }
            .to_string()
        );
        // Nor does one agent's live image stand in for another's.
        std::fs::write(
            dir.path().join("live-image.json"),
            serde_json::json!({
                "image": crate::agent::LIVE_IMAGE, "image_id": id('b'), "agent": "codex-acp",
                "agent_version": "1", "agent_tarball_sha256": id('c'), "source_revision": "x",
            })
            .to_string(),
        )
        .unwrap();
        let (_, live_id) =
            resolve_image(ImageKind::Live(Agent::Codex), None, None, dir.path()).unwrap();
        assert_eq!(live_id.as_str(), id('b'));
        let e = resolve_image(ImageKind::Live(Agent::Gemini), None, None, dir.path()).unwrap_err();
        assert!(e.to_string().contains("image build --live --agent gemini"));
        // A live image on an environment: its record's environment comes with the recorded
        // image, and not with another ID the operator names.
        std::fs::write(
            dir.path().join("live-image.json"),
            serde_json::json!({
                "image": crate::agent::LIVE_IMAGE, "image_id": id('b'), "agent": "codex-acp",
                "agent_version": "1", "agent_tarball_sha256": id('c'), "source_revision": "x",
                "environment": {"name": "either", "image_id": id('d'), "build_tmp_mib": 512},
            })
            .to_string(),
        )
        .unwrap();
        let live = ImageKind::Live(Agent::Codex);
        let (_, env) = resolve_image_environment(live, None, None, dir.path()).unwrap();
        assert_eq!(env.and_then(|e| e.build_tmp_mib), Some(512));
        let (_, env) = resolve_image_environment(live, None, Some(&id('e')), dir.path()).unwrap();
        assert_eq!(env, None);
        let e = resolve_image(ImageKind::Proof, None, Some("latest"), dir.path()).unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID");
        assert_eq!(vocab::Coded::class(&e), FailureClass::Rejected);
    }

    #[test]
    fn lowering_defaults_to_the_approval_and_checks_in_order() {
        let context = crate::testkit::context(&[], &[]);
        let image = || (PROOF_IMAGE.parse().unwrap(), id('a').parse().unwrap());
        let base = PlanInputs {
            commit: None,
            task: None,
            runtime: None,
            max_wall_seconds: 90,
            max_archive_bytes: 1024,
            policy: None,
            files: None,
            read_only: None,
            live_model: None,
            live_agent: Agent::Codex,
        };
        let plan = TurnPlan::lower(context.clone(), image(), &base).unwrap();
        assert_eq!(plan.commit(), context.baseline_commit_sha());
        assert_eq!(plan.task(), context.raw_request());
        assert_eq!(
            (plan.selected(), plan.read_only(), plan.live()),
            (None, None, None)
        );
        assert_eq!(plan.config().max_wall_seconds(), 90);
        let files = vec!["app/a.py".to_owned()];
        let live = PlanInputs {
            commit: Some("c"),
            task: Some("t"),
            runtime: Some("runsc"),
            files: Some(&files),
            read_only: Some(&[]),
            live_model: Some("m"),
            ..base
        };
        let plan = TurnPlan::lower(context.clone(), image(), &live).unwrap();
        assert_eq!((plan.commit(), plan.task()), ("c", "t"));
        assert_eq!(plan.selected().unwrap()[0].as_str(), "app/a.py");
        assert_eq!(plan.read_only(), Some(&[][..]));
        assert_eq!(plan.config().runtime().unwrap().as_str(), "runsc");
        assert_eq!(plan.live().unwrap(), &LiveSettings::codex("m"));
        let gemini = PlanInputs {
            live_agent: Agent::Gemini,
            ..live
        };
        let plan = TurnPlan::lower(context.clone(), image(), &gemini).unwrap();
        assert_eq!(plan.live().unwrap(), &LiveSettings::new(Agent::Gemini, "m"));
        // The runtime first, then the budgets, the policy, the selections.
        let bad = |inputs: PlanInputs<'_>| {
            TurnPlan::lower(context.clone(), image(), &inputs)
                .unwrap_err()
                .code()
        };
        let dotdot = vec!["../x".to_owned()];
        let mut all_bad = PlanInputs {
            runtime: Some("Bad Runtime"),
            max_wall_seconds: 0,
            policy: Some("{"),
            files: Some(&dotdot),
            ..base
        };
        assert_eq!(bad(all_bad), "REPOSITORY_DOCKER_RUNTIME");
        all_bad.runtime = None;
        assert_eq!(bad(all_bad), "REPOSITORY_DOCKER_WALL_BUDGET");
        all_bad.max_wall_seconds = 90;
        assert_eq!(bad(all_bad), "REPOSITORY_PATCH_POLICY_CONFIG");
        all_bad.policy = None;
        assert_ne!(bad(all_bad), "REPOSITORY_PATCH_POLICY_CONFIG");
    }

    #[test]
    fn a_malformed_record_fails_even_with_explicit_values() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("images.json"), "{").unwrap();
        let e =
            resolve_image(ImageKind::Proof, Some("x:1"), Some(&id('a')), dir.path()).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_STATE");
    }
}
