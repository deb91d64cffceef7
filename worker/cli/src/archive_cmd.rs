//! `patch-candidate archive inspect|pack`: read a returned archive strictly and print its
//! manifest, or pack a directory into the canonical envelope.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use archive::{
    ARCHIVE_SCHEMA_VERSION, ArchiveError, ArchiveLimits, EMPTY_ARCHIVE_MARKER, MAX_ARCHIVE_BYTES,
    MAX_ARCHIVE_FILES, archive_digest, pack_directory, read_archive_manifest,
    read_archive_manifest_from,
};
use clap::{Args, Subcommand};

use super::outcome::{ARCHIVE_IO_CODE, display_path};
use super::paths::{read_error, require_dir, require_parent};
use super::render::name;
use super::{CliError, Outcome};

/// Archive commands.
#[derive(Debug, Subcommand)]
pub(crate) enum ArchiveCommand {
    /// Strictly read an archive and print its manifest (path, size, sha256) and digest.
    Inspect(InspectArgs),
    /// Write the canonical archive of a directory's regular files.
    Pack(PackArgs),
}

/// `archive inspect` arguments.
#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    /// The archive file.
    file: PathBuf,
    /// File budget (1–50).
    #[arg(long, default_value_t = MAX_ARCHIVE_FILES)]
    max_files: usize,
    /// Byte budget for the archive and its contents (1–16777216).
    #[arg(long, default_value_t = MAX_ARCHIVE_BYTES)]
    max_bytes: usize,
}

/// `archive pack` arguments.
#[derive(Debug, Args)]
pub(crate) struct PackArgs {
    /// The directory to pack (links, special files, non-portable names are refused).
    dir: PathBuf,
    /// Where to write the archive.
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn run(command: &ArchiveCommand) -> Result<Outcome, CliError> {
    match command {
        ArchiveCommand::Inspect(args) => inspect(args),
        ArchiveCommand::Pack(args) => pack(args),
    }
}

/// The archive file's contents and manifest. The file is opened once without blocking and must
/// be a regular file within the byte budget (checked on the handle); it is then read while a
/// second thread hashes it (`read_archive_manifest_from`).
enum Loaded {
    Marker(Vec<u8>),
    Manifest(archive::ArchiveManifest),
}

fn load(path: &Path, limits: &ArchiveLimits) -> Result<Loaded, CliError> {
    let (file, len) = turn::open_regular_file(path, limits.max_bytes()).map_err(|e| match e {
        turn::BoundedReadError::TooLarge { .. } => CliError::from(ArchiveError::Budget {
            detail: "input exceeds limit",
        }),
        e => read_error("FILE", path, &e),
    })?;
    if len == EMPTY_ARCHIVE_MARKER.len() as u64 {
        let mut data = Vec::new();
        file.take(len + 1).read_to_end(&mut data).map_err(|e| {
            CliError::environment(
                ARCHIVE_IO_CODE,
                format!("cannot read archive: {}", e.kind()),
            )
        })?;
        if data == EMPTY_ARCHIVE_MARKER {
            return Ok(Loaded::Marker(data));
        }
        return Ok(Loaded::Manifest(read_archive_manifest(&data, limits)?));
    }
    let (_, manifest) = read_archive_manifest_from(file, len, limits)?;
    Ok(Loaded::Manifest(manifest))
}

fn inspect(args: &InspectArgs) -> Result<Outcome, CliError> {
    let limits = ArchiveLimits::new(args.max_files, args.max_bytes)?;
    let manifest = match load(&args.file, &limits)? {
        Loaded::Manifest(manifest) => manifest,
        Loaded::Marker(data) => {
            let digest = archive_digest(&data);
            return Ok(Outcome {
                json: serde_json::json!({
                    "schema_version": ARCHIVE_SCHEMA_VERSION,
                    "empty_marker": true,
                    "archive_sha256": digest.to_string(),
                    "entry_count": 0,
                    "total_bytes": 0,
                    "entries": [],
                }),
                text: format!("empty transport marker (zero entries)\narchive {digest}\n"),
            });
        }
    };
    let total: u64 = manifest.entries.iter().map(|e| e.size_bytes).sum();
    let entries: Vec<serde_json::Value> = manifest
        .entries
        .iter()
        .map(|e| {
            serde_json::json!({
                "path": e.path.as_str(),
                "size_bytes": e.size_bytes,
                "content_sha256": e.content_sha256.to_string(),
            })
        })
        .collect();
    let mut text = String::new();
    for e in &manifest.entries {
        let _ = writeln!(
            text,
            "{:>10}  {}  {}",
            e.size_bytes,
            e.content_sha256,
            name(e.path.as_str())
        );
    }
    let _ = writeln!(
        text,
        "{} entries, {total} bytes\narchive {}",
        manifest.entries.len(),
        manifest.archive_sha256
    );
    Ok(Outcome {
        json: serde_json::json!({
            "schema_version": manifest.schema_version(),
            "empty_marker": false,
            "archive_sha256": manifest.archive_sha256.to_string(),
            "entry_count": manifest.entries.len(),
            "total_bytes": total,
            "entries": entries,
        }),
        text,
    })
}

fn pack(args: &PackArgs) -> Result<Outcome, CliError> {
    require_dir("DIR", &args.dir)?;
    require_parent("--out", &args.out)?;
    let data = pack_directory(&args.dir)?;
    std::fs::write(&args.out, &data).map_err(|e| {
        CliError::environment(
            ARCHIVE_IO_CODE,
            format!("cannot write archive: {}", e.kind()),
        )
    })?;
    let limits = ArchiveLimits::default();
    let manifest = read_archive_manifest(&data, &limits)?;
    Ok(Outcome {
        json: serde_json::json!({
            "out": args.out.display().to_string(),
            "archive_sha256": manifest.archive_sha256.to_string(),
            "entry_count": manifest.entries.len(),
            "archive_bytes": data.len(),
        }),
        text: format!(
            "wrote {} ({} entries, {} bytes)\narchive {}\n",
            display_path(&args.out),
            manifest.entries.len(),
            data.len(),
            manifest.archive_sha256
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, content: &str) {
        snapshot::testkit::write_files(dir, [(rel, content.as_bytes(), false)]);
    }

    /// A temporary directory whose `src` holds `files` (path, content): (guard, `src`).
    fn src_with(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        for (rel, content) in files {
            write(&src, rel, content);
        }
        (tmp, src)
    }

    #[test]
    fn pack_then_inspect_round_trips_the_golden_vector() {
        let (tmp, src) = src_with(&[
            ("app/config/shell.json", "{\"nav\": []}\n"),
            ("app/app.json", "{\"appName\": \"Golden\"}\n"),
            ("modules/reports/module.yaml", "module:\n  id: reports\n"),
            ("ui/pages/reports.yaml", "name: Répörts\n"),
        ]);
        let out = tmp.path().join("golden.zip");
        let packed = pack(&PackArgs {
            dir: src,
            out: out.clone(),
        })
        .unwrap();
        let digest = "sha256:aecaa65174d8db2ff8e9f020760445b737d5f915a651458bc0f960b395f39841";
        assert_eq!(packed.json["archive_sha256"], digest);
        assert_eq!(std::fs::read(&out).unwrap().len(), 560);
        let shown = inspect(&InspectArgs {
            file: out,
            max_files: 50,
            max_bytes: MAX_ARCHIVE_BYTES,
        })
        .unwrap();
        assert_eq!(shown.json["archive_sha256"], digest);
        assert_eq!(shown.json["entry_count"], 4);
        assert_eq!(shown.json["entries"][0]["path"], "app/app.json");
        assert!(shown.text.ends_with(&format!("archive {digest}\n")));
    }

    #[test]
    fn inspect_rejects_with_the_code_and_honours_lower_budgets() {
        let (tmp, src) = src_with(&[("a.txt", "alpha\n"), ("b.txt", "bravo\n")]);
        let out = tmp.path().join("two.zip");
        pack(&PackArgs {
            dir: src,
            out: out.clone(),
        })
        .unwrap();
        let e = inspect(&InspectArgs {
            file: out.clone(),
            max_files: 1,
            max_bytes: 1000,
        })
        .unwrap_err();
        assert_eq!(e.code, "REPOSITORY_PATCH_ARCHIVE_BUDGET");
        let e = inspect(&InspectArgs {
            file: out.clone(),
            max_files: 60,
            max_bytes: 1000,
        })
        .unwrap_err();
        assert_eq!(
            (e.code, e.message().as_str()),
            (
                "REPOSITORY_PATCH_ARCHIVE_BUDGET",
                "REPOSITORY_PATCH_ARCHIVE_BUDGET: invalid file limit"
            )
        );
        let mut bytes = std::fs::read(&out).unwrap();
        bytes.insert(0, b'#');
        std::fs::write(&out, &bytes).unwrap();
        let e = inspect(&InspectArgs {
            file: out,
            max_files: 50,
            max_bytes: 1000,
        })
        .unwrap_err();
        assert_eq!(e.code, "REPOSITORY_PATCH_ARCHIVE_FORMAT");
        let marker = tmp.path().join("marker");
        std::fs::write(&marker, EMPTY_ARCHIVE_MARKER).unwrap();
        let shown = inspect(&InspectArgs {
            file: marker,
            max_files: 50,
            max_bytes: 1000,
        })
        .unwrap();
        assert_eq!(shown.json["empty_marker"], true);
    }

    #[test]
    fn pack_refuses_links_and_non_portable_names() {
        let (tmp, src) = src_with(&[("a.txt", "alpha\n")]);
        std::os::unix::fs::symlink("/etc/passwd", src.join("b.txt")).unwrap();
        let out = tmp.path().join("x.zip");
        let e = pack(&PackArgs {
            dir: src.clone(),
            out: out.clone(),
        })
        .unwrap_err();
        assert_eq!(e.code, "REPOSITORY_PATCH_ARCHIVE_SCOPE");
        assert!(e.message().contains("symlink"), "{}", e.message());
        std::fs::remove_file(src.join("b.txt")).unwrap();
        write(&src, "bad:name.txt", "x");
        let e = pack(&PackArgs {
            dir: src,
            out: out.clone(),
        })
        .unwrap_err();
        assert!(e.message().contains("unsafe_path"), "{}", e.message());
        assert!(!out.exists());
    }
}
