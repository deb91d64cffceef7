//! Fuzzes the strict archive reader with raw bytes (seed corpus: `fixtures/hostile-zips/`).
//!
//! Invariants, beyond "no panic":
//! * the manifest reader and the entry reader accept exactly the same inputs;
//! * accept ⇒ `write(read(x)) == x` (the reader accepts only canonical bytes);
//! * accepted paths are portable and collision-free;
//! * the `zip` crate, opened strictly, sees the same names and bytes (parity oracle);
//! * the raw preflight accepted whatever the reader accepted.
#![no_main]

use std::io::{Cursor, Read as _};

use archive::{
    ArchiveLimits, build_deterministic_archive, preflight_archive_directory, read_archive_entries,
    read_archive_manifest,
};
use libfuzzer_sys::fuzz_target;
use snapshot::{RepoPath, Sha256, detect_collisions};

fuzz_target!(|data: &[u8]| {
    let limits = ArchiveLimits::default();
    let manifest = read_archive_manifest(data, &limits);
    let entries = read_archive_entries(data, &limits);
    assert_eq!(manifest.is_ok(), entries.is_ok(), "readers disagree");
    if let (Err(a), Err(b)) = (&manifest, &entries) {
        assert_eq!(a.code(), b.code());
    }
    let (Ok(manifest), Ok(entries)) = (manifest, entries) else { return };

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

    let config = zip::read::Config { archive_offset: zip::read::ArchiveOffset::Known(0) };
    let mut z = zip::ZipArchive::with_config(config, Cursor::new(data)).expect("zip opens it");
    z.validate_header_consistency().expect("zip finds the headers consistent");
    assert!(!z.has_duplicate_names());
    assert_eq!(z.len(), entries.len());
    for (i, (path, content)) in entries.iter().enumerate() {
        let mut f = z.by_index(i).expect("zip reads the entry");
        assert_eq!(f.name_raw(), path.as_str().as_bytes());
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).expect("zip reads the data");
        assert_eq!(&bytes, content);
    }
});
