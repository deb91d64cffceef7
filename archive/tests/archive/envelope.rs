//! The envelope against independent oracles (Python `zipfile`, the `zip` crate), mutation
//! completeness, budgets and the preflight.

use std::io::{Cursor, Read as _};

use archive::{
    ArchiveLimits, EMPTY_ARCHIVE_MARKER, archive_digest, build_deterministic_archive,
    preflight_archive_directory, read_archive_entries, read_archive_manifest,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use snapshot::RepoPath;
use vocab::Sha256;

use crate::common::{entries, p, python};

fn golden() -> Vec<(RepoPath, Vec<u8>)> {
    entries(&[
        ("app/config/shell.json", b"{\"nav\": []}\n"),
        ("app/app.json", b"{\"appName\": \"Golden\"}\n"),
        ("modules/reports/module.yaml", b"module:\n  id: reports\n"),
        ("ui/pages/reports.yaml", "name: Répörts\n".as_bytes()),
    ])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Small deterministic generator (xorshift64*) for batches sent to Python.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const SEGMENTS: &[&str] = &[
    "app", "src", "a", "B", "é", "straße", "日本", "x.y", "mod.rs", "répört", "n-1", "_", "z",
];

fn random_set(rng: &mut Rng) -> Vec<(RepoPath, Vec<u8>)> {
    let mut out: Vec<(RepoPath, Vec<u8>)> = Vec::new();
    let n = 1 + rng.below(8);
    for i in 0..n {
        let depth = 1 + rng.below(3);
        let mut segs: Vec<String> = (0..depth)
            .map(|_| SEGMENTS[rng.below(SEGMENTS.len() as u64) as usize].to_owned())
            .collect();
        let last = segs.last_mut().unwrap();
        last.push_str(&format!("{i}.txt"));
        let path = p(&segs.join("/"));
        let len = rng.below(300) as usize;
        let content: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let candidate: Vec<_> = out
            .iter()
            .map(|(p, _)| p.clone())
            .chain([path.clone()])
            .collect();
        if snapshot::detect_collisions(candidate.iter()).is_ok() {
            out.push((path, content));
        }
    }
    out
}

#[test]
fn writer_equals_python_zipfile_byte_for_byte() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut sets = vec![golden(), entries(&[("a.txt", b"x")])];
    sets.extend((0..40).map(|_| random_set(&mut rng)));
    let request: Vec<Vec<(String, String)>> = sets
        .iter()
        .map(|set| set.iter().map(|(p, c)| (p.to_string(), hex(c))).collect())
        .collect();
    let out = python(
        "zipfile_oracle.py",
        &["write"],
        serde_json::to_string(&request).unwrap().as_bytes(),
    );
    let theirs: Vec<String> = serde_json::from_slice(&out).unwrap();
    assert_eq!(theirs.len(), sets.len());
    for (set, their_hex) in sets.iter().zip(&theirs) {
        let ours = build_deterministic_archive(set).unwrap();
        assert_eq!(hex(&ours), *their_hex, "{set:?}");
    }
    let golden_bytes = unhex(&theirs[0]);
    assert_eq!(golden_bytes.len(), 560);
    assert_eq!(
        archive_digest(&golden_bytes).to_string(),
        "sha256:aecaa65174d8db2ff8e9f020760445b737d5f915a651458bc0f960b395f39841"
    );
    assert_eq!(unhex(&theirs[1]).len(), 109);
}

#[test]
fn python_zipfile_reads_our_archives_and_agrees_with_the_manifest() {
    let mut rng = Rng(0x0BAD_CAFE_0000_0042);
    let sets: Vec<_> = std::iter::once(golden())
        .chain((0..40).map(|_| random_set(&mut rng)))
        .collect();
    let archives: Vec<Vec<u8>> = sets
        .iter()
        .map(|s| build_deterministic_archive(s).unwrap())
        .collect();
    let request: Vec<String> = archives.iter().map(|a| hex(a)).collect();
    let out = python(
        "zipfile_oracle.py",
        &["read"],
        serde_json::to_string(&request).unwrap().as_bytes(),
    );
    let theirs: Vec<Vec<(String, u64, String)>> = serde_json::from_slice(&out).unwrap();
    for (archive, rows) in archives.iter().zip(theirs) {
        let manifest = read_archive_manifest(archive, &ArchiveLimits::default()).unwrap();
        let ours: Vec<(String, u64, String)> = manifest
            .entries
            .iter()
            .map(|e| {
                (
                    e.path.to_string(),
                    e.size_bytes,
                    e.content_sha256.bare_hex(),
                )
            })
            .collect();
        assert_eq!(ours, rows);
        assert_eq!(manifest.archive_sha256, Sha256::of(archive));
    }
}

/// What the `zip` crate sees, opened the strict way HOSTILE-ZIP.md §3 prescribes.
fn zip_oracle(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut z = zip::ZipArchive::with_config(config, Cursor::new(bytes)).unwrap();
    z.validate_header_consistency().unwrap();
    assert!(!z.has_duplicate_names());
    assert!(!z.has_overlapping_entries().unwrap());
    (0..z.len())
        .map(|i| {
            let mut f = z.by_index(i).unwrap();
            let name = String::from_utf8(f.name_raw().to_vec()).unwrap();
            let mut data = Vec::new();
            f.read_to_end(&mut data).unwrap();
            (name, data)
        })
        .collect()
}

fn path_strategy() -> impl Strategy<Value = String> {
    let segment = prop_oneof![
        "[a-z]{1,6}",
        "[A-Z][a-z0-9_-]{0,5}",
        Just("é".to_owned()),
        Just("ß".to_owned()),
        Just("日本".to_owned()),
        "[a-z]{1,4}\\.[a-z]{1,3}",
    ];
    prop::collection::vec(segment, 1..4).prop_map(|s| s.join("/"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// write → read is the identity on collision-free sets, and the `zip` crate agrees.
    #[test]
    fn round_trip_and_zip_crate_parity(
        raw in prop::collection::vec((path_strategy(), prop::collection::vec(any::<u8>(), 0..200)), 1..12)
    ) {
        let mut set: Vec<(RepoPath, Vec<u8>)> = Vec::new();
        for (path, content) in raw {
            let Ok(path) = RepoPath::parse(&path) else { continue };
            let candidate: Vec<_> = set.iter().map(|(p, _)| p.clone()).chain([path.clone()]).collect();
            if snapshot::detect_collisions(candidate.iter()).is_ok() {
                set.push((path, content));
            }
        }
        prop_assume!(!set.is_empty());
        let bytes = build_deterministic_archive(&set).unwrap();
        let mut sorted = set.clone();
        sorted.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
        let read = read_archive_entries(&bytes, &ArchiveLimits::default()).unwrap();
        prop_assert_eq!(&read, &sorted);
        let oracle = zip_oracle(&bytes);
        let ours: Vec<(String, Vec<u8>)> = read.into_iter().map(|(p, c)| (p.to_string(), c)).collect();
        prop_assert_eq!(oracle, ours);
    }
}

#[test]
fn every_single_bit_flip_truncation_and_extension_is_rejected() {
    let golden = build_deterministic_archive(&golden()).unwrap();
    let limits = ArchiveLimits::default();
    read_archive_manifest(&golden, &limits).unwrap();
    for i in 0..golden.len() {
        for bit in 0..8 {
            let mut m = golden.clone();
            m[i] ^= 1 << bit;
            assert!(
                read_archive_manifest(&m, &limits).is_err(),
                "flip byte {i} bit {bit} accepted"
            );
        }
    }
    for len in 0..golden.len() {
        assert!(
            read_archive_manifest(&golden[..len], &limits).is_err(),
            "truncation to {len}"
        );
    }
    for b in [0_u8, b'P', 0xff] {
        let mut appended = golden.clone();
        appended.push(b);
        assert!(read_archive_manifest(&appended, &limits).is_err());
        let mut prepended = vec![b];
        prepended.extend_from_slice(&golden);
        assert!(read_archive_manifest(&prepended, &limits).is_err());
    }
}

#[test]
fn budgets_are_enforced_and_lower_limits_allowed() {
    let three =
        build_deterministic_archive(&entries(&[("a", b"1"), ("b", b"22"), ("c", b"333")])).unwrap();
    read_archive_manifest(&three, &ArchiveLimits::new(3, 1000).unwrap()).unwrap();
    let e = read_archive_manifest(&three, &ArchiveLimits::new(2, 1000).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: entry count exceeds selection"
    );
    let e = read_archive_manifest(&three, &ArchiveLimits::new(3, three.len() - 1).unwrap())
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: input exceeds limit"
    );
    for (files, bytes, msg) in [
        (0, 10, "invalid file limit"),
        (51, 10, "invalid file limit"),
        (1, 0, "invalid byte limit"),
        (1, 16_777_217, "invalid byte limit"),
    ] {
        let e = ArchiveLimits::new(files, bytes).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("REPOSITORY_PATCH_ARCHIVE_BUDGET: {msg}")
        );
    }
}

#[test]
fn preflight_reference_behaviour() {
    let one = build_deterministic_archive(&entries(&[("a.txt", b"x")])).unwrap();
    preflight_archive_directory(&one, Some(1), 100, None).unwrap();
    preflight_archive_directory(&one, None, 100, Some(1)).unwrap();
    let code = |r: Result<(), archive::ArchiveError>| r.unwrap_err().to_string();
    assert_eq!(
        code(preflight_archive_directory(&one, None, 100, None)),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: missing file limit"
    );
    assert_eq!(
        code(preflight_archive_directory(&one, Some(2), 100, None)),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: entry count exceeds selection"
    );
    assert_eq!(
        code(preflight_archive_directory(&one, None, 0, Some(1))),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: entry count or size exceeds limit"
    );
    assert_eq!(
        code(preflight_archive_directory(&one[..21], None, 100, Some(1))),
        "REPOSITORY_PATCH_ARCHIVE_FORMAT: missing ZIP end record"
    );
    assert_eq!(
        code(preflight_archive_directory(
            EMPTY_ARCHIVE_MARKER,
            None,
            100,
            Some(1)
        )),
        "REPOSITORY_PATCH_ARCHIVE_FORMAT: invalid ZIP directory"
    );
}

/// Reference: the end-record count forged to 2 over a real 1000-entry central directory is a
/// budget failure found by the raw walk, before any entry is parsed.
#[test]
fn forged_count_over_a_thousand_entry_directory_is_a_budget_failure() {
    let set: Vec<_> = (0..1000)
        .map(|i| (p(&format!("f{i:04}.txt")), vec![b'x']))
        .collect();
    let mut bytes = build_deterministic_archive(&set).unwrap();
    let n = bytes.len();
    bytes[n - 14..n - 12].copy_from_slice(&2_u16.to_le_bytes());
    bytes[n - 12..n - 10].copy_from_slice(&2_u16.to_le_bytes());
    let e = read_archive_manifest(&bytes, &ArchiveLimits::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: entry count or size exceeds limit"
    );
    let e = preflight_archive_directory(&bytes, Some(2), archive::MAX_ARCHIVE_BYTES, Some(2))
        .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_BUDGET");
}

#[test]
fn manifest_round_trip_and_schema() {
    let bytes = build_deterministic_archive(&golden()).unwrap();
    let m = read_archive_manifest(&bytes, &ArchiveLimits::default()).unwrap();
    assert_eq!(m.schema_version(), "mozaiks.deterministic_archive.v1");
    let paths: Vec<&str> = m.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "app/app.json",
            "app/config/shell.json",
            "modules/reports/module.yaml",
            "ui/pages/reports.yaml"
        ]
    );
    assert_eq!(m.entries[3].size_bytes, "name: Répörts\n".len() as u64);
    assert_eq!(
        m.entries[3].content_sha256,
        Sha256::of("name: Répörts\n".as_bytes())
    );
}

/// Inputs over 1 MiB take the two-thread digest paths (archive digest beside the entries, or the
/// entries in two halves); the results and the CRC checks must be those of the sequential path.
#[test]
fn large_archives_digest_in_parallel_with_the_same_results() {
    let set: Vec<(RepoPath, Vec<u8>)> = (0..5)
        .map(|i| {
            (
                p(&format!("big/f{i}.txt")),
                vec![b'a' + i as u8; 400_000 + i * 1000],
            )
        })
        .collect();
    let bytes = build_deterministic_archive(&set).unwrap();
    let m = read_archive_manifest(&bytes, &ArchiveLimits::default()).unwrap();
    assert_eq!(m.archive_sha256, Sha256::of(&bytes));
    for (e, (path, content)) in m.entries.iter().zip(&set) {
        assert_eq!((&e.path, e.content_sha256), (path, Sha256::of(content)));
    }
    assert_eq!(
        read_archive_entries(&bytes, &ArchiveLimits::default()).unwrap(),
        set
    );
    // A corrupted byte in the last entry (second half) is still a CRC failure on both paths.
    let mut bad = bytes.clone();
    let last_data = bytes.len() - 22 - 5 * (46 + 10) - 10;
    bad[last_data] ^= 1;
    for e in [
        read_archive_manifest(&bad, &ArchiveLimits::default()).unwrap_err(),
        read_archive_entries(&bad, &ArchiveLimits::default()).unwrap_err(),
    ] {
        assert_eq!(
            e.to_string(),
            "REPOSITORY_PATCH_ARCHIVE_ENVELOPE: unreadable entry: 'big/f4.txt': Bad CRC-32"
        );
    }
}

/// Reading from a source while hashing on a second thread gives the same manifest as reading
/// the bytes in memory, and refuses sources that are longer, shorter or over budget.
#[test]
fn streamed_read_matches_the_in_memory_reader() {
    let limits = ArchiveLimits::default();
    let small = build_deterministic_archive(&golden()).unwrap();
    let big: Vec<_> = (0..4)
        .map(|i| (p(&format!("big/{i}.txt")), vec![b'x' + i as u8; 700_000]))
        .collect();
    let big = build_deterministic_archive(&big).unwrap();
    for bytes in [&small, &big] {
        let (data, m) =
            archive::read_archive_manifest_from(Cursor::new(bytes), bytes.len() as u64, &limits)
                .unwrap();
        assert_eq!(&*data, &bytes[..]);
        assert_eq!(m, read_archive_manifest(bytes, &limits).unwrap());
    }
    let mut longer = small.clone();
    longer.push(0);
    let e = archive::read_archive_manifest_from(Cursor::new(&longer), small.len() as u64, &limits)
        .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_WORKSPACE");
    let e = archive::read_archive_manifest_from(
        Cursor::new(&small[..100]),
        small.len() as u64,
        &limits,
    )
    .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_WORKSPACE");
    let e = archive::read_archive_manifest_from(
        Cursor::new(&small),
        small.len() as u64,
        &ArchiveLimits::new(50, 100).unwrap(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "REPOSITORY_PATCH_ARCHIVE_BUDGET: input exceeds limit"
    );
    let mut flipped = big.clone();
    flipped[40] ^= 1;
    let e = archive::read_archive_manifest_from(Cursor::new(&flipped), big.len() as u64, &limits)
        .unwrap_err();
    assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_ENVELOPE");
}
