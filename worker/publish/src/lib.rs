//! Publication of a reviewed repository patch candidate: the commit built with Git plumbing in a
//! private bare mirror from the candidate's post-images (deterministic id, recorded before the
//! push; no work tree; the user's repository only read), the destination rechecked (the base
//! branch must still point at the approved baseline, or the candidate is merged onto the moved
//! base and gated again), and a create-only atomic push; or, for a follow-up, a fast-forward
//! push of a new commit onto the one our earlier publication left on the branch.
//!
//! ```text
//! prepare(request)  ─► mirror (0700 temp dir, bare) ◄─ source repo's objects read in place
//!                      (alternates), or the baseline fetched from the remote
//!                      fast-import blobs ─► read-tree + update-index --index-info ─► write-tree
//!                      commit-tree (fixed identity/date, host-owned message) ─► commit id
//!                      ls-remote base: tip == baseline?  else BASE_MOVED, or with rebase:
//!                        fetch tip ─► merge-tree --write-tree ─► commit ─► gate.rerun(merged)
//! prepared.push()   ─► push --atomic --porcelain --force-with-lease=refs/heads/B:  (create-only)
//! extends = P      ─► B at P, else BRANCH_MOVED; fetch B; parent P; lease refs/heads/B:P (ff)
//! ```
//!
//! # Security
//! Every git process runs through [`snapshot::Git`] (cleared environment, no system or
//! global config, no replace refs, no prompts) with exactly one transport allowed, hooks off, a
//! deadline and bounded output; git's stderr is classified into stable codes and never echoed.
//! The optional pull request ([`open_pull_request`]; a GitLab merge request), comments
//! ([`post_comment`]) and commit statuses ([`set_commit_status`]) speak GitHub's, Gitea/Forgejo's
//! or GitLab's REST API with a token from a file and host-owned text.
//!
//! Credentials come from a 0600 file through a private credential helper (never in an argv or an
//! environment) or from a helper the operator names. Remote URLs cannot carry credentials. The
//! private copy lives only in the mirror directory, which is removed when the publication ends;
//! a publication killed outright leaves it behind with its owner lock released, and the next
//! publication (or `serve` at start-up) removes it ([`sweep_abandoned_mirrors`]).
#![forbid(unsafe_code)]

mod credential;
mod error;
mod forge;
mod mirror;
mod publish;
mod run;
mod types;

pub use ::forge::CommentTarget;
pub use error::{ERROR_CODES, PublishError};
pub use forge::{
    CommitStatus, ForgeEndpoint, ForgeKind, PullRequest, StatusState, find_pull_request,
    open_pull_request, post_comment, set_commit_status,
};
pub use mirror::sweep_abandoned_mirrors;
pub use publish::{
    MergedCommit, MergedTreeGate, PreparedPublication, PublishRequest, RegateVerdict, prepare,
    publish,
};
pub use types::{BranchName, CommitIdentity, CredentialSource, PublicationRecord, Remote};
