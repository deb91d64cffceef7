//! The review feedback a follow-up turn carries: the digest of the candidate a reviewer asked to
//! retry, the reviewer's note and that candidate's gate verdicts. It reaches the agent as
//! untrusted context (the stdin payload's optional `review_feedback` key, quoted in the prompt by
//! the in-container runner); it never widens the approval's scope or grants, which the host
//! checks as for any turn.

use serde::Serialize;
use vocab::{GateVerdict, Sha256};

use crate::error::TurnError;

/// The longest reviewer note, in bytes.
pub const MAX_FEEDBACK_NOTE_BYTES: usize = 8192;
/// The most gate verdicts.
pub const MAX_FEEDBACK_GATES: usize = 64;
/// The longest gate name.
const MAX_GATE_NAME_CHARS: usize = 64;

/// One gate verdict of the superseded candidate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeedbackGate {
    gate: String,
    verdict: GateVerdict,
}

/// Review feedback for a follow-up turn. Built only through [`ReviewFeedback::new`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewFeedback {
    supersedes_candidate: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    gates: Vec<FeedbackGate>,
}

fn is_gate_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    name.len() <= MAX_GATE_NAME_CHARS
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl ReviewFeedback {
    /// Checks and keeps the feedback: `note` 1 to [`MAX_FEEDBACK_NOTE_BYTES`] bytes with no
    /// control character but newline and tab; at most [`MAX_FEEDBACK_GATES`] `(gate, verdict)`
    /// pairs, each gate a gate name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_FEEDBACK` naming what is wrong (never quoting the note).
    pub fn new<'a>(
        supersedes: &Sha256,
        note: Option<&str>,
        gates: impl IntoIterator<Item = (&'a str, GateVerdict)>,
    ) -> Result<Self, TurnError> {
        let invalid = |detail| TurnError::Feedback { detail };
        if let Some(note) = note {
            if note.is_empty() || note.len() > MAX_FEEDBACK_NOTE_BYTES {
                return Err(invalid("the note must be 1 to 8192 bytes"));
            }
            if note
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
            {
                return Err(invalid("the note contains control characters"));
            }
        }
        let mut checked = Vec::new();
        for (gate, verdict) in gates {
            if checked.len() == MAX_FEEDBACK_GATES {
                return Err(invalid("more than 64 gate verdicts"));
            }
            if !is_gate_name(gate) {
                return Err(invalid("a gate name is malformed"));
            }
            checked.push(FeedbackGate {
                gate: gate.to_owned(),
                verdict,
            });
        }
        Ok(Self {
            supersedes_candidate: supersedes.to_string(),
            note: note.map(str::to_owned),
            gates: checked,
        })
    }

    /// The digest of the candidate the retry was asked for.
    #[must_use]
    pub fn supersedes_candidate(&self) -> &str {
        &self.supersedes_candidate
    }

    /// The reviewer's note.
    #[must_use]
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The number of gate verdicts.
    #[must_use]
    pub fn gate_count(&self) -> usize {
        self.gates.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest() -> Sha256 {
        format!("sha256:{}", "a".repeat(64)).parse().unwrap()
    }

    #[test]
    fn serialises_the_checked_fields_only() {
        let f = ReviewFeedback::new(
            &digest(),
            Some("keep the API\n\tplease"),
            [("unit", GateVerdict::Failed), ("lint", GateVerdict::Passed)],
        )
        .unwrap();
        let json = serde_json::to_value(&f).unwrap();
        assert_eq!(json["supersedes_candidate"], digest().to_string());
        assert_eq!(json["note"], "keep the API\n\tplease");
        assert_eq!(
            json["gates"],
            serde_json::json!([{"gate": "unit", "verdict": "failed"}, {"gate": "lint", "verdict": "passed"}])
        );
        let none = ReviewFeedback::new(&digest(), None, []).unwrap();
        assert!(serde_json::to_value(&none).unwrap().get("note").is_none());
    }

    #[test]
    fn refuses_malformed_feedback_without_quoting_it() {
        let long = "n".repeat(MAX_FEEDBACK_NOTE_BYTES + 1);
        let many: Vec<(&str, GateVerdict)> =
            vec![("unit", GateVerdict::Passed); MAX_FEEDBACK_GATES + 1];
        let cases: Vec<Result<ReviewFeedback, TurnError>> = vec![
            ReviewFeedback::new(&digest(), Some(""), []),
            ReviewFeedback::new(&digest(), Some(&long), []),
            ReviewFeedback::new(&digest(), Some("secret\u{1b}[2J"), []),
            ReviewFeedback::new(&digest(), None, [("Unit", GateVerdict::Passed)]),
            ReviewFeedback::new(&digest(), None, [("", GateVerdict::Passed)]),
            ReviewFeedback::new(&digest(), None, many),
        ];
        for (i, case) in cases.into_iter().enumerate() {
            let e = case.unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_FEEDBACK", "case {i}");
            assert!(!e.to_string().contains("secret"), "case {i}");
        }
    }
}
