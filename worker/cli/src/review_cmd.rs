//! `patch-candidate review show|accept|reject|retry CANDIDATE`: review decisions of one-shot use,
//! against the local candidate store and the local review store (`<state dir>/reviews`). The
//! facts a decision is checked against are established here, from bytes, every time: the
//! candidate re-validated and digested, its gate evidence parsed strictly from where the host
//! wrote it (the candidate store, or the folder named by `--evidence-dir`; never a folder that
//! merely holds the candidate file) and matched to a gate by its definition digest in the
//! operator's `--gates` file (never by the evidence's own `gate` field; evidence of another
//! digest, baseline commit or definition does not count), and the content policy scanned afresh
//! (its report digest is what the decision records). The actor is the local user.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use finalizer::{CandidateStore, RepositoryPatchCandidate, repository_patch_digest};
use review::{
    Actor, ActorKind, Decision, DecisionRequest, GateFact, LocalReviews, PolicyFinding, Principal,
    Reason, ReviewFacts, ReviewPackage, build_package,
};
use vocab::{Sha256, Untrusted};

use super::docker_args::state_dir;
use super::finalize_cmd::{parse_digest_flag, read_candidate};
use super::outcome::INPUT_CODE;
use super::{CliError, Outcome, render};

/// `review` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ReviewCommand {
    /// Show the review document (`patch_candidate.review_package.v1`): route, validation state
    /// from the gate evidence, policy findings (rule, path, line; never the value), decisions,
    /// publication, available actions.
    Show(ShowArgs),
    /// Accept the candidate: refused (PATCH_CANDIDATE_REVIEW_GATES_UNMET /
    /// PATCH_CANDIDATE_REVIEW_POLICY_UNCLEAN) unless every required gate passed for this exact
    /// digest and the content policy is clean, or `--force --reason` (recorded as forced).
    Accept(DecideArgs),
    /// Reject the candidate (`--reason` required).
    Reject(DecideArgs),
    /// Ask for another turn under the same approval, with `--reason` as the reviewer's note;
    /// prints the command that runs it.
    Retry(DecideArgs),
}

/// Which candidate.
#[derive(Debug, Clone, Args)]
pub(crate) struct CandidateArgs {
    /// The candidate: its digest (`sha256:…`, looked up in the store) or a candidate JSON file.
    pub candidate: String,
    /// Candidate store directory (default: `<state dir>/candidates`).
    #[arg(long)]
    pub store: Option<PathBuf>,
}

/// Where the gate evidence is and what it must have been run for.
#[derive(Debug, Clone, Args)]
pub(crate) struct EvidenceArgs {
    /// The operator's gate definitions (docs/GATES.md): an evidence file counts for gate NAME
    /// only when its `definition_digest` is NAME's digest in this file. Without it no gate
    /// evidence counts (every required gate is `missing`).
    #[arg(long = "gates", value_name = "FILE")]
    pub gates: Option<PathBuf>,
    /// The folder the host wrote the gate evidence into (`gate --out DIR`, or the folder of the
    /// candidate file `gate` was given). Default: the candidate store. A folder that merely
    /// holds the candidate file is never read unless named here.
    #[arg(long, value_name = "DIR")]
    pub evidence_dir: Option<PathBuf>,
}

/// `show`'s arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub which: CandidateArgs,
    #[command(flatten)]
    pub evidence: EvidenceArgs,
}

/// A decision's arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct DecideArgs {
    #[command(flatten)]
    pub which: CandidateArgs,
    #[command(flatten)]
    pub evidence: EvidenceArgs,
    /// The digest the decision is made against; required when CANDIDATE is a file, and must
    /// equal CANDIDATE when both are digests (PATCH_CANDIDATE_REVIEW_DIGEST_MISMATCH).
    #[arg(long, value_name = "SHA256")]
    pub digest: Option<String>,
    /// Why (required for reject and for --force; at most 2000 characters).
    #[arg(long)]
    pub reason: Option<String>,
    /// Accept although a required gate has not passed or the policy is not clean (needs
    /// --reason; the decision is recorded as forced, for ever).
    #[arg(long)]
    pub force: bool,
}

/// A candidate as found: the value, its digest, and the candidate store it was found in (or
/// would be: the default evidence folder).
pub(crate) struct Found {
    pub(crate) candidate: RepositoryPatchCandidate,
    pub(crate) digest: Sha256,
    store_dir: PathBuf,
}

pub(crate) fn find(args: &CandidateArgs, state: &Path) -> Result<Found, CliError> {
    let store_dir = args
        .store
        .clone()
        .unwrap_or_else(|| state::CANDIDATES.path_in(state));
    if args.candidate.starts_with("sha256:") {
        let digest = parse_digest_flag("CANDIDATE", &args.candidate)?;
        let candidate = CandidateStore::open_existing(&store_dir)?.get(&digest)?;
        return Ok(Found {
            candidate,
            digest,
            store_dir,
        });
    }
    let file = PathBuf::from(&args.candidate);
    let candidate = read_candidate(&file)?;
    let digest = repository_patch_digest(&candidate)?;
    Ok(Found {
        candidate,
        digest,
        store_dir,
    })
}

/// The gate facts of `found`: every evidence file in the host's evidence folder (`--evidence-dir`,
/// else the candidate store) that parses strictly, is bound to this candidate's digest and
/// baseline commit, and whose `definition_digest` is a gate's digest in the operator's
/// definitions; the fact names that gate, never the evidence's own `gate` field.
pub(crate) fn gate_facts(found: &Found, args: &EvidenceArgs) -> Result<Vec<GateFact>, CliError> {
    let Some(gates_file) = &args.gates else {
        return Ok(Vec::new());
    };
    let definitions = super::gate_cmd::load_definitions(gates_file)?;
    let dir = args.evidence_dir.as_deref().unwrap_or(&found.store_dir);
    let mut gates = Vec::new();
    for (_, parsed) in gate::find_evidence(dir, &found.digest)? {
        // A file that fails its strict parse is no evidence.
        let Ok(file) = parsed else { continue };
        let e = &file.evidence;
        if e.subject != gate::EvidenceSubject::Candidate
            || e.candidate_digest != Some(found.digest)
            || e.baseline_commit_sha != found.candidate.baseline_commit_sha()
        {
            continue;
        }
        let Some(def) = definitions
            .iter()
            .find(|d| *d.digest() == e.definition_digest)
        else {
            continue;
        };
        gates.push(GateFact {
            gate: def.name().as_str().to_owned(),
            outcome: e.outcome,
            evidence_digest: file.digest,
            candidate_digest: found.digest,
        });
    }
    Ok(gates)
}

/// The facts of a decision, established from bytes: evidence bound to this digest and to the
/// operator's gate definitions, and a fresh content policy scan.
fn facts(
    found: &Found,
    evidence: &EvidenceArgs,
    reviews: &LocalReviews,
) -> Result<(ReviewFacts, Vec<PolicyFinding>), CliError> {
    let gates = gate_facts(found, evidence)?;
    // What the policy scans and the reviewer reads must be the change publication commits.
    finalizer::check_diffs_match_content(&found.candidate)?;
    let report = policy::scan(&found.candidate)?;
    let (policy, findings) = review::policy_facts(&report)?;
    let published = reviews.publication(&found.digest)?.is_some();
    let facts = ReviewFacts::assemble(&found.candidate, found.digest, gates, policy, published);
    Ok((facts, findings))
}

fn package(
    found: &Found,
    evidence: &EvidenceArgs,
    reviews: &LocalReviews,
) -> Result<ReviewPackage, CliError> {
    let (facts, findings) = facts(found, evidence, reviews)?;
    let history = reviews.history(&found.digest)?;
    let publication = reviews.publication(&found.digest)?;
    Ok(build_package(
        &found.candidate,
        &facts,
        &findings,
        history,
        publication,
    )?)
}

/// The local user as a principal (`USER`, else `local`; a name that is not a valid principal
/// is refused rather than rewritten).
fn local_actor() -> Result<Actor, CliError> {
    let name = std::env::var("USER").unwrap_or_else(|_| "local".to_owned());
    Ok(Actor {
        kind: ActorKind::LocalUser,
        principal: Principal::parse(&name)?,
    })
}

/// The text form of the review document.
pub(crate) fn package_text(p: &ReviewPackage) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "candidate {}", p.candidate_digest);
    let _ = writeln!(
        text,
        "repository {} @ {}",
        render::name(&p.repository_full_name),
        render::name(&p.baseline_commit_sha)
    );
    let _ = writeln!(
        text,
        "review: {}  validation: {}  route: {}",
        p.review_state.as_str(),
        serde_plain(&p.validation_state),
        serde_plain(&p.route_decision)
    );
    for f in &p.changed_files {
        let _ = writeln!(text, "  {:<6} {}", f.operation, render::name(&f.path));
    }
    for g in &p.gates {
        let required = if g.required { "required" } else { "optional" };
        let _ = writeln!(
            text,
            "gate {} ({required}): {}",
            render::name(&g.gate),
            g.outcome
        );
    }
    match &p.policy {
        Some(policy) if policy.clean => {
            let _ = writeln!(text, "policy: clean ({})", policy.report_digest);
        }
        Some(policy) => {
            let _ = writeln!(
                text,
                "policy: {} finding(s) ({})",
                policy.findings.len(),
                policy.report_digest
            );
            for f in &policy.findings {
                let path = f
                    .path
                    .as_deref()
                    .map_or("(name withheld)".to_owned(), render::name);
                let line = f.line.map(|l| format!(":{l}")).unwrap_or_default();
                let _ = writeln!(text, "  {} {path}{line}", render::name(&f.rule));
            }
        }
        None => {
            let _ = writeln!(text, "policy: no report");
        }
    }
    for d in &p.decisions {
        let forced = if d.record.forced { " (forced)" } else { "" };
        let _ = write!(
            text,
            "decision {}: {}{forced} by {} at {}",
            d.seq,
            d.record.decision.as_str(),
            render::name(d.record.actor.principal.as_str()),
            d.record.at_ms
        );
        if let Some(reason) = &d.record.reason {
            let _ = write!(text, ": {}", Untrusted::quoted(reason.as_str()).limit(200));
        }
        text.push('\n');
    }
    if p.publication.is_some() {
        let _ = writeln!(text, "published");
    }
    let _ = writeln!(text, "actions: {}", p.available_actions.join(", "));
    text
}

/// A unit enum's serde name (the document's own spelling).
fn serde_plain<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn show(args: &ShowArgs) -> Result<Outcome, CliError> {
    let state = state_dir()?;
    let found = find(&args.which, &state)?;
    let reviews = LocalReviews::open(&state)?;
    let p = package(&found, &args.evidence, &reviews)?;
    Ok(Outcome {
        text: package_text(&p),
        json: serde_json::to_value(&p).map_err(|_| {
            CliError::environment(super::outcome::OUTPUT_CODE, "cannot serialise the document")
        })?,
    })
}

fn decide(decision: Decision, args: &DecideArgs) -> Result<Outcome, CliError> {
    let state = state_dir()?;
    let found = find(&args.which, &state)?;
    let named = match (&args.digest, args.which.candidate.starts_with("sha256:")) {
        (Some(d), _) => parse_digest_flag("--digest", d)?,
        (None, true) => parse_digest_flag("CANDIDATE", &args.which.candidate)?,
        (None, false) => {
            return Err(CliError::usage(
                INPUT_CODE,
                "a decision on a candidate file needs --digest: the digest you reviewed",
            ));
        }
    };
    if args.which.candidate.starts_with("sha256:") {
        let given = parse_digest_flag("CANDIDATE", &args.which.candidate)?;
        if given != named {
            return Err(review::ReviewError::DigestMismatch {
                named,
                actual: given,
            }
            .into());
        }
    }
    let reason = args.reason.as_deref().map(Reason::parse).transpose()?;
    let reviews = LocalReviews::open(&state)?;
    let (facts, _) = facts(&found, &args.evidence, &reviews)?;
    let request = DecisionRequest {
        candidate_digest: named,
        decision,
        reason,
        force: args.force,
    };
    let record = review::decide(&facts, &request, local_actor()?, vocab::now_unix_ms())?;
    let seq = reviews.append(&record)?;
    let p = package(&found, &args.evidence, &reviews)?;
    let forced = if record.forced { " (forced)" } else { "" };
    let mut text = format!(
        "decision {seq}: {}{forced} recorded for {}\n",
        decision.as_str(),
        found.digest
    );
    if decision == Decision::Retry {
        let _ = writeln!(
            text,
            "run the turn again under the same approval (same scope and grants), e.g.:\n  patch-candidate run --repo REPO --approval APPROVAL --commit {}",
            render::name(found.candidate.baseline_commit_sha())
        );
    }
    text.push_str(&package_text(&p));
    Ok(Outcome {
        text,
        json: serde_json::json!({
            "seq": seq,
            "decision": serde_json::to_value(&record).unwrap_or_default(),
            "review": serde_json::to_value(&p).unwrap_or_default(),
        }),
    })
}

/// Runs one `review` subcommand.
pub(crate) fn run(command: &ReviewCommand) -> Result<Outcome, CliError> {
    match command {
        ReviewCommand::Show(args) => show(args),
        ReviewCommand::Accept(args) => decide(Decision::Accept, args),
        ReviewCommand::Reject(args) => decide(Decision::Reject, args),
        ReviewCommand::Retry(args) => decide(Decision::Retry, args),
    }
}
