//! The bodies of the fuzz targets, shared by the cargo-fuzz targets (`fuzz_targets/`, nightly,
//! libFuzzer) and the stable corpus runner (`src/bin/corpus.rs`, run by CI on every build).
//!
//! Each body asserts invariants, not just "no crash": a failed assertion panics, which libFuzzer
//! records as a crash and the corpus runner reports as a failure.

use std::io::{Cursor, Read as _};

use arbitrary::{Arbitrary, Unstructured};
use archive::{
    ArchiveLimits, build_deterministic_archive, preflight_archive_directory, read_archive_entries,
    read_archive_manifest,
};
use snapshot::{RepoPath, detect_collisions};
use vocab::Sha256;

/// The strict archive reader over raw bytes (seed corpus: `fixtures/hostile-zips/`).
///
/// Invariants, beyond "no panic":
/// * the manifest reader and the entry reader accept exactly the same inputs;
/// * accept ⇒ `write(read(x)) == x` (the reader accepts only canonical bytes);
/// * accepted paths are portable and collision-free;
/// * the `zip` crate, opened strictly, sees the same names and bytes (parity oracle);
/// * the raw preflight accepted whatever the reader accepted.
pub fn archive_reader(data: &[u8]) {
    let limits = ArchiveLimits::default();
    let manifest = read_archive_manifest(data, &limits);
    let entries = read_archive_entries(data, &limits);
    assert_eq!(manifest.is_ok(), entries.is_ok(), "readers disagree");
    if let (Err(a), Err(b)) = (&manifest, &entries) {
        assert_eq!(a.code(), b.code());
    }
    let (Ok(manifest), Ok(entries)) = (manifest, entries) else {
        return;
    };

    let rebuilt = build_deterministic_archive(&entries).expect("accepted entries re-serialise");
    assert_eq!(rebuilt, data, "accepted bytes are not canonical");
    for (path, _) in &entries {
        RepoPath::parse(path.as_str()).expect("accepted path is portable");
    }
    detect_collisions(entries.iter().map(|(p, _)| p)).expect("accepted paths are collision-free");
    preflight_archive_directory(data, Some(entries.len()), limits.max_bytes(), None)
        .expect("preflight accepts what the reader accepts");

    assert_eq!(manifest.entries.len(), entries.len());
    assert_eq!(manifest.archive_sha256, Sha256::of(data));
    for (m, (path, content)) in manifest.entries.iter().zip(&entries) {
        assert_eq!(&m.path, path);
        assert_eq!(m.size_bytes, content.len() as u64);
        assert_eq!(m.content_sha256, Sha256::of(content));
    }

    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut z = zip::ZipArchive::with_config(config, Cursor::new(data)).expect("zip opens it");
    z.validate_header_consistency()
        .expect("zip finds the headers consistent");
    assert!(!z.has_duplicate_names());
    assert_eq!(z.len(), entries.len());
    for (i, (path, content)) in entries.iter().enumerate() {
        let mut f = z.by_index(i).expect("zip reads the entry");
        assert_eq!(f.name_raw(), path.as_str().as_bytes());
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).expect("zip reads the data");
        assert_eq!(&bytes, content);
    }
}

/// Hostile path tokens for [`archive_paths`].
#[derive(Debug, Arbitrary)]
pub enum Token {
    Name(u8),
    Dot,
    DotDot,
    Empty,
    Backslash,
    Colon,
    Upper,
    SharpS,
    DoubleS,
    CafeNfc,
    CafeNfd,
    Device,
    TrailingDot,
    Space,
    Nul,
}

fn segment(tokens: &[Token]) -> String {
    let mut s = String::new();
    for t in tokens {
        match t {
            Token::Name(n) => s.push(char::from(b'a' + n % 4)),
            Token::Dot => s.push('.'),
            Token::DotDot => s.push_str(".."),
            Token::Empty => {}
            Token::Backslash => s.push('\\'),
            Token::Colon => s.push(':'),
            Token::Upper => s.push('A'),
            Token::SharpS => s.push('ß'),
            Token::DoubleS => s.push_str("SS"),
            Token::CafeNfc => s.push_str("caf\u{e9}"),
            Token::CafeNfd => s.push_str("cafe\u{301}"),
            Token::Device => s.push_str("con"),
            Token::TrailingDot => s.push_str("x."),
            Token::Space => s.push(' '),
            Token::Nul => s.push('\0'),
        }
    }
    s
}

/// One archive entry for [`archive_paths`]: a path built from hostile tokens, and its content.
#[derive(Debug, Arbitrary)]
pub struct Entry {
    pub segments: Vec<Vec<Token>>,
    pub content: Vec<u8>,
}

/// The writer/reader pair with structured entry sets whose paths are built from hostile tokens
/// (`..`, `.`, empty segments, `\`, `:`, case and normalisation twins, device names).
///
/// Invariants: the writer accepts a set iff every path is a canonical portable path and the set
/// is collision-free; whatever it writes, the strict reader reads back as the sorted set; and
/// input order never changes the bytes.
pub fn archive_paths(input: &[Entry]) {
    if input.len() > 50 {
        return;
    }
    let mut set = Vec::new();
    for e in input {
        let text: Vec<String> = e.segments.iter().map(|s| segment(s)).collect();
        match RepoPath::parse(&text.join("/")) {
            Ok(path) => set.push((path, e.content.clone())),
            Err(_) => return, // non-portable: not representable as an entry at all
        }
    }
    let collision_free = detect_collisions(set.iter().map(|(p, _)| p)).is_ok();
    let built = build_deterministic_archive(&set);
    assert_eq!(
        built.is_ok(),
        collision_free && !set.is_empty(),
        "writer acceptance"
    );
    let Ok(bytes) = built else { return };
    let mut reversed = set.iter().rev().cloned().collect::<Vec<_>>();
    assert_eq!(
        build_deterministic_archive(&reversed).expect("same set"),
        bytes
    );
    reversed.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
    if bytes.len() <= archive::MAX_ARCHIVE_BYTES {
        let read = read_archive_entries(&bytes, &ArchiveLimits::default()).expect("reads back");
        assert_eq!(read, reversed);
    }
}

/// [`archive_paths`] over raw bytes, decoded exactly as libfuzzer-sys decodes a typed input
/// (`arbitrary_take_rest`); bytes that do not decode are skipped, as libFuzzer skips them.
pub fn archive_paths_bytes(data: &[u8]) {
    if let Ok(input) = Vec::<Entry>::arbitrary_take_rest(Unstructured::new(data)) {
        archive_paths(&input);
    }
}

/// The gate wire contract and the runner's JUnit reader over raw bytes (seeds: the documents
/// infra/ci/post.d/20-fuzz-archive.sh writes, and any `fuzz/corpus/gate_wire/`).
///
/// Invariants, beyond "no panic":
/// * an accepted report is canonical: `to_json(from_json(x)) == x`;
/// * an accepted request re-encodes to a request that parses back equal;
/// * a report stream is accepted only when its one frame is an accepted report;
/// * the JUnit reader never lists more cases than its cap.
pub fn gate_wire(data: &[u8]) {
    use gate_runner::{GateReport, GateRequest, JunitReport, parse_junit};
    if let Ok(report) = GateReport::from_json(data) {
        assert_eq!(report.to_json().expect("accepted report re-encodes"), data);
    }
    if let Ok(request) = GateRequest::from_json(data) {
        let again = request.to_json().expect("accepted request re-encodes");
        assert_eq!(
            GateRequest::from_json(&again).expect("re-encoded request parses"),
            request
        );
    }
    if let Ok(report) = GateReport::read_stream(data) {
        let payload = data.get(4..).expect("a frame has a length prefix");
        assert_eq!(report.to_json().expect("re-encodes"), payload);
    }
    if let Ok(JunitReport::Ok { cases, .. }) = parse_junit(data, 8, 16) {
        assert!(cases.len() <= 8);
    }
}
