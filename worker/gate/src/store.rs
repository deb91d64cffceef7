//! Evidence next to the candidate: `<candidate hex>.gate.<gate>.json` files in a directory (the
//! candidate store, or the `--out` folder), written atomically through a cap-std handle, listed
//! and parsed strictly back for `show`.

use std::path::{Path, PathBuf};

use vocab::Sha256;

use crate::cache::{open_or_create, write_atomic};
use crate::error::GateError;
use crate::evidence::{EvidenceFile, MAX_EVIDENCE_BYTES, parse_evidence};
use crate::gate::{GateResult, evidence_file_name};

/// Writes `result`'s evidence file into `dir` (created 0700 when missing); returns its path.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_STATE`.
pub fn store_evidence(
    dir: &Path,
    candidate: &Sha256,
    result: &GateResult,
) -> Result<PathBuf, GateError> {
    let handle = open_or_create(dir)?;
    let name = evidence_file_name(candidate, &result.evidence.gate);
    write_atomic(&handle, &name, &result.file)?;
    Ok(dir.join(name))
}

/// One evidence file found for a candidate: its gate name (from the file name) and the strict
/// parse of its bytes.
pub type FoundEvidence = (String, Result<EvidenceFile, GateError>);

/// Every evidence file for `candidate` in `dir`, parsed strictly, by gate name. A file that does
/// not parse is returned as its error (never skipped silently).
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_STATE` when `dir` cannot be listed.
pub fn find_evidence(dir: &Path, candidate: &Sha256) -> Result<Vec<FoundEvidence>, GateError> {
    use std::io::Read as _;
    let handle = match cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority()) {
        Ok(h) => h,
        Err(_) => return Ok(Vec::new()),
    };
    let prefix = format!("{}.gate.", candidate.bare_hex());
    let mut out = Vec::new();
    let entries = handle.entries().map_err(|_| GateError::State {
        detail: "the evidence folder cannot be listed",
    })?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(gate) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".json"))
        else {
            continue;
        };
        let parsed = (|| {
            let file = handle.open(name).map_err(|_| GateError::State {
                detail: "an evidence file cannot be opened",
            })?;
            let mut bytes = Vec::new();
            file.take(MAX_EVIDENCE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
                .map_err(|_| GateError::State {
                    detail: "an evidence file cannot be read",
                })?;
            parse_evidence(&bytes)
        })();
        out.push((gate.to_owned(), parsed));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}
