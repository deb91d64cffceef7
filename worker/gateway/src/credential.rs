//! The model credential. It lives only in this process: never logged (its `Debug` is redacted),
//! never in an error (errors name where it came from, not what it is), never sent anywhere but in
//! the upstream request's auth header, marked sensitive there.

use std::path::Path;

use crate::error::GatewaySetupError;

/// Largest credential accepted.
const MAX_CREDENTIAL_BYTES: usize = 8192;

/// A model API credential.
#[derive(Clone)]
pub struct Credential(String);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

impl Credential {
    /// Reads the credential from the environment variable `name`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CREDENTIAL` when it is unset or not one visible-ASCII token.
    pub fn from_env(name: &str) -> Result<Self, GatewaySetupError> {
        let bad = || GatewaySetupError::Credential {
            source_name: format!("environment variable {}", vocab::quote(name)),
        };
        let value = std::env::var(name).map_err(|_| bad())?;
        Self::check(value).ok_or_else(bad)
    }

    /// Reads the credential from a file: its whole content, less one final line ending.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CREDENTIAL` when it cannot be read or is not one visible-ASCII
    /// token.
    pub fn from_file(path: &Path) -> Result<Self, GatewaySetupError> {
        let bad = || GatewaySetupError::Credential {
            source_name: format!("file {}", vocab::quote(&path.to_string_lossy())),
        };
        use std::io::Read as _;
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| {
                f.take(MAX_CREDENTIAL_BYTES as u64 + 3)
                    .read_to_end(&mut bytes)
            })
            .map_err(|_| bad())?;
        if bytes.len() > MAX_CREDENTIAL_BYTES + 2 {
            return Err(bad());
        }
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let text = text
            .strip_suffix("\r\n")
            .or_else(|| text.strip_suffix('\n'))
            .unwrap_or(&text)
            .to_owned();
        Self::check(text).ok_or_else(bad)
    }

    /// A credential from a value (tests and benchmarks).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CREDENTIAL` when it is not one visible-ASCII token.
    pub fn from_value(value: &str) -> Result<Self, GatewaySetupError> {
        Self::check(value.to_owned()).ok_or_else(|| GatewaySetupError::Credential {
            source_name: "value".to_owned(),
        })
    }

    fn check(value: String) -> Option<Self> {
        (!value.is_empty()
            && value.len() <= MAX_CREDENTIAL_BYTES
            && value.bytes().all(|b| b.is_ascii_graphic()))
        .then_some(Self(value))
    }

    /// The secret, for building the auth header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}
