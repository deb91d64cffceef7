use super::*;
use pretty_assertions::assert_eq;

/// One entry of a test stream: a directory or a file, written with a raw ustar header so that
/// hostile names and types can be expressed (tar-rs' builder refuses some of them).
#[expect(clippy::large_enum_variant, reason = "a test helper built a few times")]
enum E<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Raw(tar::Header, &'a [u8]),
}

fn header(name: &str, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.as_mut_bytes()[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_cksum();
    h
}

fn stream(entries: &[E<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut push = |h: &tar::Header, data: &[u8]| {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        out.extend(std::iter::repeat_n(0u8, pad));
    };
    for e in entries {
        match e {
            E::Dir(n) => push(&header(n, tar::EntryType::Directory, 0o755, 0), b""),
            E::File(n, d) => push(
                &header(n, tar::EntryType::Regular, 0o644, d.len() as u64),
                d,
            ),
            E::Raw(h, d) => push(h, d),
        }
    }
    out.extend(std::iter::repeat_n(0u8, 1024));
    out
}

/// A stream of one empty entry of `kind` with `mode`, from its bare header.
fn lone(name: &str, kind: tar::EntryType, mode: u32) -> Vec<u8> {
    stream(&[E::Raw(header(name, kind, mode, 0), b"")])
}

/// A case of one header-only entry, refused with `rule` under a one-entry, zero-byte budget.
fn lone_case(
    name: &str,
    kind: tar::EntryType,
    mode: u32,
    rule: TreeRule,
) -> (Vec<u8>, u64, u64, TreeRule) {
    (lone(name, kind, mode), 1, 0, rule)
}

fn pax(path: &str) -> (tar::Header, Vec<u8>) {
    let body_len = " path=\n".len() + path.len();
    let mut len = body_len + 1;
    while format!("{len}").len() + body_len != len {
        len += 1;
    }
    let rec = format!("{len} path={path}\n").into_bytes();
    (
        header(
            "PaxHeader",
            tar::EntryType::XHeader,
            0o644,
            rec.len() as u64,
        ),
        rec,
    )
}

fn run(
    bytes: &[u8],
    entries: u64,
    total: u64,
) -> (tempfile::TempDir, Result<Extracted, GateRunnerError>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
    let r = extract(bytes, &dir, TreeTotals::new(entries, total).unwrap());
    (tmp, r)
}

fn rule(r: Result<Extracted, GateRunnerError>) -> Option<TreeRule> {
    match r {
        Err(GateRunnerError::Tree { rule, .. }) => Some(rule),
        _ => None,
    }
}

#[test]
fn extracts_directories_and_files_with_their_modes() {
    let (ph, pd) = pax("src/deep/f.txt");
    let s = stream(&[
        E::Dir("src/"),
        E::File("src/a.py", b"print(1)\n"),
        E::Raw(exe_header(), b"#!\n"),
        E::Dir("src/deep"),
        E::Raw(ph, &pd),
        E::File("ignored-name", b"x"),
    ]);
    let (tmp, r) = run(&s, 5, 13);
    assert_eq!(
        r.unwrap(),
        Extracted {
            entries: 5,
            bytes: 13
        }
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &str| {
        std::fs::metadata(tmp.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        std::fs::read(tmp.path().join("src/a.py")).unwrap(),
        b"print(1)\n"
    );
    assert_eq!(
        std::fs::read(tmp.path().join("src/deep/f.txt")).unwrap(),
        b"x"
    );
    assert!(!tmp.path().join("ignored-name").exists());
    assert_eq!(mode("src/run.sh") & 0o111, 0o111);
    assert_eq!(mode("src/a.py") & 0o111, 0);
}

fn exe_header() -> tar::Header {
    header("src/run.sh", tar::EntryType::Regular, 0o755, 3)
}

#[test]
fn an_empty_tree_is_two_zero_blocks() {
    let (_tmp, r) = run(&[0u8; 1024], 0, 0);
    assert_eq!(
        r.unwrap(),
        Extracted {
            entries: 0,
            bytes: 0
        }
    );
}

#[test]
fn refuses_every_rule_before_writing() {
    let mut gnu = tar::Header::new_gnu();
    gnu.set_path("a").unwrap();
    gnu.set_size(0);
    gnu.set_entry_type(tar::EntryType::Regular);
    gnu.set_mode(0o644);
    gnu.set_cksum();
    let mut bad_sum = header("a", tar::EntryType::Regular, 0o644, 0);
    bad_sum.as_mut_bytes()[0] = b'b';
    let mut linked = header("a", tar::EntryType::Regular, 0o644, 0);
    linked.as_mut_bytes()[157] = b'x';
    linked.set_cksum();
    let (pax_ok_h, pax_ok_d) = pax("a");
    let other_key = b"12 size=999\n".to_vec();
    let other_key_h = header("P", tar::EntryType::XHeader, 0o644, other_key.len() as u64);
    let two_records = b"8 path=\n8 path=\n".to_vec();
    let two_records_h = header(
        "P",
        tar::EntryType::XHeader,
        0o644,
        two_records.len() as u64,
    );
    let cases: Vec<(Vec<u8>, u64, u64, TreeRule)> = vec![
        lone_case("l", tar::EntryType::Symlink, 0o777, TreeRule::Symlink),
        lone_case("l", tar::EntryType::Link, 0o644, TreeRule::HardLink),
        lone_case("c", tar::EntryType::Char, 0o644, TreeRule::Special),
        lone_case("b", tar::EntryType::Block, 0o644, TreeRule::Special),
        lone_case("f", tar::EntryType::Fifo, 0o644, TreeRule::Special),
        lone_case("o", tar::EntryType::new(b'7'), 0o644, TreeRule::Special),
        (
            stream(&[E::Raw(
                header("L", tar::EntryType::GNULongName, 0o644, 2),
                b"ab",
            )]),
            1,
            0,
            TreeRule::Gnu,
        ),
        lone_case("g", tar::EntryType::XGlobalHeader, 0o644, TreeRule::PaxKey),
        (
            stream(&[E::Raw(other_key_h, &other_key), E::File("a", b"")]),
            1,
            0,
            TreeRule::PaxKey,
        ),
        (
            stream(&[E::Raw(two_records_h, &two_records), E::File("a", b"")]),
            1,
            0,
            TreeRule::PaxKey,
        ),
        (
            stream(&[
                E::Raw(pax_ok_h.clone(), &pax_ok_d),
                E::Raw(pax_ok_h, &pax_ok_d),
                E::File("a", b""),
            ]),
            1,
            0,
            TreeRule::PaxKey,
        ),
        (stream(&[E::Raw(gnu, b"")]), 1, 0, TreeRule::Gnu),
        (stream(&[E::Raw(bad_sum, b"")]), 1, 0, TreeRule::Header),
        (stream(&[E::Raw(linked, b"")]), 1, 0, TreeRule::Header),
        (stream(&[E::File("/etc/passwd", b"")]), 1, 0, TreeRule::Path),
        (stream(&[E::File("../x", b"")]), 1, 0, TreeRule::Path),
        (
            stream(&[E::Dir("a"), E::File("a/../../x", b"")]),
            2,
            0,
            TreeRule::Path,
        ),
        (stream(&[E::File("a//b", b"")]), 1, 0, TreeRule::Path),
        (stream(&[E::File("./a", b"")]), 1, 0, TreeRule::Path),
        (stream(&[E::File("a\\b", b"")]), 1, 0, TreeRule::Path),
        (stream(&[E::File("a/", b"")]), 1, 0, TreeRule::Path),
        (
            stream(&[E::File("a", b""), E::File("a", b"")]),
            2,
            0,
            TreeRule::Duplicate,
        ),
        (
            stream(&[E::Dir("a"), E::Dir("a/")]),
            2,
            0,
            TreeRule::Duplicate,
        ),
        (stream(&[E::File("a/b", b"")]), 1, 0, TreeRule::Parent),
        (
            stream(&[E::File("a", b""), E::File("a/b", b"")]),
            2,
            0,
            TreeRule::Parent,
        ),
        lone_case("a", tar::EntryType::Regular, 0o4755, TreeRule::Mode),
        lone_case("a", tar::EntryType::Regular, 0o600, TreeRule::Mode),
        lone_case("a", tar::EntryType::Directory, 0o777, TreeRule::Mode),
        (
            stream(&[E::File("a", b""), E::File("b", b"")]),
            1,
            0,
            TreeRule::TooManyEntries,
        ),
        (
            stream(&[E::File("a", b"12345")]),
            1,
            4,
            TreeRule::TooManyBytes,
        ),
        (stream(&[E::File("a", b"1")]), 2, 1, TreeRule::Short),
        (stream(&[E::File("a", b"1")]), 1, 2, TreeRule::Short),
    ];
    for (i, (bytes, entries, total, expected)) in cases.into_iter().enumerate() {
        let (tmp, r) = run(&bytes, entries, total);
        assert_eq!(rule(r), Some(expected), "case {i}");
        // Nothing outside the root, and no link was followed.
        assert!(!tmp.path().parent().unwrap().join("x").exists(), "case {i}");
    }
}

#[test]
fn the_stream_must_end_with_two_zero_blocks_then_eof() {
    let good = stream(&[E::File("a", b"1")]);
    let mut one_block = good.clone();
    one_block.truncate(good.len() - 512);
    let mut extra = good.clone();
    extra.push(0);
    let mut garbage = good.clone();
    let n = garbage.len();
    garbage[n - 1] = 1;
    for bytes in [one_block, extra, garbage] {
        let (_tmp, r) = run(&bytes, 1, 1);
        assert_eq!(rule(r), Some(TreeRule::End));
    }
    let (_tmp, r) = run(&good, 1, 1);
    assert!(r.is_ok());
    // A stream cut inside a file's data.
    let cut = &good[..512 + 1 - 1];
    let (_tmp, r) = run(cut, 1, 1);
    assert_eq!(rule(r), Some(TreeRule::Truncated));
}

#[test]
fn an_oversize_file_is_refused_before_its_data_is_read() {
    // The header declares 1 GiB; only the header is present. The byte cap refuses it without
    // reading (a short read would be Truncated instead).
    let s = stream(&[E::Raw(
        header("big", tar::EntryType::Regular, 0o644, 1 << 30),
        b"",
    )]);
    let (tmp, r) = run(&s, 1, 1 << 20);
    assert_eq!(rule(r), Some(TreeRule::TooManyBytes));
    assert!(!tmp.path().join("big").exists());
}

#[test]
fn never_writes_through_an_existing_link() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("d")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("f"), tmp.path().join("f")).unwrap();
    let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
    let s = stream(&[E::File("f", b"x")]);
    let r = extract(&s[..], &dir, TreeTotals::new(1, 1).unwrap());
    assert!(r.is_err());
    assert!(!outside.path().join("f").exists());
    let s = stream(&[E::Dir("d")]);
    assert!(extract(&s[..], &dir, TreeTotals::new(1, 0).unwrap()).is_err());
}
