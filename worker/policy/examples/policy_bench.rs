//! Policy scan benchmark: `scan` over generated 10 MiB candidates, side by side with the
//! candidate digest alone (which `scan` includes), a newline count (the floor of any pass over
//! the bytes) and the policy pass with the rule file of version 2026.12.1 (the 32 rules before
//! the whole gitleaks set, `benches/policy/rules-2026.12.1.toml`). Prints p50 / p90 / min over
//! the runs, then the recall by value of both rule sets over the generated corpus
//! (`tests/corpus/secrets.jsonl`).
//! Usage: `policy_bench [RUNS]` (default 31).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "bench"
)]
#![allow(clippy::print_stdout, reason = "bench output")]

use std::time::{Duration, Instant};

use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile, unified_diff};
use snapshot::{FileOp, RepoPath};
use vocab::Sha256;

const TARGET: usize = 10 * 1024 * 1024;

fn fields(n: usize) -> CandidateFields {
    CandidateFields {
        handoff_id: "h".into(),
        request_id: "r".into(),
        plan_id: "p".into(),
        app_id: "a".into(),
        build_registry_id: "b".into(),
        repository_full_name: "acme/widgets".into(),
        baseline_commit_sha: "a".repeat(40),
        approved_plan_digest: "b".repeat(64),
        snapshot_digest: format!("sha256:{}", "c".repeat(64)),
        proposal_id: "p".into(),
        provider_id: "synthetic".into(),
        summary: format!("Approved repository file operations: {n}."),
        rationale: finalizer::CANDIDATE_RATIONALE.into(),
        required_validation_gates: vec![],
        required_security_gates: vec![],
        required_ci_checks: vec![],
    }
}

fn file(path: &str, before: Option<&str>, after: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        RepoPath::parse(path).unwrap(),
        if before.is_some() {
            FileOp::Update
        } else {
            FileOp::Create
        },
        before.map(|b| Sha256::of(b.as_bytes())),
        Some(Sha256::of(after.as_bytes())),
        Some(after.to_owned()),
        unified_diff(path, before, Some(after)),
    )
    .unwrap()
}

/// Source-like lines; about one in eight names a credential-ish word (a prefilter hit).
fn code(bytes: usize, seed: usize) -> String {
    let templates = [
        "def handler_{i}(request, context):\n",
        "    value_{i} = compute(request.args[{i}], limit=4096)\n",
        "    if value_{i} is None:\n",
        "        raise ValueError(\"missing argument {i}\")\n",
        "    token_{i} = session.get_token(user_id)  # refresh later\n",
        "    result.append(format_row(value_{i}, width=80))\n",
        "    return render(template, rows=result, page={i})\n",
        "\n",
    ];
    let mut out = String::with_capacity(bytes + 128);
    let mut i = seed;
    while out.len() < bytes {
        out.push_str(&templates[i % templates.len()].replace("{i}", &i.to_string()));
        i += 1;
    }
    out
}

fn candidate(files: Vec<RepositoryPatchFile>) -> RepositoryPatchCandidate {
    let mut files = files;
    files.sort_by(|a, b| a.path().cmp(b.path()));
    let n = files.len();
    RepositoryPatchCandidate::new(fields(n), files).unwrap()
}

/// 20 created source files of 512 KiB.
fn creates() -> RepositoryPatchCandidate {
    candidate(
        (0..20)
            .map(|i| {
                file(
                    &format!("app/mod{i:02}.py"),
                    None,
                    &code(TARGET / 20, i * 7919),
                )
            })
            .collect(),
    )
}

/// 20 updates of 512 KiB post-images with an edit every 50 lines (the diff is walked).
fn updates() -> RepositoryPatchCandidate {
    candidate(
        (0..20)
            .map(|i| {
                let before = code(TARGET / 20, i * 104_729);
                let after: String = before
                    .split_inclusive('\n')
                    .enumerate()
                    .map(|(n, l)| {
                        if n % 50 == 0 {
                            format!("    log.debug(\"edited {n}\")\n{l}")
                        } else {
                            l.to_owned()
                        }
                    })
                    .collect();
                file(&format!("app/old{i:02}.py"), Some(&before), &after)
            })
            .collect(),
    )
}

/// Ten files of 1 MiB of `x = 1` lines: about 1.7 million lines.
fn short_lines() -> RepositoryPatchCandidate {
    candidate(
        (0..10)
            .map(|i| {
                file(
                    &format!("data/f{i}.txt"),
                    None,
                    &"x = 1\n".repeat(TARGET / 60),
                )
            })
            .collect(),
    )
}

/// 20 created files of 512 KiB made of the benign corpus (`tests/corpus/benign.txt`): nearly
/// every line holds a credential-ish keyword (`key`, `token`, `api`, `auth`, `s.`), the worst
/// case for the rules' regexes.
fn keyword_dense() -> RepositoryPatchCandidate {
    let lines: Vec<&str> = include_str!("../tests/corpus/benign.txt").lines().collect();
    candidate(
        (0..20)
            .map(|i| {
                let mut text = String::with_capacity(TARGET / 20 + 256);
                let mut n = i * 31;
                while text.len() < TARGET / 20 {
                    text.push_str(lines[n % lines.len()]);
                    text.push('\n');
                    n += 1;
                }
                file(&format!("app/dense{i:02}.py"), None, &text)
            })
            .collect(),
    )
}

fn stats(mut d: Vec<Duration>) -> String {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1000.0;
    format!(
        "p50 {:7.2} ms  p90 {:7.2} ms  min {:7.2} ms",
        ms(d[d.len() / 2]),
        ms(d[d.len() * 9 / 10]),
        ms(d[0])
    )
}

fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> Vec<Duration> {
    std::hint::black_box(f());
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed()
        })
        .collect()
}

/// The 2026.12.1 rule file in today's schema: every rule marked with an origin, an empty global
/// allow-list (that file had none).
fn old_rules() -> policy::measure::Rules {
    let text = include_str!("../../../benches/policy/rules-2026.12.1.toml");
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        out.push('\n');
        if line.starts_with("version = ") {
            out.push_str("[allowlist]\ndescription = \"none\"\nregexes = []\nstopwords = []\n");
        }
        if line.starts_with("id = ") {
            out.push_str("origin = \"2026.12.1\"\n");
        }
    }
    policy::measure::Rules::compile(&out).unwrap()
}

/// Recall by value over the generated corpus: rules whose sample fires that rule, and rules
/// whose sample fires any secret rule.
fn recall(
    scan: impl Fn(&RepositoryPatchCandidate) -> policy::PolicyReport,
) -> (usize, usize, usize) {
    let (mut exact, mut any, mut total) = (0, 0, 0);
    for line in include_str!("../tests/corpus/secrets.jsonl").lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        if case["kind"] != "generated" {
            continue;
        }
        total += 1;
        let path = case["path"].as_str().unwrap();
        let text = format!("{}\n", case["line"].as_str().unwrap());
        let report = scan(&candidate(vec![file(path, None, &text)]));
        let secrets: Vec<&str> = report
            .findings
            .iter()
            .filter(|f| f.kind == policy::FindingKind::Secret)
            .map(|f| f.rule_id.as_str())
            .collect();
        exact += usize::from(secrets.contains(&case["rule"].as_str().unwrap()));
        any += usize::from(!secrets.is_empty());
    }
    (exact, any, total)
}

fn p50(mut d: Vec<Duration>) -> f64 {
    d.sort();
    d[d.len() / 2].as_secs_f64() * 1000.0
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .map_or(31, |a| a.parse().expect("RUNS is a number"));
    let old = old_rules();
    let shipped = include_str!("../rules/policy.toml");
    println!(
        "rule file compile (once per process): this {}, 2026.12.1 {}",
        stats(time(runs.min(11), || policy::measure::Rules::compile(
            shipped
        )
        .unwrap())),
        stats(time(runs.min(11), old_rules))
    );
    for (name, c) in [
        ("creates, 20 x 512 KiB source", creates()),
        ("updates, 20 x 512 KiB, an edit every 50 lines", updates()),
        ("creates, 10 x 1 MiB of 6-byte lines", short_lines()),
        (
            "creates, 20 x 512 KiB of keyword-dense lines",
            keyword_dense(),
        ),
    ] {
        let bytes: usize = c
            .changed_files()
            .iter()
            .filter_map(|f| f.content())
            .map(str::len)
            .sum();
        let report = policy::scan(&c).unwrap();
        println!(
            "{name}: {:.1} MiB post-images, {} added lines, {} findings",
            bytes as f64 / 1_048_576.0,
            report.added_lines_scanned,
            report.findings_total
        );
        println!(
            "  policy::scan (digest included)       {}",
            stats(time(runs, || policy::scan(&c).unwrap()))
        );
        let digest = finalizer::repository_patch_digest(&c).unwrap();
        let new = time(runs, || policy::scan_with_digest(&c, digest).unwrap());
        println!(
            "  policy::scan_with_digest (policy)    {}",
            stats(new.clone())
        );
        let old_report = old.scan_with_digest(&c, digest);
        let was = time(runs, || old.scan_with_digest(&c, digest));
        println!(
            "  same pass, rules 2026.12.1 ({} findings) {}",
            old_report.findings_total,
            stats(was.clone())
        );
        println!(
            "  ratio of p50s (this / 2026.12.1)     {:.2}x",
            p50(new) / p50(was)
        );
        println!(
            "  baseline: repository_patch_digest    {}",
            stats(time(runs, || finalizer::repository_patch_digest(&c).unwrap()))
        );
        println!(
            "  floor: newline count (memchr)        {}",
            stats(time(runs, || {
                c.changed_files()
                    .iter()
                    .filter_map(|f| f.content())
                    .map(|t| memchr::memchr_iter(b'\n', t.as_bytes()).count())
                    .sum::<usize>()
            }))
        );
    }
    let digest_of = |c: &RepositoryPatchCandidate| finalizer::repository_patch_digest(c).unwrap();
    let (exact, any, total) = recall(|c| policy::scan_with_digest(c, digest_of(c)).unwrap());
    println!(
        "recall by value, this rule set: {exact} of {total} rules fire their own rule, {any} of {total} fire some secret rule"
    );
    let (exact, any, total) = recall(|c| old.scan_with_digest(c, digest_of(c)));
    println!(
        "recall by value, rules 2026.12.1: {exact} of {total} rules fire their own rule, {any} of {total} fire some secret rule"
    );
}
