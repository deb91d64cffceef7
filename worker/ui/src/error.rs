//! The UI crate's errors, each with a stable code.

/// Every code [`UiError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = UiError::CODES;

/// What can go wrong in the UI's own primitives (rendering, sessions, sign-in).
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum UiError {
    /// A template failed to render (a bug, never the data's fault: every value is escaped).
    #[error("PATCH_CANDIDATE_UI_RENDER: a page failed to render")]
    Render,
    /// No randomness for a session id or the session secret.
    #[error("PATCH_CANDIDATE_UI_RANDOM: no randomness available")]
    Random,
    /// Too many failed sign-ins in the current window.
    #[error(
        "PATCH_CANDIDATE_UI_SIGN_IN_LIMIT: too many failed sign-ins; try again in {retry_after_s} s"
    )]
    SignInLimit { retry_after_s: u64 },
    /// The CSRF token is missing, malformed, from another session or for another digest.
    #[error("PATCH_CANDIDATE_UI_CSRF: the form's token does not match this session and candidate")]
    Csrf,
    /// A form body is malformed or too large.
    #[error("PATCH_CANDIDATE_UI_FORM: {detail}")]
    Form { detail: &'static str },
}

impl From<askama::Error> for UiError {
    fn from(_: askama::Error) -> Self {
        Self::Render
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_follows_the_message_convention_and_is_in_the_table() {
        let all = [
            UiError::Render,
            UiError::Random,
            UiError::SignInLimit { retry_after_s: 1 },
            UiError::Csrf,
            UiError::Form { detail: "x" },
        ];
        vocab::check_coded_samples(&all).unwrap();
    }
}
