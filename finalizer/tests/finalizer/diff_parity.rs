//! `unified_diff` against CPython difflib (via the Python oracle) and against `git apply`.

use std::path::Path;

use finalizer::{DiffMode, unified_diff, unified_diff_with_budget};
use serde_json::json;

use crate::support::{Rng, git_ok, git_with_stdin, repo_with, run_oracle};

const BODIES: &[&str] = &[
    "",
    "a",
    "b",
    "c",
    "def answer():",
    "    return 1",
    "    return 2",
    "x = 1",
    "x = 2",
    "é ü ß",
    "日本語のテキスト",
    "🎉 astral 𝄞",
    "tab\there",
    "trailing  ",
    "}",
    "{",
    "#",
    "if x:",
    "        pass",
    "\\ backslash",
    "-dash",
    "+plus",
    "@@ not a hunk @@",
];
const LF_ENDINGS: &[&str] = &["\n", "\n", "\n", "\n", "\r\n"];
const ODD_ENDINGS: &[&str] = &[
    "\r", "\u{b}", "\u{c}", "\u{1c}", "\u{1d}", "\u{1e}", "\u{85}", "\u{2028}", "\u{2029}",
];

struct Case {
    path: String,
    before: Option<String>,
    after: Option<String>,
}

fn random_lines(rng: &mut Rng, n: usize, vocab: usize, odd: bool) -> Vec<String> {
    (0..n)
        .map(|_| {
            let body = BODIES[rng.below(vocab.min(BODIES.len()))];
            let odd_line = odd && rng.below(6) == 0;
            let ending = if odd_line {
                *rng.pick(ODD_ENDINGS)
            } else {
                *rng.pick(LF_ENDINGS)
            };
            format!("{body}{ending}")
        })
        .collect()
}

fn mutate(rng: &mut Rng, lines: &[String], odd: bool) -> Vec<String> {
    let mut out = lines.to_vec();
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        let pos = if out.is_empty() {
            0
        } else {
            rng.below(out.len() + 1)
        };
        match rng.below(4) {
            0 if pos < out.len() => {
                out.remove(pos);
            }
            1 if pos < out.len() => out[pos] = random_lines(rng, 1, BODIES.len(), odd).remove(0),
            _ => {
                let count = 1 + rng.below(3);
                let new = random_lines(rng, count, BODIES.len(), odd);
                for (k, l) in new.into_iter().enumerate() {
                    out.insert(pos + k, l);
                }
            }
        }
    }
    out
}

fn join(lines: &[String], drop_final_newline: bool) -> String {
    let mut s: String = lines.concat();
    if drop_final_newline {
        while s.ends_with('\n') || s.ends_with('\r') {
            s.pop();
        }
    }
    s
}

fn cases() -> Vec<Case> {
    let mut rng = Rng::new(0x5eed_d1ff);
    let mut out = Vec::new();
    let add = |before: Option<String>, after: Option<String>, out: &mut Vec<Case>| {
        let i = out.len();
        let path = match i % 7 {
            0 => format!("c{i}/my file é.txt"),
            1 => format!("c{i}/deep/nested/mod.rs"),
            _ => format!("c{i}/f.txt"),
        };
        out.push(Case {
            path,
            before,
            after,
        });
    };
    for k in 0..700 {
        let odd = k % 5 == 0;
        let (n, vocab) = match k % 10 {
            0..=5 => (rng.below(16), BODIES.len()),
            6 | 7 => (200 + rng.below(200), 6), // 200+ lines, few distinct: autojunk drops popular lines
            8 => (200 + rng.below(300), BODIES.len()),
            _ => (20 + rng.below(60), 3),
        };
        let lines = random_lines(&mut rng, n, vocab, odd);
        let changed = mutate(&mut rng, &lines, odd);
        let before = join(&lines, rng.below(4) == 0);
        let after = join(&changed, rng.below(4) == 0);
        match k % 13 {
            0 => add(None, Some(after), &mut out),
            1 => add(Some(before), None, &mut out),
            _ => add(Some(before), Some(after), &mut out),
        }
    }
    // Fixed edge cases.
    for (before, after) in [
        (Some(""), Some("x\n")),
        (Some("x\n"), Some("")),
        (Some("x"), Some("x\n")),
        (Some("x\n"), Some("x")),
        (Some("a\r\nb\r\nc\r\n"), Some("a\r\nB\r\nc\r\n")),
        (Some("a\r\nb\r\nc"), Some("a\r\nb\r\nc\r\n")),
        (Some("a\rb\rc"), Some("a\rB\rc")),
        (Some("page\u{c}two\n"), Some("page\u{c}2\n")),
        (Some("l1\u{2028}l2\n"), Some("l1\u{2028}L2\n")),
        (None, Some("")),
        (Some("same\n"), Some("same\n")),
        (None, Some("no newline")),
        (Some("only line"), None),
        (Some("é\n"), Some("è\n")),
    ] {
        add(
            before.map(str::to_owned),
            after.map(str::to_owned),
            &mut out,
        );
    }
    // The classic autojunk shape: one line repeated far more than 1% of 300 lines.
    let many: String = (0..300)
        .map(|i| {
            if i % 3 == 0 {
                "}\n".to_owned()
            } else {
                format!("line {i}\n")
            }
        })
        .collect();
    let edited = many
        .replace("line 150\n", "line one-fifty\n")
        .replace("line 7\n", "");
    add(Some(many), Some(edited), &mut out);
    out
}

#[test]
fn diffs_are_byte_identical_to_python_difflib() {
    let cases = cases();
    let input: Vec<_> = cases
        .iter()
        .map(|c| json!({"path": c.path, "before": c.before, "after": c.after}))
        .collect();
    let expected = run_oracle("difflib_oracle.py", &json!(input));
    let expected = expected.as_array().unwrap();
    assert_eq!(expected.len(), cases.len());
    let mut modes = [0_usize; 3];
    for (case, want) in cases.iter().zip(expected) {
        let got = unified_diff_with_budget(
            &case.path,
            case.before.as_deref(),
            case.after.as_deref(),
            finalizer::DEFAULT_WORK_BUDGET,
        );
        modes[match got.mode {
            DiffMode::Difflib => 0,
            DiffMode::GitLines => 1,
            DiffMode::WholeFile => 2,
        }] += 1;
        assert_eq!(
            got.text,
            want.as_str().unwrap(),
            "case {}: {:?} -> {:?}",
            case.path,
            case.before,
            case.after
        );
    }
    // The generator really exercises both line models and never hits the work budget.
    assert!(modes[0] > 300 && modes[1] > 50, "{modes:?}");
    assert_eq!(modes[2], 0);
}

#[test]
fn every_diff_applies_with_git_and_yields_the_exact_bytes() {
    let cases = cases();
    let baseline: Vec<(String, String)> = cases
        .iter()
        .filter_map(|c| c.before.clone().map(|b| (c.path.clone(), b)))
        .collect();
    let (repo, _) = repo_with(&baseline);
    let mut patch = String::new();
    let mut checked = Vec::new();
    for case in &cases {
        let diff = unified_diff(&case.path, case.before.as_deref(), case.after.as_deref());
        if diff.is_empty() {
            // Only "no line differs" produces an empty diff: equal text, or an empty file
            // created or deleted (which Git needs a header-only patch for; see `verify`).
            let before = case.before.as_deref().unwrap_or("");
            let after = case.after.as_deref().unwrap_or("");
            assert_eq!(before, after, "{}", case.path);
            continue;
        }
        // Each file's diff applies on its own…
        let out = git_with_stdin(
            repo.path(),
            &["apply", "--check", "-"],
            Some(diff.as_bytes()),
        );
        assert!(
            out.status.success(),
            "{}: {}\n{diff}",
            case.path,
            String::from_utf8_lossy(&out.stderr)
        );
        patch.push_str(&diff);
        checked.push(case);
    }
    // …and all of them together apply to exactly the staged bytes.
    git_apply(repo.path(), &patch);
    for case in checked {
        let on_disk = std::fs::read(repo.path().join(&case.path));
        match &case.after {
            Some(after) => assert_eq!(on_disk.unwrap(), after.as_bytes(), "{}", case.path),
            None => assert!(on_disk.is_err(), "{} should be deleted", case.path),
        }
    }
    git_ok(repo.path(), &["status", "--short"]);
}

/// Applies `patch` to the work tree at `dir` with `git apply`, which must succeed.
fn git_apply(dir: &Path, patch: &str) {
    let out = git_with_stdin(dir, &["apply", "-"], Some(patch.as_bytes()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The diff of `before` → `after` at `path` under the default work budget applies with
/// `git apply` to exactly `after`; its mode.
fn budgeted_diff_applies(path: &str, before: &str, after: &str) -> DiffMode {
    let d = unified_diff_with_budget(
        path,
        Some(before),
        Some(after),
        finalizer::DEFAULT_WORK_BUDGET,
    );
    let (repo, _) = repo_with(&[(path.to_owned(), before.to_owned())]);
    git_apply(repo.path(), &d.text);
    assert_eq!(
        std::fs::read(repo.path().join(path)).unwrap(),
        after.as_bytes()
    );
    d.mode
}

#[test]
fn adversarial_inputs_stay_bounded_and_still_apply() {
    // Two unrelated ~300 KB files whose lines each repeat just under the autojunk threshold: the
    // matcher's quadratic worst case. The budget cuts it off and a whole-file hunk is emitted.
    let lines_a: Vec<String> = (0..12_000)
        .map(|i| format!("alpha {:03}\n", i % 121))
        .collect();
    let lines_b: Vec<String> = (0..12_000)
        .map(|i| format!("alpha {:03}\n", (i * 7 + 3) % 121))
        .collect();
    let (a, b) = (lines_a.concat(), lines_b.concat());
    assert_eq!(
        budgeted_diff_applies("big.txt", &a, &b),
        DiffMode::WholeFile
    );

    // Thousands of identical lines: autojunk makes this cheap and exact (no fallback).
    let same_a = "x\n".repeat(20_000);
    let same_b = format!("{}y\n{}", "x\n".repeat(10_000), "x\n".repeat(10_000));
    assert_ne!(
        budgeted_diff_applies("same.txt", &same_a, &same_b),
        DiffMode::WholeFile
    );
}
