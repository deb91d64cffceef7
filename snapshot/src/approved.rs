//! One approved turn: the approval, the snapshot it is checked against, the host policy, the
//! create-absence proof, the selection and its baseline, bound once by a fallible constructor and
//! taken by reference by every later step (the Docker turn, staging, finalisation).

use std::collections::BTreeMap;

use crate::context::{ApprovedExecutionContext, RepositorySnapshotEvidence};
use crate::error::SnapshotError;
use crate::guard::{CreateAbsence, PathGuard};
use crate::path::RepoPath;
use crate::selection::{BaselineFiles, verify_selected_baseline};
use vocab::Sha256;

/// An approval bound to one snapshot, selection and baseline. It exists only once
/// [`verify_selected_baseline`] has passed for exactly these parts, and keeps the approved
/// baseline manifest that check returned.
#[derive(Debug)]
pub struct ApprovedTurn<'a> {
    /// The approved hash of every selected path, as the binding check returned it.
    expected: BTreeMap<RepoPath, Sha256>,
    selected: Vec<RepoPath>,
    baseline: &'a BaselineFiles,
    context: &'a ApprovedExecutionContext,
    snapshot: &'a RepositorySnapshotEvidence,
    policy: &'a dyn PathGuard,
    create_absence: Option<&'a dyn CreateAbsence>,
}

impl<'a> ApprovedTurn<'a> {
    /// Binds the parts of one approved turn: every check of [`verify_selected_baseline`], in its
    /// order (snapshot identity, selection, grants, baseline set and hashes, create proofs, host
    /// policy).
    ///
    /// # Errors
    /// The first failing check's `REPOSITORY_PATCH_*` error; policy and proof errors propagate
    /// unchanged.
    ///
    /// # Security
    /// Nothing later re-derives these checks: holding an `ApprovedTurn` is the proof they passed.
    pub fn new(
        context: &'a ApprovedExecutionContext,
        snapshot: &'a RepositorySnapshotEvidence,
        policy: &'a dyn PathGuard,
        create_absence: Option<&'a dyn CreateAbsence>,
        selected: Vec<RepoPath>,
        baseline: &'a BaselineFiles,
    ) -> Result<Self, SnapshotError> {
        let expected = verify_selected_baseline(
            context,
            snapshot,
            &selected,
            baseline,
            policy,
            create_absence,
        )?;
        Ok(Self {
            context,
            snapshot,
            policy,
            create_absence,
            selected,
            baseline,
            expected,
        })
    }

    /// The approved execution context.
    #[must_use]
    pub fn context(&self) -> &'a ApprovedExecutionContext {
        self.context
    }

    /// The snapshot evidence the approval was checked against.
    #[must_use]
    pub fn snapshot(&self) -> &'a RepositorySnapshotEvidence {
        self.snapshot
    }

    /// The host path guard.
    #[must_use]
    pub fn policy(&self) -> &'a dyn PathGuard {
        self.policy
    }

    /// The proof that every create path is absent at the commit, if one was given.
    #[must_use]
    pub fn create_absence(&self) -> Option<&'a dyn CreateAbsence> {
        self.create_absence
    }

    /// The selected editable paths.
    #[must_use]
    pub fn selected(&self) -> &[RepoPath] {
        &self.selected
    }

    /// The baseline text of every selected path.
    #[must_use]
    pub fn baseline(&self) -> &'a BaselineFiles {
        self.baseline
    }

    /// The approved hash of every selected path (the pre-run manifest).
    #[must_use]
    pub fn expected(&self) -> &BTreeMap<RepoPath, Sha256> {
        &self.expected
    }
}
