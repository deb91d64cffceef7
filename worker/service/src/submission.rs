//! A job's inputs: what `jobs submit` and `POST /v1/jobs` take (the inputs of `run`), the full
//! approval check made before anything enters the queue, and the re-check a host makes of a
//! stored job before it runs it.

use std::path::Path;

use serde::{Deserialize, Serialize};
use snapshot::{ApprovedExecutionContext, MAX_CONTEXT_JSON_BYTES};

use super::ServiceError;
use super::mirror::{Locator, MirrorCache};
use super::repository_policy::{JobAsk, RepositoryPolicy};
use turn::{
    Agent, DEFAULT_WALL_SECONDS, ImageKind, MAX_PATH_GUARD_BYTES, MAX_TURN_ARCHIVE_BYTES,
    PipelineRequest, PlanInputs, TurnPlan,
};

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
    /// A live turn: `{"model": NAME}`, with `"agent": "claude"|"gemini"` for an agent other
    /// than Codex (`"codex"` is accepted and stored as absent). The image is then that agent's
    /// live image (by default the one `image build --live [--agent A]` recorded). No credential
    /// is part of a submission: the serving host's gateway holds it.
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

impl Selections {
    /// The stored document (`JobSpec::selections`), encoded once.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_SPEC` if it cannot be encoded.
    pub fn to_stored(&self) -> Result<serde_json::Value, ServiceError> {
        serde_json::to_value(self).map_err(|_| ServiceError::Spec {
            detail: "selections cannot be encoded",
        })
    }

    /// The typed selections of a stored document, parsed once (strictly: unknown keys refused).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_SPEC` for a malformed document or too many entries.
    pub fn from_stored(stored: &serde_json::Value) -> Result<Self, ServiceError> {
        let selections = Self::deserialize(stored).map_err(|_| ServiceError::Spec {
            detail: "stored selections are malformed",
        })?;
        selections.check()?;
        Ok(selections)
    }

    /// The digest of the policy text (of the empty text without a policy) the job binds.
    fn policy_digest(&self) -> String {
        sha256(self.policy.as_deref().unwrap_or_default().as_bytes())
    }

    /// The caps a submission's and a stored job's selections are held to before lowering.
    fn check(&self) -> Result<(), ServiceError> {
        let entries = |v: &Option<Vec<String>>| v.as_ref().map_or(0, Vec::len);
        if entries(&self.files) > MAX_SELECTION_ENTRIES
            || entries(&self.read_only) > MAX_SELECTION_ENTRIES
        {
            return Err(ServiceError::Spec {
                detail: "too many selection entries",
            });
        }
        if self
            .policy
            .as_ref()
            .is_some_and(|p| p.len() > MAX_PATH_GUARD_BYTES)
        {
            return Err(ServiceError::Spec {
                detail: "policy document too large",
            });
        }
        Ok(())
    }

    /// The plan inputs these selections give, with the job's commit, task, runtime, model and
    /// agent.
    fn plan_inputs<'a>(
        &'a self,
        commit: Option<&'a str>,
        task: Option<&'a str>,
        runtime: Option<&'a str>,
        live: Option<(&'a str, Agent)>,
    ) -> PlanInputs<'a> {
        PlanInputs {
            commit,
            task,
            runtime,
            max_wall_seconds: self.max_wall_seconds,
            max_archive_bytes: self.max_archive_bytes,
            policy: self.policy.as_deref(),
            files: self.files.as_deref(),
            read_only: self.read_only.as_deref(),
            live_model: live.map(|(model, _)| model),
            live_agent: live.map_or(Agent::Codex, |(_, agent)| agent),
        }
    }
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", vocab::sha256_bare_hex(bytes))
}

/// Everything a host needs to run a stored job, re-derived from its bytes and checked against
/// its recorded digests.
#[derive(Debug)]
pub struct JobInputs {
    /// The job's turn plan, lowered as `run` lowers its flags.
    pub plan: TurnPlan,
    pub locator: Locator,
    /// The job's selections, parsed once.
    pub selections: Selections,
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
        self.plan
            .pipeline_request(repo, staging_parent, store, None, user_id)
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
    if sha256(context.raw_request().as_bytes()) != spec.task_sha256 {
        return Err(ServiceError::Binding { field: "task" });
    }
    let selections = Selections::from_stored(&spec.selections)?;
    if selections.policy_digest() != spec.policy_digest {
        return Err(ServiceError::Binding { field: "policy" });
    }
    // A stored job names its image and approved ID explicitly: no record is consulted.
    let image = (selections.image.parse()?, spec.image_id.parse()?);
    let live = spec
        .live
        .as_ref()
        .map(|l| Ok::<_, ServiceError>((l.model.as_str(), Agent::from_stored(l.agent.as_deref())?)))
        .transpose()?;
    let inputs = selections.plan_inputs(Some(&spec.commit), None, spec.runtime.as_deref(), live);
    let locator = Locator::parse(&spec.repository)?;
    let feedback = spec.follow_up.as_ref().map(review_feedback).transpose()?;
    let build_tmp_mib = spec
        .live
        .as_ref()
        .and_then(|l| l.environment.as_ref())
        .and_then(|e| e.build_tmp_mib);
    let plan = TurnPlan::lower(context, image, &inputs)?
        .with_review_feedback(feedback)
        .with_build_tmp_mib(build_tmp_mib);
    Ok(JobInputs {
        plan,
        locator,
        selections,
    })
}

/// The candidate a follow-up plan continues (the one its review feedback supersedes), read from
/// `store`; `None` for a first turn.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_BINDING` for a malformed digest; the store's codes when the
/// candidate is missing or no longer matches its digest.
pub fn parent_of(
    plan: &TurnPlan,
    store: &finalizer::CandidateStore,
) -> Result<Option<turn::ParentCandidate>, ServiceError> {
    let Some(feedback) = plan.review_feedback() else {
        return Ok(None);
    };
    let digest: vocab::Sha256 = feedback
        .supersedes_candidate()
        .parse()
        .map_err(|_| ServiceError::Binding { field: "follow_up" })?;
    Ok(Some(turn::ParentCandidate::load(store, &digest)?))
}

/// The review feedback a follow-up job gives its agent (untrusted context; the scope is the
/// approval's).
fn review_feedback(follow_up: &jobs::FollowUp) -> Result<turn::ReviewFeedback, ServiceError> {
    let supersedes: vocab::Sha256 = follow_up
        .supersedes_candidate
        .parse()
        .map_err(|_| ServiceError::Binding { field: "follow_up" })?;
    let mut feedback = turn::ReviewFeedback::new(
        &supersedes,
        follow_up.note.as_deref(),
        follow_up.gates.iter().map(|g| (g.gate.as_str(), g.verdict)),
    )?;
    for g in &follow_up.gates {
        if !g.new_failures.is_empty() || g.excerpt.is_some() {
            feedback =
                feedback.with_gate_context(&g.gate, &g.new_failures, g.excerpt.as_deref())?;
        }
    }
    Ok(feedback)
}

/// The follow-up job a `retry` decision on `parent`'s candidate `candidate` queues: the parent's
/// spec unchanged (same approval bytes, snapshot, commit, task, image, policy, selections,
/// runtime, live settings and attempts, so the same scope and grants), plus what it supersedes,
/// the reviewer's note and the candidate's gate verdicts. Checked as [`reverify`] will check it
/// on the host that runs it.
///
/// # Errors
/// `PATCH_CANDIDATE_JOBS_SPEC` / `PATCH_CANDIDATE_REVIEW_FEEDBACK` for a malformed note or
/// verdict; [`reverify`]'s codes when the parent no longer re-derives.
pub fn follow_up_spec(
    parent: &jobs::Job,
    candidate: &vocab::Sha256,
    note: Option<&str>,
    gates: Vec<jobs::FollowUpGate>,
) -> Result<jobs::JobSpec, ServiceError> {
    let mut spec = parent.spec.clone();
    spec.follow_up = Some(jobs::FollowUp {
        supersedes_job: parent.id.clone(),
        supersedes_candidate: candidate.to_string(),
        note: note.map(str::to_owned),
        gates,
        // A person's retry starts a new chain: its automatic follow-ups count from here.
        round: 0,
        chain_tokens: 0,
    });
    spec.validate()?;
    reverify(&spec)?;
    Ok(spec)
}

/// The automatic follow-up of `parent`, whose candidate `feedback` supersedes: the parent's spec
/// unchanged (its chain bounds included), the gates' verdicts with their failing ids and checked
/// output excerpts, its place `round` in the chain and the tokens `chain_tokens` the chain has
/// used so far. Checked as a reviewer's retry is (`follow_up_spec`).
///
/// # Errors
/// As a reviewer's retry: `PATCH_CANDIDATE_JOBS_SPEC`, and the codes of re-deriving the parent's inputs.
pub(crate) fn chain_follow_up_spec(
    parent: &jobs::Job,
    feedback: &turn::ReviewFeedback,
    round: u32,
    chain_tokens: u64,
) -> Result<jobs::JobSpec, ServiceError> {
    let mut spec = parent.spec.clone();
    spec.follow_up = Some(jobs::FollowUp {
        supersedes_job: parent.id.clone(),
        supersedes_candidate: feedback.supersedes_candidate().to_owned(),
        note: None,
        gates: feedback
            .gates()
            .iter()
            .map(|g| jobs::FollowUpGate {
                gate: g.gate().to_owned(),
                verdict: g.verdict(),
                new_failures: g.new_failures().to_vec(),
                excerpt: g.excerpt().map(str::to_owned),
            })
            .collect(),
        round,
        chain_tokens,
    });
    spec.validate()?;
    reverify(&spec)?;
    Ok(spec)
}

/// Admits a job under the operator's repository `policy`: its repository's rule, the approval's
/// grants within the rule's ceilings, its agent, model and budgets among those allowed. Returns
/// what the job records (`JobSpec::admitted_under`).
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_POLICY` naming the field outside the policy.
pub(crate) fn admit(
    policy: &RepositoryPolicy,
    repository: &str,
    context: &ApprovedExecutionContext,
    selections: &Selections,
    live: Option<&jobs::LiveJob>,
    max_attempts: u32,
) -> Result<jobs::PolicyAdmission, ServiceError> {
    let exact = |paths: &[snapshot::RepoPath]| -> Vec<String> {
        paths.iter().map(|p| p.as_str().to_owned()).collect()
    };
    let (create, delete) = (exact(context.create_paths()), exact(context.delete_paths()));
    let admission = policy.admit(&JobAsk {
        repository,
        allowed_paths: context.allowed_paths(),
        create_paths: &create,
        delete_paths: &delete,
        agent: live.map_or("offline", |l| l.agent.as_deref().unwrap_or("codex")),
        model: live.map(|l| l.model.as_str()),
        max_wall_seconds: selections.max_wall_seconds,
        max_archive_bytes: u64::try_from(selections.max_archive_bytes).unwrap_or(u64::MAX),
        max_attempts,
    })?;
    Ok(jobs::PolicyAdmission {
        digest: admission.digest.to_string(),
        required_gates: admission.required_gates,
    })
}

/// Re-admits a stored job under the policy a host holds when it claims it: the checks of
/// [`admit`], and every gate the policy requires now among the gates the job was admitted with
/// (a job admitted under no policy, or under one that required fewer gates, is refused naming
/// `required_gates`: its candidate would not be judged by them).
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_POLICY` naming the field.
pub(crate) fn readmit(
    policy: &RepositoryPolicy,
    spec: &jobs::JobSpec,
    inputs: &JobInputs,
) -> Result<(), ServiceError> {
    let now = admit(
        policy,
        &spec.repository,
        inputs.plan.context(),
        &inputs.selections,
        spec.live.as_ref(),
        spec.max_attempts,
    )?;
    let had = spec.required_gates(inputs.plan.context().required_validation_gates());
    if now.required_gates.iter().any(|g| !had.contains(g)) {
        return Err(ServiceError::PolicyRefused {
            field: "required_gates",
        });
    }
    Ok(())
}

/// Checks a submission fully — the approval parsed by the one parser, the task and commit equal
/// to the approval's, the repository fetched into this host's mirror and snapshotted at the
/// commit, the approval's snapshot identity, the selection and every turn-request check `run`
/// makes before Docker — and returns the job spec to enqueue.
///
/// `gates` are the operator's gate definitions: a required gate they do not define (or any
/// required gate without them) is refused before the repository is read. `policy`, the
/// operator's repository policy, admits the job before the repository is read too; the spec
/// records the admission (the policy's digest and the gates it adds, which must be defined).
///
/// # Errors
/// The first failing check's code (the codes `run` reports for the same input);
/// `PATCH_CANDIDATE_GATE_UNKNOWN` / `PATCH_CANDIDATE_SERVICE_GATES_UNAVAILABLE` for gates;
/// `PATCH_CANDIDATE_SERVICE_POLICY` outside the repository policy.
pub async fn prepare(
    mut sub: Submission,
    state: &Path,
    mirrors: &MirrorCache,
    gates: Option<&gate::GateDefinitions>,
    policy: Option<&RepositoryPolicy>,
) -> Result<jobs::JobSpec, ServiceError> {
    if sub.approval.len() > MAX_CONTEXT_JSON_BYTES {
        return Err(ServiceError::Spec {
            detail: "approval document too large",
        });
    }
    let approval_json = sub.approval.into_bytes();
    let context = ApprovedExecutionContext::from_slice(&approval_json)?;
    // Every required gate must be one the operator's definitions know, before anything else.
    let required = context.required_validation_gates();
    if !required.is_empty() {
        let defs = gates.ok_or(ServiceError::GatesUnavailable)?;
        gate::check_required_gates(required, defs)?;
    }
    let locator = Locator::parse(&sub.repository)?;
    // A live job runs in its agent's live image, as `run --live` does; its agent and model are
    // checked here (the store checks their shape again) so a malformed one never reaches a host.
    // Codex is stored as no agent at all, so a Codex job's binding and key are unchanged.
    let agent = match sub.live.as_mut() {
        Some(live) => {
            let agent = Agent::from_stored(live.agent.as_deref())?;
            live.agent = agent.stored().map(str::to_owned);
            live.validate()?;
            Some(agent)
        }
        None => None,
    };
    let (image, environment) = turn::resolve_image_environment(
        ImageKind::for_live(agent),
        sub.image.as_deref(),
        sub.image_id.as_deref(),
        state,
    )?;
    // The environment is this host's record of the live image, never the client's word: the
    // job names it when it runs exactly the recorded image.
    if let Some(live) = sub.live.as_mut() {
        live.environment = environment.map(|e| jobs::LiveJobEnvironment {
            name: e.name,
            image_id: e.image_id.as_str().to_owned(),
            build_tmp_mib: e.build_tmp_mib.map(|m| m.clamp(1, turn::MAX_BUILD_TMP_MIB)),
        });
        live.validate()?;
    }
    let max_attempts = sub.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
    if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
        return Err(ServiceError::Spec {
            detail: "max_attempts must be 1..=20",
        });
    }
    let selections = Selections {
        image: image.0.to_string(),
        files: (!sub.files.is_empty()).then_some(sub.files),
        read_only: (!sub.read_only.is_empty()).then_some(sub.read_only),
        policy: sub.policy,
        max_wall_seconds: sub.max_wall_seconds.unwrap_or(DEFAULT_WALL_SECONDS),
        max_archive_bytes: sub.max_archive_bytes.unwrap_or(MAX_TURN_ARCHIVE_BYTES),
    };
    selections.check()?;
    let image_id = image.1.to_string();
    let inputs = selections.plan_inputs(
        sub.commit.as_deref(),
        sub.task.as_deref(),
        sub.runtime.as_deref(),
        sub.live
            .as_ref()
            .zip(agent)
            .map(|(l, agent)| (l.model.as_str(), agent)),
    );
    let plan = TurnPlan::lower(context, image, &inputs)?;
    let admitted_under = policy
        .map(|policy| {
            admit(
                policy,
                locator.as_str(),
                plan.context(),
                &selections,
                sub.live.as_ref(),
                max_attempts,
            )
        })
        .transpose()?;
    if let Some(added) = admitted_under.as_ref().map(|a| &a.required_gates)
        && !added.is_empty()
    {
        let defs = gates.ok_or(ServiceError::GatesUnavailable)?;
        gate::check_required_gates(added, defs)?;
    }
    let repo = mirrors.ensure(&locator, plan.commit()).await?;
    let request = plan.pipeline_request(&repo, state, None, None, "service");
    turn::verify_pipeline_request(&request)?;
    Ok(jobs::JobSpec {
        kind: jobs::JobKind::Turn,
        approval_digest: sha256(&approval_json),
        snapshot_digest: plan.context().snapshot_digest().to_owned(),
        repository: locator.as_str().to_owned(),
        commit: plan.commit().to_owned(),
        task_sha256: sha256(plan.task().as_bytes()),
        image_id,
        policy_digest: selections.policy_digest(),
        selections: selections.to_stored()?,
        runtime: plan.config().runtime().map(|r| r.as_str().to_owned()),
        max_attempts,
        live: sub.live,
        follow_up: None,
        follow_ups: None,
        // The front end names who submits (the API's caller, `operator` for `jobs submit`).
        submitted_by: None,
        admitted_under,
        approval_json,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_are_stored_as_they_always_were_and_parse_back_once() {
        let selections = Selections {
            image: "patch-candidate-proof:local".to_owned(),
            files: Some(vec!["app/a.py".to_owned()]),
            read_only: None,
            policy: Some(r#"{"protected": ["docs/"]}"#.to_owned()),
            max_wall_seconds: 90,
            max_archive_bytes: 1024,
        };
        let stored = selections.to_stored().unwrap();
        // The stored document (the job store encodes it canonically, with sorted keys, for the
        // spec row and the idempotency key; map equality here ignores the in-memory key order,
        // which depends on serde_json's features in the build).
        assert_eq!(
            stored,
            serde_json::json!({
                "files": ["app/a.py"],
                "image": "patch-candidate-proof:local",
                "max_archive_bytes": 1024,
                "max_wall_seconds": 90,
                "policy": r#"{"protected": ["docs/"]}"#,
                "read_only": null,
            })
        );
        assert_eq!(stored.as_object().map(serde_json::Map::len), Some(6));
        assert_eq!(Selections::from_stored(&stored).unwrap(), selections);
        assert_eq!(
            selections.policy_digest(),
            sha256(br#"{"protected": ["docs/"]}"#)
        );
        let mut extra = stored.clone();
        extra["more"] = serde_json::json!(1);
        assert_eq!(
            Selections::from_stored(&extra).unwrap_err().code(),
            "PATCH_CANDIDATE_SERVICE_SPEC"
        );
        let mut many = selections.clone();
        many.read_only = Some(vec!["a".to_owned(); MAX_SELECTION_ENTRIES + 1]);
        let stored = many.to_stored().unwrap();
        assert_eq!(
            Selections::from_stored(&stored).unwrap_err().code(),
            "PATCH_CANDIDATE_SERVICE_SPEC"
        );
    }

    #[test]
    fn a_submission_body_names_a_live_model_and_nothing_else() {
        let body = r#"{"repository": "/r", "approval": "{}", "live": {"model": "gpt-5.3-codex"}}"#;
        let sub: Submission = serde_json::from_str(body).unwrap();
        assert_eq!(
            sub.live,
            Some(jobs::LiveJob {
                model: "gpt-5.3-codex".to_owned(),
                agent: None,
                environment: None,
            })
        );
        let body =
            r#"{"repository": "/r", "approval": "{}", "live": {"model": "m", "agent": "gemini"}}"#;
        let sub: Submission = serde_json::from_str(body).unwrap();
        assert_eq!(sub.live.unwrap().agent.as_deref(), Some("gemini"));
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
