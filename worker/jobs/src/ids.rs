//! Job, attempt, host and store identifiers: strict charsets and fixed shapes, so an ID that reaches a
//! URL path, a container label or a log line cannot carry a path trick or a control character.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{JobsError, Result};

const HEX_CHARS: usize = 32;
const JOB_PREFIX: &str = "job_";
/// The longest host ID (a DNS label's length).
pub const MAX_HOST_ID_CHARS: usize = 63;

fn is_lower_hex_of(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(vocab::is_lower_hex)
}

fn random_hex() -> Result<String> {
    let mut bytes = [0_u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| JobsError::Io {
        what: "random id",
        detail: e.to_string(),
    })?;
    Ok(hex::encode(bytes))
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
            /// `PATCH_CANDIDATE_JOBS_ID` when the text is not a valid ID.
            pub fn parse(text: &str) -> Result<Self> {
                let check: fn(&str) -> bool = $check;
                if check(text) {
                    Ok(Self(text.to_owned()))
                } else {
                    Err(JobsError::id($kind, text))
                }
            }

            /// The ID as text.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = JobsError;
            fn from_str(s: &str) -> Result<Self> {
                Self::parse(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = JobsError;
            fn try_from(s: &str) -> Result<Self> {
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
            fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                Self::parse(&text).map_err(serde::de::Error::custom)
            }
        }
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
    /// One attempt at a job, the fencing token of every write about it: 32 lowercase hex digits
    /// (128 random bits), fresh for every claim. Valid as a usage-ledger attempt ID and in a
    /// container label or name.
    AttemptId,
    "attempt",
    |s| is_lower_hex_of(s, HEX_CHARS)
);

string_id!(
    /// A worker host, chosen by the operator: 1 to 63 of `A-Z a-z 0-9 . _ -`, starting with a
    /// letter or digit.
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

impl StoreId {
    /// A fresh random store ID (used once, when a database's schema is created).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_IO` when the system's random source fails.
    pub(crate) fn new_random() -> Result<Self> {
        Ok(Self(random_hex()?))
    }
}

impl JobId {
    /// A fresh random job ID.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_IO` when the system's random source fails.
    pub fn new_random() -> Result<Self> {
        Ok(Self(format!("{JOB_PREFIX}{}", random_hex()?)))
    }
}

impl AttemptId {
    /// A fresh random attempt ID.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_IO` when the system's random source fails.
    pub fn new_random() -> Result<Self> {
        Ok(Self(random_hex()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_parse_back_and_differ() {
        let a = JobId::new_random().unwrap();
        let b = JobId::new_random().unwrap();
        assert_ne!(a, b);
        assert_eq!(JobId::parse(a.as_str()).unwrap(), a);
        let t = AttemptId::new_random().unwrap();
        assert_eq!(AttemptId::parse(t.as_str()).unwrap(), t);
        assert_eq!(t.as_str().len(), 32);
        let s = StoreId::new_random().unwrap();
        assert_ne!(s, StoreId::new_random().unwrap());
        assert_eq!(StoreId::parse(s.as_str()).unwrap(), s);
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
}
