//! `patch-candidate export FILE --format git [--out F]`: a candidate as one `git apply`-ready patch
//! (`finalizer::git_patch`), optionally bound to an expected digest and verified against its
//! repository first.
//!
//! The patch goes to `--out` (written like every output file, by `outfile`: atomically, 0600,
//! never over an existing file without `--force`, never inside the `--repo` repository) or to
//! stdout. On a terminal stdout shows it escaped, as `show`
//! does; the exact bytes go to a pipe or a file.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use finalizer::{git_patch, repository_patch_digest, verify_against_repository};
use vocab::Untrusted;

use super::finalize_cmd::{expected_digest, read_candidate};
use super::outcome::display_path;
use super::outfile::{check_output, dir_id, write_private};
use super::paths::require_parent;
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
    let expected = expected_digest(args.digest.as_deref(), args.repo.as_deref())?;
    let mut forbidden = Vec::new();
    if let Some(repo) = &args.repo {
        forbidden.push(dir_id(repo).map_err(|_| CliError::missing_path("--repo", repo))?);
    }
    if let Some(out) = &args.out {
        require_parent("--out", out)?;
        check_output("--out", out, &forbidden, args.force)?;
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
            write_private("--out", out, patch.as_bytes(), &forbidden, args.force)?;
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
