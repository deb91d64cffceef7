//! The content policy: run over every patch candidate before it is shown, served or published.
//! [`scan`] checks the lines a candidate adds and the names it creates against a pinned,
//! versioned rule file (`rules/policy.toml`: secret rules, many ported from gitleaks, with
//! keyword prefilters and entropy thresholds; executable, binary and CI/build path lists) and
//! fixed checks for hidden text (bidi controls, zero-width characters, terminal escapes), NUL
//! bytes, scripts and ELF images. The result is a [`PolicyReport`]
//! (`patch_candidate.policy_report.v1`), bound to the candidate's digest and the rule file's
//! version and SHA-256, with a `sha256:` digest computed like gate evidence's;
//! [`parse_report`] reads one strictly and [`verify`] rescans and compares.
//!
//! Modules are private; this list is the crate's surface.
//!
//! # Security
//! A finding is rule + kind + file + line, never the matched value, in every output (the report,
//! its `Debug`, errors). The repository's allow-list files and inline allow comments are not
//! honoured: the agent writes them. Secrets split across lines are out of scope except private
//! key blocks, which are flagged by their armour header line (`docs/REVIEW.md`).
#![forbid(unsafe_code)]

mod added;
mod error;
mod hidden;
mod report;
mod rules;
mod scan;

pub use error::PolicyError;
pub use report::{
    Finding, FindingKind, KindCounts, MAX_FINDINGS, MAX_FINDINGS_PER_FILE, MAX_REPORT_BYTES,
    POLICY_REPORT_DIGEST_SCHEMA, POLICY_REPORT_SCHEMA, PolicyReport, PolicyReportFile, Severity,
    parse_report,
};
pub use rules::{RuleSetInfo, rule_set_info};
pub use scan::{scan, scan_with_digest, verify};

/// Measurement only (`examples/policy_bench.rs`): a scan with another rule file, to compare rule
/// sets side by side in one process. Not part of the crate's surface; reports it makes are bound
/// to that rule file and never verify.
#[doc(hidden)]
pub mod measure {
    use crate::{PolicyError, PolicyReport};

    /// A compiled rule file.
    #[derive(Debug)]
    pub struct Rules(crate::rules::RuleSet);

    impl Rules {
        /// Compiles `text` as the shipped file is compiled.
        ///
        /// # Errors
        /// `PATCH_CANDIDATE_POLICY_RULES` when it does not compile.
        pub fn compile(text: &str) -> Result<Self, PolicyError> {
            crate::rules::compile(text).map(Self)
        }

        /// [`crate::scan_with_digest`] with these rules.
        #[must_use]
        pub fn scan_with_digest(
            &self,
            candidate: &finalizer::RepositoryPatchCandidate,
            candidate_digest: snapshot::Sha256,
        ) -> PolicyReport {
            crate::scan::scan_with_rules(&self.0, candidate, candidate_digest)
        }
    }
}
