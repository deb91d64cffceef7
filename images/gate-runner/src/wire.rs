//! The gate wire contract, version 1: the request the host writes on the container's stdin (one
//! length-prefixed frame, followed by the tree as a tar stream) and the report the runner writes on
//! its stdout (exactly one length-prefixed frame). Both sides use these types, so the contract is
//! defined once.
//!
//! Every value is built only through a fallible constructor; deserialising calls the same checks
//! (`#[serde(try_from)]`), objects refuse unknown fields, and a report must be in its canonical
//! encoding (`vocab::canonical_bytes`) to be accepted.

use std::collections::BTreeSet;
use std::io::{Read, Write};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::GateRunnerError;

/// The one version this crate speaks.
pub const WIRE_VERSION: u32 = 1;
/// Largest request frame payload.
pub const MAX_REQUEST_BYTES: usize = 65_536;
/// Largest report frame payload.
pub const MAX_REPORT_BYTES: usize = 1_048_576;
/// Most argv items.
pub const MAX_ARGV_ITEMS: usize = 256;
/// Longest argv item or environment value, in bytes.
const MAX_ARG_BYTES: usize = 4096;
/// Most environment entries.
pub const MAX_ENV_ENTRIES: usize = 128;
/// Longest environment key.
pub const MAX_ENV_KEY_BYTES: usize = 128;
/// Longest relative path (`cwd`, `junit.path`), in bytes.
pub const MAX_REL_PATH_BYTES: usize = 4096;
/// Longest path segment, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;
/// Longest gate deadline (24 h).
pub const MAX_WALL_MS: u64 = 86_400_000;
/// Longest grace between SIGTERM and SIGKILL.
pub const MAX_KILL_GRACE_MS: u64 = 60_000;
/// Largest log tail the runner keeps.
const MAX_LOG_TAIL_BYTES: u64 = 262_144;
/// Largest JUnit file the runner reads.
const MAX_JUNIT_BYTES: u64 = 64 * 1024 * 1024;
/// Most JUnit test cases a report lists.
const MAX_JUNIT_CASES: u64 = 1500;
/// Deepest JUnit element nesting accepted.
const MAX_JUNIT_DEPTH: u64 = 64;
/// Longest test-case id (`classname::name`), in bytes.
pub const MAX_CASE_ID_BYTES: usize = 256;
/// Most tree entries (directories and files).
pub const MAX_TREE_ENTRIES: u64 = 1_000_000;
/// Most summed file bytes in a tree (16 GiB).
pub const MAX_TREE_BYTES: u64 = 16 * 1024 * 1024 * 1024;
/// Longest stable error code in a report.
pub const MAX_CODE_BYTES: usize = 64;

fn field(field: &'static str, rule: &'static str) -> GateRunnerError {
    GateRunnerError::field(field, rule)
}

fn is_lower_hex_64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The shared surface of a checked text newtype (its checking `TryFrom<String>` is its own):
/// `as_str` (documented by `$doc`), the `String` it serialises into, and with `FromStr`, parsing
/// through the same check.
macro_rules! text_newtype {
    ($ty:ident, $doc:literal) => {
        impl $ty {
            #[doc = $doc]
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl From<$ty> for String {
            fn from(v: $ty) -> Self {
                v.0
            }
        }
    };
    ($ty:ident, $doc:literal, FromStr) => {
        text_newtype!($ty, $doc);

        impl std::str::FromStr for $ty {
            type Err = GateRunnerError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::try_from(s.to_owned())
            }
        }
    };
}

/// The per-run nonce: 64 lowercase hex characters (32 bytes from the host's OS RNG).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Nonce(String);

text_newtype!(Nonce, "The hex text.", FromStr);

impl std::fmt::Debug for Nonce {
    /// Never printed: the nonce is what makes a report the runner's.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nonce(..)")
    }
}

impl Nonce {
    /// The nonce of 32 raw bytes.
    #[must_use]
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        use std::fmt::Write as _;
        let mut s = String::with_capacity(64);
        for b in bytes {
            let _ = write!(s, "{b:02x}");
        }
        Self(s)
    }
}

impl TryFrom<String> for Nonce {
    type Error = GateRunnerError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if is_lower_hex_64(&s) {
            Ok(Self(s))
        } else {
            Err(field("nonce", "must be 64 lowercase hex characters"))
        }
    }
}

/// A relative, normalised path inside the tree: `.` for the root, otherwise `/`-separated
/// segments, none empty, `.` or `..`, no NUL or backslash, no leading or trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RelPath(String);

text_newtype!(RelPath, "The text.", FromStr);

impl RelPath {
    /// The tree root, `.`.
    #[must_use]
    pub fn root() -> Self {
        Self(".".to_owned())
    }

    /// Whether this is the root.
    #[must_use]
    pub fn is_root(&self) -> bool {
        self.0 == "."
    }

    /// The segments (none for the root).
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/').filter(|_| !self.is_root())
    }

    /// Checks `s` as a path inside the tree (the root `.` excluded): the rule tar entry names
    /// follow too.
    ///
    /// # Errors
    /// A static description of the broken rule.
    pub fn check_inner(s: &str) -> Result<(), &'static str> {
        if s.is_empty() {
            return Err("empty");
        }
        if s.len() > MAX_REL_PATH_BYTES {
            return Err("longer than 4096 bytes");
        }
        if s.contains('\0') {
            return Err("contains NUL");
        }
        if s.contains('\\') {
            return Err("contains a backslash");
        }
        if s.starts_with('/') {
            return Err("absolute");
        }
        for seg in s.split('/') {
            match seg {
                "" => return Err("empty segment"),
                "." | ".." => return Err("dot segment"),
                _ if seg.len() > MAX_SEGMENT_BYTES => return Err("segment longer than 255 bytes"),
                _ => {}
            }
        }
        Ok(())
    }
}

impl TryFrom<String> for RelPath {
    type Error = GateRunnerError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s == "." {
            return Ok(Self(s));
        }
        Self::check_inner(&s).map_err(|rule| field("path", rule))?;
        Ok(Self(s))
    }
}

/// The child's argv: 1..=256 items, each at most 4096 bytes, no NUL, the first non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Argv(Vec<String>);

impl Argv {
    /// The items.
    #[must_use]
    pub fn items(&self) -> &[String] {
        &self.0
    }
}

impl TryFrom<Vec<String>> for Argv {
    type Error = GateRunnerError;
    fn try_from(items: Vec<String>) -> Result<Self, Self::Error> {
        match items.first() {
            None => return Err(field("argv", "empty")),
            Some(first) if first.is_empty() => return Err(field("argv", "empty program")),
            Some(_) => {}
        }
        if items.len() > MAX_ARGV_ITEMS {
            return Err(field("argv", "more than 256 items"));
        }
        for item in &items {
            if item.len() > MAX_ARG_BYTES {
                return Err(field("argv", "item longer than 4096 bytes"));
            }
            if item.contains('\0') {
                return Err(field("argv", "item contains NUL"));
            }
        }
        Ok(Self(items))
    }
}

impl From<Argv> for Vec<String> {
    fn from(a: Argv) -> Self {
        a.0
    }
}

/// The child's whole environment, in order: keys `[A-Z_][A-Z0-9_]*` (at most 128 bytes, no
/// duplicates), values at most 4096 bytes without NUL, at most 128 entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<(String, String)>", into = "Vec<(String, String)>")]
pub struct Env(Vec<(String, String)>);

impl Env {
    /// The entries, in the order given.
    #[must_use]
    pub fn entries(&self) -> &[(String, String)] {
        &self.0
    }

    /// Checks an environment key.
    #[must_use]
    pub fn is_valid_key(key: &str) -> bool {
        let mut bytes = key.bytes();
        key.len() <= MAX_ENV_KEY_BYTES
            && bytes
                .next()
                .is_some_and(|b| b.is_ascii_uppercase() || b == b'_')
            && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    }
}

impl TryFrom<Vec<(String, String)>> for Env {
    type Error = GateRunnerError;
    fn try_from(entries: Vec<(String, String)>) -> Result<Self, Self::Error> {
        if entries.len() > MAX_ENV_ENTRIES {
            return Err(field("env", "more than 128 entries"));
        }
        let mut keys = BTreeSet::new();
        for (k, v) in &entries {
            if !Self::is_valid_key(k) {
                return Err(field(
                    "env",
                    "key is not [A-Z_][A-Z0-9_]* of at most 128 bytes",
                ));
            }
            if !keys.insert(k.as_str()) {
                return Err(field("env", "duplicate key"));
            }
            if v.len() > MAX_ARG_BYTES {
                return Err(field("env", "value longer than 4096 bytes"));
            }
            if v.contains('\0') {
                return Err(field("env", "value contains NUL"));
            }
        }
        Ok(Self(entries))
    }
}

impl From<Env> for Vec<(String, String)> {
    fn from(e: Env) -> Self {
        e.0
    }
}

/// Where the runner reads JUnit XML after the child exits, and its caps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawJunitSpec", into = "RawJunitSpec")]
pub struct JunitSpec {
    path: RelPath,
    max_bytes: u64,
    max_cases: u64,
    max_depth: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJunitSpec {
    path: RelPath,
    max_bytes: u64,
    max_cases: u64,
    max_depth: u64,
}

impl JunitSpec {
    /// Checks the caps: `path` not the root, `max_bytes` 1..=64 MiB, `max_cases` 1..=1500,
    /// `max_depth` 2..=64.
    ///
    /// # Errors
    /// `GATE_WIRE_FIELD` naming the cap.
    pub fn new(
        path: RelPath,
        max_bytes: u64,
        max_cases: u64,
        max_depth: u64,
    ) -> Result<Self, GateRunnerError> {
        if path.is_root() {
            return Err(field("junit.path", "must name a file"));
        }
        if !(1..=MAX_JUNIT_BYTES).contains(&max_bytes) {
            return Err(field("junit.max_bytes", "outside 1..=67108864"));
        }
        if !(1..=MAX_JUNIT_CASES).contains(&max_cases) {
            return Err(field("junit.max_cases", "outside 1..=1500"));
        }
        if !(2..=MAX_JUNIT_DEPTH).contains(&max_depth) {
            return Err(field("junit.max_depth", "outside 2..=64"));
        }
        Ok(Self {
            path,
            max_bytes,
            max_cases,
            max_depth,
        })
    }

    /// The file, relative to the tree root.
    #[must_use]
    pub fn path(&self) -> &RelPath {
        &self.path
    }
    /// Largest file read.
    #[must_use]
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
    /// Most cases listed.
    #[must_use]
    pub fn max_cases(&self) -> u64 {
        self.max_cases
    }
    /// Deepest nesting accepted.
    #[must_use]
    pub fn max_depth(&self) -> u64 {
        self.max_depth
    }
}

impl TryFrom<RawJunitSpec> for JunitSpec {
    type Error = GateRunnerError;
    fn try_from(r: RawJunitSpec) -> Result<Self, Self::Error> {
        Self::new(r.path, r.max_bytes, r.max_cases, r.max_depth)
    }
}

impl From<JunitSpec> for RawJunitSpec {
    fn from(j: JunitSpec) -> Self {
        Self {
            path: j.path,
            max_bytes: j.max_bytes,
            max_cases: j.max_cases,
            max_depth: j.max_depth,
        }
    }
}

/// The tree's declared totals: entries (directories and files) and summed file bytes. The
/// stream must match them exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawTreeTotals", into = "RawTreeTotals")]
pub struct TreeTotals {
    entries: u64,
    bytes: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTreeTotals {
    entries: u64,
    bytes: u64,
}

impl TreeTotals {
    /// Checks `entries <= 1_000_000` and `bytes <= 16 GiB`.
    ///
    /// # Errors
    /// `GATE_WIRE_FIELD` naming the cap.
    pub fn new(entries: u64, bytes: u64) -> Result<Self, GateRunnerError> {
        if entries > MAX_TREE_ENTRIES {
            return Err(field("tree.entries", "above 1000000"));
        }
        if bytes > MAX_TREE_BYTES {
            return Err(field("tree.bytes", "above 17179869184"));
        }
        if bytes > 0 && entries == 0 {
            return Err(field("tree.bytes", "bytes without entries"));
        }
        Ok(Self { entries, bytes })
    }
    /// Declared entry count.
    #[must_use]
    pub fn entries(&self) -> u64 {
        self.entries
    }
    /// Declared summed file bytes.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl TryFrom<RawTreeTotals> for TreeTotals {
    type Error = GateRunnerError;
    fn try_from(r: RawTreeTotals) -> Result<Self, Self::Error> {
        Self::new(r.entries, r.bytes)
    }
}

impl From<TreeTotals> for RawTreeTotals {
    fn from(t: TreeTotals) -> Self {
        Self {
            entries: t.entries,
            bytes: t.bytes,
        }
    }
}

/// The child's time limits and the log tail size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    wall_ms: u64,
    kill_grace_ms: u64,
    log_tail_bytes: u64,
}

impl RunLimits {
    /// Checks `wall_ms` 1..=24 h, `kill_grace_ms` 0..=60 s, `log_tail_bytes` 0..=256 KiB.
    ///
    /// # Errors
    /// `GATE_WIRE_FIELD` naming the cap.
    pub fn new(
        wall_ms: u64,
        kill_grace_ms: u64,
        log_tail_bytes: u64,
    ) -> Result<Self, GateRunnerError> {
        if !(1..=MAX_WALL_MS).contains(&wall_ms) {
            return Err(field("wall_ms", "outside 1..=86400000"));
        }
        if kill_grace_ms > MAX_KILL_GRACE_MS {
            return Err(field("kill_grace_ms", "above 60000"));
        }
        if log_tail_bytes > MAX_LOG_TAIL_BYTES {
            return Err(field("log_tail_bytes", "above 262144"));
        }
        Ok(Self {
            wall_ms,
            kill_grace_ms,
            log_tail_bytes,
        })
    }
    /// The child's deadline.
    #[must_use]
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }
    /// SIGTERM to SIGKILL.
    #[must_use]
    pub fn kill_grace_ms(&self) -> u64 {
        self.kill_grace_ms
    }
    /// Log tail kept.
    #[must_use]
    pub fn log_tail_bytes(&self) -> u64 {
        self.log_tail_bytes
    }
}

/// The request frame (host → runner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawRequest", into = "RawRequest")]
pub struct GateRequest {
    nonce: Nonce,
    argv: Argv,
    cwd: RelPath,
    env: Env,
    limits: RunLimits,
    junit: Option<JunitSpec>,
    tree: TreeTotals,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    version: u64,
    nonce: Nonce,
    argv: Argv,
    cwd: RelPath,
    env: Env,
    wall_ms: u64,
    kill_grace_ms: u64,
    log_tail_bytes: u64,
    junit: Option<JunitSpec>,
    tree: TreeTotals,
}

/// Upper bound of a report's encoded size for a request (the log tail in base64, every case id
/// fully escaped, and the fixed fields), so a valid request can never make the runner exceed
/// [`MAX_REPORT_BYTES`].
fn worst_case_report_bytes(log_tail_bytes: u64, junit: Option<&JunitSpec>) -> u64 {
    let log = log_tail_bytes.div_ceil(3) * 4;
    // `{"id":"…","outcome":"skipped"},` with every id byte a two-byte escape.
    let per_case = 2 * MAX_CASE_ID_BYTES as u64 + 40;
    let cases = junit.map_or(0, |j| j.max_cases() * per_case);
    log + cases + 1024
}

impl GateRequest {
    /// Builds a request from checked parts; checks that its worst-case report fits the report cap.
    ///
    /// # Errors
    /// `GATE_WIRE_FIELD` when the log tail and case caps together could exceed the report cap.
    pub fn new(
        nonce: Nonce,
        argv: Argv,
        cwd: RelPath,
        env: Env,
        limits: RunLimits,
        junit: Option<JunitSpec>,
        tree: TreeTotals,
    ) -> Result<Self, GateRunnerError> {
        if worst_case_report_bytes(limits.log_tail_bytes(), junit.as_ref())
            > MAX_REPORT_BYTES as u64
        {
            return Err(field(
                "log_tail_bytes",
                "log tail and junit.max_cases together exceed the report cap",
            ));
        }
        Ok(Self {
            nonce,
            argv,
            cwd,
            env,
            limits,
            junit,
            tree,
        })
    }

    /// Parses a request frame's payload strictly.
    ///
    /// # Errors
    /// `GATE_WIRE_JSON` for anything but strict JSON of this shape, `GATE_WIRE_VERSION`,
    /// `GATE_WIRE_FIELD`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, GateRunnerError> {
        parse_strict(bytes, MAX_REQUEST_BYTES)
    }

    /// The canonical JSON payload.
    ///
    /// # Errors
    /// `GATE_WIRE_FRAME_LENGTH` if it exceeds `MAX_REQUEST_BYTES`.
    pub fn to_json(&self) -> Result<Vec<u8>, GateRunnerError> {
        to_canonical(self, MAX_REQUEST_BYTES)
    }

    /// Writes the request frame.
    ///
    /// # Errors
    /// As [`to_json`](Self::to_json); I/O errors.
    pub fn write_frame(&self, w: impl Write) -> Result<(), GateRunnerError> {
        write_frame(w, &self.to_json()?, MAX_REQUEST_BYTES)
    }

    /// Reads one request frame (the tar stream follows it on the same reader).
    ///
    /// # Errors
    /// The framing and parsing errors.
    pub fn read_frame(r: impl Read) -> Result<Self, GateRunnerError> {
        Self::from_json(&read_frame(r, MAX_REQUEST_BYTES)?)
    }

    /// The nonce.
    #[must_use]
    pub fn nonce(&self) -> &Nonce {
        &self.nonce
    }
    /// The child's argv.
    #[must_use]
    pub fn argv(&self) -> &Argv {
        &self.argv
    }
    /// The child's working directory, relative to the tree root.
    #[must_use]
    pub fn cwd(&self) -> &RelPath {
        &self.cwd
    }
    /// The child's whole environment.
    #[must_use]
    pub fn env(&self) -> &Env {
        &self.env
    }
    /// Time limits and log tail size.
    #[must_use]
    pub fn limits(&self) -> RunLimits {
        self.limits
    }
    /// The JUnit file to read, if any.
    #[must_use]
    pub fn junit(&self) -> Option<&JunitSpec> {
        self.junit.as_ref()
    }
    /// The tree's declared totals.
    #[must_use]
    pub fn tree(&self) -> TreeTotals {
        self.tree
    }
}

impl TryFrom<RawRequest> for GateRequest {
    type Error = GateRunnerError;
    fn try_from(r: RawRequest) -> Result<Self, Self::Error> {
        check_version(r.version)?;
        let limits = RunLimits::new(r.wall_ms, r.kill_grace_ms, r.log_tail_bytes)?;
        Self::new(r.nonce, r.argv, r.cwd, r.env, limits, r.junit, r.tree)
    }
}

impl From<GateRequest> for RawRequest {
    fn from(g: GateRequest) -> Self {
        Self {
            version: u64::from(WIRE_VERSION),
            nonce: g.nonce,
            argv: g.argv,
            cwd: g.cwd,
            env: g.env,
            wall_ms: g.limits.wall_ms,
            kill_grace_ms: g.limits.kill_grace_ms,
            log_tail_bytes: g.limits.log_tail_bytes,
            junit: g.junit,
            tree: g.tree,
        }
    }
}

fn check_version(found: u64) -> Result<(), GateRunnerError> {
    if found == u64::from(WIRE_VERSION) {
        Ok(())
    } else {
        Err(GateRunnerError::Version {
            found,
            expected: WIRE_VERSION,
        })
    }
}

/// How the run ended, as the runner saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The child exited (or was killed by a signal) before the deadline.
    Completed,
    /// The deadline passed; the runner killed the child's process group.
    TimedOut,
    /// The runner could not run the gate (bad tree, spawn failure); `runner_error` says why.
    RunnerError,
}

/// The child's exit as the runner's own `wait` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ExitStatus {
    /// Exited with this code (0..=255).
    Code(i32),
    /// Killed by this signal (1..=64).
    Signal(i32),
}

impl ExitStatus {
    fn check(self) -> Result<Self, GateRunnerError> {
        match self {
            Self::Code(c) if !(0..=255).contains(&c) => Err(field("exit.code", "outside 0..=255")),
            Self::Signal(s) if !(1..=64).contains(&s) => {
                Err(field("exit.signal", "outside 1..=64"))
            }
            _ => Ok(self),
        }
    }
}

/// A stable error code: `[A-Z][A-Z0-9_]*`, at most 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StableCode(String);

text_newtype!(StableCode, "The code.", FromStr);

impl TryFrom<String> for StableCode {
    type Error = GateRunnerError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        let mut b = s.bytes();
        let ok = s.len() <= MAX_CODE_BYTES
            && b.next().is_some_and(|c| c.is_ascii_uppercase())
            && b.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == b'_');
        if ok {
            Ok(Self(s))
        } else {
            Err(field("code", "must be [A-Z][A-Z0-9_]* of at most 64 bytes"))
        }
    }
}

/// The bounded log: how many bytes the child wrote to its shared stdout/stderr pipe, and the last
/// bytes of it (at most the request's `log_tail_bytes`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawLog", into = "RawLog")]
pub struct LogTail {
    total_bytes: u64,
    tail: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    total_bytes: u64,
    tail_b64: String,
}

impl LogTail {
    /// Checks `tail.len() <= min(total_bytes, 256 KiB)`.
    ///
    /// # Errors
    /// `GATE_WIRE_FIELD`.
    pub fn new(total_bytes: u64, tail: Vec<u8>) -> Result<Self, GateRunnerError> {
        let len = tail.len() as u64;
        if len > MAX_LOG_TAIL_BYTES {
            return Err(field("log.tail_b64", "tail longer than 262144 bytes"));
        }
        if len > total_bytes {
            return Err(field("log.tail_b64", "tail longer than total_bytes"));
        }
        Ok(Self { total_bytes, tail })
    }
    /// Total bytes the child wrote.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }
    /// The raw tail (untrusted bytes: display only through an escaping type).
    #[must_use]
    pub fn tail(&self) -> &[u8] {
        &self.tail
    }
}

impl TryFrom<RawLog> for LogTail {
    type Error = GateRunnerError;
    fn try_from(r: RawLog) -> Result<Self, Self::Error> {
        // Decoded size is checked before decoding (3 bytes per 4 characters).
        if r.tail_b64.len() as u64 > MAX_LOG_TAIL_BYTES.div_ceil(3) * 4 {
            return Err(field("log.tail_b64", "tail longer than 262144 bytes"));
        }
        let tail = base64::engine::general_purpose::STANDARD
            .decode(r.tail_b64.as_bytes())
            .map_err(|_| field("log.tail_b64", "not canonical padded base64"))?;
        Self::new(r.total_bytes, tail)
    }
}

impl From<LogTail> for RawLog {
    fn from(l: LogTail) -> Self {
        Self {
            total_bytes: l.total_bytes,
            tail_b64: base64::engine::general_purpose::STANDARD.encode(&l.tail),
        }
    }
}

/// One JUnit test case's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaseOutcome {
    Passed,
    Failed,
    Error,
    Skipped,
}

/// A test-case id, `classname::name` (or `name` alone when there is no class name): 1..=256
/// bytes, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CaseId(String);

text_newtype!(
    CaseId,
    "The id text (untrusted: display only through an escaping type)."
);

impl TryFrom<String> for CaseId {
    type Error = GateRunnerError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s.is_empty() || s.len() > MAX_CASE_ID_BYTES {
            return Err(field("case.id", "outside 1..=256 bytes"));
        }
        if s.chars().any(char::is_control) {
            return Err(field("case.id", "contains a control character"));
        }
        Ok(Self(s))
    }
}

/// One test case in a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JunitCase {
    pub id: CaseId,
    pub outcome: CaseOutcome,
}

/// What the runner found at the JUnit path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", deny_unknown_fields)]
pub enum JunitReport {
    /// No regular file at the path.
    Missing,
    /// The file broke a rule (size, DOCTYPE, depth, syntax, …).
    Invalid { code: StableCode },
    /// The cases in document order, at most `max_cases`; `truncated` when the file had more.
    Ok {
        cases: Vec<JunitCase>,
        truncated: bool,
    },
}

/// The report frame (runner → host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawReport", into = "RawReport")]
pub struct GateReport {
    nonce: Nonce,
    status: RunStatus,
    runner_error: Option<StableCode>,
    exit: Option<ExitStatus>,
    wall_ms: u64,
    log: LogTail,
    junit: Option<JunitReport>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReport {
    version: u64,
    nonce: Nonce,
    status: RunStatus,
    runner_error: Option<StableCode>,
    exit: Option<ExitStatus>,
    wall_ms: u64,
    log: LogTail,
    junit: Option<JunitReport>,
}

impl GateReport {
    /// Builds a report; checks that its fields agree: `runner_error` is set exactly when the
    /// status is `runner_error`; `completed` and `timed_out` carry the exit status; a JUnit case
    /// list is at most `MAX_JUNIT_CASES` (1,500) long.
    ///
    /// # Errors
    /// `GATE_WIRE_REPORT_SHAPE` or `GATE_WIRE_FIELD`.
    pub fn new(
        nonce: Nonce,
        status: RunStatus,
        runner_error: Option<StableCode>,
        exit: Option<ExitStatus>,
        wall_ms: u64,
        log: LogTail,
        junit: Option<JunitReport>,
    ) -> Result<Self, GateRunnerError> {
        let shape = |rule| GateRunnerError::ReportShape { rule };
        match (status, runner_error.is_some(), exit.is_some()) {
            (RunStatus::RunnerError, false, _) => {
                return Err(shape("runner_error status without a code"));
            }
            (RunStatus::Completed | RunStatus::TimedOut, true, _) => {
                return Err(shape("runner_error code without the runner_error status"));
            }
            (RunStatus::Completed | RunStatus::TimedOut, false, false) => {
                return Err(shape("completed or timed_out without an exit status"));
            }
            _ => {}
        }
        let exit = exit.map(ExitStatus::check).transpose()?;
        if let Some(JunitReport::Ok { cases, .. }) = &junit
            && cases.len() as u64 > MAX_JUNIT_CASES
        {
            return Err(field("junit.cases", "more than 1500 cases"));
        }
        Ok(Self {
            nonce,
            status,
            runner_error,
            exit,
            wall_ms,
            log,
            junit,
        })
    }

    /// Parses a report frame's payload: strict JSON, then the canonical encoding is required
    /// (the payload must equal [`to_json`](Self::to_json) of what it parses to).
    ///
    /// # Errors
    /// `GATE_WIRE_JSON`, `GATE_WIRE_VERSION`, `GATE_WIRE_FIELD`, `GATE_WIRE_REPORT_SHAPE`,
    /// `GATE_WIRE_NOT_CANONICAL`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, GateRunnerError> {
        let report: Self = parse_strict(bytes, MAX_REPORT_BYTES)?;
        if report.to_json()? != bytes {
            return Err(GateRunnerError::NotCanonical);
        }
        Ok(report)
    }

    /// The canonical JSON payload.
    ///
    /// # Errors
    /// `GATE_WIRE_FRAME_LENGTH` if it exceeds [`MAX_REPORT_BYTES`].
    pub fn to_json(&self) -> Result<Vec<u8>, GateRunnerError> {
        to_canonical(self, MAX_REPORT_BYTES)
    }

    /// Writes the report frame.
    ///
    /// # Errors
    /// As [`to_json`](Self::to_json); I/O errors.
    pub fn write_frame(&self, w: impl Write) -> Result<(), GateRunnerError> {
        write_frame(w, &self.to_json()?, MAX_REPORT_BYTES)
    }

    /// Reads the whole report stream: exactly one frame, then EOF. The caller must bound the
    /// reader's time; its size is bounded here (4 + [`MAX_REPORT_BYTES`] + 1 bytes at most).
    ///
    /// # Errors
    /// `GATE_WIRE_TRAILING_DATA` when anything follows the frame; the framing and parsing errors.
    pub fn read_stream(mut r: impl Read) -> Result<Self, GateRunnerError> {
        let payload = read_frame(&mut r, MAX_REPORT_BYTES)?;
        let mut probe = [0u8; 1];
        loop {
            match r.read(&mut probe) {
                Ok(0) => break,
                Ok(_) => return Err(GateRunnerError::TrailingData),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Self::from_json(&payload)
    }

    /// The nonce the runner echoed (compare with the request's).
    #[must_use]
    pub fn nonce(&self) -> &Nonce {
        &self.nonce
    }
    /// How the run ended.
    #[must_use]
    pub fn status(&self) -> RunStatus {
        self.status
    }
    /// The runner's stable error code, for `runner_error`.
    #[must_use]
    pub fn runner_error(&self) -> Option<&StableCode> {
        self.runner_error.as_ref()
    }
    /// The child's exit, from the runner's own wait.
    #[must_use]
    pub fn exit(&self) -> Option<ExitStatus> {
        self.exit
    }
    /// The child's wall time (request read to child reaped).
    #[must_use]
    pub fn wall_ms(&self) -> u64 {
        self.wall_ms
    }
    /// The bounded log.
    #[must_use]
    pub fn log(&self) -> &LogTail {
        &self.log
    }
    /// What was found at the JUnit path (`None` when the request named none, or on a runner
    /// error before the child ran).
    #[must_use]
    pub fn junit(&self) -> Option<&JunitReport> {
        self.junit.as_ref()
    }
}

impl TryFrom<RawReport> for GateReport {
    type Error = GateRunnerError;
    fn try_from(r: RawReport) -> Result<Self, Self::Error> {
        check_version(r.version)?;
        Self::new(
            r.nonce,
            r.status,
            r.runner_error,
            r.exit,
            r.wall_ms,
            r.log,
            r.junit,
        )
    }
}

impl From<GateReport> for RawReport {
    fn from(g: GateReport) -> Self {
        Self {
            version: u64::from(WIRE_VERSION),
            nonce: g.nonce,
            status: g.status,
            runner_error: g.runner_error,
            exit: g.exit,
            wall_ms: g.wall_ms,
            log: g.log,
            junit: g.junit,
        }
    }
}

/// Strict parse: the shared strict JSON reader (duplicate keys, BOM, depth, trailing data
/// refused), then our own type checks. A check failure inside `try_from` surfaces as a shape
/// error naming the JSON path of the refused value.
fn parse_strict<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    max: usize,
) -> Result<T, GateRunnerError> {
    match vocab::from_slice_strict::<T>(bytes, max) {
        Ok(v) => Ok(v),
        Err(e) => Err(GateRunnerError::Json(e)),
    }
}

/// The canonical encoding of `value` (vocab's: compact, object keys sorted at every depth), or
/// `GATE_WIRE_FRAME_LENGTH` when it is empty or exceeds `max` bytes.
fn to_canonical<T: Serialize>(value: &T, max: usize) -> Result<Vec<u8>, GateRunnerError> {
    let value = serde_json::to_value(value).map_err(|_| GateRunnerError::ReportShape {
        rule: "value cannot be encoded as JSON",
    })?;
    let out = vocab::canonical_bytes(&value);
    if out.is_empty() || out.len() > max {
        return Err(GateRunnerError::FrameLength {
            length: out.len() as u64,
            limit: max,
        });
    }
    Ok(out)
}

/// Writes one frame: `u32` big-endian length (1..=`max`), then `payload`, then flushes.
///
/// # Errors
/// `GATE_WIRE_FRAME_LENGTH` for an empty or oversize payload; I/O errors.
pub fn write_frame(mut w: impl Write, payload: &[u8], max: usize) -> Result<(), GateRunnerError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l >= 1 && (*l as usize) <= max)
        .ok_or(GateRunnerError::FrameLength {
            length: payload.len() as u64,
            limit: max,
        })?;
    let mut frame = Vec::with_capacity(payload.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame: the length is checked against 1..=`max` before anything is allocated.
///
/// # Errors
/// `GATE_WIRE_FRAME_LENGTH`, `GATE_WIRE_FRAME_TRUNCATED`; I/O errors.
pub fn read_frame(mut r: impl Read, max: usize) -> Result<Vec<u8>, GateRunnerError> {
    let mut len = [0u8; 4];
    read_exact_or_truncated(&mut r, &mut len)?;
    let len = u32::from_be_bytes(len);
    if len == 0 || len as usize > max {
        return Err(GateRunnerError::FrameLength {
            length: u64::from(len),
            limit: max,
        });
    }
    let mut payload = vec![0u8; len as usize];
    read_exact_or_truncated(&mut r, &mut payload)?;
    Ok(payload)
}

fn read_exact_or_truncated(r: &mut impl Read, buf: &mut [u8]) -> Result<(), GateRunnerError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            GateRunnerError::FrameTruncated
        } else {
            e.into()
        }
    })
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
