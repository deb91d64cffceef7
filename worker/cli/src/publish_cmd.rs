//! `patch-candidate publish CANDIDATE --remote URL|PATH --branch NAME`: publication of an
//! accepted candidate (its last local review decision is `accept`) as one deterministic commit
//! pushed create-only to a new branch, after the base branch's tip is rechecked against the
//! candidate's baseline commit (`worker/publish`). The commit's author and committer are fixed:
//! the operator's name and e-mail, dated at the accept decision's host time, so the same
//! candidate and identity always give the same commit id, which is printed before the push. The
//! publication record joins the candidate's review history; a second publish of a published
//! candidate is refused.

use std::path::PathBuf;

use clap::Args;
use publish::{
    BranchName, CommitIdentity, CredentialSource, PublishRequest, RegateVerdict, Remote,
};
use review::{Decision, LocalReviews};

use super::docker_args::{DockerArgs, state_dir};
use super::outcome::OUTPUT_CODE;
use super::review_cmd::{CandidateArgs, find};
use super::{CliError, Outcome, render};

/// `publish` arguments.
#[derive(Debug, Args)]
pub(crate) struct PublishArgs {
    #[command(flatten)]
    pub which: CandidateArgs,
    /// The destination: an absolute path to a repository, or an `https://` (or loopback
    /// `http://`) URL without credentials in it.
    #[arg(long, value_name = "URL|PATH")]
    pub remote: String,
    /// The new branch to create (refused with PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS when it
    /// exists with another commit; never overwritten).
    #[arg(long, value_name = "NAME")]
    pub branch: String,
    /// The base branch whose tip must still be the candidate's baseline commit
    /// (PATCH_CANDIDATE_PUBLISH_BASE_MOVED otherwise).
    #[arg(long, value_name = "BRANCH", default_value = "main")]
    pub base: String,
    /// The source repository the baseline objects are read from (read-only, never written);
    /// without it the baseline is fetched from the remote.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// A file (mode 0600) holding `user:password` or a token for an HTTP remote; it reaches git
    /// only through a private credential helper, never in any argv or environment.
    #[arg(long, value_name = "FILE", conflicts_with = "credential_helper")]
    pub credential_file: Option<PathBuf>,
    /// A git credential helper to use instead (as `credential.helper` takes it).
    #[arg(long, value_name = "HELPER")]
    pub credential_helper: Option<String>,
    /// Author and committer name of the published commit.
    #[arg(long, value_name = "NAME", default_value = "patch-candidate")]
    pub identity_name: String,
    /// Author and committer e-mail of the published commit.
    #[arg(
        long,
        value_name = "EMAIL",
        default_value = "patch-candidate@localhost"
    )]
    pub identity_email: String,
    /// When the base branch moved: merge the candidate onto its tip (`git merge-tree
    /// --write-tree`) and publish the merge only if every required gate passes on exactly the
    /// merged tree (needs `--gates` when the candidate requires a gate). Without it a moved base
    /// is refused.
    #[arg(long)]
    pub rebase: bool,
    /// The operator's gate definitions for the re-run of `--rebase` (docs/GATES.md).
    #[arg(long = "gates", value_name = "FILE", requires = "rebase")]
    pub gates: Option<PathBuf>,
    /// OCI runtime for the re-run's gate containers (e.g. `runsc`).
    #[arg(long = "gate-runtime", value_name = "NAME", requires = "rebase")]
    pub gate_runtime: Option<String>,
    #[command(flatten)]
    pub docker: DockerArgs,
}

/// The required gates re-run on exactly the merged commit's tree: `passed` only when every
/// gate's run passed outright; an environment failure is `unavailable` (nothing is published).
/// Each verdict line goes to stderr.
fn regate(
    rt: &tokio::runtime::Runtime,
    docker: &DockerArgs,
    defs: Option<&gate::GateDefinitions>,
    required: &[String],
    runtime: Option<&container::RuntimeName>,
    merged: &publish::MergedCommit<'_>,
) -> RegateVerdict {
    if required.is_empty() {
        return RegateVerdict::Passed;
    }
    let Some(chosen) = defs.and_then(|d| d.require(required).ok()) else {
        return RegateVerdict::Unavailable;
    };
    rt.block_on(async {
        let Ok(docker) = docker.connect().await else {
            return RegateVerdict::Unavailable;
        };
        let ctx = gate::RunContext { runtime, job: None };
        let run = gate::evaluate_commit_all(
            &docker,
            &chosen,
            merged.git_dir(),
            merged.commit_id(),
            ctx,
            |evidence, digest| {
                eprintln!(
                    "publish: merged tree {}",
                    gate::verdict_line(evidence, digest)
                );
            },
        )
        .await;
        match run {
            Ok(true) => RegateVerdict::Passed,
            Ok(false) => RegateVerdict::Failed,
            Err(e) => {
                eprintln!("publish: gate re-run failed: {e}");
                RegateVerdict::Unavailable
            }
        }
    })
}

/// Runs `publish`.
pub(crate) fn run(args: &PublishArgs) -> Result<Outcome, CliError> {
    let state = state_dir()?;
    let found = find(&args.which, &state)?;
    let reviews = LocalReviews::open(&state)?;
    if reviews.publication(&found.digest)?.is_some() {
        return Err(review::ReviewError::Published.into());
    }
    let history = reviews.history(&found.digest)?;
    review::require_accepted(&history)?;
    // The accept decision that made the candidate publishable dates the commit.
    let accepted_ms = history
        .iter()
        .rev()
        .find(|d| d.record.decision == Decision::Accept)
        .map_or(0, |d| d.record.at_ms);
    let identity = CommitIdentity::new(
        &args.identity_name,
        &args.identity_email,
        accepted_ms.div_euclid(1000),
        0,
    )?;
    let remote = Remote::parse(&args.remote)?;
    let branch = BranchName::parse(&args.branch)?;
    let base = BranchName::parse(&args.base)?;
    let credential = match (&args.credential_file, &args.credential_helper) {
        (Some(file), _) => CredentialSource::file(file),
        (None, Some(helper)) => CredentialSource::helper(helper)?,
        (None, None) => CredentialSource::None,
    };
    let required = found.candidate.required_validation_gates().to_vec();
    let defs = args
        .gates
        .as_deref()
        .map(super::gate_cmd::load_definitions)
        .transpose()?;
    if args.rebase && !required.is_empty() {
        // Unknown or undefined gates fail here, before anything is built.
        let Some(defs) = &defs else {
            return Err(CliError::usage(
                super::outcome::INPUT_CODE,
                "--rebase of a candidate that requires gates needs --gates FILE",
            ));
        };
        defs.require(&required)?;
    }
    let runtime = args
        .gate_runtime
        .as_deref()
        .map(str::parse::<container::RuntimeName>)
        .transpose()
        .map_err(container::ContainerError::from)?;
    let rt = super::docker_args::tokio_runtime()?;
    let gate = |merged: &publish::MergedCommit<'_>| {
        regate(
            &rt,
            &args.docker,
            defs.as_ref(),
            &required,
            runtime.as_ref(),
            merged,
        )
    };
    let request = PublishRequest {
        candidate: &found.candidate,
        source: args.repo.as_deref(),
        remote: &remote,
        branch: &branch,
        base: &base,
        identity: &identity,
        credential: &credential,
        rebase: if args.rebase { Some(&gate) } else { None },
        extends: None,
    };
    let prepared = publish::prepare(&request)?;
    eprintln!(
        "publish: commit {} built on {} (base tip seen); pushing",
        prepared.commit_id(),
        prepared.base_tip_seen()
    );
    let record = prepared.push()?;
    let bytes = serde_json::to_vec(&record)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "cannot serialise the record"))?;
    reviews.record_publication(&found.digest, &bytes)?;
    let text = format!(
        "published {} as {} on branch {} of {}{}\n",
        found.digest,
        record.commit_id,
        render::name(record.branch.as_str()),
        render::name(&record.remote),
        if record.created {
            ""
        } else {
            " (the branch already held this commit)"
        }
    );
    Ok(Outcome {
        text,
        json: serde_json::to_value(&record)
            .map_err(|_| CliError::environment(OUTPUT_CODE, "cannot serialise the record"))?,
    })
}
