//! The proof image record written by `images/build.sh` (`images.json` in the state directory):
//! which local image tag an operator built and the immutable ID it resolved to at build time;
//! and the live images' (`live-image.json` and the other agents' records). The gate images'
//! records belong to the gate crate.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::error::TurnError;
use container::{ImageId, ImageReference};
use state::RecordDetails;

/// Default proof image tag.
pub const PROOF_IMAGE: &str = "patch-candidate-proof:local";

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
    pub agent_tarball_sha256: vocab::Sha256,
    pub source_revision: String,
    /// The environment the image was layered onto (`images/build.sh --live --env NAME`); absent
    /// for an image `FROM scratch`, whose agent finds no toolchain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<LiveEnvironment>,
}

/// The environment under a live image: its name in `gate-images.json` and the ID it had there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveEnvironment {
    /// The gate image name (`python`, `rust`, or an environment built from requirements).
    pub name: String,
    /// The environment image's immutable ID, which the live image is built on.
    pub image_id: ImageId,
    /// The `/tmp` in MiB, mounted `exec`, that the agent's builds need on this environment (a
    /// rust environment's `CARGO_TARGET_DIR`); absent keeps the turn's default `/tmp`. At most
    /// [`crate::MAX_BUILD_TMP_MIB`] takes effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_tmp_mib: Option<u64>,
}

impl LiveImageState {
    /// Reads Codex's record, `<state_dir>/live-image.json`; `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_STATE` when it exists but cannot be read or parsed.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, TurnError> {
        Self::load_for(state_dir, Agent::Codex)
    }

    /// Reads the record of `agent`'s live image ([`Agent::image_record`]); `Ok(None)` when it
    /// does not exist.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_STATE` when it exists but cannot be read or parsed.
    pub fn load_for(state_dir: &Path, agent: Agent) -> Result<Option<Self>, TurnError> {
        load_state(state_dir, StateFile::Live(agent))
    }
}

#[derive(Clone, Copy)]
enum StateFile {
    Images,
    Live(Agent),
}

impl StateFile {
    fn entry(self) -> &'static state::Entry {
        match self {
            Self::Images => &state::IMAGES,
            Self::Live(agent) => agent.image_record_entry(),
        }
    }
    fn details(self) -> &'static RecordDetails {
        match self {
            Self::Images => &RecordDetails {
                too_large: "images.json exceeds its size cap",
                unreadable: "images.json is unreadable",
                malformed: "images.json is malformed",
            },
            Self::Live(_) => &RecordDetails {
                too_large: "a live image record exceeds its size cap",
                unreadable: "a live image record is unreadable",
                malformed: "a live image record is malformed",
            },
        }
    }
}

fn load_state<T: serde::de::DeserializeOwned>(
    state_dir: &Path,
    file: StateFile,
) -> Result<Option<T>, TurnError> {
    Ok(state::read_record(
        &file.entry().path_in(state_dir),
        file.details(),
    )?)
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
        assert_eq!(state.image.as_str(), crate::agent::LIVE_IMAGE);
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
