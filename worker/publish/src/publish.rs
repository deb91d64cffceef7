//! One publication: the commit in a private mirror, the destination recheck (and, when asked,
//! the rebase onto a moved base with its gate re-run), then the create-only atomic push; or,
//! for an extension, a fast-forward push of a new commit onto our own earlier one.
//!
//! [`prepare`] does everything up to the push and returns the deterministic commit id, so the
//! caller records it before anything leaves the machine; [`PreparedPublication::push`] pushes it.
//! [`publish`] is both in one call.

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use finalizer::RepositoryPatchCandidate;

use crate::credential::transport_options;
use crate::error::{PublishError, git_error, input};
use crate::mirror::Mirror;
use crate::run::{NETWORK_DEADLINE, classify_network_failure, is_object_id, object_id_line, run};
use crate::types::{
    BranchName, CommitIdentity, CredentialSource, PublicationRecord, Remote, rfc3339_utc,
};

/// The oldest git whose `merge-tree --write-tree` the rebase uses.
pub const MIN_REBASE_GIT: (u32, u32) = (2, 38);
/// Most bytes of `ls-remote` output read (one or two refs are asked for).
const LS_REMOTE_CAP: usize = 64 * 1024;
/// Most bytes of `push --porcelain` output read.
const PUSH_CAP: usize = 64 * 1024;
/// Most bytes of `merge-tree` output read (the tree id and the conflicted paths).
const MERGE_TREE_CAP: usize = 1024 * 1024;
/// Longest handoff id put in a commit message.
const MAX_HANDOFF_ID_BYTES: usize = 128;
/// The mirror ref the moved base is fetched into.
const FETCHED_BASE_REF: &str = "refs/publish/base";
/// The mirror ref the extended commit is fetched into.
const FETCHED_EXTENDS_REF: &str = "refs/publish/extends";

/// What the gate re-run on a merged tree concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegateVerdict {
    /// Every required gate passed on exactly this tree: it may be published.
    Passed,
    /// A required gate failed.
    Failed,
    /// The gates could not run (an environment failure): nothing is published.
    Unavailable,
}

/// The commit a rebase would publish, handed to the gate re-run before anything is pushed: its
/// tree is the clean `merge-tree --write-tree` result of the candidate's commit and the moved
/// base, its parent that base. The objects live in the private mirror at [`Self::git_dir`]
/// (a bare repository, valid for the duration of the call; read it, do not write it).
#[derive(Debug, Clone, Copy)]
pub struct MergedCommit<'a> {
    git_dir: &'a Path,
    commit_id: &'a str,
    tree_id: &'a str,
    base_tip: &'a str,
}

impl MergedCommit<'_> {
    /// The private mirror's git directory.
    #[must_use]
    pub fn git_dir(&self) -> &Path {
        self.git_dir
    }
    /// The commit that will be published if the gates pass.
    #[must_use]
    pub fn commit_id(&self) -> &str {
        self.commit_id
    }
    /// Its tree: the one the gates must run on.
    #[must_use]
    pub fn tree_id(&self) -> &str {
        self.tree_id
    }
    /// The moved base's tip (the commit's parent).
    #[must_use]
    pub fn base_tip(&self) -> &str {
        self.base_tip
    }
}

/// Re-runs the required gates on a merged tree. Any `Fn(&MergedCommit) -> RegateVerdict` is one.
pub trait MergedTreeGate {
    /// The verdict of the required gates on exactly `merged`'s tree.
    fn rerun(&self, merged: &MergedCommit<'_>) -> RegateVerdict;
}

impl<F: Fn(&MergedCommit<'_>) -> RegateVerdict> MergedTreeGate for F {
    fn rerun(&self, merged: &MergedCommit<'_>) -> RegateVerdict {
        self(merged)
    }
}

/// What to publish and where. The candidate must be the accepted one (the caller checks the
/// review decision); everything else comes from the operator.
pub struct PublishRequest<'a> {
    /// The candidate: its baseline commit, changed files and host-owned ids.
    pub candidate: &'a RepositoryPatchCandidate,
    /// The repository the baseline commit is fetched from (only read). `None`: from the remote.
    pub source: Option<&'a Path>,
    /// Where the branch is created.
    pub remote: &'a Remote,
    /// The branch to create (it must not exist), or, with [`Self::extends`], to extend.
    pub branch: &'a BranchName,
    /// The branch whose tip must still be the candidate's baseline commit (for an extension,
    /// only read: a moved base is not refused).
    pub base: &'a BranchName,
    /// The fixed author, committer and date.
    pub identity: &'a CommitIdentity,
    /// Where git gets the remote's credential.
    pub credential: &'a CredentialSource,
    /// `None`: a moved base is refused. `Some(gate)`: the candidate is merged onto the moved
    /// base and published only if `gate` passes on exactly the merged tree.
    pub rebase: Option<&'a dyn MergedTreeGate>,
    /// `None`: the branch is created (it must not exist). `Some(prev)`: the commit (40 or 64
    /// lowercase hex digits) our previous publication pushed to [`Self::branch`], which must
    /// still be its tip; the candidate (against the same baseline) becomes a new commit whose
    /// tree is the baseline's with the post-images applied and whose single parent is `prev`,
    /// pushed fast-forward under a lease on `prev`. A moved base is not refused then, and
    /// `rebase` must be `None`.
    pub extends: Option<&'a str>,
}

impl std::fmt::Debug for PublishRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishRequest")
            .field("baseline", &self.candidate.baseline_commit_sha())
            .field("source", &self.source)
            .field("remote", &self.remote.as_str())
            .field("branch", &self.branch.as_str())
            .field("base", &self.base.as_str())
            .field("rebase", &self.rebase.is_some())
            .field("extends", &self.extends)
            .finish_non_exhaustive()
    }
}

/// A publication whose commit is built and whose destination was rechecked: record
/// [`Self::commit_id`], then [`Self::push`].
#[derive(Debug)]
pub struct PreparedPublication {
    mirror: Mirror,
    transport: Vec<OsString>,
    remote: Remote,
    branch: BranchName,
    base: BranchName,
    commit_id: String,
    base_tip_seen: String,
    rebased: bool,
    /// For an extension: the commit the branch must hold before the push (the new commit's
    /// parent).
    extends: Option<String>,
}

impl PreparedPublication {
    /// The commit that [`Self::push`] publishes (deterministic: the same candidate, baseline,
    /// base tip (for an extension, extended commit) and identity give the same id).
    #[must_use]
    pub fn commit_id(&self) -> &str {
        &self.commit_id
    }
    /// The base branch's tip seen by the recheck.
    #[must_use]
    pub fn base_tip_seen(&self) -> &str {
        &self.base_tip_seen
    }
    /// True when the commit was rebuilt onto a moved base.
    #[must_use]
    pub fn rebased(&self) -> bool {
        self.rebased
    }
    /// For an extension, the commit [`Self::push`] fast-forwards the branch from (the new
    /// commit's parent).
    #[must_use]
    pub fn extends(&self) -> Option<&str> {
        self.extends.as_deref()
    }
    /// The private mirror holding the commit (read-only use, e.g. a test comparing trees).
    #[must_use]
    pub fn git_dir(&self) -> &Path {
        self.mirror.git_dir()
    }

    /// Creates the branch at the commit: `push --atomic --porcelain` with a lease that the
    /// branch does not exist, so an existing branch is never overwritten, whatever it holds.
    /// When the push is refused and the branch turns out to hold exactly this commit (a
    /// concurrent or repeated publish of the same candidate), the publication is the same one
    /// and succeeds with `created: false`.
    ///
    /// For an extension, moves the branch fast-forward from the extended commit to this one
    /// instead (no `+`, a lease on the extended commit): a branch that holds anything else is
    /// never overwritten.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS` (the branch holds another commit),
    /// `…_BRANCH_MOVED` (an extension's branch no longer holds the extended commit),
    /// `…_PUSH_REJECTED`, `…_AUTH`, `…_REMOTE_UNREACHABLE`, `…_GIT`.
    ///
    /// # Security
    /// The credential reaches git only through the private helper (see the crate docs); git's
    /// output is bounded and classified, never echoed.
    pub fn push(self) -> Result<PublicationRecord, PublishError> {
        // The private mirror (and the credential copy in it) goes away with `self`, here.
        self.push_keeping_mirror()
    }

    /// [`Self::push`], keeping the private mirror (and a credential copy in it) until this value
    /// is dropped, so that the push can still be [withdrawn](Self::withdraw): for a caller
    /// that records the outcome and withdraws when the record is refused. Drop it as soon as
    /// the record is written.
    ///
    /// # Errors
    /// As [`Self::push`].
    pub fn push_keeping_mirror(&self) -> Result<PublicationRecord, PublishError> {
        if let Some(prev) = &self.extends {
            let created = self.push_extension(prev)?;
            return Ok(self.record(created));
        }
        let target = self.branch.full_ref();
        let base = self.base.full_ref();
        let mut cmd = self.mirror.git(self.remote.protocol());
        // The base branch rides along at the tip seen, under a lease on that tip: an up-to-date
        // ref sends no update, so the base is never written, but if it moved since the recheck
        // the lease fails and `--atomic` refuses the whole push, new branch included.
        cmd.args(&self.transport)
            .args(["push", "--atomic", "--porcelain", "--no-verify"])
            .arg(format!("--force-with-lease={target}:"))
            .arg(format!("--force-with-lease={base}:{}", self.base_tip_seen))
            .arg("--end-of-options")
            .arg(self.remote.as_str())
            .arg(format!("{}:{target}", self.commit_id))
            .arg(format!("{}:{base}", self.base_tip_seen));
        let out = run(&mut cmd, None, PUSH_CAP, NETWORK_DEADLINE)?;
        let base_refused = !out.status.success()
            && porcelain_outcome(&out.stdout, &base) == Some(PushFlag::Rejected);
        // A base that moved after this very commit was published (a retry): the same
        // publication, not a refusal.
        let already = base_refused
            && ls_remote(&self.mirror, &self.remote, &self.transport, &target)?.as_deref()
                == Some(self.commit_id.as_str());
        if base_refused && !already {
            let seen = ls_remote(&self.mirror, &self.remote, &self.transport, &base)?;
            return Err(match seen {
                Some(seen) if seen != self.base_tip_seen => PublishError::BaseMoved {
                    expected: self.base_tip_seen.clone(),
                    seen,
                },
                Some(_) => PublishError::PushRejected {
                    detail: "the remote refused the push",
                },
                None => PublishError::BaseMissing,
            });
        }
        let outcome = porcelain_outcome(&out.stdout, &target);
        let created = match (out.status.success(), outcome) {
            _ if already => false,
            (true, Some(PushFlag::Created)) => true,
            // The branch already holds exactly this commit: the same publication.
            (true, Some(PushFlag::UpToDate)) => false,
            (true, _) => return Err(git_error("git push printed an unexpected result")),
            (false, Some(PushFlag::Rejected)) => {
                match ls_remote(&self.mirror, &self.remote, &self.transport, &target)? {
                    Some(tip) if tip == self.commit_id => false,
                    Some(_) => return Err(PublishError::BranchExists),
                    None => {
                        return Err(PublishError::PushRejected {
                            detail: "the remote refused to create the branch",
                        });
                    }
                }
            }
            (false, _) => return Err(classify_network_failure(&out.stderr)),
        };
        Ok(self.record(created))
    }

    /// The fast-forward push of an extension: `push --atomic --porcelain` of the commit to the
    /// branch under `--force-with-lease=refs/heads/B:<prev>`, without `+`. The base branch does
    /// not ride along (a moved base is not refused for an extension). `true` when the branch
    /// moved; `false` when it already held exactly this commit.
    fn push_extension(&self, prev: &str) -> Result<bool, PublishError> {
        let target = self.branch.full_ref();
        let mut cmd = self.mirror.git(self.remote.protocol());
        cmd.args(&self.transport)
            .args(["push", "--atomic", "--porcelain", "--no-verify"])
            .arg(format!("--force-with-lease={target}:{prev}"))
            .arg("--end-of-options")
            .arg(self.remote.as_str())
            .arg(format!("{}:{target}", self.commit_id));
        let out = run(&mut cmd, None, PUSH_CAP, NETWORK_DEADLINE)?;
        match (
            out.status.success(),
            porcelain_outcome(&out.stdout, &target),
        ) {
            (true, Some(PushFlag::FastForward)) => Ok(true),
            // The branch already holds exactly this commit: the same publication.
            (true, Some(PushFlag::UpToDate)) => Ok(false),
            (true, _) => Err(git_error("git push printed an unexpected result")),
            (false, Some(PushFlag::Rejected)) => {
                match ls_remote(&self.mirror, &self.remote, &self.transport, &target)? {
                    Some(tip) if tip == self.commit_id => Ok(false),
                    // The lease held, so the remote itself refused (a hook, a protection).
                    Some(tip) if tip == prev => Err(PublishError::PushRejected {
                        detail: "the remote refused to update the branch",
                    }),
                    _ => Err(PublishError::BranchMoved),
                }
            }
            (false, _) => Err(classify_network_failure(&out.stderr)),
        }
    }

    /// The record of this publication, pushed now.
    fn record(&self, created: bool) -> PublicationRecord {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PublicationRecord {
            remote: self.remote.as_str().to_owned(),
            branch: self.branch.clone(),
            commit_id: self.commit_id.clone(),
            base_tip_seen: self.base_tip_seen.clone(),
            pushed_at: rfc3339_utc(now),
            rebased: self.rebased,
            created,
            extends: self.extends.clone(),
        }
    }

    /// Deletes the branch [`Self::push`] created, only while it still holds exactly this
    /// commit (`push --atomic` with a lease on the commit): for a push whose publication may not
    /// be recorded (the candidate was rejected while it ran). `true` when the branch was
    /// deleted; `false` when it no longer exists or holds another commit (left as it is).
    ///
    /// An extension's branch is never deleted (it held our earlier, recorded publication):
    /// withdraw moves it back to the extended commit, again only while it holds exactly this
    /// commit (`--force-with-lease=refs/heads/B:<this commit> <extended>:refs/heads/B`), so a
    /// later push by anyone else is never clobbered. `true` when it was moved back.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_PUSH_REJECTED` (the remote refused the deletion or the move
    /// back), `…_AUTH`, `…_REMOTE_UNREACHABLE`, `…_GIT`.
    pub fn withdraw(&self) -> Result<bool, PublishError> {
        let target = self.branch.full_ref();
        let mut cmd = self.mirror.git(self.remote.protocol());
        cmd.args(&self.transport)
            .args(["push", "--atomic", "--porcelain", "--no-verify"])
            .arg(format!("--force-with-lease={target}:{}", self.commit_id))
            .arg("--end-of-options")
            .arg(self.remote.as_str())
            .arg(match &self.extends {
                // Back to the extended commit: not a fast-forward, allowed by the lease alone.
                Some(prev) => format!("{prev}:{target}"),
                None => format!(":{target}"),
            });
        let out = run(&mut cmd, None, PUSH_CAP, NETWORK_DEADLINE)?;
        let undone = if self.extends.is_some() {
            PushFlag::Forced
        } else {
            PushFlag::Deleted
        };
        match (
            out.status.success(),
            porcelain_outcome(&out.stdout, &target),
        ) {
            (true, Some(flag)) if flag == undone => Ok(true),
            // An extension's branch already back at the extended commit: nothing to undo.
            (true, Some(PushFlag::UpToDate)) if self.extends.is_some() => Ok(false),
            (false, Some(PushFlag::Rejected)) => {
                match ls_remote(&self.mirror, &self.remote, &self.transport, &target)? {
                    Some(tip) if tip == self.commit_id => Err(PublishError::PushRejected {
                        detail: if self.extends.is_some() {
                            "the remote refused to move the branch back"
                        } else {
                            "the remote refused to delete the branch"
                        },
                    }),
                    _ => Ok(false),
                }
            }
            (true, _) => Err(git_error("git push printed an unexpected result")),
            (false, _) => Err(classify_network_failure(&out.stderr)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PushFlag {
    Created,
    FastForward,
    Forced,
    UpToDate,
    Rejected,
    Deleted,
    Other,
}

/// The porcelain flag of the line for `target` (`<flag>\t<from>:<to>\t<summary>`).
fn porcelain_outcome(stdout: &[u8], target: &str) -> Option<PushFlag> {
    let text = std::str::from_utf8(stdout).ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split('\t');
        let flag = fields.next()?;
        let refs = fields.next()?;
        let (_, to) = refs.split_once(':')?;
        (to == target).then_some(match flag {
            "*" => PushFlag::Created,
            " " => PushFlag::FastForward,
            "+" => PushFlag::Forced,
            "=" => PushFlag::UpToDate,
            "!" => PushFlag::Rejected,
            "-" => PushFlag::Deleted,
            _ => PushFlag::Other,
        })
    })
}

/// The tip of `full_ref` on the remote (`None` when it does not exist).
fn ls_remote(
    mirror: &Mirror,
    remote: &Remote,
    transport: &[OsString],
    full_ref: &str,
) -> Result<Option<String>, PublishError> {
    let [tip] = ls_remote_refs(mirror, remote, transport, [full_ref])?;
    Ok(tip)
}

/// The tips of `full_refs` on the remote, in order, read by one `ls-remote` (`None` for a ref
/// that does not exist).
fn ls_remote_refs<const N: usize>(
    mirror: &Mirror,
    remote: &Remote,
    transport: &[OsString],
    full_refs: [&str; N],
) -> Result<[Option<String>; N], PublishError> {
    let mut cmd = mirror.git(remote.protocol());
    cmd.args(transport)
        .args(["ls-remote", "--refs", "--end-of-options"])
        .arg(remote.as_str())
        .args(full_refs);
    let out = run(&mut cmd, None, LS_REMOTE_CAP, NETWORK_DEADLINE)?;
    if !out.status.success() {
        return Err(classify_network_failure(&out.stderr));
    }
    let text = std::str::from_utf8(&out.stdout)
        .map_err(|_| git_error("git ls-remote printed non-text"))?;
    let mut tips = [const { None }; N];
    for line in text.lines() {
        let (id, name) = line
            .split_once('\t')
            .ok_or_else(|| git_error("git ls-remote printed an unexpected line"))?;
        for (full_ref, tip) in full_refs.iter().zip(tips.iter_mut()) {
            if name == *full_ref && tip.is_none() {
                if !is_object_id(id) {
                    return Err(git_error("git ls-remote printed an unexpected id"));
                }
                *tip = Some(id.to_owned());
            }
        }
    }
    Ok(tips)
}

/// 40 (SHA-1) or 64 (SHA-256) lowercase hex digits: the form an extended commit is named in.
fn is_commit_text(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The handoff id as it may appear in a commit message: 1..=128 of `[A-Za-z0-9._:-]`.
fn message_handoff_id(candidate: &RepositoryPatchCandidate) -> Result<&str, PublishError> {
    let id = candidate.handoff_id();
    let ok = !id.is_empty()
        && id.len() <= MAX_HANDOFF_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if ok {
        Ok(id)
    } else {
        Err(input(
            "the handoff id must be 1..=128 of [A-Za-z0-9._:-] to name a commit",
        ))
    }
}

/// The commit message: host-owned fields only (never the summary, rationale or any diff).
/// `rebased_onto` and `continues` (an extension's parent) are never both given.
fn commit_message(
    digest: &str,
    handoff_id: &str,
    baseline: &str,
    rebased_onto: Option<&str>,
    continues: Option<&str>,
) -> String {
    let mut message = format!(
        "Publish patch candidate {digest}\n\nCandidate-Digest: {digest}\nHandoff-Id: {handoff_id}\nBaseline-Commit: {baseline}\n"
    );
    for (trailer, value) in [("Rebased-Onto", rebased_onto), ("Continues", continues)] {
        if let Some(id) = value {
            message.push_str(trailer);
            message.push_str(": ");
            message.push_str(id);
            message.push('\n');
        }
    }
    message
}

/// Builds the commit and rechecks the destination (see the module docs); nothing is pushed.
///
/// With [`PublishRequest::extends`], the branch is read too and must hold exactly the extended
/// commit (or already this very commit: a repeat); the branch is fetched into the mirror so the
/// parent exists, and the commit is built on it. The base is read for
/// [`PreparedPublication::base_tip_seen`] but a moved base is not refused.
///
/// # Errors
/// `PATCH_CANDIDATE_PUBLISH_INPUT`, `…_CANDIDATE_MISMATCH`, `…_BASELINE_MISSING`,
/// `…_BASE_MISSING`, `…_BASE_MOVED` (no rebase asked), `…_GIT_VERSION`, `…_REBASE_CONFLICT`,
/// `…_REGATE_FAILED`, `…_REGATE_UNAVAILABLE`, `…_BRANCH_MOVED` (an extension's branch holds
/// something else or is gone), `…_AUTH`, `…_REMOTE_UNREACHABLE`, `…_CREDENTIAL`, `…_MIRROR`,
/// `…_GIT`; the candidate digest's own codes.
///
/// # Security
/// The source repository is only fetched from; every object is written to a fresh private
/// mirror. Commit message and identity hold no agent text.
pub fn prepare(request: &PublishRequest<'_>) -> Result<PreparedPublication, PublishError> {
    let candidate = request.candidate;
    if let Some(prev) = request.extends {
        if !is_commit_text(prev) {
            return Err(input(
                "the extended commit must be 40 or 64 lowercase hex digits",
            ));
        }
        if request.rebase.is_some() {
            return Err(input("an extension of a branch cannot also be a rebase"));
        }
    }
    // The digest also proves every post-image matches its `new_sha256`.
    let digest = finalizer::repository_patch_digest(candidate)?.to_string();
    // What was reviewed (the diffs) must be the change committed (the post-images), from the
    // previous images the baseline is checked to hold while the tree is built.
    finalizer::check_diffs_match_content(candidate)?;
    let baseline = candidate.baseline_commit_sha();
    if !is_object_id(baseline) {
        return Err(input("the baseline commit is not a 40-digit object id"));
    }
    let handoff_id = message_handoff_id(candidate)?;
    // What a killed publication left behind (its credential copy included) goes first.
    let _ = crate::mirror::sweep_abandoned_mirrors();
    let mirror = Mirror::create()?;
    let transport = transport_options(request.credential, &mirror)?;
    let remote = request.remote;
    match request.source {
        Some(source) => {
            let absolute = std::path::absolute(source)
                .map_err(|_| input("the source repository path cannot be made absolute"))?;
            // A missing commit and a missing repository are both "cannot be fetched".
            mirror.borrow_objects(&absolute)?;
        }
        None => match mirror.fetch(
            OsStr::new(remote.as_str()),
            remote.protocol(),
            &transport,
            baseline,
        ) {
            Ok(()) => {}
            Err(PublishError::Unreachable { .. }) => return Err(PublishError::BaselineMissing),
            Err(e) => return Err(e),
        },
    }
    if let Some(prev) = request.extends {
        let message = commit_message(&digest, handoff_id, baseline, None, Some(prev));
        return prepare_extension(request, mirror, transport, prev, &message);
    }
    let base_ref = request.base.full_ref();
    // The destination is read while the commit is built (the push checks it again, atomically).
    let (built, tip) = std::thread::scope(|scope| {
        let tip = scope.spawn(|| ls_remote(&mirror, remote, &transport, &base_ref));
        let built = baseline_tree(&mirror, candidate).and_then(|tree| {
            let message = commit_message(&digest, handoff_id, baseline, None, None);
            mirror.commit(&tree, baseline, request.identity, &message)
        });
        let tip = tip
            .join()
            .unwrap_or_else(|_| Err(git_error("the destination recheck panicked")));
        (built, tip)
    });
    let commit = built?;
    let tip = tip?.ok_or(PublishError::BaseMissing)?;
    if request.branch == request.base {
        // The base branch exists (it was just read): it is never the branch created.
        return Err(PublishError::BranchExists);
    }
    let prepared = |mirror, transport, commit_id: String, base_tip_seen: String, rebased| {
        PreparedPublication {
            mirror,
            transport,
            remote: remote.clone(),
            branch: request.branch.clone(),
            base: request.base.clone(),
            commit_id,
            base_tip_seen,
            rebased,
            extends: None,
        }
    };
    if tip == baseline {
        return Ok(prepared(mirror, transport, commit, tip, false));
    }
    let Some(gate) = request.rebase else {
        return Err(PublishError::BaseMoved {
            expected: baseline.to_owned(),
            seen: tip,
        });
    };
    check_git_version(&mirror)?;
    mirror.fetch(
        OsStr::new(remote.as_str()),
        remote.protocol(),
        &transport,
        &format!("+{base_ref}:{FETCHED_BASE_REF}"),
    )?;
    let tip = mirror.resolve_ref(FETCHED_BASE_REF)?;
    if tip == baseline {
        // The base moved back to the baseline between the two reads.
        return Ok(prepared(mirror, transport, commit, tip, false));
    }
    let merged_tree = merge_tree(&mirror, &tip, &commit)?;
    let message = commit_message(&digest, handoff_id, baseline, Some(&tip), None);
    let rebased = mirror.commit(&merged_tree, &tip, request.identity, &message)?;
    let verdict = gate.rerun(&MergedCommit {
        git_dir: mirror.git_dir(),
        commit_id: &rebased,
        tree_id: &merged_tree,
        base_tip: &tip,
    });
    match verdict {
        RegateVerdict::Passed => {}
        RegateVerdict::Failed => return Err(PublishError::RegateFailed),
        RegateVerdict::Unavailable => return Err(PublishError::RegateUnavailable),
    }
    // The tree the gate saw is still the commit's (the gate could not have moved it).
    if mirror.tree_of(&rebased)? != merged_tree {
        return Err(git_error(
            "the merged commit's tree changed during the gate run",
        ));
    }
    Ok(prepared(mirror, transport, rebased, tip, true))
}

/// The baseline's tree with the candidate applied, in the mirror.
fn baseline_tree(
    mirror: &Mirror,
    candidate: &RepositoryPatchCandidate,
) -> Result<String, PublishError> {
    let baseline = candidate.baseline_commit_sha();
    match mirror.candidate_tree(candidate, baseline) {
        Ok(tree) => Ok(tree),
        // Told apart only on failure (one process fewer on the common path).
        Err(_) if !mirror.has_commit(baseline)? => Err(PublishError::BaselineMissing),
        Err(e) => Err(e),
    }
}

/// [`prepare`] for an extension of `prev` on the request's branch: the tree built while the
/// base and the branch are read (one `ls-remote`), then the branch fetched into the mirror (so
/// the parent exists, and the tip read is the fetched one), then the commit on `prev`.
fn prepare_extension(
    request: &PublishRequest<'_>,
    mirror: Mirror,
    transport: Vec<OsString>,
    prev: &str,
    message: &str,
) -> Result<PreparedPublication, PublishError> {
    let remote = request.remote;
    let base_ref = request.base.full_ref();
    let branch_ref = request.branch.full_ref();
    let (tree, tips) = std::thread::scope(|scope| {
        let tips = scope.spawn(|| {
            ls_remote_refs(
                &mirror,
                remote,
                &transport,
                [base_ref.as_str(), branch_ref.as_str()],
            )
        });
        let tree = baseline_tree(&mirror, request.candidate);
        let tips = tips
            .join()
            .unwrap_or_else(|_| Err(git_error("the destination recheck panicked")));
        (tree, tips)
    });
    let tree = tree?;
    let [base_tip, branch_tip] = tips?;
    let base_tip = base_tip.ok_or(PublishError::BaseMissing)?;
    if request.branch == request.base {
        return Err(PublishError::BranchExists);
    }
    // A deleted branch is never recreated by an extension.
    if branch_tip.is_none() {
        return Err(PublishError::BranchMoved);
    }
    // The branch itself (an advertised ref) rather than `prev` by id: its tip is `prev`, or
    // `prev` is an ancestor when the tip is this very commit (a repeat).
    let fetched = mirror.fetch(
        OsStr::new(remote.as_str()),
        remote.protocol(),
        &transport,
        &format!("+{branch_ref}:{FETCHED_EXTENDS_REF}"),
    );
    if let Err(e) = fetched {
        // Deleted between the two reads: moved; anything else is the fetch's own failure.
        return match ls_remote(&mirror, remote, &transport, &branch_ref)? {
            None => Err(PublishError::BranchMoved),
            Some(_) => Err(e),
        };
    }
    let tip = mirror.resolve_ref(FETCHED_EXTENDS_REF)?;
    // Someone else's history that does not hold `prev` at all: no commit to build or compare.
    if tip != prev && !mirror.has_commit(prev)? {
        return Err(PublishError::BranchMoved);
    }
    let commit = mirror.commit(&tree, prev, request.identity, message)?;
    // The tip is `prev` (the push moves it) or already this commit (the push finds it there).
    if tip != prev && tip != commit {
        return Err(PublishError::BranchMoved);
    }
    Ok(PreparedPublication {
        mirror,
        transport,
        remote: remote.clone(),
        branch: request.branch.clone(),
        base: request.base.clone(),
        commit_id: commit,
        base_tip_seen: base_tip,
        rebased: false,
        extends: Some(prev.to_owned()),
    })
}

/// [`prepare`] then [`PreparedPublication::push`]: for callers that record the commit id only
/// with the publication record.
///
/// # Errors
/// Those of [`prepare`] and [`PreparedPublication::push`].
pub fn publish(request: &PublishRequest<'_>) -> Result<PublicationRecord, PublishError> {
    prepare(request)?.push()
}

/// `git merge-tree --write-tree` of the moved base and the candidate's commit: the merged tree,
/// or a conflict refusal.
fn merge_tree(mirror: &Mirror, tip: &str, commit: &str) -> Result<String, PublishError> {
    let mut cmd = mirror.git("");
    cmd.args([
        "merge-tree",
        "--write-tree",
        "--no-messages",
        "--name-only",
        "--end-of-options",
        tip,
        commit,
    ]);
    let out = run(&mut cmd, None, MERGE_TREE_CAP, crate::run::LOCAL_DEADLINE)?;
    match out.status.code() {
        Some(0) => {
            let first = out
                .stdout
                .split_inclusive(|b| *b == b'\n')
                .next()
                .unwrap_or_default();
            object_id_line(first)
        }
        Some(1) => Err(PublishError::RebaseConflict),
        _ => Err(git_error("git merge-tree failed")),
    }
}

/// Refuses a git older than [`MIN_REBASE_GIT`].
fn check_git_version(mirror: &Mirror) -> Result<(), PublishError> {
    let mut cmd = mirror.git("");
    cmd.arg("version");
    let out = crate::run::run_ok(&mut cmd, None, 4096, "git version failed")?;
    match parse_git_version(&String::from_utf8_lossy(&out)) {
        Some(version) if version >= MIN_REBASE_GIT => Ok(()),
        _ => Err(PublishError::GitVersion { need: "2.38" }),
    }
}

/// `(major, minor)` of `git version` output (`git version 2.47.3`, `git version 2.39.2.windows.1`).
fn parse_git_version(text: &str) -> Option<(u32, u32)> {
    let version = text.trim().strip_prefix("git version ")?;
    let mut parts = version.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse::<u32>()
            .ok()
    });
    Some((parts.next()??, parts.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_versions_are_parsed_and_compared() {
        assert_eq!(parse_git_version("git version 2.47.3\n"), Some((2, 47)));
        assert_eq!(
            parse_git_version("git version 2.39.2.windows.1"),
            Some((2, 39))
        );
        assert!(parse_git_version("git version 2.37.1").unwrap() < MIN_REBASE_GIT);
        assert!(parse_git_version("git version 2.38.0").unwrap() >= MIN_REBASE_GIT);
        assert!(parse_git_version("git version 3.0").unwrap() >= MIN_REBASE_GIT);
        assert_eq!(parse_git_version("hub version 2.40"), None);
        assert_eq!(parse_git_version("git version x.y"), None);
    }

    #[test]
    fn porcelain_lines_are_matched_by_target_ref() {
        let out = b"To /srv/r.git\n*\tabc:refs/heads/b\t[new branch]\nDone\n";
        assert_eq!(
            porcelain_outcome(out, "refs/heads/b"),
            Some(PushFlag::Created)
        );
        let out = b"To /srv/r.git\n!\tabc:refs/heads/b\t[rejected] (stale info)\nDone\n";
        assert_eq!(
            porcelain_outcome(out, "refs/heads/b"),
            Some(PushFlag::Rejected)
        );
        assert_eq!(porcelain_outcome(out, "refs/heads/c"), None);
        let out = b"To /srv/r.git\n \tabc:refs/heads/b\t1234567..abcdef0\nDone\n";
        assert_eq!(
            porcelain_outcome(out, "refs/heads/b"),
            Some(PushFlag::FastForward)
        );
        let out = b"To /srv/r.git\n+\tabc:refs/heads/b\tabcdef0...1234567 (forced update)\n";
        assert_eq!(
            porcelain_outcome(out, "refs/heads/b"),
            Some(PushFlag::Forced)
        );
        assert_eq!(porcelain_outcome(b"\xff\n", "refs/heads/b"), None);
    }

    #[test]
    fn an_extended_commit_is_named_by_full_lowercase_hex() {
        assert!(is_commit_text(&"a".repeat(40)));
        assert!(is_commit_text(&"0123456789abcdef".repeat(4)));
        for bad in [
            String::new(),
            "a".repeat(39),
            "a".repeat(41),
            "A".repeat(40),
            "g".repeat(40),
            format!("-{}", "a".repeat(39)),
            format!("{}\n", "a".repeat(39)),
        ] {
            assert!(!is_commit_text(&bad), "{bad:?}");
        }
    }

    #[test]
    fn an_extension_message_says_what_it_continues() {
        let m = commit_message(
            "sha256:ab",
            "handoff-1",
            &"c".repeat(40),
            None,
            Some(&"e".repeat(40)),
        );
        assert_eq!(
            m,
            format!(
                "Publish patch candidate sha256:ab\n\nCandidate-Digest: sha256:ab\nHandoff-Id: handoff-1\nBaseline-Commit: {}\nContinues: {}\n",
                "c".repeat(40),
                "e".repeat(40)
            )
        );
    }

    #[test]
    fn the_message_holds_host_fields_only() {
        let m = commit_message(
            "sha256:ab",
            "handoff-1",
            &"c".repeat(40),
            Some(&"d".repeat(40)),
            None,
        );
        assert_eq!(
            m,
            format!(
                "Publish patch candidate sha256:ab\n\nCandidate-Digest: sha256:ab\nHandoff-Id: handoff-1\nBaseline-Commit: {}\nRebased-Onto: {}\n",
                "c".repeat(40),
                "d".repeat(40)
            )
        );
    }
}
