//! An extension: a follow-up candidate (same baseline, other post-images) published as a new
//! commit on the branch our earlier publication created, fast-forward under a lease on that
//! commit; refused (`BRANCH_MOVED`) when anyone else moved or deleted the branch, which is then
//! left exactly as they left it.

use std::os::unix::fs::PermissionsExt as _;

use finalizer::{RepositoryPatchCandidate, RepositoryPatchFile};
use pretty_assertions::assert_eq;
use publish::{CredentialSource, PublicationRecord, Remote, prepare, publish};

use crate::server::GitHttpServer;
use crate::support::{
    Fixture, Request, commit_files, create, delete, fields, git, git_output, secret, update,
};

const BRANCH: &str = "candidate/follow-up";
const BRANCH_REF: &str = "refs/heads/candidate/follow-up";

/// The follow-up candidate: against the same baseline, a different change (the review's
/// answer), still carrying whole post-images.
fn follow_up_files() -> Vec<RepositoryPatchFile> {
    vec![
        update("docs/keep.txt", "one\ntwo\nthree\n", "one\n2\n3\n"),
        create("new/empty.txt", ""),
        create("new/reviewed.txt", "after review\n"),
        delete("old/gone.txt", "to be deleted\n"),
    ]
}

fn follow_up(fx: &Fixture) -> RepositoryPatchCandidate {
    RepositoryPatchCandidate::new(fields(&fx.baseline), follow_up_files()).unwrap()
}

/// Publishes the fixture's candidate on [`BRANCH`], then makes the follow-up the fixture's
/// candidate; the first publication's record.
fn publish_first(fx: &mut Fixture, request: &Request) -> PublicationRecord {
    let first = publish(&request.build(fx, None)).unwrap();
    assert!(first.created && first.extends.is_none(), "{first:?}");
    fx.candidate = follow_up(fx);
    first
}

/// Someone else's commit on top of `branch` on the remote, pushed from a clone named `name`.
fn push_on_top(fx: &Fixture, branch: &str, name: &str) -> String {
    let other = fx.clone_to(&fx.remote_dir, name);
    git(&other, &["checkout", "-q", branch]);
    let theirs = commit_files(&other, &[("THEIRS.md", "their work\n", false)], "theirs");
    git(&other, &["push", "-q", "origin", branch]);
    theirs
}

/// The parent lines of `commit` in the remote, read from the raw object.
fn parents(fx: &Fixture, commit: &str) -> Vec<String> {
    git(&fx.remote_dir, &["cat-file", "-p", commit])
        .lines()
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("parent "))
        .map(str::to_owned)
        .collect()
}

/// Every ref update the remote has logged (reflogs on for every ref).
fn remote_ref_updates(fx: &Fixture) -> usize {
    let logs = fx.remote_dir.join("logs");
    let mut count = 0;
    let mut dirs = vec![logs];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                count += std::fs::read_to_string(&path).unwrap().lines().count();
            }
        }
    }
    count
}

#[test]
fn a_follow_up_lands_as_a_fast_forward_commit_on_our_earlier_one() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);

    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let prepared = prepare(&req).unwrap();
    assert_eq!(prepared.extends(), Some(first.commit_id.as_str()));
    let recorded = prepared.commit_id().to_owned();
    assert_ne!(recorded, first.commit_id);
    // Recorded before the push: the branch still holds the first commit.
    assert_eq!(fx.remote_refs()[BRANCH_REF], first.commit_id);
    let record = prepared.push().unwrap();

    assert_eq!(record.commit_id, recorded);
    assert_eq!(record.extends.as_deref(), Some(first.commit_id.as_str()));
    assert!(record.created && !record.rebased);
    assert_eq!(record.base_tip_seen, fx.baseline);
    assert_eq!(fx.remote_refs()[BRANCH_REF], recorded);
    assert_eq!(fx.remote_refs()["refs/heads/main"], fx.baseline);

    // One parent, our earlier commit; the tree is the baseline's with the follow-up's
    // post-images (an independent `git apply` of its patch), not the first candidate's.
    assert_eq!(parents(&fx, &recorded), vec![first.commit_id.clone()]);
    assert_eq!(
        git(
            &fx.remote_dir,
            &["rev-parse", &format!("{recorded}^{{tree}}")]
        ),
        fx.expected_tree()
    );
    let listing = git(&fx.remote_dir, &["ls-tree", "-r", "--name-only", &recorded]);
    assert!(
        listing.lines().any(|l| l == "new/reviewed.txt"),
        "{listing}"
    );
    assert!(!listing.contains("new/deep/"), "{listing}");
    assert!(!listing.contains("-rf.txt"), "{listing}");
    assert_eq!(
        git(
            &fx.remote_dir,
            &["show", &format!("{recorded}:docs/keep.txt")]
        ),
        "one\n2\n3"
    );
    assert_eq!(
        git(&fx.remote_dir, &["show", &format!("{recorded}:bin/run.sh")]),
        "#!/bin/sh\necho run"
    );
    let meta = git(&fx.remote_dir, &["cat-file", "commit", &recorded]);
    assert!(
        meta.ends_with(&format!(
            "Baseline-Commit: {}\nContinues: {}",
            fx.baseline, first.commit_id
        )),
        "{meta}"
    );
    assert!(
        meta.contains("\ncommitter Patch Candidate <publish@example.invalid> 1700000000 +0100\n"),
        "{meta}"
    );
}

#[test]
fn someone_elses_push_on_the_branch_is_never_overwritten() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let theirs = push_on_top(&fx, BRANCH, "theirs-before");

    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let err = publish(&req).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED");
    assert!(!err.is_environment());
    assert!(!err.to_string().contains(&theirs), "{err}");
    assert_eq!(fx.remote_refs()[BRANCH_REF], theirs);

    // Forced back to a history that does not hold our commit at all: refused, kept.
    git(&fx.remote_dir, &["update-ref", BRANCH_REF, &fx.baseline]);
    assert_eq!(
        publish(&req).unwrap_err().code(),
        "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED"
    );
    assert_eq!(fx.remote_refs()[BRANCH_REF], fx.baseline);
}

/// The lease, not only the recheck: a push that lands between prepare and push is kept.
#[test]
fn a_push_after_the_recheck_fails_the_lease_and_is_kept() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let prepared = prepare(&req).unwrap();
    let theirs = push_on_top(&fx, BRANCH, "theirs-late");
    let err = prepared.push().unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED");
    assert_eq!(fx.remote_refs()[BRANCH_REF], theirs);
}

#[test]
fn a_deleted_branch_is_moved_and_never_recreated() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    git(&fx.remote_dir, &["update-ref", "-d", BRANCH_REF]);
    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    assert_eq!(
        publish(&req).unwrap_err().code(),
        "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED"
    );
    assert!(!fx.remote_refs().contains_key(BRANCH_REF));

    // Deleted after the recheck: the lease refuses the push, nothing is created.
    git(
        &fx.remote_dir,
        &["update-ref", BRANCH_REF, &first.commit_id],
    );
    let prepared = prepare(&req).unwrap();
    git(&fx.remote_dir, &["update-ref", "-d", BRANCH_REF]);
    assert_eq!(
        prepared.push().unwrap_err().code(),
        "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED"
    );
    assert!(!fx.remote_refs().contains_key(BRANCH_REF));
}

#[test]
fn repeating_a_landed_extension_is_the_same_publication_and_pushes_nothing() {
    let mut fx = Fixture::new();
    git(
        &fx.remote_dir,
        &["config", "core.logAllRefUpdates", "always"],
    );
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let landed = publish(&req).unwrap();
    assert!(landed.created);
    let refs = fx.remote_refs();
    let updates = remote_ref_updates(&fx);
    assert!(updates >= 2, "the remote logs no ref updates");

    let again = publish(&req).unwrap();
    assert!(!again.created);
    assert_eq!(again.commit_id, landed.commit_id);
    assert_eq!(again.extends, landed.extends);
    assert_eq!(fx.remote_refs(), refs);
    assert_eq!(remote_ref_updates(&fx), updates, "a repeat updated a ref");

    // Prepared before it landed, pushed after (a retry after a lost answer): the same.
    git(
        &fx.remote_dir,
        &["update-ref", BRANCH_REF, &first.commit_id],
    );
    let retry = prepare(&req).unwrap();
    publish(&req).unwrap();
    let updates = remote_ref_updates(&fx);
    let late = retry.push().unwrap();
    assert!(!late.created);
    assert_eq!(late.commit_id, landed.commit_id);
    assert_eq!(remote_ref_updates(&fx), updates);
}

#[test]
fn an_extension_cannot_be_a_rebase_and_names_a_commit() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let gate = |_: &publish::MergedCommit<'_>| publish::RegateVerdict::Passed;
    let mut req = request.build(&fx, Some(&gate));
    req.extends = Some(&first.commit_id);
    assert_eq!(
        publish(&req).unwrap_err().code(),
        "PATCH_CANDIDATE_PUBLISH_INPUT"
    );
    let mut req = request.build(&fx, None);
    let upper = first.commit_id.to_uppercase();
    let short = &first.commit_id[..12];
    let padded = format!("{} ", first.commit_id);
    let option = format!("--{}", &first.commit_id[2..]);
    for bad in ["", short, &upper, &padded, &option, "refs/heads/main"] {
        req.extends = Some(bad);
        assert_eq!(
            publish(&req).unwrap_err().code(),
            "PATCH_CANDIDATE_PUBLISH_INPUT",
            "{bad:?}"
        );
    }
    assert_eq!(fx.remote_refs()[BRANCH_REF], first.commit_id);
}

#[test]
fn the_extension_commit_id_is_deterministic() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let one = prepare(&req).unwrap();
    let two = prepare(&req).unwrap();
    assert_ne!(one.git_dir(), two.git_dir());
    assert_eq!(one.commit_id(), two.commit_id());
    // The parent is part of the id: the same candidate as a new branch is another commit.
    let fresh = Request::new(fx.remote(), "candidate/fresh");
    assert_ne!(
        prepare(&fresh.build(&fx, None)).unwrap().commit_id(),
        one.commit_id()
    );
}

/// The base moving is shown by the pull request, not refused: the commit still sits on our
/// earlier one, the base is never written, and the tip seen is recorded.
#[test]
fn a_moved_base_is_not_a_refusal_for_an_extension() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let tip = fx.move_base(&[("CHANGELOG.md", "moved\n", false)]);
    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let record = publish(&req).unwrap();
    assert!(record.created && !record.rebased);
    assert_eq!(record.base_tip_seen, tip);
    assert_eq!(parents(&fx, &record.commit_id), vec![first.commit_id]);
    assert_eq!(fx.remote_refs()["refs/heads/main"], tip);
}

/// Withdrawing an extension moves the branch back to our earlier commit (never deletes it),
/// and only while it holds exactly the extension.
#[test]
fn withdrawing_an_extension_moves_the_branch_back_only_while_it_holds_it() {
    let mut fx = Fixture::new();
    let request = Request::new(fx.remote(), BRANCH);
    let first = publish_first(&mut fx, &request);
    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    let prepared = prepare(&req).unwrap();
    let record = prepared.push_keeping_mirror().unwrap();
    assert_eq!(fx.remote_refs()[BRANCH_REF], record.commit_id);
    assert!(prepared.withdraw().unwrap());
    assert_eq!(fx.remote_refs()[BRANCH_REF], first.commit_id);
    // Already back: nothing to do.
    assert!(!prepared.withdraw().unwrap());
    assert_eq!(fx.remote_refs()[BRANCH_REF], first.commit_id);

    // Someone else pushed on top of the extension: left as it is.
    prepared.push_keeping_mirror().unwrap();
    let theirs = push_on_top(&fx, BRANCH, "theirs-withdraw");
    assert!(!prepared.withdraw().unwrap());
    assert_eq!(fx.remote_refs()[BRANCH_REF], theirs);
}

/// Over HTTP with a credential file: the extension lands, a repeat pushes nothing, and a
/// push by someone else is refused and kept.
#[test]
fn an_extension_over_http() {
    let password = secret("extend");
    let mut fx = Fixture::new();
    let creds = fx.tmp.path().join("server-credentials");
    let client = fx.tmp.path().join("client-credentials");
    for file in [&creds, &client] {
        std::fs::write(file, format!("publisher:{password}\n")).unwrap();
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let server = GitHttpServer::start(fx.tmp.path(), &creds);
    let mut request = Request::new(Remote::parse(&server.url("remote.git")).unwrap(), BRANCH);
    request.credential = CredentialSource::file(&client);
    let first = publish_first(&mut fx, &request);

    let mut req = request.build(&fx, None);
    req.extends = Some(&first.commit_id);
    // The parent comes from the remote; the baseline too.
    req.source = None;
    let record = publish(&req).unwrap();
    assert!(record.created);
    assert_eq!(record.extends.as_deref(), Some(first.commit_id.as_str()));
    assert_eq!(fx.remote_refs()[BRANCH_REF], record.commit_id);
    assert_eq!(
        parents(&fx, &record.commit_id),
        vec![first.commit_id.clone()]
    );
    assert_eq!(
        git(
            &fx.remote_dir,
            &["rev-parse", &format!("{}^{{tree}}", record.commit_id)]
        ),
        fx.expected_tree()
    );

    let again = publish(&req).unwrap();
    assert!(!again.created);
    assert_eq!(again.commit_id, record.commit_id);

    // Their commit on top of ours: a later follow-up extending ours is refused.
    let theirs = push_on_top(&fx, BRANCH, "theirs-http");
    let mut later = request.build(&fx, None);
    later.extends = Some(&record.commit_id);
    let err = publish(&later).unwrap_err();
    assert_eq!(err.code(), "PATCH_CANDIDATE_PUBLISH_BRANCH_MOVED");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(&password), "{shown}");
    assert_eq!(fx.remote_refs()[BRANCH_REF], theirs);
    let log = git_output(&fx.remote_dir, &["log", "--format=%H", BRANCH_REF]);
    assert!(String::from_utf8_lossy(&log.stdout).contains(&record.commit_id));
}
