//! The claim benchmark (BENCHMARKS.md, "Job store: claims"): `--loops` worker loops, each its own
//! host, claim one no-op job at a time and complete it, against one store, until the queue is
//! empty. Prints claims per second, claim latency percentiles, and the double-claim check (every
//! job completed exactly once, every attempt ID unique) as one JSON line on stdout.
//!
//! ```text
//! claim_bench --database postgres://postgres@%2Ftmp%2Fpg/postgres --jobs 20000 --loops 100
//! claim_bench --database sqlite:/tmp/bench.sqlite3 --jobs 5000 --loops 100
//! ```
#![allow(
    clippy::print_stdout,
    reason = "a benchmark binary: its result is the JSON line on stdout"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobs::{Fenced, JobSpec, JobState, JobStore, StoreOptions, random_job_id};
use vocab::{AttemptId, HostId, JobId};

struct Args {
    database: String,
    jobs: usize,
    loops: usize,
    pool: usize,
    batch: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        database: String::new(),
        jobs: 20_000,
        loops: 100,
        pool: 32,
        batch: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
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

async fn worker(store: JobStore, host: HostId, batch: usize) -> LoopResult {
    let mut done = Vec::new();
    let mut latencies = Vec::new();
    let lease = Duration::from_secs(600);
    loop {
        let started = Instant::now();
        let claimed = store
            .claim(&host, batch, lease)
            .await
            .map_err(|e| e.to_string())?;
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
                    .submit(JobSpec::noop(&format!("{run_id}-{i}"), 1))
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

    let start = Instant::now();
    let mut loops = Vec::new();
    for w in 0..args.loops {
        let host = HostId::parse(&format!("bench-{w}")).map_err(|e| e.to_string())?;
        loops.push(tokio::spawn(worker(store.clone(), host, args.batch)));
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
