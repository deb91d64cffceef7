//! A follow-up turn that continues an earlier candidate: the parent, read and checked on the
//! trusted side, and the starting tree its post-images make over the approved baseline. The
//! follow-up's own candidate is still finalised against the baseline (one digest, one diff
//! against the pinned commit), so nothing the container claims about the start is trusted.

use std::collections::BTreeMap;

use archive::StartOverlay;
use finalizer::{CandidateStore, RepositoryPatchCandidate, repository_patch_digest};
use serde::Serialize;
use snapshot::{ApprovedExecutionContext, BaselineFiles, FileOp, RepoPath};
use vocab::Sha256;

use crate::error::TurnError;

/// The candidate a follow-up continues, with its digest as checked when it was read.
#[derive(Debug, Clone)]
pub struct ParentCandidate {
    candidate: RepositoryPatchCandidate,
    digest: Sha256,
}

impl ParentCandidate {
    /// The candidate filed under `digest` in `store` (the store re-validates it and re-checks its
    /// digest).
    ///
    /// # Errors
    /// The store's `REPOSITORY_PATCH_STORE_*` and candidate validation codes.
    pub fn load(store: &CandidateStore, digest: &Sha256) -> Result<Self, TurnError> {
        Ok(Self {
            candidate: store.get(digest)?,
            digest: *digest,
        })
    }

    /// A candidate held in memory (just finalised); its digest is computed here.
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_DIGEST_*` when it cannot be digested.
    pub fn new(candidate: RepositoryPatchCandidate) -> Result<Self, TurnError> {
        let digest = repository_patch_digest(&candidate)?;
        Ok(Self { candidate, digest })
    }

    /// The parent's digest.
    #[must_use]
    pub fn digest(&self) -> &Sha256 {
        &self.digest
    }

    /// The parent candidate.
    #[must_use]
    pub fn candidate(&self) -> &RepositoryPatchCandidate {
        &self.candidate
    }
}

/// The starting tree of a follow-up: the parent's digest and the overlay of the baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFrom {
    candidate: Sha256,
    overlay: StartOverlay,
}

impl StartFrom {
    /// The parent's post-images over `baseline` (the turn's selected editable files at the
    /// pinned commit), checked against `context`: the parent must be a candidate of this very
    /// approval (handoff, request, plan, app, repository, approved plan digest) at this
    /// baseline commit; each update and deletion must be of a selected file whose baseline
    /// bytes have the hash the parent recorded, each creation of a granted path absent from the
    /// baseline, each deletion a granted one.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FOLLOW_UP_PARENT` naming the first check that fails.
    pub fn of_parent(
        parent: &ParentCandidate,
        context: &ApprovedExecutionContext,
        baseline: &BaselineFiles,
    ) -> Result<Self, TurnError> {
        let refuse = |detail| TurnError::FollowUpParent { detail };
        let c = &parent.candidate;
        let same_approval = c.handoff_id() == context.handoff_id()
            && c.request_id() == context.request_id()
            && c.plan_id() == context.plan_id()
            && c.app_id() == context.app_id()
            && c.repository_full_name() == context.repository_full_name()
            && c.approved_plan_digest() == context.approved_plan_digest();
        if !same_approval {
            return Err(refuse("the candidate is of another approval"));
        }
        if c.baseline_commit_sha() != context.baseline_commit_sha() {
            return Err(refuse("the candidate is of another baseline commit"));
        }
        let mut overlay = StartOverlay::new();
        for file in c.changed_files() {
            let path = file.path();
            let base_matches = || {
                baseline.get(path).is_some_and(|text| {
                    file.previous_sha256() == Some(&Sha256::of(text.as_bytes()))
                })
            };
            let entry = match file.op() {
                FileOp::Update if base_matches() => file.content().map(str::to_owned),
                FileOp::Create
                    if !baseline.contains_key(path) && context.create_paths().contains(path) =>
                {
                    file.content().map(str::to_owned)
                }
                FileOp::Delete if base_matches() && context.delete_paths().contains(path) => None,
                _ => {
                    return Err(refuse(
                        "a change leaves the selection, the grants or the baseline",
                    ));
                }
            };
            if file.op() != FileOp::Delete && entry.is_none() {
                return Err(refuse("a change has no content"));
            }
            overlay.insert(path.clone(), entry);
        }
        if overlay.is_empty() {
            return Err(refuse("the candidate changes nothing"));
        }
        Ok(Self {
            candidate: parent.digest,
            overlay,
        })
    }

    /// The digest of the candidate the turn continues.
    #[must_use]
    pub fn candidate(&self) -> &Sha256 {
        &self.candidate
    }

    /// The overlay of the baseline.
    #[must_use]
    pub fn overlay(&self) -> &StartOverlay {
        &self.overlay
    }

    /// The stdin payload's `start_from` value.
    pub(crate) fn wire(&self) -> WireStart<'_> {
        WireStart {
            candidate: self.candidate.to_string(),
            files: self
                .overlay
                .iter()
                .filter_map(|(p, c)| c.as_deref().map(|c| (p.as_str(), c)))
                .collect(),
            absent: self
                .overlay
                .iter()
                .filter(|(_, c)| c.is_none())
                .map(|(p, _)| p.as_str())
                .collect(),
        }
    }
}

/// The stdin payload's `start_from` (read by the in-container worker).
#[derive(Debug, Serialize)]
pub(crate) struct WireStart<'a> {
    candidate: String,
    files: BTreeMap<&'a str, &'a str>,
    absent: Vec<&'a str>,
}

/// Whether a follow-up's candidate changes nothing its parent did not: the same files with the
/// same operations and bytes (the chain of follow-ups stops there).
#[must_use]
pub fn same_changes(a: &RepositoryPatchCandidate, b: &RepositoryPatchCandidate) -> bool {
    let key = |c: &RepositoryPatchCandidate| -> Vec<(RepoPath, FileOp, Option<Sha256>)> {
        c.changed_files()
            .iter()
            .map(|f| (f.path().clone(), f.op(), f.new_sha256().cloned()))
            .collect()
    };
    key(a) == key(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use finalizer::{CandidateFields, RepositoryPatchFile};

    const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

    fn context(grants: bool) -> ApprovedExecutionContext {
        let mut doc = serde_json::json!({
            "handoff_id": "h", "request_id": "r", "plan_id": "p", "app_id": "a",
            "build_registry_id": "b", "repository_full_name": "o/n", "baseline_commit_sha": COMMIT,
            "raw_request": "t", "request_type": "change", "approved_plan_digest": "0".repeat(64),
            "snapshot_digest": "s", "graph_identity_digest": "g", "impact_report_digest": "i",
            "execution_strategy_id": "e", "rationale": "r", "allowed_paths": ["app/"],
        });
        if grants {
            doc["create_paths"] = serde_json::json!(["app/new.py"]);
            doc["delete_paths"] = serde_json::json!(["app/b.py"]);
        }
        ApprovedExecutionContext::from_json(&doc.to_string()).unwrap()
    }

    fn p(s: &str) -> RepoPath {
        RepoPath::parse(s).unwrap()
    }

    fn baseline() -> BaselineFiles {
        [
            (p("app/a.py"), "a\n".to_owned()),
            (p("app/b.py"), "b\n".to_owned()),
        ]
        .into()
    }

    fn sha(s: &str) -> Option<Sha256> {
        Some(Sha256::of(s.as_bytes()))
    }

    fn file(
        path: &str,
        op: FileOp,
        previous: Option<&str>,
        content: Option<&str>,
    ) -> RepositoryPatchFile {
        RepositoryPatchFile::new(
            p(path),
            op,
            previous.and_then(sha),
            content.and_then(sha),
            content.map(str::to_owned),
            String::new(),
        )
        .unwrap()
    }

    fn parent(fields: CandidateFields, files: Vec<RepositoryPatchFile>) -> ParentCandidate {
        ParentCandidate::new(RepositoryPatchCandidate::new(fields, files).unwrap()).unwrap()
    }

    fn fields() -> CandidateFields {
        CandidateFields {
            handoff_id: "h".into(),
            request_id: "r".into(),
            plan_id: "p".into(),
            app_id: "a".into(),
            build_registry_id: "b".into(),
            repository_full_name: "o/n".into(),
            baseline_commit_sha: COMMIT.into(),
            approved_plan_digest: "0".repeat(64),
            ..CandidateFields::default()
        }
    }

    #[test]
    fn the_parents_post_images_overlay_the_baseline() {
        let parent = parent(
            fields(),
            vec![
                file("app/a.py", FileOp::Update, Some("a\n"), Some("a2\n")),
                file("app/b.py", FileOp::Delete, Some("b\n"), None),
                file("app/new.py", FileOp::Create, None, Some("n\n")),
            ],
        );
        let start = StartFrom::of_parent(&parent, &context(true), &baseline()).unwrap();
        assert_eq!(start.candidate(), parent.digest());
        let overlay: Vec<(&str, Option<&str>)> = start
            .overlay()
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        assert_eq!(
            overlay,
            [
                ("app/a.py", Some("a2\n")),
                ("app/b.py", None),
                ("app/new.py", Some("n\n"))
            ]
        );
        let wire = serde_json::to_value(start.wire()).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({
                "candidate": parent.digest().to_string(),
                "files": {"app/a.py": "a2\n", "app/new.py": "n\n"},
                "absent": ["app/b.py"],
            })
        );
        assert!(same_changes(parent.candidate(), parent.candidate()));
    }

    #[test]
    fn a_parent_of_another_approval_baseline_or_scope_is_refused() {
        let update = || file("app/a.py", FileOp::Update, Some("a\n"), Some("a2\n"));
        let mut other_plan = fields();
        other_plan.approved_plan_digest = "1".repeat(64);
        let mut other_commit = fields();
        other_commit.baseline_commit_sha = "f".repeat(40);
        let mut other_request = fields();
        other_request.request_id = "r2".into();
        let cases = [
            (parent(other_plan, vec![update()]), true, "another approval"),
            (
                parent(other_request, vec![update()]),
                true,
                "another approval",
            ),
            (
                parent(other_commit, vec![update()]),
                true,
                "another baseline",
            ),
            // The baseline bytes differ from what the parent recorded.
            (
                parent(
                    fields(),
                    vec![file("app/a.py", FileOp::Update, Some("x\n"), Some("a2\n"))],
                ),
                true,
                "leaves",
            ),
            // A file outside the selection.
            (
                parent(
                    fields(),
                    vec![file("app/c.py", FileOp::Update, Some("c\n"), Some("c2\n"))],
                ),
                true,
                "leaves",
            ),
            // Creations and deletions without grants.
            (
                parent(
                    fields(),
                    vec![file("app/new.py", FileOp::Create, None, Some("n\n"))],
                ),
                false,
                "leaves",
            ),
            (
                parent(
                    fields(),
                    vec![file("app/b.py", FileOp::Delete, Some("b\n"), None)],
                ),
                false,
                "leaves",
            ),
            // A creation of a path the baseline has.
            (
                parent(
                    fields(),
                    vec![file("app/a.py", FileOp::Create, None, Some("n\n"))],
                ),
                true,
                "leaves",
            ),
        ];
        for (parent, grants, says) in cases {
            let e = StartFrom::of_parent(&parent, &context(grants), &baseline()).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_FOLLOW_UP_PARENT");
            assert!(e.to_string().contains(says), "{e}");
        }
    }
}
