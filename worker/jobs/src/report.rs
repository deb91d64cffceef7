//! Reports back to the forge (schema version 11): what a submitted forge delivery's job comes
//! to goes back to the forge as comments, a pushed branch, a pull / merge request and commit
//! statuses. Any host works the open reports off, one holder at a time under a lease:
//!
//! ```text
//! finish_forge_delivery(Submitted) ─► report open, due now
//! claim_forge_report (lease) ─► the service looks at the job ─► record_forge_call (once each)
//!                                                          └► defer_forge_report (due later)
//!                                                          └► close_forge_report (reason)
//! ```
//!
//! Each call back is recorded once by `(forge, delivery, call)` with what the forge answered:
//! the first record stands, so a host that looks again after another host's call finds it
//! there and does not call again. A host that dies between the forge's answer and the record
//! calls again after the lease; the service makes those calls safe to repeat (a pull request is
//! looked up by its branch before one is opened, a status is set to the same value).
//!
//! `forge_pulls` maps a pull / merge request this service opened to the job whose publication
//! its branch holds and the commit at its head; a follow-up's publication moves the head only
//! from the commit recorded (compare and set).

use serde::Serialize;

use crate::error::{JobsError, Result};
use crate::intake::check_text;
use crate::rows::DbRow;
use vocab::JobId;

/// Longest call name, in bytes.
const MAX_CALL_BYTES: usize = 128;
/// Largest call result document, in bytes.
pub const MAX_CALL_RESULT_BYTES: usize = 4096;
/// Longest project path and branch name, in bytes.
const MAX_PULL_TEXT_BYTES: usize = 255;

/// One call back to the forge, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ForgeCall {
    /// The call's name (e.g. `comment:queued`, `pull_request`, `status:<commit>`).
    pub call: String,
    /// What the forge answered (host-checked fields only).
    pub result: serde_json::Value,
    pub recorded_at_ms: i64,
}

/// A pull / merge request this service opened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ForgePull {
    /// The operator's name of the forge.
    pub forge: String,
    /// The forge's project path.
    pub project: String,
    /// The pull request's number (GitLab: the merge request's `iid`).
    pub number: u64,
    /// The job whose publication the branch holds now.
    pub job_id: JobId,
    /// The branch.
    pub branch: String,
    /// The commit at the branch's head that this service pushed.
    pub head: String,
}

/// Checks a call name.
pub(crate) fn check_call(call: &str) -> Result<()> {
    check_text("call", call, MAX_CALL_BYTES)
}

/// Checks and encodes a call's result document.
pub(crate) fn encode_result(result: &serde_json::Value) -> Result<String> {
    let text = serde_json::to_string(result)
        .map_err(|_| JobsError::input("result", "cannot be encoded"))?;
    if text.len() > MAX_CALL_RESULT_BYTES {
        return Err(JobsError::input("result", "larger than 4 KiB"));
    }
    Ok(text)
}

fn printable(field: &'static str, text: &str) -> Result<()> {
    if text.is_empty()
        || text.len() > MAX_PULL_TEXT_BYTES
        || text.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(JobsError::input(
            field,
            "1 to 255 printable bytes, no spaces",
        ));
    }
    Ok(())
}

/// Checks a commit id: 40 or 64 lowercase hex digits.
pub(crate) fn check_commit(field: &'static str, commit: &str) -> Result<()> {
    if matches!(commit.len(), 40 | 64) && commit.bytes().all(vocab::is_lower_hex) {
        Ok(())
    } else {
        Err(JobsError::input(
            field,
            "must be 40 or 64 lowercase hex digits",
        ))
    }
}

impl ForgePull {
    /// Checks the fields.
    pub(crate) fn check(&self) -> Result<()> {
        check_text("forge", &self.forge, 64)?;
        printable("project", &self.project)?;
        printable("branch", &self.branch)?;
        check_commit("head", &self.head)?;
        if self.number == 0 || i64::try_from(self.number).is_err() {
            return Err(JobsError::input("number", "must be 1..=2^63-1"));
        }
        Ok(())
    }

    /// The number as stored.
    pub(crate) fn number_i64(&self) -> i64 {
        i64::try_from(self.number).unwrap_or(i64::MAX)
    }
}

/// The number of a pull request as stored.
pub(crate) fn pull_number(number: u64) -> Result<i64> {
    match i64::try_from(number) {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(JobsError::input("number", "must be 1..=2^63-1")),
    }
}

/// The columns [`pull_row`] reads.
pub(crate) const PULL_COLUMNS: &str = "forge, project, number, job_id, branch, head";

/// A row of [`PULL_COLUMNS`].
pub(crate) fn pull_row(row: &impl DbRow) -> Result<ForgePull> {
    let number: i64 = row.at(2)?;
    let job: String = row.at(3)?;
    Ok(ForgePull {
        forge: row.at(0)?,
        project: row.at(1)?,
        number: u64::try_from(number).map_err(|_| JobsError::Corrupt { field: "number" })?,
        job_id: JobId::parse(&job).map_err(|_| JobsError::Corrupt { field: "job_id" })?,
        branch: row.at(4)?,
        head: row.at(5)?,
    })
}

/// A row of `call, result_json, recorded_at`.
pub(crate) fn call_row(row: &impl DbRow) -> Result<ForgeCall> {
    let text: String = row.at(1)?;
    Ok(ForgeCall {
        call: row.at(0)?,
        result: serde_json::from_str(&text).map_err(|_| JobsError::Corrupt { field: "result" })?,
        recorded_at_ms: row.at(2)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_results_and_pulls_are_checked() {
        assert!(check_call("status:0123abc").is_ok());
        assert!(check_call("comment queued").is_err());
        assert!(check_call("").is_err());
        assert!(encode_result(&serde_json::json!({"number": 1})).is_ok());
        assert!(encode_result(&serde_json::json!("x".repeat(MAX_CALL_RESULT_BYTES))).is_err());
        let ok = ForgePull {
            forge: "github".into(),
            project: "acme/app".into(),
            number: 7,
            job_id: JobId::parse("job_0123456789abcdef0123456789abcdef").unwrap(),
            branch: "agent/issue-7".into(),
            head: "a".repeat(40),
        };
        assert!(ok.check().is_ok());
        for bad in [
            ForgePull {
                number: 0,
                ..ok.clone()
            },
            ForgePull {
                head: "A".repeat(40),
                ..ok.clone()
            },
            ForgePull {
                branch: "a b".into(),
                ..ok.clone()
            },
            ForgePull {
                project: String::new(),
                ..ok.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        assert!(pull_number(0).is_err());
        assert!(pull_number(u64::MAX).is_err());
    }
}
