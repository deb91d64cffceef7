//! One publication: the commit in a private mirror, the destination recheck (and, when asked,
//! the rebase onto a moved base with its gate re-run), then the create-only atomic push.
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
    /// The branch to create (it must not exist).
    pub branch: &'a BranchName,
    /// The branch whose tip must still be the candidate's baseline commit.
    pub base: &'a BranchName,
    /// The fixed author, committer and date.
    pub identity: &'a CommitIdentity,
    /// Where git gets the remote's credential.
    pub credential: &'a CredentialSource,
    /// `None`: a moved base is refused. `Some(gate)`: the candidate is merged onto the moved
    /// base and published only if `gate` passes on exactly the merged tree.
    pub rebase: Option<&'a dyn MergedTreeGate>,
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
}

impl PreparedPublication {
    /// The commit that [`Self::push`] publishes (deterministic: the same candidate, baseline,
    /// base tip and identity give the same id).
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
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_BRANCH_EXISTS` (the branch holds another commit),
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
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Ok(PublicationRecord {
            remote: self.remote.as_str().to_owned(),
            branch: self.branch.clone(),
            commit_id: self.commit_id.clone(),
            base_tip_seen: self.base_tip_seen.clone(),
            pushed_at: rfc3339_utc(now),
            rebased: self.rebased,
            created,
        })
    }

    /// Deletes the branch [`Self::push`] created, only while it still holds exactly this
    /// commit (`push --atomic` with a lease on the commit): for a push whose publication may not
    /// be recorded (the candidate was rejected while it ran). `true` when the branch was
    /// deleted; `false` when it no longer exists or holds another commit (left as it is).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_PUSH_REJECTED` (the remote refused the deletion), `…_AUTH`,
    /// `…_REMOTE_UNREACHABLE`, `…_GIT`.
    pub fn withdraw(&self) -> Result<bool, PublishError> {
        let target = self.branch.full_ref();
        let mut cmd = self.mirror.git(self.remote.protocol());
        cmd.args(&self.transport)
            .args(["push", "--atomic", "--porcelain", "--no-verify"])
            .arg(format!("--force-with-lease={target}:{}", self.commit_id))
            .arg("--end-of-options")
            .arg(self.remote.as_str())
            .arg(format!(":{target}"));
        let out = run(&mut cmd, None, PUSH_CAP, NETWORK_DEADLINE)?;
        match (
            out.status.success(),
            porcelain_outcome(&out.stdout, &target),
        ) {
            (true, Some(PushFlag::Deleted)) => Ok(true),
            (false, Some(PushFlag::Rejected)) => {
                match ls_remote(&self.mirror, &self.remote, &self.transport, &target)? {
                    Some(tip) if tip == self.commit_id => Err(PublishError::PushRejected {
                        detail: "the remote refused to delete the branch",
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
    let mut cmd = mirror.git(remote.protocol());
    cmd.args(transport)
        .args(["ls-remote", "--refs", "--end-of-options"])
        .arg(remote.as_str())
        .arg(full_ref);
    let out = run(&mut cmd, None, LS_REMOTE_CAP, NETWORK_DEADLINE)?;
    if !out.status.success() {
        return Err(classify_network_failure(&out.stderr));
    }
    let text = std::str::from_utf8(&out.stdout)
        .map_err(|_| git_error("git ls-remote printed non-text"))?;
    for line in text.lines() {
        let (id, name) = line
            .split_once('\t')
            .ok_or_else(|| git_error("git ls-remote printed an unexpected line"))?;
        if name == full_ref {
            if !is_object_id(id) {
                return Err(git_error("git ls-remote printed an unexpected id"));
            }
            return Ok(Some(id.to_owned()));
        }
    }
    Ok(None)
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
fn commit_message(
    digest: &str,
    handoff_id: &str,
    baseline: &str,
    rebased_onto: Option<&str>,
) -> String {
    let mut message = format!(
        "Publish patch candidate {digest}\n\nCandidate-Digest: {digest}\nHandoff-Id: {handoff_id}\nBaseline-Commit: {baseline}\n"
    );
    if let Some(tip) = rebased_onto {
        message.push_str("Rebased-Onto: ");
        message.push_str(tip);
        message.push('\n');
    }
    message
}

/// Builds the commit and rechecks the destination (see the module docs); nothing is pushed.
///
/// # Errors
/// `PATCH_CANDIDATE_PUBLISH_INPUT`, `…_CANDIDATE_MISMATCH`, `…_BASELINE_MISSING`,
/// `…_BASE_MISSING`, `…_BASE_MOVED` (no rebase asked), `…_GIT_VERSION`, `…_REBASE_CONFLICT`,
/// `…_REGATE_FAILED`, `…_REGATE_UNAVAILABLE`, `…_AUTH`, `…_REMOTE_UNREACHABLE`,
/// `…_CREDENTIAL`, `…_MIRROR`, `…_GIT`; the candidate digest's own codes.
///
/// # Security
/// The source repository is only fetched from; every object is written to a fresh private
/// mirror. Commit message and identity hold no agent text.
pub fn prepare(request: &PublishRequest<'_>) -> Result<PreparedPublication, PublishError> {
    let candidate = request.candidate;
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
    let base_ref = request.base.full_ref();
    // The destination is read while the commit is built (the push checks it again, atomically).
    let (built, tip) = std::thread::scope(|scope| {
        let tip = scope.spawn(|| ls_remote(&mirror, remote, &transport, &base_ref));
        let built = (|| {
            let tree = match mirror.candidate_tree(candidate, baseline) {
                Ok(tree) => tree,
                // Told apart only on failure (one process fewer on the common path).
                Err(_) if !mirror.has_commit(baseline)? => {
                    return Err(PublishError::BaselineMissing);
                }
                Err(e) => return Err(e),
            };
            let message = commit_message(&digest, handoff_id, baseline, None);
            mirror.commit(&tree, baseline, request.identity, &message)
        })();
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
    let message = commit_message(&digest, handoff_id, baseline, Some(&tip));
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
        assert_eq!(porcelain_outcome(b"\xff\n", "refs/heads/b"), None);
    }

    #[test]
    fn the_message_holds_host_fields_only() {
        let m = commit_message(
            "sha256:ab",
            "handoff-1",
            &"c".repeat(40),
            Some(&"d".repeat(40)),
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
