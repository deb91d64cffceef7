//! The forge side of webhook-started jobs: signed deliveries from GitHub, Gitea / Forgejo and
//! GitLab verified ([`verify`]) and parsed into typed, bounded events ([`parse_event`]).
//!
//! ```text
//! request ─► body ≤ MAX_WEBHOOK_BODY_BYTES (the service, while reading)
//!         ─► verify(kind, headers, body, secret)   signature in constant time, then the
//!                                                   delivery id and event headers ─► Delivery
//!         ─► parse_event(&delivery, body)           serde into bounded types ─► Option<ForgeEvent>
//! ```
//!
//! The REST calls back to a forge (pull / merge requests, comments, commit statuses) are in
//! `publish`, which names this crate's [`ForgeKind`], [`ProjectPath`] and [`CommentTarget`].
//!
//! # Security
//! The secret comes from an operator file ([`WebhookSecret::from_file`]; the rules of
//! [`read_secret_file`], which `publish` uses for its tokens too) and shows in no error, log or
//! `Debug`. Nothing of a body is parsed before its signature is checked. Every field read is
//! checked (names against strict character sets, text bounded, numbers non-zero); no error
//! quotes a header or the body. Titles, bodies, comments and labels stay untrusted text: show
//! them only through `vocab::Untrusted`.
#![forbid(unsafe_code)]

mod error;
mod event;
mod kind;
mod secret;
mod verify;

pub use error::{ERROR_CODES, ForgeError};
pub use event::{
    CommentTarget, ForgeEvent, IssueRef, MAX_TEXT_BYTES, MAX_TITLE_BYTES, RepositoryRef,
    parse_event,
};
pub use kind::{
    CloneUrl, DeliveryId, EventName, ForgeKind, ForgeUser, MAX_DELIVERY_ID_BYTES, ProjectPath,
};
pub use secret::{MAX_SECRET_FILE_BYTES, WebhookSecret, read_secret_file};
pub use verify::{Delivery, MAX_WEBHOOK_BODY_BYTES, verify};
