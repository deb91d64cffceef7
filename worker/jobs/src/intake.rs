//! Forge deliveries (schema version 10): every webhook delivery a host accepted, recorded once
//! by `(forge, delivery)` — the forge's own delivery id — so a redelivery changes nothing, and,
//! for a delivery that starts a job, a small queue with leases that any host works off.
//!
//! ```text
//! webhook ─► record_forge_delivery ─► ignored (reason)          done
//!                                  └► queued (trigger document) ─► claim_forge_delivery (lease)
//!                                       ─► pin_forge_base (the base tip, pinned once)
//!                                       ─► job submitted ─► finish_forge_delivery: submitted/refused
//! ```
//!
//! The base commit is pinned in the row before the job is built, so a host that dies between
//! the job's submission and the delivery's finish leaves a delivery whose next attempt builds
//! the same job again (same approval, same idempotency key): exactly one job per delivery.

use serde::Serialize;

use crate::error::{JobsError, Result};
use crate::rows::DbRow;
use vocab::JobId;

/// Longest forge name and reason, in bytes.
const MAX_NAME_BYTES: usize = 64;
/// Longest delivery id, in bytes (the forge crate's own bound).
const MAX_DELIVERY_BYTES: usize = 128;
/// Largest trigger document, in bytes.
pub const MAX_TRIGGER_BYTES: usize = 96 * 1024;

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Acknowledged and ignored (an event or action not acted on, an unmapped user, …).
    Ignored,
    /// Starts a job: waiting for (or held by) a host.
    Queued,
    /// Its job is in the queue (`job_id`).
    Submitted,
    /// Its job could not be built (`reason` holds the code).
    Refused,
}

impl DeliveryState {
    /// The stored name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignored => "ignored",
            Self::Queued => "queued",
            Self::Submitted => "submitted",
            Self::Refused => "refused",
        }
    }

    fn parse(text: &str) -> Result<Self> {
        Ok(match text {
            "ignored" => Self::Ignored,
            "queued" => Self::Queued,
            "submitted" => Self::Submitted,
            "refused" => Self::Refused,
            _ => return Err(JobsError::Corrupt { field: "state" }),
        })
    }
}

/// A delivery to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewForgeDelivery {
    /// The operator's name of the forge (its webhook route).
    pub forge: String,
    /// The forge's delivery id.
    pub delivery: String,
    /// `Ignored` or `Queued`.
    pub state: DeliveryState,
    /// Why (a short word or a code; never text from the payload).
    pub reason: String,
    /// For a queued delivery: what it acts on, as 64 lower-hex digits (the hash of the
    /// repository, issue and label, or of the comment id, from the signed body). A second
    /// delivery of the same subject under another delivery id is a duplicate too: the delivery
    /// id header is not covered by the forge's signature.
    pub subject: Option<String>,
    /// For a queued delivery: what the job is built from (host-checked values only).
    pub trigger: Option<serde_json::Value>,
}

/// A recorded delivery.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ForgeDelivery {
    pub forge: String,
    pub delivery: String,
    pub received_at_ms: i64,
    pub state: DeliveryState,
    pub reason: String,
    pub trigger: Option<serde_json::Value>,
    /// The base branch's commit, pinned by the first host that resolved it.
    pub base_commit: Option<String>,
    /// Hosts that took it so far.
    pub attempts: u32,
    pub job_id: Option<JobId>,
    /// Whether the report back to the forge is still open (a submitted delivery's, from schema
    /// version 11 on; see `crate::report`).
    pub report_open: bool,
    /// Failed looks at the report in a row (reset by every recorded call).
    pub report_failures: u32,
    /// Why the report closed (a short word or a code).
    pub report_reason: Option<String>,
}

pub(crate) fn check_text(field: &'static str, text: &str, max: usize) -> Result<()> {
    let ok = !text.is_empty()
        && text.len() <= max
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if ok {
        Ok(())
    } else {
        Err(JobsError::input(field, "1 to 128 of [A-Za-z0-9._:-]"))
    }
}

/// Checks a forge name and delivery id.
pub(crate) fn check_key(forge: &str, delivery: &str) -> Result<()> {
    check_text("forge", forge, MAX_NAME_BYTES)?;
    check_text("delivery", delivery, MAX_DELIVERY_BYTES)
}

/// Checks a reason.
fn check_reason(reason: &str) -> Result<()> {
    check_text("reason", reason, MAX_NAME_BYTES)
}

impl NewForgeDelivery {
    /// Checks the fields and encodes the trigger document.
    pub(crate) fn checked(&self) -> Result<Option<String>> {
        check_key(&self.forge, &self.delivery)?;
        check_reason(&self.reason)?;
        if let Some(subject) = &self.subject
            && !(subject.len() == 64 && subject.bytes().all(vocab::is_lower_hex))
        {
            return Err(JobsError::input("subject", "not 64 lower-hex digits"));
        }
        match (self.state, &self.trigger, &self.subject) {
            (DeliveryState::Queued, Some(trigger), Some(_)) => {
                let text = serde_json::to_string(trigger)
                    .map_err(|_| JobsError::input("trigger", "cannot be encoded"))?;
                if text.len() > MAX_TRIGGER_BYTES {
                    return Err(JobsError::input("trigger", "larger than 96 KiB"));
                }
                Ok(Some(text))
            }
            (DeliveryState::Ignored, None, None) => Ok(None),
            _ => Err(JobsError::input(
                "state",
                "a new delivery is queued with a trigger and a subject, or ignored without",
            )),
        }
    }
}

/// How a queued delivery ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// Its job is in the queue.
    Submitted(JobId),
    /// Its job could not be built; `code` says why (a stable code, checked like a reason).
    Refused { code: String },
}

impl DeliveryOutcome {
    /// Checks the reason.
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            Self::Submitted(_) => Ok(()),
            Self::Refused { code } => check_reason(code),
        }
    }

    /// `(state, reason, job_id)` as stored.
    pub(crate) fn columns(&self) -> (&'static str, String, Option<String>) {
        match self {
            Self::Submitted(id) => ("submitted", "job".to_owned(), Some(id.to_string())),
            Self::Refused { code } => ("refused", code.clone(), None),
        }
    }
}

/// The columns [`delivery_row`] reads.
pub(crate) const DELIVERY_COLUMNS: &str = "forge, delivery, received_at, state, reason, \
     trigger_json, base_commit, attempts, job_id, report, report_failures, report_reason";

/// A row of [`DELIVERY_COLUMNS`].
pub(crate) fn delivery_row(row: &impl DbRow) -> Result<ForgeDelivery> {
    let state: String = row.at(3)?;
    let trigger: Option<String> = row.at(5)?;
    let trigger = trigger
        .map(|t| serde_json::from_str(&t).map_err(|_| JobsError::Corrupt { field: "trigger" }))
        .transpose()?;
    let attempts: i64 = row.at(7)?;
    let job_id: Option<String> = row.at(8)?;
    let report: Option<String> = row.at(9)?;
    let report_failures: i64 = row.at(10)?;
    Ok(ForgeDelivery {
        forge: row.at(0)?,
        delivery: row.at(1)?,
        received_at_ms: row.at(2)?,
        state: DeliveryState::parse(&state)?,
        reason: row.at(4)?,
        trigger,
        base_commit: row.at(6)?,
        attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
        job_id: job_id
            .map(|id| JobId::parse(&id).map_err(|_| JobsError::Corrupt { field: "job_id" }))
            .transpose()?,
        report_open: report.as_deref() == Some("open"),
        report_failures: u32::try_from(report_failures).unwrap_or(u32::MAX),
        report_reason: row.at(11)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_deliveries_are_checked() {
        let ok = NewForgeDelivery {
            forge: "github".into(),
            delivery: "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
            state: DeliveryState::Queued,
            reason: "label".into(),
            subject: Some("a".repeat(64)),
            trigger: Some(serde_json::json!({"a": 1})),
        };
        assert_eq!(ok.checked().unwrap().as_deref(), Some(r#"{"a":1}"#));
        let ignored = NewForgeDelivery {
            state: DeliveryState::Ignored,
            trigger: None,
            subject: None,
            ..ok.clone()
        };
        assert_eq!(ignored.checked().unwrap(), None);
        for bad in [
            NewForgeDelivery {
                delivery: "a b".into(),
                ..ok.clone()
            },
            NewForgeDelivery {
                forge: String::new(),
                ..ok.clone()
            },
            NewForgeDelivery {
                reason: "x".repeat(65),
                ..ok.clone()
            },
            NewForgeDelivery {
                trigger: None,
                ..ok.clone()
            },
            NewForgeDelivery {
                subject: Some("A".repeat(64)),
                ..ok.clone()
            },
            NewForgeDelivery {
                state: DeliveryState::Submitted,
                ..ok.clone()
            },
            NewForgeDelivery {
                trigger: Some(serde_json::json!("x".repeat(MAX_TRIGGER_BYTES))),
                ..ok.clone()
            },
        ] {
            assert!(bad.checked().is_err(), "{bad:?}");
        }
    }
}
