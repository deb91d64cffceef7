//! The review page's time on a big candidate, uncached and cached: a real `serve` with one
//! planted completed job whose candidate is ~45 MB of JSON (50 files of 300 kB, every line
//! changed), the candidate page and the review document fetched over TCP, the first request
//! and the following ones timed. Run explicitly (it is a measurement, not a check):
//! `cargo test --release --locked -p scenario-tests --test scenario -- --ignored --nocapture
//! bench_review_page`. Prints `REVIEW_BENCH` lines (BENCHMARKS.md).

use std::time::Instant;

use finalizer::CandidateFields;

use crate::service_hostile_clients::{sign_in_as_a_browser, timed_get};
use crate::support::*;

fn big_candidate() -> (Vec<u8>, String) {
    let files = module_updates(
        50,
        6000,
        |f, i| format!("value_{f}_{i:05} = compute({i}) # pad\n"),
        |f, i| format!("value_{f}_{i:05} = compute_faster({i})\n"),
    );
    let fields = CandidateFields {
        repository_full_name: "o/n".into(),
        baseline_commit_sha: "c".repeat(40),
        handoff_id: "handoff-bench".into(),
        approved_plan_digest: "0".repeat(64),
        required_validation_gates: Vec::new(),
        summary: "Every line of 50 modules".into(),
        ..CandidateFields::default()
    };
    let made = make_candidate(fields, files);
    (made.bytes, made.digest)
}

fn plant(state: &std::path::Path, bytes: Vec<u8>, digest: String) -> String {
    plant_completed(
        state,
        None,
        jobs::JobSpec::noop("bench", 1),
        bytes,
        &digest,
        Vec::new(),
    )
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run explicitly with --ignored (BENCHMARKS.md)"]
async fn bench_review_page_cached_vs_uncached() {
    let Some((_docker, _guard)) = locked_docker().await else {
        return;
    };
    let (bytes, digest) = big_candidate();
    let size = bytes.len();
    let state = tempfile::tempdir().unwrap();
    let id = plant(state.path(), bytes, digest);
    let service = Service::start(state.path(), &ServeOpts::default());
    let addr = service.addr;
    let token = service.token();
    let session = sign_in_as_a_browser(addr, &token);
    let page = format!("/ui/jobs/{id}/candidate");
    let review = format!("/v1/jobs/{id}/review");
    // The first request of each: nothing cached yet (for the page; the review document then
    // finds what the page cached).
    let (status, first_page) = timed_get(addr, &page, Some(&session), None);
    assert_eq!(status, 200);
    let mut pages = Vec::new();
    let mut reviews = Vec::new();
    for _ in 0..9 {
        let (status, ms) = timed_get(addr, &page, Some(&session), None);
        assert_eq!(status, 200);
        pages.push(ms);
        let t = Instant::now();
        let (status, _) = http(addr, "GET", &review, Some(&token), None);
        assert_eq!(status, 200);
        reviews.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    eprintln!(
        "REVIEW_BENCH candidate {size} bytes: candidate page first {first_page:.0} ms, then p50 {:.0} ms (9 runs, min {:.0}, max {:.0}); review document p50 {:.0} ms",
        p50(pages.clone()),
        pages.iter().copied().fold(f64::MAX, f64::min),
        pages.iter().copied().fold(0.0, f64::max),
        p50(reviews)
    );
}
