//! Generates `fixtures/mcp-workspace/review/` (candidate, archive, marker, store) from the app
//! bundle with the real finalizer and archive writers, and checks the committed bytes match.
//! Regenerate with `MCP_REGENERATE_FIXTURES=1`.

use std::collections::BTreeMap;
use std::fs;

use finalizer::{CandidateFields, CandidateStore, RepositoryPatchCandidate};
use snapshot::RepoPath;
use vocab::Sha256;

use crate::support::fixture_dir;

const UPDATED: &str = "app/modules/search/__init__.py";
const CREATED: &str = "app/ui/pages/search.json";
const CREATED_TEXT: &str = "{\n  \"page\": \"search\",\n  \"title\": \"Search notes\",\n  \"components\": [{\"type\": \"search-box\", \"source\": \"search\"}]\n}\n";

fn path(p: &str) -> RepoPath {
    RepoPath::parse(p).unwrap()
}

/// (relative file name under review/, bytes), in a stable order.
pub fn generate() -> BTreeMap<String, Vec<u8>> {
    let before = fs::read_to_string(fixture_dir().join(UPDATED)).unwrap();
    let after = format!(
        "{before}\n\ndef matches(text: str, query: str) -> bool:\n    return set(tokenize(query)) <= set(tokenize(text))\n"
    );
    let files = vec![
        finalizer::testkit::update(UPDATED, &before, &after),
        finalizer::testkit::create(CREATED, CREATED_TEXT),
    ];
    let fields = CandidateFields {
        handoff_id: "handoff-fixture-1".into(),
        request_id: "request-fixture-1".into(),
        plan_id: "plan-fixture-1".into(),
        app_id: "sample-notes".into(),
        build_registry_id: "build-fixture-1".into(),
        repository_full_name: "example/sample-notes".into(),
        baseline_commit_sha: "0123456789abcdef0123456789abcdef01234567".into(),
        approved_plan_digest: Sha256::of(b"fixture approved plan").to_string(),
        snapshot_digest: Sha256::of(b"fixture snapshot").to_string(),
        proposal_id: "proposal-fixture-1".into(),
        provider_id: "synthetic".into(),
        summary: "Add a search page and a query matcher".into(),
        rationale: "Fixture candidate for the read-only MCP server tests.".into(),
        required_validation_gates: vec!["python_syntax".into()],
        required_security_gates: vec![],
        required_ci_checks: vec![],
    };
    let candidate = RepositoryPatchCandidate::new(fields, files).unwrap();
    let mut out = BTreeMap::new();
    out.insert(
        "candidate.json".to_owned(),
        candidate.to_json_pretty().unwrap(),
    );

    let tmp = tempfile::tempdir().unwrap();
    let store_root = tmp.path().join("store");
    fs::create_dir(&store_root).unwrap();
    let store = CandidateStore::open(&store_root).unwrap();
    let digest = store.put(&candidate).unwrap();
    let name = format!("{}.json", digest.bare_hex());
    out.insert(
        format!("store/{name}"),
        fs::read(store_root.join(&name)).unwrap(),
    );

    let archive = archive::build_deterministic_archive(&[
        (path(UPDATED), after.into_bytes()),
        (path(CREATED), CREATED_TEXT.as_bytes().to_vec()),
    ])
    .unwrap();
    out.insert("workspace-archive.zip".to_owned(), archive);
    out.insert(
        "empty-archive.marker".to_owned(),
        archive::EMPTY_ARCHIVE_MARKER.to_vec(),
    );
    out
}

pub fn candidate_digest() -> String {
    let files = generate();
    let name = files
        .keys()
        .find_map(|k| k.strip_prefix("store/"))
        .unwrap()
        .to_owned();
    format!("sha256:{}", name.trim_end_matches(".json"))
}

fn committed() -> BTreeMap<String, Vec<u8>> {
    let review = fixture_dir().join("review");
    let mut out = BTreeMap::new();
    let mut stack = vec![(review.clone(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let name = format!("{prefix}{}", entry.file_name().to_str().unwrap());
            if entry.file_type().unwrap().is_dir() {
                stack.push((entry.path(), format!("{name}/")));
            } else {
                out.insert(name, fs::read(entry.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn fixture_review_files() {
    let generated = generate();
    if std::env::var_os("MCP_REGENERATE_FIXTURES").is_some() {
        let review = fixture_dir().join("review");
        if review.exists() {
            for (name, _) in committed() {
                fs::remove_file(review.join(name)).unwrap();
            }
        } else {
            fs::create_dir(&review).unwrap();
        }
        let store = review.join("store");
        if !store.exists() {
            fs::create_dir(&store).unwrap();
        }
        for (name, bytes) in &generated {
            fs::write(review.join(name), bytes).unwrap();
        }
    }
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    let committed = committed();
    pretty_assertions::assert_eq!(names(&committed), names(&generated));
    for (name, bytes) in &generated {
        assert!(
            committed[name] == *bytes,
            "review/{name} differs from the generator output"
        );
    }
}
