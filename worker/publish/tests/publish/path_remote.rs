//! Publication to a bare repository path: the commit, its determinism, create-only pushes.

use pretty_assertions::assert_eq;
use publish::{CommitIdentity, CredentialSource, Remote, prepare, publish};

use crate::support::{AGENT_MARKER, Fixture, Request, create, git, hash_tree, update};

#[test]
fn publishes_the_candidate_tree_as_a_new_branch_without_touching_the_user_repository() {
    let fx = Fixture::new();
    let before = hash_tree(&fx.user);
    let request = Request::new(fx.remote(), "candidate/one");
    let prepared = prepare(&request.build(&fx, None)).unwrap();
    // Recorded before the push.
    let recorded = prepared.commit_id().to_owned();
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/one"));
    let record = prepared.push().unwrap();

    assert_eq!(record.commit_id, recorded);
    assert_eq!(record.base_tip_seen, fx.baseline);
    assert_eq!(record.remote, fx.remote_dir.to_str().unwrap());
    assert_eq!(record.branch.as_str(), "candidate/one");
    assert!(record.created && !record.rebased);
    assert_eq!(
        fx.remote_refs().get("refs/heads/candidate/one"),
        Some(&recorded)
    );
    assert_eq!(fx.remote_refs().get("refs/heads/main"), Some(&fx.baseline));

    let remote = &fx.remote_dir;
    // Byte for byte: the tree is the one an independent `git apply` gives.
    assert_eq!(
        git(remote, &["rev-parse", &format!("{recorded}^{{tree}}")]),
        fx.expected_tree()
    );
    assert_eq!(
        git(remote, &["rev-parse", &format!("{recorded}^")]),
        fx.baseline
    );
    let listing = git(remote, &["ls-tree", "-r", &recorded]);
    let empty_blob = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391";
    assert!(
        listing.contains(&format!("100644 blob {empty_blob}\tnew/empty.txt")),
        "{listing}"
    );
    assert!(listing.contains("100755 blob"), "{listing}");
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("100755") && l.ends_with("\tbin/run.sh"))
    );
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("100755") && l.ends_with("\tbin/tool.sh"))
    );
    assert!(!listing.contains("old/"), "{listing}");
    assert_eq!(
        git(remote, &["show", &format!("{recorded}:-rf.txt")]),
        "blob\nmark :1\ndata 0\n\ndone"
    );
    // The uncommitted edit in the user's work tree is not published.
    assert_eq!(
        git(remote, &["show", &format!("{recorded}:README.md")]),
        "# widgets"
    );

    // Fixed identity and date; a message of host-owned fields only.
    let meta = git(remote, &["cat-file", "commit", &recorded]);
    assert!(
        meta.contains("\nauthor Patch Candidate <publish@example.invalid> 1700000000 +0100\n"),
        "{meta}"
    );
    assert!(
        meta.contains("\ncommitter Patch Candidate <publish@example.invalid> 1700000000 +0100\n"),
        "{meta}"
    );
    let digest = finalizer::repository_patch_digest(&fx.candidate)
        .unwrap()
        .to_string();
    assert!(
        meta.contains(&format!("Candidate-Digest: {digest}\n")),
        "{meta}"
    );
    assert!(
        meta.ends_with(&format!("Baseline-Commit: {}", fx.baseline)),
        "{meta}"
    );
    assert!(!meta.contains(AGENT_MARKER), "{meta}");

    assert_eq!(hash_tree(&fx.user), before, "the user's repository changed");
}

#[test]
fn the_commit_id_is_deterministic_and_bound_to_the_identity() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/det");
    let first = prepare(&request.build(&fx, None)).unwrap();
    let second = prepare(&request.build(&fx, None)).unwrap();
    assert_ne!(first.git_dir(), second.git_dir());
    assert_eq!(first.commit_id(), second.commit_id());
    let mut other = Request::new(fx.remote(), "candidate/det");
    other.identity = CommitIdentity::new(
        "Patch Candidate",
        "publish@example.invalid",
        1_700_000_001,
        60,
    )
    .unwrap();
    assert_ne!(
        prepare(&other.build(&fx, None)).unwrap().commit_id(),
        first.commit_id()
    );
    // The mirror is private and goes away with the value.
    let dir = first.git_dir().parent().unwrap().to_owned();
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    let bare = crate::support::git_output(first.git_dir(), &["rev-parse", "--is-bare-repository"]);
    assert_eq!(String::from_utf8_lossy(&bare.stdout).trim(), "true");
    drop(first);
    assert!(!dir.exists());
}

#[test]
fn an_existing_branch_is_refused_and_never_overwritten() {
    let fx = Fixture::new();
    git(
        &fx.remote_dir,
        &["update-ref", "refs/heads/taken", &fx.baseline],
    );
    let request = Request::new(fx.remote(), "taken");
    let err = publish(&request.build(&fx, None)).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS");
    assert_eq!(fx.remote_refs().get("refs/heads/taken"), Some(&fx.baseline));
    // The base branch itself is taken too.
    let request = Request::new(fx.remote(), "main");
    assert_eq!(
        request.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS"
    );
    assert_eq!(fx.remote_refs().get("refs/heads/main"), Some(&fx.baseline));
}

/// A pushed branch whose publication may not be recorded is withdrawn: deleted only while it
/// still holds exactly the pushed commit; a branch moved to another commit is left as it is.
#[test]
fn a_pushed_branch_is_withdrawn_only_while_it_holds_the_commit() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/withdrawn");
    let prepared = prepare(&request.build(&fx, None)).unwrap();
    let record = prepared.push_keeping_mirror().unwrap();
    assert_eq!(
        fx.remote_refs().get("refs/heads/candidate/withdrawn"),
        Some(&record.commit_id)
    );
    assert!(prepared.withdraw().unwrap());
    assert!(
        !fx.remote_refs()
            .contains_key("refs/heads/candidate/withdrawn")
    );
    assert_eq!(fx.remote_refs().get("refs/heads/main"), Some(&fx.baseline));
    // Gone already: nothing to do.
    assert!(!prepared.withdraw().unwrap());
    // Someone else's commit under the name: left alone.
    prepared.push_keeping_mirror().unwrap();
    git(
        &fx.remote_dir,
        &["update-ref", "refs/heads/candidate/withdrawn", &fx.baseline],
    );
    assert!(!prepared.withdraw().unwrap());
    assert_eq!(
        fx.remote_refs().get("refs/heads/candidate/withdrawn"),
        Some(&fx.baseline)
    );
}

#[test]
fn publishing_the_same_candidate_again_is_the_same_publication() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/again");
    let first = publish(&request.build(&fx, None)).unwrap();
    let second = publish(&request.build(&fx, None)).unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.commit_id, second.commit_id);
}

#[test]
fn two_concurrent_publishes_of_one_candidate_make_one_branch() {
    for round in 0..3 {
        let fx = Fixture::new();
        let name = format!("candidate/race-{round}");
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let request = Request::new(fx.remote(), &name);
                        let prepared = prepare(&request.build(&fx, None)).unwrap();
                        prepared.push()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let records: Vec<_> = results.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            records.iter().filter(|r| r.created).count(),
            1,
            "{records:?}"
        );
        assert_eq!(records[0].commit_id, records[1].commit_id);
        let branches: Vec<_> = fx
            .remote_refs()
            .into_keys()
            .filter(|r| r.starts_with("refs/heads/candidate/"))
            .collect();
        assert_eq!(branches, vec![format!("refs/heads/{name}")]);
        assert_eq!(
            fx.remote_refs()[&format!("refs/heads/{name}")],
            records[0].commit_id
        );
    }
}

#[test]
fn two_concurrent_publishes_of_different_commits_to_one_name_leave_exactly_one() {
    let fx = Fixture::new();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = [1_700_000_000, 1_700_000_500]
            .into_iter()
            .map(|seconds| {
                let fx = &fx;
                s.spawn(move || {
                    let mut request = Request::new(fx.remote(), "contested");
                    request.identity =
                        CommitIdentity::new("P", "p@example.invalid", seconds, 0).unwrap();
                    publish(&request.build(fx, None)).map(|r| r.commit_id)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let lost: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert_eq!(lost[0].code(), "PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS");
    assert_eq!(&fx.remote_refs()["refs/heads/contested"], won[0]);
}

#[test]
fn refusals_before_the_push_have_stable_codes() {
    let fx = Fixture::new();
    let mut request = Request::new(fx.remote(), "candidate/x");
    request.base = crate::support::branch("no-such-base");
    assert_eq!(
        request.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_BASE_MISSING"
    );

    let missing = Request::new(
        Remote::parse(fx.tmp.path().join("nowhere.git").to_str().unwrap()).unwrap(),
        "candidate/x",
    );
    assert_eq!(
        missing.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_REMOTE_UNREACHABLE"
    );

    // A create over an existing file, an update of a missing one, a create under a file.
    for files in [
        vec![create("README.md", "x\n")],
        vec![update("nope.txt", "a\n", "b\n")],
        vec![create("src/lib.rs/inner.rs", "x\n")],
        vec![update("docs", "a\n", "b\n")],
    ] {
        let fx = Fixture::with_files(files);
        let request = Request::new(fx.remote(), "candidate/x");
        assert_eq!(
            request.refused(&fx, None),
            "PATCH_CANDIDATE_PUBLISH_CANDIDATE_MISMATCH"
        );
        assert!(!fx.remote_refs().contains_key("refs/heads/candidate/x"));
    }

    // A baseline the source does not have.
    let mut fx = Fixture::new();
    fx.candidate = finalizer::RepositoryPatchCandidate::new(
        crate::support::fields(&"1".repeat(40)),
        crate::support::standard_files(),
    )
    .unwrap();
    let request = Request::new(fx.remote(), "candidate/x");
    assert_eq!(
        request.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_BASELINE_MISSING"
    );

    // A handoff id that would break the message.
    let mut fields = crate::support::fields(&fx.baseline);
    fields.handoff_id = "h\nSigned-off-by: x".into();
    fx.candidate =
        finalizer::RepositoryPatchCandidate::new(fields, crate::support::standard_files()).unwrap();
    assert_eq!(request.refused(&fx, None), "PATCH_CANDIDATE_PUBLISH_INPUT");
}

/// r_publish_commits_what_no_diff_showed: publication commits post-images, review reads diffs;
/// a candidate whose diff is not the change from the baseline's bytes to its post-image (an
/// update with an empty diff, or previous bytes the baseline does not hold) is never pushed.
#[test]
fn a_candidate_whose_diffs_are_not_its_change_is_never_published() {
    // The diff and hashes agree with each other, but the baseline holds other previous bytes.
    let fx = Fixture::with_files(vec![update(
        "docs/keep.txt",
        "one\nTWO\nthree\n",
        "one\n2\nthree\n",
    )]);
    let request = Request::new(fx.remote(), "candidate/x");
    assert_eq!(
        request.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_CANDIDATE_MISMATCH"
    );
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/x"));

    // The right previous bytes, a new line in the post-image, and an empty diff: nothing of the
    // change would be shown or scanned.
    let before = "one\ntwo\nthree\n";
    let after = "one\ntwo\nthree\ntoken = 'hidden from review'\n";
    let hidden = finalizer::testkit::update_with_diff("docs/keep.txt", before, after, "");
    let fx = Fixture::with_files(vec![hidden]);
    let request = Request::new(fx.remote(), "candidate/x");
    assert_eq!(request.refused(&fx, None), "REPOSITORY_PATCH_VERIFY_DIFF");
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/x"));
}

#[test]
fn the_baseline_can_come_from_the_remote() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/from-remote");
    let mut req = request.build(&fx, None);
    req.source = None;
    let record = publish(&req).unwrap();
    assert_eq!(
        git(
            &fx.remote_dir,
            &["rev-parse", &format!("{}^{{tree}}", record.commit_id)]
        ),
        fx.expected_tree()
    );
}

#[test]
fn a_credential_file_readable_by_others_is_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let fx = Fixture::new();
    let file = fx.tmp.path().join("cred");
    std::fs::write(&file, "user:pw\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut request = Request::new(fx.remote(), "candidate/x");
    request.credential = CredentialSource::file(&file);
    let err = publish(&request.build(&fx, None)).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_CREDENTIAL");
    for bad in ["", "\n", ":pw\n", "user:\n", "a\nb\n", "us\u{1b}er:pw\n"] {
        std::fs::write(&file, bad).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = publish(&request.build(&fx, None)).unwrap_err();
        assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_CREDENTIAL", "{bad:?}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(fx.tmp.path().join("elsewhere"), &file).unwrap();
    assert_eq!(
        request.refused(&fx, None),
        "PATCH_CANDIDATE_PUBLISH_CREDENTIAL"
    );
}

#[test]
fn a_source_that_is_not_a_repository_is_never_walked_above() {
    let fx = Fixture::new();
    let request = Request::new(fx.remote(), "candidate/src");
    // A folder inside the user's work tree: discovery must not find the repository above it.
    let inner = fx.user.join("docs");
    let mut req = request.build(&fx, None);
    req.source = Some(&inner);
    assert_eq!(
        publish(&req).unwrap_err().code(),
        "PATCH_CANDIDATE_PUBLISH_BASELINE_MISSING"
    );
    let nowhere = fx.tmp.path().join("nowhere");
    req.source = Some(&nowhere);
    assert_eq!(
        publish(&req).unwrap_err().code(),
        "PATCH_CANDIDATE_PUBLISH_BASELINE_MISSING"
    );
    assert!(!fx.remote_refs().contains_key("refs/heads/candidate/src"));
}

#[test]
fn the_private_credential_copy_is_private_and_goes_away_with_the_mirror() {
    use std::os::unix::fs::PermissionsExt as _;
    let fx = Fixture::new();
    let file = fx.tmp.path().join("cred");
    let password = crate::support::secret("copy");
    std::fs::write(&file, format!("user:{password}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut request = Request::new(fx.remote(), "candidate/copy");
    request.credential = CredentialSource::file(&file);
    let prepared = prepare(&request.build(&fx, None)).unwrap();
    let dir = prepared.git_dir().parent().unwrap().to_owned();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("credential")), 0o600);
    assert_eq!(mode(&dir.join("credential-helper")), 0o700);
    assert_eq!(
        std::fs::read_to_string(dir.join("credential")).unwrap(),
        format!("username=user\npassword={password}\n")
    );
    // The helper answers `get` from the copy, and nothing else.
    let helper = dir.join("credential-helper");
    let run = |op: &str| {
        let mut child = std::process::Command::new(&helper)
            .arg(op)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"protocol=http\nhost=h\n\n")
            .unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    };
    assert_eq!(run("get"), format!("username=user\npassword={password}\n"));
    assert_eq!(run("store"), "");
    assert_eq!(run("erase"), "");
    prepared.push().unwrap();
    assert!(
        !dir.exists(),
        "the private directory outlived the publication"
    );
}
