//! A candidate's diffs checked against its own post-images and previous hashes, without the
//! repository: what a reviewer reads (the diff, which the content policy scans line by line) must
//! be exactly the change from the approved baseline bytes to what would be published (the
//! post-image). A candidate whose update carries an empty or partial diff would otherwise show
//! and scan nothing of a changed line that publication then commits.
//!
//! For each file the previous bytes are rebuilt by applying its diff backwards to the post-image
//! (a delete's diff holds them whole; a create has none), and then two facts are required: their
//! SHA-256 is the file's `previous_sha256`, and the canonical diff of (previous, post-image) is
//! byte for byte the file's `diff`. The rebuild may be lenient: whatever it produces, the two
//! checks decide, so it can refuse a good candidate only by a bug, never accept a bad one.

use snapshot::FileOp;

use vocab::Sha256;

use crate::diff::{split_lf, splitlines_keepends, unified_diff};
use crate::error::FinalizeError;
use crate::model::{RepositoryPatchCandidate, RepositoryPatchFile};

/// The marker `difflib`-style diffs print after a line without a final newline.
const NO_NEWLINE: &str = "\\ No newline at end of file\n";

/// Checks that every diff of `candidate` is the canonical diff from the bytes its
/// `previous_sha256` names to its post-image (see the module docs).
///
/// # Errors
/// `REPOSITORY_PATCH_VERIFY_DIFF` naming the first file whose diff does not lead from its
/// previous hash to its post-image.
///
/// # Security
/// Pure and bounded: the diff is parsed once and the canonical diff recomputed under the
/// finalizer's work budget; no file, repository or process is touched.
pub fn check_diffs_match_content(
    candidate: &RepositoryPatchCandidate,
) -> Result<(), FinalizeError> {
    for file in candidate.changed_files() {
        if !file_consistent(file) {
            return Err(FinalizeError::VerifyDiff {
                path: file.path().as_str().to_owned(),
            });
        }
    }
    Ok(())
}

fn file_consistent(file: &RepositoryPatchFile) -> bool {
    let path = file.path().as_str();
    match file.op() {
        FileOp::Create => {
            file.previous_sha256().is_none()
                && file.content().is_some()
                && unified_diff(path, None, file.content()) == file.diff()
        }
        FileOp::Update | FileOp::Delete => {
            let Some(previous) = file.previous_sha256() else {
                return false;
            };
            let after = match file.op() {
                FileOp::Delete => {
                    if file.content().is_some() {
                        return false;
                    }
                    ""
                }
                _ => match file.content() {
                    Some(after) => after,
                    None => return false,
                },
            };
            let post = (file.op() == FileOp::Update).then_some(after);
            // The two line models the diff may have used (Git's `\n`-only, and Python's).
            let models: [fn(&str) -> Vec<&str>; 2] = [split_lf, splitlines_keepends];
            models.iter().any(|split| {
                rebuild_previous(file.diff(), &split(after)).is_some_and(|before| {
                    Sha256::of(before.as_bytes()) == *previous
                        && unified_diff(path, Some(&before), post) == file.diff()
                })
            })
        }
    }
}

/// The old side of `diff` given the new side's lines, or `None` when the diff does not fit them.
fn rebuild_previous(diff: &str, after: &[&str]) -> Option<String> {
    if diff.is_empty() {
        return Some(after.concat());
    }
    let records: Vec<&str> = diff.split_inclusive('\n').collect();
    let (head, body) = records.split_at_checked(2)?;
    if !matches!(head, [from, to] if from.starts_with("--- ") && to.starts_with("+++ ")) {
        return None;
    }
    let mut before = String::with_capacity(diff.len().min(after.iter().map(|l| l.len()).sum()));
    let mut cursor = 0_usize;
    let mut rest = body;
    while let Some((header, tail)) = rest.split_first() {
        let start = hunk_new_start(header)?;
        if start < cursor {
            return None;
        }
        for line in after.get(cursor..start)? {
            before.push_str(line);
        }
        cursor = start;
        rest = tail;
        while let Some((record, tail)) = rest.split_first() {
            if record.starts_with("@@ ") {
                break;
            }
            rest = tail;
            let mut line = record.get(1..)?;
            if let Some((marker, tail)) = rest.split_first()
                && *marker == NO_NEWLINE
            {
                line = line.strip_suffix('\n')?;
                rest = tail;
            }
            match record.as_bytes().first() {
                Some(b' ') => {
                    if *after.get(cursor)? != line {
                        return None;
                    }
                    before.push_str(line);
                    cursor += 1;
                }
                Some(b'-') => before.push_str(line),
                Some(b'+') => {
                    if *after.get(cursor)? != line {
                        return None;
                    }
                    cursor += 1;
                }
                _ => return None,
            }
        }
    }
    for line in after.get(cursor..)? {
        before.push_str(line);
    }
    Some(before)
}

/// The 0-based index of the first new-side line of a hunk header `@@ -a[,b] +c[,d] @@`
/// (difflib prints `c` one-based, or the index itself when the new side is empty).
fn hunk_new_start(header: &str) -> Option<usize> {
    let ranges = header.strip_prefix("@@ -")?.strip_suffix(" @@\n")?;
    let (_, new) = ranges.split_once(" +")?;
    let (start, len) = match new.split_once(',') {
        Some((start, len)) => (start.parse::<usize>().ok()?, len.parse::<usize>().ok()?),
        None => (new.parse::<usize>().ok()?, 1),
    };
    if len == 0 {
        Some(start)
    } else {
        start.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use snapshot::RepoPath;

    use super::*;
    use crate::model::{CandidateFields, RepositoryPatchCandidate};
    use crate::testkit::{create, fields, update};

    fn with(files: Vec<RepositoryPatchFile>) -> RepositoryPatchCandidate {
        RepositoryPatchCandidate::new(CandidateFields { ..fields() }, files).unwrap()
    }

    fn raw(
        path: &str,
        op: FileOp,
        before: Option<&str>,
        after: Option<&str>,
        diff: String,
    ) -> RepositoryPatchFile {
        RepositoryPatchFile::new(
            RepoPath::parse(path).unwrap(),
            op,
            before.map(|b| Sha256::of(b.as_bytes())),
            after.map(|a| Sha256::of(a.as_bytes())),
            after.map(str::to_owned),
            diff,
        )
        .unwrap()
    }

    fn delete(path: &str, before: &str) -> RepositoryPatchFile {
        raw(
            path,
            FileOp::Delete,
            Some(before),
            None,
            unified_diff(path, Some(before), None),
        )
    }

    /// Every shape the finalizer writes passes: several hunks, lines without a final newline,
    /// CRLF, separators only Python knows, whole-file rewrites, empty files, deletes.
    #[test]
    fn finalizer_diffs_pass() {
        let long: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let edited = long
            .replace("line 5\n", "line five\n")
            .replace("line 150\n", "")
            .replace("line 199\n", "line 199\nline 200");
        let cases = vec![
            update("a/many.py", &long, &edited),
            update("a/nl.py", "x\ny", "x\ny\n"),
            update("a/crlf.py", "a\r\nb\r\n", "a\r\nc\r\n"),
            update("a/sep.py", "a\u{2028}b\rc\n", "a\u{2028}B\rc\n"),
            update("a/first.py", "a\nb\nc\n", "z\nb\nc\n"),
            update("a/all.py", "old\n", ""),
            update("a/from-empty.py", "", "new\n"),
            create("a/new.py", "x = 1\n"),
            create("a/empty.py", ""),
            delete("a/gone.py", "bye\nbye"),
            delete("a/gone-empty.py", ""),
        ];
        for file in cases {
            let path = file.path().as_str().to_owned();
            check_diffs_match_content(&with(vec![file])).unwrap_or_else(|e| panic!("{path}: {e}"));
        }
    }

    /// r_update_with_empty_diff_scans_nothing: a changed post-image whose diff is empty, partial,
    /// from another file or from other previous bytes is refused.
    #[test]
    fn diffs_that_do_not_lead_to_the_content_are_refused() {
        let secret = "token = 'AKIA…'\n";
        let cases = vec![
            // The update's diff is empty: nothing would be shown or scanned.
            raw(
                "a/x.py",
                FileOp::Update,
                Some("a\n"),
                Some(secret),
                String::new(),
            ),
            // The diff shows another change than the content makes.
            raw(
                "a/x.py",
                FileOp::Update,
                Some("a\n"),
                Some(secret),
                unified_diff("a/x.py", Some("a\n"), Some("b\n")),
            ),
            // The diff is right for the content but starts from other previous bytes.
            raw(
                "a/x.py",
                FileOp::Update,
                Some("a\n"),
                Some(secret),
                unified_diff("a/x.py", Some("c\n"), Some(secret)),
            ),
            // A hunk dropped from a two-hunk diff.
            {
                let long: String = (0..40).map(|i| format!("l{i}\n")).collect();
                let after = long.replace("l2\n", "x\n").replace("l30\n", secret);
                let full = unified_diff("a/x.py", Some(&long), Some(&after));
                let cut = full.rfind("@@ -").unwrap();
                raw(
                    "a/x.py",
                    FileOp::Update,
                    Some(&long),
                    Some(&after),
                    full[..cut].to_owned(),
                )
            },
            // A create whose diff hides its content.
            raw("a/n.py", FileOp::Create, None, Some(secret), String::new()),
            // A delete whose diff is empty although the file had lines.
            raw("a/d.py", FileOp::Delete, Some("a\n"), None, String::new()),
        ];
        for file in cases {
            assert_eq!(
                check_diffs_match_content(&with(vec![file]))
                    .unwrap_err()
                    .code(),
                "REPOSITORY_PATCH_VERIFY_DIFF"
            );
        }
    }

    /// Every diff the finalizer's own function writes for random edits passes (a deterministic
    /// generator over lines with every separator the diff knows, with and without a final
    /// newline), and the same diff against a changed post-image does not.
    #[test]
    fn random_edits_round_trip() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        fn text(next: &mut impl FnMut(u64) -> u64, n: u64) -> String {
            let pieces = [
                "a",
                "b",
                "c",
                "",
                "\r",
                "\u{2028}",
                "x y",
                "@@ -1 +1 @@",
                "\\ No newline at end of file",
            ];
            let mut out = String::new();
            for _ in 0..n {
                out.push_str(pieces[usize::try_from(next(9)).unwrap()]);
                out.push_str(if next(5) == 0 { "\r\n" } else { "\n" });
            }
            if next(3) == 0 {
                out.push_str("tail");
            }
            out
        }
        for round in 0..400 {
            let n = next(30);
            let before = text(&mut next, n);
            let mut lines: Vec<String> = before.split_inclusive('\n').map(str::to_owned).collect();
            for _ in 0..next(5) {
                let at = usize::try_from(next(lines.len() as u64 + 1)).unwrap();
                match next(3) {
                    0 => lines.insert(at, text(&mut next, 1)),
                    1 if at < lines.len() => {
                        lines.remove(at);
                    }
                    _ if at < lines.len() => lines[at] = text(&mut next, 1),
                    _ => {}
                }
            }
            let after: String = lines.concat();
            if after == before {
                continue;
            }
            let file = update("a/r.py", &before, &after);
            check_diffs_match_content(&with(vec![file.clone()]))
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
            let tampered = raw(
                "a/r.py",
                FileOp::Update,
                Some(&before),
                Some(&format!("{after}secret = 1\n")),
                file.diff().to_owned(),
            );
            assert!(check_diffs_match_content(&with(vec![tampered])).is_err());
        }
    }

    #[test]
    fn hunk_headers_give_the_new_side_start() {
        assert_eq!(hunk_new_start("@@ -1,3 +1,4 @@\n"), Some(0));
        assert_eq!(hunk_new_start("@@ -5 +7 @@\n"), Some(6));
        assert_eq!(hunk_new_start("@@ -1 +0,0 @@\n"), Some(0));
        assert_eq!(hunk_new_start("@@ -3,2 +2,0 @@\n"), Some(2));
        for bad in ["@@ -1 +x @@\n", "@@ -1 +0 @@\n", "-1 +1\n", "@@ -1 +1 @@"] {
            assert_eq!(hunk_new_start(bad), None, "{bad:?}");
        }
    }
}
