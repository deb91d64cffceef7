use super::*;
use pretty_assertions::assert_eq;

const DIFF: &str = "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n keep\n-old  line\n+old line\n-gone\n+new\u{202E}txt\n\\ No newline at end of file\n";

fn unified(opts: DiffOptions) -> Vec<(RowKind, Option<u64>, Option<u64>, String)> {
    let Body::Unified(rows) = render(DIFF, opts).body else {
        panic!("not unified")
    };
    rows.into_iter()
        .map(|r| {
            let text = r.text.segments.iter().map(|s| s.text.as_str()).collect();
            (r.kind, r.old, r.new, text)
        })
        .collect()
}

#[test]
fn unified_rows_carry_both_line_numbers() {
    let rows = unified(DiffOptions {
        split: false,
        ignore_whitespace: false,
    });
    use RowKind::*;
    assert_eq!(
        rows,
        vec![
            (Hunk, None, None, "@@ -1,3 +1,3 @@".to_owned()),
            (Context, Some(1), Some(1), "keep".to_owned()),
            (Removed, Some(2), None, "old  line".to_owned()),
            (Added, None, Some(2), "old line".to_owned()),
            (Removed, Some(3), None, "gone".to_owned()),
            (Added, None, Some(3), "new<U+202E>txt".to_owned()),
            (Note, None, None, "\\ No newline at end of file".to_owned()),
        ]
    );
    let r = render(
        DIFF,
        DiffOptions {
            split: false,
            ignore_whitespace: false,
        },
    );
    assert_eq!((r.added, r.removed, r.hidden), (2, 2, 1));
}

#[test]
fn whitespace_only_pairs_fold_into_context_when_every_pair_matches() {
    let d = "@@ -1,2 +1,2 @@\n-a  b\n-c\n+a b\n+ c\n";
    let r = render(
        d,
        DiffOptions {
            split: false,
            ignore_whitespace: true,
        },
    );
    assert_eq!(r.body, Body::Empty);
    // In DIFF the whitespace-only pair folds to context; the real change stays.
    let rows = unified(DiffOptions {
        split: false,
        ignore_whitespace: true,
    });
    assert!(rows.contains(&(RowKind::Context, Some(2), Some(2), "old line".to_owned())));
    assert!(
        rows.iter()
            .any(|r| r.0 == RowKind::Removed && r.3 == "gone")
    );
}

#[test]
fn split_pairs_removed_with_added() {
    let Body::Split(rows) = render(
        DIFF,
        DiffOptions {
            split: true,
            ignore_whitespace: false,
        },
    )
    .body
    else {
        panic!("not split")
    };
    assert!(rows[0].hunk.is_some());
    let pair = &rows[2];
    assert_eq!(pair.left.as_ref().unwrap().number, Some(2));
    assert_eq!(pair.right.as_ref().unwrap().number, Some(2));
    assert_eq!(rows.len(), 5);
}

#[test]
fn oversized_and_binary_diffs_are_not_rendered() {
    let big = format!("@@ -0,0 +1 @@\n+{}\n", "x".repeat(MAX_FILE_DIFF_BYTES));
    let opts = DiffOptions {
        split: false,
        ignore_whitespace: false,
    };
    assert_eq!(render(&big, opts).body, Body::TooBig(big.len() as u64));
    assert_eq!(render("@@ -1 +1 @@\n+\0\n", opts).body, Body::Binary(15));
}

#[test]
fn long_lines_are_cut_with_a_marker_count() {
    let d = format!("@@ -0,0 +1 @@\n+{}\n", "y".repeat(MAX_LINE_CHARS + 10));
    let r = render(
        &d,
        DiffOptions {
            split: false,
            ignore_whitespace: false,
        },
    );
    assert_eq!(r.cut_lines, 1);
}

/// An invisible identifier (a Hangul filler, a variation selector, a tag character) in an added
/// line is an escape on the page, and counted as hidden.
#[test]
fn default_ignorable_characters_in_a_diff_are_escapes() {
    let diff = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-x = 1\n+x\u{3164} = 1\u{FE0F}\u{E0041}\n";
    let r = render(
        diff,
        DiffOptions {
            split: false,
            ignore_whitespace: false,
        },
    );
    let Body::Unified(rows) = r.body else {
        panic!("not unified")
    };
    let added: Vec<String> = rows
        .iter()
        .filter(|row| row.kind == RowKind::Added)
        .map(|row| row.text.segments.iter().map(|s| s.text.as_str()).collect())
        .collect();
    assert_eq!(added, vec!["x<U+3164> = 1<U+FE0F><U+E0041>".to_owned()]);
    assert_eq!(r.hidden, 3);
}
