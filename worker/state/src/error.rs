//! The crate's error type: the state directory cannot be located or prepared, or one of its
//! records cannot be read. Messages name the file, never its contents.

/// `PATCH_CANDIDATE_STATE`: local state (the state directory) could not be located or prepared
/// (also the command line's code for it).
pub const STATE_CODE: &str = "PATCH_CANDIDATE_STATE";

/// Every code [`StateError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = StateError::CODES;

/// Errors of the state directory: always the environment's (this host's own files).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum StateError {
    /// The state directory cannot be located, created or opened, or a record in it cannot be
    /// read or parsed.
    #[error("PATCH_CANDIDATE_STATE: {detail}")]
    #[coded(code = STATE_CODE, environment)]
    Unusable { detail: &'static str },
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocab::{Coded, FailureClass};

    fn samples() -> Vec<StateError> {
        let all = vec![StateError::Unusable { detail: "x" }];
        for e in &all {
            match e {
                StateError::Unusable { .. } => {}
            }
        }
        all
    }

    #[test]
    fn every_variant_follows_the_message_convention_and_the_table() {
        let all = samples();
        vocab::check_coded_samples(&all).unwrap();
        for e in &all {
            assert_eq!(Coded::class(e), FailureClass::Environment);
        }
    }
}
