//! What the state directory holds: one [`Entry`] per file or folder, and `ENTRIES`, the table
//! of them all. Other crates name the state directory's files only through these constants;
//! docs/WORKER.md's state-directory table lists exactly these entries with these modes (checked by
//! this module's test).

use std::path::{Path, PathBuf};

/// A file or a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A folder.
    Dir,
}

/// One file or folder of the state directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the state directory.
    pub name: &'static str,
    /// File or folder.
    pub kind: EntryKind,
    /// The mode it is created with; `None` when its creator leaves it to the process umask.
    pub mode: Option<u32>,
    /// The crate (or script) that writes it.
    pub writer: &'static str,
    /// What it holds.
    pub what: &'static str,
}

impl Entry {
    /// Its path in the state directory `dir`.
    #[must_use]
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        dir.join(self.name)
    }
}

const fn file(
    name: &'static str,
    mode: Option<u32>,
    writer: &'static str,
    what: &'static str,
) -> Entry {
    Entry {
        name,
        kind: EntryKind::File,
        mode,
        writer,
        what,
    }
}

const fn dir(name: &'static str, writer: &'static str, what: &'static str) -> Entry {
    Entry {
        name,
        kind: EntryKind::Dir,
        mode: Some(0o700),
        writer,
        what,
    }
}

/// The proof image record: tag and immutable ID of the proof and hostile images.
pub const IMAGES: Entry = file(
    "images.json",
    Some(0o600),
    "images/build.sh (`image build`)",
    "the proof images' tags and IDs, read by `run` and `serve` (`turn::ImagesState`)",
);
/// Codex's live image record.
pub const LIVE_IMAGE_CODEX: Entry = file(
    "live-image.json",
    Some(0o600),
    "images/build.sh (`image build --live`)",
    "Codex's live image: tag, ID, agent version, tarball digest (`turn::LiveImageState`)",
);
/// Claude Code's live image record.
pub const LIVE_IMAGE_CLAUDE: Entry = file(
    "live-image-claude.json",
    Some(0o600),
    "images/build.sh (`image build --live --agent claude`)",
    "Claude Code's live image record",
);
/// Gemini CLI's live image record.
pub const LIVE_IMAGE_GEMINI: Entry = file(
    "live-image-gemini.json",
    Some(0o600),
    "images/build.sh (`image build --live --agent gemini`)",
    "Gemini CLI's live image record",
);
/// The approved gate images by name.
pub const GATE_IMAGES: Entry = file(
    "gate-images.json",
    Some(0o600),
    "images/build.sh (`image build --gate`), `patch-candidate` (`image approve --gate`)",
    "the approved gate images by name (`gate::GateImagesState`)",
);
/// The Docker seam's host id when `/etc/machine-id` is missing.
pub const HOST_ID: Entry = file(
    "host-id",
    Some(0o600),
    "container",
    "this host's id for container ownership labels, generated once when there is no machine id",
);
/// The candidate store of `run`, `serve` and `review`.
pub const CANDIDATES: Entry = dir(
    "candidates",
    "finalizer",
    "the default candidate store (`--store`): one file per candidate, by digest, and gate evidence",
);
/// The local token-usage ledger.
pub const USAGE_LEDGER: Entry = file(
    "usage.sqlite3",
    None,
    "turn",
    "the token-usage ledger of `run` (SQLite; `usage` lists it)",
);
/// The default SQLite job store.
pub const JOBS_DATABASE: Entry = file(
    "jobs.sqlite3",
    Some(0o600),
    "jobs",
    "the job store when `--database` is absent (SQLite, with its `-wal` and `-shm` files)",
);
/// The local review decisions and publications.
pub const REVIEWS: Entry = dir(
    "reviews",
    "review",
    "one folder per candidate: its decisions, one file each, and its publication record",
);
/// The gate baseline cache.
pub const GATE_BASELINES: Entry = dir(
    "gate-baselines",
    "gate",
    "the baseline run of each gate per commit, definition, image and runtime",
);
/// The service's bare repository mirrors.
pub const MIRRORS: Entry = dir(
    "mirrors",
    "service",
    "bare mirrors of job repositories, by the SHA-256 of their locator",
);
/// The service's staging folder.
pub const SERVE_STAGING: Entry = dir(
    "serve-staging",
    "service",
    "the staged trees of `serve`'s running turns, emptied at start",
);
/// The lock of `serve`: one per state directory.
pub const SERVE_LOCK: Entry = file(
    "serve.lock",
    Some(0o600),
    "service",
    "held (flock) by the one `serve` of this state directory",
);
/// The service's host id.
pub const SERVICE_HOST_ID: Entry = file(
    "service-host-id",
    Some(0o600),
    "service",
    "the service host id (`h` + 32 hex) when `--host-id` is absent",
);
/// The service's operator API token.
pub const API_TOKEN: Entry = file(
    "api-token",
    Some(0o600),
    "service",
    "the operator's API token (256 random bits, hex), generated at the first start",
);

/// Every file and folder the state directory holds: the table docs/WORKER.md lists (checked by
/// the tests below).
#[cfg(test)]
const ENTRIES: &[Entry] = &[
    IMAGES,
    LIVE_IMAGE_CODEX,
    LIVE_IMAGE_CLAUDE,
    LIVE_IMAGE_GEMINI,
    GATE_IMAGES,
    HOST_ID,
    CANDIDATES,
    USAGE_LEDGER,
    JOBS_DATABASE,
    REVIEWS,
    GATE_BASELINES,
    MIRRORS,
    SERVE_STAGING,
    SERVE_LOCK,
    SERVICE_HOST_ID,
    API_TOKEN,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_plain() {
        let mut names = std::collections::BTreeSet::new();
        for e in ENTRIES {
            assert!(names.insert(e.name), "{} twice", e.name);
            assert!(!e.name.is_empty() && !e.name.contains('/') && !e.name.starts_with('.'));
            if e.kind == EntryKind::Dir {
                assert_eq!(e.mode, Some(0o700), "{}", e.name);
            }
        }
    }

    /// The rows of docs/WORKER.md's state-directory table: (name, kind, mode).
    fn documented() -> Vec<(String, EntryKind, Option<u32>)> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/WORKER.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let start = doc.find("<!-- state-dir:begin").unwrap();
        let end = doc.find("<!-- state-dir:end -->").unwrap();
        let mut rows = Vec::new();
        for line in doc[start..end].lines() {
            let cells: Vec<&str> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            let [name, _, mode, _, _] = cells.as_slice() else {
                continue;
            };
            let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else {
                continue;
            };
            let (name, kind) = match name.strip_suffix('/') {
                Some(dir) => (dir, EntryKind::Dir),
                None => (name, EntryKind::File),
            };
            let mode = match *mode {
                "umask" => None,
                m => Some(u32::from_str_radix(m, 8).unwrap()),
            };
            rows.push((name.to_owned(), kind, mode));
        }
        rows
    }

    #[test]
    fn the_worker_doc_lists_exactly_these_entries() {
        let expected: Vec<_> = ENTRIES
            .iter()
            .map(|e| (e.name.to_owned(), e.kind, e.mode))
            .collect();
        assert_eq!(documented(), expected);
    }
}
