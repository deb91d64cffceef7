//! Benchmark driver: N full pipelines (snapshot → Docker turn → stage → finalise → digest) from
//! one process, first one after another, then all at once; prints wall times and the process's
//! peak RSS. Used by `benches/worker/concurrent.sh`.
//!
//! usage: concurrent_turns FIXTURE_DIR N IMAGE IMAGE_ID
//! (FIXTURE_DIR as written by `fixtures/demo/make-demo.sh`.)
#![forbid(unsafe_code)]
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use container::BollardRuntime;
use snapshot::{ApprovedExecutionContext, DefaultPathGuard};
use turn::TurnConfig;
use turn::{PipelineRequest, run_pipeline};

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn one(
    docker: &BollardRuntime,
    dir: &Path,
    context: &ApprovedExecutionContext,
    config: &TurnConfig,
) {
    let commit = std::fs::read_to_string(dir.join("commit")).unwrap();
    let task = std::fs::read_to_string(dir.join("task")).unwrap();
    let policy = DefaultPathGuard::default();
    let staging = std::env::temp_dir();
    let outcome = run_pipeline(
        docker,
        PipelineRequest {
            repo: &dir.join("repo"),
            commit: &commit,
            context,
            task: &task,
            selected: None,
            read_only: None,
            policy: &policy,
            config,
            staging_parent: &staging,
            store: None,
            ledger: None,
            user_id: "bench",
            review_feedback: None,
            parent: None,
        },
    )
    .await;
    assert_eq!(
        outcome
            .expect("turn failed")
            .candidate
            .changed_files()
            .len(),
        3
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(&args[1]);
    let n: usize = args[2].parse().unwrap();
    let config = TurnConfig::parse(&args[3], &args[4], 90, 16_777_216).unwrap();
    let context = ApprovedExecutionContext::from_json(
        &std::fs::read_to_string(dir.join("approval.json")).unwrap(),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let docker = BollardRuntime::connect(Path::new(container::DEFAULT_DOCKER_SOCKET)).await.unwrap();
        one(&docker, &dir, &context, &config).await; // warm-up
        let rss_before = status_kib("VmHWM:");
        let t = Instant::now();
        for _ in 0..n {
            one(&docker, &dir, &context, &config).await;
        }
        let sequential = t.elapsed();
        let t = Instant::now();
        let turns = (0..n).map(|_| one(&docker, &dir, &context, &config));
        futures::future::join_all(turns).await;
        let concurrent = t.elapsed();
        let rss_after = status_kib("VmHWM:");
        println!(
            "{{\"turns\": {n}, \"sequential_ms\": {}, \"concurrent_ms\": {}, \"peak_rss_kib_before\": {rss_before}, \"peak_rss_kib_after\": {rss_after}, \"peak_rss_kib_per_concurrent_turn\": {}}}",
            sequential.as_millis(),
            concurrent.as_millis(),
            rss_after.saturating_sub(rss_before) / n as u64
        );
    });
}
