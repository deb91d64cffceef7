//! The baseline cache: one baseline evidence file per (cache format, commit, gate definition
//! digest, image ID, container runtime) in `<state dir>/gate-baselines/`, so a second candidate at one commit pays one run. Entries are
//! full evidence files, parsed strictly on read and checked against their key; anything else is a
//! miss. Only verdicts (`passed`, `failed`) are cached, never an environment failure.
//! Files are reached through a cap-std directory handle.

use std::path::Path;

use cap_std::fs::Dir;
use sha2::{Digest as _, Sha256 as Hasher};

use crate::definition::GateDefinition;
use crate::error::GateError;
use crate::evidence::{EvidenceFile, GateVerdict, parse_evidence};

/// The cache's folder under the state directory.
pub const BASELINE_CACHE_DIR: &str = state::GATE_BASELINES.name;
/// The cache format, part of every key: entries written before baseline evidence listed its
/// passing ids (format 1) are never read as a hit.
const CACHE_FORMAT: &str = "patch_candidate.gate_baseline_cache.v2";

/// An opened baseline cache.
#[derive(Debug)]
pub struct BaselineCache {
    dir: Dir,
}

fn state_error(detail: &'static str) -> GateError {
    GateError::State { detail }
}

/// Opens `dir` (created 0700 when missing; its parent must exist) as a handle.
pub(crate) fn open_or_create(dir: &Path) -> Result<Dir, GateError> {
    state::open_or_create_dir(dir).map_err(|e| match e {
        state::OpenDirError::Create => state_error("a state folder cannot be created"),
        _ => state_error("a state folder cannot be opened"),
    })
}

/// Writes `bytes` to `name` in `dir` atomically (temp file, fsync, rename).
pub(crate) fn write_atomic(dir: &Dir, name: &str, bytes: &[u8]) -> Result<(), GateError> {
    state::write_atomic(dir, name, bytes, None).map_err(|e| match e {
        state::WriteError::Create => state_error("a state file cannot be created"),
        state::WriteError::Rename => state_error("a state file cannot be renamed"),
        _ => state_error("a state file cannot be written"),
    })
}

impl BaselineCache {
    /// Opens (creating) `<state_dir>/gate-baselines`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_STATE`.
    pub fn open(state_dir: &Path) -> Result<Self, GateError> {
        let _ = open_or_create(state_dir)?;
        Ok(Self {
            dir: open_or_create(&state_dir.join(BASELINE_CACHE_DIR))?,
        })
    }

    /// The entry name: everything that changes a baseline run's result and is known before it
    /// runs: the cache format, the commit, the definition digest (argv, env, cwd, limits, JUnit
    /// caps, pinned paths), the image ID (the interpreter, the packages and the runner) and the
    /// OCI runtime (`default` or `runsc`: gVisor's kernel is not the host's).
    fn key(commit: &str, def: &GateDefinition, runtime: &str) -> String {
        let mut h = Hasher::new();
        for part in [
            CACHE_FORMAT,
            commit,
            &def.digest().to_string(),
            def.image().as_str(),
            runtime,
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        format!("{}.json", hex::encode(h.finalize()))
    }

    /// The cached baseline evidence for `commit` and `def` under `runtime` (the evidence's
    /// `runtime` spelling), if any valid entry exists.
    #[must_use]
    pub fn get(&self, commit: &str, def: &GateDefinition, runtime: &str) -> Option<EvidenceFile> {
        use std::io::Read as _;
        let file = self.dir.open(Self::key(commit, def, runtime)).ok()?;
        let mut bytes = Vec::new();
        file.take(crate::evidence::MAX_EVIDENCE_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .ok()?;
        let parsed = parse_evidence(&bytes).ok()?;
        let e = &parsed.evidence;
        (e.subject == crate::evidence::EvidenceSubject::Baseline
            && e.baseline_commit_sha == commit
            && e.definition_digest == *def.digest()
            && e.image_id == def.image().as_str()
            && e.runtime == runtime
            && e.gate == def.name().as_str())
        .then_some(parsed)
    }

    /// Records a baseline run (verdicts only).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_STATE`.
    pub fn put(
        &self,
        commit: &str,
        def: &GateDefinition,
        runtime: &str,
        file_bytes: &[u8],
        outcome: GateVerdict,
    ) -> Result<bool, GateError> {
        if !matches!(outcome, GateVerdict::Passed | GateVerdict::Failed) {
            return Ok(false);
        }
        write_atomic(&self.dir, &Self::key(commit, def, runtime), file_bytes)?;
        Ok(true)
    }
}
