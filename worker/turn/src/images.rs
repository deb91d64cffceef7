//! The proof image record written by `images/build.sh` (`images.json` in the state directory):
//! which local image tag an operator built and the immutable ID it resolved to at build time.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::TurnError;
use container::ContainerError;
use container::{ImageId, ImageReference};

/// Default proof image tag.
pub const PROOF_IMAGE: &str = "patch-candidate-proof:local";
/// Default live image tag (`images/build.sh --live`).
pub const LIVE_IMAGE: &str = "patch-candidate-live:local";
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
    pub fn load(state_dir: &Path) -> Result<Option<Self>, TurnError> {
        load_state(state_dir, StateFile::Images)
    }
}

/// `live-image.json` (written by `images/build.sh --live`): the live image's tag and ID and the
/// pinned agent it was built from (the tarball's SHA-256 was checked against the pin).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveImageState {
    pub image: ImageReference,
    pub image_id: ImageId,
    /// The agent adapter in the image (`codex-acp`).
    pub agent: String,
    pub agent_version: String,
    /// `sha256:<hex>` of the npm tarball the agent came from.
    pub agent_tarball_sha256: snapshot::Sha256,
    pub source_revision: String,
}

impl LiveImageState {
    /// Reads `<state_dir>/live-image.json`; `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_STATE` when it exists but cannot be read or parsed.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, TurnError> {
        load_state(state_dir, StateFile::Live)
    }
}

#[derive(Clone, Copy)]
enum StateFile {
    Images,
    Live,
}

impl StateFile {
    fn name(self) -> &'static str {
        match self {
            Self::Images => "images.json",
            Self::Live => "live-image.json",
        }
    }
    fn detail(self, what: usize) -> &'static str {
        match (self, what) {
            (Self::Images, 0) => "images.json exceeds its size cap",
            (Self::Images, 1) => "images.json is unreadable",
            (Self::Images, _) => "images.json is malformed",
            (Self::Live, 0) => "live-image.json exceeds its size cap",
            (Self::Live, 1) => "live-image.json is unreadable",
            (Self::Live, _) => "live-image.json is malformed",
        }
    }
}

fn load_state<T: serde::de::DeserializeOwned>(
    state_dir: &Path,
    file: StateFile,
) -> Result<Option<T>, TurnError> {
    let path = state_dir.join(file.name());
    let bytes = match crate::input::read_bounded_file(&path, MAX_STATE_BYTES) {
        Ok(b) => b,
        Err(crate::input::BoundedReadError::Missing) => return Ok(None),
        Err(crate::input::BoundedReadError::TooLarge { .. }) => {
            return Err(TurnError::from(ContainerError::State {
                detail: file.detail(0),
            }));
        }
        Err(_) => {
            return Err(TurnError::from(ContainerError::State {
                detail: file.detail(1),
            }));
        }
    };
    snapshot::from_slice_strict(&bytes, MAX_STATE_BYTES)
        .map(Some)
        .map_err(|_| {
            TurnError::from(ContainerError::State {
                detail: file.detail(2),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_image_state_is_read_strictly() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LiveImageState::load(dir.path()).unwrap(), None);
        let id = format!("sha256:{}", "a".repeat(64));
        let good = format!(
            r#"{{"image": "patch-candidate-live:local", "image_id": "{id}", "agent": "codex-acp", "agent_version": "0.16.0", "agent_tarball_sha256": "{id}", "source_revision": "x"}}"#
        );
        std::fs::write(dir.path().join("live-image.json"), &good).unwrap();
        let state = LiveImageState::load(dir.path()).unwrap().unwrap();
        assert_eq!(state.image_id.as_str(), id);
        assert_eq!(state.image.as_str(), LIVE_IMAGE);
        let extra = good.replace("\"x\"}", "\"x\", \"more\": 1}");
        std::fs::write(dir.path().join("live-image.json"), extra).unwrap();
        let e = LiveImageState::load(dir.path()).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_STATE");
        let bad_id = good.replace(
            &format!("\"image_id\": \"{id}\""),
            "\"image_id\": \"sha256:12\"",
        );
        std::fs::write(dir.path().join("live-image.json"), bad_id).unwrap();
        assert!(LiveImageState::load(dir.path()).is_err());
    }
}
