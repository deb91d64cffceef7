//! Verifying a delivery: the body's length, then its signature (constant time, before any byte
//! of the body is parsed), then the delivery id and event name headers.
//!
//! | forge | signature | delivery id | event |
//! |---|---|---|---|
//! | GitHub | `X-Hub-Signature-256: sha256=<hex>` | `X-GitHub-Delivery` | `X-GitHub-Event` |
//! | Gitea / Forgejo | `X-Gitea-Signature` / `X-Forgejo-Signature: <hex>` | `X-Gitea-Delivery` / `X-Forgejo-Delivery` | `X-Gitea-Event-Type` / `X-Forgejo-Event-Type`, else `X-Gitea-Event` / `X-Forgejo-Event` |
//! | GitLab | `X-Gitlab-Token: <secret>` | `X-Gitlab-Event-UUID` | `X-Gitlab-Event` |
//!
//! The signature is HMAC-SHA256 of the raw body keyed with the secret, in lowercase hex. Where
//! both a Gitea and a Forgejo header are sent (Forgejo sends both), they must be equal.

use hmac::{Hmac, Mac as _};
use http::HeaderMap;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::error::{ForgeError, delivery};
use crate::kind::{DeliveryId, EventName, ForgeKind};
use crate::secret::WebhookSecret;

/// Largest delivery body accepted, 1 MiB. GitHub caps payloads at 25 MB, but the issue and
/// comment events this crate acts on carry one title and one body (bounded below that); a
/// larger delivery is refused before it is read or verified. The service enforces it while
/// reading the request; [`verify`] refuses a longer body too.
pub const MAX_WEBHOOK_BODY_BYTES: usize = 1024 * 1024;

/// A verified delivery: who sent it, its id and its event. Built only by [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The forge that signed it.
    pub kind: ForgeKind,
    /// The forge's id of the delivery (not covered by the signature: see [`verify`]).
    pub id: DeliveryId,
    /// The event it announces (not covered by the signature either).
    pub event: EventName,
}

/// One header's value: absent, or present once as visible ASCII.
enum Header<'a> {
    Absent,
    Once(&'a str),
    Bad,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Header<'a> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Header::Absent,
        (Some(value), None) => value.to_str().map_or(Header::Bad, Header::Once),
        (Some(_), Some(_)) => Header::Bad,
    }
}

/// The value of the first of `names` present; every other present one must be equal to it.
fn one_of<'a>(headers: &'a HeaderMap, names: &[&str]) -> Header<'a> {
    let mut found: Option<&str> = None;
    for name in names {
        match header(headers, name) {
            Header::Absent => {}
            Header::Bad => return Header::Bad,
            Header::Once(value) => match found {
                None => found = Some(value),
                Some(first) if first == value => {}
                Some(_) => return Header::Bad,
            },
        }
    }
    found.map_or(Header::Absent, Header::Once)
}

fn lower_hex_32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.bytes().all(vocab::is_lower_hex) {
        return None;
    }
    let mut out = [0; 32];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// Checks the HMAC-SHA256 `signature` of `body` in constant time.
fn check_hmac(secret: &WebhookSecret, body: &[u8], signature: &[u8; 32]) -> Result<(), ForgeError> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.bytes()).map_err(|_| ForgeError::SignatureWrong)?;
    mac.update(body);
    mac.verify_slice(signature)
        .map_err(|_| ForgeError::SignatureWrong)
}

fn check_signature(
    kind: ForgeKind,
    headers: &HeaderMap,
    body: &[u8],
    secret: &WebhookSecret,
) -> Result<(), ForgeError> {
    let (names, label): (&[&str], &'static str) = match kind {
        ForgeKind::GitHub => (&["x-hub-signature-256"], "X-Hub-Signature-256"),
        ForgeKind::Gitea => (
            &["x-forgejo-signature", "x-gitea-signature"],
            "X-Gitea-Signature",
        ),
        ForgeKind::GitLab => (&["x-gitlab-token"], "X-Gitlab-Token"),
    };
    let value = match one_of(headers, names) {
        Header::Absent => return Err(ForgeError::SignatureMissing { header: label }),
        Header::Bad => return Err(ForgeError::SignatureMalformed { header: label }),
        Header::Once(value) => value,
    };
    let malformed = ForgeError::SignatureMalformed { header: label };
    match kind {
        ForgeKind::GitHub => {
            let hex = value.strip_prefix("sha256=").ok_or(malformed)?;
            let signature =
                lower_hex_32(hex).ok_or(ForgeError::SignatureMalformed { header: label })?;
            check_hmac(secret, body, &signature)
        }
        ForgeKind::Gitea => {
            let signature = lower_hex_32(value).ok_or(malformed)?;
            check_hmac(secret, body, &signature)
        }
        ForgeKind::GitLab => {
            if value.is_empty() {
                return Err(malformed);
            }
            // Digests of both, compared in constant time: neither the secret's bytes nor its
            // length show in the time taken.
            let sent = Sha256::digest(value.as_bytes());
            let expected = Sha256::digest(secret.bytes());
            if bool::from(sent.as_slice().ct_eq(expected.as_slice())) {
                Ok(())
            } else {
                Err(ForgeError::SignatureWrong)
            }
        }
    }
}

/// Verifies a delivery: its length, its signature over the raw `body` (GitLab: its token), then
/// its delivery id and event headers.
///
/// # Errors
/// `PATCH_CANDIDATE_FORGE_BODY_TOO_LARGE` (longer than [`MAX_WEBHOOK_BODY_BYTES`]),
/// `…_SIGNATURE_MISSING`, `…_SIGNATURE_MALFORMED` (not in the documented form, repeated, or a
/// Gitea and a Forgejo header that differ), `…_SIGNATURE_WRONG`, `…_DELIVERY` (the delivery id
/// or event header absent, repeated or not a plain token).
///
/// # Security
/// Nothing of the body is parsed before the signature is checked, in constant time
/// (`hmac`'s `verify_slice`; GitLab's token through SHA-256 digests and `subtle`). No error quotes
/// a header, the body or the secret. The delivery id and event headers are not covered by the
/// signature: a captured delivery can be replayed under another id, so deduplicate on what the
/// signed body names (repository, issue, comment id) as well as on the id.
pub fn verify(
    kind: ForgeKind,
    headers: &HeaderMap,
    body: &[u8],
    secret: &WebhookSecret,
) -> Result<Delivery, ForgeError> {
    if body.len() > MAX_WEBHOOK_BODY_BYTES {
        return Err(ForgeError::BodyTooLarge {
            limit: MAX_WEBHOOK_BODY_BYTES,
        });
    }
    check_signature(kind, headers, body, secret)?;
    let (id_names, event_names): (&[&str], &[&str]) = match kind {
        ForgeKind::GitHub => (&["x-github-delivery"], &["x-github-event"]),
        ForgeKind::Gitea => (
            &["x-forgejo-delivery", "x-gitea-delivery"],
            &["x-forgejo-event-type", "x-gitea-event-type"],
        ),
        ForgeKind::GitLab => (&["x-gitlab-event-uuid"], &["x-gitlab-event"]),
    };
    let id = match one_of(headers, id_names) {
        Header::Once(value) => DeliveryId::parse(value)?,
        Header::Absent => return Err(delivery("the delivery id header is missing")),
        Header::Bad => return Err(delivery("the delivery id header is repeated or not ASCII")),
    };
    let mut event = one_of(headers, event_names);
    if kind == ForgeKind::Gitea && matches!(event, Header::Absent) {
        event = one_of(headers, &["x-forgejo-event", "x-gitea-event"]);
    }
    let event = match event {
        Header::Once(value) => EventName::parse(value)?,
        Header::Absent => return Err(delivery("the event header is missing")),
        Header::Bad => return Err(delivery("the event header is repeated or not ASCII")),
    };
    Ok(Delivery { kind, id, event })
}
