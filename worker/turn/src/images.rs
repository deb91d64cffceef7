//! The proof image record written by `images/build.sh` (`images.json` in the state directory):
//! which local image tag an operator built and the immutable ID it resolved to at build time;
//! the live image's (`live-image.json`) and the gate images' (`gate-images.json`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::agent::Agent;
use crate::error::TurnError;
use container::ContainerError;
use container::{ImageId, ImageReference};

/// Default proof image tag.
pub const PROOF_IMAGE: &str = "patch-candidate-proof:local";
pub use crate::agent::LIVE_IMAGE;
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
    pub agent_tarball_sha256: vocab::Sha256,
    pub source_revision: String,
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

/// A gate image's name in `gate-images.json` (`python`, `rust`, or an operator's own):
/// `[a-z][a-z0-9_-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GateImageName(String);

impl GateImageName {
    /// Checks the name rule; `None` when `s` breaks it.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let mut bytes = s.bytes();
        let ok = s.len() <= 64
            && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
            && bytes
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        ok.then(|| Self(s.to_owned()))
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for GateImageName {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s).ok_or("gate image name must be [a-z][a-z0-9_-]{0,63}")
    }
}

impl From<GateImageName> for String {
    fn from(n: GateImageName) -> Self {
        n.0
    }
}

/// How a gate image came to be approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateImageOrigin {
    /// Built here by `images/build.sh --gate NAME` from pinned packages.
    Built,
    /// An operator's own prebuilt image, approved by its ID (`image approve --gate NAME --id …`).
    Approved,
}

/// The Rust toolchain copied into a built image, as pinned in `images/gate/rust.toolchain`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateToolchain {
    /// `rustc -V` of the toolchain (printable ASCII, at most 128 bytes).
    pub rustc: String,
    /// `sha256:` of the toolchain's file manifest.
    pub manifest_sha256: vocab::Sha256,
}

/// One gate image's record. A built image carries its tag, source revision and the digest of
/// its pins; an approved one only its ID (the operator vouches for its contents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawGateImage", into = "RawGateImage")]
pub struct GateImageRecord {
    origin: GateImageOrigin,
    image: Option<ImageReference>,
    image_id: ImageId,
    source_revision: Option<String>,
    pins_sha256: Option<vocab::Sha256>,
    packages: Option<u32>,
    toolchain: Option<GateToolchain>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateImage {
    origin: GateImageOrigin,
    image: Option<ImageReference>,
    image_id: ImageId,
    source_revision: Option<String>,
    pins_sha256: Option<vocab::Sha256>,
    packages: Option<u32>,
    toolchain: Option<GateToolchain>,
}

impl TryFrom<RawGateImage> for GateImageRecord {
    type Error = &'static str;
    fn try_from(r: RawGateImage) -> Result<Self, Self::Error> {
        let built_fields = r.image.is_some()
            && r.source_revision.is_some()
            && r.pins_sha256.is_some()
            && r.packages.is_some();
        let no_build_fields = r.image.is_none()
            && r.source_revision.is_none()
            && r.pins_sha256.is_none()
            && r.packages.is_none()
            && r.toolchain.is_none();
        match r.origin {
            GateImageOrigin::Built if !built_fields => {
                return Err(
                    "a built gate image needs image, source_revision, pins_sha256, packages",
                );
            }
            GateImageOrigin::Approved if !no_build_fields => {
                return Err("an approved gate image carries only its ID");
            }
            _ => {}
        }
        if let Some(rev) = &r.source_revision
            && !(rev == "unknown"
                || (rev.len() == 40
                    && rev
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())))
        {
            return Err("source_revision must be a commit ID or unknown");
        }
        if let Some(t) = &r.toolchain
            && (t.rustc.is_empty()
                || t.rustc.len() > 128
                || !t.rustc.bytes().all(|b| (b' '..=b'~').contains(&b)))
        {
            return Err("toolchain.rustc must be 1..=128 printable ASCII bytes");
        }
        Ok(Self {
            origin: r.origin,
            image: r.image,
            image_id: r.image_id,
            source_revision: r.source_revision,
            pins_sha256: r.pins_sha256,
            packages: r.packages,
            toolchain: r.toolchain,
        })
    }
}

impl From<GateImageRecord> for RawGateImage {
    fn from(g: GateImageRecord) -> Self {
        Self {
            origin: g.origin,
            image: g.image,
            image_id: g.image_id,
            source_revision: g.source_revision,
            pins_sha256: g.pins_sha256,
            packages: g.packages,
            toolchain: g.toolchain,
        }
    }
}

impl GateImageRecord {
    /// An operator-approved image, known only by its ID.
    #[must_use]
    pub fn approved(image_id: ImageId) -> Self {
        Self {
            origin: GateImageOrigin::Approved,
            image: None,
            image_id,
            source_revision: None,
            pins_sha256: None,
            packages: None,
            toolchain: None,
        }
    }
    /// Built here or approved.
    #[must_use]
    pub fn origin(&self) -> GateImageOrigin {
        self.origin
    }
    /// The local tag of a built image.
    #[must_use]
    pub fn image(&self) -> Option<&ImageReference> {
        self.image.as_ref()
    }
    /// The immutable ID a gate container must be created from.
    #[must_use]
    pub fn image_id(&self) -> &ImageId {
        &self.image_id
    }
    /// The source revision a built image came from.
    #[must_use]
    pub fn source_revision(&self) -> Option<&str> {
        self.source_revision.as_deref()
    }
    /// `sha256:` of the pin file a built image's root file system came from.
    #[must_use]
    pub fn pins_sha256(&self) -> Option<&vocab::Sha256> {
        self.pins_sha256.as_ref()
    }
    /// How many pinned packages a built image holds.
    #[must_use]
    pub fn packages(&self) -> Option<u32> {
        self.packages
    }
    /// The toolchain a built rust image holds.
    #[must_use]
    pub fn toolchain(&self) -> Option<&GateToolchain> {
        self.toolchain.as_ref()
    }
}

/// `gate-images.json`: the approved gate images by name (written by `images/build.sh --gate` and
/// `patch-candidate image approve --gate`), validated as it is read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateImagesState {
    gates: BTreeMap<GateImageName, GateImageRecord>,
}

impl GateImagesState {
    /// Reads `<state_dir>/gate-images.json`; `Ok(None)` when it does not exist.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_STATE` when it exists but cannot be read or parsed.
    pub fn load(state_dir: &Path) -> Result<Option<Self>, TurnError> {
        load_state(state_dir, StateFile::Gates)
    }

    /// The record of gate image `name`.
    #[must_use]
    pub fn get(&self, name: &GateImageName) -> Option<&GateImageRecord> {
        self.gates.get(name)
    }

    /// Every record, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&GateImageName, &GateImageRecord)> {
        self.gates.iter()
    }

    /// Sets (or replaces) the record of `name`.
    pub fn insert(&mut self, name: GateImageName, record: GateImageRecord) {
        self.gates.insert(name, record);
    }

    /// The file's bytes: compact JSON, keys sorted, one trailing newline.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).unwrap_or_default();
        out.push(b'\n');
        out
    }
}

/// The file name of the gate image record in the state directory.
pub const GATE_IMAGES_FILE: &str = "gate-images.json";

#[derive(Clone, Copy)]
enum StateFile {
    Images,
    Live(Agent),
    Gates,
}

impl StateFile {
    fn name(self) -> &'static str {
        match self {
            Self::Images => "images.json",
            Self::Live(agent) => agent.image_record(),
            Self::Gates => GATE_IMAGES_FILE,
        }
    }
    fn detail(self, what: usize) -> &'static str {
        match (self, what) {
            (Self::Images, 0) => "images.json exceeds its size cap",
            (Self::Images, 1) => "images.json is unreadable",
            (Self::Images, _) => "images.json is malformed",
            (Self::Live(_), 0) => "a live image record exceeds its size cap",
            (Self::Live(_), 1) => "a live image record is unreadable",
            (Self::Live(_), _) => "a live image record is malformed",
            (Self::Gates, 0) => "gate-images.json exceeds its size cap",
            (Self::Gates, 1) => "gate-images.json is unreadable",
            (Self::Gates, _) => "gate-images.json is malformed",
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
    vocab::from_slice_strict(&bytes, MAX_STATE_BYTES)
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
    fn gate_images_state_is_read_strictly() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(GateImagesState::load(dir.path()).unwrap(), None);
        let id = format!("sha256:{}", "b".repeat(64));
        let rev = "0123456789abcdef0123456789abcdef01234567";
        let built = format!(
            r#"{{"gates": {{"python": {{"image": "patch-candidate-gate-python:local", "image_id": "{id}", "origin": "built", "packages": 54, "pins_sha256": "{id}", "source_revision": "{rev}", "toolchain": null}}, "mine": {{"origin": "approved", "image": null, "image_id": "{id}", "source_revision": null, "pins_sha256": null, "packages": null, "toolchain": null}}}}}}"#
        );
        std::fs::write(dir.path().join(GATE_IMAGES_FILE), &built).unwrap();
        let state = GateImagesState::load(dir.path()).unwrap().unwrap();
        let python = state.get(&GateImageName::parse("python").unwrap()).unwrap();
        assert_eq!(python.origin(), GateImageOrigin::Built);
        assert_eq!(python.image_id().as_str(), id);
        assert_eq!(python.packages(), Some(54));
        let mine = state.get(&GateImageName::parse("mine").unwrap()).unwrap();
        assert_eq!(mine, &GateImageRecord::approved(id.parse().unwrap()));
        // What it writes, it reads back.
        std::fs::write(dir.path().join(GATE_IMAGES_FILE), state.to_json()).unwrap();
        assert_eq!(GateImagesState::load(dir.path()).unwrap().unwrap(), state);
        let refused = [
            built.replace(r#""toolchain": null}, "mine""#, r#""toolchain": null, "x": 1}, "mine""#),
            built.replace(r#""origin": "approved", "image": null"#, r#""origin": "approved", "image": "a:b""#),
            built.replace(r#""packages": 54, "#, ""),
            built.replace(r#""origin": "built""#, r#""origin": "pulled""#),
            built.replace(rev, "HEAD"),
            built.replace("\"python\"", "\"Python\""),
            built.replace(&format!(r#""image_id": "{id}", "origin": "built""#), r#""image_id": "sha256:1", "origin": "built""#),
            built.replace(r#"{"gates": "#, r#"{"extra": 1, "gates": "#),
            built.replace(r#""toolchain": null}, "mine""#, &format!(r#""toolchain": {{"rustc": "rustc\u001b[2J", "manifest_sha256": "{id}"}}}}, "mine""#)),
        ];
        for doc in refused {
            assert_ne!(doc, built);
            std::fs::write(dir.path().join(GATE_IMAGES_FILE), &doc).unwrap();
            let e = GateImagesState::load(dir.path()).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_STATE", "{doc}");
        }
        assert!(GateImageName::parse("").is_none());
        assert!(GateImageName::parse("1a").is_none());
        assert!(GateImageName::parse(&"a".repeat(65)).is_none());
        assert!(GateImageName::parse("a/b").is_none());
        assert!(GateImageName::parse("py-3_11").is_some());
    }

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
