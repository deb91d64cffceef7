use pretty_assertions::assert_eq;

use super::*;
use crate::testkit::{candidate, create, delete, update};

fn with_diff(file: &RepositoryPatchFile, diff: &str) -> RepositoryPatchFile {
    RepositoryPatchFile::new(
        file.path().clone(),
        file.op(),
        file.previous_sha256().copied(),
        file.new_sha256().copied(),
        file.content().map(str::to_owned),
        diff.to_owned(),
    )
    .unwrap()
}

fn refused(file: RepositoryPatchFile) -> String {
    git_patch(&candidate(vec![file])).unwrap_err().to_string()
}

#[test]
fn names_follow_git_quoting() {
    assert_eq!(git_quote_path("a/", "app/x.py"), "a/app/x.py");
    assert_eq!(git_quote_path("b/", "app/a b.txt"), "b/app/a b.txt");
    assert_eq!(
        git_quote_path("a/", "docs/na\u{ef}ve b.txt"),
        "\"a/docs/na\\303\\257ve b.txt\""
    );
    assert_eq!(
        git_quote_path("b/", "x/q\"t\\\t\u{7f}\u{1}"),
        "\"b/x/q\\\"t\\\\\\t\\177\\001\""
    );
}

#[test]
fn empty_files_get_headers_and_no_hunks() {
    let patch = git_patch(&candidate(vec![
        create("app/empty.py", ""),
        delete("app/gone.txt", ""),
    ]))
    .unwrap();
    assert_eq!(
        patch,
        "diff --git a/app/empty.py b/app/empty.py\nnew file mode 100644\n\
         diff --git a/app/gone.txt b/app/gone.txt\ndeleted file mode 100644\n"
    );
}

#[test]
fn hunks_are_the_candidates_bytes() {
    let up = update("app/a b.txt", "one\r\ntwo\r\nend", "one\r\n2\r\nEND");
    let new = create("app/n.txt", "x");
    let gone = delete("app/old.txt", "a\nb");
    let patch = git_patch(&candidate(vec![up.clone(), new.clone(), gone.clone()])).unwrap();
    let body = |f: &RepositoryPatchFile| f.diff().split_once("\n@@").unwrap().1.to_owned();
    assert_eq!(
        patch,
        format!(
            "diff --git a/app/a b.txt b/app/a b.txt\n--- a/app/a b.txt\t\n+++ b/app/a b.txt\t\n@@{}\
             diff --git a/app/n.txt b/app/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/app/n.txt\n@@{}\
             diff --git a/app/old.txt b/app/old.txt\ndeleted file mode 100644\n--- a/app/old.txt\n+++ /dev/null\n@@{}",
            body(&up),
            body(&new),
            body(&gone)
        )
    );
    assert!(patch.contains("+2\r\n+END\n\\ No newline at end of file\n"));
}

#[test]
fn diffs_that_do_not_reproduce_the_bytes_are_refused() {
    let code =
        "REPOSITORY_PATCH_EXPORT_DIFF: 'app/x.txt' diff does not reproduce the candidate's bytes";
    // A create whose diff adds other bytes than its content.
    let c = create("app/x.txt", "a\n");
    assert_eq!(refused(with_diff(&c, &c.diff().replace("+a", "+b"))), code);
    // A delete whose diff removes bytes other than those its previous hash names.
    let d = delete("app/x.txt", "a\n");
    assert_eq!(refused(with_diff(&d, &d.diff().replace("-a", "-b"))), code);
    assert_eq!(refused(with_diff(&d, "")), code);
    // An update whose new side differs from the content, or whose hunks are malformed.
    let u = update("app/x.txt", "a\nb\nc\n", "a\nB\nc\n");
    for bad in [
        u.diff().replace("+B", "+X"),
        u.diff().replace("@@ -1,3 +1,3 @@", "@@ -1,3 +2,3 @@"),
        u.diff().replace("@@ -1,3 +1,3 @@", "@@ -1,3 +1,4 @@"),
        u.diff()
            .replace("@@ -1,3 +1,3 @@", "@@ -1,3 +99999999999999999999,3 @@"),
        u.diff().replace(" c\n", "*c\n"),
        u.diff().replace("--- a/app/x.txt", "--- a/app/y.txt"),
        format!("{}@@ -1 +1 @@\n-a\n+a\n", u.diff()),
        u.diff()
            .replace(" c\n", " c\n\\ No newline at end of file\n"),
        String::new(),
    ] {
        assert_eq!(refused(with_diff(&u, &bad)), code, "{bad:?}");
    }
    // An update that changes nothing renders nothing.
    let same = update("app/x.txt", "a\n", "a\n");
    assert_eq!(git_patch(&candidate(vec![same])).unwrap(), "");
}
