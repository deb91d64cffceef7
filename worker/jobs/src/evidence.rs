//! Gate evidence next to the candidate: one document per required gate, written in the same
//! fenced transaction as the candidate (exactly once, with it) and read back for `jobs show`,
//! the API's job view and `verify`.
//!
//! The store keeps the evidence file's bytes as given (canonical JSON with its digest, made and
//! checked by the gate crate) and the few fields the views need (gate name, outcome, digest,
//! wall time); it does not parse the document itself.

use serde::Serialize;

pub(crate) use vocab::GateVerdict;

use crate::error::{JobsError, Result};

/// The most evidence documents one job carries (one per required gate).
pub const MAX_EVIDENCE_DOCUMENTS: usize = 64;
/// The largest evidence document, in bytes.
pub const MAX_EVIDENCE_DOCUMENT_BYTES: usize = 4 * 1_048_576;
/// The longest gate name.
pub const MAX_GATE_NAME_CHARS: usize = 64;

/// One gate's evidence document. Built only through [`EvidenceDocument::new`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EvidenceDocument {
    gate: String,
    outcome: GateVerdict,
    digest: String,
    wall_ms: u64,
    #[serde(skip)]
    bytes: Vec<u8>,
}

pub(crate) fn is_gate_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_GATE_NAME_CHARS
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

impl EvidenceDocument {
    /// Checks and keeps one document: `gate` a gate name (`[a-z0-9][a-z0-9_-]*`, at most 64),
    /// `digest` the document's own `sha256:` digest, `bytes` the evidence file (JSON, at most
    /// 4 MiB).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` naming the field.
    pub fn new(
        gate: &str,
        outcome: GateVerdict,
        digest: &str,
        wall_ms: u64,
        bytes: Vec<u8>,
    ) -> Result<Self> {
        if !is_gate_name(gate) {
            return Err(JobsError::input(
                "gate",
                "must be [a-z0-9][a-z0-9_-]*, at most 64 characters",
            ));
        }
        if !vocab::is_typed_sha256(digest) {
            return Err(JobsError::input(
                "evidence_digest",
                "must be sha256: and 64 lowercase hex digits",
            ));
        }
        if i64::try_from(wall_ms).is_err() {
            return Err(JobsError::input("wall_ms", "out of range"));
        }
        if bytes.is_empty() || bytes.len() > MAX_EVIDENCE_DOCUMENT_BYTES {
            return Err(JobsError::input("evidence", "must be 1..=4194304 bytes"));
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_err() {
            return Err(JobsError::input("evidence", "not a JSON document"));
        }
        Ok(Self {
            gate: gate.to_owned(),
            outcome,
            digest: digest.to_owned(),
            wall_ms,
            bytes,
        })
    }

    /// A stored row, re-checked: a row that fails the checks is a corrupt database.
    pub(crate) fn from_row(
        gate: &str,
        outcome: &str,
        digest: &str,
        wall_ms: i64,
        bytes: Vec<u8>,
    ) -> Result<Self> {
        let outcome = GateVerdict::parse(outcome).ok_or(JobsError::Corrupt { field: "outcome" })?;
        let wall_ms =
            u64::try_from(wall_ms).map_err(|_| JobsError::Corrupt { field: "wall_ms" })?;
        Self::new(gate, outcome, digest, wall_ms, bytes)
            .map_err(|_| JobsError::Corrupt { field: "evidence" })
    }

    #[must_use]
    pub fn gate(&self) -> &str {
        &self.gate
    }

    #[must_use]
    pub fn outcome(&self) -> GateVerdict {
        self.outcome
    }

    /// The document's own digest (`sha256:…`).
    #[must_use]
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The gate run's host-measured wall time.
    #[must_use]
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }

    /// The wall time as the database stores it (checked to fit at construction).
    pub(crate) fn wall_ms_i64(&self) -> i64 {
        i64::try_from(self.wall_ms).unwrap_or(i64::MAX)
    }

    /// The evidence file, byte for byte.
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Checks a completion's set of documents: at most [`MAX_EVIDENCE_DOCUMENTS`], one per gate.
pub(crate) fn check_set(documents: &[EvidenceDocument]) -> Result<()> {
    if documents.len() > MAX_EVIDENCE_DOCUMENTS {
        return Err(JobsError::input("evidence", "more than 64 documents"));
    }
    let mut names: Vec<&str> = documents.iter().map(EvidenceDocument::gate).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(JobsError::input("evidence", "two documents for one gate"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest() -> String {
        format!("sha256:{}", "a".repeat(64))
    }

    #[test]
    fn documents_are_checked_before_storage() {
        let ok = EvidenceDocument::new("pytest", GateVerdict::Failed, &digest(), 5, b"{}".to_vec());
        assert_eq!(ok.unwrap().outcome().as_str(), "failed");
        for (gate, d, bytes) in [
            ("", digest(), b"{}".to_vec()),
            ("Py", digest(), b"{}".to_vec()),
            ("-x", digest(), b"{}".to_vec()),
            (&"a".repeat(65)[..], digest(), b"{}".to_vec()),
            ("pytest", "sha256:x".to_owned(), b"{}".to_vec()),
            ("pytest", digest(), Vec::new()),
            ("pytest", digest(), b"{".to_vec()),
            (
                "pytest",
                digest(),
                vec![b' '; MAX_EVIDENCE_DOCUMENT_BYTES + 1],
            ),
        ] {
            let e = EvidenceDocument::new(gate, GateVerdict::Passed, &d, 1, bytes).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
        }
        for v in GateVerdict::ALL {
            assert_eq!(GateVerdict::parse(v.as_str()).unwrap(), v);
        }
        assert!(GateVerdict::parse("pass").is_none());
    }

    #[test]
    fn one_document_per_gate() {
        let doc = |g: &str| {
            EvidenceDocument::new(g, GateVerdict::Passed, &digest(), 1, b"{}".to_vec()).unwrap()
        };
        assert!(check_set(&[doc("a"), doc("b")]).is_ok());
        assert!(check_set(&[doc("a"), doc("b"), doc("a")]).is_err());
        let many: Vec<_> = (0..=MAX_EVIDENCE_DOCUMENTS)
            .map(|i| doc(&format!("g{i}")))
            .collect();
        assert!(check_set(&many).is_err());
    }
}
