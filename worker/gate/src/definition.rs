//! Operator gate definitions: a trusted TOML file named by the operator (`--gates FILE`), never
//! read from the repository or from anything an agent wrote. Parsing is strict (unknown keys
//! refused, the file size bounded, every value checked, nothing repaired), and each validated
//! definition has a canonical digest that the evidence records.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::json;
use vocab::Sha256;

use container::ImageId;

use crate::error::GateError;
use crate::pinned::PinnedPattern;
use vocab::domain_digest;

/// Largest definition file read.
pub const MAX_GATES_FILE_BYTES: u64 = 256 * 1024;
/// Most gates one file defines.
pub const MAX_GATES: usize = 64;
/// Digest schema of one gate definition.
pub const DEFINITION_DIGEST_SCHEMA: &str = "patch_candidate.gate_definition_digest.v1";

const MAX_ARGV: usize = 256;
const MAX_ARG_BYTES: usize = 4096;
const MAX_ENV: usize = 64;
// The wire contract's caps bound the rest (argv, env, report size): `gate_runner`'s constructors.
const MAX_ENV_VALUE_BYTES: usize = 4096;
const MAX_PINNED: usize = 256;
const MAX_WALL_SECONDS: u64 = 3600;
const MAX_MEMORY_MIB: u64 = 64 * 1024;
const MAX_TMPFS_MIB: u64 = 16 * 1024;
const MAX_PIDS: i64 = 32_768;
const MAX_CPU_MILLIS: u64 = 64_000;
const MAX_LOG_TAIL_BYTES: u64 = 256 * 1024;
const MAX_JUNIT_BYTES: u64 = 64 * 1024 * 1024;
const MAX_JUNIT_CASES: u32 = 1500;
const MAX_JUNIT_DEPTH: u32 = 64;

fn invalid(gate: &str, detail: &str) -> GateError {
    GateError::Definition {
        detail: format!("gate {}: {detail}", vocab::Untrusted::quoted(gate)),
    }
}

/// A gate name: `[a-z0-9][a-z0-9_-]{0,63}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GateName(String);

impl GateName {
    /// The name text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for GateName {
    type Err = GateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let ok = s.len() <= 64
            && s.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(GateError::Definition {
                detail: format!(
                    "gate name {} is not [a-z0-9][a-z0-9_-]{{0,63}}",
                    vocab::Untrusted::quoted(s)
                ),
            })
        }
    }
}

impl std::fmt::Display for GateName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The JUnit file a gate reads and its caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JunitSpec {
    pub path: String,
    pub max_bytes: u64,
    pub max_cases: u32,
    pub max_depth: u32,
}

/// One validated gate definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDefinition {
    name: GateName,
    image: ImageId,
    argv: Vec<String>,
    cwd: String,
    wall_seconds: u64,
    kill_grace_ms: u64,
    memory_mib: u64,
    pids: i64,
    cpu_millis: u64,
    workspace_mib: u64,
    tmp_mib: u64,
    log_tail_bytes: u64,
    junit: Option<JunitSpec>,
    env: BTreeMap<String, String>,
    pinned: Vec<PinnedPattern>,
    digest: Sha256,
}

impl GateDefinition {
    #[must_use]
    pub fn name(&self) -> &GateName {
        &self.name
    }
    #[must_use]
    pub fn image(&self) -> &ImageId {
        &self.image
    }
    #[must_use]
    pub fn argv(&self) -> &[String] {
        &self.argv
    }
    #[must_use]
    pub fn cwd(&self) -> &str {
        &self.cwd
    }

    /// The gate's command as one shell line an agent can run from the repository's root (`cd
    /// CWD && ARGV…`, each word quoted for a POSIX shell when it needs it): the validation hint a
    /// live turn's prompt shows.
    #[must_use]
    pub fn command_hint(&self) -> String {
        let words: Vec<String> = self.argv.iter().map(|w| shell_word(w)).collect();
        if self.cwd == "." {
            words.join(" ")
        } else {
            format!("cd {} && {}", shell_word(&self.cwd), words.join(" "))
        }
    }
    #[must_use]
    pub fn wall_ms(&self) -> u64 {
        self.wall_seconds.saturating_mul(1000)
    }
    #[must_use]
    pub fn kill_grace_ms(&self) -> u64 {
        self.kill_grace_ms
    }
    #[must_use]
    pub fn memory_bytes(&self) -> i64 {
        i64::try_from(self.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX)
    }
    #[must_use]
    pub fn pids(&self) -> i64 {
        self.pids
    }
    #[must_use]
    pub fn nano_cpus(&self) -> i64 {
        i64::try_from(self.cpu_millis.saturating_mul(1_000_000)).unwrap_or(i64::MAX)
    }
    /// `/workspace` tmpfs size in bytes (also the cap on the tree's file bytes).
    #[must_use]
    pub fn workspace_bytes(&self) -> u64 {
        self.workspace_mib.saturating_mul(1024 * 1024)
    }
    #[must_use]
    pub fn workspace_mib(&self) -> u64 {
        self.workspace_mib
    }
    #[must_use]
    pub fn tmp_mib(&self) -> u64 {
        self.tmp_mib
    }
    #[must_use]
    pub fn log_tail_bytes(&self) -> u64 {
        self.log_tail_bytes
    }
    #[must_use]
    pub fn junit(&self) -> Option<&JunitSpec> {
        self.junit.as_ref()
    }
    /// The child's fixed environment (operator values only), sorted by name.
    #[must_use]
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }
    #[must_use]
    pub fn pinned(&self) -> &[PinnedPattern] {
        &self.pinned
    }
    /// The canonical digest of this definition (`patch_candidate.gate_definition_digest.v1`).
    #[must_use]
    pub fn digest(&self) -> &Sha256 {
        &self.digest
    }

    /// True when `path` is pinned for this gate (the JUnit path always is).
    #[must_use]
    pub fn is_pinned(&self, path: &str) -> bool {
        self.junit.as_ref().is_some_and(|j| j.path == path)
            || self.pinned.iter().any(|p| p.matches(path))
    }

    fn canonical(&self) -> serde_json::Value {
        json!({
            "name": self.name.as_str(),
            "image": self.image.as_str(),
            "argv": self.argv,
            "cwd": self.cwd,
            "wall_seconds": self.wall_seconds,
            "kill_grace_ms": self.kill_grace_ms,
            "memory_mib": self.memory_mib,
            "pids": self.pids,
            "cpu_millis": self.cpu_millis,
            "workspace_mib": self.workspace_mib,
            "tmp_mib": self.tmp_mib,
            "log_tail_bytes": self.log_tail_bytes,
            "junit": self.junit.as_ref().map(|j| json!({
                "path": j.path, "max_bytes": j.max_bytes, "max_cases": j.max_cases, "max_depth": j.max_depth,
            })),
            "env": self.env,
            "pinned": self.pinned.iter().map(PinnedPattern::as_str).collect::<Vec<_>>(),
        })
    }
}

/// The validated definition file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateDefinitions {
    gates: BTreeMap<GateName, GateDefinition>,
}

impl GateDefinitions {
    /// Reads and validates the operator's definition file (bounded read, strict parse).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_DEFINITION`.
    ///
    /// # Security
    /// The file is operator input; its values are never echoed in an error.
    pub fn load(path: &Path) -> Result<Self, GateError> {
        use std::io::Read as _;
        let file = std::fs::File::open(path).map_err(|_| GateError::Definition {
            detail: "the gate definition file cannot be opened".to_owned(),
        })?;
        let mut bytes = Vec::new();
        file.take(MAX_GATES_FILE_BYTES.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|_| GateError::Definition {
                detail: "the gate definition file cannot be read".to_owned(),
            })?;
        Self::parse(&bytes)
    }

    /// Validates the bytes of a definition file.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_DEFINITION`.
    pub fn parse(bytes: &[u8]) -> Result<Self, GateError> {
        if bytes.len() as u64 > MAX_GATES_FILE_BYTES {
            return Err(GateError::Definition {
                detail: format!("the file exceeds {MAX_GATES_FILE_BYTES} bytes"),
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|_| GateError::Definition {
            detail: "the file is not UTF-8".to_owned(),
        })?;
        // toml's messages quote the input: only the position is kept.
        let raw: RawFile = toml::from_str(text).map_err(|e| GateError::Definition {
            detail: match e.span() {
                Some(span) => format!("invalid TOML or unknown key at byte {}", span.start),
                None => "invalid TOML or unknown key".to_owned(),
            },
        })?;
        if raw.version != 1 {
            return Err(GateError::Definition {
                detail: "version must be 1".to_owned(),
            });
        }
        if raw.gates.is_empty() || raw.gates.len() > MAX_GATES {
            return Err(GateError::Definition {
                detail: format!("the file must define 1..={MAX_GATES} gates"),
            });
        }
        let mut gates = BTreeMap::new();
        for (name, raw) in raw.gates {
            let name: GateName = name.parse()?;
            let def = validate(name.clone(), raw)?;
            gates.insert(name, def);
        }
        Ok(Self { gates })
    }

    /// The gate named `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&GateDefinition> {
        self.gates
            .iter()
            .find(|(k, _)| k.as_str() == name)
            .map(|(_, v)| v)
    }

    /// Every gate, by name.
    pub fn iter(&self) -> impl Iterator<Item = &GateDefinition> + '_ {
        self.gates.values()
    }

    /// The validation hints of a live turn whose approval requires `required`: the command
    /// (`command_hint`) of each required gate, or of every gate when the
    /// approval requires none.
    #[must_use]
    pub fn command_hints(&self, required: &[String]) -> Vec<String> {
        self.iter()
            .filter(|d| required.is_empty() || required.iter().any(|r| r == d.name().as_str()))
            .map(GateDefinition::command_hint)
            .collect()
    }

    /// The definitions of `required`, in that order; the first unknown name fails.
    ///
    /// This is the check `approve`, `run` and `jobs submit` make before anything runs.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATE_UNKNOWN`.
    pub fn require<'a, S: AsRef<str>>(
        &'a self,
        required: &[S],
    ) -> Result<Vec<&'a GateDefinition>, GateError> {
        required
            .iter()
            .map(|name| {
                self.get(name.as_ref()).ok_or_else(|| GateError::Unknown {
                    name: vocab::Untrusted::quoted(name.as_ref()).to_string(),
                })
            })
            .collect()
    }
}

/// `approve`, `run` and `jobs submit`: every gate in `required` must be defined in `definitions`.
///
/// # Errors
/// `PATCH_CANDIDATE_GATE_UNKNOWN` naming the first unknown gate.
pub fn check_required_gates<S: AsRef<str>>(
    required: &[S],
    definitions: &GateDefinitions,
) -> Result<(), GateError> {
    definitions.require(required).map(|_| ())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: u32,
    #[serde(default)]
    gates: BTreeMap<String, RawGate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJunit {
    path: String,
    max_bytes: u64,
    max_cases: u32,
    max_depth: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    image: String,
    argv: Vec<String>,
    cwd: String,
    wall_seconds: u64,
    kill_grace_ms: u64,
    memory_mib: u64,
    pids: i64,
    cpu_millis: u64,
    workspace_mib: u64,
    tmp_mib: u64,
    log_tail_bytes: u64,
    #[serde(default)]
    junit: Option<RawJunit>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    pinned: Vec<String>,
}

fn in_range<T: PartialOrd>(gate: &str, v: T, lo: T, hi: T, field: &str) -> Result<(), GateError> {
    if v < lo || v > hi {
        return Err(invalid(gate, &format!("{field} is out of range")));
    }
    Ok(())
}

/// A relative, normalized path inside the tree (`.` for the root).
pub(crate) fn relative_path_ok(path: &str) -> bool {
    path == "."
        || (!path.is_empty()
            && path.len() <= 1024
            && !path.starts_with('/')
            && path.split('/').all(|s| {
                !s.is_empty()
                    && s != "."
                    && s != ".."
                    && !s.bytes().any(|b| b < 0x20 || b == 0x7f || b == b'\\')
            }))
}

fn env_key_ok(key: &str) -> bool {
    let mut bytes = key.bytes();
    key.len() <= 128
        && bytes
            .next()
            .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn validate(name: GateName, raw: RawGate) -> Result<GateDefinition, GateError> {
    let n = name.as_str();
    let image: ImageId = raw
        .image
        .parse()
        .map_err(|_| invalid(n, "image must be an immutable id (sha256:<64 hex>)"))?;
    if raw.argv.is_empty() || raw.argv.len() > MAX_ARGV {
        return Err(invalid(n, "argv must have 1..=256 items"));
    }
    if raw
        .argv
        .iter()
        .any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0') || a.is_empty())
    {
        return Err(invalid(
            n,
            "an argv item is empty, too long or contains NUL",
        ));
    }
    if !relative_path_ok(&raw.cwd) {
        return Err(invalid(
            n,
            "cwd must be a relative normalized path or \".\"",
        ));
    }
    in_range(n, raw.wall_seconds, 1, MAX_WALL_SECONDS, "wall_seconds")?;
    in_range(n, raw.kill_grace_ms, 0, 60_000, "kill_grace_ms")?;
    in_range(n, raw.memory_mib, 64, MAX_MEMORY_MIB, "memory_mib")?;
    in_range(n, raw.pids, 16, MAX_PIDS, "pids")?;
    in_range(n, raw.cpu_millis, 100, MAX_CPU_MILLIS, "cpu_millis")?;
    in_range(n, raw.workspace_mib, 1, MAX_TMPFS_MIB, "workspace_mib")?;
    in_range(n, raw.tmp_mib, 1, MAX_TMPFS_MIB, "tmp_mib")?;
    in_range(
        n,
        raw.log_tail_bytes,
        0,
        MAX_LOG_TAIL_BYTES,
        "log_tail_bytes",
    )?;
    let junit = match raw.junit {
        None => None,
        Some(j) => {
            if j.path == "." || !relative_path_ok(&j.path) {
                return Err(invalid(
                    n,
                    "junit.path must be a relative normalized file path",
                ));
            }
            in_range(n, j.max_bytes, 1, MAX_JUNIT_BYTES, "junit.max_bytes")?;
            in_range(n, j.max_cases, 1, MAX_JUNIT_CASES, "junit.max_cases")?;
            in_range(n, j.max_depth, 2, MAX_JUNIT_DEPTH, "junit.max_depth")?;
            Some(JunitSpec {
                path: j.path,
                max_bytes: j.max_bytes,
                max_cases: j.max_cases,
                max_depth: j.max_depth,
            })
        }
    };
    if raw.env.len() > MAX_ENV {
        return Err(invalid(n, "env has more than 64 entries"));
    }
    for (k, v) in &raw.env {
        if !env_key_ok(k) {
            return Err(invalid(n, "an env name is not [A-Z_][A-Z0-9_]*"));
        }
        if v.len() > MAX_ENV_VALUE_BYTES || v.contains('\0') {
            return Err(invalid(n, "an env value is too long or contains NUL"));
        }
    }
    if raw.pinned.len() > MAX_PINNED {
        return Err(invalid(n, "pinned has more than 256 entries"));
    }
    let mut pinned = Vec::with_capacity(raw.pinned.len());
    for p in raw.pinned {
        pinned.push(
            p.parse::<PinnedPattern>()
                .map_err(|()| invalid(n, "a pinned path is not a relative path or simple glob"))?,
        );
    }
    let mut def = GateDefinition {
        name,
        image,
        argv: raw.argv,
        cwd: raw.cwd,
        wall_seconds: raw.wall_seconds,
        kill_grace_ms: raw.kill_grace_ms,
        memory_mib: raw.memory_mib,
        pids: raw.pids,
        cpu_millis: raw.cpu_millis,
        workspace_mib: raw.workspace_mib,
        tmp_mib: raw.tmp_mib,
        log_tail_bytes: raw.log_tail_bytes,
        junit,
        env: raw.env,
        pinned,
        digest: Sha256::of(b""),
    };
    def.digest = domain_digest(DEFINITION_DIGEST_SCHEMA, "definition", &def.canonical());
    Ok(def)
}

/// `word` for a POSIX shell: as it is when it holds only characters no shell treats specially,
/// else in single quotes (a quote inside as `'\''`).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The stacks `gate init` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    Python,
    Rust,
}

/// A working definition file for the gate image `image build --gate KIND` records, which the
/// operator then edits.
#[must_use]
pub fn init_definitions(kind: GateKind, image: &ImageId) -> String {
    let image = image.as_str();
    match kind {
        GateKind::Python => format!(
            r#"# Gate definitions (docs/GATES.md). Trusted operator input: never commit it to the
# repository the gates check. Edit the limits and the pinned paths for your project.
version = 1

[gates.pytest]
image = "{image}"
# pytest from the image, never from the tree: -P (no script or working directory at the front of
# sys.path), -s (no user site), pytest imported before the tree is appended (after the
# standard library and the image's packages, so no tree-root `pytest.py`, `_pytest/`,
# `sitecustomize.py` or any other module name can shadow them); PYTEST_DISABLE_PLUGIN_AUTOLOAD
# below stops plugins the tree could declare (a `*.dist-info` with `pytest11` entry points).
argv = ["python3", "-P", "-s", "-c", "import os, sys, pytest; sys.path.append(os.getcwd()); sys.exit(pytest.console_main())", "-q", "-p", "no:cacheprovider", "--junitxml=/workspace/.gate-junit.xml"]
cwd = "."
wall_seconds = 600
kill_grace_ms = 2000
memory_mib = 2048
pids = 512
cpu_millis = 2000
workspace_mib = 512
tmp_mib = 256
log_tail_bytes = 65536
# Files whose change would change what the gate means: a candidate touching one is refused.
pinned = ["pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "setup.cfg", "tox.ini", "conftest.py", "**/conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.py", "_pytest/**"]

[gates.pytest.env]
HOME = "/tmp/home"
PATH = "/usr/local/bin:/usr/bin:/bin"
PYTHONDONTWRITEBYTECODE = "1"
PYTHONHASHSEED = "0"
PYTHONSAFEPATH = "1"
PYTHONNOUSERSITE = "1"
PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1"

[gates.pytest.junit]
path = ".gate-junit.xml"
max_bytes = 16777216
max_cases = 1500
max_depth = 16
"#
        ),
        GateKind::Rust => format!(
            r#"# Gate definitions (docs/GATES.md). Trusted operator input: never commit it to the
# repository the gates check. Edit the limits and the pinned paths for your project.
version = 1

[gates.cargo-test]
image = "{image}"
argv = ["cargo", "test", "--offline", "--frozen", "--quiet"]
cwd = "."
wall_seconds = 1200
kill_grace_ms = 5000
memory_mib = 4096
pids = 1024
cpu_millis = 2000
workspace_mib = 512
tmp_mib = 2048
log_tail_bytes = 65536
# Files whose change would change what the gate means: a candidate touching one is refused.
pinned = ["Cargo.toml", "**/Cargo.toml", "Cargo.lock", "**/Cargo.lock", "build.rs", "**/build.rs", ".cargo/config.toml", ".cargo/config", "**/.cargo/config.toml", "**/.cargo/config", ".config/nextest.toml", "rust-toolchain", "rust-toolchain.toml"]

[gates.cargo-test.env]
HOME = "/tmp/home"
PATH = "/usr/local/bin:/usr/bin:/bin"
CARGO_HOME = "/tmp/cargo-home"
CARGO_TARGET_DIR = "/tmp/target"
CARGO_NET_OFFLINE = "true"
CARGO_TERM_COLOR = "never"
"#
        ),
    }
}

#[cfg(test)]
#[path = "definition_tests.rs"]
mod tests;
