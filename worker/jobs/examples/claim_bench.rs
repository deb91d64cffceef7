//! The claim benchmark (BENCHMARKS.md, "Job store: claims"): `--loops` worker loops, each its own
//! host, claim one no-op job at a time and complete it, against one store, until the queue is
//! empty. Prints claims per second, claim latency percentiles, and the double-claim check (every
//! job completed exactly once, every attempt ID unique) as one JSON line on stdout.
//!
//! The jobs belong to a few principals and repositories, and the spend ledger is seeded with
//! [`SEED_ROWS`] usage rows over the last 30 days. With `--quota`, each claim also reads the
//! claimed job's spend of the day (`JobStore::claim_reading_spend`: the daily totals of its
//! principal and repository joined into the claim statement), as the service does at claim under
//! a quota ("Quota check at claim"); the claim latency then includes that read.
//!
//! ```text
//! claim_bench --database postgres://postgres@%2Ftmp%2Fpg/postgres --jobs 20000 --loops 100
//! claim_bench --database sqlite:/tmp/bench.sqlite3 --jobs 5000 --loops 100 --quota
//! ```
#![allow(
    clippy::print_stdout,
    reason = "a benchmark binary: its result is the JSON line on stdout"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobs::{Fenced, JobSpec, JobState, JobStore, StoreOptions, UtcDay, random_job_id};
use vocab::{AttemptId, HostId, JobId};

/// Usage rows seeded into the ledger before the run, spread over [`SEED_DAYS`] days.
const SEED_ROWS: usize = 50_000;
/// The days the seeded rows span, through today.
const SEED_DAYS: i64 = 30;
/// The principals the jobs (and the seeded rows) belong to.
const PRINCIPALS: [&str; 5] = ["alice", "bob", "carol", "ci", "dave"];
/// The repositories the jobs (and the seeded rows) are on.
const REPOSITORIES: [&str; 4] = [
    "https://forge.example/team/app.git",
    "https://forge.example/team/lib.git",
    "https://forge.example/ops/infra.git",
    "/srv/git/tools",
];

struct Args {
    database: String,
    jobs: usize,
    loops: usize,
    pool: usize,
    batch: usize,
    quota: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        database: String::new(),
        jobs: 20_000,
        loops: 100,
        pool: 32,
        batch: 1,
        quota: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--quota" {
            args.quota = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--database" => args.database = value.clone(),
            "--jobs" => args.jobs = number()?,
            "--loops" => args.loops = number()?,
            "--pool" => args.pool = number()?,
            "--batch" => args.batch = number()?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.database.is_empty() {
        return Err("--database is required".to_owned());
    }
    Ok(args)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "an index into a non-empty vector, clamped"
    )]
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted
        .get(i.min(sorted.len() - 1))
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

type LoopResult = Result<(Vec<(JobId, AttemptId)>, Vec<Duration>), String>;

async fn worker(store: JobStore, host: HostId, batch: usize, quota: bool) -> LoopResult {
    let mut done = Vec::new();
    let mut latencies = Vec::new();
    let lease = Duration::from_secs(600);
    loop {
        let started = Instant::now();
        // With `--quota` the claim reads each claimed job's spend of the day in the same
        // statement, as the service does under a quota.
        let claimed = if quota {
            store.claim_reading_spend(&host, batch, lease).await
        } else {
            store.claim(&host, batch, lease).await
        }
        .map_err(|e| e.to_string())?;
        if quota && claimed.iter().any(|c| c.spend_today.is_none()) {
            return Err("a claim reading spend returned none".to_owned());
        }
        latencies.push(started.elapsed());
        if claimed.is_empty() {
            // The last, empty claim is not a claim: it only ends the loop.
            latencies.pop();
            return Ok((done, latencies));
        }
        for c in claimed {
            let fenced = store
                .complete(
                    &c.job.id,
                    &c.attempt_id,
                    Vec::new(),
                    "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                    &serde_json::json!({}),
                )
                .await
                .map_err(|e| e.to_string())?;
            if fenced != Fenced::Applied {
                return Err(format!("completion of {} was fenced off", c.job.id));
            }
            done.push((c.job.id, c.attempt_id));
        }
    }
}

async fn run(args: Args) -> Result<serde_json::Value, String> {
    let options = StoreOptions {
        pool_size: args.pool,
        busy_timeout: Duration::from_secs(30),
        ..StoreOptions::default()
    };
    let state_dir = std::env::temp_dir();
    let store = JobStore::open_with(Some(&args.database), &state_dir, &options)
        .await
        .map_err(|e| e.to_string())?;
    let run_id = random_job_id().map_err(|e| e.to_string())?;

    // Submit (16 at a time), untimed.
    let submitted = Instant::now();
    let mut tasks = Vec::new();
    for chunk in 0..16 {
        let store = store.clone();
        let run_id = run_id.clone();
        let n = args.jobs;
        tasks.push(tokio::spawn(async move {
            for i in (chunk..n).step_by(16) {
                store
                    .submit(spec(&format!("{run_id}-{i}"), i))
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let submit_s = submitted.elapsed().as_secs_f64();
    seed_ledger(&store, &args.database, &run_id).await?;

    let start = Instant::now();
    let mut loops = Vec::new();
    for w in 0..args.loops {
        let host = HostId::parse(&format!("bench-{w}")).map_err(|e| e.to_string())?;
        loops.push(tokio::spawn(worker(
            store.clone(),
            host,
            args.batch,
            args.quota,
        )));
    }
    let mut per_job: BTreeMap<JobId, usize> = BTreeMap::new();
    let mut attempts = BTreeSet::new();
    let mut duplicate_attempts = 0_usize;
    let mut latencies = Vec::new();
    for l in loops {
        let (done, lat) = l.await.map_err(|e| e.to_string())??;
        for (job, attempt) in done {
            *per_job.entry(job).or_default() += 1;
            if !attempts.insert(attempt) {
                duplicate_attempts += 1;
            }
        }
        latencies.extend(lat);
    }
    let wall = start.elapsed().as_secs_f64();
    latencies.sort();
    let claimed: usize = per_job.values().sum();
    let double_claims = per_job.values().filter(|&&n| n > 1).count();
    // The database's own view: every job completed, none left queued or running.
    let queued = store
        .list(Some(JobState::Queued), 1000)
        .await
        .map_err(|e| e.to_string())?
        .len();
    let running = store
        .list(Some(JobState::Running), 1000)
        .await
        .map_err(|e| e.to_string())?
        .len();
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^52")]
    let claims_per_s = claimed as f64 / wall;
    Ok(serde_json::json!({
        "backend": store.backend_name(),
        "jobs": args.jobs,
        "loops": args.loops,
        "pool": args.pool,
        "batch": args.batch,
        "quota_check": args.quota,
        "ledger_rows_seeded": SEED_ROWS,
        "submit_s": (submit_s * 100.0).round() / 100.0,
        "wall_s": (wall * 100.0).round() / 100.0,
        "claims": claimed,
        "claims_per_s": claims_per_s.round(),
        "claim_ms_p50": (percentile(&latencies, 0.50) * 100.0).round() / 100.0,
        "claim_ms_p99": (percentile(&latencies, 0.99) * 100.0).round() / 100.0,
        "distinct_jobs_completed": per_job.len(),
        "double_claims": double_claims,
        "duplicate_attempt_ids": duplicate_attempts,
        "left_queued": queued,
        "left_running": running,
        "ok": claimed == args.jobs && per_job.len() == args.jobs && double_claims == 0
            && duplicate_attempts == 0 && queued == 0 && running == 0,
    }))
}

/// The `i`th job: a no-op of one of the principals on one of the repositories.
fn spec(nonce: &str, i: usize) -> JobSpec {
    let mut spec = JobSpec::noop(nonce, 1);
    spec.submitted_by = PRINCIPALS
        .get(i % PRINCIPALS.len())
        .map(|p| (*p).to_owned());
    spec.repository = REPOSITORIES
        .get(i % REPOSITORIES.len())
        .map_or("noop", |r| r)
        .to_owned();
    spec
}

/// Seeds the ledger: one cancelled job per principal and repository, and [`SEED_ROWS`] usage
/// rows of those jobs over the last [`SEED_DAYS`] days, written in SQL (the store writes a row
/// on the day it is recorded only).
async fn seed_ledger(store: &JobStore, database: &str, run_id: &JobId) -> Result<(), String> {
    let pairs = PRINCIPALS.len() * REPOSITORIES.len();
    let per_pair = SEED_ROWS / pairs;
    let today = UtcDay::today().days();
    let mut sql = String::new();
    for p in 0..PRINCIPALS.len() {
        for r in 0..REPOSITORIES.len() {
            let mut s = spec(&format!("{run_id}-seed-{p}-{r}"), 0);
            s.submitted_by = PRINCIPALS.get(p).map(|p| (*p).to_owned());
            s.repository = REPOSITORIES.get(r).map_or("noop", |r| r).to_owned();
            let (principal, repository) = (
                s.submitted_by.clone().unwrap_or_default(),
                s.repository.clone(),
            );
            let (job, _) = store.submit(s).await.map_err(|e| e.to_string())?;
            store.cancel(&job.id).await.map_err(|e| e.to_string())?;
            sql.push_str(&format!(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {per_pair})
                 INSERT INTO usage (job_id, attempt_id, usage_json, recorded_at, principal,
                     repository, day, requests, input_tokens, output_tokens, total_tokens)
                 SELECT '{id}', 'seed' || n, '{{}}', CAST({today} - n % {SEED_DAYS} AS BIGINT) * 86400000,
                     '{principal}', '{repository}', {today} - n % {SEED_DAYS}, 3, 12000, 800, 12800
                 FROM g;\n",
                id = job.id
            ));
        }
    }
    if let Some(path) = database.strip_prefix("sqlite:") {
        sql.push_str("ANALYZE usage;\n");
        let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
        conn.execute_batch(&sql).map_err(|e| e.to_string())
    } else {
        // What autovacuum does after a bulk insert (PostgreSQL 13 and later vacuum after
        // inserts too): the visibility map lets the quota read scan the index alone. VACUUM
        // cannot run in the batch's implicit transaction, so it is a statement of its own.
        let (client, connection) = tokio_postgres::connect(database, tokio_postgres::NoTls)
            .await
            .map_err(|e| e.to_string())?;
        let task = tokio::spawn(connection);
        let mut done = client.batch_execute(&sql).await;
        if done.is_ok() {
            done = client.batch_execute("VACUUM ANALYZE usage").await;
        }
        let done = done.map_err(|e| {
            e.as_db_error()
                .map_or_else(|| e.to_string(), |d| d.message().to_owned())
        });
        drop(client);
        let _ = task.await;
        done?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("claim_bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("claim_bench: {e}");
            return std::process::ExitCode::from(3);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(result) => {
            let ok = result.get("ok") == Some(&serde_json::Value::Bool(true));
            println!("{result}");
            if ok {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("claim_bench: {e}");
            std::process::ExitCode::from(3)
        }
    }
}
