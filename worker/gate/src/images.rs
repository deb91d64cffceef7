//! The gate images' records (`gate-images.json` in the state directory, written by
//! `images/build.sh --gate` and `image approve --gate`): which image ID each named gate image is,
//! built here from pinned packages or approved by its ID; read strictly.

use std::collections::BTreeMap;
use std::path::Path;

use container::{ImageId, ImageReference};
use serde::{Deserialize, Serialize};
use state::{RecordDetails, StateError, WriteError};

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

/// The stacks an environment image is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnvironmentStack {
    /// The python gate image plus the wheels of a hash-pinned requirements file.
    Python,
    /// The rust gate image plus the crates of a `Cargo.lock`, vendored.
    Rust,
}

/// What an environment image (`images/build.sh --gate python --requirements FILE` or `--gate rust
/// --cargo-lock FILE`, with `--name NAME`) was built from: the stack's gate image underneath and the digest of every input, which is the
/// key of its cache (a second build of the same inputs is a lookup).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateEnvironment {
    /// The stack.
    pub stack: EnvironmentStack,
    /// The stack's gate image the environment was built on.
    pub base_image_id: ImageId,
    /// `sha256:` of the lockfile as the operator gave it: the requirements file or `Cargo.lock`.
    pub lockfile_sha256: vocab::Sha256,
    /// How many third-party packages the image holds: wheels installed (requirements whose
    /// marker holds on the image), or crates vendored.
    pub packages: u32,
    /// `sha256:` over the lockfile, the stack's pins, the gate runner and the build's scripts and
    /// Dockerfiles.
    pub inputs_sha256: vocab::Sha256,
}

/// One gate image's record. A built image carries its tag, source revision and the digest of
/// its pins; an approved one only its ID (the operator vouches for its contents).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawGateImage", into = "RawGateImage")]
pub struct GateImageRecord(RawGateImage);

/// A record's fields as the file holds them, before the checks of [`GateImageRecord`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateImage {
    origin: GateImageOrigin,
    image: Option<ImageReference>,
    image_id: ImageId,
    source_revision: Option<String>,
    pins_sha256: Option<vocab::Sha256>,
    packages: Option<u32>,
    toolchain: Option<GateToolchain>,
    /// Only on an environment image; absent (not `null`) on the stacks' own images, so records
    /// written before environments existed read unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    environment: Option<GateEnvironment>,
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
            && r.toolchain.is_none()
            && r.environment.is_none();
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
        Ok(Self(r))
    }
}

impl From<GateImageRecord> for RawGateImage {
    fn from(g: GateImageRecord) -> Self {
        g.0
    }
}

impl GateImageRecord {
    /// An operator-approved image, known only by its ID.
    #[must_use]
    pub fn approved(image_id: ImageId) -> Self {
        Self(RawGateImage {
            origin: GateImageOrigin::Approved,
            image: None,
            image_id,
            source_revision: None,
            pins_sha256: None,
            packages: None,
            toolchain: None,
            environment: None,
        })
    }
    /// Built here or approved.
    #[must_use]
    pub fn origin(&self) -> GateImageOrigin {
        self.0.origin
    }
    /// The local tag of a built image.
    #[must_use]
    pub fn image(&self) -> Option<&ImageReference> {
        self.0.image.as_ref()
    }
    /// The immutable ID a gate container must be created from.
    #[must_use]
    pub fn image_id(&self) -> &ImageId {
        &self.0.image_id
    }
    /// The source revision a built image came from.
    #[must_use]
    pub fn source_revision(&self) -> Option<&str> {
        self.0.source_revision.as_deref()
    }
    /// `sha256:` of the pin file a built image's root file system came from.
    #[must_use]
    pub fn pins_sha256(&self) -> Option<&vocab::Sha256> {
        self.0.pins_sha256.as_ref()
    }
    /// How many pinned packages a built image holds.
    #[must_use]
    pub fn packages(&self) -> Option<u32> {
        self.0.packages
    }
    /// The toolchain a built rust image holds.
    #[must_use]
    pub fn toolchain(&self) -> Option<&GateToolchain> {
        self.0.toolchain.as_ref()
    }
    /// What an environment image was built from; `None` for a stack's own image.
    #[must_use]
    pub fn environment(&self) -> Option<&GateEnvironment> {
        self.0.environment.as_ref()
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
    pub fn load(state_dir: &Path) -> Result<Option<Self>, StateError> {
        state::read_record(
            &state::GATE_IMAGES.path_in(state_dir),
            &RecordDetails {
                too_large: "gate-images.json exceeds its size cap",
                unreadable: "gate-images.json is unreadable",
                malformed: "gate-images.json is malformed",
            },
        )
    }

    /// Writes `<state_dir>/gate-images.json` ([`GateImagesState::to_json`]) atomically, 0600,
    /// the state directory created 0700 when missing (its parent must exist), as
    /// images/build.sh's `record_state` does.
    ///
    /// # Errors
    /// The step that failed.
    pub fn save(&self, state_dir: &Path) -> Result<(), WriteError> {
        state::StateDir::at(state_dir).write_private(&state::GATE_IMAGES, &self.to_json())
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
        std::fs::write(dir.path().join(state::GATE_IMAGES.name), &built).unwrap();
        let records = GateImagesState::load(dir.path()).unwrap().unwrap();
        let python = records
            .get(&GateImageName::parse("python").unwrap())
            .unwrap();
        assert_eq!(python.origin(), GateImageOrigin::Built);
        assert_eq!(python.image_id().as_str(), id);
        assert_eq!(python.packages(), Some(54));
        let mine = records.get(&GateImageName::parse("mine").unwrap()).unwrap();
        assert_eq!(mine, &GateImageRecord::approved(id.parse().unwrap()));
        // What it writes, it reads back.
        records.save(dir.path()).unwrap();
        assert_eq!(GateImagesState::load(dir.path()).unwrap().unwrap(), records);
        // An environment image: the stack's fields plus what it was built from.
        let environment = format!(
            r#""environment": {{"stack": "python", "base_image_id": "{id}", "lockfile_sha256": "{id}", "packages": 3, "inputs_sha256": "{id}"}}"#
        );
        let with_env = built.replace(
            r#""toolchain": null}, "mine""#,
            &format!(r#""toolchain": null, {environment}}}, "mine""#),
        );
        // The file `doc` as read back, and the environment of its `python` entry.
        let read_env = |doc: &str| {
            std::fs::write(dir.path().join(state::GATE_IMAGES.name), doc).unwrap();
            let records = GateImagesState::load(dir.path()).unwrap().unwrap();
            let env = records
                .get(&GateImageName::parse("python").unwrap())
                .unwrap()
                .environment()
                .unwrap()
                .clone();
            (records, env)
        };
        let (records, env) = read_env(&with_env);
        assert_eq!((env.stack, env.packages), (EnvironmentStack::Python, 3));
        records.save(dir.path()).unwrap();
        assert_eq!(GateImagesState::load(dir.path()).unwrap().unwrap(), records);
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
            built.replace(r#""toolchain": null}}}"#, &format!(r#""toolchain": null, {environment}}}}}}}"#)),
            with_env.replace(r#""packages": 3,"#, r#""packages": 3, "x": 1,"#),
            with_env.replace(r#""stack": "python""#, r#""stack": "ruby""#),
        ];
        // A rust environment reads like a python one.
        let (_, env) = read_env(&with_env.replace(r#""stack": "python""#, r#""stack": "rust""#));
        assert_eq!(env.stack, EnvironmentStack::Rust);
        for doc in refused {
            assert_ne!(doc, built);
            std::fs::write(dir.path().join(state::GATE_IMAGES.name), &doc).unwrap();
            let e = GateImagesState::load(dir.path()).unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_STATE", "{doc}");
        }
        assert!(GateImageName::parse("").is_none());
        assert!(GateImageName::parse("1a").is_none());
        assert!(GateImageName::parse(&"a".repeat(65)).is_none());
        assert!(GateImageName::parse("a/b").is_none());
        assert!(GateImageName::parse("py-3_11").is_some());
    }
}
