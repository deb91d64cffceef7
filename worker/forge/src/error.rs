//! The crate's error type. Every variant has a stable wire code ([`ForgeError::code`]); messages
//! never quote a header, the body of a delivery or the secret: they name what was wrong, never
//! what was sent.

/// Every code [`ForgeError::code`] can return, for documentation and contract tests.
pub const ERROR_CODES: &[&str] = ForgeError::CODES;

/// Errors of webhook verification and parsing, and of the secret file.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum ForgeError {
    /// The signature header (GitLab: the token header) is absent.
    #[error("PATCH_CANDIDATE_FORGE_SIGNATURE_MISSING: the delivery carries no {header} header")]
    SignatureMissing { header: &'static str },
    /// The signature header is not in the forge's documented form.
    #[error(
        "PATCH_CANDIDATE_FORGE_SIGNATURE_MALFORMED: the {header} header is not in its documented form"
    )]
    SignatureMalformed { header: &'static str },
    /// The signature (GitLab: the token) does not match the secret and the body.
    #[error("PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG: the delivery's signature does not match")]
    SignatureWrong,
    /// The body is longer than [`crate::MAX_WEBHOOK_BODY_BYTES`].
    #[error("PATCH_CANDIDATE_FORGE_BODY_TOO_LARGE: the delivery is larger than {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The delivery id or the event name header is absent, repeated or not a plain token.
    #[error("PATCH_CANDIDATE_FORGE_DELIVERY: {detail}")]
    Delivery { detail: &'static str },
    /// The payload is not JSON of the documented shape, or a field is out of bounds.
    #[error("PATCH_CANDIDATE_FORGE_PAYLOAD: {detail}")]
    Payload { detail: &'static str },
    /// The secret file is missing, too large, malformed or readable by others.
    #[error("PATCH_CANDIDATE_FORGE_SECRET: {detail}")]
    Secret { detail: &'static str },
}

pub(crate) fn payload(detail: &'static str) -> ForgeError {
    ForgeError::Payload { detail }
}

pub(crate) fn delivery(detail: &'static str) -> ForgeError {
    ForgeError::Delivery { detail }
}

#[cfg(test)]
mod tests {
    use vocab::Coded;

    use super::*;

    #[test]
    fn every_message_starts_with_its_code_and_the_table_is_exact() {
        let all = [
            ForgeError::SignatureMissing {
                header: "X-Hub-Signature-256",
            },
            ForgeError::SignatureMalformed {
                header: "X-Hub-Signature-256",
            },
            ForgeError::SignatureWrong,
            ForgeError::BodyTooLarge { limit: 1 },
            ForgeError::Delivery { detail: "x" },
            ForgeError::Payload { detail: "x" },
            ForgeError::Secret { detail: "x" },
        ];
        vocab::check_coded_samples(&all).unwrap();
        vocab::check_code_table(ERROR_CODES, all.iter().map(Coded::code)).unwrap();
    }
}
