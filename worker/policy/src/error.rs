//! The crate's error type. Every variant has a stable wire code ([`PolicyError::code`]); messages
//! never quote candidate content, a file name, a matched value or a report's fields.

/// Every code [`PolicyError::code`] can return (the candidate's own failures keep the finalizer's code), for documentation and contract tests.
pub const ERROR_CODES: &[&str] = PolicyError::CODES;

/// Errors of the content policy.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum PolicyError {
    /// The shipped rule file does not parse or a rule does not compile (a build defect, never
    /// input-dependent; the crate's tests compile every rule).
    #[error("PATCH_CANDIDATE_POLICY_RULES: {detail}")]
    Rules { detail: &'static str },
    /// The candidate is larger than the scan accepts.
    #[error("PATCH_CANDIDATE_POLICY_BUDGET: candidate content exceeds {limit} bytes")]
    Budget { limit: u64 },
    /// A policy report document failed its strict parse or its consistency checks.
    #[error("PATCH_CANDIDATE_POLICY_REPORT: {detail}")]
    Report { detail: &'static str },
    /// The report was made by another rule file than the one this build ships.
    #[error("PATCH_CANDIDATE_POLICY_RULES_VERSION: the report was made with another rule file")]
    RulesVersion,
    /// The report belongs to another candidate, or a rescan of the candidate differs from it.
    #[error("PATCH_CANDIDATE_POLICY_BINDING: {detail}")]
    Binding { detail: &'static str },
    /// The candidate's own failures (its digest), unchanged.
    #[error(transparent)]
    #[coded(usage_as_rejected)]
    Finalize(#[from] finalizer::FinalizeError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_starts_with_its_code() {
        let all = [
            PolicyError::Rules { detail: "x" },
            PolicyError::Budget { limit: 1 },
            PolicyError::Report { detail: "x" },
            PolicyError::RulesVersion,
            PolicyError::Binding { detail: "x" },
            PolicyError::Finalize(finalizer::FinalizeError::DigestPath),
        ];
        vocab::check_coded_samples(&all).unwrap();
    }
}
