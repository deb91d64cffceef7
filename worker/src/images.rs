//! The proof image record written by `images/build.sh` (`images.json` in the state directory):
//! which local image tag an operator built and the immutable ID it resolved to at build time.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::WorkerError;
use crate::ids::{ImageId, ImageReference};

/// Default proof image tag.
pub const PROOF_IMAGE: &str = "patch-candidate-proof:local";
/// Default hostile (test-only) image tag.
pub const HOSTILE_IMAGE: &str = "patch-candidate-proof-hostile:local";
/// Largest accepted state file.
const MAX_STATE_BYTES: usize = 64 * 1024;

/// `images.json`: the image tags and IDs are validated as they are read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesState {
    pub image: ImageReference,
    pub image_id: ImageId,
    pub hostile_image: ImageReference,
    pub hostile_image_id: ImageId,
    pub source_revision: String,
}

impl ImagesState {
    /// Reads `<state_dir>/images.json`; `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_STATE` when it exists but cannot be read or parsed.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, WorkerError> {
        let path = state_dir.join("images.json");
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(_) => {
                return Err(WorkerError::State {
                    detail: "images.json is unreadable",
                });
            }
        };
        snapshot::from_slice_strict(&bytes, MAX_STATE_BYTES)
            .map(Some)
            .map_err(|_| WorkerError::State {
                detail: "images.json is malformed",
            })
    }
}
