//! The chain of attempts as a reviewer sees it: the diff between two consecutive attempts of one
//! approval, as well as each one's diff against the baseline.
//!
//! Both candidates are diffs against the same pinned commit, and each carries the post-image of
//! every file it creates or updates, so the change from one attempt to the next is computed from
//! the two candidates alone, with no repository at hand: a file both changed is diffed from one
//! post-image to the other; a file only the later attempt changed shows the later attempt's own
//! diff (the earlier one left the baseline there); a file only the earlier attempt changed shows
//! that diff reversed (the later one went back to the baseline).

use std::collections::BTreeMap;

use finalizer::{RepositoryPatchCandidate, RepositoryPatchFile, unified_diff};
use serde::Serialize;
use snapshot::FileOp;

use crate::error::ReviewError;

/// How one file differs from the earlier attempt to the later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptChange {
    /// Both attempts change the file, differently.
    Changed,
    /// Only the later attempt changes the file.
    Added,
    /// Only the earlier attempt changed the file: the later one leaves it as the baseline has it.
    Reverted,
}

/// One file's change between two consecutive attempts: a unified diff from the earlier
/// attempt's post-image to the later one's (`a/` is the earlier attempt, `b/` the later).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AttemptFileDiff {
    pub path: String,
    pub change: AttemptChange,
    pub diff: String,
}

/// The files whose post-image differs between `earlier` and `later`, two attempts of one
/// approval at one baseline commit, by path; a file both change the same way is left out.
///
/// # Errors
/// `PATCH_CANDIDATE_REVIEW_CHAIN` when the two are not of the same repository, approval and
/// baseline commit (their diffs against the baseline would not compose).
pub fn attempt_diff(
    earlier: &RepositoryPatchCandidate,
    later: &RepositoryPatchCandidate,
) -> Result<Vec<AttemptFileDiff>, ReviewError> {
    let same_base = earlier.repository_full_name() == later.repository_full_name()
        && earlier.approved_plan_digest() == later.approved_plan_digest()
        && earlier.baseline_commit_sha() == later.baseline_commit_sha();
    if !same_base {
        return Err(ReviewError::Chain {
            detail: "the attempts are not of one approval at one baseline commit",
        });
    }
    let by_path = |c: &RepositoryPatchCandidate| -> BTreeMap<String, RepositoryPatchFile> {
        c.changed_files()
            .iter()
            .map(|f| (f.path().as_str().to_owned(), f.clone()))
            .collect()
    };
    let (mut before, after) = (by_path(earlier), by_path(later));
    let mut out = Vec::new();
    for (path, b) in &after {
        let (change, diff) = match before.remove(path) {
            Some(a) if a.op() == b.op() && a.new_sha256() == b.new_sha256() => continue,
            Some(a) => (
                AttemptChange::Changed,
                unified_diff(path, post_image(&a), post_image(b)),
            ),
            None => (AttemptChange::Added, b.diff().to_owned()),
        };
        out.push(AttemptFileDiff {
            path: path.clone(),
            change,
            diff,
        });
    }
    for (path, a) in before {
        out.push(AttemptFileDiff {
            diff: reverse_diff(a.diff()),
            path,
            change: AttemptChange::Reverted,
        });
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    Ok(out)
}

/// The file's bytes after the attempt (`None`: deleted).
fn post_image(f: &RepositoryPatchFile) -> Option<&str> {
    match f.op() {
        FileOp::Delete => None,
        FileOp::Create | FileOp::Update => f.content(),
    }
}

/// `diff` (a unified diff as the finalizer writes it: `--- a/P` or `/dev/null`, `+++ b/P` or
/// `/dev/null`, hunks) reversed: the sides swapped, each hunk's ranges swapped, removed lines
/// added and added lines removed, each change block's removals first as in any unified diff.
/// A `\ No newline at end of file` marker stays with the line it follows.
fn reverse_diff(diff: &str) -> String {
    if diff.is_empty() {
        // No line differs (an empty file created): nothing differs the other way either.
        return String::new();
    }
    let mut lines = diff.split_inclusive('\n').peekable();
    let mut out = String::with_capacity(diff.len());
    let (mut from, mut to) = (None, None);
    if let Some(l) = lines.next_if(|l| l.starts_with("--- ")) {
        from = Some(l["--- ".len()..].trim_end_matches('\n'));
    }
    if let Some(l) = lines.next_if(|l| l.starts_with("+++ ")) {
        to = Some(l["+++ ".len()..].trim_end_matches('\n'));
    }
    let side = |name: Option<&str>, prefix: &str| match name {
        Some("/dev/null") | None => "/dev/null".to_owned(),
        Some(n) => format!("{prefix}{}", n.get(2..).unwrap_or(n)),
    };
    out.push_str(&format!(
        "--- {}\n+++ {}\n",
        side(to, "a/"),
        side(from, "b/")
    ));
    // A change block: removals and additions (each with its marker lines) between context lines.
    let (mut removed, mut added) = (String::new(), String::new());
    let flush = |out: &mut String, removed: &mut String, added: &mut String| {
        out.push_str(removed);
        out.push_str(added);
        removed.clear();
        added.clear();
    };
    let mut last_was_added = false;
    for line in lines {
        if let Some(rest) = line.strip_prefix('-') {
            added.push('+');
            added.push_str(rest);
            last_was_added = true;
        } else if let Some(rest) = line.strip_prefix('+') {
            removed.push('-');
            removed.push_str(rest);
            last_was_added = false;
        } else if line.starts_with('\\') {
            // The marker belongs to the line just moved.
            if removed.is_empty() && added.is_empty() {
                out.push_str(line);
            } else if last_was_added {
                added.push_str(line);
            } else {
                removed.push_str(line);
            }
        } else {
            flush(&mut out, &mut removed, &mut added);
            out.push_str(&swap_ranges(line));
        }
    }
    flush(&mut out, &mut removed, &mut added);
    out
}

/// `@@ -a,b +c,d @@` → `@@ -c,d +a,b @@`; any other line as it is.
fn swap_ranges(line: &str) -> String {
    let Some(rest) = line.strip_prefix("@@ -") else {
        return line.to_owned();
    };
    let Some((old, rest)) = rest.split_once(" +") else {
        return line.to_owned();
    };
    let Some((new, tail)) = rest.split_once(" @@") else {
        return line.to_owned();
    };
    format!("@@ -{new} +{old} @@{tail}")
}

#[cfg(test)]
#[path = "attempts_tests.rs"]
mod tests;
