//! The tree stream the host sends after the request: a POSIX tar of directories and regular files
//! whose totals equal the request's declaration exactly.

/// Which rule of the tree stream an entry broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TreeRule {
    #[error("not a ustar header")]
    Header,
    #[error("symbolic link")]
    Symlink,
    #[error("hard link")]
    HardLink,
    #[error("device, FIFO or other special entry")]
    Special,
    #[error("PAX extended header with a key other than path")]
    PaxKey,
    #[error("GNU extension")]
    Gnu,
    #[error("unsafe path")]
    Path,
    #[error("duplicate entry")]
    Duplicate,
    #[error("parent directory not declared before the entry")]
    Parent,
    #[error("mode is neither 0644 nor 0755")]
    Mode,
    #[error("more entries than declared")]
    TooManyEntries,
    #[error("more file bytes than declared")]
    TooManyBytes,
    #[error("fewer entries or bytes than declared")]
    Short,
    #[error("stream does not end with two zero blocks then EOF")]
    End,
    #[error("stream ended inside an entry")]
    Truncated,
}

use std::collections::BTreeSet;
use std::io::Read;

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, OpenOptions, OpenOptionsExt};

use crate::{GateRunnerError, RelPath, TreeTotals};

/// Largest PAX extended header accepted (it may carry only `path`).
const MAX_PAX_BYTES: u64 = 8192;
const BLOCK: usize = 512;

/// What an extraction wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extracted {
    /// Directories and files created.
    pub entries: u64,
    /// Summed file bytes written.
    pub bytes: u64,
}

/// Extracts the tree stream from `reader` into `root`, checking every header before anything is
/// written: ustar only (PAX extended headers carrying nothing but `path`), directories and
/// regular files only (files 0644 or 0755, directories 0755), safe relative paths, each parent
/// declared before its contents, no duplicates, the running totals never above `declared`, the
/// final totals equal to it, and the stream ending with two zero blocks then EOF. Files are
/// created new (never overwritten) and no symlink is ever followed.
///
/// # Errors
/// `GATE_RUNNER_TREE` with the entry index and the rule; `GATE_RUNNER_IO` when writing fails.
pub fn extract(
    reader: impl Read,
    root: &Dir,
    declared: TreeTotals,
) -> Result<Extracted, GateRunnerError> {
    let mut archive = tar::Archive::new(reader);
    let mut done = Extracted {
        entries: 0,
        bytes: 0,
    };
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    let mut index: u64 = 0;
    let refuse = |entry: u64, rule: TreeRule| GateRunnerError::Tree { entry, rule };
    {
        // Raw mode: tar-rs applies no PAX or GNU extension itself; every header reaches us.
        let entries = archive
            .entries()
            .map_err(|_| refuse(0, TreeRule::Header))?
            .raw(true);
        let mut pax_path: Option<String> = None;
        for entry in entries {
            let mut entry = entry.map_err(|e| refuse(index, tar_rule(&e)))?;
            let header = entry.header();
            if header.as_ustar().is_none() {
                return Err(refuse(
                    index,
                    if header.as_gnu().is_some() {
                        TreeRule::Gnu
                    } else {
                        TreeRule::Header
                    },
                ));
            }
            let kind = header.entry_type();
            let size = header
                .entry_size()
                .map_err(|_| refuse(index, TreeRule::Header))?;
            if kind.is_pax_local_extensions() {
                if pax_path.is_some() || size > MAX_PAX_BYTES {
                    return Err(refuse(index, TreeRule::PaxKey));
                }
                let mut buf = Vec::new();
                (&mut entry)
                    .take(MAX_PAX_BYTES)
                    .read_to_end(&mut buf)
                    .map_err(|_| refuse(index, TreeRule::Truncated))?;
                if buf.len() as u64 != size {
                    return Err(refuse(index, TreeRule::Truncated));
                }
                pax_path = Some(parse_pax_path(&buf).ok_or(refuse(index, TreeRule::PaxKey))?);
                continue;
            }
            let is_dir = kind.is_dir();
            if !(is_dir || kind == tar::EntryType::Regular) {
                return Err(refuse(index, kind_rule(kind)));
            }
            let mode = header.mode().map_err(|_| refuse(index, TreeRule::Header))?;
            let mode_ok = if is_dir {
                mode == 0o755
            } else {
                mode == 0o644 || mode == 0o755
            };
            if !mode_ok {
                return Err(refuse(index, TreeRule::Mode));
            }
            if header.link_name_bytes().is_some_and(|l| !l.is_empty()) {
                return Err(refuse(index, TreeRule::Header));
            }
            let name = match pax_path.take() {
                Some(p) => p,
                None => String::from_utf8(header.path_bytes().into_owned())
                    .map_err(|_| refuse(index, TreeRule::Path))?,
            };
            // A directory's name may carry the one trailing `/` tar writes for it.
            let name = if is_dir {
                name.strip_suffix('/').map_or(name.clone(), str::to_owned)
            } else {
                name
            };
            RelPath::check_inner(&name).map_err(|_| refuse(index, TreeRule::Path))?;
            if !seen.insert(name.clone()) {
                return Err(refuse(index, TreeRule::Duplicate));
            }
            if let Some((parent, _)) = name.rsplit_once('/')
                && !dirs.contains(parent)
            {
                return Err(refuse(index, TreeRule::Parent));
            }
            done.entries += 1;
            if done.entries > declared.entries() {
                return Err(refuse(index, TreeRule::TooManyEntries));
            }
            if is_dir {
                if size != 0 {
                    return Err(refuse(index, TreeRule::Header));
                }
                let mut builder = DirBuilder::new();
                builder.mode(0o755);
                root.create_dir_with(&name, &builder)?;
                dirs.insert(name);
            } else {
                let total = done
                    .bytes
                    .checked_add(size)
                    .filter(|t| *t <= declared.bytes());
                let Some(total) = total else {
                    return Err(refuse(index, TreeRule::TooManyBytes));
                };
                let mut opts = OpenOptions::new();
                opts.write(true)
                    .create_new(true)
                    .mode(mode)
                    .follow(FollowSymlinks::No);
                let mut file = root.open_with(&name, &opts)?;
                let copied =
                    std::io::copy(&mut (&mut entry).take(size), &mut file).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::UnexpectedEof {
                            refuse(index, TreeRule::Truncated)
                        } else {
                            e.into()
                        }
                    })?;
                if copied != size {
                    return Err(refuse(index, TreeRule::Truncated));
                }
                done.bytes = total;
            }
            index += 1;
        }
        if pax_path.is_some() {
            return Err(refuse(index, TreeRule::End));
        }
    }
    if done.entries != declared.entries() || done.bytes != declared.bytes() {
        return Err(refuse(index, TreeRule::Short));
    }
    // tar-rs stopped after the first zero block; the second must follow, then EOF.
    let mut rest = archive.into_inner();
    let mut tail = [0u8; BLOCK + 1];
    let mut got = 0;
    while got < tail.len() {
        match rest.read(tail.get_mut(got..).unwrap_or_default()) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    if got != BLOCK || tail.iter().any(|b| *b != 0) {
        return Err(refuse(index, TreeRule::End));
    }
    Ok(done)
}

/// The stream's rule for an error tar-rs reported (checksum, octal fields, early EOF).
fn tar_rule(e: &std::io::Error) -> TreeRule {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        TreeRule::Truncated
    } else {
        TreeRule::Header
    }
}

fn kind_rule(kind: tar::EntryType) -> TreeRule {
    match kind {
        tar::EntryType::Symlink => TreeRule::Symlink,
        tar::EntryType::Link => TreeRule::HardLink,
        tar::EntryType::XGlobalHeader => TreeRule::PaxKey,
        tar::EntryType::GNULongName | tar::EntryType::GNULongLink | tar::EntryType::GNUSparse => {
            TreeRule::Gnu
        }
        _ => TreeRule::Special,
    }
}

/// Parses a PAX extended header that holds exactly one record, `path`. Hand-written because
/// tar-rs' own parser accepts every key; here any other key is a refusal.
fn parse_pax_path(data: &[u8]) -> Option<String> {
    let space = data.iter().position(|b| *b == b' ')?;
    let len = std::str::from_utf8(data.get(..space)?).ok()?;
    if len.is_empty() || len.starts_with('0') || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Exactly one record: its length is the whole header.
    if len.parse::<usize>().ok()? != data.len() {
        return None;
    }
    let body = data.get(space + 1..)?.strip_suffix(b"\n")?;
    let value = body.strip_prefix(b"path=")?;
    let value = String::from_utf8(value.to_vec()).ok()?;
    if value.contains('\n') {
        return None;
    }
    Some(value)
}

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
