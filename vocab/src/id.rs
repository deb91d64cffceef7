//! Job, attempt, host, store and owner-instance identifiers: strict charsets and fixed shapes, so an
//! ID that reaches a URL path, a container label or a log line cannot carry a path trick or a
//! control character.
//!
//! This crate reads no random source: a fresh ID is built from 16 random bytes the caller drew
//! ([`JobId::from_random`] and its siblings).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::digest::is_lower_hex;
use crate::error::VocabError;

/// How many random bytes a fresh ID holds (128 bits, written as 32 lowercase hex digits).
pub const RANDOM_ID_BYTES: usize = 16;
/// The longest host ID (a DNS label's length).
pub const MAX_HOST_ID_CHARS: usize = 63;

const HEX_CHARS: usize = 2 * RANDOM_ID_BYTES;
const JOB_PREFIX: &str = "job_";

fn is_lower_hex_of(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(is_lower_hex)
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $check:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Parses an ID; anything outside the exact shape is refused, never repaired.
            ///
            /// # Errors
            /// `PATCH_CANDIDATE_JOBS_ID` ([`VocabError::Id`]) when the text is not a valid ID.
            pub fn parse(text: &str) -> Result<Self, VocabError> {
                let check: fn(&str) -> bool = $check;
                if check(text) {
                    Ok(Self(text.to_owned()))
                } else {
                    Err(VocabError::id($kind, text))
                }
            }

            /// The ID as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = VocabError;
            fn from_str(s: &str) -> Result<Self, VocabError> {
                Self::parse(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = VocabError;
            fn try_from(s: &str) -> Result<Self, VocabError> {
                Self::parse(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// The IDs that are 32 lowercase hex digits: a fresh one is the hex of 16 random bytes.
macro_rules! random_hex_id {
    ($($name:ident),+) => {
        $(
            impl $name {
                /// A fresh ID from 16 bytes the caller drew from the system's random source.
                #[must_use]
                pub fn from_random(bytes: [u8; RANDOM_ID_BYTES]) -> Self {
                    Self(hex::encode(bytes))
                }
            }
        )+
    };
}

string_id!(
    /// A job: `job_` + 32 lowercase hex digits (128 random bits).
    JobId,
    "job",
    |s| s
        .strip_prefix(JOB_PREFIX)
        .is_some_and(|hex| is_lower_hex_of(hex, HEX_CHARS))
);

string_id!(
    /// One attempt: 32 lowercase hex digits (128 random bits), fresh for every claim of a job (the
    /// fencing token of every write about it) and for every turn container (its `attempt` label).
    /// Valid as a usage-ledger attempt ID and in a container label or name.
    AttemptId,
    "attempt",
    |s| is_lower_hex_of(s, HEX_CHARS)
);

string_id!(
    /// A worker host: 1 to 63 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit. A service
    /// host is chosen by the operator (or generated once); a turn owner's host is 32 lowercase hex
    /// (a keyed hash of the machine id, or random).
    HostId,
    "host",
    |s| {
        s.len() <= MAX_HOST_ID_CHARS
            && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    }
);

string_id!(
    /// One job store (a SQLite file or a PostgreSQL database): 32 lowercase hex digits (128
    /// random bits), generated once when the schema is created and never changed. A service turn
    /// container carries it in a label, so a janitor only ever judges the turns of its own store.
    StoreId,
    "store",
    |s| is_lower_hex_of(s, HEX_CHARS)
);

string_id!(
    /// One process that owns turn containers: 32 lowercase hex digits, random per process.
    InstanceId,
    "instance",
    |s| is_lower_hex_of(s, HEX_CHARS)
);

random_hex_id!(AttemptId, HostId, StoreId, InstanceId);

impl JobId {
    /// A fresh job ID from 16 bytes the caller drew from the system's random source.
    #[must_use]
    pub fn from_random(bytes: [u8; RANDOM_ID_BYTES]) -> Self {
        Self(format!("{JOB_PREFIX}{}", hex::encode(bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_parse_back_and_differ() {
        let a = JobId::from_random([1; RANDOM_ID_BYTES]);
        let b = JobId::from_random([2; RANDOM_ID_BYTES]);
        assert_ne!(a, b);
        assert_eq!(JobId::parse(a.as_str()).unwrap(), a);
        let t = AttemptId::from_random([0xab; RANDOM_ID_BYTES]);
        assert_eq!(AttemptId::parse(t.as_str()).unwrap(), t);
        assert_eq!(t.as_str().len(), 32);
        let s = StoreId::from_random([3; RANDOM_ID_BYTES]);
        assert_eq!(StoreId::parse(s.as_str()).unwrap(), s);
        let h = HostId::from_random([0xff; RANDOM_ID_BYTES]);
        assert_eq!(HostId::parse(h.as_str()).unwrap(), h);
        let i = InstanceId::from_random([4; RANDOM_ID_BYTES]);
        assert_eq!(InstanceId::parse(i.as_str()).unwrap(), i);
    }

    #[test]
    fn path_tricks_and_near_misses_are_refused() {
        for bad in [
            "",
            "job_",
            "../job_00000000000000000000000000000000",
            "job_0000000000000000000000000000000",
            "job_000000000000000000000000000000000",
            "job_0000000000000000000000000000000A",
            "JOB_00000000000000000000000000000000",
            "job_0000000000000000000000000000000/",
            "job_00000000000000000000000000000000\n",
        ] {
            let e = JobId::parse(bad).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_ID", "{bad:?}");
        }
        assert!(AttemptId::parse("0123456789abcdef0123456789abcdeF").is_err());
        assert!(AttemptId::parse("0123456789abcdef0123456789abcdef").is_ok());
        for bad in [
            "",
            "0123456789abcdef0123456789abcdeF",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "../23456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcde\n",
        ] {
            let e = StoreId::parse(bad).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_ID", "{bad:?}");
            assert!(InstanceId::parse(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "-host", ".h", "a/b", "a b", &"h".repeat(64), "h\u{e9}"] {
            assert!(HostId::parse(bad).is_err(), "{bad:?}");
        }
        for good in ["h", "worker-1.example", "W_2", &"h".repeat(63)] {
            assert!(HostId::parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn deserialize_uses_the_same_check() {
        let ok: JobId = serde_json::from_str("\"job_00000000000000000000000000000000\"").unwrap();
        assert_eq!(ok.as_str(), "job_00000000000000000000000000000000");
        assert!(serde_json::from_str::<JobId>("\"job_../../x\"").is_err());
    }

    #[test]
    fn the_error_names_the_kind_and_escapes_the_input() {
        let e = JobId::parse("job_\u{1b}[31m").unwrap_err();
        assert!(!e.to_string().contains('\u{1b}'));
        assert!(
            HostId::parse("a b")
                .unwrap_err()
                .to_string()
                .starts_with("PATCH_CANDIDATE_JOBS_ID: invalid host id ")
        );
    }
}
