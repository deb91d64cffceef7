//! Validated identifiers: image references, immutable image IDs, generated container names and
//! runtime names. Each is built only through a fallible constructor (reference §10.1).

use std::fmt;
use std::str::FromStr;

/// `REPOSITORY_DOCKER_EXPECTED_IMAGE_ID`: no usable approved image ID (malformed here; none
/// recorded, in the turn).
pub const EXPECTED_IMAGE_ID_CODE: &str = "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID";

/// Why a Docker identifier is refused. The ids own this small error so that the crate's error
/// module can name them without an import circle; [`crate::ContainerError`] wraps it unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The image reference is not a fixed `name:tag` / `name@digest` reference.
    #[error("REPOSITORY_DOCKER_IMAGE: invalid fixed image reference")]
    ImageReference,
    /// The approved image ID is not `sha256:` + 64 lowercase hex.
    #[error("REPOSITORY_DOCKER_EXPECTED_IMAGE_ID: invalid approved image id")]
    ExpectedImageId,
    /// The configured runtime name is not a plain identifier.
    #[error("REPOSITORY_DOCKER_RUNTIME: invalid runtime name")]
    RuntimeName,
    /// The resolved image ID is malformed.
    #[error("REPOSITORY_DOCKER_IMAGE_ID: daemon returned a malformed image id")]
    ImageId,
    #[error("REPOSITORY_DOCKER_CONTAINER_ID: daemon returned a malformed container id")]
    ContainerId,
}

impl IdError {
    /// The stable wire code (the message prefix before `": "`).
    #[must_use]
    pub fn code(self) -> &'static str {
        match self {
            Self::ImageReference => "REPOSITORY_DOCKER_IMAGE",
            Self::ExpectedImageId => EXPECTED_IMAGE_ID_CODE,
            Self::RuntimeName => "REPOSITORY_DOCKER_RUNTIME",
            Self::ImageId => "REPOSITORY_DOCKER_IMAGE_ID",
            Self::ContainerId => "REPOSITORY_DOCKER_CONTAINER_ID",
        }
    }
}

impl vocab::Coded for IdError {
    fn code(&self) -> &'static str {
        IdError::code(*self)
    }

    fn class(&self) -> vocab::FailureClass {
        vocab::FailureClass::Rejected
    }
}

/// The static label every turn container carries (reference §10.9).
pub const TURN_LABEL_KEY: &str = "mozaiks.refinement.repository_turn";
/// The value of [`TURN_LABEL_KEY`] for offline turns.
pub const TURN_LABEL_VALUE: &str = "offline";
/// The text of a checked identifier: `as_str` (documented by `$doc`); with `display`, its
/// `Display`; with `string` as well, the `String` conversions serde goes through (`TryFrom`
/// parses, as `FromStr` does).
macro_rules! id_text {
    ($name:ident, $doc:literal) => {
        impl $name {
            #[doc = $doc]
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
    ($name:ident, $doc:literal, display) => {
        id_text!($name, $doc);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
    ($name:ident, $doc:literal, display, string) => {
        id_text!($name, $doc, display);

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> Self {
                v.0
            }
        }
    };
}

/// Prefix of generated container names.
pub const CONTAINER_NAME_PREFIX: &str = "mozaiks-acp-";

/// Exactly `len` lowercase hex digits.
pub(crate) fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A fixed image reference: `[A-Za-z0-9][A-Za-z0-9_./:@-]{0,255}` containing `:` or `@`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ImageReference(String);

id_text!(ImageReference, "The reference text.", display, string);

impl FromStr for ImageReference {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut bytes = s.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
        let rest_ok = s.len() <= 256
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_./:@-".contains(&b));
        if !first_ok || !rest_ok || !(s.contains(':') || s.contains('@')) {
            return Err(IdError::ImageReference);
        }
        Ok(Self(s.to_owned()))
    }
}

/// An immutable image ID: `sha256:` + 64 lowercase hex. Deserialised as an operator-approved ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ImageId(String);

id_text!(ImageId, "The ID text (`sha256:<hex>`).", display, string);

impl ImageId {
    /// Parses an image ID the daemon returned (`REPOSITORY_DOCKER_IMAGE_ID` on failure).
    ///
    /// # Errors
    /// [`IdError::ImageId`].
    pub fn from_daemon(s: &str) -> Result<Self, IdError> {
        parse_image_id(s).ok_or(IdError::ImageId)
    }
}

fn parse_image_id(s: &str) -> Option<ImageId> {
    let hex = s.strip_prefix("sha256:")?;
    is_lower_hex(hex, 64).then(|| ImageId(s.to_owned()))
}

impl FromStr for ImageId {
    type Err = IdError;
    /// Parses an operator-approved image ID (`REPOSITORY_DOCKER_EXPECTED_IMAGE_ID` on failure).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_image_id(s).ok_or(IdError::ExpectedImageId)
    }
}

/// A generated container name: `mozaiks-acp-` + 32 lowercase hex (a random UUIDv4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerName(String);

impl ContainerName {
    /// A fresh random name.
    #[must_use]
    pub fn generate() -> Self {
        Self(format!(
            "{CONTAINER_NAME_PREFIX}{}",
            uuid::Uuid::new_v4().simple()
        ))
    }
}

id_text!(ContainerName, "The name text.", display);

impl FromStr for ContainerName {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.strip_prefix('/').unwrap_or(s);
        match s.strip_prefix(CONTAINER_NAME_PREFIX) {
            Some(hex) if is_lower_hex(hex, 32) => Ok(Self(s.to_owned())),
            _ => Err(IdError::ContainerId),
        }
    }
}

/// A container ID as returned by create: 64 lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerId(String);

impl FromStr for ContainerId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if is_lower_hex(s, 64) {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::ContainerId)
        }
    }
}

id_text!(ContainerId, "The ID text.");

/// An OCI runtime name configured by the operator (e.g. `runsc`): `[a-z0-9][a-z0-9._-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeName(String);

impl FromStr for RuntimeName {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let first_ok = s
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        let rest_ok = s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
        if first_ok && rest_ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(IdError::RuntimeName)
        }
    }
}

id_text!(RuntimeName, "The runtime name.");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_reference_rules() {
        for ok in [
            "patch-candidate-proof:local",
            "a@sha256:00",
            "registry.local/x/y:1.2",
        ] {
            assert!(ok.parse::<ImageReference>().is_ok(), "{ok}");
        }
        for bad in [
            "latest",
            "",
            ":x",
            "-a:b",
            "a b:c",
            "a:b\n",
            &format!("a:{}", "b".repeat(255)),
        ] {
            assert_eq!(
                bad.parse::<ImageReference>().unwrap_err().code(),
                "REPOSITORY_DOCKER_IMAGE"
            );
        }
    }

    #[test]
    fn image_id_rules() {
        let good = format!("sha256:{}", "a".repeat(64));
        assert_eq!(good.parse::<ImageId>().unwrap().as_str(), good);
        for bad in [
            "latest",
            "sha256:",
            &format!("sha256:{}", "A".repeat(64)),
            &"a".repeat(64),
        ] {
            assert_eq!(
                bad.parse::<ImageId>().unwrap_err().code(),
                "REPOSITORY_DOCKER_EXPECTED_IMAGE_ID"
            );
            assert_eq!(
                ImageId::from_daemon(bad).unwrap_err().code(),
                "REPOSITORY_DOCKER_IMAGE_ID"
            );
        }
    }

    #[test]
    fn container_names_are_random_and_parse_back() {
        let a = ContainerName::generate();
        let b = ContainerName::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), CONTAINER_NAME_PREFIX.len() + 32);
        assert_eq!(format!("/{a}").parse::<ContainerName>().unwrap(), a);
        assert!("mozaiks-acp-xyz".parse::<ContainerName>().is_err());
        assert!("other".parse::<ContainerName>().is_err());
    }

    #[test]
    fn runtime_names() {
        assert!("runsc".parse::<RuntimeName>().is_ok());
        assert!("runc".parse::<RuntimeName>().is_ok());
        assert!("Runsc".parse::<RuntimeName>().is_err());
        assert!("a/b".parse::<RuntimeName>().is_err());
    }
}
