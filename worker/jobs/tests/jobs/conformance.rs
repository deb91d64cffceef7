//! The conformance suite: every body takes a [`JobStore`] and holds for both backends.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jobs::{
    AuditAct, Fenced, Heartbeat, JobSpec, JobState, JobStore, JobsError, Retry, Role, Roles,
    random_attempt_id, random_job_id, testkit::PrivateCluster,
};
use pretty_assertions::assert_eq;
use vocab::{AttemptId, HostId, JobId, StoreId};

/// Where the store under test lives, to open a second handle ("another host").
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    pub async fn open(&self) -> JobStore {
        match self {
            Self::Sqlite(dir) => JobStore::open(None, dir).await.unwrap(),
            Self::Postgres(url) => JobStore::open(Some(url), std::path::Path::new("/nonexistent"))
                .await
                .unwrap(),
        }
    }

    /// A store on a different, fresh database of the same backend (a tempdir guard for SQLite).
    pub async fn open_another_database(&self) -> (Option<tempfile::TempDir>, JobStore) {
        match self {
            Self::Sqlite(_) => {
                let dir = tempfile::tempdir().unwrap();
                let store = JobStore::open(None, dir.path()).await.unwrap();
                (Some(dir), store)
            }
            Self::Postgres(_) => {
                let url = jobs::testkit::fresh_postgres_url().await.unwrap();
                let store = JobStore::open(Some(&url), std::path::Path::new("/nonexistent"))
                    .await
                    .unwrap();
                (None, store)
            }
        }
    }
}

const LONG: Duration = Duration::from_secs(600);

fn host(name: &str) -> HostId {
    HostId::parse(name).unwrap()
}

fn digest(n: u8) -> String {
    format!("sha256:{}", format!("{n:02x}").repeat(32))
}

/// Lets the clock pass a zero lease: rescue compares `lease_until < now` in milliseconds.
async fn expire() {
    tokio::time::sleep(Duration::from_millis(15)).await;
}

async fn submit(store: &JobStore, nonce: &str, max_attempts: u32) -> JobId {
    let (job, created) = store
        .submit(JobSpec::noop(nonce, max_attempts))
        .await
        .unwrap();
    assert!(created);
    job.id
}

/// The one job host `on` claims (at most one, for the long lease): there must be one.
async fn claim_one(store: &JobStore, on: &str) -> jobs::Claimed {
    store.claim(&host(on), 1, LONG).await.unwrap().remove(0)
}

/// An environment failure (`PATCH_CANDIDATE_DOCKER`, `message`) of `attempt` of job `id`, retried
/// at once, with no usage row: whether the write applied.
async fn fail_env(store: &JobStore, id: &JobId, attempt: &AttemptId, message: &str) -> Fenced {
    store
        .fail(
            id,
            attempt,
            "PATCH_CANDIDATE_DOCKER",
            message,
            Retry::After(Duration::ZERO),
            None,
        )
        .await
        .unwrap()
}

async fn state(store: &JobStore, id: &JobId) -> JobState {
    store.get(id).await.unwrap().unwrap().state
}

pub async fn submit_is_idempotent(store: &JobStore, _: &Location) {
    let spec = JobSpec::noop("idem", 3);
    let (first, created) = store.submit(spec.clone()).await.unwrap();
    assert!(created);
    assert_eq!(first.state, JobState::Queued);
    assert_eq!(first.attempts, 0);
    assert_eq!(first.idempotency_key, spec.idempotency_key());
    let (again, created) = store.submit(spec.clone()).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, first.id);
    // Another max_attempts is the same job (scheduling is not identity).
    let mut other_max = spec.clone();
    other_max.max_attempts = 9;
    let (same, created) = store.submit(other_max).await.unwrap();
    assert!(!created);
    assert_eq!(same.id, first.id);
    assert_eq!(same.max_attempts, 3);

    let got = store.get(&first.id).await.unwrap().unwrap();
    assert_eq!(got.spec, spec);
    assert_eq!(got, first);
    let listed = store.list(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(
        listed[0].spec.approval_json.is_empty(),
        "list leaves approval bytes out"
    );
    assert_eq!(listed[0].spec.approval_digest, spec.approval_digest);
    assert_eq!(
        store.list(Some(JobState::Running), 10).await.unwrap(),
        vec![]
    );
    let events = store.events(&first.id).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.code.as_str()).collect::<Vec<_>>(),
        vec![jobs::EVENT_SUBMITTED]
    );

    // Concurrent duplicate submissions: one job.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.submit(JobSpec::noop("race", 1)).await.unwrap()
        }));
    }
    let mut ids = BTreeSet::new();
    let mut created = 0;
    for t in tasks {
        let (job, c) = t.await.unwrap();
        ids.insert(job.id);
        created += usize::from(c);
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(created, 1);
}

pub async fn malformed_input_is_refused_before_storage(store: &JobStore, _: &Location) {
    let mut spec = JobSpec::noop("bad", 1);
    spec.commit = "main".to_owned();
    assert_eq!(
        store.submit(spec).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_SPEC"
    );
    assert_eq!(store.list(None, 10).await.unwrap(), vec![]);

    let id = submit(store, "ok", 1).await;
    let c = claim_one(store, "h").await;
    for (code, message) in [("lower", "m"), ("OK", "a\u{1b}[2Jb")] {
        let e = store
            .fail(&id, &c.attempt_id, code, message, Retry::Never, None)
            .await
            .unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
    }
    let e = store
        .complete(
            &id,
            &c.attempt_id,
            vec![1],
            "sha256:nothex",
            &serde_json::json!({}),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
    assert_eq!(
        store
            .claim(&host("h"), 1001, LONG)
            .await
            .unwrap_err()
            .code(),
        "PATCH_CANDIDATE_JOBS_INPUT"
    );
    assert_eq!(
        store.list(None, 1001).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_INPUT"
    );
    // Nothing above changed the job.
    let job = store.get(&id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Running);
    assert_eq!(job.last_error, None);
    let unknown = random_job_id().unwrap();
    assert_eq!(store.get(&unknown).await.unwrap(), None);
    assert_eq!(
        store.cancel(&unknown).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_NOT_FOUND"
    );
    assert_eq!(
        store.retry(&unknown).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_NOT_FOUND"
    );
    assert_eq!(store.candidate(&unknown).await.unwrap(), None);
}

pub async fn claim_respects_max_and_order(store: &JobStore, _: &Location) {
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(submit(store, &format!("order-{i}"), 1).await);
        // Distinct creation times, so "oldest first" is observable.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(store.claim(&host("h1"), 0, LONG).await.unwrap(), vec![]);
    let first = store.claim(&host("h1"), 2, LONG).await.unwrap();
    assert_eq!(
        first.iter().map(|c| c.job.id.clone()).collect::<Vec<_>>(),
        ids[..2].to_vec()
    );
    for c in &first {
        assert_eq!(c.attempt, 1);
        assert_eq!(c.job.state, JobState::Running);
        assert_eq!(c.job.host, Some(host("h1")));
        assert_eq!(c.job.attempt_id.as_ref(), Some(&c.attempt_id));
        assert_eq!(c.job.lease_until_ms, Some(c.lease_until_ms));
        assert!(
            !c.job.spec.approval_json.is_empty(),
            "a claim carries the approval bytes"
        );
    }
    let rest = store.claim(&host("h2"), 10, LONG).await.unwrap();
    assert_eq!(
        rest.iter().map(|c| c.job.id.clone()).collect::<Vec<_>>(),
        ids[2..].to_vec()
    );
    assert_eq!(store.claim(&host("h2"), 10, LONG).await.unwrap(), vec![]);
    let attempts: BTreeSet<_> = first
        .iter()
        .chain(&rest)
        .map(|c| c.attempt_id.clone())
        .collect();
    assert_eq!(attempts.len(), 5);
    assert_eq!(
        store
            .list(Some(JobState::Running), 100)
            .await
            .unwrap()
            .len(),
        5
    );
}

pub async fn no_double_claim_under_concurrency(store: &JobStore, location: &Location) {
    const JOBS: usize = 300;
    const WORKERS: usize = 24;
    for i in 0..JOBS {
        submit(store, &format!("conc-{i}"), 1).await;
    }
    // Half the workers on a second handle: two "hosts" with their own connections.
    let other = location.open().await;
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let store = if w % 2 == 0 {
            store.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            let me = host(&format!("w{w}"));
            let mut mine = Vec::new();
            loop {
                let claimed = store.claim(&me, 3, LONG).await.unwrap();
                if claimed.is_empty() {
                    break;
                }
                for c in claimed {
                    let applied = store
                        .complete(
                            &c.job.id,
                            &c.attempt_id,
                            vec![],
                            &digest(1),
                            &serde_json::json!({}),
                        )
                        .await
                        .unwrap();
                    assert_eq!(applied, Fenced::Applied);
                    mine.push((c.job.id, c.attempt_id));
                }
            }
            mine
        }));
    }
    let mut jobs_seen: BTreeMap<JobId, usize> = BTreeMap::new();
    let mut attempts = BTreeSet::new();
    for t in tasks {
        for (job, attempt) in t.await.unwrap() {
            *jobs_seen.entry(job).or_default() += 1;
            assert!(
                attempts.insert(attempt),
                "an attempt id was handed out twice"
            );
        }
    }
    assert_eq!(jobs_seen.len(), JOBS);
    assert!(
        jobs_seen.values().all(|&n| n == 1),
        "a job was claimed twice"
    );
    assert_eq!(
        store
            .list(Some(JobState::Completed), 1000)
            .await
            .unwrap()
            .len(),
        JOBS
    );
}

pub async fn heartbeat_renews_then_is_lost_after_rescue(store: &JobStore, _: &Location) {
    let id = submit(store, "hb", 3).await;
    let c = claim_one(store, "h").await;
    assert_eq!(
        store.heartbeat(&id, &c.attempt_id, LONG).await.unwrap(),
        Heartbeat::Renewed {
            cancel_requested: false
        }
    );
    // Let the lease lapse (renew with zero), rescue, and the old attempt is lost.
    assert_eq!(
        store
            .heartbeat(&id, &c.attempt_id, Duration::ZERO)
            .await
            .unwrap(),
        Heartbeat::Renewed {
            cancel_requested: false
        }
    );
    expire().await;
    assert_eq!(store.rescue_expired().await.unwrap(), 1);
    assert_eq!(
        store.heartbeat(&id, &c.attempt_id, LONG).await.unwrap(),
        Heartbeat::Lost
    );
    let job = store.get(&id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert_eq!(job.attempts, 1, "a lost lease spends its attempt");
    assert_eq!(job.last_error.unwrap().code, jobs::LEASE_EXPIRED);
    let again = claim_one(store, "h2").await;
    assert_eq!(again.attempt, 2);
    assert_ne!(again.attempt_id, c.attempt_id);
    // The new attempt renews; the old one is still lost.
    assert!(matches!(
        store.heartbeat(&id, &again.attempt_id, LONG).await.unwrap(),
        Heartbeat::Renewed { .. }
    ));
    assert_eq!(
        store.heartbeat(&id, &c.attempt_id, LONG).await.unwrap(),
        Heartbeat::Lost
    );
    let unknown = random_attempt_id().unwrap();
    assert_eq!(
        store.heartbeat(&id, &unknown, LONG).await.unwrap(),
        Heartbeat::Lost
    );
}

pub async fn stale_attempt_writes_are_refused(store: &JobStore, _: &Location) {
    let id = submit(store, "stale", 5).await;
    let old = store
        .claim(&host("a"), 1, Duration::ZERO)
        .await
        .unwrap()
        .remove(0);
    expire().await;
    assert_eq!(store.rescue_expired().await.unwrap(), 1);
    let new = claim_one(store, "b").await;
    let usage = serde_json::json!({"total_tokens": 1});
    let stale = &old.attempt_id;
    assert_eq!(
        store
            .complete(&id, stale, b"old".to_vec(), &digest(1), &usage)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .fail(&id, stale, "X", "m", Retry::Never, None)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .fail(&id, stale, "X", "m", Retry::After(Duration::ZERO), None)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(store.release(&id, stale, None).await.unwrap(), Fenced::Lost);
    assert_eq!(
        store
            .snooze(&id, stale, Duration::ZERO, "NO_IMAGE")
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store.finish_cancelled(&id, stale, None).await.unwrap(),
        Fenced::Lost
    );
    let job = store.get(&id).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Running, 2));
    assert_eq!(job.attempt_id, Some(new.attempt_id.clone()));
    assert_eq!(store.candidate(&id).await.unwrap(), None);

    assert_eq!(
        store
            .complete(&id, &new.attempt_id, b"new".to_vec(), &digest(2), &usage)
            .await
            .unwrap(),
        Fenced::Applied
    );
    // Exactly once: the same attempt cannot record a second result.
    assert_eq!(
        store
            .complete(&id, &new.attempt_id, b"again".to_vec(), &digest(3), &usage)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .fail(&id, &new.attempt_id, "X", "m", Retry::Never, None)
            .await
            .unwrap(),
        Fenced::Lost
    );
    let job = store.get(&id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(job.candidate_digest, Some(digest(2)));
    assert_eq!(store.candidate(&id).await.unwrap(), Some(b"new".to_vec()));
    assert_eq!(store.current_attempts().await.unwrap(), vec![]);
}

pub async fn retry_backoff_and_dead_letter(store: &JobStore, _: &Location) {
    // Environment failures retry until the attempts are spent, then dead-letter.
    let id = submit(store, "retry", 2).await;
    let a1 = claim_one(store, "h").await;
    assert_eq!(
        fail_env(store, &id, &a1.attempt_id, "daemon gone").await,
        Fenced::Applied
    );
    let job = store.get(&id).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Queued, 1));
    assert_eq!(
        job.last_error.as_ref().unwrap().code,
        "PATCH_CANDIDATE_DOCKER"
    );
    let a2 = claim_one(store, "h").await;
    assert_eq!(a2.attempt, 2);
    assert_eq!(
        fail_env(store, &id, &a2.attempt_id, "again").await,
        Fenced::Applied
    );
    assert_eq!(
        state(store, &id).await,
        JobState::Failed,
        "attempts exhausted: dead letter"
    );

    // A rejection goes straight to the dead letter.
    let rejected = submit(store, "rejected", 5).await;
    let a = claim_one(store, "h").await;
    assert_eq!(
        store
            .fail(
                &rejected,
                &a.attempt_id,
                "REPOSITORY_PATCH_SNAPSHOT_IDENTITY",
                "snapshot moved",
                Retry::Never,
                None
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    let job = store.get(&rejected).await.unwrap().unwrap();
    assert_eq!((job.state, job.attempts), (JobState::Failed, 1));

    // Backoff: queued with run_at in the future, not claimable before it.
    let later = submit(store, "later", 5).await;
    let a = claim_one(store, "h").await;
    let before = store.get(&later).await.unwrap().unwrap().updated_at_ms;
    assert_eq!(
        store
            .fail(
                &later,
                &a.attempt_id,
                "PATCH_CANDIDATE_DOCKER",
                "x",
                Retry::After(jobs::backoff(1) * 1000),
                None
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    let job = store.get(&later).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Queued);
    assert!(job.run_at_ms >= before + 1_000_000);
    assert_eq!(store.claim(&host("h"), 10, LONG).await.unwrap(), vec![]);

    // The operator's retry allows one more attempt; a completed job is not retried.
    let job = store.retry(&id).await.unwrap();
    assert_eq!(
        (job.state, job.attempts, job.max_attempts),
        (JobState::Queued, 2, 3)
    );
    let a3 = claim_one(store, "h").await;
    assert_eq!((a3.job.id.clone(), a3.attempt), (id.clone(), 3));
    assert_eq!(
        store
            .complete(
                &id,
                &a3.attempt_id,
                vec![],
                &digest(1),
                &serde_json::json!({})
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        store.retry(&id).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_STATE"
    );
    // Retrying a queued job changes nothing.
    let queued = store.retry(&later).await.unwrap();
    assert_eq!(queued.state, JobState::Queued);
    assert_eq!(queued.max_attempts, 5);
}

pub async fn snooze_and_release_do_not_spend_attempts(store: &JobStore, _: &Location) {
    let id = submit(store, "snooze", 1).await;
    for _ in 0..3 {
        let c = claim_one(store, "h").await;
        assert_eq!(c.attempt, 1);
        assert_eq!(
            store
                .snooze(
                    &id,
                    &c.attempt_id,
                    Duration::ZERO,
                    "PATCH_CANDIDATE_IMAGE_MISSING"
                )
                .await
                .unwrap(),
            Fenced::Applied
        );
        let job = store.get(&id).await.unwrap().unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Queued, 0));
        assert_eq!(
            job.last_error.unwrap().code,
            "PATCH_CANDIDATE_IMAGE_MISSING"
        );
        let c = claim_one(store, "h").await;
        assert_eq!(
            store.release(&id, &c.attempt_id, None).await.unwrap(),
            Fenced::Applied
        );
        assert_eq!(store.get(&id).await.unwrap().unwrap().attempts, 0);
    }
    let c = claim_one(store, "h").await;
    assert_eq!(
        store
            .snooze(
                &id,
                &c.attempt_id,
                LONG,
                "PATCH_CANDIDATE_REPOSITORY_MISSING"
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        store.claim(&host("h"), 1, LONG).await.unwrap(),
        vec![],
        "snoozed until later"
    );
    let codes: Vec<String> = store
        .events(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.code)
        .collect();
    assert_eq!(
        codes.iter().filter(|c| *c == jobs::EVENT_SNOOZED).count(),
        4
    );
    assert_eq!(
        codes.iter().filter(|c| *c == jobs::EVENT_RELEASED).count(),
        3
    );
}

pub async fn cancel_queued_and_running(store: &JobStore, _: &Location) {
    let queued = submit(store, "cq", 1).await;
    let job = store.cancel(&queued).await.unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(store.claim(&host("h"), 5, LONG).await.unwrap(), vec![]);

    let running = submit(store, "cr", 1).await;
    let c = claim_one(store, "h").await;
    let job = store.cancel(&running).await.unwrap();
    assert_eq!((job.state, job.cancel_requested), (JobState::Running, true));
    assert_eq!(
        store
            .heartbeat(&running, &c.attempt_id, LONG)
            .await
            .unwrap(),
        Heartbeat::Renewed {
            cancel_requested: true
        }
    );
    assert_eq!(
        store
            .finish_cancelled(&running, &c.attempt_id, None)
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(state(store, &running).await, JobState::Cancelled);
    assert_eq!(
        store
            .heartbeat(&running, &c.attempt_id, LONG)
            .await
            .unwrap(),
        Heartbeat::Lost
    );

    // A cancelled running job never goes back to the queue, whatever the runner reports.
    let r2 = submit(store, "cr2", 3).await;
    let c2 = claim_one(store, "h").await;
    store.cancel(&r2).await.unwrap();
    assert_eq!(
        fail_env(store, &r2, &c2.attempt_id, "killed").await,
        Fenced::Applied
    );
    assert_eq!(state(store, &r2).await, JobState::Cancelled);

    // Terminal jobs are unchanged; retry brings a cancelled one back.
    assert_eq!(
        store.cancel(&running).await.unwrap().state,
        JobState::Cancelled
    );
    let back = store.retry(&queued).await.unwrap();
    assert_eq!(
        (back.state, back.cancel_requested),
        (JobState::Queued, false)
    );
    let c3 = claim_one(store, "h").await;
    assert_eq!(c3.job.id, queued);
    let events = store.events(&queued).await.unwrap();
    let codes: Vec<&str> = events.iter().map(|e| e.code.as_str()).collect();
    assert_eq!(
        codes,
        vec![
            jobs::EVENT_SUBMITTED,
            jobs::EVENT_CANCELLED,
            jobs::EVENT_RETRIED,
            jobs::EVENT_CLAIMED
        ]
    );
}

pub async fn rescue_is_one_guarded_statement(store: &JobStore, location: &Location) {
    let plain = submit(store, "r-plain", 3).await;
    let exhausted = submit(store, "r-exhausted", 1).await;
    let cancelling = submit(store, "r-cancel", 3).await;
    let live = submit(store, "r-live", 3).await;
    let mut by_id = BTreeMap::new();
    for c in store.claim(&host("h"), 3, Duration::ZERO).await.unwrap() {
        by_id.insert(c.job.id.clone(), c);
    }
    assert_eq!(by_id.len(), 3);
    let live_claim = claim_one(store, "h").await;
    assert_eq!(live_claim.job.id, live);
    store.cancel(&cancelling).await.unwrap();
    expire().await;
    // Several rescuers at once (one per "host"): each expired lease is rescued exactly once.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = if i % 2 == 0 {
            store.clone()
        } else {
            location.open().await
        };
        tasks.push(tokio::spawn(async move {
            store.rescue_expired().await.unwrap()
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    assert_eq!(total, 3);
    assert_eq!(state(store, &plain).await, JobState::Queued);
    assert_eq!(state(store, &exhausted).await, JobState::Failed);
    assert_eq!(state(store, &cancelling).await, JobState::Cancelled);
    assert_eq!(state(store, &live).await, JobState::Running);
    assert_eq!(store.rescue_expired().await.unwrap(), 0);
    assert_eq!(
        store.current_attempts().await.unwrap(),
        vec![(live, live_claim.attempt_id)]
    );
}

pub async fn candidate_readable_from_another_handle_and_usage_idempotent(
    store: &JobStore,
    location: &Location,
) {
    let id = submit(store, "cand", 3).await;
    let a1 = claim_one(store, "h1").await;
    // The first attempt ran, then failed: its usage is recorded, twice (a retried write).
    let u1 = serde_json::json!({"prompt_tokens": 10, "total_tokens": 12});
    store.record_usage(&id, &a1.attempt_id, &u1).await.unwrap();
    store.record_usage(&id, &a1.attempt_id, &u1).await.unwrap();
    assert_eq!(
        fail_env(store, &id, &a1.attempt_id, "x").await,
        Fenced::Applied
    );
    let a2 = claim_one(store, "h2").await;
    let u2 = serde_json::json!({"total_tokens": 7});
    // Usage recorded before the completion (a crash in between), then by the completion.
    store.record_usage(&id, &a2.attempt_id, &u2).await.unwrap();
    let bytes: Vec<u8> = (0..=255).cycle().take(100_000).collect();
    assert_eq!(
        store
            .complete(&id, &a2.attempt_id, bytes.clone(), &digest(9), &u2)
            .await
            .unwrap(),
        Fenced::Applied
    );
    let usage = store.usage(&id).await.unwrap();
    assert_eq!(usage.len(), 2, "one row per attempt");
    let by_attempt: BTreeMap<_, _> = usage.into_iter().collect();
    assert_eq!(
        by_attempt[&a1.attempt_id],
        r#"{"prompt_tokens":10,"total_tokens":12}"#
    );
    assert_eq!(by_attempt[&a2.attempt_id], r#"{"total_tokens":7}"#);
    // Another host (its own handle) reads the candidate from the database.
    let other = location.open().await;
    assert_eq!(other.candidate(&id).await.unwrap(), Some(bytes));
    let job = other.get(&id).await.unwrap().unwrap();
    assert_eq!(job.candidate_digest, Some(digest(9)));
    let unknown = random_job_id().unwrap();
    assert_eq!(
        store
            .record_usage(&unknown, &a1.attempt_id, &u1)
            .await
            .unwrap_err()
            .code(),
        "PATCH_CANDIDATE_JOBS_NOT_FOUND"
    );
}

pub async fn events_hosts_and_current_attempts(store: &JobStore, _: &Location) {
    let id = submit(store, "ev", 1).await;
    let c = claim_one(store, "h1").await;
    store
        .append_event(
            &id,
            Some(&c.attempt_id),
            "PATCH_CANDIDATE_TURN_STARTED",
            "container created",
        )
        .await
        .unwrap();
    store
        .append_event(&id, None, "NOTE", "line one\nline two")
        .await
        .unwrap();
    assert_eq!(
        store
            .append_event(&id, None, "NOTE", "bell\u{7}")
            .await
            .unwrap_err()
            .code(),
        "PATCH_CANDIDATE_JOBS_INPUT"
    );
    assert_eq!(
        store
            .append_event(&random_job_id().unwrap(), None, "NOTE", "x")
            .await
            .unwrap_err()
            .code(),
        "PATCH_CANDIDATE_JOBS_NOT_FOUND"
    );
    let events = store.events(&id).await.unwrap();
    let tail: Vec<_> = events
        .iter()
        .skip(2)
        .map(|e| (e.code.as_str(), e.message.as_str(), e.attempt_id.clone()))
        .collect();
    assert_eq!(
        tail,
        vec![
            (
                "PATCH_CANDIDATE_TURN_STARTED",
                "container created",
                Some(c.attempt_id.clone())
            ),
            ("NOTE", "line one\nline two", None),
        ]
    );
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));

    assert_eq!(store.host_heartbeat(&host("h1")).await.unwrap(), false);
    store
        .register_host(&host("h1"), 4, &serde_json::json!({"version": "0.1.0"}))
        .await
        .unwrap();
    store
        .register_host(&host("h0"), 2, &serde_json::json!({}))
        .await
        .unwrap();
    store
        .register_host(&host("h1"), 8, &serde_json::json!({"version": "0.2.0"}))
        .await
        .unwrap();
    assert!(store.host_heartbeat(&host("h1")).await.unwrap());
    let hosts = store.hosts().await.unwrap();
    assert_eq!(
        hosts
            .iter()
            .map(|h| (h.host.as_str(), h.max_turns))
            .collect::<Vec<_>>(),
        vec![("h0", 2), ("h1", 8)]
    );
    assert_eq!(hosts[1].meta, serde_json::json!({"version": "0.2.0"}));
    assert!(hosts[1].seen_at_ms >= hosts[1].started_at_ms);
    assert_eq!(
        store.current_attempts().await.unwrap(),
        vec![(id, c.attempt_id)]
    );
}

pub async fn migrations_are_versioned_and_concurrent_opens_agree(
    store: &JobStore,
    location: &Location,
) {
    assert_eq!(store.schema_version().await.unwrap(), jobs::SCHEMA_VERSION);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let location = match location {
            Location::Sqlite(p) => Location::Sqlite(p.clone()),
            Location::Postgres(u) => Location::Postgres(u.clone()),
        };
        tasks.push(tokio::spawn(async move {
            location.open().await.schema_version().await.unwrap()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), jobs::SCHEMA_VERSION);
    }
}

/// The store's identity: a valid id, the same for every handle on the database and after a
/// reopen, different for another database; writes do not change it.
pub async fn store_identity_is_stable_and_per_database(store: &JobStore, location: &Location) {
    let id = store.store_id().clone();
    assert_eq!(StoreId::parse(id.as_str()).unwrap(), id);
    // Another handle ("another host"), opened while this one is open.
    let second = location.open().await;
    assert_eq!(second.store_id(), &id);
    submit(&second, "identity", 1).await;
    drop(second);
    // Reopened after writes: still the same.
    assert_eq!(location.open().await.store_id(), &id);
    assert_eq!(store.store_id(), &id);
    // Another database: another id.
    let (_guard, other) = location.open_another_database().await;
    assert_ne!(other.store_id(), &id);
}

/// Concurrent first opens of a fresh database (several hosts starting at once) all migrate
/// without a race (`BEGIN IMMEDIATE` on SQLite, an advisory lock on PostgreSQL) and agree on one
/// store id.
pub async fn first_opens_race(location: Location) {
    let location = Arc::new(location);
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let location = Arc::clone(&location);
        tasks.push(tokio::spawn(async move {
            let store = location.open().await;
            (
                store.schema_version().await.unwrap(),
                store.store_id().clone(),
            )
        }));
    }
    let mut ids = BTreeSet::new();
    for t in tasks {
        let (version, id) = t.await.unwrap();
        assert_eq!(version, jobs::SCHEMA_VERSION);
        ids.insert(id);
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    let opened_later = location.open().await;
    assert!(ids.contains(opened_later.store_id()));
}

/// Makes the database unreachable and brings it back.
pub trait Outage {
    fn go_away(&mut self);
    fn come_back(&mut self);
}

/// SQLite: another process holds an exclusive lock past the busy timeout.
pub struct SqliteOutage {
    path: PathBuf,
    holder: Option<rusqlite::Connection>,
}

impl SqliteOutage {
    pub fn new(path: PathBuf) -> Self {
        Self { path, holder: None }
    }
}

impl Outage for SqliteOutage {
    fn go_away(&mut self) {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
        self.holder = Some(conn);
    }

    fn come_back(&mut self) {
        if let Some(conn) = self.holder.take() {
            conn.execute_batch("ROLLBACK").unwrap();
        }
    }
}

/// PostgreSQL: the (private) cluster is stopped, then started again.
pub struct PostgresOutage {
    cluster: PrivateCluster,
}

impl PostgresOutage {
    pub fn new(cluster: PrivateCluster) -> Self {
        Self { cluster }
    }
}

impl Outage for PostgresOutage {
    fn go_away(&mut self) {
        self.cluster.stop().unwrap();
    }

    fn come_back(&mut self) {
        self.cluster.restart().unwrap();
    }
}

fn is_unavailable(e: &JobsError) -> bool {
    e.code() == "PATCH_CANDIDATE_JOBS_UNAVAILABLE" && e.is_environment()
}

pub async fn outage(store: &JobStore, outage: &mut dyn Outage) {
    let before = submit(store, "before", 3).await;
    let c = claim_one(store, "h").await;
    outage.go_away();
    let e = store.submit(JobSpec::noop("during", 1)).await.unwrap_err();
    assert!(is_unavailable(&e), "{e}");
    let e = store.claim(&host("h"), 1, LONG).await.unwrap_err();
    assert!(is_unavailable(&e), "{e}");
    let e = store
        .heartbeat(&before, &c.attempt_id, LONG)
        .await
        .unwrap_err();
    assert!(is_unavailable(&e), "{e}");
    outage.come_back();
    // The same handle works again, without being reopened, and nothing was half-written.
    let store = Arc::new(store.clone());
    assert!(matches!(
        store.heartbeat(&before, &c.attempt_id, LONG).await.unwrap(),
        Heartbeat::Renewed { .. }
    ));
    let after = submit(&store, "after", 1).await;
    assert_eq!(store.list(None, 10).await.unwrap().len(), 2);
    let c2 = store.claim(&host("h"), 5, LONG).await.unwrap();
    assert_eq!(
        c2.iter().map(|c| c.job.id.clone()).collect::<Vec<_>>(),
        vec![after]
    );
    assert_eq!(
        store
            .complete(
                &before,
                &c.attempt_id,
                vec![1],
                &digest(4),
                &serde_json::json!({})
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
}

/// Drops pending wake-ups (spurious ones are allowed: on PostgreSQL a write wakes its own process
/// at once and again through `NOTIFY`, and the listener wakes once when it connects).
async fn drain(signal: &mut jobs::WorkSignal) {
    while signal.wait(Duration::from_millis(100)).await {}
}

pub async fn work_signal_wakes_idle_runners(store: &JobStore, location: &Location) {
    const BOUND: Duration = Duration::from_secs(60);
    let mut signal = store.work_signal();
    drain(&mut signal).await;
    // A submission wakes it, also one made while nobody was waiting.
    submit(store, "wake-1", 2).await;
    assert!(signal.wait(BOUND).await);
    let waiter = {
        let mut signal = store.work_signal();
        tokio::spawn(async move { signal.wait(BOUND).await })
    };
    tokio::task::yield_now().await;
    let id = submit(store, "wake-2", 2).await;
    assert!(waiter.await.unwrap());
    // A retrying failure and a rescue wake it too; a claim or a completion does not.
    let c = claim_one(store, "h").await;
    drain(&mut signal).await;
    assert_eq!(
        fail_env(store, &c.job.id, &c.attempt_id, "x").await,
        Fenced::Applied
    );
    assert!(signal.wait(BOUND).await);
    let claimed = store.claim(&host("h"), 2, Duration::ZERO).await.unwrap();
    assert_eq!(claimed.len(), 2);
    drain(&mut signal).await;
    expire().await;
    assert_eq!(store.rescue_expired().await.unwrap(), 2);
    assert!(signal.wait(BOUND).await);
    assert_eq!(state(store, &id).await, JobState::Queued);
    // PostgreSQL: a submission by another host (its own handle and connections) wakes this one.
    if let Location::Postgres(_) = location {
        let other = location.open().await;
        drain(&mut signal).await;
        submit(&other, "wake-remote", 1).await;
        assert!(signal.wait(BOUND).await);
    }
}

/// Three hosts on one database; one dies holding ten claimed jobs. The other two rescue its
/// expired leases and finish everything: each job completed exactly once, the dead host's late
/// writes refused.
pub async fn a_dead_hosts_jobs_are_finished_by_the_others(store: &JobStore, location: &Location) {
    const JOBS: usize = 60;
    for i in 0..JOBS {
        submit(store, &format!("hosts-{i}"), 3).await;
    }
    let dead = location.open().await;
    let lost = dead
        .claim(&host("dead"), 10, Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(lost.len(), 10);
    let mut workers = Vec::new();
    for name in ["alive-1", "alive-2"] {
        let store = location.open().await;
        workers.push(tokio::spawn(async move {
            let me = host(name);
            let mut done = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while tokio::time::Instant::now() < deadline {
                let claimed = store.claim(&me, 3, LONG).await.unwrap();
                if claimed.is_empty() {
                    let open = store
                        .list(Some(JobState::Queued), 1000)
                        .await
                        .unwrap()
                        .len()
                        + store
                            .list(Some(JobState::Running), 1000)
                            .await
                            .unwrap()
                            .len();
                    if open == 0 {
                        break;
                    }
                    store.rescue_expired().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                for c in claimed {
                    let applied = store
                        .complete(
                            &c.job.id,
                            &c.attempt_id,
                            vec![],
                            &digest(5),
                            &serde_json::json!({}),
                        )
                        .await
                        .unwrap();
                    assert_eq!(applied, Fenced::Applied);
                    done.push(c.job.id);
                }
            }
            done
        }));
    }
    let mut completed: BTreeMap<JobId, usize> = BTreeMap::new();
    for w in workers {
        for id in w.await.unwrap() {
            *completed.entry(id).or_default() += 1;
        }
    }
    assert_eq!(completed.len(), JOBS);
    assert!(completed.values().all(|&n| n == 1));
    for c in &lost {
        assert_eq!(
            dead.complete(
                &c.job.id,
                &c.attempt_id,
                vec![],
                &digest(6),
                &serde_json::json!({})
            )
            .await
            .unwrap(),
            Fenced::Lost
        );
        assert_eq!(
            dead.heartbeat(&c.job.id, &c.attempt_id, LONG)
                .await
                .unwrap(),
            Heartbeat::Lost
        );
        let job = store.get(&c.job.id).await.unwrap().unwrap();
        assert_eq!((job.state, job.attempts), (JobState::Completed, 2));
        assert_eq!(job.candidate_digest, Some(digest(5)));
    }
    assert_eq!(
        store
            .list(Some(JobState::Completed), 1000)
            .await
            .unwrap()
            .len(),
        JOBS
    );
}

fn live_spec(nonce: &str, model: &str) -> JobSpec {
    let mut spec = JobSpec::noop(nonce, 2);
    spec.kind = jobs::JobKind::Turn;
    spec.live = Some(jobs::LiveJob {
        model: model.to_owned(),
        agent: None,
        environment: None,
    });
    spec
}

pub async fn live_jobs_bind_their_model(store: &JobStore, location: &Location) {
    let live = live_spec("live", "gpt-5.3-codex");
    let (job, created) = store.submit(live.clone()).await.unwrap();
    assert!(created);
    assert_eq!(job.spec.live, live.live);
    assert_eq!(job.idempotency_key, live.idempotency_key());
    // Read back by another handle, in full and in a list view.
    let other = location.open().await;
    assert_eq!(other.get(&job.id).await.unwrap().unwrap().spec, live);
    let listed = other.list(None, 10).await.unwrap();
    assert_eq!(listed[0].spec.live, live.live);
    let view = serde_json::to_value(&listed[0].spec).unwrap();
    assert_eq!(view["live"], serde_json::json!({"model": "gpt-5.3-codex"}));
    // The same bound fields are the same job; the model is part of the identity, and so is
    // being live at all.
    let (again, created) = store.submit(live.clone()).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, job.id);
    let (other_model, created) = store
        .submit(live_spec("live", "gpt-5.3-codex-mini"))
        .await
        .unwrap();
    assert!(created);
    assert_ne!(other_model.id, job.id);
    // The agent (absent for Codex) is part of the identity, stored and read back as given.
    let mut gemini = live.clone();
    if let Some(l) = gemini.live.as_mut() {
        l.agent = Some("gemini".to_owned());
    }
    let (gemini_job, created) = store.submit(gemini.clone()).await.unwrap();
    assert!(created);
    assert_ne!(gemini_job.id, job.id);
    assert_eq!(
        other.get(&gemini_job.id).await.unwrap().unwrap().spec,
        gemini
    );
    let gemini_view = serde_json::to_value(&gemini_job.spec).unwrap();
    assert_eq!(
        gemini_view["live"],
        serde_json::json!({"model": "gpt-5.3-codex", "agent": "gemini"})
    );
    let mut offline = live.clone();
    offline.live = None;
    let (offline_job, created) = store.submit(offline.clone()).await.unwrap();
    assert!(created);
    assert_ne!(offline_job.id, job.id);
    assert_eq!(offline_job.spec.live, None);
    let offline_view = serde_json::to_value(&offline_job.spec).unwrap();
    assert!(
        offline_view.get("live").is_none(),
        "an offline spec shows no live field"
    );
    // A claimed live job carries its model to the runner.
    let claimed = store.claim(&host("h"), 3, LONG).await.unwrap();
    let live_claim = claimed.iter().find(|c| c.job.id == job.id).unwrap();
    assert_eq!(live_claim.job.spec.live, live.live);

    // Malformed model names and a live no-op never enter the queue.
    let before = store.list(None, 100).await.unwrap().len();
    for bad in ["", "a/b", "model name", "m\u{1b}[2J", "é", &"m".repeat(65)] {
        assert_eq!(
            store
                .submit(live_spec("bad", bad))
                .await
                .unwrap_err()
                .code(),
            "PATCH_CANDIDATE_JOBS_SPEC",
            "{bad:?}"
        );
    }
    let mut live_noop = JobSpec::noop("live-noop", 1);
    live_noop.live = live.live.clone();
    assert_eq!(
        store.submit(live_noop).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_SPEC"
    );
    assert_eq!(store.list(None, 100).await.unwrap().len(), before);
}

pub async fn follow_up_jobs_bind_what_they_supersede(store: &JobStore, location: &Location) {
    let mut parent = JobSpec::noop("follow-up-parent", 2);
    parent.kind = jobs::JobKind::Turn;
    let (parent_job, _) = store.submit(parent.clone()).await.unwrap();
    let follow_up = jobs::FollowUp {
        supersedes_job: parent_job.id.clone(),
        supersedes_candidate: format!("sha256:{}", "c".repeat(64)),
        note: Some("keep the public API\n\tand the tests".to_owned()),
        gates: vec![jobs::FollowUpGate {
            gate: "unit".to_owned(),
            verdict: vocab::GateVerdict::Failed,
            new_failures: Vec::new(),
            excerpt: None,
        }],
        round: 0,
        chain_tokens: 0,
    };
    let mut child = parent.clone();
    child.follow_up = Some(follow_up.clone());
    let (child_job, created) = store.submit(child.clone()).await.unwrap();
    assert!(created);
    assert_ne!(child_job.id, parent_job.id, "a follow-up is its own job");
    assert_eq!(child_job.idempotency_key, child.idempotency_key());
    assert_ne!(child.idempotency_key(), parent.idempotency_key());
    // Read back in full by another handle and in a list view; the view shows the lineage.
    let other = location.open().await;
    assert_eq!(other.get(&child_job.id).await.unwrap().unwrap().spec, child);
    let listed = other.list(None, 100).await.unwrap();
    let view = listed.iter().find(|j| j.id == child_job.id).unwrap();
    let json = serde_json::to_value(&view.spec).unwrap();
    assert_eq!(
        json["follow_up"]["supersedes_job"],
        serde_json::json!(parent_job.id.as_str())
    );
    assert_eq!(json["follow_up"]["gates"][0]["verdict"], "failed");
    let parent_view = listed.iter().find(|j| j.id == parent_job.id).unwrap();
    assert!(
        serde_json::to_value(&parent_view.spec)
            .unwrap()
            .get("follow_up")
            .is_none()
    );
    // The same follow-up again is the same job; another note is another job.
    let (again, created) = store.submit(child.clone()).await.unwrap();
    assert!(!created);
    assert_eq!(again.id, child_job.id);
    let mut other_note = child.clone();
    if let Some(f) = other_note.follow_up.as_mut() {
        f.note = Some("another note".to_owned());
    }
    let (other_job, created) = store.submit(other_note).await.unwrap();
    assert!(created);
    assert_ne!(other_job.id, child_job.id);
    let mut no_note = child.clone();
    if let Some(f) = no_note.follow_up.as_mut() {
        f.note = None;
    }
    assert_ne!(no_note.idempotency_key(), child.idempotency_key());

    // Malformed follow-ups never enter the queue.
    let before = store.list(None, 100).await.unwrap().len();
    let bad: [fn(&mut jobs::FollowUp); 6] = [
        |f| f.supersedes_candidate = "sha256:XYZ".to_owned(),
        |f| f.note = Some(String::new()),
        |f| f.note = Some("x".repeat(jobs::MAX_FOLLOW_UP_NOTE_BYTES + 1)),
        |f| f.note = Some("erase\u{1b}[2J".to_owned()),
        |f| f.gates[0].gate = "Unit Tests".to_owned(),
        |f| {
            let g = f.gates[0].clone();
            f.gates = vec![g; jobs::MAX_FOLLOW_UP_GATES + 1];
        },
    ];
    for (i, mutate) in bad.iter().enumerate() {
        let mut spec = child.clone();
        if let Some(f) = spec.follow_up.as_mut() {
            mutate(f);
        }
        assert_eq!(
            store.submit(spec).await.unwrap_err().code(),
            "PATCH_CANDIDATE_JOBS_SPEC",
            "case {i}"
        );
    }
    let mut noop_follow = JobSpec::noop("follow-up-noop", 1);
    noop_follow.follow_up = Some(follow_up);
    assert_eq!(
        store.submit(noop_follow).await.unwrap_err().code(),
        "PATCH_CANDIDATE_JOBS_SPEC"
    );
    assert_eq!(store.list(None, 100).await.unwrap().len(), before);
}

pub async fn outcome_writes_carry_one_usage_row_per_attempt(store: &JobStore, _: &Location) {
    let row = |n: u64| serde_json::json!({"outcome": "x", "wall_ms": n});
    let id = submit(store, "usage-rows", 5).await;
    // A failed attempt that is retried: its row lands with the failure.
    let a1 = claim_one(store, "h").await;
    assert_eq!(
        store
            .fail(
                &id,
                &a1.attempt_id,
                "REPOSITORY_DOCKER_UNAVAILABLE",
                "m",
                Retry::After(Duration::ZERO),
                Some(&row(1))
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    // A released attempt (drain): its row lands with the release, the attempt is given back.
    let a2 = claim_one(store, "h").await;
    assert_eq!(
        store
            .release(&id, &a2.attempt_id, Some(&row(2)))
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(store.get(&id).await.unwrap().unwrap().attempts, 1);
    // A snoozed attempt did not run: no row.
    let a3 = claim_one(store, "h").await;
    assert_eq!(
        store
            .snooze(&id, &a3.attempt_id, Duration::ZERO, "PATCH_CANDIDATE_X")
            .await
            .unwrap(),
        Fenced::Applied
    );
    // An oversized usage document is refused and nothing is written: the attempt still runs.
    let a4 = claim_one(store, "h").await;
    let huge = serde_json::json!({"pad": "x".repeat(jobs::MAX_DOCUMENT_BYTES)});
    assert_eq!(
        store
            .fail(&id, &a4.attempt_id, "X", "m", Retry::Never, Some(&huge))
            .await
            .unwrap_err()
            .code(),
        "PATCH_CANDIDATE_JOBS_INPUT"
    );
    assert_eq!(state(store, &id).await, JobState::Running);
    // The lease is lost (a zero-length renewal, then the rescuer): the stale attempt's writes
    // record nothing, usage included.
    assert!(matches!(
        store
            .heartbeat(&id, &a4.attempt_id, Duration::ZERO)
            .await
            .unwrap(),
        Heartbeat::Renewed { .. }
    ));
    expire().await;
    assert_eq!(store.rescue_expired().await.unwrap(), 1);
    let lost = a4.attempt_id;
    for write in 0..3 {
        let fenced = match write {
            0 => store
                .fail(&id, &lost, "X", "m", Retry::Never, Some(&row(9)))
                .await
                .unwrap(),
            1 => store.release(&id, &lost, Some(&row(9))).await.unwrap(),
            _ => store
                .finish_cancelled(&id, &lost, Some(&row(9)))
                .await
                .unwrap(),
        };
        assert_eq!(fenced, Fenced::Lost);
    }
    // A cancelled running attempt: its row lands with the cancellation.
    let a5 = claim_one(store, "h").await;
    store.cancel(&id).await.unwrap();
    assert_eq!(
        store
            .finish_cancelled(&id, &a5.attempt_id, Some(&row(5)))
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(state(store, &id).await, JobState::Cancelled);
    // Retried by the operator, a dead-lettered attempt's row lands with the failure.
    store.retry(&id).await.unwrap();
    let a6 = claim_one(store, "h").await;
    assert_eq!(
        store
            .fail(
                &id,
                &a6.attempt_id,
                "REPOSITORY_PATCH_X",
                "m",
                Retry::Never,
                Some(&row(6))
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(state(store, &id).await, JobState::Failed);
    let rows: BTreeMap<_, _> = store.usage(&id).await.unwrap().into_iter().collect();
    let expected: BTreeMap<_, _> = [
        (a1.attempt_id, r#"{"outcome":"x","wall_ms":1}"#.to_owned()),
        (a2.attempt_id, r#"{"outcome":"x","wall_ms":2}"#.to_owned()),
        (a5.attempt_id, r#"{"outcome":"x","wall_ms":5}"#.to_owned()),
        (a6.attempt_id, r#"{"outcome":"x","wall_ms":6}"#.to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(rows, expected);
}

fn evidence_doc(
    gate: &str,
    outcome: vocab::GateVerdict,
    n: u8,
    wall_ms: u64,
) -> jobs::EvidenceDocument {
    let bytes = serde_json::to_vec(&serde_json::json!({"gate": gate, "n": n})).unwrap();
    jobs::EvidenceDocument::new(gate, outcome, &digest(n), wall_ms, bytes).unwrap()
}

/// The candidate and its gate evidence are one write: stored together by the current attempt
/// (readable from another handle), never by a stale one, never twice, and a bad set writes
/// nothing at all.
pub async fn gate_evidence_is_written_once_with_the_candidate(
    store: &JobStore,
    location: &Location,
) {
    use vocab::GateVerdict;
    let id = submit(store, "gates", 3).await;
    let a1 = store
        .claim(&host("h1"), 1, Duration::ZERO)
        .await
        .unwrap()
        .remove(0);
    // A refused set (two documents for one gate) writes nothing: the job is still running.
    let twice = vec![
        evidence_doc("pytest", GateVerdict::Passed, 1, 10),
        evidence_doc("pytest", GateVerdict::Failed, 2, 10),
    ];
    let e = store
        .complete_with_evidence(
            &id,
            &a1.attempt_id,
            vec![1],
            &digest(7),
            &serde_json::json!({}),
            twice,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
    assert_eq!(state(store, &id).await, JobState::Running);
    assert!(store.evidence(&id).await.unwrap().is_empty());
    // The attempt is lost (rescued); its late completion writes neither candidate nor evidence.
    expire().await;
    let _ = store.rescue_expired().await.unwrap();
    let a2 = claim_one(store, "h2").await;
    let docs = vec![
        evidence_doc("pytest", GateVerdict::Failed, 3, 1234),
        evidence_doc("cargo-test", GateVerdict::Passed, 4, 99),
    ];
    let late = store
        .complete_with_evidence(
            &id,
            &a1.attempt_id,
            vec![1],
            &digest(7),
            &serde_json::json!({}),
            docs.clone(),
        )
        .await
        .unwrap();
    assert_eq!(late, Fenced::Lost);
    assert!(store.evidence(&id).await.unwrap().is_empty());
    assert_eq!(store.candidate(&id).await.unwrap(), None);
    // The current attempt's completion stores both.
    let applied = store
        .complete_with_evidence(
            &id,
            &a2.attempt_id,
            vec![2],
            &digest(8),
            &serde_json::json!({"total_tokens": 1}),
            docs.clone(),
        )
        .await
        .unwrap();
    assert_eq!(applied, Fenced::Applied);
    // A repeated write (a retried request after a lost response) changes nothing.
    let again = store
        .complete_with_evidence(
            &id,
            &a2.attempt_id,
            vec![3],
            &digest(9),
            &serde_json::json!({}),
            vec![evidence_doc("pytest", GateVerdict::Passed, 5, 1)],
        )
        .await
        .unwrap();
    assert_eq!(again, Fenced::Lost);
    let other = location.open().await;
    let stored = other.evidence(&id).await.unwrap();
    let mut expected = docs;
    expected.sort_by(|a, b| a.gate().cmp(b.gate()));
    assert_eq!(stored, expected, "by gate name, byte for byte");
    assert_eq!(stored[1].outcome(), GateVerdict::Failed);
    assert_eq!(stored[1].wall_ms(), 1234);
    assert_eq!(other.candidate(&id).await.unwrap(), Some(vec![2]));
    assert_eq!(state(&other, &id).await, JobState::Completed);
    // A completion without gates stores no evidence.
    let plain = submit(store, "plain", 1).await;
    let a = claim_one(store, "h1").await;
    let plain_done = store
        .complete(
            &plain,
            &a.attempt_id,
            vec![1],
            &digest(1),
            &serde_json::json!({}),
        )
        .await
        .unwrap();
    assert_eq!(plain_done, Fenced::Applied);
    assert!(store.evidence(&plain).await.unwrap().is_empty());
}

/// A turn job with automatic follow-ups, claimed: its spec and attempt.
async fn claimed_chain_turn(store: &JobStore, nonce: &str) -> (JobSpec, jobs::Claimed) {
    let mut spec = JobSpec::noop(nonce, 2);
    spec.kind = jobs::JobKind::Turn;
    spec.follow_ups = Some(jobs::FollowUpPolicy {
        max_follow_ups: 2,
        token_budget: Some(10_000),
    });
    store.submit(spec.clone()).await.unwrap();
    let claimed = claim_one(store, "h1").await;
    (spec, claimed)
}

/// `parent`'s first automatic follow-up of the candidate `digest(n)` of job `id`.
fn chain_follow_up(parent: &JobSpec, id: &JobId, n: u8) -> JobSpec {
    let mut spec = parent.clone();
    spec.follow_up = Some(jobs::FollowUp {
        supersedes_job: id.clone(),
        supersedes_candidate: digest(n),
        note: None,
        gates: vec![jobs::FollowUpGate {
            gate: "unit".to_owned(),
            verdict: vocab::GateVerdict::Failed,
            new_failures: vec!["tests/test_app.py::test_total".to_owned()],
            excerpt: Some("E   assert 41 == 42\n1 failed, 3 passed\n".to_owned()),
        }],
        round: 1,
        chain_tokens: 1_200,
    });
    spec
}

/// A completion that queues an automatic follow-up writes both or neither: a follow-up of
/// another candidate or with bad context writes nothing, a stale attempt queues nothing, the
/// current one queues exactly one job (with its `submitted` line, readable from another
/// handle), and a follow-up that already exists by its key is not queued twice.
pub async fn a_completion_queues_its_follow_up_in_the_same_write(
    store: &JobStore,
    location: &Location,
) {
    let (parent, a1) = claimed_chain_turn(store, "chain").await;
    let id = a1.job.id.clone();
    let count = || async { store.list(None, 100).await.unwrap().len() };
    let before = count().await;
    let complete = |attempt: jobs::Claimed, follow_up: JobSpec, n: u8| {
        let id = id.clone();
        async move {
            store
                .complete_and_follow_up(
                    &id,
                    &attempt.attempt_id,
                    (vec![n], &digest(n)),
                    &serde_json::json!({"total_tokens": 800}),
                    Vec::new(),
                    Some(follow_up),
                )
                .await
        }
    };
    // Not a follow-up of this candidate, or context out of bounds: refused, nothing written.
    let mut bad = vec![chain_follow_up(&parent, &id, 6)];
    let mut control = chain_follow_up(&parent, &id, 5);
    if let Some(f) = control.follow_up.as_mut() {
        f.gates[0].excerpt = Some("clear\u{1b}[2J".to_owned());
    }
    bad.push(control);
    let mut no_link = chain_follow_up(&parent, &id, 5);
    no_link.follow_up = None;
    bad.push(no_link);
    for (i, spec) in bad.into_iter().enumerate() {
        let e = complete(a1.clone(), spec, 5).await.unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_SPEC", "case {i}");
        assert_eq!(state(store, &id).await, JobState::Running, "case {i}");
        assert_eq!(count().await, before, "case {i}");
    }
    // The attempt is lost: its late completion queues nothing.
    let child = chain_follow_up(&parent, &id, 5);
    store
        .heartbeat(&id, &a1.attempt_id, Duration::ZERO)
        .await
        .unwrap();
    expire().await;
    assert_eq!(store.rescue_expired().await.unwrap(), 1);
    let a2 = claim_one(store, "h2").await;
    assert_eq!(
        complete(a1.clone(), child.clone(), 5).await.unwrap(),
        Fenced::Lost
    );
    assert_eq!(count().await, before);
    // The current attempt: the candidate and exactly one queued follow-up.
    assert_eq!(
        complete(a2.clone(), child.clone(), 5).await.unwrap(),
        Fenced::Applied
    );
    let other = location.open().await;
    let jobs_now = other.list(None, 100).await.unwrap();
    assert_eq!(jobs_now.len(), before + 1);
    let queued = jobs_now
        .iter()
        .find(|j| j.idempotency_key == child.idempotency_key())
        .unwrap();
    assert_eq!(queued.state, JobState::Queued);
    assert_eq!(
        other.get(&queued.id).await.unwrap().unwrap().spec,
        child,
        "stored in full, context and chain included"
    );
    assert_eq!(state(&other, &id).await, JobState::Completed);
    assert_eq!(other.candidate(&id).await.unwrap(), Some(vec![5]));
    let events = other.events(&queued.id).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].code, "PATCH_CANDIDATE_JOB_SUBMITTED");
    // The parent finds its follow-up by the job it continues (through the index), and the
    // follow-up, which nothing continues yet, finds none.
    let later: Vec<JobId> = other
        .follow_ups_of(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(later, vec![queued.id.clone()]);
    assert!(other.follow_ups_of(&queued.id).await.unwrap().is_empty());
    // A repeated completion is stale and queues nothing more; submitting the same follow-up
    // by hand is the same job.
    assert_eq!(complete(a2, child.clone(), 5).await.unwrap(), Fenced::Lost);
    let (same, created) = store.submit(child).await.unwrap();
    assert!(!created);
    assert_eq!(same.id, queued.id);
    // A follow-up that exists already (submitted before the completion) is not queued twice.
    let (parent2, b1) = claimed_chain_turn(store, "chain-2").await;
    let child2 = chain_follow_up(&parent2, &b1.job.id, 9);
    let (first, created) = store.submit(child2.clone()).await.unwrap();
    assert!(created);
    let n = count().await;
    let applied = store
        .complete_and_follow_up(
            &b1.job.id,
            &b1.attempt_id,
            (vec![9], &digest(9)),
            &serde_json::json!({}),
            Vec::new(),
            Some(child2.clone()),
        )
        .await
        .unwrap();
    assert_eq!(applied, Fenced::Applied);
    assert_eq!(count().await, n);
    assert_eq!(other.events(&first.id).await.unwrap().len(), 1);
    let later = other.follow_ups_of(&b1.job.id).await.unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].id, first.id);
}

/// A completed job holding the candidate `digest(n)`.
async fn completed_with(store: &JobStore, nonce: &str, n: u8) -> JobId {
    let id = submit(store, nonce, 1).await;
    let claimed = claim_one(store, "h1").await;
    let applied = store
        .complete(
            &id,
            &claimed.attempt_id,
            vec![n],
            &digest(n),
            &serde_json::json!({}),
        )
        .await
        .unwrap();
    assert_eq!(applied, Fenced::Applied);
    id
}

fn decision_row(n: u8, decision: &str, actor: &str, forced: bool) -> jobs::DecisionRow {
    let record = serde_json::to_vec(&serde_json::json!({"decision": decision, "n": n})).unwrap();
    jobs::DecisionRow::new(&digest(n), decision, actor, forced, 42, record).unwrap()
}

/// Records `decision` of `digest(n)` by `actor` (not forced, no follow-up) on job `id`.
async fn decide(
    store: &JobStore,
    id: &JobId,
    n: u8,
    decision: &str,
    actor: &str,
) -> jobs::Result<i64> {
    store
        .record_decision(id, decision_row(n, decision, actor, false), None)
        .await
}

/// A completed job holding the candidate `digest(n)`, accepted by alice.
async fn accepted_with(store: &JobStore, nonce: &str, n: u8) -> JobId {
    let id = completed_with(store, nonce, n).await;
    decide(store, &id, n, "accept", "alice").await.unwrap();
    id
}

/// Takes the publication claim of job `id`'s `digest(n)` for host `holder` and `branch`.
async fn claim_as(
    store: &JobStore,
    id: &JobId,
    n: u8,
    holder: &str,
    branch: &str,
    lease: Duration,
) -> jobs::Result<jobs::PublicationClaim> {
    store
        .claim_publication(id, &digest(n), &host(holder), branch, lease)
        .await
}

/// Records `{"branch":"<branch>"}` as the publication of `claim`.
async fn record_branch(
    store: &JobStore,
    claim: &jobs::PublicationClaim,
    branch: &str,
) -> jobs::Result<()> {
    let record = format!(r#"{{"branch":"{branch}"}}"#).into_bytes();
    store.record_publication(claim, "carol", record).await
}

/// Raw SQL on the store's database, as a second client would send it.
async fn raw_sql(location: &Location, sql: &str) -> Result<(), String> {
    match location {
        Location::Sqlite(dir) => {
            let conn = rusqlite::Connection::open(dir.join(jobs::DEFAULT_SQLITE_FILE)).unwrap();
            conn.execute_batch(sql).map_err(|e| e.to_string())
        }
        Location::Postgres(url) => {
            let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client.batch_execute(sql).await.map_err(|e| {
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |d| d.message().to_owned())
            })
        }
    }
}

/// Decisions append to a completed job's history in order, only for the job's own candidate
/// digest, are read back byte for byte from another handle, and can be neither changed nor
/// removed (the database refuses `UPDATE` and `DELETE`).
pub async fn review_decisions_are_append_only_and_bound_to_the_candidate(
    store: &JobStore,
    location: &Location,
) {
    let id = completed_with(store, "review", 5).await;
    let other = completed_with(store, "review-other", 6).await;
    // A decision naming another candidate (digest 6 sent for the job holding 5): refused.
    let e = decide(store, &id, 6, "accept", "alice").await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_STATE");
    // A job that is not completed takes no decision.
    let queued = submit(store, "review-queued", 1).await;
    let e = decide(store, &queued, 5, "reject", "alice")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_STATE");
    let missing = random_job_id().unwrap();
    let e = decide(store, &missing, 5, "reject", "alice")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_NOT_FOUND");

    let rows = [
        decision_row(5, "accept", "alice", true),
        decision_row(5, "reject", "bob", false),
        decision_row(5, "retry", "operator", false),
    ];
    for (i, row) in rows.iter().enumerate() {
        let follow = (row.decision() == "retry").then_some(&other);
        let seq = store
            .record_decision(&id, row.clone(), follow)
            .await
            .unwrap();
        assert_eq!(seq, i64::try_from(i).unwrap() + 1);
    }
    let again = location.open().await;
    let history = again.decisions(&id).await.unwrap();
    assert_eq!(
        history.iter().map(|d| d.row.clone()).collect::<Vec<_>>(),
        rows.to_vec()
    );
    assert_eq!(
        history.last().unwrap().follow_up_job_id.as_ref(),
        Some(&other)
    );
    assert!(history.first().unwrap().row.forced());
    assert!(store.decisions(&other).await.unwrap().is_empty());

    // Concurrent decisions on one job get distinct, dense sequence numbers.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = location.open().await;
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            decide(&store, &id, 5, "retry", "carol").await.unwrap()
        }));
    }
    let mut seqs = BTreeSet::new();
    for t in tasks {
        seqs.insert(t.await.unwrap());
    }
    assert_eq!(seqs, (4..=11).collect());

    for sql in [
        "UPDATE review_decisions SET decision = 'accept'",
        "DELETE FROM review_decisions",
    ] {
        let refused = raw_sql(location, sql).await.unwrap_err();
        assert!(refused.contains("append-only"), "{sql}: {refused}");
    }
    assert_eq!(store.decisions(&id).await.unwrap().len(), 11);
}

/// A publication is recorded once per job, only with a claim on the job's candidate digest
/// taken while its last decision accepts it.
pub async fn a_publication_is_recorded_once(store: &JobStore, location: &Location) {
    let id = completed_with(store, "publish", 9).await;
    assert_eq!(store.publication(&id).await.unwrap(), None);
    let h = host("h1");
    // No accept yet: no claim.
    let e = store
        .claim_publication(&id, &digest(9), &h, "b", LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_NOT_ACCEPTED");
    decide(store, &id, 9, "accept", "alice").await.unwrap();
    // Another digest than the job's, a missing job, malformed input: refused.
    let e = store
        .claim_publication(&id, &digest(8), &h, "b", LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_STATE");
    let e = store
        .claim_publication(&random_job_id().unwrap(), &digest(9), &h, "b", LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_NOT_FOUND");
    for (branch, lease) in [
        ("", LONG),
        ("a\nb", LONG),
        ("b", Duration::ZERO),
        ("b", Duration::from_secs(2 * 24 * 3600)),
    ] {
        let e = store
            .claim_publication(&id, &digest(9), &h, branch, lease)
            .await
            .unwrap_err();
        assert_eq!(
            e.code(),
            "PATCH_CANDIDATE_JOBS_INPUT",
            "{branch:?} {lease:?}"
        );
    }
    let claim = store
        .claim_publication(&id, &digest(9), &h, "b", LONG)
        .await
        .unwrap();
    assert_eq!(
        (claim.job_id(), claim.branch(), claim.holder()),
        (&id, "b", &h)
    );
    let e = store
        .record_publication(&claim, "carol", b"[]".to_vec())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
    store.renew_publication_claim(&claim, LONG).await.unwrap();
    record_branch(store, &claim, "b").await.unwrap();
    // Recorded once: the claim is spent, a new claim and a second record are refused.
    let e = record_branch(store, &claim, "c").await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_PUBLISHED");
    let other = location.open().await;
    let e = claim_as(&other, &id, 9, "h2", "c", LONG).await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_PUBLISHED");
    assert!(!store.release_publication_claim(&claim).await.unwrap());
    assert_eq!(
        other.publication(&id).await.unwrap().unwrap(),
        br#"{"branch":"b"}"#.to_vec()
    );
}

/// A `reject` recorded while a publication runs (between its claim and the record of the push's
/// outcome) wins: the publication is not recorded over the rejected state, the claim's renewal
/// (the check right before the push) is refused, and an accept recorded again later lets a new
/// claim record.
pub async fn a_reject_during_a_publication_stops_its_record(store: &JobStore, location: &Location) {
    let id = accepted_with(store, "reject-during-publish", 11).await;
    let claim = claim_as(store, &id, 11, "h1", "b", LONG).await.unwrap();
    // The publish runs on this handle; a reviewer on another host rejects meanwhile.
    let reviewer = location.open().await;
    decide(&reviewer, &id, 11, "reject", "bob").await.unwrap();
    let e = store
        .renew_publication_claim(&claim, LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_NOT_ACCEPTED");
    let e = record_branch(store, &claim, "b").await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_NOT_ACCEPTED");
    assert_eq!(store.publication(&id).await.unwrap(), None);
    // A retry after the accept stops it the same way.
    decide(&reviewer, &id, 11, "accept", "alice").await.unwrap();
    decide(&reviewer, &id, 11, "retry", "carol").await.unwrap();
    let e = record_branch(store, &claim, "b").await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_NOT_ACCEPTED");
    assert!(store.release_publication_claim(&claim).await.unwrap());
    decide(&reviewer, &id, 11, "accept", "alice").await.unwrap();
    let again = claim_as(&reviewer, &id, 11, "h2", "b2", LONG)
        .await
        .unwrap();
    record_branch(&reviewer, &again, "b2").await.unwrap();
    assert_eq!(
        store.publication(&id).await.unwrap().unwrap(),
        br#"{"branch":"b2"}"#.to_vec()
    );
}

/// Once a publication is recorded, the candidate's history is closed: no decision of any kind
/// is appended after it, from any handle, nor by raw SQL (a trigger refuses it).
pub async fn no_decision_after_a_publication(store: &JobStore, location: &Location) {
    let id = accepted_with(store, "decide-after-publish", 12).await;
    let claim = claim_as(store, &id, 12, "h1", "b", LONG).await.unwrap();
    record_branch(store, &claim, "b").await.unwrap();
    let other = location.open().await;
    for decision in ["reject", "retry", "accept"] {
        let e = decide(&other, &id, 12, decision, "bob").await.unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_PUBLISHED", "{decision}");
    }
    let refused = raw_sql(
        location,
        &format!(
            "INSERT INTO review_decisions (job_id, seq, candidate_digest, decision, actor, forced,
                 at_ms, record)
             VALUES ('{id}', 2, '{}', 'reject', 'bob', FALSE, 1, '{{}}')",
            digest(12)
        ),
    )
    .await
    .unwrap_err();
    assert!(refused.contains("published"), "{refused}");
    assert_eq!(store.decisions(&id).await.unwrap().len(), 1);
}

/// Two hosts (two stores on one database) race to publish one job: one claim is live at a
/// time (the other is told which host and branch hold it), and exactly one publication is
/// recorded, also when claims run out and are taken over mid-race (a lease shorter than the
/// race). A claim whose lease ran out and was taken over cannot record.
pub async fn two_hosts_racing_a_publication_record_exactly_one(
    store: &JobStore,
    location: &Location,
) {
    // A live claim fences the other host; after its lease runs out the other takes it over, and
    // the first holder's record is refused.
    let id = accepted_with(store, "race-takeover", 13).await;
    let host_b = location.open().await;
    let first = claim_as(store, &id, 13, "a", "from-a", Duration::from_millis(300))
        .await
        .unwrap();
    match claim_as(&host_b, &id, 13, "b", "from-b", LONG)
        .await
        .unwrap_err()
    {
        JobsError::Publishing { holder, branch, .. } => {
            assert_eq!((holder.as_str(), branch.as_str()), ("a", "from-a"));
        }
        other => panic!("{other}"),
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let e = store
        .renew_publication_claim(&first, LONG)
        .await
        .map(|()| "renewed");
    // Renewing a lapsed claim nobody took over is allowed (it is still the job's claim).
    assert_eq!(e.unwrap(), "renewed");
    tokio::time::sleep(Duration::from_millis(1)).await;
    let e = claim_as(&host_b, &id, 13, "b", "from-b", LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_PUBLISHING");
    store
        .renew_publication_claim(&first, Duration::from_millis(1))
        .await
        .unwrap();
    expire().await;
    let second = claim_as(&host_b, &id, 13, "b", "from-b", LONG)
        .await
        .unwrap();
    let e = record_branch(store, &first, "from-a").await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_CLAIM_LOST");
    let e = store
        .renew_publication_claim(&first, LONG)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_CLAIM_LOST");
    assert!(!store.release_publication_claim(&first).await.unwrap());
    record_branch(&host_b, &second, "from-b").await.unwrap();
    assert_eq!(
        store.publication(&id).await.unwrap().unwrap(),
        br#"{"branch":"from-b"}"#.to_vec()
    );

    // The race itself: per job, four hosts claim and record at once, with leases long (one
    // claim wins, the rest are fenced) and short (claims lapse and are taken over mid-race).
    let mut hosts = Vec::new();
    for _ in 0..4 {
        hosts.push(location.open().await);
    }
    for (round, lease) in [
        (0_u8, LONG),
        (1, LONG),
        (2, Duration::from_millis(1)),
        (3, Duration::from_millis(1)),
    ] {
        let n = 20 + round;
        let id = accepted_with(store, &format!("race-{round}"), n).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(hosts.len()));
        let mut tasks = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            let (h, id, barrier) = (h.clone(), id.clone(), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let branch = format!("b{i}");
                let claim = h
                    .claim_publication(&id, &digest(n), &host(&format!("h{i}")), &branch, lease)
                    .await?;
                // The push takes a moment.
                tokio::time::sleep(Duration::from_millis(5)).await;
                let record = serde_json::to_vec(&serde_json::json!({"branch": branch})).unwrap();
                h.record_publication(&claim, "carol", record)
                    .await
                    .map(|()| branch)
            }));
        }
        let mut recorded = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(branch) => recorded.push(branch),
                Err(e) => assert!(
                    matches!(
                        e.code(),
                        "PATCH_CANDIDATE_JOBS_PUBLISHING"
                            | "PATCH_CANDIDATE_JOBS_PUBLISHED"
                            | "PATCH_CANDIDATE_JOBS_CLAIM_LOST"
                    ),
                    "round {round}: {e}"
                ),
            }
        }
        assert_eq!(recorded.len(), 1, "round {round}: {recorded:?}");
        let stored: serde_json::Value =
            serde_json::from_slice(&store.publication(&id).await.unwrap().unwrap()).unwrap();
        assert_eq!(stored["branch"], recorded[0].as_str(), "round {round}");
    }
}

/// Named tokens: stored by hash with their roles, one live principal per hash, revocable,
/// names never reused.
pub async fn named_tokens_are_hashed_and_revocable(store: &JobStore, location: &Location) {
    let name = jobs::TokenName::parse("ci-bot").unwrap();
    let hash = jobs::TokenHash::parse(&"ab".repeat(32)).unwrap();
    let submit = Roles::from_list(&[Role::Submit]).unwrap();
    store
        .create_token(&name, &hash, submit, "operator")
        .await
        .unwrap();
    let e = store
        .create_token(
            &name,
            &jobs::TokenHash::parse(&"cd".repeat(32)).unwrap(),
            submit,
            "operator",
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_CONFLICT");
    let again = location.open().await;
    assert_eq!(
        again.token_access(&hash).await.unwrap(),
        Some(jobs::TokenAccess {
            name: "ci-bot".to_owned(),
            roles: submit
        })
    );
    let unknown = jobs::TokenHash::parse(&"ef".repeat(32)).unwrap();
    assert_eq!(again.token_access(&unknown).await.unwrap(), None);
    let listed = store.tokens().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "ci-bot");
    assert_eq!(listed[0].revoked_at_ms, None);
    assert_eq!((listed[0].roles, listed[0].roles_migrated), (submit, false));
    assert!(store.revoke_token(&name, "operator").await.unwrap());
    assert!(!store.revoke_token(&name, "operator").await.unwrap());
    assert_eq!(again.token_access(&hash).await.unwrap(), None);
    assert!(store.tokens().await.unwrap()[0].revoked_at_ms.is_some());
    // A revoked token's roles cannot be set.
    assert_eq!(
        store
            .set_token_roles(&name, Roles::ALL, "operator")
            .await
            .unwrap(),
        None
    );
    // A revoked name is not reused.
    let e = store
        .create_token(&name, &unknown, submit, "operator")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_CONFLICT");
    // Create and the first revoke were audited; the refused acts were not.
    let acts: Vec<_> = store
        .audit(0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.principal, e.act, e.subject, e.detail))
        .collect();
    assert_eq!(
        acts,
        vec![
            (
                "operator".to_owned(),
                AuditAct::TokenCreated,
                "ci-bot".to_owned(),
                "roles submit".to_owned()
            ),
            (
                "operator".to_owned(),
                AuditAct::TokenRevoked,
                "ci-bot".to_owned(),
                String::new()
            ),
        ]
    );
}

/// A token's roles: created with any set (none included), changed by `set_token_roles` (seen at
/// once by another handle's lookup), each change audited with the new and the previous roles;
/// a malformed principal writes nothing.
pub async fn token_roles_change_and_are_audited(store: &JobStore, location: &Location) {
    let name = jobs::TokenName::parse("rev").unwrap();
    let hash = jobs::TokenHash::parse(&"12".repeat(32)).unwrap();
    store
        .create_token(&name, &hash, Roles::NONE, "operator")
        .await
        .unwrap();
    let other = location.open().await;
    assert_eq!(
        other.token_access(&hash).await.unwrap().unwrap().roles,
        Roles::NONE
    );
    let review_publish = Roles::from_list(&[Role::Review, Role::Publish]).unwrap();
    let before = store
        .set_token_roles(&name, review_publish, "admin-1")
        .await
        .unwrap();
    assert_eq!(before, Some(Roles::NONE));
    assert_eq!(
        other.token_access(&hash).await.unwrap().unwrap().roles,
        review_publish
    );
    let e = store
        .set_token_roles(&name, Roles::ALL, "not a principal")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
    let e = store
        .create_token(
            &jobs::TokenName::parse("x").unwrap(),
            &jobs::TokenHash::parse(&"34".repeat(32)).unwrap(),
            Roles::ALL,
            "",
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_INPUT");
    assert_eq!(store.tokens().await.unwrap().len(), 1);
    let trail = other.audit(0, 100).await.unwrap();
    let details: Vec<(&str, AuditAct, &str)> = trail
        .iter()
        .map(|e| (e.principal.as_str(), e.act, e.detail.as_str()))
        .collect();
    assert_eq!(
        details,
        vec![
            ("operator", AuditAct::TokenCreated, "roles none"),
            (
                "admin-1",
                AuditAct::TokenRoles,
                "roles review,publish (was none)"
            ),
        ]
    );
    assert!(trail.windows(2).all(|w| w[0].seq < w[1].seq));
}

/// Every decision and the publication are audited in their own transaction, by their
/// principal, with the job as subject; refused ones are not. The trail pages by `seq`, and
/// `audit_of` returns the latest acts of one subject, oldest first.
pub async fn decisions_and_publications_are_audited(store: &JobStore, location: &Location) {
    let id = completed_with(store, "audited", 7).await;
    decide(store, &id, 7, "reject", "alice").await.unwrap();
    store
        .record_decision(&id, decision_row(7, "accept", "bob", true), None)
        .await
        .unwrap();
    // Refused: another digest. Nothing audited.
    assert!(decide(store, &id, 8, "accept", "bob").await.is_err());
    let claim = claim_as(store, &id, 7, "h1", "feature", LONG)
        .await
        .unwrap();
    record_branch(store, &claim, "feature").await.unwrap();
    assert!(decide(store, &id, 7, "reject", "alice").await.is_err());
    let other = location.open().await;
    let acts: Vec<(String, AuditAct, String)> = other
        .audit_of(id.as_str(), 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.principal, e.act, e.detail))
        .collect();
    assert_eq!(
        acts,
        vec![
            (
                "alice".to_owned(),
                AuditAct::Reject,
                format!("{} seq 1", digest(7))
            ),
            (
                "bob".to_owned(),
                AuditAct::ForcedAccept,
                format!("{} seq 2", digest(7))
            ),
            (
                "carol".to_owned(),
                AuditAct::Published,
                format!("{} branch feature", digest(7))
            ),
        ]
    );
    // The latest two, oldest first; paging through the whole trail by seq.
    let latest = other.audit_of(id.as_str(), 2).await.unwrap();
    assert_eq!(
        latest.iter().map(|e| e.act).collect::<Vec<_>>(),
        vec![AuditAct::ForcedAccept, AuditAct::Published]
    );
    let first = other.audit(0, 2).await.unwrap();
    let rest = other.audit(first[1].seq, 1000).await.unwrap();
    assert_eq!(first.len() + rest.len(), 3);
    assert_eq!(rest[0].act, AuditAct::Published);
    assert!(other.audit_of("job_none", 10).await.unwrap().is_empty());
}

/// The submitter is kept with the job (checked like a principal), inherited by a copy of the
/// spec, and not part of the job's identity.
pub async fn the_submitter_is_kept_and_not_part_of_the_key(store: &JobStore, _: &Location) {
    let mut spec = JobSpec::noop("by-alice", 1);
    spec.submitted_by = Some("alice".to_owned());
    let (job, created) = store.submit(spec.clone()).await.unwrap();
    assert!(created);
    assert_eq!(job.spec.submitted_by.as_deref(), Some("alice"));
    let mut by_bob = spec.clone();
    by_bob.submitted_by = Some("bob".to_owned());
    assert_eq!(by_bob.idempotency_key(), spec.idempotency_key());
    let (same, created) = store.submit(by_bob).await.unwrap();
    assert!(!created);
    assert_eq!(same.id, job.id);
    assert_eq!(same.spec.submitted_by.as_deref(), Some("alice"));
    let mut bad = JobSpec::noop("bad-submitter", 1);
    bad.submitted_by = Some("a b".to_owned());
    let e = store.submit(bad).await.unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_SPEC");
    let read = store.get(&job.id).await.unwrap().unwrap();
    assert_eq!(read.spec.submitted_by.as_deref(), Some("alice"));
}

/// A version-6 PostgreSQL database (a live and a revoked named token, built with the
/// schema's own statements for versions 1 to 6) upgrades to the current version keeping both:
/// each gets every role and the `roles_migrated` mark, the live one still authenticates with
/// every role, setting its roles ends the mark and is audited, and the audit trail refuses
/// `UPDATE` and `DELETE` in the database itself. The PostgreSQL twin of the SQLite unit test
/// `a_version_6_database_file_upgrades_its_tokens_to_every_role`.
pub async fn a_version_6_postgres_database_upgrades_its_tokens_to_every_role(url: &str) {
    let (live, gone) = ("ab".repeat(32), "cd".repeat(32));
    jobs::testkit::postgres_schema_at_version(
        url,
        6,
        &format!(
            "INSERT INTO api_tokens (name, token_sha256, created_at, revoked_at)
             VALUES ('ci', '{live}', 5, NULL), ('old', '{gone}', 6, 9)"
        ),
    )
    .await
    .unwrap();
    let location = Location::Postgres(url.to_owned());
    let store = location.open().await;
    assert_eq!(store.schema_version().await.unwrap(), jobs::SCHEMA_VERSION);
    let tokens = store.tokens().await.unwrap();
    let listed: Vec<(&str, Option<i64>, Roles, bool)> = tokens
        .iter()
        .map(|t| (t.name.as_str(), t.revoked_at_ms, t.roles, t.roles_migrated))
        .collect();
    assert_eq!(
        listed,
        vec![
            ("ci", None, Roles::ALL, true),
            ("old", Some(9), Roles::ALL, true),
        ]
    );
    let access = store
        .token_access(&jobs::TokenHash::parse(&live).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((access.name.as_str(), access.roles), ("ci", Roles::ALL));
    assert_eq!(
        store
            .token_access(&jobs::TokenHash::parse(&gone).unwrap())
            .await
            .unwrap(),
        None
    );
    // Opening again (another host, or a restart) migrates nothing twice.
    let other = location.open().await;
    assert_eq!(other.tokens().await.unwrap(), tokens);

    let name = jobs::TokenName::parse("ci").unwrap();
    let review = Roles::from_list(&[Role::Review]).unwrap();
    assert_eq!(
        store
            .set_token_roles(&name, review, "operator")
            .await
            .unwrap(),
        Some(Roles::ALL)
    );
    let tokens = other.tokens().await.unwrap();
    assert_eq!(
        tokens
            .iter()
            .map(|t| (t.name.as_str(), t.roles, t.roles_migrated))
            .collect::<Vec<_>>(),
        vec![("ci", review, false), ("old", Roles::ALL, true)]
    );
    let trail = other.audit(0, 10).await.unwrap();
    assert_eq!(
        trail
            .iter()
            .map(|e| (
                e.act,
                e.principal.as_str(),
                e.subject.as_str(),
                e.detail.as_str()
            ))
            .collect::<Vec<_>>(),
        vec![(
            AuditAct::TokenRoles,
            "operator",
            "ci",
            "roles review (was submit,review,publish,admin)"
        )]
    );
    for sql in ["UPDATE audit SET principal = 'x'", "DELETE FROM audit"] {
        let refused = raw_sql(&location, sql).await.unwrap_err();
        assert!(refused.contains("append-only"), "{sql}: {refused}");
    }
}

/// A live turn's usage document with the gateway's counts.
fn live_usage(requests: u64, input: u64, output: u64) -> serde_json::Value {
    serde_json::json!({
        "outcome": "ok",
        "live": {
            "requests": requests, "forwarded": requests, "refused": 0,
            "request_bytes": 10, "response_bytes": 20,
            "input_tokens": input, "output_tokens": output, "total_tokens": input + output,
            "usage_missing": 0, "drained": false, "scrubbed": 0, "model": "m"
        }
    })
}

/// A no-op job of `principal` on `repository`.
fn ledger_spec(nonce: &str, principal: Option<&str>, repository: &str) -> JobSpec {
    let mut spec = JobSpec::noop(nonce, 5);
    spec.submitted_by = principal.map(str::to_owned);
    spec.repository = repository.to_owned();
    spec
}

async fn submit_spec(store: &JobStore, spec: JobSpec) -> JobId {
    let (job, created) = store.submit(spec).await.unwrap();
    assert!(created);
    job.id
}

/// The spend the usage documents of `jobs` add up to, read back through `JobStore::usage`.
async fn documented_spend(store: &JobStore, jobs: &[&JobId]) -> jobs::Spend {
    let mut spend = jobs::Spend::default();
    for id in jobs {
        for (_, text) in store.usage(id).await.unwrap() {
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
            let n = |f: &str| doc["live"][f].as_u64().unwrap_or(0);
            spend = spend.saturating_add(jobs::Spend {
                attempts: 1,
                requests: n("requests"),
                input_tokens: n("input_tokens"),
                output_tokens: n("output_tokens"),
                total_tokens: n("total_tokens"),
            });
        }
    }
    spend
}

fn spend(attempts: u64, requests: u64, input: u64, output: u64) -> jobs::Spend {
    jobs::Spend {
        attempts,
        requests,
        input_tokens: input,
        output_tokens: output,
        total_tokens: input + output,
    }
}

/// Every fenced outcome write (complete, fail, release, cancel) and `record_usage` fill the
/// ledger from the document they write and the job's own principal and repository; a stale
/// attempt's writes add nothing; recording an attempt again replaces its counts; the day's sums
/// per principal and per repository equal the documents' sums, from any handle.
pub async fn the_ledger_counts_what_the_outcome_writes_record(
    store: &JobStore,
    location: &Location,
) {
    let today = jobs::UtcDay::today();
    let a = submit_spec(store, ledger_spec("led-a", Some("alice"), "repo-one")).await;
    // Fails and is retried, then released on drain, then completes.
    let c1 = claim_one(store, "h").await;
    assert_eq!(c1.job.id, a);
    let fenced = store
        .fail(
            &a,
            &c1.attempt_id,
            "X",
            "m",
            Retry::After(Duration::ZERO),
            Some(&live_usage(2, 100, 10)),
        )
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);
    let c2 = claim_one(store, "h").await;
    let fenced = store
        .release(&a, &c2.attempt_id, Some(&live_usage(1, 50, 5)))
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);
    let c3 = claim_one(store, "h").await;
    // Recorded out of band first (a crash before the outcome), then by the completion: the
    // completion's counts replace the first ones.
    store
        .record_usage(&a, &c3.attempt_id, &live_usage(9, 900, 90))
        .await
        .unwrap();
    let fenced = store
        .complete(
            &a,
            &c3.attempt_id,
            vec![1],
            &digest(1),
            &live_usage(3, 300, 30),
        )
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);

    // Bob on the same repository: an offline attempt (no counts), then a cancelled one.
    let b = submit_spec(store, ledger_spec("led-b", Some("bob"), "repo-one")).await;
    let d1 = claim_one(store, "h").await;
    assert_eq!(d1.job.id, b);
    let offline = serde_json::json!({"outcome": "ok", "wall_ms": 5});
    let fenced = store
        .fail(
            &b,
            &d1.attempt_id,
            "X",
            "m",
            Retry::After(Duration::ZERO),
            Some(&offline),
        )
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);
    let d2 = claim_one(store, "h").await;
    store.cancel(&b).await.unwrap();
    let fenced = store
        .finish_cancelled(&b, &d2.attempt_id, Some(&live_usage(4, 40, 4)))
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);
    // A stale attempt's writes (lease lost to the rescuer) record nothing.
    let e = submit_spec(store, ledger_spec("led-e", Some("bob"), "repo-two")).await;
    let e1 = claim_one(store, "h").await;
    assert_eq!(e1.job.id, e);
    assert!(matches!(
        store
            .heartbeat(&e, &e1.attempt_id, Duration::ZERO)
            .await
            .unwrap(),
        Heartbeat::Renewed { .. }
    ));
    expire().await;
    assert_eq!(store.rescue_expired().await.unwrap(), 1);
    let lost = store
        .complete(
            &e,
            &e1.attempt_id,
            vec![1],
            &digest(2),
            &live_usage(7, 7, 7),
        )
        .await
        .unwrap();
    assert_eq!(lost, Fenced::Lost);
    // A malformed `live` object counts zero; the attempt's row still lands.
    let e2 = claim_one(store, "h").await;
    let malformed = serde_json::json!({"live": {"requests": -3, "input_tokens": "9",
        "output_tokens": 1.5, "total_tokens": null}});
    let fenced = store
        .fail(&e, &e2.attempt_id, "X", "m", Retry::Never, Some(&malformed))
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);

    let alice = spend(3, 2 + 1 + 3, 100 + 50 + 300, 10 + 5 + 30);
    assert_eq!(documented_spend(store, &[&a]).await, alice);
    let bob = spend(3, 4, 40, 4);
    assert_eq!(documented_spend(store, &[&b, &e]).await, bob);
    let repo_one = documented_spend(store, &[&a, &b]).await;
    assert_eq!(repo_one, alice.saturating_add(spend(2, 4, 40, 4)));

    // Any handle on the database reads the one ledger.
    let other = location.open().await;
    for s in [store, &other] {
        let got = s.spend_on(today, "alice", "repo-one").await.unwrap();
        assert_eq!(
            got,
            jobs::SpendToday {
                principal: alice,
                repository: repo_one
            }
        );
        let got = s.spend_on(today, "bob", "repo-two").await.unwrap();
        assert_eq!(got.principal, bob);
        assert_eq!(got.repository, spend(1, 0, 0, 0));
        // Nobody, another day: zero.
        let none = s.spend_on(today, "carol", "repo-three").await.unwrap();
        assert_eq!(none, jobs::SpendToday::default());
        let yesterday = today.checked_sub_days(1).unwrap();
        let none = s.spend_on(yesterday, "alice", "repo-one").await.unwrap();
        assert_eq!(none, jobs::SpendToday::default());
    }
    // Recording again (the other handle, the same attempt) replaces: never double counted.
    other
        .record_usage(&a, &c3.attempt_id, &live_usage(3, 300, 30))
        .await
        .unwrap();
    other
        .record_usage(&b, &d1.attempt_id, &live_usage(1, 1, 1))
        .await
        .unwrap();
    let got = store.spend_on(today, "bob", "repo-one").await.unwrap();
    assert_eq!(got.principal, bob.saturating_add(spend(0, 1, 1, 1)));
    assert_eq!(got.repository, repo_one.saturating_add(spend(0, 1, 1, 1)));
    assert_eq!(
        store.spend_on(today, "alice", "x").await.unwrap().principal,
        alice
    );
    // The principal and repository are the job's own: a job without a principal is `""`.
    let anon = submit_spec(store, ledger_spec("led-anon", None, "repo-one")).await;
    let f1 = claim_one(store, "h").await;
    assert_eq!(f1.job.id, anon);
    store
        .record_usage(&anon, &f1.attempt_id, &live_usage(1, 2, 3))
        .await
        .unwrap();
    assert_eq!(
        store.spend_on(today, "", "none").await.unwrap().principal,
        spend(1, 1, 2, 3)
    );
}

/// A claim that reads spend returns, for each claimed job, exactly what `spend_on` reads for its
/// principal and repository today (zeros for nobody, `""` for a job without a principal); a plain
/// claim reads none.
pub async fn a_claim_reading_spend_returns_the_days_totals(store: &JobStore, _: &Location) {
    let today = jobs::UtcDay::today();
    let a = submit_spec(store, ledger_spec("crs-a", Some("alice"), "repo-one")).await;
    let c = claim_one(store, "h").await;
    assert_eq!(c.job.id, a);
    assert_eq!(c.spend_today, None);
    let fenced = store
        .complete(
            &a,
            &c.attempt_id,
            vec![1],
            &digest(4),
            &live_usage(2, 20, 5),
        )
        .await
        .unwrap();
    assert_eq!(fenced, Fenced::Applied);
    let b = submit_spec(store, ledger_spec("crs-b", Some("bob"), "repo-one")).await;
    let anon = submit_spec(store, ledger_spec("crs-anon", None, "repo-two")).await;
    let claimed = store
        .claim_reading_spend(&host("h"), 5, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.job.id.clone()).collect::<Vec<_>>(),
        vec![b.clone(), anon.clone()]
    );
    let bob = claimed[0].spend_today.unwrap();
    assert_eq!(bob, store.spend_on(today, "bob", "repo-one").await.unwrap());
    assert_eq!(bob.principal, jobs::Spend::default());
    assert_eq!(bob.repository, spend(1, 2, 20, 5));
    let nobody = claimed[1].spend_today.unwrap();
    assert_eq!(nobody, jobs::SpendToday::default());
    // The anonymous job's usage lands under `""`; the next claim of that principal sees it.
    store
        .record_usage(&anon, &claimed[1].attempt_id, &live_usage(1, 1, 1))
        .await
        .unwrap();
    let next = submit_spec(store, ledger_spec("crs-next", None, "repo-one")).await;
    let again = store
        .claim_reading_spend(&host("h"), 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job.id, next);
    let seen = again[0].spend_today.unwrap();
    assert_eq!(seen.principal, spend(1, 1, 1, 1));
    assert_eq!(seen.repository, spend(1, 2, 20, 5));
    assert_eq!(seen, store.spend_on(today, "", "repo-one").await.unwrap());
    // Nothing due: nothing claimed, nothing read.
    let empty = store
        .claim_reading_spend(&host("h"), 3, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(empty.is_empty());
}

fn delivery(id: &str, subject: Option<char>) -> jobs::NewForgeDelivery {
    jobs::NewForgeDelivery {
        forge: "github".into(),
        delivery: id.into(),
        state: if subject.is_some() {
            jobs::DeliveryState::Queued
        } else {
            jobs::DeliveryState::Ignored
        },
        reason: if subject.is_some() { "label" } else { "event" }.into(),
        subject: subject.map(|c| c.to_string().repeat(64)),
        trigger: subject.map(|c| serde_json::json!({"subject": c.to_string()})),
    }
}

/// A forge delivery is recorded once by its id and once by its subject (a replay under a new
/// id changes nothing); queued ones are taken by one host at a time under a lease, their base
/// commit pinned once, and finished only by their holder.
pub async fn forge_deliveries_are_recorded_once_and_worked_off_under_leases(
    store: &JobStore,
    location: &Location,
) {
    let (first, created) = store
        .record_forge_delivery(delivery("d-1", Some('a')))
        .await
        .unwrap();
    assert!(created);
    assert_eq!(first.state, jobs::DeliveryState::Queued);
    assert_eq!(first.attempts, 0);
    // The same id again, the same subject under a new id: the first row, unchanged.
    let (again, created) = store
        .record_forge_delivery(delivery("d-1", Some('b')))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(again, first);
    let (replay, created) = store
        .record_forge_delivery(delivery("d-2", Some('a')))
        .await
        .unwrap();
    assert!(!created);
    assert_eq!(replay, first);
    assert_eq!(store.forge_delivery("github", "d-2").await.unwrap(), None);
    // Ignored deliveries are recorded without a subject, any number of them.
    for id in ["i-1", "i-2"] {
        let (row, created) = store
            .record_forge_delivery(delivery(id, None))
            .await
            .unwrap();
        assert!(created);
        assert_eq!(row.state, jobs::DeliveryState::Ignored);
    }
    let (_, created) = store
        .record_forge_delivery(delivery("d-3", Some('c')))
        .await
        .unwrap();
    assert!(created);
    // Malformed fields are refused before the database.
    let mut bad = delivery("x y", Some('d'));
    assert!(store.record_forge_delivery(bad.clone()).await.is_err());
    bad.delivery = "d-4".into();
    bad.subject = Some("z".repeat(64));
    assert!(store.record_forge_delivery(bad).await.is_err());

    // Oldest first, one holder at a time, across handles.
    let other = location.open().await;
    let lease = Duration::from_secs(60);
    let a = store
        .claim_forge_delivery(&host("a"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.delivery, "d-1");
    assert_eq!(a.attempts, 1);
    let b = other
        .claim_forge_delivery(&host("b"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(b.delivery, "d-3");
    assert_eq!(
        other.claim_forge_delivery(&host("b"), lease).await.unwrap(),
        None
    );
    // The base is pinned once; only the holder pins.
    let c1 = "1".repeat(40);
    let c2 = "2".repeat(40);
    assert_eq!(
        store
            .pin_forge_base("github", "d-1", &host("a"), &c1)
            .await
            .unwrap(),
        Some(c1.clone())
    );
    assert_eq!(
        store
            .pin_forge_base("github", "d-1", &host("a"), &c2)
            .await
            .unwrap(),
        Some(c1.clone())
    );
    assert_eq!(
        store
            .pin_forge_base("github", "d-1", &host("b"), &c2)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .pin_forge_base("github", "d-1", &host("a"), "HEAD")
            .await
            .is_err()
    );
    // Only the holder finishes; a finished delivery is not taken again.
    let job = submit(store, "forge-job", 1).await;
    let done = jobs::DeliveryOutcome::Submitted(job.clone());
    assert_eq!(
        other
            .finish_forge_delivery("github", "d-1", &host("b"), done.clone())
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .finish_forge_delivery("github", "d-1", &host("a"), done.clone())
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        store
            .finish_forge_delivery("github", "d-1", &host("a"), done)
            .await
            .unwrap(),
        Fenced::Lost
    );
    let row = other
        .forge_delivery("github", "d-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, jobs::DeliveryState::Submitted);
    assert_eq!(row.job_id, Some(job));
    assert_eq!(row.base_commit, Some(c1));
    // A holder that dies: its lease runs out and another host takes the delivery again, and the
    // first holder can no longer finish it.
    store
        .record_forge_delivery(delivery("d-5", Some('e')))
        .await
        .unwrap();
    let c = store
        .claim_forge_delivery(&host("c"), Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.delivery, "d-5");
    expire().await;
    let d = other
        .claim_forge_delivery(&host("d"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((d.delivery.as_str(), d.attempts), ("d-5", 2));
    let late = jobs::DeliveryOutcome::Refused {
        code: "PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE".into(),
    };
    assert_eq!(
        store
            .finish_forge_delivery("github", "d-5", &host("c"), late)
            .await
            .unwrap(),
        Fenced::Lost
    );
    // A malformed code is refused.
    assert!(
        store
            .finish_forge_delivery(
                "github",
                "d-3",
                &host("b"),
                jobs::DeliveryOutcome::Refused {
                    code: "bad code".into()
                }
            )
            .await
            .is_err()
    );
    let refused = jobs::DeliveryOutcome::Refused {
        code: "PATCH_CANDIDATE_SERVICE_POLICY".into(),
    };
    assert_eq!(
        other
            .finish_forge_delivery("github", "d-3", &host("b"), refused)
            .await
            .unwrap(),
        Fenced::Applied
    );
    let row = store
        .forge_delivery("github", "d-3")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.state, jobs::DeliveryState::Refused);
    assert_eq!(row.reason, "PATCH_CANDIDATE_SERVICE_POLICY");
    assert_eq!(row.job_id, None);
}

/// A submitted delivery opens its report; one host at a time holds it under a lease; each call
/// back is recorded once (the first record stands) and only by the holder; a deferred report is
/// not due before its time and counts failures in a row until a call is recorded; a closed one
/// is never taken again. A pull request is recorded once and its head moves only from the head
/// recorded.
pub async fn forge_reports_record_each_call_once_under_leases(
    store: &JobStore,
    location: &Location,
) {
    let other = location.open().await;
    let lease = Duration::from_secs(60);
    // Nothing is open before a delivery is submitted; a refused one opens nothing.
    store
        .record_forge_delivery(delivery("r-1", Some('a')))
        .await
        .unwrap();
    store
        .record_forge_delivery(delivery("r-2", Some('b')))
        .await
        .unwrap();
    assert_eq!(
        store.claim_forge_report(&host("a"), lease).await.unwrap(),
        None
    );
    let job = submit(store, "report-job", 1).await;
    for (id, outcome) in [
        ("r-1", jobs::DeliveryOutcome::Submitted(job.clone())),
        (
            "r-2",
            jobs::DeliveryOutcome::Refused {
                code: "PATCH_CANDIDATE_SERVICE_POLICY".into(),
            },
        ),
    ] {
        let held = store
            .claim_forge_delivery(&host("a"), lease)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(held.delivery, id);
        assert_eq!(
            store
                .finish_forge_delivery("github", id, &host("a"), outcome)
                .await
                .unwrap(),
            Fenced::Applied
        );
    }
    let held = store
        .claim_forge_report(&host("a"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((held.delivery.as_str(), held.report_open), ("r-1", true));
    assert_eq!(
        other.claim_forge_report(&host("b"), lease).await.unwrap(),
        None
    );
    // The same host id takes its own held report again at once (its previous run was killed).
    let again = other
        .claim_forge_report(&host("a"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.delivery, "r-1");
    // Only the holder records; the first record stands.
    let first = serde_json::json!({"number": 7});
    assert_eq!(
        other
            .record_forge_call("github", "r-1", &host("b"), "pull_request", &first)
            .await
            .unwrap(),
        None
    );
    let call = store
        .record_forge_call("github", "r-1", &host("a"), "pull_request", &first)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(call.result, first);
    let again = store
        .record_forge_call(
            "github",
            "r-1",
            &host("a"),
            "pull_request",
            &serde_json::json!({"number": 8}),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.result, first);
    assert!(
        store
            .record_forge_call("github", "r-1", &host("a"), "bad call", &first)
            .await
            .is_err()
    );
    // Deferred with a failure: not due before its time, failures counted, and reset by the
    // next recorded call.
    assert_eq!(
        other
            .defer_forge_report("github", "r-1", &host("b"), lease, true)
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .defer_forge_report("github", "r-1", &host("a"), lease, true)
            .await
            .unwrap(),
        Fenced::Applied
    );
    assert_eq!(
        other.claim_forge_report(&host("b"), lease).await.unwrap(),
        None
    );
    let row = other
        .forge_delivery("github", "r-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.report_failures, 1);
    assert_eq!(
        store
            .defer_forge_report("github", "r-1", &host("a"), Duration::ZERO, true)
            .await
            .unwrap(),
        Fenced::Lost
    );
    // Not held: the deferral above released it, so this one is lost and counts nothing.
    let row = other
        .forge_delivery("github", "r-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.report_failures, 1);
    // A holder whose lease runs out is fenced off by the next one.
    let c = store
        .claim_forge_report(&host("c"), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(c, None, "deferred a minute: not due yet");
    let calls = other.forge_calls("github", "r-1").await.unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].call, "pull_request");
    // Close: a second report of another delivery, due now, held, closed, never taken again.
    store
        .record_forge_delivery(delivery("r-3", Some('c')))
        .await
        .unwrap();
    store
        .claim_forge_delivery(&host("a"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .finish_forge_delivery(
                "github",
                "r-3",
                &host("a"),
                jobs::DeliveryOutcome::Submitted(job.clone()),
            )
            .await
            .unwrap(),
        Fenced::Applied
    );
    let short = other
        .claim_forge_report(&host("d"), Duration::from_millis(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(short.delivery, "r-3");
    expire().await;
    let taken = store
        .claim_forge_report(&host("e"), lease)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.delivery, "r-3");
    assert_eq!(
        other
            .close_forge_report("github", "r-3", &host("d"), "done")
            .await
            .unwrap(),
        Fenced::Lost
    );
    assert_eq!(
        store
            .close_forge_report("github", "r-3", &host("e"), "done")
            .await
            .unwrap(),
        Fenced::Applied
    );
    let row = other
        .forge_delivery("github", "r-3")
        .await
        .unwrap()
        .unwrap();
    assert!(!row.report_open);
    assert_eq!(row.report_reason.as_deref(), Some("done"));
    expire().await;
    assert_eq!(
        store.claim_forge_report(&host("e"), lease).await.unwrap(),
        None
    );

    // Pull requests: recorded once; the head moves only from the recorded head.
    let pull = jobs::ForgePull {
        forge: "github".into(),
        project: "acme/app".into(),
        number: 12,
        job_id: job.clone(),
        branch: "agent/issue-12".into(),
        head: "1".repeat(40),
    };
    assert_eq!(
        store.forge_pull("github", "acme/app", 12).await.unwrap(),
        None
    );
    assert_eq!(store.set_forge_pull(&pull, None).await.unwrap(), pull);
    let rival = jobs::ForgePull {
        head: "9".repeat(40),
        ..pull.clone()
    };
    assert_eq!(other.set_forge_pull(&rival, None).await.unwrap(), pull);
    let follow = submit(store, "report-follow", 1).await;
    let moved = jobs::ForgePull {
        job_id: follow,
        head: "2".repeat(40),
        ..pull.clone()
    };
    // From a head that is not the recorded one: unchanged.
    assert_eq!(
        other
            .set_forge_pull(&moved, Some(&"9".repeat(40)))
            .await
            .unwrap(),
        pull
    );
    assert_eq!(
        other
            .set_forge_pull(&moved, Some(&"1".repeat(40)))
            .await
            .unwrap(),
        moved
    );
    assert_eq!(
        store.forge_pull("github", "acme/app", 12).await.unwrap(),
        Some(moved.clone())
    );
    assert!(
        store
            .set_forge_pull(&jobs::ForgePull { number: 0, ..moved }, None)
            .await
            .is_err()
    );
}

/// The rollup groups the ledger by day, principal and repository, in that order (bytewise),
/// within the range, for one principal when asked; a reversed range is refused.
pub async fn the_usage_rollup_groups_filters_and_orders(store: &JobStore, location: &Location) {
    let today = jobs::UtcDay::today();
    let yesterday = today.checked_sub_days(1).unwrap();
    let mut ids = Vec::new();
    for (nonce, principal, repository, counts) in [
        ("r1", "bob", "repo-b", (1, 10, 1)),
        ("r2", "alice", "repo-b", (2, 20, 2)),
        ("r3", "alice", "repo-a", (3, 30, 3)),
        ("r4", "alice", "repo-a", (4, 40, 4)),
        ("r5", "Zed", "repo-a", (5, 50, 5)),
    ] {
        let id = submit_spec(store, ledger_spec(nonce, Some(principal), repository)).await;
        let c = claim_one(store, "h").await;
        assert_eq!(c.job.id, id);
        let (r, i, o) = counts;
        let fenced = store
            .complete(
                &id,
                &c.attempt_id,
                vec![1],
                &digest(3),
                &live_usage(r, i, o),
            )
            .await
            .unwrap();
        assert_eq!(fenced, Fenced::Applied);
        ids.push(id);
    }
    // Bob's row was recorded yesterday.
    raw_sql(
        location,
        &format!(
            "UPDATE usage SET day = {} WHERE job_id = '{}'",
            yesterday.days(),
            ids[0]
        ),
    )
    .await
    .unwrap();
    let row = |day, principal: &str, repository: &str, s| jobs::UsageRollupRow {
        day,
        principal: principal.to_owned(),
        repository: repository.to_owned(),
        spend: s,
    };
    let all = store.usage_rollup(yesterday, today, None).await.unwrap();
    assert_eq!(
        all,
        vec![
            row(yesterday, "bob", "repo-b", spend(1, 1, 10, 1)),
            row(today, "Zed", "repo-a", spend(1, 5, 50, 5)),
            row(today, "alice", "repo-a", spend(2, 7, 70, 7)),
            row(today, "alice", "repo-b", spend(1, 2, 20, 2)),
        ]
    );
    let other = location.open().await;
    assert_eq!(
        other.usage_rollup(today, today, None).await.unwrap(),
        all[1..].to_vec()
    );
    assert_eq!(
        other
            .usage_rollup(yesterday, today, Some("alice"))
            .await
            .unwrap(),
        all[2..].to_vec()
    );
    assert_eq!(
        store
            .usage_rollup(yesterday, yesterday, Some("alice"))
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(
        store
            .usage_rollup(jobs::UtcDay::MIN, jobs::UtcDay::MAX, Some("bob"))
            .await
            .unwrap(),
        all[..1].to_vec()
    );
    let e = store
        .usage_rollup(today, yesterday, None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_JOBS_DAY");
    // The day's sums agree with the rollup.
    let got = store.spend_on(today, "alice", "repo-a").await.unwrap();
    assert_eq!(got.principal, spend(3, 9, 90, 9));
    assert_eq!(got.repository, spend(3, 12, 120, 12));
}

/// The rows a version-7 database holds for the ledger upgrade test: two jobs (one without a
/// principal) and their usage rows, two days before `today`; returns the seed SQL.
fn version_7_ledger_seed(postgres: bool, today: jobs::UtcDay) -> String {
    let at = (today.days() - 2) * 86_400_000 + 3_600_000;
    let spec = |principal: Option<&str>, repo: &str| {
        let mut s = serde_json::json!({"repository": repo, "commit": "c"});
        if let Some(p) = principal {
            s["submitted_by"] = p.into();
        }
        s.to_string()
    };
    let job = |n: u8, id: &str, spec: String| {
        let seq = if postgres {
            String::new()
        } else {
            format!("{n}, ")
        };
        let seq_col = if postgres { "" } else { "seq, " };
        let approval = if postgres { "'\\x7b7d'" } else { "x'7b7d'" };
        format!(
            "INSERT INTO jobs (id, {seq_col}kind, state, idempotency_key, spec_json, approval_json,
                 attempts, max_attempts, run_at, created_at, updated_at)
             VALUES ('{id}', {seq}'noop', 'failed', 'key{n}', '{spec}', {approval}, 1, 1, 0, 0, 0);"
        )
    };
    let usage = |id: &str, attempt: &str, doc: serde_json::Value| {
        format!(
            "INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at)
             VALUES ('{id}', '{attempt}', '{doc}', {at});"
        )
    };
    let (j1, j2) = (
        "job_00000000000000000000000000000001",
        "job_00000000000000000000000000000002",
    );
    [
        job(1, j1, spec(Some("alice"), "repo-one")),
        job(2, j2, spec(None, "repo-one")),
        usage(j1, "att_1", live_usage(2, 100, 10)),
        usage(j1, "att_2", live_usage(1, 7, 3)),
        usage(j1, "att_3", serde_json::json!({"outcome": "offline"})),
        usage(
            j2,
            "att_4",
            serde_json::json!({"live": {"requests": -1,
            "input_tokens": "5", "output_tokens": 2.5, "total_tokens": 99_999_999_999_999_u64}}),
        ),
    ]
    .concat()
}

/// A version-7 database (usage rows of a live, an offline and a malformed document, a job
/// without a principal), built with the schema's own statements, upgrades to the ledger and its
/// daily totals: each
/// row's principal and repository come from its job, its day from `recorded_at`, its counts from
/// its document (0 when absent or malformed, capped).
pub async fn a_version_7_database_backfills_the_ledger(location: Location) {
    let today = jobs::UtcDay::today();
    let day = today.checked_sub_days(2).unwrap();
    match &location {
        Location::Sqlite(dir) => jobs::testkit::sqlite_schema_at_version(
            &dir.join(jobs::DEFAULT_SQLITE_FILE),
            7,
            &version_7_ledger_seed(false, today),
        )
        .unwrap(),
        Location::Postgres(url) => {
            jobs::testkit::postgres_schema_at_version(url, 7, &version_7_ledger_seed(true, today))
                .await
                .unwrap()
        }
    }
    let store = location.open().await;
    assert_eq!(store.schema_version().await.unwrap(), jobs::SCHEMA_VERSION);
    assert_eq!(
        jobs::SCHEMA_VERSION,
        11,
        "extend this test for the next version"
    );
    // Version 10's table starts empty and works on the upgraded database, and so do version
    // 11's columns and tables.
    assert_eq!(store.forge_delivery("github", "d").await.unwrap(), None);
    assert_eq!(
        store
            .claim_forge_report(&host("h"), Duration::from_secs(1))
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.forge_pull("github", "a/b", 1).await.unwrap(), None);
    assert!(store.forge_calls("github", "d").await.unwrap().is_empty());
    // `spend_on` reads the daily totals of version 9: these reads check their backfill from the
    // rows version 8 filled, too.
    let got = store.spend_on(day, "alice", "repo-one").await.unwrap();
    assert_eq!(got.principal, spend(3, 3, 107, 13));
    let capped = jobs::Spend {
        attempts: 1,
        total_tokens: jobs::MAX_LEDGER_COUNT.min(99_999_999_999_999),
        ..jobs::Spend::default()
    };
    assert_eq!(got.repository, got.principal.saturating_add(capped));
    assert_eq!(
        store.spend_on(day, "", "x").await.unwrap().principal,
        capped
    );
    assert_eq!(
        store.usage_rollup(day, today, None).await.unwrap(),
        vec![
            jobs::UsageRollupRow {
                day,
                principal: String::new(),
                repository: "repo-one".to_owned(),
                spend: capped,
            },
            jobs::UsageRollupRow {
                day,
                principal: "alice".to_owned(),
                repository: "repo-one".to_owned(),
                spend: spend(3, 3, 107, 13),
            },
        ]
    );
    // Opening again (another host) migrates nothing twice.
    let other = location.open().await;
    assert_eq!(other.spend_on(day, "alice", "repo-one").await.unwrap(), got);
    let (_, created) = other
        .record_forge_delivery(jobs::NewForgeDelivery {
            forge: "github".into(),
            delivery: "d".into(),
            state: jobs::DeliveryState::Ignored,
            reason: "event".into(),
            subject: None,
            trigger: None,
        })
        .await
        .unwrap();
    assert!(created);
}
