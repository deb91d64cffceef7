//! The one error of this crate's fallible constructors.

use crate::coded::Coded;

/// Why a word could not be parsed. Messages never quote the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VocabError {
    /// A digest was not `sha256:` + 64 lowercase hex (the snapshot crate's code for it).
    #[error("REPOSITORY_PATCH_MANIFEST_HASH: invalid sha256 digest")]
    DigestFormat,
}

impl VocabError {
    /// Every code this crate defines.
    pub const CODES: &'static [&'static str] = &["REPOSITORY_PATCH_MANIFEST_HASH"];

    /// The stable wire code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::DigestFormat => "REPOSITORY_PATCH_MANIFEST_HASH",
        }
    }
}

impl Coded for VocabError {
    fn code(&self) -> &'static str {
        VocabError::code(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_keeps_the_message_convention_and_is_in_the_table() {
        for e in [VocabError::DigestFormat] {
            crate::check_message_convention(&e).unwrap();
            assert!(VocabError::CODES.contains(&e.code()));
        }
    }
}
