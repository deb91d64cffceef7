//! What a review view of a candidate costs most, kept by candidate digest: the candidate
//! validated from the store's bytes, its digest recomputed and compared with the one the job
//! records, and the content policy's scan of it. A candidate is immutable once recorded, and an
//! entry holds only what was validated and digested to its key, so a hit shows exactly the
//! content that digest names (decisions bind to the digest, not to the row); a miss (a new
//! digest, an evicted one, a restarted process) does the whole check again from the store's
//! bytes. The cache is bounded in entries and in the candidate bytes its entries came from; the
//! least recently used entry goes first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use finalizer::RepositoryPatchCandidate;

/// Entries kept at once.
pub(crate) const MAX_ENTRIES: usize = 32;
/// Candidate JSON bytes the entries came from, at most (a parsed candidate takes about as much
/// memory as its JSON): four of the largest candidates the digest admits (64 MiB each).
pub(crate) const MAX_WEIGHT: usize = 256 * 1024 * 1024;

/// A candidate checked against its digest, with its policy scan.
#[derive(Debug)]
pub(crate) struct Checked {
    pub candidate: Arc<RepositoryPatchCandidate>,
    pub digest: vocab::Sha256,
    pub findings: Vec<review::PolicyFinding>,
    pub policy: review::PolicyFact,
}

/// Why a candidate failed its check (each a stable code of its crate).
#[derive(Debug)]
pub(crate) enum CheckError {
    Candidate(finalizer::FinalizeError),
    Policy(policy::PolicyError),
    /// The store's bytes digest to another value than the job records.
    DigestMismatch,
}

/// Validates `bytes`, recomputes their digest and compares it with `recorded`, checks that every
/// diff is the change to its post-image, and runs the content policy (CPU-bound: call it off the
/// async runtime).
pub(crate) fn check(bytes: &[u8], recorded: &str) -> Result<Checked, CheckError> {
    let candidate = finalizer::validate_candidate_json(bytes).map_err(CheckError::Candidate)?;
    let digest = finalizer::repository_patch_digest(&candidate).map_err(CheckError::Candidate)?;
    if digest.to_string() != recorded {
        return Err(CheckError::DigestMismatch);
    }
    // What the policy scans and the reviewer reads must be the change publication commits.
    finalizer::check_diffs_match_content(&candidate).map_err(CheckError::Candidate)?;
    // The digest is the one just computed: the scan need not compute it again.
    let report = policy::scan_with_digest(&candidate, digest).map_err(CheckError::Policy)?;
    let (policy, findings) = review::policy_facts(&report).map_err(CheckError::Policy)?;
    Ok(Checked {
        candidate: Arc::new(candidate),
        digest,
        findings,
        policy,
    })
}

#[derive(Debug)]
struct Entry {
    checked: Arc<Checked>,
    weight: usize,
    used: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    weight: usize,
    clock: u64,
}

/// Checked candidates by digest (see the module documentation).
#[derive(Debug)]
pub(crate) struct ReviewCache {
    max_entries: usize,
    max_weight: usize,
    inner: Mutex<Inner>,
}

impl Default for ReviewCache {
    fn default() -> Self {
        Self::new(MAX_ENTRIES, MAX_WEIGHT)
    }
}

impl ReviewCache {
    pub(crate) fn new(max_entries: usize, max_weight: usize) -> Self {
        Self {
            max_entries,
            max_weight,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update is one call that leaves the map consistent.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The checked candidate of `digest`, if kept.
    pub(crate) fn get(&self, digest: &str) -> Option<Arc<Checked>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let entry = inner.entries.get_mut(digest)?;
        entry.used = now;
        Some(Arc::clone(&entry.checked))
    }

    /// Keeps `checked` (which came from `weight` bytes of JSON) under its digest, evicting the
    /// least recently used entries past the bounds; one heavier than the whole cache is not
    /// kept.
    pub(crate) fn insert(&self, checked: Arc<Checked>, weight: usize) {
        if weight > self.max_weight || self.max_entries == 0 {
            return;
        }
        let key = checked.digest.to_string();
        let mut inner = self.lock();
        inner.clock += 1;
        let used = inner.clock;
        if let Some(old) = inner.entries.remove(&key) {
            inner.weight -= old.weight;
        }
        while inner.entries.len() >= self.max_entries || inner.weight + weight > self.max_weight {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            let Some(k) = oldest else { break };
            if let Some(e) = inner.entries.remove(&k) {
                inner.weight -= e.weight;
            }
        }
        inner.weight += weight;
        inner.entries.insert(
            key,
            Entry {
                checked,
                weight,
                used,
            },
        );
    }

    /// Entries kept now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use finalizer::{CandidateFields, RepositoryPatchFile};
    use snapshot::{FileOp, RepoPath};
    use vocab::Sha256;

    fn candidate(text: &str) -> (Vec<u8>, String) {
        let before = "a\n";
        let after = format!("a\n{text}\n");
        let path = RepoPath::parse("src/a.py").unwrap();
        let diff = finalizer::unified_diff(path.as_str(), Some(before), Some(&after));
        let file = RepositoryPatchFile::new(
            path,
            FileOp::Update,
            Some(Sha256::of(before.as_bytes())),
            Some(Sha256::of(after.as_bytes())),
            Some(after.clone()),
            diff,
        )
        .unwrap();
        let fields = CandidateFields {
            repository_full_name: "o/n".into(),
            baseline_commit_sha: "c".repeat(40),
            handoff_id: "h".into(),
            approved_plan_digest: "0".repeat(64),
            summary: "s".into(),
            ..CandidateFields::default()
        };
        let c = RepositoryPatchCandidate::new(fields, vec![file]).unwrap();
        let digest = finalizer::repository_patch_digest(&c).unwrap().to_string();
        (c.to_json_pretty().unwrap(), digest)
    }

    #[test]
    fn a_check_compares_the_recorded_digest_and_scans() {
        let (bytes, digest) = candidate("AKIAIOSFODNN7EXAMPLE = 1");
        let checked = check(&bytes, &digest).unwrap();
        assert_eq!(checked.digest.to_string(), digest);
        assert_eq!(checked.policy.candidate_digest.to_string(), digest);
        let (_, other) = candidate("b = 2");
        assert!(matches!(
            check(&bytes, &other),
            Err(CheckError::DigestMismatch)
        ));
        assert!(matches!(
            check(b"{}", &digest),
            Err(CheckError::Candidate(_))
        ));
    }

    #[test]
    fn entries_are_bounded_and_the_least_recently_used_goes_first() {
        let cache = ReviewCache::new(2, 1000);
        let checked: Vec<Arc<Checked>> = ["a = 1", "b = 2", "c = 3"]
            .iter()
            .map(|t| {
                let (bytes, digest) = candidate(t);
                Arc::new(check(&bytes, &digest).unwrap())
            })
            .collect();
        let key = |i: usize| checked[i].digest.to_string();
        cache.insert(Arc::clone(&checked[0]), 10);
        cache.insert(Arc::clone(&checked[1]), 10);
        assert!(cache.get(&key(0)).is_some(), "touch the first");
        cache.insert(Arc::clone(&checked[2]), 10);
        assert_eq!(cache.len(), 2);
        assert!(cache.get(&key(1)).is_none(), "the least recently used went");
        assert!(cache.get(&key(0)).is_some());
        assert!(cache.get(&key(2)).is_some());
        // By weight: one entry that takes the whole budget evicts the rest; a heavier one is not
        // kept at all.
        cache.insert(Arc::clone(&checked[1]), 1000);
        assert_eq!(cache.len(), 1);
        assert!(cache.get(&key(1)).is_some());
        let small = ReviewCache::new(8, 100);
        small.insert(Arc::clone(&checked[0]), 101);
        assert_eq!(small.len(), 0);
        assert!(ReviewCache::new(0, 100).get(&key(0)).is_none());
    }
}
