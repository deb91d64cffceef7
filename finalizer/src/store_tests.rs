use super::*;
use crate::testkit::{create, sample};

#[test]
fn put_get_list_round_trip_and_idempotence() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("store");
    let store = CandidateStore::open(&root).unwrap();
    let c = sample();
    let d = store.put(&c).unwrap();
    assert_eq!(d, repository_patch_digest(&c).unwrap());
    assert_eq!(store.put(&c).unwrap(), d);
    assert_eq!(store.list().unwrap(), vec![d]);
    assert_eq!(store.get(&d).unwrap(), c);
    let names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec![format!("{}.json", d.bare_hex())]);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&root).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let file_mode = std::fs::metadata(root.join(&names[0]))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(file_mode & 0o777, 0o600);
}

#[test]
fn refuses_to_overwrite_different_bytes_and_detects_tampering() {
    let tmp = tempfile::tempdir().unwrap();
    let store = CandidateStore::open(tmp.path()).unwrap();
    let c = sample();
    let d = repository_patch_digest(&c).unwrap();
    let path = tmp.path().join(format!("{}.json", d.bare_hex()));
    let other = crate::testkit::candidate(vec![create("app/other.py", "y = 2\n")]);
    std::fs::write(&path, other.to_json_pretty().unwrap()).unwrap();
    assert_eq!(
        store.put(&c).unwrap_err().code(),
        "REPOSITORY_PATCH_STORE_CONFLICT"
    );
    assert_eq!(
        store.get(&d).unwrap_err().code(),
        "REPOSITORY_PATCH_STORE_DIGEST"
    );
    std::fs::write(&path, b"{not json").unwrap();
    assert_eq!(
        store.get(&d).unwrap_err().code(),
        "REPOSITORY_PATCH_DIGEST_INPUT"
    );
    let missing = Sha256::of(b"nothing");
    assert_eq!(
        store.get(&missing).unwrap_err().code(),
        "REPOSITORY_PATCH_STORE_MISSING"
    );
    std::fs::write(tmp.path().join("notes.txt"), b"x").unwrap();
    assert_eq!(store.list().unwrap(), vec![d]);
}

#[test]
fn a_symlinked_candidate_is_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let store = CandidateStore::open(&tmp.path().join("s")).unwrap();
    let c = sample();
    let d = repository_patch_digest(&c).unwrap();
    let outside = tmp.path().join("outside.json");
    std::fs::write(&outside, c.to_json_pretty().unwrap()).unwrap();
    std::os::unix::fs::symlink(
        &outside,
        tmp.path().join("s").join(format!("{}.json", d.bare_hex())),
    )
    .unwrap();
    assert_eq!(
        store.get(&d).unwrap_err().code(),
        "REPOSITORY_PATCH_STORE_IO"
    );
    assert!(CandidateStore::open(&outside).is_err());
}

#[test]
fn open_existing_never_creates() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("absent");
    assert_eq!(
        CandidateStore::open_existing(&missing).unwrap_err().code(),
        "REPOSITORY_PATCH_STORE_MISSING"
    );
    assert!(!missing.exists());
    let store = CandidateStore::open(&missing).unwrap();
    let d = store.put(&sample()).unwrap();
    let read_only = CandidateStore::open_existing(&missing).unwrap();
    assert_eq!(read_only.list().unwrap(), vec![d]);
    assert_eq!(read_only.get(&d).unwrap(), sample());
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&missing, &link).unwrap();
    assert!(CandidateStore::open_existing(&link).is_err());
}

/// Finding: store reads opened without `O_NONBLOCK`, so a FIFO planted under a candidate's name
/// blocked every reader. Now the handle is checked and the read refused. (On the old code the
/// read blocks in `open`; the guard then opens the write side so the test fails, not hangs.)
#[test]
fn r_fifo_under_a_candidate_name_does_not_block() {
    let tmp = tempfile::tempdir().unwrap();
    let store = CandidateStore::open(tmp.path()).unwrap();
    let d = repository_patch_digest(&sample()).unwrap();
    let path = tmp.path().join(format!("{}.json", d.bare_hex()));
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let got = snapshot::testkit::unless_blocked_on_fifo("the store read", &path, move || {
        store.get(&d).map(|_| ())
    });
    assert_eq!(
        got.unwrap_err().to_string(),
        "REPOSITORY_PATCH_STORE_IO: stored candidate is not a regular file"
    );
}

/// Finding: `open_existing` checked with `lstat` and then opened following links; the open itself
/// now refuses a link, and a file is not a store.
#[test]
fn open_existing_refuses_links_and_files_on_the_handle() {
    let tmp = tempfile::tempdir().unwrap();
    let [real, link, file] = snapshot::testkit::dir_link_and_file(tmp.path());
    for bad in [&link, &file, &tmp.path().join("missing")] {
        assert_eq!(
            CandidateStore::open_existing(bad).unwrap_err().code(),
            "REPOSITORY_PATCH_STORE_MISSING"
        );
    }
    assert_eq!(
        CandidateStore::open(&link).unwrap_err().to_string(),
        "REPOSITORY_PATCH_STORE_IO: store path is not a directory"
    );
    CandidateStore::open_existing(&real).unwrap();
}
