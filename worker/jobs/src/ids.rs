//! Fresh job, attempt and store IDs drawn from the system's random source (the ID types and their
//! parse rules are the vocabulary's: [`vocab::JobId`], [`vocab::AttemptId`], [`vocab::StoreId`]).

use vocab::{AttemptId, JobId, RANDOM_ID_BYTES, StoreId};

use crate::error::{JobsError, Result};

fn random_bytes() -> Result<[u8; RANDOM_ID_BYTES]> {
    let mut bytes = [0_u8; RANDOM_ID_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| JobsError::Io {
        what: "random id",
        detail: e.to_string(),
    })?;
    Ok(bytes)
}

/// A fresh random job ID.
///
/// # Errors
/// `PATCH_CANDIDATE_JOBS_IO` when the system's random source fails.
pub fn random_job_id() -> Result<JobId> {
    Ok(JobId::from_random(random_bytes()?))
}

/// A fresh random attempt ID.
///
/// # Errors
/// `PATCH_CANDIDATE_JOBS_IO` when the system's random source fails.
pub fn random_attempt_id() -> Result<AttemptId> {
    Ok(AttemptId::from_random(random_bytes()?))
}

/// A fresh random store ID (used once, when a database's schema is created).
///
/// # Errors
/// `PATCH_CANDIDATE_JOBS_IO` when the system's random source fails.
pub(crate) fn random_store_id() -> Result<StoreId> {
    Ok(StoreId::from_random(random_bytes()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_parse_back_and_differ() {
        let a = random_job_id().unwrap();
        let b = random_job_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(JobId::parse(a.as_str()).unwrap(), a);
        let t = random_attempt_id().unwrap();
        assert_eq!(AttemptId::parse(t.as_str()).unwrap(), t);
        assert_eq!(t.as_str().len(), 32);
        let s = random_store_id().unwrap();
        assert_ne!(s, random_store_id().unwrap());
        assert_eq!(StoreId::parse(s.as_str()).unwrap(), s);
    }
}
