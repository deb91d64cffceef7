use super::*;

#[test]
fn reference_examples_are_reproduced_exactly() {
    assert_eq!(
        unified_diff("x", Some("a\nb\nc\n"), Some("a\nB\nc")),
        "--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n-c\n+B\n+c\n\\ No newline at end of file\n"
    );
    assert_eq!(
        unified_diff("x", None, Some("x\n")),
        "--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+x\n"
    );
    assert_eq!(
        unified_diff("x", Some("x\n"), None),
        "--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    );
    assert_eq!(unified_diff("x", None, Some("")), "");
    assert_eq!(unified_diff("x", Some("same\n"), Some("same\n")), "");
}

#[test]
fn splitlines_matches_python_semantics() {
    assert_eq!(splitlines_keepends(""), Vec::<&str>::new());
    assert_eq!(splitlines_keepends("a"), vec!["a"]);
    assert_eq!(
        splitlines_keepends("a\r\nb\rc\n"),
        vec!["a\r\n", "b\r", "c\n"]
    );
    assert_eq!(
        splitlines_keepends("1\u{b}2\u{c}3\u{1c}4\u{1d}5\u{1e}6\u{85}7\u{2028}8\u{2029}9"),
        vec![
            "1\u{b}",
            "2\u{c}",
            "3\u{1c}",
            "4\u{1d}",
            "5\u{1e}",
            "6\u{85}",
            "7\u{2028}",
            "8\u{2029}",
            "9"
        ]
    );
    assert_eq!(splitlines_keepends("\r\r\n\n"), vec!["\r", "\r\n", "\n"]);
    assert_eq!(splitlines_keepends("x\u{1f}y"), vec!["x\u{1f}y"]);
}

#[test]
fn git_line_mode_is_chosen_only_for_separators_git_does_not_know() {
    assert!(!needs_git_lines("a\r\nb\n"));
    assert!(needs_git_lines("a\rb"));
    assert!(needs_git_lines("a\r"));
    assert!(needs_git_lines("page\u{c}break\n"));
    assert!(needs_git_lines("x\u{2028}y\n"));
    let d = unified_diff_with_budget("f", Some("a\rb\n"), Some("a\rc\n"), DEFAULT_WORK_BUDGET);
    assert_eq!(d.mode, DiffMode::GitLines);
    assert_eq!(d.text, "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\rb\n+a\rc\n");
}

#[test]
fn exhausted_budget_falls_back_to_one_whole_file_hunk() {
    let before = "a\nb\nc\n";
    let after = "a\nx\nc";
    let d = unified_diff_with_budget("f", Some(before), Some(after), 2);
    assert_eq!(d.mode, DiffMode::WholeFile);
    assert_eq!(
        d.text,
        "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n-a\n-b\n-c\n+a\n+x\n+c\n\\ No newline at end of file\n"
    );
    let full = unified_diff_with_budget("f", Some(before), Some(after), DEFAULT_WORK_BUDGET);
    assert_eq!(full.mode, DiffMode::Difflib);
}

#[test]
fn distant_changes_form_separate_hunks_with_three_lines_of_context() {
    let before: String = (1..=20).map(|i| format!("{i}\n")).collect();
    let after: String = (1..=20)
        .map(|i| match i {
            2 => "two\n".to_owned(),
            18 => "eighteen\n".to_owned(),
            _ => format!("{i}\n"),
        })
        .collect();
    let d = unified_diff("f", Some(&before), Some(&after));
    assert_eq!(
        d,
        "--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"
    );
}

#[test]
fn the_byte_prescan_flags_every_separator_git_does_not_know() {
    assert!(!may_hold_other_separators(
        "plain text\twith tabs\nand lines\n"
    ));
    assert!(!may_hold_other_separators(
        &"x\u{1}\u{1f}\u{7f}\n".repeat(40)
    ));
    for sep in [
        "\r", "\u{b}", "\u{c}", "\u{1c}", "\u{1d}", "\u{1e}", "\u{85}", "\u{2028}", "\u{2029}",
    ] {
        for pad in [0, 5, 31, 32, 33, 100] {
            let text = format!("{}{sep}tail", "a".repeat(pad));
            assert!(may_hold_other_separators(&text), "{sep:?} at {pad}");
        }
    }
}
