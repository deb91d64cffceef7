use finalizer::testkit;
use pretty_assertions::assert_eq;

use super::*;

const BASE: &str = "one\ntwo\nthree\n";

/// A file entry as the finalizer writes it: the diff from `before` (the baseline) to `after`.
fn file(path: &str, before: Option<&str>, after: Option<&str>) -> RepositoryPatchFile {
    match (before, after) {
        (None, Some(after)) => testkit::create(path, after),
        (Some(before), Some(after)) => testkit::update(path, before, after),
        (Some(before), None) => testkit::delete(path, before),
        (None, None) => panic!("{path}: a file entry has a before, an after or both"),
    }
}

fn attempt(approval: &str, files: Vec<RepositoryPatchFile>) -> RepositoryPatchCandidate {
    let fields = finalizer::CandidateFields {
        repository_full_name: "o/n".into(),
        baseline_commit_sha: "c".repeat(40),
        approved_plan_digest: approval.repeat(64),
        ..finalizer::CandidateFields::default()
    };
    RepositoryPatchCandidate::new(fields, files).unwrap()
}

/// The later attempt answers a review: it changes `app.py` further, leaves `old.py` as the
/// baseline has it (the earlier attempt deleted it), adds `new.py`, and makes the same change to
/// `same.py`, which is left out.
#[test]
fn the_diff_between_attempts_goes_from_one_post_image_to_the_next() {
    let earlier = attempt(
        "0",
        vec![
            file("app.py", Some(BASE), Some("one\n2\nthree\n")),
            file("old.py", Some("gone\n"), None),
            file("same.py", Some(BASE), Some("same\n")),
        ],
    );
    let later = attempt(
        "0",
        vec![
            file("app.py", Some(BASE), Some("one\n2\nthree\nfour\n")),
            file("new.py", None, Some("new\n")),
            file("same.py", Some(BASE), Some("same\n")),
        ],
    );
    let d = attempt_diff(&earlier, &later).unwrap();
    let summary: Vec<(&str, AttemptChange)> =
        d.iter().map(|f| (f.path.as_str(), f.change)).collect();
    assert_eq!(
        summary,
        vec![
            ("app.py", AttemptChange::Changed),
            ("new.py", AttemptChange::Added),
            ("old.py", AttemptChange::Reverted),
        ]
    );
    assert_eq!(
        d[0].diff,
        unified_diff(
            "app.py",
            Some("one\n2\nthree\n"),
            Some("one\n2\nthree\nfour\n")
        )
    );
    assert!(d[0].diff.contains("\n+four\n") && !d[0].diff.contains("-two"));
    assert_eq!(d[1].diff, unified_diff("new.py", None, Some("new\n")));
    // The earlier deletion, undone: a creation of the baseline's bytes.
    assert_eq!(d[2].diff, unified_diff("old.py", None, Some("gone\n")));
    // Nothing differs between an attempt and itself.
    assert!(attempt_diff(&later, &later).unwrap().is_empty());
}

#[test]
fn attempts_of_another_approval_or_baseline_are_refused() {
    let a = attempt("0", vec![file("app.py", Some(BASE), Some("x\n"))]);
    let b = attempt("1", vec![file("app.py", Some(BASE), Some("y\n"))]);
    let e = attempt_diff(&a, &b).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_REVIEW_CHAIN");
}

/// A reversed diff is the diff of the swapped sides, for updates, creations, deletions, several
/// hunks, multi-line blocks and files without a final newline.
#[test]
fn a_reversed_diff_is_the_diff_of_the_swapped_sides() {
    let long: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    let edited = long
        .replace("line 2\n", "line two\nline two and a half\n")
        .replace("line 25\n", "");
    let cases: [(Option<&str>, Option<&str>); 7] = [
        (None, Some("")),
        (Some(BASE), Some("one\n2\nthree\n")),
        (None, Some("x\ny\n")),
        (Some("x\ny\n"), None),
        (Some(&long), Some(&edited)),
        (Some("a\nb"), Some("a\nc")),
        (Some("a\nb\n"), Some("a\nb")),
    ];
    for (i, (before, after)) in cases.into_iter().enumerate() {
        let forward = unified_diff("p.txt", before, after);
        assert_eq!(
            reverse_diff(&forward),
            unified_diff("p.txt", after, before),
            "case {i}"
        );
        assert_eq!(reverse_diff(&reverse_diff(&forward)), forward, "case {i}");
    }
}
