//! Which post-image lines a changed file adds. A create adds every line. An update adds the `+`
//! lines of its unified diff, located through the hunk headers; the diff is checked against the
//! post-image as it is walked (every context and added line must equal the post-image line at
//! its position, every hunk must hold exactly the lines its header counts). A diff that does not
//! agree with the post-image in any way is not trusted: the whole post-image is scanned instead.
//! Lines are split on `\n` (Git's line model, which every candidate diff uses; see
//! `finalizer::unified_diff`), numbered from 1.

use memchr::memchr_iter;

/// The post-image split into lines: byte offsets of each line's start.
#[derive(Debug)]
pub(crate) struct Lines {
    starts: Vec<usize>,
    len: usize,
}

impl Lines {
    pub(crate) fn of(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = Vec::with_capacity(bytes.len() / 32 + 1);
        if !bytes.is_empty() {
            starts.push(0);
        }
        for nl in memchr_iter(b'\n', bytes) {
            let next = nl + 1;
            if next < bytes.len() {
                starts.push(next);
            }
        }
        Self {
            starts,
            len: bytes.len(),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.starts.len()
    }

    /// The byte range of line `index` (0-based), its `\n` included.
    fn range(&self, index: usize) -> Option<(usize, usize)> {
        let start = *self.starts.get(index)?;
        let end = self.starts.get(index + 1).copied().unwrap_or(self.len);
        Some((start, end))
    }
}

/// The added lines of one file.
#[derive(Debug)]
pub(crate) enum Added {
    /// Every line (a create, or an update whose diff does not agree with its post-image).
    All,
    /// Indexed by 0-based line: added or not.
    Some(Vec<bool>),
}

impl Added {
    pub(crate) fn contains(&self, index: usize) -> bool {
        match self {
            Self::All => true,
            Self::Some(set) => set.get(index).copied().unwrap_or(false),
        }
    }

    pub(crate) fn count(&self, lines: &Lines) -> usize {
        match self {
            Self::All => lines.count(),
            Self::Some(set) => set.iter().filter(|a| **a).count(),
        }
    }
}

/// `@@ -A[,B] +C[,D] @@…` → (B, C, D).
fn parse_hunk_header(line: &str) -> Option<(usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old, rest) = rest.split_once(" +")?;
    let (new, _) = rest.split_once(" @@")?;
    let count = |spec: &str| -> Option<(usize, usize)> {
        match spec.split_once(',') {
            Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
            None => Some((spec.parse().ok()?, 1)),
        }
    };
    let (_, old_count) = count(old)?;
    let (new_start, new_count) = count(new)?;
    Some((old_count, new_start, new_count))
}

fn strip_nl(s: &str) -> &str {
    s.strip_suffix('\n').unwrap_or(s)
}

/// The added lines of an update whose diff is `diff` and whose post-image is `post`.
pub(crate) fn added_by_diff(diff: &str, post: &str, lines: &Lines) -> Added {
    walk(diff, post, lines).map_or(Added::All, Added::Some)
}

fn walk(diff: &str, post: &str, lines: &Lines) -> Option<Vec<bool>> {
    let mut added = vec![false; lines.count()];
    let mut diff_lines = diff.split_inclusive('\n').peekable();
    // The two file headers, then hunks only.
    if diff.is_empty() {
        return Some(added);
    }
    diff_lines.next().filter(|l| l.starts_with("--- "))?;
    diff_lines.next().filter(|l| l.starts_with("+++ "))?;
    let mut next_new = 0_usize; // the first post-image line a hunk may start at (0-based)
    while let Some(header) = diff_lines.next() {
        let (mut old_left, new_start, mut new_left) = parse_hunk_header(strip_nl(header))?;
        // A hunk with no new lines names the line before it; otherwise its first line.
        let mut cursor = if new_left == 0 {
            new_start
        } else {
            new_start.checked_sub(1)?
        };
        if cursor < next_new {
            return None;
        }
        while old_left > 0 || new_left > 0 {
            let line = diff_lines.next()?;
            let (tag, text) = line.split_at_checked(1)?;
            match tag {
                " " | "+" => {
                    if new_left == 0 || (tag == " " && old_left == 0) {
                        return None;
                    }
                    let (start, end) = lines.range(cursor)?;
                    if strip_nl(post.get(start..end)?) != strip_nl(text) {
                        return None;
                    }
                    if tag == "+" {
                        *added.get_mut(cursor)? = true;
                    } else {
                        old_left -= 1;
                    }
                    new_left -= 1;
                    cursor += 1;
                }
                "-" => {
                    old_left = old_left.checked_sub(1)?;
                }
                _ => return None,
            }
            while diff_lines.peek().is_some_and(|l| l.starts_with('\\')) {
                diff_lines.next();
            }
        }
        next_new = cursor;
    }
    Some(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn added_of(before: &str, after: &str) -> Vec<usize> {
        let diff = finalizer::unified_diff("a.txt", Some(before), Some(after));
        let lines = Lines::of(after);
        match added_by_diff(&diff, after, &lines) {
            Added::All => vec![usize::MAX],
            Added::Some(set) => (0..set.len()).filter(|i| set[*i]).map(|i| i + 1).collect(),
        }
    }

    #[test]
    fn added_lines_follow_the_hunks() {
        let before = (1..=20).map(|i| format!("l{i}\n")).collect::<String>();
        let after = before
            .replace("l3\n", "l3\nnew-a\n")
            .replace("l15\n", "changed\n");
        assert_eq!(added_of(&before, &after), vec![4, 16]);
        assert_eq!(added_of(&before, &before), Vec::<usize>::new());
        assert_eq!(added_of("a\nb", "a\nc"), vec![2]);
        assert_eq!(added_of("a\n", "a\nb"), vec![2]);
        assert_eq!(added_of("a\r\nb\r\n", "a\r\nX\r\n"), vec![2]);
        assert_eq!(added_of("x\n", ""), Vec::<usize>::new());
        assert_eq!(added_of("", "new\n"), vec![1]);
    }

    #[test]
    fn a_diff_that_disagrees_with_the_post_image_means_every_line() {
        let after = "one\ntwo\nthree\n";
        let lines = Lines::of(after);
        let lying = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n";
        assert!(matches!(added_by_diff(lying, after, &lines), Added::All));
        let short = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n";
        assert!(matches!(added_by_diff(short, after, &lines), Added::All));
        assert!(matches!(
            added_by_diff("garbage", after, &lines),
            Added::All
        ));
        let honest = "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-2\n+two\n";
        assert!(
            matches!(added_by_diff(honest, after, &lines), Added::Some(s) if s == [false, true, false])
        );
    }
}
