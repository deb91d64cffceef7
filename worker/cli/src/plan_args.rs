//! The flags `run` and `jobs submit` share, declared once and flattened into both, and their
//! lowering into the turn crate's [`turn::PlanInputs`] (raw flags → one typed plan).
//!
//! The help text is `run`'s; `jobs submit` rewords the few flags whose meaning differs for a
//! queued job (see [`SUBMIT_HELP`]), so each command's `--help` reads as it always has.

use std::path::{Path, PathBuf};

use clap::Args;
use turn::{DEFAULT_WALL_SECONDS, MAX_PATH_GUARD_BYTES, MAX_TURN_ARCHIVE_BYTES, PlanInputs};

use super::CliError;
use super::paths::read_text;

/// The image flags (between them `run` has `--store`, so they are a group of their own).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ImageArgs {
    /// Image reference (default: the one recorded by `image build`).
    #[arg(long)]
    pub image: Option<String>,
    /// Approved immutable image ID (default: the one recorded by `image build`).
    #[arg(long)]
    pub image_id: Option<String>,
}

/// The selection, policy, budget and runtime flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct TurnArgs {
    /// Editable file to select (repeatable; default: every file the approval makes editable).
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<String>,
    /// Read-only inspection file (repeatable; default: every approved read-only file).
    #[arg(long = "read-only", value_name = "PATH")]
    pub read_only: Vec<String>,
    /// Host path guard (JSON `{"protected": [...]}`) extending the built-in protections.
    #[arg(long)]
    pub policy: Option<PathBuf>,
    /// Wall budget of the turn in seconds (1..=3600). The turn's whole life, container creation
    /// included, is this plus 10 s: its deadline, recorded on the container for the janitor.
    #[arg(long, default_value_t = DEFAULT_WALL_SECONDS)]
    pub max_wall_seconds: u64,
    /// Largest archive the turn may return, in bytes.
    #[arg(long, default_value_t = MAX_TURN_ARCHIVE_BYTES)]
    pub max_archive_bytes: usize,
    /// OCI runtime to run the turn under (e.g. `runsc`), verified before start.
    #[arg(long)]
    pub runtime: Option<String>,
}

impl Default for TurnArgs {
    fn default() -> Self {
        Self {
            files: Vec::new(),
            read_only: Vec::new(),
            policy: None,
            max_wall_seconds: DEFAULT_WALL_SECONDS,
            max_archive_bytes: MAX_TURN_ARCHIVE_BYTES,
            runtime: None,
        }
    }
}

/// `jobs submit`'s wording of the shared flags (flag id, help); its budgets show no default.
pub(crate) const SUBMIT_HELP: [(&str, &str); 3] = [
    (
        "policy",
        "Host path guard (JSON `{\"protected\": [...]}`), stored with the job",
    ),
    (
        "max_wall_seconds",
        "Wall budget of the turn in seconds (1..=3600)",
    ),
    (
        "runtime",
        "OCI runtime to run the turn under (e.g. `runsc`)",
    ),
];

/// Rewords the shared flags for `jobs submit` (used as `#[command(mut_args(...))]`).
pub(crate) fn submit_help(arg: clap::Arg) -> clap::Arg {
    let id = arg.get_id().as_str().to_owned();
    let arg = match SUBMIT_HELP.iter().find(|(name, _)| *name == id) {
        Some((_, help)) => arg.help(*help),
        None => arg,
    };
    match id.as_str() {
        "max_wall_seconds" | "max_archive_bytes" => arg.hide_default_value(true),
        _ => arg,
    }
}

/// Reads a `--policy` document, bounded by the one policy cap.
///
/// # Errors
/// The path and input codes of [`read_text`].
pub(crate) fn read_policy(path: &Path) -> Result<String, CliError> {
    read_text("--policy", path, MAX_PATH_GUARD_BYTES)
}

impl TurnArgs {
    /// The `--policy` document's text, when one is named.
    ///
    /// # Errors
    /// As [`read_policy`].
    pub(crate) fn policy_text(&self) -> Result<Option<String>, CliError> {
        self.policy.as_deref().map(read_policy).transpose()
    }

    /// The plan inputs of these flags (an empty list is "the approval's default").
    pub(crate) fn plan_inputs<'a>(
        &'a self,
        commit: Option<&'a str>,
        task: Option<&'a str>,
        policy: Option<&'a str>,
        live: Option<(&'a str, turn::Agent)>,
    ) -> PlanInputs<'a> {
        let given = |v: &'a Vec<String>| (!v.is_empty()).then_some(v.as_slice());
        PlanInputs {
            commit,
            task,
            runtime: self.runtime.as_deref(),
            max_wall_seconds: self.max_wall_seconds,
            max_archive_bytes: self.max_archive_bytes,
            policy,
            files: given(&self.files),
            read_only: given(&self.read_only),
            live_model: live.map(|(model, _)| model),
            live_agent: live.map_or(turn::Agent::Codex, |(_, agent)| agent),
        }
    }
}

/// The bounds of a chain of follow-ups (`run`, `jobs submit`, `serve`; each has `--gates`).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct FollowUpArgs {
    /// With --gates: when a required gate fails with new failures, run (or, for a queued job,
    /// queue) up to N follow-up turns, each continuing the candidate just judged with the
    /// failing test ids and the end of the gate's output (through the content policy) as
    /// untrusted context; the chain ends green, at N, at the token budget, when a follow-up
    /// changes nothing, or when a gate cannot judge (docs/REVIEW.md, "Iterating to green").
    /// 0: never.
    #[arg(long = "max-follow-ups", value_name = "N", default_value_t = 0, requires = "gates",
          value_parser = clap::value_parser!(u32).range(0..=i64::from(jobs::MAX_CHAIN_FOLLOW_UPS)))]
    pub max_follow_ups: u32,
    /// With --max-follow-ups: start no follow-up once the chain's live turns have used this many
    /// tokens (the gateway's own count, summed over the chain).
    #[arg(
        long = "follow-up-token-budget",
        value_name = "TOKENS",
        requires = "max_follow_ups"
    )]
    pub follow_up_token_budget: Option<u64>,
}

impl FollowUpArgs {
    /// The stored policy; `None` for `--max-follow-ups 0`.
    pub(crate) fn policy(&self) -> Option<jobs::FollowUpPolicy> {
        (self.max_follow_ups > 0).then_some(jobs::FollowUpPolicy {
            max_follow_ups: self.max_follow_ups,
            token_budget: self.follow_up_token_budget,
        })
    }
}
