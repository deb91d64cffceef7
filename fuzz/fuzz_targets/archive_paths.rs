//! Fuzzes the writer/reader pair with structured entry sets whose paths are built from hostile
//! tokens (`..`, `.`, empty segments, `\`, `:`, case and normalisation twins, device names).
//!
//! Invariants: the writer accepts a set iff every path is a canonical portable path and the set
//! is collision-free; whatever it writes, the strict reader reads back as the sorted set; and
//! input order never changes the bytes.
#![no_main]

use arbitrary::Arbitrary;
use archive::{ArchiveLimits, build_deterministic_archive, read_archive_entries};
use libfuzzer_sys::fuzz_target;
use snapshot::{RepoPath, detect_collisions};

#[derive(Debug, Arbitrary)]
enum Token {
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

#[derive(Debug, Arbitrary)]
struct Entry {
    segments: Vec<Vec<Token>>,
    content: Vec<u8>,
}

fuzz_target!(|input: Vec<Entry>| {
    if input.len() > 50 {
        return;
    }
    let mut set = Vec::new();
    for e in &input {
        let text: Vec<String> = e.segments.iter().map(|s| segment(s)).collect();
        match RepoPath::parse(&text.join("/")) {
            Ok(path) => set.push((path, e.content.clone())),
            Err(_) => return, // non-portable: not representable as an entry at all
        }
    }
    let collision_free = detect_collisions(set.iter().map(|(p, _)| p)).is_ok();
    let built = build_deterministic_archive(&set);
    assert_eq!(built.is_ok(), collision_free && !set.is_empty(), "writer acceptance");
    let Ok(bytes) = built else { return };
    let mut reversed = set.iter().rev().cloned().collect::<Vec<_>>();
    assert_eq!(build_deterministic_archive(&reversed).expect("same set"), bytes);
    reversed.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
    if bytes.len() <= archive::MAX_ARCHIVE_BYTES {
        let read = read_archive_entries(&bytes, &ArchiveLimits::default()).expect("reads back");
        assert_eq!(read, reversed);
    }
});
