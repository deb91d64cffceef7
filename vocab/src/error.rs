//! The one error of this crate's fallible constructors.

use crate::text::Untrusted;

/// `REPOSITORY_PATCH_MANIFEST_HASH`: a digest that is not `sha256:` + 64 lowercase hex (also the
/// snapshot's code for a manifest value that is not one).
pub const MANIFEST_HASH_CODE: &str = "REPOSITORY_PATCH_MANIFEST_HASH";

/// `PATCH_CANDIDATE_JOBS_ID`: a job, attempt, host, store or instance ID that is not in its exact
/// shape (also the job store's code for it).
pub const ID_CODE: &str = "PATCH_CANDIDATE_JOBS_ID";

/// Every code [`VocabError::code`] can return.
pub const ERROR_CODES: &[&str] = VocabError::CODES;

/// Why a word could not be parsed. Messages quote the input only bounded and escaped
/// ([`Untrusted`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, crate::Coded)]
pub enum VocabError {
    /// A digest was not `sha256:` + 64 lowercase hex (the snapshot crate's code for it).
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: invalid sha256 digest")]
    #[coded(code = MANIFEST_HASH_CODE)]
    DigestFormat,
    /// An ID failed its format check (the job store's code for it).
    #[error("PATCH_CANDIDATE_JOBS_ID: invalid {kind} id {}", Untrusted::quoted(.value).limit(80))]
    #[coded(code = ID_CODE)]
    Id { kind: &'static str, value: String },
}

impl VocabError {
    pub(crate) fn id(kind: &'static str, value: &str) -> Self {
        Self::Id {
            kind,
            value: value.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_keeps_the_message_convention_and_is_in_the_table() {
        let samples = [VocabError::DigestFormat, VocabError::id("job", "../etc")];
        crate::check_coded_samples(&samples).unwrap();
    }

    #[test]
    fn check_samples_finds_a_missing_or_stray_variant() {
        let samples = [VocabError::DigestFormat];
        crate::coded::check_samples(&samples, 1, |_| 0).unwrap();
        assert!(crate::coded::check_samples(&samples, 2, |_| 0).is_err());
        assert!(crate::coded::check_samples(&samples, 1, |_| 1).is_err());
    }
}
