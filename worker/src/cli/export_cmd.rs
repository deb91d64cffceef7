//! `patch-candidate export FILE --format git [--out F]`: a candidate as one `git apply`-ready patch
//! (`finalizer::git_patch`), optionally bound to an expected digest and verified against its
//! repository first.
//!
//! The patch goes to `--out` (written atomically: a temporary file in the same directory, then a
//! link or rename; an existing file is refused without `--force`; with `--repo`, a path inside
//! that repository is refused) or to stdout. On a terminal stdout shows it escaped, as `show`
//! does; the exact bytes go to a pipe or a file.

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions};
use clap::{Args, ValueEnum};
use finalizer::{git_patch, repository_patch_digest, verify_against_repository};
use snapshot::Untrusted;
use worker::WorkerError;

use super::finalize_cmd::{parse_digest_flag, read_candidate};
use super::output::display_path;
use super::paths::{require_dir, require_parent};
use super::{CliError, Outcome};

/// Patch formats `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// `git apply`-ready: `diff --git` headers, new/deleted file modes, the candidate's hunks.
    Git,
}

/// `export` arguments.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// A candidate JSON file.
    file: PathBuf,
    /// The patch format.
    #[arg(long, value_enum)]
    format: Format,
    /// Write the patch to this file instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replace an existing `--out` file.
    #[arg(long, requires = "out")]
    force: bool,
    /// Refuse the candidate unless its digest is this one (`sha256:` + 64 hex).
    #[arg(long)]
    digest: Option<String>,
    /// Verify the candidate against this repository at its baseline commit first (read-only);
    /// `--out` may then not point inside it.
    #[arg(long)]
    repo: Option<PathBuf>,
}

/// `export`.
pub(crate) fn run(args: &ExportArgs) -> Result<Outcome, CliError> {
    let expected = args
        .digest
        .as_deref()
        .map(|d| parse_digest_flag("--digest", d))
        .transpose()?;
    if let Some(repo) = &args.repo {
        require_dir("--repo", repo)?;
    }
    if let Some(out) = &args.out {
        require_parent("--out", out)?;
        if let Some(repo) = &args.repo
            && is_inside(out, repo)?
        {
            return Err(WorkerError::OutputInRepository { flag: "--out" }.into());
        }
        if !args.force && out.symlink_metadata().is_ok() {
            return Err(WorkerError::OutputExists { flag: "--out" }.into());
        }
    }
    let candidate = read_candidate(&args.file)?;
    let digest = match &expected {
        Some(expected) => finalizer::verify_digest(&candidate, expected)?,
        None => repository_patch_digest(&candidate)?,
    };
    let verified = match &args.repo {
        Some(repo) => Some(verify_against_repository(&candidate, repo)?),
        None => None,
    };
    let patch = match args.format {
        Format::Git => git_patch(&candidate)?,
    };
    let files = candidate.changed_files().len();
    let (out_name, shown_patch, text) = match &args.out {
        Some(out) => {
            write_output("--out", out, patch.as_bytes(), args.force)?;
            let text = format!(
                "wrote a git patch of {files} files ({} bytes) for {digest} to {}\n",
                patch.len(),
                display_path(out)
            );
            (Some(out.display().to_string()), None, text)
        }
        None if std::io::stdout().is_terminal() => {
            let _ = writeln!(
                std::io::stderr(),
                "stdout is a terminal: the patch is shown escaped; use --out FILE or a pipe for its exact bytes"
            );
            let text = Untrusted::lines(&patch).render();
            (None, Some(patch.as_str()), text)
        }
        None => (None, Some(patch.as_str()), patch.clone()),
    };
    let json = serde_json::json!({
        "digest": digest.to_string(),
        "format": "git",
        "files": files,
        "bytes": patch.len(),
        "repository": verified,
        "out": out_name,
        "patch": shown_patch,
    });
    Ok(Outcome { json, text })
}

/// True when `path` (its parent directory, resolved by the kernel, links included) lies inside
/// `repo`: walks `parent/..` upwards comparing device and inode with the repository's root, so a
/// symbolic link or `..` in either path cannot hide the relation.
fn is_inside(path: &Path, repo: &Path) -> Result<bool, CliError> {
    use std::os::unix::fs::MetadataExt as _;
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let io = |e: std::io::Error| -> CliError {
        WorkerError::OutputWrite {
            flag: "--out",
            kind: e.kind(),
        }
        .into()
    };
    let root = id(repo).map_err(io)?;
    let mut dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut current = id(&dir).map_err(io)?;
    // Each step goes one directory up; a path has far fewer components than this bound.
    for _ in 0..4096 {
        if current == root {
            return Ok(true);
        }
        dir.push("..");
        let parent = id(&dir).map_err(io)?;
        if parent == current {
            return Ok(false);
        }
        current = parent;
    }
    Ok(false)
}

/// Writes `bytes` to `path` atomically: a new temporary file next to it (created exclusively,
/// flushed to disk), then linked to the final name (which fails, leaving nothing, if the name
/// exists) or, with `force`, renamed over it. The temporary file is removed on every path.
pub(crate) fn write_output(
    flag: &'static str,
    path: &Path,
    bytes: &[u8],
    force: bool,
) -> Result<(), CliError> {
    let fail = |e: std::io::Error| -> CliError {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            WorkerError::OutputExists { flag }.into()
        } else {
            WorkerError::OutputWrite {
                flag,
                kind: e.kind(),
            }
            .into()
        }
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| fail(std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    let dir = Dir::open_ambient_dir(parent, cap_std::ambient_authority()).map_err(fail)?;
    let tmp_name = format!(".patch-candidate-{}.tmp", uuid::Uuid::new_v4().simple());
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    let written = (|| {
        let mut file = dir.open_with(&tmp_name, &options)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        if force {
            dir.rename(&tmp_name, &dir, name)
        } else {
            dir.hard_link(&tmp_name, &dir, name)
        }
    })();
    // After a rename the temporary name is gone already; otherwise it is removed here.
    let _ = dir.remove_file(&tmp_name);
    written.map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_atomic_and_never_replaces_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("p.patch");
        write_output("--out", &out, b"one", false).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"one");
        let e = write_output("--out", &out, b"two", false).unwrap_err();
        assert_eq!(e.code, "PATCH_CANDIDATE_OUTPUT_EXISTS");
        assert_eq!(std::fs::read(&out).unwrap(), b"one");
        write_output("--out", &out, b"two", true).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"two");
        // Only the output remains: no temporary file is left behind on any path.
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("p.patch")]);
        // An unwritable place is an environment failure with its code, nothing half-written.
        let e = write_output("--out", &tmp.path().join("p.patch/x"), b"x", false).unwrap_err();
        assert_eq!(e.code, "PATCH_CANDIDATE_OUTPUT_WRITE");
    }

    #[test]
    fn inside_the_repository_is_seen_through_links_and_dot_dot() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        std::fs::create_dir(repo.join("sub")).unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(repo.join("sub"), outside.join("link")).unwrap();
        assert!(is_inside(&repo.join("x.patch"), &repo).unwrap());
        assert!(is_inside(&repo.join("sub/x.patch"), &repo).unwrap());
        assert!(is_inside(&outside.join("link/x.patch"), &repo).unwrap());
        assert!(is_inside(&outside.join("../repo/sub/x.patch"), &repo).unwrap());
        assert!(!is_inside(&outside.join("x.patch"), &repo).unwrap());
        assert!(!is_inside(&tmp.path().join("x.patch"), &repo).unwrap());
    }
}
