//! The portable path profile (reference §5.5), the canonical rule, case folding and collisions.

use pretty_assertions::assert_eq;
use snapshot::{
    Collision, PathRejection, check_portable, detect_collisions, in_scope, path_is_allowed,
    safe_artifact_relpath,
};
use snapshot::{RepoPath, SnapshotError, casefold};

use crate::support::p;

/// The reference rejection table: every check of `mozaiks.portable_path.v1`, in order, with its
/// exact reason string (28 rows).
#[test]
fn every_row_of_the_reference_rejection_table() {
    let long_path = "a".repeat(4097);
    let long_segment = format!("dir/{}", "s".repeat(256));
    let rows: Vec<(&str, &str)> = vec![
        ("", "empty path"),
        (&long_path, "path exceeds 4096 characters"),
        ("a\0b", "null byte"),
        ("a\\b", "backslash separator"),
        ("/etc/passwd", "absolute path"),
        ("//server/share", "absolute path"),
        ("~/notes", "home-relative path"),
        ("C:/Windows", "drive-qualified or drive-relative path"),
        ("c:relative", "drive-qualified or drive-relative path"),
        ("a//b", "empty path segment"),
        ("a/", "empty path segment"),
        ("../outside.py", "relative traversal segment"),
        ("a/./b", "relative traversal segment"),
        (&long_segment, "segment exceeds 255 characters"),
        ("a\u{1}b", "control character in segment"),
        ("a\u{7f}b", "control character in segment"),
        ("a<b", "character '<' is not portable"),
        ("a>b", "character '>' is not portable"),
        ("dir/a:b", "character ':' is not portable"),
        ("a\"b", "character '\"' is not portable"),
        ("a|b", "character '|' is not portable"),
        ("a?b", "character '?' is not portable"),
        ("a*b", "character '*' is not portable"),
        ("a[b", "glob metacharacter in segment"),
        ("dir/name.", "trailing dot or space in segment"),
        ("dir/name ", "trailing dot or space in segment"),
        ("dir/ name", "leading space in segment"),
        ("dir/CON.txt", "reserved Windows device name"),
    ];
    assert_eq!(rows.len(), 28);
    for (raw, reason) in rows {
        let rejection = check_portable(raw, false).unwrap_err();
        assert_eq!(rejection.to_string(), reason, "{raw:?}");
        assert!(RepoPath::parse(raw).is_err(), "{raw:?} must not parse");
        let err = SnapshotError::unsafe_path(raw, rejection);
        assert_eq!(err.code(), "REPOSITORY_PATCH_UNSAFE_PATH");
    }
}

#[test]
fn reserved_device_names_cover_every_spelling_of_the_pattern() {
    for bad in [
        "con",
        "PRN",
        "Aux.log",
        "nul.tar.gz",
        "COM1",
        "com9.x",
        "LPT¹",
        "lpt³.txt",
        "x/Com2",
    ] {
        assert_eq!(
            check_portable(bad, false),
            Err(PathRejection::ReservedDeviceName),
            "{bad}"
        );
    }
    for ok in [
        "CONSOLE",
        "com0",
        "com10",
        "LPT",
        "auxiliary.txt",
        "nully",
        "con_x",
    ] {
        check_portable(ok, false).unwrap();
        p(ok);
    }
}

#[test]
fn first_failing_check_wins() {
    // A backslash is reported before the leading slash; `*` reports the portability reason.
    assert_eq!(
        check_portable("/a\\b", false),
        Err(PathRejection::Backslash)
    );
    assert_eq!(
        check_portable("a*[", false),
        Err(PathRejection::NotPortable('*'))
    );
    assert_eq!(
        check_portable("a\u{1}<", false),
        Err(PathRejection::ControlCharacter)
    );
    assert_eq!(
        check_portable("a/../b.", false),
        Err(PathRejection::Traversal)
    );
}

#[test]
fn canonical_rule_rejects_every_rewritable_spelling() {
    let cases = [
        ("a//b", PathRejection::EmptySegment),
        ("./a", PathRejection::Traversal),
        ("a/", PathRejection::EmptySegment),
        (" a", PathRejection::SurroundingWhitespace),
        ("a ", PathRejection::SurroundingWhitespace),
        ("a\u{3000}", PathRejection::SurroundingWhitespace),
        ("\u{2028}a", PathRejection::SurroundingWhitespace),
        ("cafe\u{301}.txt", PathRejection::NotNfc),
        ("dir/A\u{30a}", PathRejection::NotNfc),
    ];
    for (raw, want) in cases {
        assert_eq!(RepoPath::parse(raw), Err(want), "{raw:?}");
    }
    // The NFC spelling is accepted and is what the lenient normaliser returns unchanged.
    let nfc = p("caf\u{e9}.txt");
    assert_eq!(
        safe_artifact_relpath(nfc.as_str()).as_deref(),
        Some(nfc.as_str())
    );
    // The profile alone normalises before the segment checks (host independence).
    check_portable("cafe\u{301}.txt", false).unwrap();
}

#[test]
fn accepted_paths_keep_their_text_and_segments() {
    let path = p("app/modules/Straße/ü.py");
    assert_eq!(path.as_str(), "app/modules/Straße/ü.py");
    assert_eq!(path.to_string(), "app/modules/Straße/ü.py");
    assert_eq!(
        path.segments().collect::<Vec<_>>(),
        ["app", "modules", "Straße", "ü.py"]
    );
    assert_eq!(
        path.parent_prefixes().collect::<Vec<_>>(),
        ["app", "app/modules", "app/modules/Straße"]
    );
    assert!(path.is_non_ascii());
    let json = serde_json::to_string(&path).unwrap();
    assert_eq!(serde_json::from_str::<RepoPath>(&json).unwrap(), path);
    assert!(serde_json::from_str::<RepoPath>("\"../x\"").is_err());
    assert!(serde_json::from_str::<RepoPath>("\"a//b\"").is_err());
}

#[test]
fn case_folding_is_full_unicode_folding() {
    assert_eq!(casefold("Straße"), "strasse");
    assert_eq!(casefold("STRASSE"), "strasse");
    assert_eq!(
        p("Dir/Straße.txt").collision_key(),
        p("dir/STRASSE.TXT").collision_key()
    );
    assert_eq!(casefold("ΣΑΣ"), casefold("σας"));
    assert_eq!(casefold("ﬁle"), "file");
    assert_eq!(casefold("MiXeD/ASCII.rs"), "mixed/ascii.rs");
}

#[test]
fn collisions_are_detected_in_reference_order() {
    let dup = [p("a.txt"), p("b.txt"), p("a.txt")];
    assert_eq!(
        detect_collisions(&dup),
        Err(Collision::Duplicate(p("a.txt")))
    );
    let fold = [p("Straße.txt"), p("STRASSE.txt")];
    assert_eq!(
        detect_collisions(&fold),
        Err(Collision::CaseFold(p("STRASSE.txt"), p("Straße.txt")))
    );
    assert_eq!(
        detect_collisions(&fold).unwrap_err().to_string(),
        "case-fold duplicate of 'Straße.txt': 'STRASSE.txt'"
    );
    let prefix = [p("docs/readme.md"), p("Docs")];
    assert_eq!(
        detect_collisions(&prefix),
        Err(Collision::FileDirectoryPrefix(
            p("Docs"),
            p("docs/readme.md")
        ))
    );
    // Duplicates are reported before prefix collisions, whatever the order.
    let mixed = [p("a"), p("a/b"), p("c"), p("C")];
    assert!(matches!(
        detect_collisions(&mixed),
        Err(Collision::CaseFold(..))
    ));
    // Order independence of the verdict.
    let mut clean = vec![p("a/b"), p("a/c"), p("ab"), p("a.b/c")];
    detect_collisions(&clean).unwrap();
    clean.reverse();
    detect_collisions(&clean).unwrap();
    let err: SnapshotError = Collision::Duplicate(p("x")).into();
    assert_eq!(err.code(), "REPOSITORY_PATCH_MANIFEST_COLLISION");
}

#[test]
fn lenient_normaliser_matches_the_reference() {
    let cases = [
        ("app/", Some("app")),
        ("./app//x/", Some("app/x")),
        ("  app\\x ", Some("app/x")),
        (".", Some(".")),
        ("./", Some(".")),
        ("../app", None),
        ("a/../b", None),
        ("/abs", None),
        ("C:x/y", None),
        ("a\0", None),
        ("   ", None),
        ("x/c:y", Some("x/c:y")),
    ];
    for (raw, want) in cases {
        assert_eq!(safe_artifact_relpath(raw).as_deref(), want, "{raw:?}");
    }
}

#[test]
fn scope_tests_follow_the_reference() {
    let scopes = ["app/modules/support/".to_owned()];
    assert!(in_scope("app/modules/support/x.py", &scopes, false));
    assert!(in_scope("app/modules/support", &scopes, false));
    assert!(!in_scope("app/modules/supportive/x.py", &scopes, false));
    assert!(!in_scope("App/modules/support/x.py", &scopes, false));
    assert!(in_scope("App/Modules/SUPPORT/x.py", &scopes, true));
    assert!(!in_scope("x.py", &[".".to_owned()], false));

    let allowed = ["app".to_owned()];
    let prohibited = ["app/secret".to_owned()];
    let read_only = ["app/tests".to_owned()];
    assert!(path_is_allowed(
        "app/x.py",
        &allowed,
        &prohibited,
        &read_only
    ));
    assert!(!path_is_allowed(
        "app/SECRET/x.py",
        &allowed,
        &prohibited,
        &read_only
    ));
    assert!(!path_is_allowed(
        "app/Tests/t.py",
        &allowed,
        &prohibited,
        &read_only
    ));
    assert!(!path_is_allowed(
        "App/x.py",
        &allowed,
        &prohibited,
        &read_only
    ));
    assert!(!path_is_allowed(
        "../app/x.py",
        &allowed,
        &prohibited,
        &read_only
    ));
    assert!(path_is_allowed(
        "./app//x.py",
        &allowed,
        &prohibited,
        &read_only
    ));
}
