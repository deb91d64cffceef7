//! A candidate as one `git apply`-ready patch ([`git_patch`]).
//!
//! The candidate's own `diff` fields stay exactly what the reference produces (difflib headers
//! `--- a/PATH` / `+++ b/PATH`, no `diff --git` line); they are part of the digest. An empty-file
//! create or delete has an empty diff there, which `git apply` cannot see. The export adds, per
//! file, what Git needs and nothing else:
//!
//! * a `diff --git a/PATH b/PATH` header, names spelled with Git's quoting rules
//!   (`core.quotePath`: a name holding a control character, `"`, `\` or a non-ASCII byte is
//!   written in double quotes with C escapes and octal bytes), and a trailing tab after a `---` /
//!   `+++` name that holds a space, as `git diff` writes them;
//! * `new file mode 100644` / `deleted file mode 100644` for creates and deletes, so empty files
//!   are created and deleted too;
//! * the candidate's hunks byte for byte (`\ No newline at end of file` markers and CRLF lines
//!   included).
//!
//! Before rendering, every diff is checked against the candidate's bytes: a create's diff must be
//! the canonical diff of its content, a delete's diff must remove exactly the bytes of its
//! `previous_sha256`, and an update's hunks must be well formed and their new side must equal the
//! content at the lines they name. (The old side of an update can only be checked against the
//! repository: `verify --repo` does that, and `git apply` refuses a patch whose old side differs.)

use std::fmt::Write as _;

use snapshot::FileOp;

use vocab::Sha256;

use crate::diff::{split_lf, unified_diff};
use crate::error::FinalizeError;
use crate::model::{RepositoryPatchCandidate, RepositoryPatchFile};

/// The mode of every file a candidate creates or deletes (candidates carry text files only).
const FILE_MODE: &str = "100644";
/// difflib's marker after a line without a final newline.
const NO_EOL: &str = "\\ No newline at end of file\n";

/// Renders `candidate` as a patch `git apply` accepts at its baseline commit, reproducing every
/// changed file's exact bytes (see the module docs).
///
/// # Errors
/// `REPOSITORY_PATCH_EXPORT_DIFF` naming the first file whose diff does not reproduce the
/// candidate's bytes (or, for a delete, the bytes its `previous_sha256` names).
pub fn git_patch(candidate: &RepositoryPatchCandidate) -> Result<String, FinalizeError> {
    let mut out = String::new();
    for file in candidate.changed_files() {
        render_file(&mut out, file)?;
    }
    Ok(out)
}

fn render_file(out: &mut String, file: &RepositoryPatchFile) -> Result<(), FinalizeError> {
    let path = file.path().as_str();
    let refused = || FinalizeError::ExportDiff {
        path: path.to_owned(),
    };
    let diff = file.diff();
    let (from, to) = (git_quote_path("a/", path), git_quote_path("b/", path));
    let tab = if path.contains(' ') { "\t" } else { "" };
    match file.op() {
        FileOp::Create => {
            let content = file.content().ok_or_else(refused)?;
            if unified_diff(path, None, Some(content)) != diff {
                return Err(refused());
            }
            let _ = writeln!(out, "diff --git {from} {to}\nnew file mode {FILE_MODE}");
            if let Some(hunks) = hunks_after_headers(diff, "/dev/null", &format!("b/{path}")) {
                let _ = write!(out, "--- /dev/null\n+++ {to}{tab}\n{hunks}");
            }
        }
        FileOp::Delete => {
            let previous = file.previous_sha256().ok_or_else(refused)?;
            let old = removed_text(diff).ok_or_else(refused)?;
            if Sha256::of(old.as_bytes()) != *previous
                || unified_diff(path, Some(&old), None) != diff
            {
                return Err(refused());
            }
            let _ = writeln!(out, "diff --git {from} {to}\ndeleted file mode {FILE_MODE}");
            if let Some(hunks) = hunks_after_headers(diff, &format!("a/{path}"), "/dev/null") {
                let _ = write!(out, "--- {from}{tab}\n+++ /dev/null\n{hunks}");
            }
        }
        FileOp::Update => {
            let content = file.content().ok_or_else(refused)?;
            if diff.is_empty() {
                // No line differs: nothing to apply, which is right only if no byte differs.
                return if file.previous_sha256() == file.new_sha256() {
                    Ok(())
                } else {
                    Err(refused())
                };
            }
            let hunks = hunks_after_headers(diff, &format!("a/{path}"), &format!("b/{path}"))
                .ok_or_else(refused)?;
            if !new_side_matches(hunks, content) {
                return Err(refused());
            }
            let _ = write!(
                out,
                "diff --git {from} {to}\n--- {from}{tab}\n+++ {to}{tab}\n{hunks}"
            );
        }
    }
    Ok(())
}

/// The hunks of a candidate diff whose two header lines name `from` and `to`; `None` for an empty
/// diff or other headers.
fn hunks_after_headers<'d>(diff: &'d str, from: &str, to: &str) -> Option<&'d str> {
    let rest = diff.strip_prefix("--- ")?.strip_prefix(from)?;
    let rest = rest.strip_prefix("\n+++ ")?.strip_prefix(to)?;
    let hunks = rest.strip_prefix('\n')?;
    hunks.starts_with("@@ ").then_some(hunks)
}

/// The bytes a delete's diff removes: its `-` lines, with a line followed by the no-newline
/// marker losing its `\n`. `None` for anything else in the body.
fn removed_text(diff: &str) -> Option<String> {
    if diff.is_empty() {
        return Some(String::new());
    }
    let mut old = String::new();
    for line in split_lf(diff).into_iter().skip(2) {
        if line == NO_EOL {
            old.pop().filter(|c| *c == '\n')?;
        } else if let Some(removed) = line.strip_prefix('-') {
            old.push_str(removed);
        } else if !line.starts_with("@@ ") {
            return None;
        }
    }
    Some(old)
}

/// A unified hunk header `@@ -A[,B] +C[,D] @@` as (C, D, B).
fn hunk_header(line: &str) -> Option<(usize, usize, usize)> {
    let body = line.strip_prefix("@@ -")?.strip_suffix(" @@\n")?;
    let (old, new) = body.split_once(" +")?;
    let range = |r: &str| -> Option<(usize, usize)> {
        match r.split_once(',') {
            Some((start, len)) => Some((start.parse().ok()?, len.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let (_, old_len) = range(old)?;
    let (new_start, new_len) = range(new)?;
    Some((new_start, new_len, old_len))
}

/// True when `hunks` is a sequence of well-formed hunks, in order, whose new side (context and
/// `+` lines, a line before the no-newline marker without its `\n`) equals `content` at the lines
/// each header names.
fn new_side_matches<'h>(hunks: &'h str, content: &'h str) -> bool {
    let new_lines = split_lf(content);
    let mut lines = split_lf(hunks).into_iter().peekable();
    let mut next_free = 0_usize;
    while let Some(header) = lines.next() {
        let Some((new_start, new_len, old_len)) = hunk_header(header) else {
            return false;
        };
        let mut side: Vec<&'h str> = Vec::with_capacity(new_len.min(new_lines.len()));
        let mut old_seen = 0_usize;
        while old_seen < old_len || side.len() < new_len {
            let Some(line) = lines.next() else {
                return false;
            };
            let marker = lines.peek() == Some(&NO_EOL);
            if marker {
                lines.next();
            }
            // A line before the marker was written with a `\n` the file does not have.
            let text = |t: &'h str| {
                if marker {
                    t.strip_suffix('\n')
                } else {
                    Some(t)
                }
            };
            match line.split_at_checked(1) {
                Some((" ", t)) => {
                    old_seen += 1;
                    let Some(t) = text(t) else { return false };
                    side.push(t);
                }
                Some(("-", _)) => old_seen += 1,
                Some(("+", t)) => {
                    let Some(t) = text(t) else { return false };
                    side.push(t);
                }
                _ => return false,
            }
            if old_seen > old_len || side.len() > new_len {
                return false;
            }
        }
        // An empty new range names the line before it.
        let start = if new_len == 0 {
            new_start
        } else {
            match new_start.checked_sub(1) {
                Some(s) => s,
                None => return false,
            }
        };
        let Some(end) = start.checked_add(new_len) else {
            return false;
        };
        if start < next_free || new_lines.get(start..end) != Some(side.as_slice()) {
            return false;
        }
        next_free = end;
    }
    true
}

/// `prefix` + `path` as Git writes a name in a patch header: unchanged when no byte needs
/// quoting, otherwise in double quotes with `\a \b \t \n \v \f \r \" \\` and three-digit octal
/// escapes for other control bytes, DEL and every non-ASCII byte (`core.quotePath=true`).
#[must_use]
pub fn git_quote_path(prefix: &str, path: &str) -> String {
    let full = format!("{prefix}{path}");
    let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\' || b >= 0x7f;
    if !full.bytes().any(needs) {
        return full;
    }
    let mut out = String::with_capacity(full.len() + 8);
    out.push('"');
    for b in full.bytes() {
        let _ = match b {
            0x07 => write!(out, "\\a"),
            0x08 => write!(out, "\\b"),
            b'\t' => write!(out, "\\t"),
            b'\n' => write!(out, "\\n"),
            0x0b => write!(out, "\\v"),
            0x0c => write!(out, "\\f"),
            b'\r' => write!(out, "\\r"),
            b'"' => write!(out, "\\\""),
            b'\\' => write!(out, "\\\\"),
            b if needs(b) => write!(out, "\\{b:03o}"),
            b => write!(out, "{}", char::from(b)),
        };
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
