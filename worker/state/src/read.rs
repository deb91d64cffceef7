//! Reading the state directory's JSON records: opened once without blocking, checked on the
//! handle (a regular file within its cap), read with a byte cap, parsed strictly.

use std::path::Path;

use crate::bounded::{BoundedReadError, read_bounded_file};
use crate::error::StateError;

/// The largest record file read.
const MAX_RECORD_BYTES: usize = 64 * 1024;

/// The details of a record's [`StateError`]s, naming the record (never its contents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordDetails {
    /// The file holds more than `MAX_RECORD_BYTES` (64 KiB).
    pub too_large: &'static str,
    /// The file is not a regular file or cannot be read.
    pub unreadable: &'static str,
    /// The file is not the record (strict JSON, unknown fields refused).
    pub malformed: &'static str,
}

/// Reads the record at `path` (a state directory entry's path) strictly; `Ok(None)` when it does
/// not exist.
///
/// # Errors
/// `PATCH_CANDIDATE_STATE` with the matching detail when it exceeds `MAX_RECORD_BYTES` (64 KiB),
/// cannot be read, or is malformed.
pub fn read_record<T: serde::de::DeserializeOwned>(
    path: &Path,
    details: &RecordDetails,
) -> Result<Option<T>, StateError> {
    let bytes = match read_bounded_file(path, MAX_RECORD_BYTES) {
        Ok(b) => b,
        Err(BoundedReadError::Missing) => return Ok(None),
        Err(BoundedReadError::TooLarge { .. }) => {
            return Err(StateError::Unusable {
                detail: details.too_large,
            });
        }
        Err(BoundedReadError::NotRegular | BoundedReadError::Io { .. }) => {
            return Err(StateError::Unusable {
                detail: details.unreadable,
            });
        }
    };
    vocab::from_slice_strict(&bytes, MAX_RECORD_BYTES)
        .map(Some)
        .map_err(|_| StateError::Unusable {
            detail: details.malformed,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DETAILS: RecordDetails = RecordDetails {
        too_large: "big",
        unreadable: "unreadable",
        malformed: "malformed",
    };

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Rec {
        a: u32,
    }

    fn detail(r: Result<Option<Rec>, StateError>) -> &'static str {
        match r.unwrap_err() {
            StateError::Unusable { detail } => detail,
        }
    }

    #[test]
    fn records_are_read_strictly_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        assert_eq!(read_record::<Rec>(&path, &DETAILS).unwrap(), None);
        assert_eq!(
            read_record::<Rec>(&dir.path().join("f/below"), &DETAILS).unwrap(),
            None
        );
        std::fs::write(&path, r#"{"a": 1}"#).unwrap();
        assert_eq!(
            read_record::<Rec>(&path, &DETAILS).unwrap(),
            Some(Rec { a: 1 })
        );
        std::fs::write(&path, r#"{"a": 1, "b": 2}"#).unwrap();
        assert_eq!(detail(read_record(&path, &DETAILS)), "malformed");
        std::fs::write(&path, vec![b' '; MAX_RECORD_BYTES + 1]).unwrap();
        assert_eq!(detail(read_record(&path, &DETAILS)), "big");
        assert_eq!(detail(read_record(dir.path(), &DETAILS)), "unreadable");
    }
}
