//! The fenced transitions of a running attempt, written once for both backends.
//!
//! Every outcome of an attempt (`complete`, `fail`, `snooze`, `release`, `finish_cancelled`) is a
//! [`Transition`]. Here, once and without SQL dialect, it becomes a [`FencedWrite`]: the target
//! state, the columns it changes, the candidate and usage rows it adds, and its log line. Each
//! backend performs a `FencedWrite` with one function, guarded by
//! `id + attempt_id + state='running'` ([`fenced_update`] is its `UPDATE`), in one transaction:
//! the guard, the usage row and the log line are written in one place per backend. The design
//! follows River's `JobSetStateIfRunning` (one guarded write, typed targets).

use std::time::Duration;

use crate::evidence::EvidenceDocument;
use crate::ledger::UsageDocument;
use crate::model::{JobState, Retry, duration_ms};
use crate::rows::{EVENT_CANCELLED, EVENT_COMPLETED, EVENT_RELEASED, EVENT_SNOOZED};

/// An outcome of a running attempt, as the facade received it (arguments already checked).
#[derive(Debug)]
pub(crate) enum Transition {
    /// The result: the candidate, its gate evidence and the attempt's usage row; `completed`.
    Complete {
        candidate: Vec<u8>,
        digest: String,
        usage: UsageDocument,
        evidence: Vec<EvidenceDocument>,
        follow_up: Option<NewJobRow>,
    },
    /// A failure: dead letter, or queued again after a delay with the attempt spent.
    Fail {
        code: String,
        message: String,
        retry: Retry,
        usage: Option<UsageDocument>,
    },
    /// Queued again after `delay` with the attempt given back; `code` says why.
    Snooze { delay: Duration, code: String },
    /// Drain: queued again now with the attempt given back.
    Release { usage: Option<UsageDocument> },
    /// A running attempt whose cancellation was requested stopped: `cancelled`.
    Cancelled { usage: Option<UsageDocument> },
}

/// Where a fenced write takes the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `completed`, whatever else was requested.
    Completed,
    /// `cancelled`.
    Cancelled,
    /// `queued` again; `cancelled` when a cancellation was requested.
    Queued,
    /// `failed`; `cancelled` when a cancellation was requested.
    Failed,
    /// `queued` again while an attempt is left, else `failed`; `cancelled` when a cancellation
    /// was requested.
    Retried,
}

impl Target {
    /// The state when neither the cancel rule nor the retry rule applies.
    pub(crate) fn state(self) -> JobState {
        match self {
            Self::Completed => JobState::Completed,
            Self::Cancelled => JobState::Cancelled,
            Self::Queued => JobState::Queued,
            Self::Failed | Self::Retried => JobState::Failed,
        }
    }

    /// A requested cancellation wins: the job never returns to the queue once it was asked for.
    pub(crate) fn honours_cancel(self) -> bool {
        matches!(self, Self::Queued | Self::Failed | Self::Retried)
    }

    /// `queued` instead of [`Target::state`] while `attempts < max_attempts`.
    pub(crate) fn retries(self) -> bool {
        self == Self::Retried
    }

    /// The write may make the job claimable (the facade then wakes idle runners).
    pub(crate) fn may_queue(self) -> bool {
        matches!(self, Self::Queued | Self::Retried)
    }
}

/// What a fenced write does to `error_code` and `error_message`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ErrorColumns {
    /// Left as they are.
    Keep,
    /// Both set to NULL.
    Clear,
    /// Both set.
    Set { code: String, message: String },
}

/// The candidate row a completion adds.
#[derive(Debug)]
pub(crate) struct CandidateRow {
    pub(crate) digest: String,
    pub(crate) bytes: Vec<u8>,
}

/// One fenced write, as data. Every write clears `lease_until` and sets `updated_at`.
#[derive(Debug)]
pub(crate) struct FencedWrite {
    /// The state the job goes to.
    pub(crate) target: Target,
    /// `attempts - 1`: the attempt is given back (snooze, release).
    pub(crate) give_back_attempt: bool,
    /// `run_at = now + delay` (ms); `None` keeps `run_at`.
    pub(crate) delay_ms: Option<i64>,
    /// `error_code` / `error_message`.
    pub(crate) error: ErrorColumns,
    /// Sets `candidate_digest` and adds the `candidates` row.
    pub(crate) candidate: Option<CandidateRow>,
    /// The candidate's gate evidence rows (only with a candidate).
    pub(crate) evidence: Vec<EvidenceDocument>,
    /// The attempt's usage row (inserted, or replacing the attempt's earlier one).
    pub(crate) usage: Option<UsageDocument>,
    /// The log line's code.
    pub(crate) event_code: String,
    /// The log line's message.
    pub(crate) event_message: String,
    /// An automatic follow-up job queued with the result (only with a candidate): inserted
    /// unless a job with its idempotency key exists, in the same transaction.
    pub(crate) follow_up: Option<NewJobRow>,
}

/// A job row to insert (a follow-up queued by a completion).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewJobRow {
    pub(crate) id: String,
    pub(crate) kind: &'static str,
    pub(crate) key: String,
    pub(crate) spec_json: String,
    pub(crate) approval_json: Vec<u8>,
    pub(crate) max_attempts: i64,
}

impl From<Transition> for FencedWrite {
    fn from(transition: Transition) -> Self {
        match transition {
            Transition::Complete {
                candidate,
                digest,
                usage,
                evidence,
                follow_up,
            } => Self {
                evidence,
                follow_up,
                target: Target::Completed,
                give_back_attempt: false,
                delay_ms: None,
                error: ErrorColumns::Clear,
                event_code: EVENT_COMPLETED.to_owned(),
                event_message: format!("candidate {digest}"),
                candidate: Some(CandidateRow {
                    digest,
                    bytes: candidate,
                }),
                usage: Some(usage),
            },
            Transition::Fail {
                code,
                message,
                retry,
                usage,
            } => {
                let (target, delay) = match retry {
                    Retry::Never => (Target::Failed, Duration::ZERO),
                    Retry::After(d) => (Target::Retried, d),
                };
                Self {
                    target,
                    give_back_attempt: false,
                    delay_ms: Some(duration_ms(delay)),
                    event_code: code.clone(),
                    event_message: message.clone(),
                    error: ErrorColumns::Set { code, message },
                    candidate: None,
                    evidence: Vec::new(),
                    usage,
                    follow_up: None,
                }
            }
            Transition::Snooze { delay, code } => {
                let ms = duration_ms(delay);
                Self {
                    target: Target::Queued,
                    give_back_attempt: true,
                    delay_ms: Some(ms),
                    event_code: EVENT_SNOOZED.to_owned(),
                    event_message: format!("snoozed for {ms} ms: {code}"),
                    error: ErrorColumns::Set {
                        code,
                        message: "snoozed".to_owned(),
                    },
                    candidate: None,
                    evidence: Vec::new(),
                    usage: None,
                    follow_up: None,
                }
            }
            Transition::Release { usage } => Self {
                target: Target::Queued,
                give_back_attempt: true,
                delay_ms: Some(0),
                error: ErrorColumns::Keep,
                candidate: None,
                evidence: Vec::new(),
                usage,
                follow_up: None,
                event_code: EVENT_RELEASED.to_owned(),
                event_message: "released on drain".to_owned(),
            },
            Transition::Cancelled { usage } => Self {
                target: Target::Cancelled,
                give_back_attempt: false,
                delay_ms: None,
                error: ErrorColumns::Keep,
                candidate: None,
                evidence: Vec::new(),
                usage,
                follow_up: None,
                event_code: EVENT_CANCELLED.to_owned(),
                event_message: "running attempt stopped".to_owned(),
            },
        }
    }
}

impl FencedWrite {
    /// `attempts = attempts - n`.
    pub(crate) fn attempts_back(&self) -> i64 {
        i64::from(self.give_back_attempt)
    }

    /// Whether the error columns are written (with [`FencedWrite::error_code`] and
    /// [`FencedWrite::error_message`], NULL for [`ErrorColumns::Clear`]).
    pub(crate) fn writes_error(&self) -> bool {
        self.error != ErrorColumns::Keep
    }

    /// The new `error_code` when [`FencedWrite::writes_error`].
    pub(crate) fn error_code(&self) -> Option<&str> {
        match &self.error {
            ErrorColumns::Set { code, .. } => Some(code),
            ErrorColumns::Keep | ErrorColumns::Clear => None,
        }
    }

    /// The new `error_message` when [`FencedWrite::writes_error`].
    pub(crate) fn error_message(&self) -> Option<&str> {
        match &self.error {
            ErrorColumns::Set { message, .. } => Some(message),
            ErrorColumns::Keep | ErrorColumns::Clear => None,
        }
    }

    /// The new `candidate_digest`, when the write adds a candidate.
    pub(crate) fn candidate_digest(&self) -> Option<&str> {
        self.candidate.as_ref().map(|c| c.digest.as_str())
    }
}

/// The guarded `UPDATE` of every fenced write, in either dialect. `p` is the placeholder sigil
/// (`?` or `$`); the parameters are, in order: 1 job id, 2 attempt id, 3
/// [`Target::state`], 4 [`Target::honours_cancel`], 5 [`Target::retries`], 6
/// [`FencedWrite::attempts_back`], 7 the delay as the dialect's `due` expression reads it,
/// 8 [`FencedWrite::writes_error`], 9 [`FencedWrite::error_code`], 10
/// [`FencedWrite::error_message`], 11 [`FencedWrite::candidate_digest`]. `now` is the clock
/// expression; `due` is the new `run_at` (NULL keeps it). The state rule reads: a requested
/// cancellation wins where the target honours it, then a retry while an attempt is left, else
/// the target's state.
pub(crate) fn fenced_update(p: char, now: &str, due: &str) -> String {
    format!(
        "UPDATE jobs SET
             state = CASE WHEN {p}4 AND cancel_requested THEN 'cancelled'
                          WHEN {p}5 AND attempts < max_attempts THEN 'queued'
                          ELSE CAST({p}3 AS TEXT) END,
             attempts = attempts - {p}6,
             run_at = COALESCE({due}, run_at),
             lease_until = NULL,
             error_code = CASE WHEN {p}8 THEN CAST({p}9 AS TEXT) ELSE error_code END,
             error_message = CASE WHEN {p}8 THEN CAST({p}10 AS TEXT) ELSE error_message END,
             candidate_digest = COALESCE(CAST({p}11 AS TEXT), candidate_digest),
             updated_at = {now}
         WHERE id = {p}1 AND attempt_id = {p}2 AND state = 'running'"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn summary(t: Transition) -> (Target, bool, Option<i64>, ErrorColumns, bool, bool, String) {
        let w = FencedWrite::from(t);
        (
            w.target,
            w.give_back_attempt,
            w.delay_ms,
            w.error,
            w.candidate.is_some(),
            w.usage.is_some(),
            format!("{} {}", w.event_code, w.event_message),
        )
    }

    /// Each outcome's data, spelled out: what used to be a separate statement per outcome.
    #[test]
    fn each_transition_is_data_of_one_fenced_write() {
        let complete = Transition::Complete {
            candidate: vec![1],
            digest: "sha256:ab".to_owned(),
            usage: UsageDocument::new(&serde_json::json!({})).unwrap(),
            evidence: Vec::new(),
            follow_up: None,
        };
        assert_eq!(
            summary(complete),
            (
                Target::Completed,
                false,
                None,
                ErrorColumns::Clear,
                true,
                true,
                format!("{EVENT_COMPLETED} candidate sha256:ab")
            )
        );
        let fail = |retry| Transition::Fail {
            code: "X_CODE".to_owned(),
            message: "m".to_owned(),
            retry,
            usage: None,
        };
        let set = || ErrorColumns::Set {
            code: "X_CODE".to_owned(),
            message: "m".to_owned(),
        };
        assert_eq!(
            summary(fail(Retry::Never)),
            (
                Target::Failed,
                false,
                Some(0),
                set(),
                false,
                false,
                "X_CODE m".to_owned()
            )
        );
        assert_eq!(
            summary(fail(Retry::After(Duration::from_secs(2)))),
            (
                Target::Retried,
                false,
                Some(2000),
                set(),
                false,
                false,
                "X_CODE m".to_owned()
            )
        );
        let snooze = Transition::Snooze {
            delay: Duration::from_millis(1500),
            code: "Y_CODE".to_owned(),
        };
        assert_eq!(
            summary(snooze),
            (
                Target::Queued,
                true,
                Some(1500),
                ErrorColumns::Set {
                    code: "Y_CODE".to_owned(),
                    message: "snoozed".to_owned()
                },
                false,
                false,
                format!("{EVENT_SNOOZED} snoozed for 1500 ms: Y_CODE")
            )
        );
        assert_eq!(
            summary(Transition::Release {
                usage: Some(UsageDocument::new(&serde_json::json!({})).unwrap())
            }),
            (
                Target::Queued,
                true,
                Some(0),
                ErrorColumns::Keep,
                false,
                true,
                format!("{EVENT_RELEASED} released on drain")
            )
        );
        assert_eq!(
            summary(Transition::Cancelled { usage: None }),
            (
                Target::Cancelled,
                false,
                None,
                ErrorColumns::Keep,
                false,
                false,
                format!("{EVENT_CANCELLED} running attempt stopped")
            )
        );
    }

    #[test]
    fn the_cancel_rule_and_the_retry_rule_belong_to_their_targets() {
        let all = [
            Target::Completed,
            Target::Cancelled,
            Target::Queued,
            Target::Failed,
            Target::Retried,
        ];
        let rules: Vec<_> = all
            .iter()
            .map(|t| (t.state(), t.honours_cancel(), t.retries(), t.may_queue()))
            .collect();
        assert_eq!(
            rules,
            vec![
                (JobState::Completed, false, false, false),
                (JobState::Cancelled, false, false, false),
                (JobState::Queued, true, false, true),
                (JobState::Failed, true, false, false),
                (JobState::Failed, true, true, true),
            ]
        );
    }
}
