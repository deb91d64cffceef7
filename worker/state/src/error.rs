//! The crate's error type: the state directory cannot be located or prepared, or one of its
//! records cannot be read. Messages name the file, never its contents.

use vocab::{Coded, FailureClass};

/// `PATCH_CANDIDATE_STATE`: local state (the state directory) could not be located or prepared
/// (also the command line's code for it).
pub const STATE_CODE: &str = "PATCH_CANDIDATE_STATE";

/// Every code [`StateError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = &[STATE_CODE];

/// Errors of the state directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The state directory cannot be located, created or opened, or a record in it cannot be
    /// read or parsed.
    #[error("PATCH_CANDIDATE_STATE: {detail}")]
    Unusable { detail: &'static str },
}

impl StateError {
    /// The stable wire code (the message prefix before `": "`).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unusable { .. } => STATE_CODE,
        }
    }
}

impl Coded for StateError {
    fn code(&self) -> &'static str {
        StateError::code(self)
    }

    /// Always the environment: this host's own files.
    fn class(&self) -> FailureClass {
        FailureClass::Environment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for e in &all {
            if let Err(violation) = vocab::check_message_convention(e) {
                panic!("{violation}");
            }
            assert_eq!(Coded::class(e), FailureClass::Environment);
        }
        vocab::check_code_table(ERROR_CODES, all.iter().map(StateError::code)).unwrap();
    }
}
