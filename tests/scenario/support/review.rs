//! Candidates made without a turn, and completed jobs planted in a store with them (for the
//! review API, the review pages and the browser).

use std::path::Path;
use std::time::Duration;

use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};
use snapshot::{FileOp, RepoPath};
use vocab::Sha256;

use super::service::open_store;

/// A candidate, its canonical bytes (pretty JSON) and its digest.
pub struct Made {
    pub bytes: Vec<u8>,
    pub digest: String,
    pub candidate: RepositoryPatchCandidate,
}

/// The candidate of `fields` with `files`, its bytes and digest.
pub fn make_candidate(fields: CandidateFields, files: Vec<RepositoryPatchFile>) -> Made {
    let candidate = RepositoryPatchCandidate::new(fields, files).unwrap();
    let digest = finalizer::repository_patch_digest(&candidate)
        .unwrap()
        .to_string();
    Made {
        bytes: candidate.to_json_pretty().unwrap(),
        digest,
        candidate,
    }
}

/// An update of `path` from `before` to `after`, with its unified diff; `None` when `path` is
/// not a valid repository path (or the file is refused).
pub fn update_file(path: &str, before: &str, after: &str) -> Option<RepositoryPatchFile> {
    let p = RepoPath::parse(path).ok()?;
    let diff = finalizer::unified_diff(p.as_str(), Some(before), Some(after));
    RepositoryPatchFile::new(
        p,
        FileOp::Update,
        Some(Sha256::of(before.as_bytes())),
        Some(Sha256::of(after.as_bytes())),
        Some(after.to_owned()),
        diff,
    )
    .ok()
}

/// Submits `spec` to the store of `state` (or `database`), claims it as host `planter` and
/// completes it with `bytes`, `digest` and gate `evidence`; returns the job's id.
pub fn plant_completed(
    state: &Path,
    database: Option<&str>,
    spec: jobs::JobSpec,
    bytes: Vec<u8>,
    digest: &str,
    evidence: Vec<jobs::EvidenceDocument>,
) -> String {
    let digest = digest.to_owned();
    with_store(state, database, async move |store| {
        let (job, _) = store.submit(spec).await.unwrap();
        let host = vocab::HostId::parse("planter").unwrap();
        let claimed = store
            .claim(&host, 1, Duration::from_secs(600))
            .await
            .unwrap()
            .remove(0);
        assert_eq!(claimed.job.id, job.id);
        let applied = store
            .complete_with_evidence(
                &job.id,
                &claimed.attempt_id,
                bytes,
                &digest,
                &serde_json::json!({}),
                evidence,
            )
            .await
            .unwrap();
        assert_eq!(applied, jobs::Fenced::Applied);
        job.id.as_str().to_owned()
    })
}

/// Runs `f` against the store of `state` (or `database`) on a runtime of its own (callable from
/// synchronous code and from inside another runtime).
pub fn with_store<T, F>(state: &Path, database: Option<&str>, f: F) -> T
where
    T: Send + 'static,
    F: AsyncFnOnce(jobs::JobStore) -> T + Send + 'static,
{
    let state = state.to_path_buf();
    let database = database.map(str::to_owned);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = open_store(&state, database.as_deref()).await;
            f(store).await
        })
    })
    .join()
    .unwrap()
}
