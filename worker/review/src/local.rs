//! The local review store of one-shot use: `<state dir>/reviews/<candidate hex>/` holds one file
//! per decision, `<seq>.json` (8 digits, from 1), and at most one `publication.json`.
//!
//! Append-only by construction: a record is written to a fresh temporary file (0600,
//! `create_new`, no link followed), fsynced, then hard-linked to its final name — `link` fails
//! when the name exists (where `rename` would replace it), so a record, once there, is never
//! overwritten, and two writers racing for one sequence number both succeed, one at the next
//! number. Directories are 0700. A file per decision (rather than one file rewritten per append)
//! keeps every write create-only; a SQLite file would give the same with a second schema to
//! keep in step with the job store's.
//!
//! Reads list the candidate's folder, parse every record strictly, and refuse a history with a
//! gap or a record of another digest.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt as _, FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt as _, OpenOptions, OpenOptionsExt as _};
use vocab::Sha256;

use crate::decision::{DecisionRecord, StoredDecision, parse_record};
use crate::error::ReviewError;

/// The publication record's file name in a candidate's folder.
const PUBLICATION_FILE: &str = "publication.json";
/// The most decisions one candidate's local history holds.
const MAX_DECISIONS: u64 = 10_000;
/// The largest publication record accepted back.
const MAX_PUBLICATION_BYTES: u64 = 64 * 1024;

fn state(detail: &'static str) -> ReviewError {
    ReviewError::State { detail }
}

/// An opened local review store.
#[derive(Debug)]
pub struct LocalReviews {
    root: Dir,
    path: PathBuf,
}

fn private_dir_builder() -> DirBuilder {
    let mut b = DirBuilder::new();
    b.mode(0o700);
    b
}

fn record_name(seq: u64) -> String {
    format!("{seq:08}.json")
}

impl LocalReviews {
    /// Opens `<state_dir>/reviews`, creating it (and the state directory) 0700 when missing.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_STATE`.
    pub fn open(state_dir: &Path) -> Result<Self, ReviewError> {
        let path = state::REVIEWS.path_in(state_dir);
        state::create_private_dir(&path)
            .map_err(|_| state("the review folder cannot be created"))?;
        let root = Dir::open_ambient_dir(&path, cap_std::ambient_authority())
            .map_err(|_| state("the review folder cannot be opened"))?;
        Ok(Self { root, path })
    }

    /// The store's folder.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The candidate's folder, created 0700 when `create` and missing; `None` when missing.
    fn candidate_dir(&self, candidate: &Sha256, create: bool) -> Result<Option<Dir>, ReviewError> {
        let name = candidate.bare_hex();
        if create {
            match self.root.create_dir_with(&name, &private_dir_builder()) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(_) => return Err(state("a candidate's review folder cannot be created")),
            }
        }
        match self.root.symlink_metadata(&name) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(state("a candidate's review folder is not a directory")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(_) => return Err(state("a candidate's review folder cannot be inspected")),
        }
        self.root
            .open_dir_nofollow(&name)
            .map(Some)
            .map_err(|_| state("a candidate's review folder cannot be opened"))
    }

    /// Appends `record` to its candidate's history; returns its sequence number.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_STATE`; `PATCH_CANDIDATE_REVIEW_RECORD` when the history on disk
    /// fails its checks.
    pub fn append(&self, record: &DecisionRecord) -> Result<u64, ReviewError> {
        let bytes = record.to_bytes()?;
        let dir = self
            .candidate_dir(&record.candidate_digest, true)?
            .ok_or_else(|| state("a candidate's review folder vanished"))?;
        // A first guess only (a listing taken while others append may miss their newest
        // record): a taken number moves on to the next below.
        let mut seq = list_seqs(&dir)?.len() as u64 + 1;
        let temp = write_temp(&dir, &bytes)?;
        let result = loop {
            if seq > MAX_DECISIONS {
                break Err(state("a candidate's history is full"));
            }
            match dir.hard_link(&temp, &dir, record_name(seq)) {
                Ok(()) => break Ok(seq),
                // Another writer took this number: the next one.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => seq += 1,
                Err(_) => break Err(state("a decision record cannot be linked into place")),
            }
        };
        let _ = dir.remove_file(&temp);
        sync_dir(&dir)?;
        result
    }

    /// The candidate's history, oldest first (empty when it has none).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_STATE`; `PATCH_CANDIDATE_REVIEW_RECORD` for a record that fails
    /// its checks or a gap in the sequence.
    pub fn history(&self, candidate: &Sha256) -> Result<Vec<StoredDecision>, ReviewError> {
        let Some(dir) = self.candidate_dir(candidate, false)? else {
            return Ok(Vec::new());
        };
        // A directory listing taken while another writer links its record can miss an earlier
        // record and show a later one: a gap is believed only when a fresh listing shows it too.
        let mut seqs = list_seqs(&dir)?;
        for _ in 0..GAP_RELISTS {
            if is_contiguous(&seqs) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
            seqs = list_seqs(&dir)?;
        }
        let mut out = Vec::with_capacity(seqs.len());
        for (i, seq) in seqs.into_iter().enumerate() {
            if seq != i as u64 + 1 {
                return Err(ReviewError::Record {
                    detail: "the decision history has a gap",
                });
            }
            let bytes = read_capped(&dir, &record_name(seq), 256 * 1024)?;
            out.push(StoredDecision {
                seq,
                record: parse_record(&bytes, candidate)?,
            });
        }
        Ok(out)
    }

    /// Records the candidate's publication (the publisher's record, JSON), once: a second
    /// record for one candidate is refused.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_STATE`; `PATCH_CANDIDATE_REVIEW_INPUT` for bytes that are not a
    /// JSON object or a second publication.
    pub fn record_publication(&self, candidate: &Sha256, bytes: &[u8]) -> Result<(), ReviewError> {
        check_publication(bytes)?;
        let dir = self
            .candidate_dir(candidate, true)?
            .ok_or_else(|| state("a candidate's review folder vanished"))?;
        let temp = write_temp(&dir, bytes)?;
        let linked = dir.hard_link(&temp, &dir, PUBLICATION_FILE);
        let _ = dir.remove_file(&temp);
        match linked {
            Ok(()) => sync_dir(&dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(ReviewError::Input {
                field: "publication",
                detail: "the candidate is already published".to_owned(),
            }),
            Err(_) => Err(state("the publication record cannot be linked into place")),
        }
    }

    /// The candidate's publication record, when it has one.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_REVIEW_STATE`; `PATCH_CANDIDATE_REVIEW_RECORD` for a record that is not
    /// a JSON object.
    pub fn publication(
        &self,
        candidate: &Sha256,
    ) -> Result<Option<serde_json::Value>, ReviewError> {
        let Some(dir) = self.candidate_dir(candidate, false)? else {
            return Ok(None);
        };
        match dir.symlink_metadata(PUBLICATION_FILE) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(_) => return Err(state("the publication record cannot be inspected")),
        }
        let bytes = read_capped(&dir, PUBLICATION_FILE, MAX_PUBLICATION_BYTES)?;
        check_publication(&bytes)
            .map(Some)
            .map_err(|_| ReviewError::Record {
                detail: "the publication record is not a JSON object",
            })
    }
}

fn check_publication(bytes: &[u8]) -> Result<serde_json::Value, ReviewError> {
    let bad = || ReviewError::Input {
        field: "publication",
        detail: "must be a JSON object of at most 64 KiB".to_owned(),
    };
    if bytes.len() as u64 > MAX_PUBLICATION_BYTES {
        return Err(bad());
    }
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) if v.is_object() => Ok(v),
        _ => Err(bad()),
    }
}

/// Writes `bytes` to a fresh 0600 temporary file in `dir` (fsynced); returns its name.
fn write_temp(dir: &Dir, bytes: &[u8]) -> Result<String, ReviewError> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let temp = format!(
        ".tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .follow(FollowSymlinks::No)
        .mode(0o600);
    let written = (|| {
        let mut file = dir
            .open_with(&temp, &options)
            .map_err(|_| state("a review record cannot be created"))?;
        file.write_all(bytes)
            .map_err(|_| state("a review record cannot be written"))?;
        file.sync_all()
            .map_err(|_| state("a review record cannot be written"))
    })();
    if written.is_err() {
        let _ = dir.remove_file(&temp);
    }
    written.map(|()| temp)
}

fn sync_dir(dir: &Dir) -> Result<(), ReviewError> {
    // A `Dir` handle may be `O_PATH`; fsync needs a readable descriptor of the directory.
    let mut options = OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    dir.open_with(".", &options)
        .and_then(|d| d.sync_all())
        .map_err(|_| state("the review folder cannot be synced"))
}

/// How many times [`LocalReviews::history`] lists a folder again before it believes a gap.
const GAP_RELISTS: usize = 8;

fn is_contiguous(seqs: &[u64]) -> bool {
    seqs.iter().enumerate().all(|(i, &seq)| seq == i as u64 + 1)
}

/// The sequence numbers of a candidate's review folder, sorted (temporary files and the
/// publication record left out).
fn list_seqs(dir: &Dir) -> Result<Vec<u64>, ReviewError> {
    let mut seqs = Vec::new();
    let entries = dir
        .entries()
        .map_err(|_| state("a candidate's review folder cannot be listed"))?;
    for entry in entries {
        let entry = entry.map_err(|_| state("a candidate's review folder cannot be listed"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(ReviewError::Record {
                detail: "a file in the review folder has a non-UTF-8 name",
            });
        };
        if name == PUBLICATION_FILE || name.starts_with(".tmp-") {
            continue;
        }
        let seq = name
            .strip_suffix(".json")
            .filter(|s| s.len() == 8 && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&s| s >= 1)
            .ok_or(ReviewError::Record {
                detail: "an unexpected file in the review folder",
            })?;
        seqs.push(seq);
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Reads `name` in `dir` (no link followed, a regular file, at most `limit` bytes).
fn read_capped(dir: &Dir, name: &str, limit: u64) -> Result<Vec<u8>, ReviewError> {
    let mut options = OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    let file = dir
        .open_with(name, &options)
        .map_err(|_| state("a review record cannot be opened"))?;
    let meta = file
        .metadata()
        .map_err(|_| state("a review record cannot be inspected"))?;
    if !meta.is_file() {
        return Err(ReviewError::Record {
            detail: "a review record is not a regular file",
        });
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| state("a review record cannot be read"))?;
    if bytes.len() as u64 > limit {
        return Err(ReviewError::Record {
            detail: "a review record exceeds its size limit",
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;
    use crate::decision::{
        Actor, ActorKind, Decision, DecisionRequest, Principal, Reason, ReviewFacts, decide,
    };

    fn facts(tag: &str) -> ReviewFacts {
        ReviewFacts {
            candidate_digest: Sha256::of(tag.as_bytes()),
            approval_digest: "0".repeat(64),
            required_gates: vec![],
            gates: vec![],
            policy: None,
            published: false,
            continues: None,
            superseded_by: None,
        }
    }

    fn record(facts: &ReviewFacts, decision: Decision) -> DecisionRecord {
        let req = DecisionRequest {
            candidate_digest: facts.candidate_digest,
            decision,
            reason: Some(Reason::parse("because").unwrap()),
            force: true,
        };
        let actor = Actor {
            kind: ActorKind::LocalUser,
            principal: Principal::parse("alice").unwrap(),
        };
        decide(facts, &req, actor, 1).unwrap()
    }

    #[test]
    fn decisions_append_privately_and_read_back_per_digest() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalReviews::open(&tmp.path().join("state")).unwrap();
        let a = facts("a");
        let b = facts("b");
        assert!(store.history(&a.candidate_digest).unwrap().is_empty());
        assert_eq!(store.append(&record(&a, Decision::Reject)).unwrap(), 1);
        assert_eq!(store.append(&record(&a, Decision::Accept)).unwrap(), 2);
        assert_eq!(store.append(&record(&b, Decision::Retry)).unwrap(), 1);
        let history = store.history(&a.candidate_digest).unwrap();
        assert_eq!(
            history
                .iter()
                .map(|d| d.record.decision)
                .collect::<Vec<_>>(),
            vec![Decision::Reject, Decision::Accept]
        );
        assert!(history.last().unwrap().record.forced);
        let dir = store.path().join(a.candidate_digest.bare_hex());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(store.path()), 0o700);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("00000001.json")), 0o600);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            2,
            "no temporary file left"
        );
    }

    #[test]
    fn a_record_moved_to_another_candidates_folder_or_a_gap_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalReviews::open(tmp.path()).unwrap();
        let a = facts("a");
        let b = facts("b");
        store.append(&record(&a, Decision::Retry)).unwrap();
        store.append(&record(&b, Decision::Retry)).unwrap();
        let dir_a = store.path().join(a.candidate_digest.bare_hex());
        let dir_b = store.path().join(b.candidate_digest.bare_hex());
        std::fs::copy(dir_a.join("00000001.json"), dir_b.join("00000002.json")).unwrap();
        let e = store.history(&b.candidate_digest).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_RECORD");
        std::fs::remove_file(dir_b.join("00000002.json")).unwrap();
        std::fs::copy(dir_b.join("00000001.json"), dir_b.join("00000003.json")).unwrap();
        assert_eq!(
            store.history(&b.candidate_digest).unwrap_err().code(),
            "PATCH_CANDIDATE_REVIEW_RECORD"
        );
        std::fs::remove_file(dir_b.join("00000003.json")).unwrap();
        std::os::unix::fs::symlink(dir_a.join("00000001.json"), dir_b.join("00000002.json"))
            .unwrap();
        assert!(store.history(&b.candidate_digest).is_err());
    }

    #[test]
    fn concurrent_appends_all_land_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().to_owned();
        let a = facts("a");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                let r = record(&a, Decision::Retry);
                std::thread::spawn(move || {
                    let store = LocalReviews::open(&path).unwrap();
                    for _ in 0..5 {
                        store.append(&r).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let store = LocalReviews::open(&path).unwrap();
        assert_eq!(store.history(&a.candidate_digest).unwrap().len(), 40);
    }

    #[test]
    fn a_publication_is_recorded_once() {
        let tmp = tempfile::tempdir().unwrap();
        let store = LocalReviews::open(tmp.path()).unwrap();
        let a = facts("a");
        assert_eq!(store.publication(&a.candidate_digest).unwrap(), None);
        store
            .record_publication(&a.candidate_digest, br#"{"branch":"x"}"#)
            .unwrap();
        let e = store
            .record_publication(&a.candidate_digest, br#"{"branch":"y"}"#)
            .unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_INPUT");
        assert_eq!(
            store.publication(&a.candidate_digest).unwrap().unwrap()["branch"],
            "x"
        );
        assert!(
            store
                .record_publication(&a.candidate_digest, b"[1]")
                .is_err()
        );
        // The history ignores the publication record.
        assert!(store.history(&a.candidate_digest).unwrap().is_empty());
    }
}
