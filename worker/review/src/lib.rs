//! Review of a patch candidate, the host side: decisions (`accept`, `reject`, `retry`) bound to
//! the exact digest they were made against ([`decide`]), the candidate's review state (the last
//! decision wins, every decision stays in the history: [`ReviewState::of`]), the review document
//! every view renders ([`ReviewPackage`], `patch_candidate.review_package.v1`), and the local,
//! append-only decision store of one-shot use ([`LocalReviews`]), and the chain of attempts: a
//! candidate a later attempt continues is `superseded`, and [`attempt_diff`] shows what changed
//! from one attempt to the next. The service keeps the same
//! records in its job store (the `jobs` crate's `review_decisions` table).
//!
//! The crate decides; it neither runs gates nor scans content. Its inputs are plain facts: the
//! candidate's digest and required gates, the gate evidence found for it (each with the digest
//! it is bound to), and the content policy report's digest and verdict, assembled one way for
//! the CLI and the service ([`ReviewFacts::assemble`], [`policy_facts`]).
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! A decision names the candidate digest it was made against and is refused for any other
//! candidate, so a stale client cannot accept a newer candidate. Evidence bound to another
//! digest counts as missing. An override of unmet gates or an unclean policy needs a reason and
//! is recorded as `forced` in the decision itself, for ever. Reasons and principals are checked
//! through fallible constructors and shown only through [`vocab::Untrusted`].
#![forbid(unsafe_code)]

mod attempts;
mod decision;
mod document;
mod error;
mod facts;
mod local;

pub use attempts::{AttemptChange, AttemptFileDiff, attempt_diff};
pub use decision::{
    Actor, ActorKind, Continues, Decision, DecisionRecord, DecisionRequest, GateFact, PolicyFact,
    Principal, Reason, ReviewFacts, ReviewState, StoredDecision, decide, parse_record,
    require_accepted,
};
pub use document::{PolicyFinding, ReviewPackage, build_package};
pub use error::{ERROR_CODES, ReviewError};
pub use facts::policy_facts;
pub use local::LocalReviews;
