//! The strict reader (reference §5.3) and the raw central-directory preflight (§5.4).
//!
//! Order of checks (HOSTILE-ZIP.md §2.1): input size; the raw preflight over the end record and
//! the central directory, which allocates nothing per declared entry; the per-entry canonical
//! field checks with the reference messages, the portable-path profile and strict byte order;
//! collisions; local headers equal to the central headers, walked contiguously from offset 0 to
//! the central directory; CRC-32 of every data slice; and finally the closure check (the canonical
//! writer re-emits the entries and must reproduce the input exactly).
//!
//! Hand-written over a byte slice rather than through a ZIP library: the `zip` crate accepts
//! several hostile forms silently and allocates per declared entry before any check can run
//! (HOSTILE-ZIP.md §3); the canonical format is STORED-only, so a bounded slice walk is complete.

use std::io::Read;
use std::sync::mpsc;
use std::thread;

use sha2::{Digest as _, Sha256 as Sha256Hasher};

use snapshot::check_portable;
use snapshot::{RepoPath, detect_collisions};
use vocab::Sha256;

use crate::envelope::{
    ARCHIVE_SCHEMA_VERSION, CDH_LEN, CDH_SIGNATURE, CompareSink, DOS_DATE, DOS_TIME,
    EMPTY_ARCHIVE_MARKER, EOCD_LEN, EOCD_SIGNATURE, EXTERNAL_ATTR, LFH_LEN, LFH_SIGNATURE,
    MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES, Planned, VERSION_MADE_BY, VERSION_NEEDED,
    canonical_flags, collision_message, emit,
};
use crate::error::{ArchiveError, EntryName};

/// File and byte budgets for reading an archive: at most [`MAX_ARCHIVE_FILES`] and
/// [`MAX_ARCHIVE_BYTES`] (the defaults); lower limits are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveLimits {
    max_files: usize,
    max_bytes: usize,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        Self {
            max_files: MAX_ARCHIVE_FILES,
            max_bytes: MAX_ARCHIVE_BYTES,
        }
    }
}

impl ArchiveLimits {
    /// Budgets of `max_files` entries and `max_bytes` bytes (reference §6.1 ranges).
    ///
    /// # Errors
    /// `REPOSITORY_PATCH_ARCHIVE_BUDGET: invalid file limit` / `invalid byte limit` when a limit
    /// is outside `1..=50` / `1..=16 MiB`.
    pub fn new(max_files: usize, max_bytes: usize) -> Result<Self, ArchiveError> {
        validate_archive_budget(max_files, max_bytes)?;
        Ok(Self {
            max_files,
            max_bytes,
        })
    }

    /// Most entries.
    #[must_use]
    pub fn max_files(&self) -> usize {
        self.max_files
    }

    /// Most bytes (of the archive, and of the sum of entry sizes).
    #[must_use]
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }
}

/// Reference `_validate_archive_budget`.
///
/// # Errors
/// `REPOSITORY_PATCH_ARCHIVE_BUDGET: invalid file limit` / `invalid byte limit`.
pub fn validate_archive_budget(max_files: usize, max_bytes: usize) -> Result<(), ArchiveError> {
    if !(1..=MAX_ARCHIVE_FILES).contains(&max_files) {
        return Err(ArchiveError::Budget {
            detail: "invalid file limit",
        });
    }
    if !(1..=MAX_ARCHIVE_BYTES).contains(&max_bytes) {
        return Err(ArchiveError::Budget {
            detail: "invalid byte limit",
        });
    }
    Ok(())
}

/// One manifest row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    /// The entry's path (portable, canonical).
    pub path: RepoPath,
    /// The entry's size in bytes.
    pub size_bytes: u64,
    /// `sha256:` of the entry's bytes.
    pub content_sha256: Sha256,
}

/// The manifest derived from a canonical archive (no manifest file is stored inside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveManifest {
    /// Entries in archive (= UTF-8 byte) order.
    pub entries: Vec<ManifestEntry>,
    /// `sha256:` of the whole archive.
    pub archive_sha256: Sha256,
}

impl ArchiveManifest {
    /// The envelope schema id (`mozaiks.deterministic_archive.v1`).
    #[must_use]
    pub fn schema_version(&self) -> &'static str {
        ARCHIVE_SCHEMA_VERSION
    }
}

/// An accepted entry, borrowing its bytes from the archive.
#[derive(Debug)]
pub(crate) struct ParsedEntry<'a> {
    pub(crate) path: RepoPath,
    pub(crate) data: &'a [u8],
    /// `None` when the read was asked for no entry digests.
    pub(crate) sha256: Option<Sha256>,
}

/// An accepted archive.
#[derive(Debug)]
pub(crate) struct ParsedArchive<'a> {
    pub(crate) entries: Vec<ParsedEntry<'a>>,
    /// `None` when the caller did not ask for the whole-archive digest.
    pub(crate) archive_sha256: Option<Sha256>,
    pub(crate) bytes: &'a [u8],
}

impl ParsedArchive<'_> {
    pub(crate) fn manifest(&self) -> ArchiveManifest {
        ArchiveManifest {
            entries: self
                .entries
                .iter()
                .map(|e| ManifestEntry {
                    path: e.path.clone(),
                    size_bytes: e.data.len() as u64,
                    content_sha256: e.sha256.unwrap_or_else(|| Sha256::of(e.data)),
                })
                .collect(),
            archive_sha256: self
                .archive_sha256
                .unwrap_or_else(|| Sha256::of(self.bytes)),
        }
    }
}

fn le16(data: &[u8], at: usize) -> Option<u16> {
    let b = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes(b.try_into().ok()?))
}

fn le32(data: &[u8], at: usize) -> Option<u32> {
    let b = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

fn usize_of(n: u32) -> usize {
    // u32 always fits in usize on the 64-bit targets this crate builds for.
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// The end record's directory location.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Directory {
    pub(crate) total: usize,
    pub(crate) cd_offset: usize,
    pub(crate) eocd_offset: usize,
}

const FORMAT_DIRECTORY: ArchiveError = ArchiveError::Format {
    detail: "invalid ZIP directory",
};

fn end_record(data: &[u8]) -> Result<Directory, ArchiveError> {
    let eocd_offset = data
        .len()
        .checked_sub(EOCD_LEN)
        .ok_or(ArchiveError::Format {
            detail: "missing ZIP end record",
        })?;
    let end = data.get(eocd_offset..).ok_or(FORMAT_DIRECTORY)?;
    let field16 = |at| le16(end, at).ok_or(FORMAT_DIRECTORY);
    let field32 = |at| le32(end, at).ok_or(FORMAT_DIRECTORY);
    let signature_ok = end.get(..4) == Some(&EOCD_SIGNATURE[..]);
    let disk = field16(4)?;
    let cd_disk = field16(6)?;
    let disk_entries = field16(8)?;
    let total = field16(10)?;
    let cd_size = field32(12)?;
    let cd_offset = field32(16)?;
    let comment_len = field16(20)?;
    let ends_at_record = u64::from(cd_offset) + u64::from(cd_size) == eocd_offset as u64;
    if !signature_ok
        || disk != 0
        || cd_disk != 0
        || disk_entries != total
        || comment_len != 0
        || !ends_at_record
    {
        return Err(FORMAT_DIRECTORY);
    }
    Ok(Directory {
        total: usize::from(total),
        cd_offset: usize_of(cd_offset),
        eocd_offset,
    })
}

/// Reference `_preflight_archive_directory`: the raw end-record and central-directory walk that
/// runs before anything is allocated per declared entry. `expected_files` (when given) is the
/// exact entry count; the count limit is `max_files`, else `expected_files`.
///
/// # Errors
/// `REPOSITORY_PATCH_ARCHIVE_FORMAT` (missing or invalid end record, invalid or truncated
/// directory entry, count mismatch) or `REPOSITORY_PATCH_ARCHIVE_BUDGET` (missing limit, count
/// over the limit or different from the expectation, declared sizes over `max_bytes`).
///
/// # Security
/// Constant memory and O(size of the central directory) time whatever the declared count.
pub fn preflight_archive_directory(
    data: &[u8],
    expected_files: Option<usize>,
    max_bytes: usize,
    max_files: Option<usize>,
) -> Result<(), ArchiveError> {
    preflight(data, expected_files, max_bytes, max_files).map(|_| ())
}

pub(crate) fn preflight(
    data: &[u8],
    expected_files: Option<usize>,
    max_bytes: usize,
    max_files: Option<usize>,
) -> Result<Directory, ArchiveError> {
    let dir = end_record(data)?;
    let limit = max_files.or(expected_files).ok_or(ArchiveError::Budget {
        detail: "missing file limit",
    })?;
    if dir.total > limit || expected_files.is_some_and(|e| e != dir.total) {
        return Err(ArchiveError::Budget {
            detail: "entry count exceeds selection",
        });
    }
    let entry_format = ArchiveError::Format {
        detail: "invalid ZIP directory entry",
    };
    let mut offset = dir.cd_offset;
    let mut seen = 0_usize;
    let mut declared = 0_u64;
    while offset < dir.eocd_offset {
        if dir.eocd_offset - offset < CDH_LEN
            || data.get(offset..offset + 4) != Some(&CDH_SIGNATURE[..])
        {
            return Err(entry_format);
        }
        let (Some(size), Some(n), Some(m), Some(k)) = (
            le32(data, offset + 24),
            le16(data, offset + 28),
            le16(data, offset + 30),
            le16(data, offset + 32),
        ) else {
            return Err(entry_format);
        };
        declared += u64::from(size);
        seen += 1;
        if seen > limit || declared > max_bytes as u64 {
            return Err(ArchiveError::Budget {
                detail: "entry count or size exceeds limit",
            });
        }
        offset += CDH_LEN + usize::from(n) + usize::from(m) + usize::from(k);
        if offset > dir.eocd_offset {
            return Err(ArchiveError::Format {
                detail: "truncated ZIP directory entry",
            });
        }
    }
    if seen != dir.total {
        return Err(ArchiveError::Format {
            detail: "ZIP directory count mismatch",
        });
    }
    Ok(dir)
}

/// One central-directory header, fields as declared.
#[derive(Debug, Clone, Copy)]
struct CentralHeader<'a> {
    version_made_by: u16,
    version_needed: u16,
    flags: u16,
    method: u16,
    time: u16,
    date: u16,
    crc: u32,
    csize: u32,
    usize: u32,
    name: &'a [u8],
    extra_len: u16,
    comment_len: u16,
    disk_start: u16,
    internal: u16,
    external: u32,
    lfh_offset: u32,
}

fn central_header(data: &[u8], offset: usize) -> Option<(CentralHeader<'_>, usize)> {
    let h = data.get(offset..offset.checked_add(CDH_LEN)?)?;
    let name_len = usize::from(le16(h, 28)?);
    let extra_len = le16(h, 30)?;
    let comment_len = le16(h, 32)?;
    let name_start = offset + CDH_LEN;
    let name = data.get(name_start..name_start + name_len)?;
    let next = name_start + name_len + usize::from(extra_len) + usize::from(comment_len);
    Some((
        CentralHeader {
            version_made_by: le16(h, 4)?,
            version_needed: le16(h, 6)?,
            flags: le16(h, 8)?,
            method: le16(h, 10)?,
            time: le16(h, 12)?,
            date: le16(h, 14)?,
            crc: le32(h, 16)?,
            csize: le32(h, 20)?,
            usize: le32(h, 24)?,
            name,
            extra_len,
            comment_len,
            disk_start: le16(h, 34)?,
            internal: le16(h, 36)?,
            external: le32(h, 38)?,
            lfh_offset: le32(h, 42)?,
        },
        next,
    ))
}

const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;

/// The reference per-entry metadata checks, in the reference order, then the fields the
/// reference leaves to its closure check (version fields, sizes, disk number).
fn check_fields(h: &CentralHeader<'_>, name: &str, shown: &EntryName) -> Result<(), ArchiveError> {
    let fail = |what: &str| Err(ArchiveError::entry(what, shown));
    if name.ends_with('/') {
        return fail("directory entry not permitted");
    }
    if h.method != 0 {
        return fail("non-canonical compression method on entry");
    }
    if h.version_made_by >> 8 != 3 {
        return fail("non-canonical create_system on entry");
    }
    if h.external != EXTERNAL_ATTR {
        let mode = h.external >> 16;
        if mode & S_IFMT == S_IFLNK {
            return fail("link entry not permitted");
        }
        if mode & S_IFMT != S_IFREG {
            return fail("missing or non-regular-file type bits on entry");
        }
        if mode & 0o111 != 0 {
            return fail("executable permission bits on entry");
        }
        return fail("non-canonical permissions or attributes on entry");
    }
    if h.extra_len != 0 {
        return fail("extra field not permitted on entry");
    }
    if h.comment_len != 0 {
        return fail("comment not permitted on entry");
    }
    if h.internal != 0 {
        return fail("non-canonical internal attributes on entry");
    }
    if h.flags != canonical_flags(name) {
        return fail("non-canonical name-encoding flags on entry");
    }
    if h.time != DOS_TIME || h.date != DOS_DATE {
        return fail("non-canonical timestamp on entry");
    }
    if h.version_made_by != VERSION_MADE_BY || h.version_needed != VERSION_NEEDED {
        return fail("non-canonical version fields on entry");
    }
    if h.csize != h.usize {
        return fail("compressed and uncompressed sizes differ on entry");
    }
    if h.disk_start != 0 {
        return fail("non-canonical disk number on entry");
    }
    Ok(())
}

/// Compares the local header at `offset` with the central header; returns the data slice.
fn local_data<'a>(
    data: &'a [u8],
    offset: usize,
    h: &CentralHeader<'_>,
    limit: usize,
    shown: &EntryName,
) -> Result<&'a [u8], ArchiveError> {
    let mismatch = || {
        ArchiveError::entry(
            "local header does not match central directory on entry",
            shown,
        )
    };
    let lh = data.get(offset..offset + LFH_LEN).ok_or_else(mismatch)?;
    let same = lh.get(..4) == Some(&LFH_SIGNATURE[..])
        && le16(lh, 4) == Some(h.version_needed)
        && le16(lh, 6) == Some(h.flags)
        && le16(lh, 8) == Some(h.method)
        && le16(lh, 10) == Some(h.time)
        && le16(lh, 12) == Some(h.date)
        && le32(lh, 14) == Some(h.crc)
        && le32(lh, 18) == Some(h.csize)
        && le32(lh, 22) == Some(h.usize)
        && le16(lh, 26).map(usize::from) == Some(h.name.len())
        && le16(lh, 28) == Some(0);
    if !same {
        return Err(mismatch());
    }
    let name_start = offset + LFH_LEN;
    let data_start = name_start + h.name.len();
    if data.get(name_start..data_start) != Some(h.name) {
        return Err(mismatch());
    }
    let data_end = data_start + usize_of(h.csize);
    if data_end > limit {
        return Err(ArchiveError::entry(
            "entry data overlaps the central directory at",
            shown,
        ));
    }
    data.get(data_start..data_end).ok_or_else(mismatch)
}

/// Above this size the archive digest is computed on a second thread, alongside the per-entry
/// CRC-32 and SHA-256 work (two independent passes over the same bytes).
const PARALLEL_DIGEST_BYTES: usize = 1 << 20;

/// The full strict read. `expected_files` / `max_files` feed the preflight exactly as in the
/// reference staging step; `max_bytes` bounds the input and the declared sizes.
pub(crate) fn parse(
    data: &[u8],
    expected_files: Option<usize>,
    max_files: Option<usize>,
    max_bytes: usize,
    digests: Digests,
) -> Result<ParsedArchive<'_>, ArchiveError> {
    if data.len() > max_bytes {
        return Err(ArchiveError::Budget {
            detail: "input exceeds limit",
        });
    }
    let dir = preflight(data, expected_files, max_bytes, max_files)?;
    if dir.total == 0 {
        return Err(ArchiveError::envelope("empty archive envelope"));
    }
    // The preflight bounded `dir.total` by the file limit, so this allocation is bounded too.
    let mut headers: Vec<(CentralHeader<'_>, &str)> = Vec::with_capacity(dir.total);
    let mut offset = dir.cd_offset;
    let mut previous: Option<&str> = None;
    for _ in 0..dir.total {
        let (h, next) = central_header(data, offset).ok_or(ArchiveError::Format {
            detail: "invalid ZIP directory entry",
        })?;
        offset = next;
        let shown = EntryName::from_bytes(h.name);
        let name = match std::str::from_utf8(h.name) {
            Ok(name) => name,
            Err(_) if h.flags & crate::envelope::FLAG_UTF8 != 0 => {
                return Err(ArchiveError::entry(
                    "not a readable archive: entry name is not valid UTF-8",
                    &shown,
                ));
            }
            Err(_) => {
                // Without bit 11 a reader decodes CP437; the name is non-ASCII, so the flags
                // are non-canonical for it (reported in the reference order below).
                check_fields(&h, "\u{fffd}", &shown)?;
                return Err(ArchiveError::entry(
                    "non-canonical name-encoding flags on entry",
                    &shown,
                ));
            }
        };
        check_fields(&h, name, &shown)?;
        // The portable profile first (reference reasons), then the canonical-spelling rules.
        if let Err(reason) =
            check_portable(name, false).and_then(|()| RepoPath::parse(name).map(|_| ()))
        {
            return Err(ArchiveError::Envelope {
                message: format!("non-portable entry name: {reason}: {shown}"),
            });
        }
        if previous.is_some_and(|p| p.as_bytes() >= name.as_bytes()) {
            return Err(ArchiveError::entry(
                "entries out of canonical order at",
                &shown,
            ));
        }
        previous = Some(name);
        headers.push((h, name));
    }
    let paths: Vec<RepoPath> = headers
        .iter()
        .map(|(_, name)| RepoPath::parse(name))
        .collect::<Result<_, _>>()
        .map_err(|reason| ArchiveError::Envelope {
            message: format!("non-portable entry name: {reason}"),
        })?;
    detect_collisions(paths.iter()).map_err(|c| ArchiveError::Envelope {
        message: collision_message(&c),
    })?;

    let mut planned: Vec<Planned<'_>> = Vec::with_capacity(headers.len());
    let mut expected_offset = 0_usize;
    for (h, name) in &headers {
        let shown = EntryName::from_str(name);
        if usize_of(h.lfh_offset) != expected_offset {
            return Err(ArchiveError::entry(
                "entry data is not contiguous at",
                &shown,
            ));
        }
        let slice = local_data(data, expected_offset, h, dir.cd_offset, &shown)?;
        expected_offset = expected_offset + LFH_LEN + h.name.len() + slice.len();
        planned.push(Planned {
            name,
            data: slice,
            crc: h.crc,
        });
    }
    if expected_offset != dir.cd_offset {
        return Err(ArchiveError::envelope(
            "unlisted bytes before the central directory",
        ));
    }

    let (digests, archive_sha256) = digest_all(&mut planned, data, digests)?;

    let mut sink = CompareSink { rest: data };
    if emit(&planned, &mut sink).is_err() || !sink.rest.is_empty() {
        return Err(ArchiveError::envelope(
            "archive bytes are not the canonical serialization of their entries",
        ));
    }
    let entries = paths
        .into_iter()
        .zip(planned.iter().zip(digests))
        .map(|(path, (p, sha256))| ParsedEntry {
            path,
            data: p.data,
            sha256,
        })
        .collect();
    Ok(ParsedArchive {
        entries,
        archive_sha256,
        bytes: data,
    })
}

/// Which digests a strict read computes. CRC-32 is always verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Digests {
    /// Every entry's SHA-256 and the whole archive's (a manifest).
    All,
    /// Every entry's SHA-256; the caller hashes the whole archive itself.
    Entries,
    /// None: the caller uses the bytes only (staging, entry copies).
    CrcOnly,
}

/// Entry CRC-32 checks and the requested digests. On large inputs the hashing is split over two
/// threads: the archive digest beside the entries, or, without it, the entries in two halves of
/// about equal size.
fn digest_all(
    planned: &mut [Planned<'_>],
    data: &[u8],
    mode: Digests,
) -> Result<(Vec<Option<Sha256>>, Option<Sha256>), ArchiveError> {
    let entry_sha = mode != Digests::CrcOnly;
    if data.len() < PARALLEL_DIGEST_BYTES || mode == Digests::CrcOnly {
        let digests = entry_digests(planned, entry_sha)?;
        return Ok((digests, (mode == Digests::All).then(|| Sha256::of(data))));
    }
    if mode == Digests::All {
        return thread::scope(|s| {
            let whole = s.spawn(|| Sha256::of(data));
            let digests = entry_digests(planned, true);
            // The hashing thread cannot panic short of a bug in `sha2`; hash here if it did.
            let archive = whole.join().unwrap_or_else(|_| Sha256::of(data));
            Ok((digests?, Some(archive)))
        });
    }
    let total: usize = planned.iter().map(|p| p.data.len()).sum();
    let mut acc = 0_usize;
    let split = planned
        .iter()
        .position(|p| {
            acc += p.data.len();
            acc * 2 >= total
        })
        .map_or(planned.len(), |i| i + 1);
    let (first, second) = planned.split_at_mut(split);
    thread::scope(|s| {
        let later = s.spawn(|| entry_digests(second, true));
        let mut digests = entry_digests(first, true)?;
        let rest = later
            .join()
            .unwrap_or_else(|_| Err(ArchiveError::envelope("digest worker failed")))?;
        digests.extend(rest);
        Ok((digests, None))
    })
}

/// Verifies each entry's CRC-32 (replacing the declared value by the computed one, which the
/// closure check then re-emits) and, with `sha`, computes its SHA-256.
fn entry_digests(
    planned: &mut [Planned<'_>],
    sha: bool,
) -> Result<Vec<Option<Sha256>>, ArchiveError> {
    let mut out = Vec::with_capacity(planned.len());
    for p in planned.iter_mut() {
        let crc = crc32fast::hash(p.data);
        if crc != p.crc {
            return Err(ArchiveError::Envelope {
                message: format!(
                    "unreadable entry: {}: Bad CRC-32",
                    EntryName::from_str(p.name)
                ),
            });
        }
        p.crc = crc;
        out.push(sha.then(|| Sha256::of(p.data)));
    }
    Ok(out)
}

/// Reference `read_archive_manifest`: every check of the module docs, then the manifest.
///
/// # Errors
/// `REPOSITORY_PATCH_ARCHIVE_BUDGET` / `_FORMAT` from the size check and the preflight;
/// `REPOSITORY_PATCH_ARCHIVE_ENVELOPE` with the reference message for every canonical-form
/// failure.
///
/// # Security
/// Nothing is allocated per declared entry before the preflight bounds the count; entry bytes are
/// never copied.
pub fn read_archive_manifest(
    data: &[u8],
    limits: &ArchiveLimits,
) -> Result<ArchiveManifest, ArchiveError> {
    parse(
        data,
        None,
        Some(limits.max_files),
        limits.max_bytes,
        Digests::All,
    )
    .map(|p| p.manifest())
}

/// Size of the pieces handed to the hashing thread by [`read_archive_manifest_from`].
const READ_CHUNK_BYTES: usize = 1 << 20;

/// From this size on, [`read_archive_manifest_from`] reads into an anonymous mapping advised for
/// transparent huge pages: filling 16 MiB of fresh 4 KiB pages costs 4,096 page faults, about as
/// much time as hashing the data once.
const HUGE_PAGE_BUFFER_BYTES: usize = 4 << 20;

/// Archive bytes read by [`read_archive_manifest_from`]: a heap buffer, or for large inputs an
/// anonymous (private, zero-filled) memory mapping. Dereferences to the bytes.
#[derive(Debug)]
pub struct ArchiveBytes(Buffer);

#[derive(Debug)]
enum Buffer {
    Heap(Vec<u8>),
    Mapped(memmap2::MmapMut),
}

impl ArchiveBytes {
    fn zeroed(len: usize) -> Self {
        if len >= HUGE_PAGE_BUFFER_BYTES
            && let Ok(map) = memmap2::MmapOptions::new().len(len).map_anon()
        {
            // Advice only: without transparent huge pages the mapping works the same.
            let _ = map.advise(memmap2::Advice::HugePage);
            return Self(Buffer::Mapped(map));
        }
        Self(Buffer::Heap(vec![0_u8; len]))
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.0 {
            Buffer::Heap(v) => v,
            Buffer::Mapped(m) => m,
        }
    }
}

impl std::ops::Deref for ArchiveBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Buffer::Heap(v) => v,
            Buffer::Mapped(m) => m,
        }
    }
}

/// Reads an archive of `len` bytes from `source` and strictly reads it, hashing the whole input
/// on a second thread while the rest is still being read (the whole-archive digest needs no
/// parse). Returns the bytes and the manifest.
///
/// # Errors
/// `REPOSITORY_PATCH_ARCHIVE_BUDGET: input exceeds limit` when `len` is over the byte budget;
/// `REPOSITORY_PATCH_ARCHIVE_WORKSPACE` when reading fails or the source is not exactly `len`
/// bytes long; then everything [`read_archive_manifest`] returns.
///
/// # Security
/// The buffer is bounded by the budget before it is allocated.
pub fn read_archive_manifest_from<R: Read>(
    mut source: R,
    len: u64,
    limits: &ArchiveLimits,
) -> Result<(ArchiveBytes, ArchiveManifest), ArchiveError> {
    let len = usize::try_from(len)
        .ok()
        .filter(|&n| n <= limits.max_bytes)
        .ok_or(ArchiveError::Budget {
            detail: "input exceeds limit",
        })?;
    let io = |e: std::io::Error| ArchiveError::workspace_io("cannot read archive", &e);
    let mut data = ArchiveBytes::zeroed(len);
    let digest = thread::scope(|s| -> Result<Sha256, ArchiveError> {
        let (tx, rx) = mpsc::sync_channel::<&[u8]>(64);
        let hasher = s.spawn(move || {
            let mut h = Sha256Hasher::new();
            for chunk in rx {
                h.update(chunk);
            }
            Sha256::from_raw(h.finalize().into())
        });
        for chunk in data.as_mut_slice().chunks_mut(READ_CHUNK_BYTES) {
            source.read_exact(chunk).map_err(io)?;
            let filled: &[u8] = chunk;
            // The receiver only stops when this loop has ended; a failed send means it died.
            tx.send(filled)
                .map_err(|_| ArchiveError::envelope("digest worker failed"))?;
        }
        drop(tx);
        hasher
            .join()
            .map_err(|_| ArchiveError::envelope("digest worker failed"))
    })?;
    let mut probe = [0_u8; 1];
    if source.read(&mut probe).map_err(io)? != 0 {
        return Err(ArchiveError::Workspace {
            detail: "archive changed while reading".to_owned(),
        });
    }
    let manifest = {
        let mut parsed = parse(
            &data,
            None,
            Some(limits.max_files),
            limits.max_bytes,
            Digests::Entries,
        )?;
        parsed.archive_sha256 = Some(digest);
        parsed.manifest()
    };
    Ok((data, manifest))
}

/// An archive that passed the strict reader once, owning its bytes: the empty transport marker
/// (no entries) or a canonical envelope, with each entry's approved-form path and the byte range
/// of its data. Built only by [`VerifiedArchive::read`]; staging consumes it
/// ([`crate::stage_verified_archive`]) without parsing it again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedArchive {
    bytes: Vec<u8>,
    entries: Vec<(RepoPath, std::ops::Range<usize>)>,
}

impl VerifiedArchive {
    /// Strictly reads `bytes` (the empty marker is accepted as an archive with no entries).
    /// `expected_files`, when given, is the exact entry count (as in
    /// [`preflight_archive_directory`]); the count limit is `limits.max_files()`.
    ///
    /// # Errors
    /// Everything [`read_archive_manifest`] returns.
    ///
    /// # Security
    /// Nothing is allocated per declared entry before the preflight bounds the count; the entry
    /// data is never copied, only located.
    pub fn read(
        bytes: Vec<u8>,
        expected_files: Option<usize>,
        limits: &ArchiveLimits,
    ) -> Result<Self, ArchiveError> {
        if bytes.len() > limits.max_bytes {
            return Err(ArchiveError::Budget {
                detail: "input exceeds limit",
            });
        }
        if bytes == EMPTY_ARCHIVE_MARKER {
            return Ok(Self {
                bytes,
                entries: Vec::new(),
            });
        }
        let entries = {
            let parsed = parse(
                &bytes,
                expected_files,
                Some(limits.max_files),
                limits.max_bytes,
                Digests::CrcOnly,
            )?;
            let base = bytes.as_ptr().addr();
            parsed
                .entries
                .into_iter()
                .map(|e| {
                    // `e.data` is a subslice of `bytes`: its offset is the address difference.
                    let start = e.data.as_ptr().addr().saturating_sub(base);
                    (e.path, start..start.saturating_add(e.data.len()))
                })
                .collect()
        };
        Ok(Self { bytes, entries })
    }

    /// True for the empty transport marker.
    #[must_use]
    pub fn is_empty_marker(&self) -> bool {
        self.entries.is_empty()
    }

    /// The archive bytes exactly as received (or the marker).
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Number of entries (0 for the marker).
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries (the marker).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry's path and data, in archive (= UTF-8 byte) order.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&RepoPath, &[u8])> + '_ {
        self.entries
            .iter()
            .map(|(path, range)| (path, self.bytes.get(range.clone()).unwrap_or_default()))
    }

    /// Every entry's path, in archive order.
    pub fn paths(&self) -> impl ExactSizeIterator<Item = &RepoPath> + '_ {
        self.entries.iter().map(|(path, _)| path)
    }
}

/// The strict read, returning each entry's path and a copy of its bytes.
///
/// # Errors
/// As [`read_archive_manifest`].
pub fn read_archive_entries(
    data: &[u8],
    limits: &ArchiveLimits,
) -> Result<Vec<(RepoPath, Vec<u8>)>, ArchiveError> {
    let parsed = parse(
        data,
        None,
        Some(limits.max_files),
        limits.max_bytes,
        Digests::CrcOnly,
    )?;
    Ok(parsed
        .entries
        .into_iter()
        .map(|e| (e.path, e.data.to_vec()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::build_deterministic_archive;

    fn one() -> Vec<u8> {
        build_deterministic_archive(&[(RepoPath::parse("a.txt").unwrap(), b"x".to_vec())]).unwrap()
    }

    /// Offsets inside the 109-byte single-entry archive: local header at 0, central at 36.
    const CD: usize = 36;

    fn message(data: &[u8]) -> String {
        read_archive_manifest(data, &ArchiveLimits::default())
            .unwrap_err()
            .to_string()
    }

    fn with(patch: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
        let mut d = one();
        patch(&mut d);
        d
    }

    fn put16(d: &mut [u8], at: usize, v: u16) {
        d[at..at + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(d: &mut [u8], at: usize, v: u32) {
        d[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// The reference's per-field metadata mutants, each with its reference message.
    #[test]
    fn reference_metadata_mutants_report_the_reference_messages() {
        let env = "REPOSITORY_PATCH_ARCHIVE_ENVELOPE: ";
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "non-canonical compression method on entry: 'a.txt'",
                with(|d| {
                    put16(d, 8, 8);
                    put16(d, CD + 10, 8);
                }),
            ),
            (
                "non-canonical create_system on entry: 'a.txt'",
                with(|d| put16(d, CD + 4, 0x0014)),
            ),
            (
                "link entry not permitted: 'a.txt'",
                with(|d| put32(d, CD + 38, 0o120_777 << 16)),
            ),
            (
                "missing or non-regular-file type bits on entry: 'a.txt'",
                with(|d| put32(d, CD + 38, 0o010_644 << 16)),
            ),
            (
                "missing or non-regular-file type bits on entry: 'a.txt'",
                with(|d| put32(d, CD + 38, 0o644 << 16)),
            ),
            (
                "executable permission bits on entry: 'a.txt'",
                with(|d| put32(d, CD + 38, 0o100_755 << 16)),
            ),
            (
                "non-canonical permissions or attributes on entry: 'a.txt'",
                with(|d| put32(d, CD + 38, 0o100_600 << 16)),
            ),
            (
                "non-canonical internal attributes on entry: 'a.txt'",
                with(|d| put16(d, CD + 36, 1)),
            ),
            (
                "non-canonical timestamp on entry: 'a.txt'",
                with(|d| {
                    put16(d, 12, 0x5021);
                    put16(d, CD + 14, 0x5021);
                }),
            ),
            (
                "non-canonical name-encoding flags on entry: 'a.txt'",
                with(|d| {
                    put16(d, 6, 0x800);
                    put16(d, CD + 8, 0x800);
                }),
            ),
            (
                "local header does not match central directory on entry: 'a.txt'",
                with(|d| d[30] = b'b'),
            ),
            (
                "unreadable entry: 'a.txt': Bad CRC-32",
                with(|d| {
                    put32(d, 14, 1);
                    put32(d, CD + 16, 1);
                }),
            ),
        ];
        for (expected, data) in cases {
            assert_eq!(message(&data), format!("{env}{expected}"));
        }
        // Prepended bytes: the directory no longer ends at the end record.
        let mut prepended = b"MZ".to_vec();
        prepended.extend_from_slice(&one());
        assert_eq!(
            message(&prepended),
            "REPOSITORY_PATCH_ARCHIVE_FORMAT: invalid ZIP directory"
        );
        assert_eq!(
            message(b"not a zip at all, definitely not"),
            "REPOSITORY_PATCH_ARCHIVE_FORMAT: invalid ZIP directory"
        );
    }

    #[test]
    fn archive_comment_and_entry_extras_are_refused() {
        let mut commented = one();
        let n = commented.len();
        put16(&mut commented, n - 2, 3);
        commented.extend_from_slice(b"hey");
        assert_eq!(
            message(&commented),
            "REPOSITORY_PATCH_ARCHIVE_FORMAT: invalid ZIP directory"
        );
    }

    #[test]
    fn names_are_checked_against_the_portable_profile_with_reference_reasons() {
        let build = |name: &[u8]| {
            let mut d = Vec::new();
            let crc = crc32fast::hash(b"x");
            d.extend_from_slice(&LFH_SIGNATURE);
            for v in [20_u16, 0, 0, 0, 0x21] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            for v in [crc, 1, 1] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            d.extend_from_slice(&(name.len() as u16).to_le_bytes());
            d.extend_from_slice(&0_u16.to_le_bytes());
            d.extend_from_slice(name);
            d.push(b'x');
            let cd_offset = d.len();
            d.extend_from_slice(&CDH_SIGNATURE);
            for v in [0x0314_u16, 20, 0, 0, 0, 0x21] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            for v in [crc, 1, 1] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            for v in [name.len() as u16, 0, 0, 0, 0] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            d.extend_from_slice(&EXTERNAL_ATTR.to_le_bytes());
            d.extend_from_slice(&0_u32.to_le_bytes());
            d.extend_from_slice(name);
            let cd_size = d.len() - cd_offset;
            d.extend_from_slice(&EOCD_SIGNATURE);
            for v in [0_u16, 0, 1, 1] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            for v in [cd_size as u32, cd_offset as u32] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            d.extend_from_slice(&0_u16.to_le_bytes());
            d
        };
        read_archive_manifest(&build(b"a.txt"), &ArchiveLimits::default()).unwrap();
        for (name, reason) in [
            (&b"a.txt "[..], "trailing dot or space in segment: 'a.txt '"),
            (b" a.txt", "leading space in segment: ' a.txt'"),
            (b"../x", "relative traversal segment: '../x'"),
            (b"/abs", "absolute path: '/abs'"),
            (b"a?b", "character '?' is not portable: 'a?b'"),
        ] {
            assert_eq!(
                message(&build(name)),
                format!("REPOSITORY_PATCH_ARCHIVE_ENVELOPE: non-portable entry name: {reason}")
            );
        }
    }
}
