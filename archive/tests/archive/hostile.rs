//! The hostile corpus (`fixtures/hostile-zips/`): every archive is refused with its expected code
//! by the reader and by staging, and staging creates nothing.

use std::io::Cursor;
use std::process::Command;

use archive::{
    ArchiveLimits, read_archive_entries, read_archive_manifest, read_archive_manifest_from,
};

use crate::common::{Fixture, Spec, fixture, repo_root, tree};

struct Case {
    file: String,
    read_code: String,
    stage_code: String,
    python_opens: bool,
}

fn corpus() -> Vec<(Case, Vec<u8>)> {
    let dir = repo_root().join("fixtures/hostile-zips");
    let table = std::fs::read_to_string(dir.join("expected.tsv")).unwrap();
    let mut out = Vec::new();
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split('\t').collect();
        assert_eq!(cols.len(), 6, "{line}");
        let case = Case {
            file: cols[0].to_owned(),
            read_code: cols[2].to_owned(),
            stage_code: cols[3].to_owned(),
            python_opens: cols[4] == "yes",
        };
        let bytes = std::fs::read(dir.join(&case.file)).unwrap();
        out.push((case, bytes));
    }
    assert!(out.len() >= 100, "corpus too small: {}", out.len());
    out
}

/// Selected `a.txt`, create grant `b.txt`: at most two entries.
fn stage_fixture() -> Fixture {
    fixture(&Spec {
        files: &[("a.txt", "alpha\n"), ("z.txt", "zulu\n")],
        selected: &["a.txt"],
        creates: &["b.txt"],
        allowed: &["a.txt", "b.txt"],
        ..Spec::default()
    })
}

#[test]
fn every_hostile_archive_is_rejected_by_the_reader_with_its_code() {
    let limits = ArchiveLimits::default();
    let mut failures = Vec::new();
    for (case, bytes) in corpus() {
        let got = read_archive_manifest(&bytes, &limits).map_err(|e| e.code().to_owned());
        let entries = read_archive_entries(&bytes, &limits).map_err(|e| e.code().to_owned());
        let streamed = read_archive_manifest_from(Cursor::new(&bytes), bytes.len() as u64, &limits)
            .map(|(_, m)| m)
            .map_err(|e| e.code().to_owned());
        assert_eq!(streamed, got, "{}: streamed reader differs", case.file);
        let expected = if case.read_code == "ACCEPTED" {
            Ok(())
        } else {
            Err(case.read_code.clone())
        };
        if got.as_ref().map(|_| ()).map_err(Clone::clone) != expected
            || entries.as_ref().map(|_| ()).map_err(Clone::clone) != expected
        {
            failures.push(format!(
                "{}: expected {expected:?}, got {:?}",
                case.file,
                got.map(|_| ())
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_hostile_archive_is_rejected_by_staging_and_nothing_is_created() {
    let fx = stage_fixture();
    let mut failures = Vec::new();
    for (case, bytes) in corpus() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        match fx.stage(&bytes, &root) {
            Ok(_) => failures.push(format!("{}: staged", case.file)),
            Err(e) if e.code() != case.stage_code => {
                failures.push(format!(
                    "{}: expected {}, got {e}",
                    case.file, case.stage_code
                ));
            }
            Err(_) => {}
        }
        assert!(!root.exists(), "{}: root created", case.file);
        assert!(tree(tmp.path()).is_empty(), "{}: files created", case.file);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The table also records which archives Python's `zipfile` opens: the lax reader accepts most of
/// them, which is why it (and the `zip` crate) serve only as oracles.
#[test]
fn lax_readers_accept_much_of_the_corpus() {
    let corpus = corpus();
    let python_opens = corpus.iter().filter(|(c, _)| c.python_opens).count();
    let mut zip_opens = 0;
    for (_, bytes) in &corpus {
        if let Ok(mut z) = zip::ZipArchive::new(Cursor::new(bytes))
            && (0..z.len()).all(|i| z.by_index(i).is_ok())
        {
            zip_opens += 1;
        }
    }
    assert!(
        python_opens > corpus.len() / 2,
        "python opened {python_opens}"
    );
    assert!(zip_opens > corpus.len() / 3, "zip opened {zip_opens}");
}

#[test]
fn corpus_is_reproducible_from_its_generator() {
    let script = repo_root().join("fixtures/hostile-zips/generate.py");
    snapshot::testkit::stdout_of(Command::new("python3").arg(script).arg("--check"));
}
