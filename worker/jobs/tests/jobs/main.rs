//! The job store's integration tests: one conformance suite ([`conformance`]), each body run
//! against a real SQLite file and a real PostgreSQL database (a fresh database per test on the
//! cluster of `infra/ci/postgres.sh`; see `jobs::testkit`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test fixtures: a failed setup step is a failed test"
)]

mod conformance;

use jobs::JobStore;
use jobs::testkit::{Unavailable, fresh_postgres_url};

/// A store on a fresh SQLite file; the directory lives as long as the returned guard.
pub async fn sqlite_store() -> (tempfile::TempDir, JobStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open(None, dir.path()).await.unwrap();
    (dir, store)
}

/// A store on a fresh SQLite file whose busy timeout is `busy_timeout` (the other options the
/// defaults), and the outage of its file.
async fn sqlite_store_with(
    busy_timeout: std::time::Duration,
) -> (tempfile::TempDir, JobStore, conformance::SqliteOutage) {
    let options = jobs::StoreOptions {
        busy_timeout,
        ..jobs::StoreOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open_with(None, dir.path(), &options)
        .await
        .unwrap();
    let path = store.sqlite_path().unwrap().to_owned();
    (dir, store, conformance::SqliteOutage::new(path))
}

/// The PostgreSQL resource, or `None` (with a note on stderr) when PostgreSQL is neither
/// configured nor required. Panics when it is required and unusable.
fn postgres_or_skip<T>(found: Result<T, Unavailable>) -> Option<T> {
    match found {
        Ok(found) => Some(found),
        Err(Unavailable::Skip(reason)) => {
            eprintln!("{}", Unavailable::Skip(reason));
            None
        }
        Err(e @ Unavailable::Fail(_)) => panic!("{e}"),
    }
}

/// A store on a fresh PostgreSQL database, or `None` as [`postgres_or_skip`].
pub async fn postgres_store() -> Option<(String, JobStore)> {
    let url = postgres_or_skip(fresh_postgres_url().await)?;
    let store = JobStore::open(Some(&url), std::path::Path::new("/nonexistent"))
        .await
        .unwrap();
    Some((url, store))
}

/// Runs one conformance body against both backends, as two tests `<name>::sqlite` and
/// `<name>::postgres`. The body gets the store and a way to open a second handle on the same
/// database (another "host").
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let (dir, store) = crate::sqlite_store().await;
                let location = crate::conformance::Location::Sqlite(dir.path().to_owned());
                crate::conformance::$name(&store, &location).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let Some((url, store)) = crate::postgres_store().await else { return };
                let location = crate::conformance::Location::Postgres(url);
                crate::conformance::$name(&store, &location).await;
            }
        }
    )*};
}

conformance!(
    submit_is_idempotent,
    malformed_input_is_refused_before_storage,
    claim_respects_max_and_order,
    no_double_claim_under_concurrency,
    heartbeat_renews_then_is_lost_after_rescue,
    stale_attempt_writes_are_refused,
    retry_backoff_and_dead_letter,
    snooze_and_release_do_not_spend_attempts,
    cancel_queued_and_running,
    rescue_is_one_guarded_statement,
    candidate_readable_from_another_handle_and_usage_idempotent,
    events_hosts_and_current_attempts,
    migrations_are_versioned_and_concurrent_opens_agree,
    store_identity_is_stable_and_per_database,
    work_signal_wakes_idle_runners,
    a_dead_hosts_jobs_are_finished_by_the_others,
    live_jobs_bind_their_model,
    follow_up_jobs_bind_what_they_supersede,
    outcome_writes_carry_one_usage_row_per_attempt,
    gate_evidence_is_written_once_with_the_candidate,
    a_completion_queues_its_follow_up_in_the_same_write,
    review_decisions_are_append_only_and_bound_to_the_candidate,
    a_publication_is_recorded_once,
    a_reject_during_a_publication_stops_its_record,
    no_decision_after_a_publication,
    two_hosts_racing_a_publication_record_exactly_one,
    named_tokens_are_hashed_and_revocable,
    token_roles_change_and_are_audited,
    decisions_and_publications_are_audited,
    the_submitter_is_kept_and_not_part_of_the_key,
    the_ledger_counts_what_the_outcome_writes_record,
    the_usage_rollup_groups_filters_and_orders,
    a_claim_reading_spend_returns_the_days_totals,
    forge_deliveries_are_recorded_once_and_worked_off_under_leases,
    forge_reports_record_each_call_once_under_leases,
);

/// A database left by a schema-7 build gets its spend ledger filled in from its usage rows.
mod a_version_7_database_backfills_the_ledger {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        crate::conformance::a_version_7_database_backfills_the_ledger(
            crate::conformance::Location::Sqlite(dir.path().to_owned()),
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        let Some(url) = crate::postgres_or_skip(jobs::testkit::fresh_postgres_url().await) else {
            return;
        };
        crate::conformance::a_version_7_database_backfills_the_ledger(
            crate::conformance::Location::Postgres(url),
        )
        .await;
    }
}

/// Fresh databases opened by several handles at once.
mod first_opens_race {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() {
        let dir = tempfile::tempdir().unwrap();
        crate::conformance::first_opens_race(crate::conformance::Location::Sqlite(
            dir.path().to_owned(),
        ))
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        let Some(url) = crate::postgres_or_skip(jobs::testkit::fresh_postgres_url().await) else {
            return;
        };
        crate::conformance::first_opens_race(crate::conformance::Location::Postgres(url)).await;
    }
}

/// A PostgreSQL database left by a schema-6 build upgrades its named tokens (the SQLite twin is
/// a unit test beside the SQLite store, which can build its file at any version).
mod a_version_6_database_upgrades_its_tokens_to_every_role {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        let Some(url) = crate::postgres_or_skip(jobs::testkit::fresh_postgres_url().await) else {
            return;
        };
        crate::conformance::a_version_6_postgres_database_upgrades_its_tokens_to_every_role(&url)
            .await;
    }
}

/// The database goes away and comes back: SQLite locked by another process past the busy
/// timeout; PostgreSQL stopped and restarted (a private cluster). The store returns
/// `PATCH_CANDIDATE_JOBS_UNAVAILABLE` meanwhile and works again without being reopened.
mod database_goes_away_and_comes_back {
    use std::time::Duration;

    use jobs::testkit::PrivateCluster;
    use jobs::{JobStore, StoreOptions};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite() {
        let (_dir, store, mut outage) = crate::sqlite_store_with(Duration::from_millis(200)).await;
        crate::conformance::outage(&store, &mut outage).await;
    }

    /// While another process holds the SQLite file locked, a call whose caller gave up while it
    /// waited for the store's one connection (a heartbeat past its deadline) runs nothing when
    /// its turn comes: it neither writes late nor holds the connection through another busy
    /// timeout while the calls behind it wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sqlite_calls_given_up_while_queued_do_nothing() {
        use crate::conformance::Outage as _;
        let (_dir, store, mut outage) = crate::sqlite_store_with(Duration::from_secs(30)).await;
        outage.go_away();
        // The first call takes the connection and waits for the lock; the next two queue
        // behind it, and their callers give up.
        let first = tokio::spawn({
            let store = store.clone();
            async move { store.submit(jobs::JobSpec::noop("first", 1)).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        for nonce in ["second", "third"] {
            let call = store.submit(jobs::JobSpec::noop(nonce, 1));
            let given_up = tokio::time::timeout(Duration::from_millis(100), call).await;
            assert!(given_up.is_err(), "{nonce} did not wait behind the first");
        }
        outage.come_back();
        let (job, created) = first.await.unwrap().unwrap();
        assert!(created);
        // Time for the queued calls to take the connection in turn (and, were they run, to
        // write their jobs).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stored = store.list(None, 10).await.unwrap();
        assert_eq!(
            stored.iter().map(|j| &j.id).collect::<Vec<_>>(),
            vec![&job.id]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres() {
        let Some(cluster) = crate::postgres_or_skip(PrivateCluster::start()) else {
            return;
        };
        let options = StoreOptions {
            connect_timeout: Duration::from_secs(2),
            ..StoreOptions::default()
        };
        let store = JobStore::open_with(
            Some(cluster.url()),
            std::path::Path::new("/nonexistent"),
            &options,
        )
        .await
        .unwrap();
        let url = cluster.url().to_owned();
        // The LISTEN connection exists before the outage: it must reconnect by itself.
        let mut signal = store.work_signal();
        let mut outage = crate::conformance::PostgresOutage::new(cluster);
        crate::conformance::outage(&store, &mut outage).await;
        // Another host's submission reaches this one again through the reconnected listener.
        let other = JobStore::open(Some(&url), std::path::Path::new("/nonexistent"))
            .await
            .unwrap();
        // Quiet for longer than the listener's reconnect interval: its reconnect wake-up is past.
        while signal.wait(Duration::from_millis(2500)).await {}
        other
            .submit(jobs::JobSpec::noop("after-outage", 1))
            .await
            .unwrap();
        assert!(signal.wait(Duration::from_secs(60)).await);
    }
}
