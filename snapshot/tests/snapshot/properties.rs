//! Property tests: `RepoPath` never accepts an escaping path, and parse → display → parse is the
//! identity.

use proptest::prelude::*;
use snapshot::RepoPath;
use snapshot::safe_artifact_relpath;

/// Segments drawn from tokens that matter for escapes and normalisation, plus free text.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("~".to_owned()),
        Just("C:".to_owned()),
        Just("a\\b".to_owned()),
        Just(" ".to_owned()),
        Just("e\u{301}".to_owned()),
        Just("Straße".to_owned()),
        Just("CON".to_owned()),
        "[a-zA-Z0-9._ -]{1,12}",
        "\\PC{1,6}",
    ]
}

fn raw_path() -> impl Strategy<Value = String> {
    (prop::bool::ANY, prop::collection::vec(segment(), 1..6)).prop_map(|(absolute, segs)| {
        let joined = segs.join("/");
        if absolute {
            format!("/{joined}")
        } else {
            joined
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn accepted_paths_never_escape(raw in raw_path()) {
        if let Ok(path) = RepoPath::parse(&raw) {
            let text = path.as_str();
            prop_assert!(!text.is_empty());
            prop_assert!(!text.starts_with('/'));
            prop_assert!(!text.starts_with('~'));
            prop_assert!(!text.contains('\\'));
            prop_assert!(!text.contains('\0'));
            prop_assert!(!text.contains(':'));
            for seg in text.split('/') {
                prop_assert!(!seg.is_empty() && seg != "." && seg != "..", "segment {:?}", seg);
                prop_assert!(!seg.ends_with('.') && !seg.ends_with(' ') && !seg.starts_with(' '));
            }
            // Canonical: the lenient normaliser would not rewrite it.
            let normalised = safe_artifact_relpath(text);
            prop_assert_eq!(normalised.as_deref(), Some(text));
        }
    }

    #[test]
    fn parse_display_parse_is_the_identity(raw in raw_path()) {
        if let Ok(path) = RepoPath::parse(&raw) {
            prop_assert_eq!(path.as_str(), raw.as_str());
            let displayed = path.to_string();
            let again = RepoPath::parse(&displayed).unwrap();
            prop_assert_eq!(&again, &path);
            let json = serde_json::to_string(&path).unwrap();
            prop_assert_eq!(serde_json::from_str::<RepoPath>(&json).unwrap(), path);
        }
    }
}
