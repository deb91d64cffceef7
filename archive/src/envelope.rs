//! The canonical deterministic ZIP envelope (`mozaiks.deterministic_archive.v1`, reference §5.1,
//! §5.2): constants and the writer.
//!
//! The byte layout is emitted directly rather than through the `zip` crate: that crate writes
//! version fields `0x000A`/`0x030A` with no option to change them, so it cannot produce the pinned
//! golden vectors (reference §5.2).
//!
//! The writer is generic over a `Sink` so the reader's closure check can compare a
//! re-serialisation against the input piece by piece, without building a second copy.

use snapshot::{Collision, RepoPath, detect_collisions};

use vocab::Sha256;

use crate::error::ArchiveError;

/// Schema id of the envelope.
pub const ARCHIVE_SCHEMA_VERSION: &str = "mozaiks.deterministic_archive.v1";
/// The transport marker a deletion-only export returns instead of a ZIP (28 bytes).
pub const EMPTY_ARCHIVE_MARKER: &[u8] = b"mozaiks.repository.empty.v1\n";
/// Most entries an archive may hold (and the default file budget).
pub const MAX_ARCHIVE_FILES: usize = 50;
/// Most bytes an archive, and the sum of its entries' sizes, may hold (16 MiB; the default budget).
pub const MAX_ARCHIVE_BYTES: usize = 16_777_216;

pub(crate) const LFH_SIGNATURE: [u8; 4] = *b"PK\x03\x04";
pub(crate) const CDH_SIGNATURE: [u8; 4] = *b"PK\x01\x02";
pub(crate) const EOCD_SIGNATURE: [u8; 4] = *b"PK\x05\x06";
pub(crate) const LFH_LEN: usize = 30;
pub(crate) const CDH_LEN: usize = 46;
pub(crate) const EOCD_LEN: usize = 22;
/// Version made by: Unix (3), spec 2.0.
pub(crate) const VERSION_MADE_BY: u16 = 0x0314;
/// Version needed to extract: 2.0.
pub(crate) const VERSION_NEEDED: u16 = 0x0014;
/// General-purpose flag bit 11: the name is UTF-8.
pub(crate) const FLAG_UTF8: u16 = 0x0800;
/// DOS time of the epoch (00:00:00).
pub(crate) const DOS_TIME: u16 = 0x0000;
/// DOS date of the epoch (1980-01-01).
pub(crate) const DOS_DATE: u16 = 0x0021;
/// `(S_IFREG | 0o644) << 16`.
pub(crate) const EXTERNAL_ATTR: u32 = 0x81A4_0000;

/// The flags our writer sets for `name`.
pub(crate) fn canonical_flags(name: &str) -> u16 {
    if name.is_ascii() { 0 } else { FLAG_UTF8 }
}

/// Reference §5.6: the empty marker is valid output only for a deletion-only turn — no create
/// grants, and the selected paths equal the delete grants (as sets).
#[must_use]
pub fn empty_marker_permitted(
    selected_paths: &[RepoPath],
    create_paths: &[RepoPath],
    delete_paths: &[RepoPath],
) -> bool {
    let selected: std::collections::BTreeSet<&RepoPath> = selected_paths.iter().collect();
    let deletes: std::collections::BTreeSet<&RepoPath> = delete_paths.iter().collect();
    create_paths.is_empty() && !selected.is_empty() && selected == deletes
}

/// `sha256:` digest of archive bytes.
#[must_use]
pub fn archive_digest(data: &[u8]) -> Sha256 {
    Sha256::of(data)
}

/// Where the writer puts bytes. `put` returns `false` when the sink refuses them (a comparison
/// found a difference), which stops the emission.
pub(crate) trait Sink {
    fn put(&mut self, bytes: &[u8]) -> bool;
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        self.extend_from_slice(bytes);
        true
    }
}

/// Compares emitted bytes with an expected buffer, consuming it.
pub(crate) struct CompareSink<'a> {
    pub(crate) rest: &'a [u8],
}

impl Sink for CompareSink<'_> {
    fn put(&mut self, bytes: &[u8]) -> bool {
        match self.rest.split_at_checked(bytes.len()) {
            // Entry data re-emitted by the closure check is the very slice at this position:
            // the same address and length is equality without reading 16 MiB twice.
            Some((head, tail)) if std::ptr::eq(head, bytes) || head == bytes => {
                self.rest = tail;
                true
            }
            _ => false,
        }
    }
}

/// One entry ready for emission; `crc` is the CRC-32 of `data`.
#[derive(Clone, Copy)]
pub(crate) struct Planned<'a> {
    pub(crate) name: &'a str,
    pub(crate) data: &'a [u8],
    pub(crate) crc: u32,
}

/// Why an emission stopped.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum EmitError {
    /// The sink refused bytes.
    Mismatch,
    /// A size, offset or count does not fit the ZIP32 fields.
    TooLarge,
}

fn u32_of(n: usize) -> Result<u32, EmitError> {
    u32::try_from(n).map_err(|_| EmitError::TooLarge)
}

fn put<S: Sink>(sink: &mut S, bytes: &[u8]) -> Result<(), EmitError> {
    if sink.put(bytes) {
        Ok(())
    } else {
        Err(EmitError::Mismatch)
    }
}

/// Emits the canonical layout of `entries` (already validated and sorted) into `sink`.
pub(crate) fn emit<S: Sink>(entries: &[Planned<'_>], sink: &mut S) -> Result<(), EmitError> {
    let count = u16::try_from(entries.len()).map_err(|_| EmitError::TooLarge)?;
    if count == u16::MAX {
        return Err(EmitError::TooLarge);
    }
    let mut offsets = Vec::with_capacity(entries.len());
    let mut offset = 0_usize;
    for e in entries {
        offsets.push(u32_of(offset)?);
        let name_len = u16::try_from(e.name.len()).map_err(|_| EmitError::TooLarge)?;
        let size = u32_of(e.data.len())?;
        if size == u32::MAX {
            return Err(EmitError::TooLarge);
        }
        let mut h = [0_u8; LFH_LEN];
        h[0..4].copy_from_slice(&LFH_SIGNATURE);
        h[4..6].copy_from_slice(&VERSION_NEEDED.to_le_bytes());
        h[6..8].copy_from_slice(&canonical_flags(e.name).to_le_bytes());
        // method 0 (stored) at 8..10 stays zero.
        h[10..12].copy_from_slice(&DOS_TIME.to_le_bytes());
        h[12..14].copy_from_slice(&DOS_DATE.to_le_bytes());
        h[14..18].copy_from_slice(&e.crc.to_le_bytes());
        h[18..22].copy_from_slice(&size.to_le_bytes());
        h[22..26].copy_from_slice(&size.to_le_bytes());
        h[26..28].copy_from_slice(&name_len.to_le_bytes());
        // extra length 0 at 28..30.
        put(sink, &h)?;
        put(sink, e.name.as_bytes())?;
        put(sink, e.data)?;
        offset = offset
            .checked_add(LFH_LEN + e.name.len() + e.data.len())
            .ok_or(EmitError::TooLarge)?;
    }
    let cd_offset = u32_of(offset)?;
    let mut cd_size = 0_usize;
    for (e, lfh_offset) in entries.iter().zip(&offsets) {
        let mut h = [0_u8; CDH_LEN];
        h[0..4].copy_from_slice(&CDH_SIGNATURE);
        h[4..6].copy_from_slice(&VERSION_MADE_BY.to_le_bytes());
        h[6..8].copy_from_slice(&VERSION_NEEDED.to_le_bytes());
        h[8..10].copy_from_slice(&canonical_flags(e.name).to_le_bytes());
        h[12..14].copy_from_slice(&DOS_TIME.to_le_bytes());
        h[14..16].copy_from_slice(&DOS_DATE.to_le_bytes());
        h[16..20].copy_from_slice(&e.crc.to_le_bytes());
        let size = u32_of(e.data.len())?;
        h[20..24].copy_from_slice(&size.to_le_bytes());
        h[24..28].copy_from_slice(&size.to_le_bytes());
        let name_len = u16::try_from(e.name.len()).map_err(|_| EmitError::TooLarge)?;
        h[28..30].copy_from_slice(&name_len.to_le_bytes());
        // extra, comment, disk start, internal attributes: zero (30..38).
        h[38..42].copy_from_slice(&EXTERNAL_ATTR.to_le_bytes());
        h[42..46].copy_from_slice(&lfh_offset.to_le_bytes());
        put(sink, &h)?;
        put(sink, e.name.as_bytes())?;
        cd_size = cd_size
            .checked_add(CDH_LEN + e.name.len())
            .ok_or(EmitError::TooLarge)?;
    }
    let cd_size = u32_of(cd_size)?;
    if cd_offset.checked_add(cd_size).is_none() {
        return Err(EmitError::TooLarge);
    }
    let mut end = [0_u8; EOCD_LEN];
    end[0..4].copy_from_slice(&EOCD_SIGNATURE);
    // disk numbers 0 at 4..8.
    end[8..10].copy_from_slice(&count.to_le_bytes());
    end[10..12].copy_from_slice(&count.to_le_bytes());
    end[12..16].copy_from_slice(&cd_size.to_le_bytes());
    end[16..20].copy_from_slice(&cd_offset.to_le_bytes());
    // comment length 0 at 20..22.
    put(sink, &end)
}

/// The reference `PortablePathError` message for a collision (names quoted by
/// [`vocab::Untrusted`] through the collision's `Display`).
pub(crate) fn collision_message(c: &Collision) -> String {
    format!("portable path rejected: {c}")
}

/// Builds the canonical archive of `entries` (any input order; sorted by the UTF-8 bytes of the
/// path). Paths are already portable ([`RepoPath`]); they must also be collision-free.
///
/// # Errors
/// `REPOSITORY_PATCH_ARCHIVE_ENVELOPE` for no entries or colliding paths (duplicates, case-fold
/// twins, file/directory prefixes); `REPOSITORY_PATCH_ARCHIVE_BUDGET` when sizes exceed the ZIP32
/// fields (never within the 16 MiB budget).
///
/// # Security
/// Deterministic: the output depends only on the set of `(path, bytes)` pairs.
pub fn build_deterministic_archive(
    entries: &[(RepoPath, Vec<u8>)],
) -> Result<Vec<u8>, ArchiveError> {
    if entries.is_empty() {
        return Err(ArchiveError::envelope(
            "deterministic archive requires at least one entry",
        ));
    }
    detect_collisions(entries.iter().map(|(p, _)| p)).map_err(|c| ArchiveError::Envelope {
        message: collision_message(&c),
    })?;
    let mut planned: Vec<Planned<'_>> = entries
        .iter()
        .map(|(p, data)| Planned {
            name: p.as_str(),
            data,
            crc: crc32fast::hash(data),
        })
        .collect();
    planned.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let total: usize = planned
        .iter()
        .map(|e| LFH_LEN + CDH_LEN + 2 * e.name.len() + e.data.len())
        .fold(EOCD_LEN, usize::saturating_add);
    let mut out = Vec::with_capacity(total);
    emit(&planned, &mut out).map_err(|_| ArchiveError::Budget {
        detail: "archive exceeds the ZIP32 layout",
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RepoPath {
        RepoPath::parse(s).unwrap()
    }

    const SINGLE: &str = "504b0304140000000000000021008316dc8c010000000100000005000000612e74787478504b01021403140000000000000021008316dc8c0100000001000000050000000000000000000000a48100000000612e747874504b0506000000000100010033000000240000000000";

    #[test]
    fn single_entry_is_the_109_byte_reference_vector() {
        let out = build_deterministic_archive(&[(p("a.txt"), b"x".to_vec())]).unwrap();
        assert_eq!(out.len(), 109);
        assert_eq!(hex_of(&out), SINGLE);
    }

    #[test]
    fn golden_vector_in_any_input_order() {
        let mut entries = vec![
            (p("app/config/shell.json"), b"{\"nav\": []}\n".to_vec()),
            (p("app/app.json"), b"{\"appName\": \"Golden\"}\n".to_vec()),
            (
                p("modules/reports/module.yaml"),
                b"module:\n  id: reports\n".to_vec(),
            ),
            (
                p("ui/pages/reports.yaml"),
                "name: Répörts\n".as_bytes().to_vec(),
            ),
        ];
        for _ in 0..4 {
            entries.rotate_left(1);
            let out = build_deterministic_archive(&entries).unwrap();
            assert_eq!(out.len(), 560);
            assert_eq!(
                archive_digest(&out).to_string(),
                "sha256:aecaa65174d8db2ff8e9f020760445b737d5f915a651458bc0f960b395f39841"
            );
        }
    }

    #[test]
    fn writer_rejects_empty_and_colliding_sets() {
        let e = build_deterministic_archive(&[]).unwrap_err();
        assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_ENVELOPE");
        for set in [
            vec![("a.txt", "1"), ("a.txt", "2")],
            vec![("A.txt", "1"), ("a.txt", "2")],
            vec![("x", "1"), ("x/y", "2")],
            vec![("straße.txt", "1"), ("STRASSE.txt", "2")],
        ] {
            let entries: Vec<_> = set
                .iter()
                .map(|(n, c)| (p(n), c.as_bytes().to_vec()))
                .collect();
            let e = build_deterministic_archive(&entries).unwrap_err();
            assert_eq!(e.code(), "REPOSITORY_PATCH_ARCHIVE_ENVELOPE", "{set:?}");
            assert!(e.to_string().contains("portable path rejected"), "{e}");
        }
    }

    #[test]
    fn empty_marker_only_for_deletion_only_turns() {
        let (a, b) = (p("a"), p("b"));
        assert!(empty_marker_permitted(
            &[a.clone(), b.clone()],
            &[],
            &[b.clone(), a.clone()]
        ));
        assert!(!empty_marker_permitted(
            &[a.clone(), b.clone()],
            &[],
            std::slice::from_ref(&a)
        ));
        assert!(!empty_marker_permitted(
            std::slice::from_ref(&a),
            std::slice::from_ref(&b),
            std::slice::from_ref(&a)
        ));
        assert!(!empty_marker_permitted(&[], &[], &[]));
        assert_eq!(EMPTY_ARCHIVE_MARKER.len(), 28);
    }

    fn hex_of(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
