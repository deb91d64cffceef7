//! A base branch that moved: refused by default; with a rebase, merged with `merge-tree`, gated
//! again on exactly the merged tree (a real callback reading the tree), published only on pass.

use std::cell::Cell;
use std::process::Command;

use pretty_assertions::assert_eq;
use publish::{MergedCommit, RegateVerdict, prepare, publish};

use crate::support::{Fixture, Request, git};

/// Reads `path` from the merged tree in the mirror, as a gate would.
fn read_merged(merged: &MergedCommit<'_>, path: &str) -> Option<String> {
    let out = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .arg("--git-dir")
        .arg(merged.git_dir())
        .args(["cat-file", "blob", &format!("{}:{path}", merged.tree_id())])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8(out.stdout).unwrap())
}

#[test]
fn a_moved_base_is_refused_by_default() {
    let fx = Fixture::new();
    let tip = fx.move_base(&[("CHANGELOG.md", "moved\n", false)]);
    let request = Request::new(fx.remote(), "candidate/moved");
    let err = publish(&request.build(&fx, None)).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_BASE_MOVED");
    assert!(
        err.to_string().contains(&tip) && err.to_string().contains(&fx.baseline),
        "{err}"
    );
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/moved"));
}

#[test]
fn a_base_that_moves_after_the_recheck_fails_the_atomic_push() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/late");
    let prepared = prepare(&request.build(&fx, None)).unwrap();
    assert_eq!(prepared.base_tip_seen(), fx.baseline);
    let tip = fx.move_base(&[("CHANGELOG.md", "moved late\n", false)]);
    let err = prepared.push().unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_BASE_MOVED");
    assert!(err.to_string().contains(&tip), "{err}");
    let refs = fx.remote_refs();
    assert!(!refs.contains_key("refs/heads/candidate/late"));
    assert_eq!(refs["refs/heads/main"], tip, "the base is never written");
}

#[test]
fn a_retry_after_the_base_moved_is_still_the_same_publication() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/retry");
    let first = publish(&request.build(&fx, None)).unwrap();
    // The answer was lost; meanwhile the base moved. A retry prepared before the move...
    let retry = prepare(&request.build(&fx, None)).unwrap();
    fx.move_base(&[("CHANGELOG.md", "moved\n", false)]);
    let again = retry.push().unwrap();
    assert!(!again.created);
    assert_eq!(again.commit_id, first.commit_id);
}

#[test]
fn with_rebase_the_merged_tree_is_gated_and_published_on_pass() {
    let fx = Fixture::new();
    let tip = fx.move_base(&[("CHANGELOG.md", "moved\n", false)]);
    let calls = Cell::new(0);
    let gate = |merged: &MergedCommit<'_>| {
        calls.set(calls.get() + 1);
        assert_eq!(merged.base_tip(), tip);
        // Both sides are in the tree the gate sees: the base's new file and the candidate's edit.
        let both = read_merged(merged, "CHANGELOG.md").as_deref() == Some("moved\n")
            && read_merged(merged, "docs/keep.txt").as_deref() == Some("one\n2\nthree\n")
            && read_merged(merged, "old/gone.txt").is_none();
        if both {
            RegateVerdict::Passed
        } else {
            RegateVerdict::Failed
        }
    };
    let request = Request::new(fx.remote(), "candidate/rebased");
    let prepared = prepare(&request.build(&fx, Some(&gate))).unwrap();
    assert_eq!(calls.get(), 1);
    assert!(prepared.rebased());
    let recorded = prepared.commit_id().to_owned();
    let record = prepared.push().unwrap();
    assert!(record.rebased && record.created);
    assert_eq!(record.commit_id, recorded);
    assert_eq!(record.base_tip_seen, tip);
    let remote = &fx.remote_dir;
    assert_eq!(fx.remote_refs()["refs/heads/candidate/rebased"], recorded);
    assert_eq!(git(remote, &["rev-parse", &format!("{recorded}^")]), tip);
    assert_eq!(
        git(
            remote,
            &["rev-list", "--count", &format!("{tip}..{recorded}")]
        ),
        "1"
    );
    let meta = git(remote, &["cat-file", "commit", &recorded]);
    assert!(meta.contains(&format!("Rebased-Onto: {tip}")), "{meta}");
    // The merged tree is the base's tree with the candidate applied on top.
    assert_eq!(
        git(remote, &["show", &format!("{recorded}:CHANGELOG.md")]),
        "moved"
    );
    assert_eq!(
        git(remote, &["show", &format!("{recorded}:docs/keep.txt")]),
        "one\n2\nthree"
    );
    let modes = git(remote, &["ls-tree", "-r", &recorded]);
    assert!(
        modes
            .lines()
            .any(|l| l.starts_with("100755") && l.ends_with("\tbin/run.sh"))
    );

    // Deterministic as well.
    let again = Request::new(fx.remote(), "candidate/rebased-2");
    assert_eq!(
        prepare(&again.build(&fx, Some(&gate))).unwrap().commit_id(),
        recorded
    );
}

#[test]
fn with_rebase_a_failing_gate_publishes_nothing() {
    let fx = Fixture::new();
    fx.move_base(&[("CHANGELOG.md", "moved\n", false)]);
    let fail = |merged: &MergedCommit<'_>| {
        // The gate finds the base's change breaks the build.
        if read_merged(merged, "CHANGELOG.md").is_some() {
            RegateVerdict::Failed
        } else {
            RegateVerdict::Passed
        }
    };
    let request = Request::new(fx.remote(), "candidate/gated");
    assert_eq!(
        request.refused(&fx, Some(&fail)),
        "PATCH_CANDIDATE_PUBLISH_REGATE_FAILED"
    );
    let unavailable = |_: &MergedCommit<'_>| RegateVerdict::Unavailable;
    assert_eq!(
        request.refused(&fx, Some(&unavailable)),
        "PATCH_CANDIDATE_PUBLISH_REGATE_UNAVAILABLE"
    );
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/gated"));
}

#[test]
fn with_rebase_a_conflict_is_a_clean_refusal() {
    let fx = Fixture::new();
    fx.move_base(&[("docs/keep.txt", "one\nTWO\nthree\n", false)]);
    let calls = Cell::new(0);
    let gate = |_: &MergedCommit<'_>| {
        calls.set(calls.get() + 1);
        RegateVerdict::Passed
    };
    let request = Request::new(fx.remote(), "candidate/conflict");
    assert_eq!(
        request.refused(&fx, Some(&gate)),
        "PATCH_CANDIDATE_PUBLISH_REBASE_CONFLICT"
    );
    assert_eq!(calls.get(), 0, "no gate runs on a conflicted merge");
    assert!(
        !fx.remote_refs()
            .contains_key("refs/heads/candidate/conflict")
    );

    // A base that deleted a file the candidate updates conflicts too.
    let fx = Fixture::new();
    let other = fx.clone_to(&fx.remote_dir, "deleter");
    git(&other, &["rm", "-q", "bin/run.sh"]);
    git(&other, &["commit", "-q", "-m", "drop run.sh"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let request = Request::new(fx.remote(), "candidate/conflict");
    assert_eq!(
        request.refused(&fx, Some(&gate)),
        "PATCH_CANDIDATE_PUBLISH_REBASE_CONFLICT"
    );
}
