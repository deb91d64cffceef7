//! One gate for one candidate: the pinned-path policy, the baseline run (cached), the candidate
//! run, the comparison and the evidence.

use std::collections::BTreeSet;

use finalizer::RepositoryPatchCandidate;
use vocab::Sha256;

use container::ContainerRuntime;

use crate::cache::BaselineCache;
use crate::classify::{
    BaselineFacts, Classified, LOG_CONTRADICTION_CODE, POLICY_CODE, classify, compare,
    deleted_modules, has_pytest_summary,
};
use crate::definition::GateDefinition;
use crate::error::GateError;
use crate::evidence::{
    EVIDENCE_SCHEMA, EvidenceSubject, GateEvidence, GateVerdict, IdList, LogTail, MAX_LISTED_IDS,
    MAX_PASSING_IDS, TreeFacts,
};
use crate::run::{RunContext, run_gate};
use crate::tree::{BaselineTree, GateTree};

/// How the baseline run was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineUse {
    /// Read from the cache (no container ran for it).
    Cached,
    /// Run now (and cached when it produced a verdict).
    Ran,
    /// Not needed (the candidate was refused by policy).
    NotNeeded,
}

/// The result of one gate for one candidate.
#[derive(Debug, Clone)]
pub struct GateResult {
    pub evidence: GateEvidence,
    pub digest: Sha256,
    /// The evidence file bytes (canonical JSON with `evidence_digest`).
    pub file: Vec<u8>,
    pub baseline: BaselineUse,
    /// The baseline's evidence file bytes, when a baseline exists.
    pub baseline_file: Option<Vec<u8>>,
    /// Containers this call ran (0, 1 or 2).
    pub containers_run: u32,
}

/// The evidence's `runtime`: `default` (the daemon's default runtime) or the configured name.
pub(crate) fn runtime_name(ctx: &RunContext<'_>) -> String {
    ctx.runtime
        .map_or_else(|| "default".to_owned(), |r| r.as_str().to_owned())
}

fn evidence_from(
    def: &GateDefinition,
    ctx: &RunContext<'_>,
    commit: &str,
    candidate_digest: Option<Sha256>,
    classified: &Classified,
    tree: Option<&GateTree>,
) -> GateEvidence {
    GateEvidence {
        schema: EVIDENCE_SCHEMA.to_owned(),
        subject: if candidate_digest.is_some() {
            EvidenceSubject::Candidate
        } else {
            EvidenceSubject::Baseline
        },
        candidate_digest,
        baseline_commit_sha: commit.to_owned(),
        gate: def.name().as_str().to_owned(),
        definition_digest: *def.digest(),
        image_id: def.image().as_str().to_owned(),
        runtime: runtime_name(ctx),
        outcome: classified.outcome,
        code: classified.code.clone(),
        exit: classified.exit,
        wall_ms: classified.wall_ms,
        tree: tree.map(|t| TreeFacts {
            entries: t.totals().entries,
            bytes: t.totals().bytes,
        }),
        tests: classified.tests,
        failing: IdList::from_set(&classified.failing),
        // A baseline-subject run lists its passing ids: what a candidate is checked against.
        passing: (candidate_digest.is_none() && classified.tests.is_some())
            .then(|| IdList::from_set_capped(&classified.passing, MAX_PASSING_IDS)),
        comparison: None,
        pinned_changed: Vec::new(),
        log: classified.log.clone(),
        baseline_evidence_digest: None,
    }
}

/// Runs `def` for `candidate` over `base` (the candidate's baseline commit): refuses it by
/// policy when it changes a pinned path, else runs (or reads from `cache`) the baseline run and
/// runs the candidate, and returns the bound evidence.
///
/// # Errors
/// Host-side failures before a verdict exists: the candidate does not apply to the tree, the
/// tree cannot be streamed, the image is missing or not the approved ID, Docker is down, state
/// cannot be written. (A run that happened always ends in evidence, `error` included.)
///
/// # Security
/// Both containers are sealed like a turn and removed on every path; nothing from them is trusted
/// beyond the checked report.
pub async fn evaluate_gate<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    def: &GateDefinition,
    base: &BaselineTree,
    candidate: &RepositoryPatchCandidate,
    cache: &BaselineCache,
    ctx: RunContext<'_>,
) -> Result<GateResult, GateError> {
    let candidate_digest = finalizer::repository_patch_digest(candidate)?;
    let commit = base.commit().to_owned();
    // The candidate run's evidence (a policy refusal has no tree).
    let candidate_evidence = |classified: &Classified, tree: Option<&GateTree>| {
        evidence_from(def, &ctx, &commit, Some(candidate_digest), classified, tree)
    };
    let pinned: BTreeSet<String> = candidate
        .changed_files()
        .iter()
        .map(|f| f.path().as_str().to_owned())
        .filter(|p| def.is_pinned(p))
        .collect();
    if !pinned.is_empty() {
        let classified = Classified {
            outcome: GateVerdict::PolicyRefused,
            code: Some(POLICY_CODE.to_owned()),
            exit: None,
            wall_ms: 0,
            tests: None,
            failing: BTreeSet::new(),
            passing: BTreeSet::new(),
            log: LogTail::empty(),
        };
        let mut evidence = candidate_evidence(&classified, None);
        evidence.pinned_changed = pinned.into_iter().take(MAX_LISTED_IDS).collect();
        let (file, digest) = evidence.to_file_bytes()?;
        return Ok(GateResult {
            evidence,
            digest,
            file,
            baseline: BaselineUse::NotNeeded,
            baseline_file: None,
            containers_run: 0,
        });
    }
    let candidate_tree = base.with_candidate(candidate, def.workspace_bytes())?;
    let baseline_tree = base.baseline(def.workspace_bytes())?;
    if let Some(junit) = def.junit()
        && baseline_tree.contains_file(&junit.path)
    {
        return Err(GateError::Tree {
            detail: "the baseline tree holds the gate's JUnit path".to_owned(),
        });
    }
    let mut containers_run = 0;
    let runtime_key = runtime_name(&ctx);
    let (baseline, baseline_use) = match cache.get(&commit, def, &runtime_key) {
        Some(hit) => (hit, BaselineUse::Cached),
        None => {
            let facts = run_gate(runtime, def, &baseline_tree, ctx).await?;
            containers_run += 1;
            let classified = classify(&facts, def.junit().is_some());
            let evidence =
                evidence_from(def, &ctx, &commit, None, &classified, Some(&baseline_tree));
            let (file, digest) = evidence.to_file_bytes()?;
            cache.put(&commit, def, &runtime_key, &file, evidence.outcome)?;
            (
                crate::evidence::EvidenceFile { evidence, digest },
                BaselineUse::Ran,
            )
        }
    };
    let (baseline_file, _) = baseline.evidence.to_file_bytes()?;

    let facts = run_gate(runtime, def, &candidate_tree, ctx).await?;
    containers_run += 1;
    let mut classified = classify(&facts, def.junit().is_some());
    let deleted: Vec<&str> = candidate
        .changed_files()
        .iter()
        .filter(|f| f.op() == snapshot::FileOp::Delete)
        .map(|f| f.path().as_str())
        .collect();
    let comparison = compare(
        &classified,
        &BaselineFacts::from_evidence(&baseline.evidence),
        &deleted_modules(&deleted, def.cwd()),
    );
    // Tests the baseline passed that are gone from the candidate's run fail it, whatever its
    // exit status said.
    if classified.outcome == GateVerdict::Passed && comparison.lost_tests() {
        classified.outcome = GateVerdict::Failed;
    }
    // pytest always ends its output with its summary line; a baseline log that has one and a
    // clean candidate log that has none means the candidate's code silenced pytest's output
    // (and could then have rewritten the report unseen).
    if classified.outcome == GateVerdict::Passed
        && has_pytest_summary(&baseline.evidence.log)
        && !has_pytest_summary(&classified.log)
    {
        classified.outcome = GateVerdict::Error;
        classified.code = Some(LOG_CONTRADICTION_CODE.to_owned());
    }
    let mut evidence = candidate_evidence(&classified, Some(&candidate_tree));
    evidence.comparison = Some(comparison);
    evidence.baseline_evidence_digest = Some(baseline.digest);
    let (file, digest) = evidence.to_file_bytes()?;
    Ok(GateResult {
        evidence,
        digest,
        file,
        baseline: baseline_use,
        baseline_file: Some(baseline_file),
        containers_run,
    })
}

/// Runs `def` once over exactly the tree of `commit` in the repository (or bare git directory)
/// at `repo`, with nothing applied: the re-gate of a merged commit before it is published. The
/// evidence's subject is the commit (`baseline`, no candidate digest); there is no baseline
/// comparison, so only an outright `passed` run passes.
///
/// # Errors
/// As [`BaselineTree::load`] and [`run_gate`] (environment failures); a run that happened always
/// ends in evidence.
pub async fn evaluate_commit<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    def: &GateDefinition,
    repo: &std::path::Path,
    commit: &str,
    ctx: RunContext<'_>,
) -> Result<(GateEvidence, Sha256), GateError> {
    let owned_repo = repo.to_owned();
    let owned_commit = commit.to_owned();
    let base = tokio::task::spawn_blocking(move || BaselineTree::load(&owned_repo, &owned_commit))
        .await
        .map_err(|_| GateError::State {
            detail: "the tree reader failed",
        })??;
    let tree = base.baseline(def.workspace_bytes())?;
    if let Some(junit) = def.junit()
        && tree.contains_file(&junit.path)
    {
        return Err(GateError::Tree {
            detail: "the tree holds the gate's JUnit path".to_owned(),
        });
    }
    let facts = run_gate(runtime, def, &tree, ctx).await?;
    let classified = classify(&facts, def.junit().is_some());
    let evidence = evidence_from(def, &ctx, commit, None, &classified, Some(&tree));
    let (_, digest) = evidence.to_file_bytes()?;
    Ok((evidence, digest))
}

/// `evaluate_commit` for each of `defs` in order, stopping at the first that does not pass;
/// `report` sees each run's evidence. `Ok(true)` when every run passed outright.
///
/// # Errors
/// As `evaluate_commit`.
pub async fn evaluate_commit_all<R: ContainerRuntime + Clone + 'static>(
    runtime: &R,
    defs: &[&GateDefinition],
    repo: &std::path::Path,
    commit: &str,
    ctx: RunContext<'_>,
    mut report: impl FnMut(&GateEvidence, &Sha256),
) -> Result<bool, GateError> {
    for def in defs {
        let (evidence, digest) = evaluate_commit(runtime, def, repo, commit, ctx).await?;
        report(&evidence, &digest);
        if evidence.outcome != GateVerdict::Passed {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The one verdict line of a gate (`gate NAME: OUTCOME ...`), every value from the evidence.
#[must_use]
pub fn verdict_line(evidence: &GateEvidence, digest: &Sha256) -> String {
    let mut line = format!("gate {}: {}", evidence.gate, evidence.outcome.as_str());
    if let Some(code) = &evidence.code {
        line.push_str(&format!(" ({})", vocab::Untrusted::quoted(code)));
    }
    if let Some(t) = &evidence.tests {
        line.push_str(&format!(
            "; tests {} passed, {} failed, {} error, {} skipped",
            t.passed, t.failed, t.error, t.skipped
        ));
    }
    if let Some(c) = &evidence.comparison {
        line.push_str(&format!(
            "; new failures {}, fixed {}, still failing {}",
            c.new_failures.count, c.fixed.count, c.still_failing.count
        ));
        if !c.vanished.is_empty() {
            line.push_str(&format!("; vanished {}", c.vanished.count));
        }
        if let Some(r) = &c.too_few_ran {
            line.push_str(&format!(
                "; too few tests ran ({} of {}, {} deleted)",
                r.candidate, r.baseline, r.deleted
            ));
        }
        if c.regression {
            line.push_str("; regression");
        }
    }
    if !evidence.pinned_changed.is_empty() {
        line.push_str(&format!(
            "; pinned paths changed {}",
            evidence.pinned_changed.len()
        ));
    }
    line.push_str(&format!("; evidence {digest}"));
    line
}

/// The evidence file name of a candidate's gate run: `<candidate hex>.gate.<name>.json`.
#[must_use]
pub fn evidence_file_name(candidate_digest: &Sha256, gate: &str) -> String {
    format!("{}.gate.{gate}.json", candidate_digest.bare_hex())
}

#[cfg(test)]
#[path = "gate_tests.rs"]
mod tests;
