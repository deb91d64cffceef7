//! Benchmark driver: a follow-up turn against a first turn on the same repository
//! (`benches/follow-up/run.sh`, BENCHMARKS.md, "Follow-up turns"). The repository is generated:
//! `--files` files at one commit, `--editable` of them under `app/` (the approval's editable
//! scope), ten read-only tests, the rest outside the approval. The parent is a real
//! finalisation of a turn that edits `--edited` of the editable files, kept in a candidate store.
//!
//! * `follow_up_bench prep [FLAGS]` — the trusted side before the container starts, `--runs`
//!   times each, interleaved. A first turn: snapshot at the pinned commit, the approval's identity
//!   and selection, the baseline read, the request checked against the approval, the stdin
//!   payload (`turn::verify_pipeline_request`). A follow-up: the same plus the parent read from
//!   the candidate store (which re-validates it and re-checks its digest), `StartFrom::of_parent`
//!   and the larger stdin payload with `start_from`. After the container both stage, finalise
//!   against the baseline, digest and store their own candidate (a follow-up's carries its
//!   parent's changes too): the `docker` mode measures that part with the rest.
//! * `follow_up_bench docker IMAGE IMAGE_ID [FLAGS]` — whole pipelines on the real daemon with the
//!   synthetic proof agent (snapshot → Docker turn → stage → finalise → digest → store), a first
//!   turn and a follow-up `--runs` times each, interleaved; the follow-up's time includes reading
//!   its parent from the store.
//!
//! Prints one JSON line on stdout: medians and means in milliseconds and the follow-up / first
//! ratios.
#![forbid(unsafe_code)]
#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "a benchmark binary: its result is the JSON line on stdout"
)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use archive::StagedWorkspace;
use container::BollardRuntime;
use finalizer::{CandidateStore, finalize_repository_patch};
use snapshot::{
    ApprovedExecutionContext, DefaultPathGuard, FileOp, GitSnapshot, ProposedFileChange,
    StagedPatchProposal,
};
use turn::{
    ParentCandidate, PipelineRequest, PreparedTurn, ReviewFeedback, StartFrom, TurnConfig,
    run_pipeline, stdin_payload, verify_pipeline_request,
};
use vocab::{GateVerdict, Sha256};

const TASK: &str = "Make the failing order tests pass.";
const REPOSITORY: &str = "bench/follow-up";

struct Args {
    mode: String,
    image: Option<(String, String)>,
    files: usize,
    editable: usize,
    edited: usize,
    runs: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mode = it.next().ok_or("usage: follow_up_bench prep|docker …")?;
    let image = match mode.as_str() {
        "prep" => None,
        "docker" => {
            let image = it.next().ok_or("docker needs IMAGE IMAGE_ID")?;
            let id = it.next().ok_or("docker needs IMAGE IMAGE_ID")?;
            Some((image, id))
        }
        _ => return Err(format!("unknown mode {mode}")),
    };
    let mut args = Args {
        mode,
        image,
        files: 300,
        editable: 40,
        edited: 8,
        runs: 0,
    };
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let n = value.parse::<usize>().map_err(|e| format!("{flag}: {e}"))?;
        match flag.as_str() {
            "--files" => args.files = n,
            "--editable" => args.editable = n,
            "--edited" => args.edited = n,
            "--runs" => args.runs = n,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.runs == 0 {
        args.runs = if args.image.is_some() { 20 } else { 200 };
    }
    if !(1..=50).contains(&args.editable) || !(1..=args.editable).contains(&args.edited) {
        return Err("--editable must be 1..=50 and --edited 1..=--editable".to_owned());
    }
    if args.files < args.editable + 10 {
        return Err("--files must leave room for the editable and the ten read-only files".into());
    }
    Ok(args)
}

/// A Python-like module of `functions` small functions (20: about 2.5 KB), deterministic in
/// `seed`.
fn module(seed: usize, functions: usize) -> String {
    let mut text = format!("\"\"\"Module {seed}.\"\"\"\n\nimport math\n\n");
    for f in 0..functions {
        let _ = write!(
            text,
            "\ndef f_{seed}_{f}(x, y):\n    \"\"\"Returns a combination of x and y ({f}).\"\"\"\n    total = x * {f} + y\n    return math.floor(total / {})\n",
            f + 1
        );
    }
    text
}

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.invalid",
        ])
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The repository (one commit) and its commit id.
fn make_repository(repo: &Path, args: &Args) -> String {
    let write = |rel: String, text: String| {
        snapshot::testkit::write_files(repo, [(rel.as_str(), text.as_bytes(), false)]);
    };
    for i in 0..args.editable {
        write(format!("app/orders/m{i:02}.py"), module(i, 20));
    }
    for i in 0..10 {
        write(format!("tests/test_m{i:02}.py"), module(1000 + i, 12));
    }
    for i in 0..args.files - args.editable - 10 {
        let dir = ["lib/core", "lib/net", "docs", "tools", "web/static"][i % 5];
        write(format!("{dir}/f{i:03}.py"), module(2000 + i, 15));
    }
    git(repo, &["init", "-q"]);
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", "baseline"]);
    git(repo, &["rev-parse", "HEAD"])
}

fn approval(repo: &Path, commit: &str) -> ApprovedExecutionContext {
    let snap = GitSnapshot::load(repo, commit).unwrap();
    let doc = serde_json::json!({
        "schema_version": "managed_refinement.execution_context.v1",
        "handoff_id": "handoff-b", "request_id": "request-b", "plan_id": "plan-b",
        "app_id": "app-b", "build_registry_id": "build-b", "repository_full_name": REPOSITORY,
        "baseline_commit_sha": commit, "raw_request": TASK, "request_type": "change",
        "approved_plan_digest": "0".repeat(64),
        "snapshot_digest": snap.snapshot_digest(REPOSITORY).to_string(),
        "graph_identity_digest": "g", "impact_report_digest": "i",
        "execution_strategy_id": "s", "rationale": "benchmark approval",
        "allowed_paths": ["app/", "tests/"], "read_only_paths": ["tests/"],
    });
    ApprovedExecutionContext::from_json(&doc.to_string()).unwrap()
}

/// The parent: a turn that rewrote three lines in each of the first `edited` editable files
/// and added a function, finalised against the baseline like any turn, stored in `store`.
fn make_parent(
    repo: &Path,
    commit: &str,
    context: &ApprovedExecutionContext,
    edited: usize,
    store: &CandidateStore,
    after_dir: &Path,
) -> Sha256 {
    let policy = DefaultPathGuard::default();
    let snap = GitSnapshot::load(repo, commit).unwrap();
    let prepared = PreparedTurn::new(&snap, context, &policy, TASK, None, None).unwrap();
    let approved = prepared.approve().unwrap();
    let mut changed = Vec::new();
    for (i, (path, text)) in approved.baseline().iter().enumerate() {
        let after = if i < edited {
            let edited_text = text
                .replacen("    total = x * 3 + y\n", "    total = x * 3 - y\n", 1)
                .replacen("    total = x * 7 + y\n", "    total = (x + y) * 7\n", 1)
                .replacen(
                    "return math.floor(total / 12)",
                    "return math.ceil(total / 12)",
                    1,
                )
                + "\n\ndef checked(x):\n    \"\"\"Rejects negative input.\"\"\"\n    if x < 0:\n        raise ValueError(x)\n    return x\n";
            changed.push(ProposedFileChange {
                path: path.as_str().to_owned(),
                op: FileOp::Update,
                content: Some(edited_text.clone()),
            });
            edited_text
        } else {
            text.clone()
        };
        snapshot::testkit::write_files(after_dir, [(path.as_str(), after.as_bytes(), false)]);
    }
    let manifest = approved
        .baseline()
        .iter()
        .map(|(p, t)| (p.clone(), Sha256::of(t.as_bytes())))
        .collect();
    let workspace = StagedWorkspace::open_existing(after_dir, manifest, BTreeMap::new()).unwrap();
    let mut proposal: StagedPatchProposal = serde_json::from_value(serde_json::json!({
        "proposal_id": "parent", "provider_id": "synthetic", "status": "completed",
    }))
    .unwrap();
    proposal.changed_files = changed;
    proposal.owned_paths = prepared
        .selected()
        .iter()
        .map(|p| p.as_str().to_owned())
        .collect();
    let candidate = finalize_repository_patch(&approved, &workspace, &proposal).unwrap();
    assert_eq!(candidate.changed_files().len(), edited);
    store.put(&candidate).unwrap()
}

/// What a gate said of the parent, as a follow-up carries it: one failed gate, three new
/// failures and an output excerpt of the usual 4 KiB.
fn feedback(parent: &Sha256) -> ReviewFeedback {
    let mut excerpt = String::new();
    let mut i = 0;
    while excerpt.len() < 4000 {
        let _ = writeln!(
            excerpt,
            "tests/test_m0{}.py:{i}: in test_order_{i}\n    assert f_3_{i}(2, 5) == {i}\nE   AssertionError",
            i % 10
        );
        i += 1;
    }
    let excerpt = turn::excerpt_tail(&excerpt).unwrap().to_owned();
    let failures: Vec<String> = (0..3)
        .map(|i| format!("tests/test_m0{i}.py::test_order_{i}"))
        .collect();
    ReviewFeedback::new(parent, None, [("pytest", GateVerdict::Failed)])
        .unwrap()
        .with_gate_context("pytest", &failures, Some(&excerpt))
        .unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// (median, mean) in milliseconds.
fn stats(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let median = ms(samples[samples.len() / 2]);
    let mean = samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64;
    (median, mean)
}

fn summary(first: &mut [Duration], follow_up: &mut [Duration]) -> serde_json::Value {
    let (first_median, first_mean) = stats(first);
    let (follow_median, follow_mean) = stats(follow_up);
    serde_json::json!({
        "first_median_ms": first_median,
        "first_mean_ms": first_mean,
        "follow_up_median_ms": follow_median,
        "follow_up_mean_ms": follow_mean,
        "ratio_median": follow_median / first_median,
        "ratio_mean": follow_mean / first_mean,
    })
}

struct Bench<'a> {
    repo: &'a Path,
    commit: &'a str,
    context: &'a ApprovedExecutionContext,
    policy: &'a DefaultPathGuard,
    config: &'a TurnConfig,
    staging: &'a Path,
    store: &'a CandidateStore,
}

impl Bench<'_> {
    fn request<'b>(
        &'b self,
        parent: Option<(&'b ReviewFeedback, &'b ParentCandidate)>,
    ) -> PipelineRequest<'b> {
        PipelineRequest {
            repo: self.repo,
            commit: self.commit,
            context: self.context,
            task: TASK,
            selected: None,
            read_only: None,
            policy: self.policy,
            config: self.config,
            staging_parent: self.staging,
            store: Some(self.store),
            ledger: None,
            user_id: "bench",
            review_feedback: parent.map(|(f, _)| f),
            parent: parent.map(|(_, p)| p),
        }
    }

    /// The trusted side of a first turn before the container.
    fn prep_first(&self) {
        verify_pipeline_request(&self.request(None)).unwrap();
    }

    /// The trusted side of a follow-up before the container: the parent read from the store,
    /// then everything a first turn does plus its starting tree and `start_from`.
    fn prep_follow_up(&self, digest: &Sha256, feedback: &ReviewFeedback) {
        let parent = ParentCandidate::load(self.store, digest).unwrap();
        verify_pipeline_request(&self.request(Some((feedback, &parent)))).unwrap();
    }

    /// One whole turn; the proof agent appends a line to the first editable file, so a first
    /// turn changes one file and a follow-up its parent's files (the first among them).
    async fn turn(
        &self,
        docker: &BollardRuntime,
        follow_up: Option<(&Sha256, &ReviewFeedback)>,
    ) -> [u128; 3] {
        let (outcome, expected) = match follow_up {
            None => (run_pipeline(docker, self.request(None)).await.unwrap(), 1),
            Some((digest, feedback)) => {
                let parent = ParentCandidate::load(self.store, digest).unwrap();
                let files = parent.candidate().changed_files().len();
                let request = self.request(Some((feedback, &parent)));
                (run_pipeline(docker, request).await.unwrap(), files)
            }
        };
        assert_eq!(outcome.candidate.changed_files().len(), expected);
        let t = &outcome.timings;
        [t.snapshot_ms, t.turn_ms, t.stage_finalize_ms]
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let work = tempfile::tempdir().unwrap();
    let repo = work.path().join("repo");
    let commit = make_repository(&repo, &args);
    let context = approval(&repo, &commit);
    let store = CandidateStore::open(&work.path().join("candidates")).unwrap();
    let digest = make_parent(
        &repo,
        &commit,
        &context,
        args.edited,
        &store,
        &work.path().join("parent-after"),
    );
    let feedback = feedback(&digest);
    let (image, image_id) = args.image.clone().unwrap_or_else(|| {
        (
            "patch-candidate-proof:local".to_owned(),
            format!("sha256:{}", "0".repeat(64)),
        )
    });
    let config = TurnConfig::parse(&image, &image_id, 90, 16_777_216).unwrap();
    let policy = DefaultPathGuard::default();
    let staging = work.path().join("staging");
    std::fs::create_dir(&staging).unwrap();
    let bench = Bench {
        repo: &repo,
        commit: &commit,
        context: &context,
        policy: &policy,
        config: &config,
        staging: &staging,
        store: &store,
    };

    // The shape of what was measured: payload sizes and the starting tree.
    let snap = GitSnapshot::load(&repo, &commit).unwrap();
    let prepared = PreparedTurn::new(&snap, &context, &policy, TASK, None, None).unwrap();
    let first_payload = stdin_payload(prepared.request(), &context).unwrap().len();
    let parent = ParentCandidate::load(&store, &digest).unwrap();
    let start = StartFrom::of_parent(&parent, &context, &prepared.request().files).unwrap();
    let mut request = prepared.request().clone();
    request.review_feedback = Some(feedback.clone());
    request.start_from = Some(start);
    let follow_payload = stdin_payload(&request, &context).unwrap().len();
    let parent_bytes = std::fs::read(
        work.path()
            .join("candidates")
            .join(format!("{}.json", digest.bare_hex())),
    )
    .map_or(0, |b| b.len());
    let mut doc = serde_json::json!({
        "mode": args.mode,
        "runs": args.runs,
        "repository_files": snap.manifest().len(),
        "selected_editable": prepared.selected().len(),
        "selected_read_only": prepared.read_only().len(),
        "parent_changed_files": parent.candidate().changed_files().len(),
        "parent_candidate_bytes": parent_bytes,
        "stdin_bytes_first": first_payload,
        "stdin_bytes_follow_up": follow_payload,
    });

    let (mut first, mut follow_up) = (Vec::new(), Vec::new());
    if args.image.is_none() {
        // The follow-up's own parts: the parent read from the store and the starting tree.
        let (mut load, mut overlay) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            bench.prep_first();
            bench.prep_follow_up(&digest, &feedback);
        }
        for _ in 0..args.runs {
            let t = Instant::now();
            bench.prep_first();
            first.push(t.elapsed());
            let t = Instant::now();
            bench.prep_follow_up(&digest, &feedback);
            follow_up.push(t.elapsed());
            let t = Instant::now();
            let parent = ParentCandidate::load(&store, &digest).unwrap();
            load.push(t.elapsed());
            let t = Instant::now();
            StartFrom::of_parent(&parent, &context, &prepared.request().files).unwrap();
            overlay.push(t.elapsed());
        }
        let result = summary(&mut first, &mut follow_up);
        let map = doc.as_object_mut().unwrap();
        map.extend(result.as_object().unwrap().clone());
        map.insert("parent_load_median_ms".into(), stats(&mut load).0.into());
        map.insert("of_parent_median_ms".into(), stats(&mut overlay).0.into());
    } else {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut phases = (Vec::new(), Vec::new());
        rt.block_on(async {
            let docker = BollardRuntime::connect(Path::new(container::DEFAULT_DOCKER_SOCKET))
                .await
                .unwrap();
            // Warm-up: one of each.
            bench.turn(&docker, None).await;
            bench.turn(&docker, Some((&digest, &feedback))).await;
            for _ in 0..args.runs {
                let t = Instant::now();
                phases.0.push(bench.turn(&docker, None).await);
                first.push(t.elapsed());
                let t = Instant::now();
                phases
                    .1
                    .push(bench.turn(&docker, Some((&digest, &feedback))).await);
                follow_up.push(t.elapsed());
            }
        });
        let result = summary(&mut first, &mut follow_up);
        let map = doc.as_object_mut().unwrap();
        map.extend(result.as_object().unwrap().clone());
        // The pipeline's own phase clocks (whole milliseconds): before the container, the
        // container, and stage + finalise + digest + store after it.
        for (name, runs) in [("first", &phases.0), ("follow_up", &phases.1)] {
            let median = |phase: usize| {
                let mut v: Vec<u128> = runs.iter().map(|t| t[phase]).collect();
                v.sort_unstable();
                v[v.len() / 2]
            };
            map.insert(
                format!("{name}_phase_median_ms"),
                serde_json::json!({
                    "snapshot": median(0),
                    "turn": median(1),
                    "stage_finalize": median(2),
                }),
            );
        }
    }
    println!("{doc}");
}
