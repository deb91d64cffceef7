//! `sha256:` digests: a strictly parsed newtype plus bare-hex helpers.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256 as Sha256Hasher};

use crate::error::VocabError;

/// The prefix of every typed digest.
pub const SHA256_PREFIX: &str = "sha256:";

/// A SHA-256 digest written `sha256:` + 64 lowercase hex digits (71 characters).
///
/// Built only by hashing bytes ([`Sha256::of`]) or by strict parsing ([`FromStr`], [`Deserialize`]):
/// uppercase hex, a missing prefix, or any other length is rejected, never repaired.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256([u8; 32]);

impl Sha256 {
    /// Hashes `bytes`. `sha2` selects the SHA-NI / AVX2 code path at run time (`cpufeatures`).
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256Hasher::digest(bytes).into())
    }

    /// Wraps a finished raw digest (from an incremental hasher).
    #[must_use]
    pub fn from_raw(raw: [u8; 32]) -> Self {
        Self(raw)
    }

    /// The raw 32 bytes.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex digits without the prefix ("bare hex").
    #[must_use]
    pub fn bare_hex(&self) -> String {
        let mut buf = [0_u8; 64];
        self.hex_into(&mut buf).to_owned()
    }

    /// Writes the 64 hex digits into `buf` and returns them as text (no allocation).
    fn hex_into<'b>(&self, buf: &'b mut [u8; 64]) -> &'b str {
        // 32 bytes always fit 64 hex digits, and hex digits are ASCII.
        match hex::encode_to_slice(self.0, buf) {
            Ok(()) => std::str::from_utf8(buf).unwrap_or_default(),
            Err(_) => "",
        }
    }

    /// Parses 64 lowercase hex digits without a prefix.
    ///
    /// # Errors
    /// [`VocabError::DigestFormat`] for any other input.
    pub fn from_bare_hex(text: &str) -> Result<Self, VocabError> {
        if text.len() != 64 || !text.bytes().all(is_lower_hex) {
            return Err(VocabError::DigestFormat);
        }
        let mut raw = [0_u8; 32];
        hex::decode_to_slice(text, &mut raw).map_err(|_| VocabError::DigestFormat)?;
        Ok(Self(raw))
    }
}

/// An [`std::io::Write`] that feeds every byte to a SHA-256 hasher, so a serialiser or a blob
/// copy is hashed as it streams and never buffered whole.
#[derive(Debug)]
pub struct Sha256Writer<'a>(pub &'a mut Sha256Hasher);

impl std::io::Write for Sha256Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// True for `0-9a-f`.
#[must_use]
pub fn is_lower_hex(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// True when `text` is exactly `sha256:` + 64 lowercase hex digits.
#[must_use]
pub fn is_typed_sha256(text: &str) -> bool {
    text.parse::<Sha256>().is_ok()
}

/// Bare lowercase hex SHA-256 of `bytes` (the reference `_sha256`).
#[must_use]
pub fn sha256_bare_hex(bytes: &[u8]) -> String {
    Sha256::of(bytes).bare_hex()
}

impl FromStr for Sha256 {
    type Err = VocabError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let hex_part = text
            .strip_prefix(SHA256_PREFIX)
            .ok_or(VocabError::DigestFormat)?;
        Self::from_bare_hex(hex_part)
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0_u8; 64];
        f.write_str(SHA256_PREFIX)?;
        f.write_str(self.hex_into(&mut buf))
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Sha256 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Sha256 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_input_digest_is_the_known_vector() {
        assert_eq!(
            Sha256::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn strict_parsing_rejects_every_non_canonical_spelling() {
        let good = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(good.parse::<Sha256>().unwrap().to_string(), good);
        for bad in [
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "SHA256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b8555",
            "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:invalid",
            "",
        ] {
            assert!(bad.parse::<Sha256>().is_err(), "{bad}");
        }
    }

    #[test]
    fn serde_round_trip_uses_the_same_check() {
        let d = Sha256::of(b"x");
        let json = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<Sha256>(&json).unwrap(), d);
        assert!(serde_json::from_str::<Sha256>("\"sha256:00\"").is_err());
    }
}
