//! The review feedback a follow-up turn carries: the digest of the candidate a reviewer asked to
//! retry, the reviewer's note and that candidate's gate verdicts. It reaches the agent as
//! untrusted context (the stdin payload's optional `review_feedback` key, quoted in the prompt by
//! the in-container runner); it never widens the approval's scope or grants, which the host
//! checks as for any turn.

use serde::Serialize;
use vocab::{GateVerdict, Sha256};

use crate::error::TurnError;

/// The longest reviewer note, in bytes.
const MAX_FEEDBACK_NOTE_BYTES: usize = 8192;
/// The most gate verdicts.
const MAX_FEEDBACK_GATES: usize = 64;
/// The longest gate name.
const MAX_GATE_NAME_CHARS: usize = 64;
/// The most newly failing test ids one gate passes on (the first ones, in the evidence's order).
const MAX_FEEDBACK_FAILURES: usize = 32;
/// The longest failing test id passed on, in bytes; longer ones are left out.
const MAX_FEEDBACK_FAILURE_BYTES: usize = 512;
/// The longest output excerpt of one gate, in bytes.
pub const MAX_FEEDBACK_EXCERPT_BYTES: usize = 4096;

/// One gate verdict of the superseded candidate, with what it said when it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FeedbackGate {
    gate: String,
    verdict: GateVerdict,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    new_failures: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    excerpt: Option<String>,
}

/// The last at most [`MAX_FEEDBACK_EXCERPT_BYTES`] bytes of `text` that start at a line (a
/// longer last line is cut to its end); `None` for an empty text.
#[must_use]
pub fn excerpt_tail(text: &str) -> Option<&str> {
    let text = text.trim_end_matches('\n');
    if text.is_empty() {
        return None;
    }
    if text.len() <= MAX_FEEDBACK_EXCERPT_BYTES {
        return Some(text);
    }
    let mut start = text.len() - MAX_FEEDBACK_EXCERPT_BYTES;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let tail = text.get(start..)?;
    // Start at the first whole line when there is one.
    Some(match tail.find('\n') {
        Some(i) if i + 1 < tail.len() => tail.get(i + 1..).unwrap_or(tail),
        _ => tail,
    })
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
    /// Checks and keeps the feedback: `note` 1 to `MAX_FEEDBACK_NOTE_BYTES` (8,192) bytes with no
    /// control character but newline and tab; at most `MAX_FEEDBACK_GATES` (64) `(gate, verdict)`
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
                new_failures: Vec::new(),
                excerpt: None,
            });
        }
        Ok(Self {
            supersedes_candidate: supersedes.to_string(),
            note: note.map(str::to_owned),
            gates: checked,
        })
    }

    /// Adds what gate `gate` said of the superseded candidate: the test ids that newly failed
    /// (the first `MAX_FEEDBACK_FAILURES` (32) of at most `MAX_FEEDBACK_FAILURE_BYTES` (512) bytes
    /// without control characters; others are left out) and an excerpt of its output. The
    /// excerpt must be what [`excerpt_tail`] keeps of the gate evidence's escaped log, already
    /// through the content policy: printable ASCII, newline and tab only.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_FEEDBACK` when no gate of that name is in the feedback, or the
    /// excerpt is empty, too long or holds other characters (never quoting it).
    pub fn with_gate_context(
        mut self,
        gate: &str,
        new_failures: &[String],
        excerpt: Option<&str>,
    ) -> Result<Self, TurnError> {
        let invalid = |detail| TurnError::Feedback { detail };
        if let Some(e) = excerpt
            && (e.is_empty()
                || e.len() > MAX_FEEDBACK_EXCERPT_BYTES
                || !e
                    .bytes()
                    .all(|b| b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b)))
        {
            return Err(invalid(
                "a gate excerpt is empty, too long or not escaped text",
            ));
        }
        let entry = self
            .gates
            .iter_mut()
            .find(|g| g.gate == gate)
            .ok_or(invalid("the context names a gate without a verdict"))?;
        entry.new_failures = new_failures
            .iter()
            .filter(|id| {
                (1..=MAX_FEEDBACK_FAILURE_BYTES).contains(&id.len())
                    && !id.chars().any(char::is_control)
            })
            .take(MAX_FEEDBACK_FAILURES)
            .cloned()
            .collect();
        entry.excerpt = excerpt.map(str::to_owned);
        Ok(self)
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

    /// The gate verdicts, with what each failed gate said.
    #[must_use]
    pub fn gates(&self) -> &[FeedbackGate] {
        &self.gates
    }
}

impl FeedbackGate {
    /// The gate's name.
    #[must_use]
    pub fn gate(&self) -> &str {
        &self.gate
    }

    /// Its verdict.
    #[must_use]
    pub fn verdict(&self) -> GateVerdict {
        self.verdict
    }

    /// The checked test ids that newly failed.
    #[must_use]
    pub fn new_failures(&self) -> &[String] {
        &self.new_failures
    }

    /// The checked excerpt of its output.
    #[must_use]
    pub fn excerpt(&self) -> Option<&str> {
        self.excerpt.as_deref()
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
    fn gate_context_is_bounded_and_only_escaped_text() {
        let f = ReviewFeedback::new(&digest(), None, [("pytest", GateVerdict::Failed)]).unwrap();
        let mut ids: Vec<String> = (0..40).map(|i| format!("tests/t.py::test_{i}")).collect();
        ids.insert(0, "bad\nid".to_owned());
        ids.insert(1, "x".repeat(MAX_FEEDBACK_FAILURE_BYTES + 1));
        let with = f
            .clone()
            .with_gate_context("pytest", &ids, Some("E   assert 5 == 6\n\tat x"))
            .unwrap();
        let json = serde_json::to_value(&with).unwrap();
        let failures = json["gates"][0]["new_failures"].as_array().unwrap();
        assert_eq!(failures.len(), MAX_FEEDBACK_FAILURES);
        assert_eq!(failures[0], "tests/t.py::test_0");
        assert_eq!(json["gates"][0]["excerpt"], "E   assert 5 == 6\n\tat x");
        // No context: the keys are absent, so a plain retry's payload is as before.
        let plain = serde_json::to_value(&f).unwrap();
        assert_eq!(
            plain["gates"][0],
            serde_json::json!({"gate": "pytest", "verdict": "failed"})
        );
        let long = "e".repeat(MAX_FEEDBACK_EXCERPT_BYTES + 1);
        for (gate, excerpt) in [
            ("lint", Some("x")),
            ("pytest", Some("")),
            ("pytest", Some(long.as_str())),
            ("pytest", Some("secret\u{1b}[2J")),
            ("pytest", Some("caf\u{e9}")),
        ] {
            let e = f.clone().with_gate_context(gate, &[], excerpt).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_FEEDBACK");
            assert!(!e.to_string().contains("secret"));
        }
    }

    #[test]
    fn the_excerpt_is_the_tail_from_a_line_start() {
        assert_eq!(excerpt_tail(""), None);
        assert_eq!(excerpt_tail("\n\n"), None);
        assert_eq!(excerpt_tail("a\nb\n"), Some("a\nb"));
        let text = format!("{}\nlast line", "l".repeat(10 * MAX_FEEDBACK_EXCERPT_BYTES));
        assert_eq!(excerpt_tail(&text), Some("last line"));
        let lines: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let tail = excerpt_tail(&lines).unwrap();
        assert!(tail.len() <= MAX_FEEDBACK_EXCERPT_BYTES);
        assert!(tail.starts_with("line "));
        assert!(tail.ends_with("line 1999"));
        let one = "x".repeat(MAX_FEEDBACK_EXCERPT_BYTES * 2);
        assert_eq!(
            excerpt_tail(&one).unwrap().len(),
            MAX_FEEDBACK_EXCERPT_BYTES
        );
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
