//! The job model: what a job binds at submission ([`JobSpec`]), its life ([`JobState`]), and the
//! values the store's operations return.

use std::time::Duration;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::error::{JobsError, Result};
use crate::evidence::GateVerdict;
use vocab::{AttemptId, HostId, JobId};

/// The most attempts a job may be given.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;
/// The longest repository locator (a local path or a Git URL), in bytes.
pub const MAX_REPOSITORY_BYTES: usize = 4096;
/// The largest canonical encoding of a job's selections, in bytes.
pub const MAX_SELECTIONS_BYTES: usize = 1_048_576;
/// The largest stored candidate, in bytes.
pub const MAX_CANDIDATE_BYTES: usize = 64 * 1_048_576;
/// The largest usage document or host metadata, in bytes (compact JSON).
pub const MAX_DOCUMENT_BYTES: usize = 65_536;
/// The longest error or event message, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// The longest error or event code.
pub const MAX_CODE_CHARS: usize = 64;
/// The most rows one `claim` or `list` returns.
pub const MAX_BATCH: usize = 1000;

/// What a job does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// One coding turn bound to an approval and a snapshot.
    Turn,
    /// Nothing: exists only for the claim benchmark and the store's tests.
    Noop,
}

impl JobKind {
    /// The text stored in the database.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Turn => "turn",
            Self::Noop => "noop",
        }
    }

    /// Parses the stored text.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for any other text.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "turn" => Ok(Self::Turn),
            "noop" => Ok(Self::Noop),
            _ => Err(JobsError::input("kind", "must be turn or noop")),
        }
    }
}

/// Where a job is in its life. A snoozed or backing-off job is `Queued` with `run_at` in the
/// future.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Running,
    Completed,
    /// Terminal failure: the dead letter.
    Failed,
    Cancelled,
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 5] = [
        Self::Queued,
        Self::Running,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The text stored in the database (and shown by the CLI).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Parses the stored text.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for any other text.
    pub fn parse(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
            .ok_or_else(|| {
                JobsError::input(
                    "state",
                    "must be queued, running, completed, failed or cancelled",
                )
            })
    }

    /// True for completed, failed and cancelled.
    #[must_use]
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a job binds at submission. The approval is verified by the caller before
/// [`crate::JobStore::submit`]; the store checks the shapes again (digests, hex commit, bounded
/// sizes) so that a malformed row never enters the queue.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobSpec {
    pub kind: JobKind,
    /// The canonical bytes of the approval (never part of a serialised job view; see
    /// `approval_digest`).
    #[serde(skip)]
    pub approval_json: Vec<u8>,
    /// `sha256:` + 64 lowercase hex.
    pub approval_digest: String,
    /// `sha256:` + 64 lowercase hex.
    pub snapshot_digest: String,
    /// A local path or a Git URL the host can fetch.
    pub repository: String,
    /// 40 or 64 lowercase hex digits.
    pub commit: String,
    /// `sha256:` + 64 lowercase hex, or the 64 hex digits alone.
    pub task_sha256: String,
    /// `sha256:` + 64 lowercase hex.
    pub image_id: String,
    /// `sha256:` + 64 lowercase hex.
    pub policy_digest: String,
    /// The explicit selections, as the caller's JSON.
    pub selections: serde_json::Value,
    /// The container runtime name (e.g. `runsc`), when not the default.
    pub runtime: Option<String>,
    /// Attempts before the job is dead-lettered (1 to `MAX_ATTEMPTS_LIMIT`).
    pub max_attempts: u32,
    /// A live turn: the model the agent is configured with (`image_id` is then the live image).
    /// `None` for an offline turn. Never holds a credential: the serving host's gateway does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LiveJob>,
    /// A job a `retry` review decision queued: the job and candidate it supersedes and the
    /// reviewer's context for the agent. `None` for every other job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up: Option<FollowUp>,
    /// Automatic follow-ups: when a required gate fails with new failures, the service queues a
    /// follow-up continuing the job's candidate, within these bounds (the operator's setting at
    /// submission; inherited by every follow-up of the chain). `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_ups: Option<FollowUpPolicy>,
    /// The principal whose submission created the job (`operator` for `jobs submit`); a
    /// follow-up keeps its chain's. Not part of the job's identity: the same inputs submitted by
    /// another principal find this job. `None` for jobs queued before schema version 7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// The operator's repository policy the job was admitted under (`serve
    /// --repository-policy`); a follow-up keeps its chain's. Part of the job's identity: the same
    /// inputs admitted under another policy are another job. `None`: no policy admitted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_under: Option<PolicyAdmission>,
}

/// The most automatic follow-ups one chain may run.
pub const MAX_CHAIN_FOLLOW_UPS: u32 = 10;
/// The most follow-ups of one job [`crate::JobStore::follow_ups_of`] lists (each reviewer's
/// retry queues one; repeats of the same retry find the same job).
pub(crate) const MAX_FOLLOW_UPS_LISTED: i64 = 256;
/// The longest excerpt of a gate's output a follow-up job carries, in bytes.
pub(crate) const MAX_FOLLOW_UP_EXCERPT_BYTES: usize = 4096;
/// The most failing test ids per gate a follow-up job carries.
pub(crate) const MAX_FOLLOW_UP_FAILURES: usize = 32;
/// The longest failing test id a follow-up job carries, in bytes.
pub const MAX_FOLLOW_UP_FAILURE_BYTES: usize = 512;

/// The bounds of a chain of automatic follow-ups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowUpPolicy {
    /// Follow-ups after the first attempt: 1 to [`MAX_CHAIN_FOLLOW_UPS`].
    pub max_follow_ups: u32,
    /// No new follow-up once the chain's attempts have used this many tokens (the gateway's
    /// count); `None`: no token bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
}

impl FollowUpPolicy {
    fn validate(&self) -> Result<()> {
        if !(1..=MAX_CHAIN_FOLLOW_UPS).contains(&self.max_follow_ups) {
            return Err(JobsError::spec(
                "follow_ups.max_follow_ups",
                "must be 1 to 10",
            ));
        }
        Ok(())
    }

    fn hash_into(&self, hasher: &mut Sha256) {
        hasher.update(b"follow_ups\0");
        hasher.update(u64::from(self.max_follow_ups).to_be_bytes());
        hasher.update([u8::from(self.token_budget.is_some())]);
        hasher.update(self.token_budget.unwrap_or(0).to_be_bytes());
    }
}

/// The most gates a repository policy adds to one job.
pub(crate) const MAX_POLICY_GATES: usize = 64;

/// The operator's repository policy a job was admitted under: its digest and the gates it adds
/// to the approval's (the job's required set is the union; a submitter cannot remove one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyAdmission {
    /// `sha256:` + 64 lowercase hex: the policy's canonical digest.
    pub digest: String,
    /// Gate names (`[a-z0-9][a-z0-9_-]{0,63}`), unique, at most 64 (`MAX_POLICY_GATES`).
    pub required_gates: Vec<String>,
}

impl PolicyAdmission {
    fn validate(&self) -> Result<()> {
        check_typed_digest("admitted_under.digest", &self.digest)?;
        if self.required_gates.len() > MAX_POLICY_GATES {
            return Err(JobsError::spec(
                "admitted_under.required_gates",
                "more than 64 gates",
            ));
        }
        for (i, g) in self.required_gates.iter().enumerate() {
            let ok = g.len() <= 64
                && g.bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && g.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                });
            if !ok || self.required_gates.iter().take(i).any(|seen| seen == g) {
                return Err(JobsError::spec(
                    "admitted_under.required_gates",
                    "must be unique gate names",
                ));
            }
        }
        Ok(())
    }

    fn hash_into(&self, hasher: &mut Sha256) {
        hasher.update(b"admitted_under\0");
        hasher.update((self.digest.len() as u64).to_be_bytes());
        hasher.update(self.digest.as_bytes());
        hasher.update((self.required_gates.len() as u64).to_be_bytes());
        for g in &self.required_gates {
            hasher.update((g.len() as u64).to_be_bytes());
            hasher.update(g.as_bytes());
        }
    }
}

/// The longest reviewer note a follow-up job carries, in bytes.
pub const MAX_FOLLOW_UP_NOTE_BYTES: usize = 8192;
/// The most gate verdicts a follow-up job carries.
pub const MAX_FOLLOW_UP_GATES: usize = 64;

/// What a follow-up job (queued by a `retry` decision) carries beyond the job it supersedes:
/// that job and its candidate digest, the reviewer's note and the gate verdicts of the superseded
/// candidate. The note and verdicts reach the agent as untrusted context, never as scope: the
/// follow-up runs under the same approval, so its scope and grants are the superseded job's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowUp {
    /// The job whose candidate the retry decision was made on.
    pub supersedes_job: JobId,
    /// That candidate's digest (`sha256:` + 64 lowercase hex).
    pub supersedes_candidate: String,
    /// The reviewer's note: at most [`MAX_FOLLOW_UP_NOTE_BYTES`], no control characters but
    /// newline and tab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The superseded candidate's gate verdicts (at most [`MAX_FOLLOW_UP_GATES`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<FollowUpGate>,
    /// An automatic follow-up's place in its chain (1 for the first); 0 for a reviewer's retry.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub round: u32,
    /// The tokens the chain's earlier attempts used (the gateway's count).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub chain_tokens: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// One gate verdict of a superseded candidate, and for a failed gate of an automatic follow-up
/// what it said: the newly failing test ids and an excerpt of its output (already through the
/// content policy). Untrusted text, for the agent only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FollowUpGate {
    /// The gate's name (`[a-z0-9][a-z0-9_-]*`, at most 64).
    pub gate: String,
    pub verdict: GateVerdict,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_failures: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<String>,
}

impl FollowUpGate {
    fn context_ok(&self) -> bool {
        self.new_failures.len() <= MAX_FOLLOW_UP_FAILURES
            && self.new_failures.iter().all(|id| {
                (1..=MAX_FOLLOW_UP_FAILURE_BYTES).contains(&id.len())
                    && !id.chars().any(char::is_control)
            })
            && self.excerpt.as_ref().is_none_or(|e| {
                (1..=MAX_FOLLOW_UP_EXCERPT_BYTES).contains(&e.len())
                    && e.bytes()
                        .all(|b| b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b))
            })
    }
}

impl FollowUp {
    /// Checks every field's shape.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_SPEC` naming `follow_up.*`.
    pub fn validate(&self) -> Result<()> {
        check_typed_digest("follow_up.supersedes_candidate", &self.supersedes_candidate)?;
        if let Some(note) = &self.note {
            if note.is_empty() || note.len() > MAX_FOLLOW_UP_NOTE_BYTES {
                return Err(JobsError::spec("follow_up.note", "must be 1 to 8192 bytes"));
            }
            if has_forbidden_controls(note) {
                return Err(JobsError::spec(
                    "follow_up.note",
                    "contains control characters",
                ));
            }
        }
        if self.gates.len() > MAX_FOLLOW_UP_GATES {
            return Err(JobsError::spec("follow_up.gates", "more than 64 verdicts"));
        }
        if !self
            .gates
            .iter()
            .all(|g| crate::evidence::is_gate_name(&g.gate))
        {
            return Err(JobsError::spec(
                "follow_up.gates",
                "a gate name must be 1 to 64 of a-z 0-9 _ - starting with a letter or digit",
            ));
        }
        if !self.gates.iter().all(FollowUpGate::context_ok) {
            return Err(JobsError::spec(
                "follow_up.gates",
                "failing ids or an excerpt out of bounds",
            ));
        }
        if self.round > MAX_CHAIN_FOLLOW_UPS {
            return Err(JobsError::spec("follow_up.round", "more than 10"));
        }
        Ok(())
    }

    /// Feeds the follow-up's identity into an idempotency key.
    fn hash_into(&self, hasher: &mut Sha256) {
        let mut field = |bytes: &[u8]| {
            hasher.update((bytes.len() as u64).to_be_bytes());
            hasher.update(bytes);
        };
        field(self.supersedes_job.as_str().as_bytes());
        field(self.supersedes_candidate.as_bytes());
        field(self.note.as_deref().unwrap_or("").as_bytes());
        field(&[u8::from(self.note.is_some())]);
        field(&(self.gates.len() as u64).to_be_bytes());
        for g in &self.gates {
            field(g.gate.as_bytes());
            field(g.verdict.as_str().as_bytes());
            // Only an automatic follow-up's gates carry context: every other key is unchanged.
            if !g.new_failures.is_empty() || g.excerpt.is_some() {
                field(b"context");
                field(&(g.new_failures.len() as u64).to_be_bytes());
                for id in &g.new_failures {
                    field(id.as_bytes());
                }
                field(g.excerpt.as_deref().unwrap_or("").as_bytes());
                field(&[u8::from(g.excerpt.is_some())]);
            }
        }
        if self.round > 0 || self.chain_tokens > 0 {
            field(b"chain");
            field(&u64::from(self.round).to_be_bytes());
            field(&self.chain_tokens.to_be_bytes());
        }
    }
}

/// The longest model name a live job may bind.
pub const MAX_MODEL_CHARS: usize = 64;

/// What a live job binds beyond an offline one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveJob {
    /// The model name: 1 to `MAX_MODEL_CHARS` of `A-Z a-z 0-9 . _ : -` (what the in-container
    /// runner accepts, inside what the gateway's allowlist accepts).
    pub model: String,
    /// The agent, when it is not Codex: 1 to `MAX_AGENT_CHARS` of `a-z`, never `codex` (a
    /// Codex job stores no agent, so its binding and key are what they were before agents were
    /// a choice). The service maps the name to an agent; this crate checks only its shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The environment the live image was layered onto, as its record named it when the job was
    /// submitted; absent for an image without one (a job stored before environments existed
    /// reads unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<LiveJobEnvironment>,
}

/// The environment under a live job's image: its name and ID, and the build `/tmp` its turns get.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveJobEnvironment {
    /// The environment's gate image name (`[a-z][a-z0-9_-]{0,63}`).
    pub name: String,
    /// The environment image's ID (`sha256:` + 64 lowercase hex).
    pub image_id: String,
    /// The turn's `/tmp` in MiB, mounted `exec` (1 to 4,096), when the
    /// environment builds code in the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_tmp_mib: Option<u64>,
}

/// Largest build `/tmp` a live job may ask for, in MiB.
const MAX_BUILD_TMP_MIB: u64 = 4096;

impl LiveJobEnvironment {
    fn validate(&self) -> Result<()> {
        let name = self.name.as_bytes();
        let name_ok = name.first().is_some_and(u8::is_ascii_lowercase)
            && name.len() <= 64
            && name
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-".contains(b));
        if !name_ok {
            return Err(JobsError::spec(
                "live.environment.name",
                "must be [a-z][a-z0-9_-]{0,63}",
            ));
        }
        check_typed_digest("live.environment.image_id", &self.image_id)?;
        if self
            .build_tmp_mib
            .is_some_and(|m| !(1..=MAX_BUILD_TMP_MIB).contains(&m))
        {
            return Err(JobsError::spec(
                "live.environment.build_tmp_mib",
                "must be 1 to 4096",
            ));
        }
        Ok(())
    }

    fn hash_into(&self, hasher: &mut Sha256) {
        hasher.update(b"environment\0");
        for field in [self.name.as_bytes(), self.image_id.as_bytes()] {
            hasher.update((field.len() as u64).to_be_bytes());
            hasher.update(field);
        }
        hasher.update(self.build_tmp_mib.unwrap_or(0).to_be_bytes());
    }
}

/// Longest agent name of a live job.
pub const MAX_AGENT_CHARS: usize = 32;

impl LiveJob {
    /// Checks the model name's and the agent name's shape.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_SPEC` naming `live.model` or `live.agent`.
    pub fn validate(&self) -> Result<()> {
        if let Some(environment) = &self.environment {
            environment.validate()?;
        }
        if let Some(agent) = &self.agent {
            let ok = !agent.is_empty()
                && agent.len() <= MAX_AGENT_CHARS
                && agent.bytes().all(|b| b.is_ascii_lowercase())
                && agent != "codex";
            if !ok {
                return Err(JobsError::spec(
                    "live.agent",
                    "must be 1 to 32 of a-z, and absent for codex",
                ));
            }
        }
        let ok = !self.model.is_empty()
            && self.model.len() <= MAX_MODEL_CHARS
            && self
                .model
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
        if ok {
            Ok(())
        } else {
            Err(JobsError::spec(
                "live.model",
                "must be 1 to 64 of A-Z a-z 0-9 . _ : -",
            ))
        }
    }
}

fn check_typed_digest(field: &'static str, value: &str) -> Result<()> {
    if vocab::is_typed_sha256(value) {
        Ok(())
    } else {
        Err(JobsError::spec(
            field,
            "must be sha256: and 64 lowercase hex digits",
        ))
    }
}

fn is_lower_hex_len(value: &str, len: usize) -> bool {
    value.len() == len && value.bytes().all(vocab::is_lower_hex)
}

/// Text stored for display: no control characters other than newline and tab.
pub(crate) fn has_forbidden_controls(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
}

/// A stable error or event code: 1 to 64 of `A-Z 0-9 _`, starting with a letter.
pub(crate) fn check_code(code: &str) -> Result<()> {
    let ok = code.len() <= MAX_CODE_CHARS
        && code.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(JobsError::input(
            "code",
            "must be 1 to 64 of A-Z 0-9 _ starting with a letter",
        ))
    }
}

/// A short message: at most [`MAX_MESSAGE_BYTES`], no control characters but newline and tab.
pub(crate) fn check_message(message: &str) -> Result<()> {
    if message.len() > MAX_MESSAGE_BYTES {
        return Err(JobsError::input("message", "longer than 4096 bytes"));
    }
    if has_forbidden_controls(message) {
        return Err(JobsError::input("message", "contains control characters"));
    }
    Ok(())
}

/// Compact JSON with object keys sorted at every depth: one encoding per value.
pub(crate) fn canonical_json(value: &serde_json::Value) -> Vec<u8> {
    vocab::canonical_bytes(value)
}

/// Compact JSON of a bounded document (usage, host metadata).
pub(crate) fn document_text(field: &'static str, value: &serde_json::Value) -> Result<String> {
    let bytes = canonical_json(value);
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(JobsError::input(field, "larger than 65536 bytes"));
    }
    String::from_utf8(bytes).map_err(|_| JobsError::input(field, "not UTF-8"))
}

impl JobSpec {
    /// Checks every field's shape.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_SPEC` naming the first field that fails.
    pub fn validate(&self) -> Result<()> {
        if self.approval_json.is_empty() {
            return Err(JobsError::spec("approval_json", "is empty"));
        }
        if self.approval_json.len() > snapshot::MAX_CONTEXT_JSON_BYTES {
            return Err(JobsError::spec("approval_json", "larger than 1 MiB"));
        }
        check_typed_digest("approval_digest", &self.approval_digest)?;
        check_typed_digest("snapshot_digest", &self.snapshot_digest)?;
        check_typed_digest("image_id", &self.image_id)?;
        check_typed_digest("policy_digest", &self.policy_digest)?;
        let task = self
            .task_sha256
            .strip_prefix(vocab::SHA256_PREFIX)
            .unwrap_or(&self.task_sha256);
        if !is_lower_hex_len(task, 64) {
            return Err(JobsError::spec(
                "task_sha256",
                "must be 64 lowercase hex digits, optionally after sha256:",
            ));
        }
        if !(is_lower_hex_len(&self.commit, 40) || is_lower_hex_len(&self.commit, 64)) {
            return Err(JobsError::spec(
                "commit",
                "must be 40 or 64 lowercase hex digits",
            ));
        }
        if self.repository.is_empty() || self.repository.len() > MAX_REPOSITORY_BYTES {
            return Err(JobsError::spec("repository", "must be 1 to 4096 bytes"));
        }
        if self.repository.chars().any(char::is_control) {
            return Err(JobsError::spec("repository", "contains control characters"));
        }
        if canonical_json(&self.selections).len() > MAX_SELECTIONS_BYTES {
            return Err(JobsError::spec("selections", "larger than 1 MiB"));
        }
        if let Some(runtime) = &self.runtime {
            let ok = runtime.len() <= 64
                && runtime
                    .bytes()
                    .next()
                    .is_some_and(|b| b.is_ascii_alphanumeric())
                && runtime
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
            if !ok {
                return Err(JobsError::spec(
                    "runtime",
                    "must be 1 to 64 of a-z 0-9 . _ - starting with a letter or digit",
                ));
            }
        }
        if self.max_attempts == 0 || self.max_attempts > MAX_ATTEMPTS_LIMIT {
            return Err(JobsError::spec("max_attempts", "must be 1 to 100"));
        }
        if let Some(live) = &self.live {
            if self.kind != JobKind::Turn {
                return Err(JobsError::spec("live", "only a turn can be live"));
            }
            live.validate()?;
        }
        if let Some(follow_up) = &self.follow_up {
            if self.kind != JobKind::Turn {
                return Err(JobsError::spec("follow_up", "only a turn can follow up"));
            }
            follow_up.validate()?;
        }
        if let Some(policy) = &self.follow_ups {
            if self.kind != JobKind::Turn {
                return Err(JobsError::spec("follow_ups", "only a turn can follow up"));
            }
            policy.validate()?;
        }
        if let Some(by) = &self.submitted_by
            && !crate::access::is_principal(by)
        {
            return Err(JobsError::spec(
                "submitted_by",
                "must be a principal: 1-64 of A-Z a-z 0-9 . _ @ -",
            ));
        }
        if let Some(admission) = &self.admitted_under {
            admission.validate()?;
        }
        Ok(())
    }

    /// The idempotency key: `sha256:` + hex of SHA-256 over a length-prefixed encoding of every
    /// field that says what runs (kind, approval bytes and digest, snapshot digest, repository,
    /// commit, task hash, image, policy digest, canonical selections, runtime, and — for a live
    /// job only — a tagged model name, so an offline job's key is what it always was; for a
    /// follow-up job only, its tagged follow-up fields).
    /// `max_attempts` is a scheduling choice, not part of the job's identity.
    #[must_use]
    pub fn idempotency_key(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(b"patch-candidate.job.idempotency.v1\0");
        let selections = canonical_json(&self.selections);
        let runtime = self.runtime.as_deref().unwrap_or("");
        let fields: [&[u8]; 11] = [
            self.kind.as_str().as_bytes(),
            &self.approval_json,
            self.approval_digest.as_bytes(),
            self.snapshot_digest.as_bytes(),
            self.repository.as_bytes(),
            self.commit.as_bytes(),
            self.task_sha256.as_bytes(),
            self.image_id.as_bytes(),
            self.policy_digest.as_bytes(),
            &selections,
            runtime.as_bytes(),
        ];
        for field in fields {
            hasher.update((field.len() as u64).to_be_bytes());
            hasher.update(field);
        }
        hasher.update([u8::from(self.runtime.is_some())]);
        if let Some(live) = &self.live {
            hasher.update(b"live\0");
            hasher.update((live.model.len() as u64).to_be_bytes());
            hasher.update(live.model.as_bytes());
            // Only a non-Codex job has an agent: Codex keys are unchanged.
            if let Some(agent) = &live.agent {
                hasher.update(b"agent\0");
                hasher.update((agent.len() as u64).to_be_bytes());
                hasher.update(agent.as_bytes());
            }
            // Only a job on an environment has one: every other key is unchanged.
            if let Some(environment) = &live.environment {
                environment.hash_into(&mut hasher);
            }
        }
        // Only a follow-up job has one: every other key is unchanged.
        if let Some(follow_up) = &self.follow_up {
            hasher.update(b"follow_up\0");
            follow_up.hash_into(&mut hasher);
        }
        // Only a job with automatic follow-ups has a policy: every other key is unchanged.
        if let Some(policy) = &self.follow_ups {
            policy.hash_into(&mut hasher);
        }
        // Only a job a repository policy admitted has one: every other key is unchanged.
        if let Some(admission) = &self.admitted_under {
            admission.hash_into(&mut hasher);
        }
        format!("{}{}", vocab::SHA256_PREFIX, hex::encode(hasher.finalize()))
    }

    /// A no-op job whose identity is `nonce` (for the claim benchmark and tests): fixed digests
    /// derived from the nonce, so distinct nonces are distinct jobs.
    #[must_use]
    pub fn noop(nonce: &str, max_attempts: u32) -> Self {
        let digest = |tag: &str| {
            let mut h = Sha256::new();
            h.update(tag.as_bytes());
            h.update(b"\0");
            h.update(nonce.as_bytes());
            hex::encode(h.finalize())
        };
        let typed = |tag: &str| format!("{}{}", vocab::SHA256_PREFIX, digest(tag));
        Self {
            kind: JobKind::Noop,
            approval_json: b"{}".to_vec(),
            approval_digest: typed("approval"),
            snapshot_digest: typed("snapshot"),
            repository: "noop".to_owned(),
            commit: digest("commit").chars().take(40).collect(),
            task_sha256: typed("task"),
            image_id: typed("image"),
            policy_digest: typed("policy"),
            selections: serde_json::json!({ "nonce": nonce }),
            runtime: None,
            max_attempts,
            live: None,
            follow_up: None,
            follow_ups: None,
            submitted_by: None,
            admitted_under: None,
        }
    }

    /// The gates the job must pass: the approval's `required` first, then those its repository
    /// policy added, each once.
    #[must_use]
    pub fn required_gates(&self, required: &[String]) -> Vec<String> {
        let mut all = required.to_vec();
        if let Some(admission) = &self.admitted_under {
            for g in &admission.required_gates {
                if !all.contains(g) {
                    all.push(g.clone());
                }
            }
        }
        all
    }
}

/// The last failure recorded on a job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobFailure {
    pub code: String,
    pub message: String,
}

/// A job as stored. Times are milliseconds since the Unix epoch, from the database clock on
/// PostgreSQL and from the host clock on SQLite.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Job {
    pub id: JobId,
    /// Submission order (increasing; claims take the oldest due job first).
    pub seq: i64,
    pub state: JobState,
    /// `list` leaves `spec.approval_json` empty; `get` and `claim` fill it.
    pub spec: JobSpec,
    pub idempotency_key: String,
    /// Attempts spent so far (a snooze or a release gives its attempt back).
    pub attempts: u32,
    pub max_attempts: u32,
    pub run_at_ms: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// The current attempt while running; the last attempt afterwards.
    pub attempt_id: Option<AttemptId>,
    /// The host running it (while running), or that ran it last.
    pub host: Option<HostId>,
    /// While running: when the lease expires unless renewed.
    pub lease_until_ms: Option<i64>,
    pub cancel_requested: bool,
    pub last_error: Option<JobFailure>,
    /// The stored candidate's digest once completed.
    pub candidate_digest: Option<String>,
}

impl Job {
    /// The job's kind.
    #[must_use]
    pub fn kind(&self) -> JobKind {
        self.spec.kind
    }
}

/// One successful claim: the job (now running), and the fencing token of this attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Claimed {
    pub job: Job,
    pub attempt_id: AttemptId,
    /// 1-based number of this attempt among the spent ones.
    pub attempt: u32,
    pub lease_until_ms: i64,
    /// The day's spend of the job's principal and repository, read in the claim itself on the
    /// store's clock ([`crate::JobStore::claim_reading_spend`]); `None` from a plain claim.
    pub spend_today: Option<crate::SpendToday>,
}

/// The answer to a lease renewal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease is renewed; `cancel_requested` tells the runner to stop the turn.
    Renewed { cancel_requested: bool },
    /// The attempt is no longer current (rescued, cancelled, finished): stop at once and record
    /// nothing.
    Lost,
}

/// The outcome of a write guarded by `id + attempt_id + state='running'`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use]
pub enum Fenced {
    /// The attempt was current; the write happened.
    Applied,
    /// The attempt was no longer current; nothing was written.
    Lost,
}

impl Fenced {
    /// A guarded statement's outcome from the rows it changed: exactly one is `Applied`.
    pub(crate) fn one_row(changed: u64) -> Self {
        if changed == 1 {
            Self::Applied
        } else {
            Self::Lost
        }
    }
}

/// What a failure does to the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Dead letter: the job becomes `failed`.
    Never,
    /// Queue again after this delay (the attempt is spent; `failed` when none is left).
    After(Duration),
}

/// One line of a job's log: a stable code and a short message, never source text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct JobEvent {
    pub seq: i64,
    pub job_id: JobId,
    pub attempt_id: Option<AttemptId>,
    pub at_ms: i64,
    pub code: String,
    pub message: String,
}

/// A registered worker host.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostInfo {
    pub host: HostId,
    pub max_turns: u32,
    pub meta: serde_json::Value,
    pub started_at_ms: i64,
    pub seen_at_ms: i64,
}

/// Exponential backoff with jitter for retry number `attempt` (1-based): 2 s doubling up to
/// 10 minutes, then a uniformly random point in the upper half of that delay ("equal jitter"),
/// so that jobs failing together do not come back together.
#[must_use]
pub fn backoff(attempt: u32) -> Duration {
    const BASE_MS: u64 = 2_000;
    const CAP_MS: u64 = 600_000;
    let exp = attempt.saturating_sub(1).min(20);
    let full = BASE_MS.saturating_mul(1_u64 << exp).min(CAP_MS);
    let half = full / 2;
    let mut bytes = [0_u8; 8];
    let jitter = match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes) % (half + 1),
        Err(_) => half,
    };
    Duration::from_millis(half + jitter)
}

/// Tuning of [`crate::JobStore::open_with`].
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// SQLite: how long a write waits for another process's lock before
    /// `PATCH_CANDIDATE_JOBS_UNAVAILABLE`.
    pub busy_timeout: Duration,
    /// PostgreSQL: connections in the pool.
    pub pool_size: usize,
    /// PostgreSQL: how long connecting, or waiting for a pooled connection, may take before
    /// `PATCH_CANDIDATE_JOBS_UNAVAILABLE`.
    pub connect_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Milliseconds of a duration, saturated into the database's integer type.
pub(crate) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn an_offline_key_is_unchanged_by_live_jobs_and_a_live_key_differs() {
        // The key of an offline spec as stored before live jobs existed (a golden value: stored
        // keys must keep matching resubmissions).
        let offline = JobSpec::noop("golden", 1);
        assert_eq!(
            offline.idempotency_key(),
            "sha256:be9bebfec8bd62b7e1513988fbbc781f75ee6b6909e58e048ebd5d430c251d65"
        );
        let mut live = offline.clone();
        live.kind = JobKind::Turn;
        let mut turn = offline.clone();
        turn.kind = JobKind::Turn;
        live.live = Some(LiveJob {
            model: "m".to_owned(),
            agent: None,
            environment: None,
        });
        assert_ne!(live.idempotency_key(), turn.idempotency_key());
        let mut other = live.clone();
        other.live = Some(LiveJob {
            model: "n".to_owned(),
            agent: None,
            environment: None,
        });
        assert_ne!(live.idempotency_key(), other.idempotency_key());
    }

    #[test]
    fn a_codex_live_key_is_unchanged_by_agents_and_another_agent_differs() {
        // The key of a live (Codex) turn spec as stored before agents were a choice (a golden
        // value: stored keys must keep matching resubmissions).
        let mut codex = JobSpec::noop("golden", 1);
        codex.kind = JobKind::Turn;
        codex.live = Some(LiveJob {
            model: "gpt-5.3-codex".to_owned(),
            agent: None,
            environment: None,
        });
        codex.validate().unwrap();
        assert_eq!(codex.idempotency_key(), GOLDEN_CODEX_LIVE_KEY);
        let mut gemini = codex.clone();
        gemini.live = Some(LiveJob {
            model: "gpt-5.3-codex".to_owned(),
            agent: Some("gemini".to_owned()),
            environment: None,
        });
        gemini.validate().unwrap();
        assert_ne!(gemini.idempotency_key(), codex.idempotency_key());
        let mut claude = gemini.clone();
        claude.live.as_mut().unwrap().agent = Some("claude".to_owned());
        assert_ne!(claude.idempotency_key(), gemini.idempotency_key());
        // One spelling per job: Codex is absent, never named; names are plain lowercase words.
        for bad in ["codex", "", "Gemini", "gemini-cli", &"a".repeat(33)] {
            let mut spec = codex.clone();
            spec.live.as_mut().unwrap().agent = Some(bad.to_owned());
            assert_eq!(
                spec.validate().unwrap_err().code(),
                "PATCH_CANDIDATE_JOBS_SPEC",
                "{bad:?}"
            );
        }
        // The stored form of a Codex job has no agent key at all.
        let json = serde_json::to_value(codex.live.as_ref().unwrap()).unwrap();
        assert_eq!(json, serde_json::json!({"model": "gpt-5.3-codex"}));
    }

    #[test]
    fn a_live_job_on_an_environment_names_it_in_its_key_and_is_checked() {
        let mut plain = JobSpec::noop("env", 1);
        plain.kind = JobKind::Turn;
        plain.live = Some(LiveJob {
            model: "gemini-2.5-flash".to_owned(),
            agent: Some("gemini".to_owned()),
            environment: None,
        });
        let mut on_env = plain.clone();
        let environment = LiveJobEnvironment {
            name: "either".to_owned(),
            image_id: format!("sha256:{}", "a".repeat(64)),
            build_tmp_mib: Some(512),
        };
        on_env.live.as_mut().unwrap().environment = Some(environment.clone());
        on_env.validate().unwrap();
        assert_ne!(on_env.idempotency_key(), plain.idempotency_key());
        let mut smaller = on_env.clone();
        smaller
            .live
            .as_mut()
            .unwrap()
            .environment
            .as_mut()
            .unwrap()
            .build_tmp_mib = Some(256);
        assert_ne!(smaller.idempotency_key(), on_env.idempotency_key());
        // Read back from its stored form; a job stored before environments reads unchanged.
        let json = serde_json::to_string(on_env.live.as_ref().unwrap()).unwrap();
        let back: LiveJob = serde_json::from_str(&json).unwrap();
        assert_eq!(back.environment, Some(environment.clone()));
        let old: LiveJob = serde_json::from_str(r#"{"model": "m"}"#).unwrap();
        assert_eq!(old.environment, None);
        let bad = [
            LiveJobEnvironment {
                name: "Either".to_owned(),
                ..environment.clone()
            },
            LiveJobEnvironment {
                name: String::new(),
                ..environment.clone()
            },
            LiveJobEnvironment {
                image_id: "latest".to_owned(),
                ..environment.clone()
            },
            LiveJobEnvironment {
                build_tmp_mib: Some(0),
                ..environment.clone()
            },
            LiveJobEnvironment {
                build_tmp_mib: Some(MAX_BUILD_TMP_MIB + 1),
                ..environment
            },
        ];
        for env in bad {
            let mut spec = on_env.clone();
            spec.live.as_mut().unwrap().environment = Some(env.clone());
            assert_eq!(
                spec.validate().unwrap_err().code(),
                "PATCH_CANDIDATE_JOBS_SPEC",
                "{env:?}"
            );
        }
    }

    /// What the key encoding before agents existed gives for that spec (computed by an
    /// independent implementation of that encoding, which also reproduces the offline golden
    /// value above).
    const GOLDEN_CODEX_LIVE_KEY: &str =
        "sha256:6462bee2aae9c7193ddabacbb9d591208279d80e811c83b4d7ab6d04513db045";

    #[test]
    fn noop_specs_validate_and_differ_by_nonce() {
        let a = JobSpec::noop("a", 3);
        a.validate().unwrap();
        let b = JobSpec::noop("b", 3);
        assert_ne!(a.idempotency_key(), b.idempotency_key());
        assert_eq!(a.idempotency_key(), JobSpec::noop("a", 3).idempotency_key());
        // Scheduling is not identity.
        assert_eq!(a.idempotency_key(), JobSpec::noop("a", 7).idempotency_key());
        assert!(a.idempotency_key().starts_with("sha256:"));
    }

    #[test]
    fn key_ignores_selection_key_order_but_not_values() {
        let mut a = JobSpec::noop("a", 1);
        a.selections = serde_json::from_str(r#"{"x":1,"y":[1,2]}"#).unwrap();
        let mut b = a.clone();
        b.selections = serde_json::from_str(r#"{"y":[1,2],"x":1}"#).unwrap();
        assert_eq!(a.idempotency_key(), b.idempotency_key());
        b.selections = serde_json::from_str(r#"{"y":[2,1],"x":1}"#).unwrap();
        assert_ne!(a.idempotency_key(), b.idempotency_key());
    }

    #[test]
    fn key_separates_runtime_absent_from_empty() {
        let a = JobSpec::noop("a", 1);
        let mut b = a.clone();
        b.runtime = Some(String::new());
        assert_ne!(a.idempotency_key(), b.idempotency_key());
    }

    #[test]
    fn bad_specs_name_the_field() {
        type Mutation = Box<dyn Fn(&mut JobSpec)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("approval_json", Box::new(|s| s.approval_json.clear())),
            (
                "approval_digest",
                Box::new(|s| s.approval_digest = "sha256:AB".into()),
            ),
            ("snapshot_digest", Box::new(|s| s.snapshot_digest.clear())),
            (
                "image_id",
                Box::new(|s| s.image_id = "ubuntu:latest".into()),
            ),
            ("policy_digest", Box::new(|s| s.policy_digest.push('0'))),
            ("task_sha256", Box::new(|s| s.task_sha256 = "abc".into())),
            ("commit", Box::new(|s| s.commit = "HEAD".into())),
            ("repository", Box::new(|s| s.repository.clear())),
            ("repository", Box::new(|s| s.repository = "a\u{1b}b".into())),
            ("runtime", Box::new(|s| s.runtime = Some("../x".into()))),
            ("max_attempts", Box::new(|s| s.max_attempts = 0)),
            ("max_attempts", Box::new(|s| s.max_attempts = 101)),
        ];
        for (field, mutate) in cases {
            let mut spec = JobSpec::noop("n", 1);
            mutate(&mut spec);
            match spec.validate() {
                Err(JobsError::Spec { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    #[test]
    fn codes_and_messages() {
        check_code("REPOSITORY_PATCH_X").unwrap();
        for bad in ["", "lower", "_X", "A-B", &"A".repeat(65)] {
            assert!(check_code(bad).is_err(), "{bad:?}");
        }
        check_message("line one\nline two\tok").unwrap();
        assert!(check_message("a\u{1b}[2Jb").is_err());
        assert!(check_message(&"x".repeat(4097)).is_err());
    }

    #[test]
    fn states_round_trip() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.as_str()).unwrap(), s);
        }
        assert!(JobState::parse("Queued").is_err());
        assert!(JobKind::parse("turn").is_ok() && JobKind::parse("x").is_err());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        for attempt in 1..40 {
            let d = backoff(attempt);
            let full = (2_000_u64 << (attempt - 1).min(20)).min(600_000);
            assert!(d.as_millis() >= u128::from(full / 2), "{attempt}");
            assert!(d.as_millis() <= u128::from(full), "{attempt}");
        }
    }

    #[test]
    fn canonical_json_sorts_nested_keys() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"b":{"d":1,"c":"é"},"a":[true,null]}"#).unwrap();
        assert_eq!(
            String::from_utf8(canonical_json(&v)).unwrap(),
            r#"{"a":[true,null],"b":{"c":"é","d":1}}"#
        );
    }
}
