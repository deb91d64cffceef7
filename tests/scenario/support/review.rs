//! Candidates made without a turn, and completed jobs planted in a store with them (for the
//! review API, the review pages and the browser).

use std::path::Path;
use std::time::Duration;

use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};
use snapshot::{FileOp, RepoPath};
use vocab::Sha256;

use super::git::git_out;
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

/// The creation of `src/new.py` holding the one line `body`, with its unified diff.
pub fn create_new_py(body: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        RepoPath::parse("src/new.py").unwrap(),
        FileOp::Create,
        None,
        Some(Sha256::of(body.as_bytes())),
        Some(body.to_owned()),
        format!("--- /dev/null\n+++ b/src/new.py\n@@ -0,0 +1 @@\n+{body}"),
    )
    .unwrap()
}

/// The fields of a candidate of `o/n` (handoff `handoff-1`) at the baseline `commit`, requiring
/// `gates`.
pub fn fields_at(gates: &[&str], commit: &str) -> CandidateFields {
    CandidateFields {
        repository_full_name: "o/n".into(),
        handoff_id: "handoff-1".into(),
        baseline_commit_sha: commit.to_owned(),
        approved_plan_digest: "0".repeat(64),
        required_validation_gates: gates.iter().map(|g| (*g).to_owned()).collect(),
        ..CandidateFields::default()
    }
}

/// Asserts that `remote`'s `branch` holds the published commit `id`: the baseline `commit` as
/// its parent, the repository's `README.md` and `src/app.py` and the created `src/new.py`
/// (`print('new')`) as its tree; `main` is still at `commit`.
pub fn assert_published_new_py(remote: &Path, branch: &str, id: &str, commit: &str) {
    assert_eq!(
        git_out(remote, &["rev-parse", &format!("refs/heads/{branch}")]),
        id
    );
    assert_eq!(git_out(remote, &["rev-parse", &format!("{id}^")]), commit);
    assert_eq!(
        git_out(remote, &["show", &format!("{id}:src/new.py")]),
        "print('new')"
    );
    assert_eq!(
        git_out(remote, &["ls-tree", "-r", "--name-only", id]),
        "README.md\nsrc/app.py\nsrc/new.py"
    );
    assert_eq!(git_out(remote, &["rev-parse", "refs/heads/main"]), commit);
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

/// `modules` updates of `pkg/module_NN.py`, each of `lines` lines: line `i` of module `f` is
/// `before(f, i)` before and `after(f, i)` after.
pub fn module_updates(
    modules: usize,
    lines: usize,
    before: impl Fn(usize, usize) -> String,
    after: impl Fn(usize, usize) -> String,
) -> Vec<RepositoryPatchFile> {
    (0..modules)
        .map(|f| {
            let old: String = (0..lines).map(|i| before(f, i)).collect();
            let new: String = (0..lines).map(|i| after(f, i)).collect();
            update_file(&format!("pkg/module_{f:02}.py"), &old, &new).unwrap()
        })
        .collect()
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
