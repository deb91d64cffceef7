//! What the repository policy adds to one submission, measured in-process: the admission of a
//! job under a 200-rule policy whose last rule is the one that matches (every pattern tried),
//! and the quota check's ledger read (`spend_on`) on a SQLite store holding 50,000 usage rows.
//! The baseline is a submission without a policy: its job store write (`JobStore::submit`),
//! timed in the same run; a submission under the policy adds the admission and the read.
//!
//! Usage: `cargo run --release --locked -p service --example policy_admission_bench [N]`
//! (default N = 20,000 admissions and 2,000 ledger reads). Prints p50, p99 and the mean of each.

#![allow(
    clippy::print_stdout,
    reason = "a benchmark binary: its result is the table on stdout"
)]

use std::time::{Duration, Instant};

use service::{JobAsk, RepositoryPolicy};

fn percentile(sorted: &[Duration], p: u64) -> Duration {
    let last = sorted.len().saturating_sub(1);
    let i = usize::try_from(((last as u64) * p) / 100).unwrap_or(last);
    sorted.get(i.min(last)).copied().unwrap_or_default()
}

fn report(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / u32::try_from(samples.len()).unwrap_or(1);
    println!(
        "{what:<44} n={:<6} p50 {:>9.1?} p99 {:>9.1?} mean {:>9.1?}",
        samples.len(),
        percentile(&samples, 50),
        percentile(&samples, 99),
        mean
    );
}

fn policy_text(rules: usize) -> String {
    let mut text = String::from(
        "version = 1\n[quotas]\nprincipal_daily_tokens = 5000000\nrepository_daily_tokens = 20000000\n",
    );
    for i in 0..rules {
        text.push_str(&format!(
            "[[repository]]\nmatch = \"https://forge.example/team-{i}/*\"\n\
             allowed_paths = [\"src\", \"tests\", \"docs/api\"]\ncreate_paths = [\"src\"]\n\
             delete_paths = [\"src/old\"]\nrequired_gates = [\"unit\", \"lint\"]\n\
             agents = [\"offline\", \"claude\", \"codex\"]\nmodels = [\"m-{i}\", \"m\"]\n\
             max_wall_seconds = 1800\nmax_attempts = 3\nbase_branches = [\"main\"]\n\
             [repository.publication]\nbranch_prefix = \"agent/\"\nforbidden_branches = [\"agent/release*\"]\n"
        ));
    }
    text
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let text = policy_text(200);
    let started = Instant::now();
    let policy = RepositoryPolicy::parse(text.as_bytes())?;
    println!(
        "policy: {} rules, {} bytes, parsed and compiled once at start-up in {:.1?}",
        policy.rule_count(),
        text.len(),
        started.elapsed()
    );
    let allowed = vec!["src/app".to_owned(), "tests".to_owned()];
    let create = vec!["src/new.rs".to_owned()];
    let repository = "https://forge.example/team-199/app.git";
    let ask = JobAsk {
        repository,
        allowed_paths: &allowed,
        create_paths: &create,
        delete_paths: &[],
        agent: "claude",
        model: Some("m"),
        max_wall_seconds: 900,
        max_archive_bytes: 1 << 20,
        max_attempts: 3,
    };
    let mut admit = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let admitted = policy.admit(&ask)?;
        admit.push(t.elapsed());
        std::hint::black_box(admitted);
    }

    // A ledger of 50,000 usage rows of today (the quota reads one day), 40 principals, 200
    // repositories: 1,250 rows a principal, 250 a repository.
    let dir = tempfile::tempdir()?;
    let store = jobs::JobStore::open(None, dir.path()).await?;
    let today = jobs::UtcDay::today();
    let mut seeded = 0usize;
    let mut submits = Vec::with_capacity(5_000);
    for j in 0..5_000usize {
        let mut spec = jobs::JobSpec::noop(&format!("ledger-{j}"), 1);
        spec.repository = format!("https://forge.example/team-{}/app.git", j % 200);
        spec.submitted_by = Some(format!("p{}", j % 40));
        let t = Instant::now();
        let (job, _) = store.submit(spec).await?;
        submits.push(t.elapsed());
        store.cancel(&job.id).await?;
        for _ in 0..10 {
            let usage = serde_json::json!({"live": {"requests": 3, "input_tokens": 900,
                "output_tokens": 100, "total_tokens": 1000}});
            let attempt = jobs::random_attempt_id()?;
            store.record_usage(&job.id, &attempt, &usage).await?;
            seeded += 1;
        }
    }
    println!("ledger: {seeded} usage rows (recorded today; the index keys day first)");
    let reads = (n / 10).max(1);
    let mut quota = Vec::with_capacity(reads);
    for i in 0..reads {
        let principal = format!("p{}", i % 40);
        let t = Instant::now();
        let spent = store.spend_on(today, &principal, repository).await?;
        quota.push(t.elapsed());
        std::hint::black_box(spent);
    }
    // A submission without a policy is its job store write; with one, the admission and the
    // quota read come first.
    let mut with_policy = Vec::with_capacity(reads);
    for ((a, q), w) in admit.iter().zip(&quota).zip(submits.iter().cycle()) {
        with_policy.push(*a + *q + *w);
    }
    let added: Vec<Duration> = admit.iter().zip(&quota).map(|(a, q)| *a + *q).collect();
    report("submit without a policy: the store write", submits);
    report(
        "submit with the policy: admission + quota + write",
        with_policy,
    );
    report("admission, 200 rules, last one matching", admit);
    report("quota check: spend_on (SQLite, 50k rows)", quota);
    report("added per submission (admission + quota)", added);
    Ok(())
}
