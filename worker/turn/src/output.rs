//! The container's output contract (reference §10.6): one strict JSON object with exactly
//! `proposal` and `workspace_archive_base64`. Every check here fails closed with
//! `REPOSITORY_DOCKER_INVALID_OUTPUT` and a fixed reason, never quoting the cause (it may contain
//! source). The result is a [`VerifiedOutput`]: a proposal rebuilt from host-owned text, the
//! archive read strictly once, and the usage kept apart.
//!
//! # Memory
//! The host's memory follows our limits, not the agent's JSON. A one-pass pre-scan
//! (`output_scan.rs`) refuses any document over the structural bounds below *before* a typed
//! value exists; the typed parse then builds only bounded structures (no `serde_json::Value`
//! tree anywhere), drops every agent-written text after checking its type and size, decodes the
//! archive text in place inside the stdout buffer, and hands that same buffer to the archive
//! reader. Peak memory is the stdout buffer plus the claimed contents (bounded in total by the
//! archive budget), whatever shape the output has.

use std::collections::BTreeSet;
use std::fmt;

use base64::Engine as _;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use snapshot::{
    ApprovedExecutionContext, FileOp, ProposalStatus, ProposedFileChange, RepoPath,
    StagedPatchProposal,
};

use crate::acp_usage::IsolatedAcpUsage;
use crate::error::TurnError;
use crate::request::CodingWorkerRequest;

#[path = "output_scan.rs"]
mod scan;

/// The provider ID every sanitised proposal carries.
pub const PROVIDER_ID: &str = "acp_docker";
/// Fixed host summary of a turn.
pub const SANITIZED_SUMMARY: &str = "Isolated repository coding turn.";
/// Fixed host rationale of a turn.
pub const SANITIZED_RATIONALE: &str = "Pending host verification.";

/// Deepest accepted nesting in a turn output (the contract itself needs 4).
pub const MAX_OUTPUT_DEPTH: usize = 64;
/// Most JSON values a turn output may hold (a real one holds a few hundred).
pub const MAX_OUTPUT_VALUES: usize = 65_536;
/// Longest object key in a turn output, in bytes.
pub const MAX_OUTPUT_KEY_BYTES: usize = 1024;
/// Longest string in a turn output other than the archive text and a change's content, in bytes
/// (paths, ids, and the agent's summary, rationale, error and event texts, which are dropped).
pub const MAX_OUTPUT_TEXT_BYTES: usize = 65_536;
/// Most `changed_files` entries, and most `owned_paths` entries, a turn output may claim: twice
/// the most files a turn can touch, so no acceptable output is refused by it.
pub const MAX_OUTPUT_PATHS: usize = 2 * snapshot::MAX_REPOSITORY_FILES;

/// What the output is checked against: the approved selection and grants and the archive budget.
#[derive(Debug, Clone)]
pub struct OutputLimits {
    pub max_archive_bytes: usize,
    pub selected: BTreeSet<RepoPath>,
    pub creates: BTreeSet<RepoPath>,
    pub deletes: BTreeSet<RepoPath>,
}

impl OutputLimits {
    /// The limits of one turn.
    #[must_use]
    pub fn for_turn(
        request: &CodingWorkerRequest,
        context: &ApprovedExecutionContext,
        max_archive_bytes: usize,
    ) -> Self {
        Self {
            max_archive_bytes,
            selected: request.files.keys().cloned().collect(),
            creates: context.create_paths().iter().cloned().collect(),
            deletes: context.delete_paths().iter().cloned().collect(),
        }
    }

    /// Longest accepted base64 text for the archive budget.
    #[must_use]
    pub fn max_base64_len(&self) -> usize {
        4 * self.max_archive_bytes.div_ceil(3)
    }

    fn scan_limits(&self) -> scan::ScanLimits {
        scan::ScanLimits {
            max_depth: MAX_OUTPUT_DEPTH,
            max_values: MAX_OUTPUT_VALUES,
            max_key_bytes: MAX_OUTPUT_KEY_BYTES,
            max_text_bytes: MAX_OUTPUT_TEXT_BYTES,
            max_archive_text_bytes: self.max_base64_len(),
            // Claimed contents must equal archive entries, which the archive budget bounds in
            // total (the envelope is STORED-only).
            max_content_bytes: self.max_archive_bytes,
        }
    }
}

/// A turn's output after every check: the host-owned proposal, the archive read strictly once
/// (`None` for an unfinished turn, the empty marker or a canonical envelope whose entry set the
/// grants allow), and the usage measurement. Built only by [`parse_turn_output`]; the fields are
/// private so a value of this type is always a verified one.
#[derive(Debug, Clone)]
pub struct VerifiedOutput {
    proposal: StagedPatchProposal,
    archive: Option<archive::VerifiedArchive>,
    usage: Option<IsolatedAcpUsage>,
}

impl VerifiedOutput {
    /// The sanitised proposal: fresh ID, fixed provider and texts; status, changed files and
    /// owned paths (each a canonical path) from the agent.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn proposal(&self) -> &StagedPatchProposal {
        &self.proposal
    }

    /// The verified archive; `Some` exactly when the proposal's status is `completed`.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn archive(&self) -> Option<&archive::VerifiedArchive> {
        self.archive.as_ref()
    }

    /// The container's usage report, when it was present and valid.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn usage(&self) -> Option<&IsolatedAcpUsage> {
        self.usage.as_ref()
    }

    /// Takes the parts apart: proposal, archive, usage.
    #[must_use]
    pub fn into_parts(
        self,
    ) -> (
        StagedPatchProposal,
        Option<archive::VerifiedArchive>,
        Option<IsolatedAcpUsage>,
    ) {
        (self.proposal, self.archive, self.usage)
    }
}

fn invalid(reason: &'static str) -> TurnError {
    TurnError::InvalidOutput { reason }
}

const BOUNDS: &str = "output exceeds the structure bounds";
const NOT_JSON: &str = "output is not strict JSON";
const KEYS: &str = "output keys differ from the contract";
const NOT_OBJECT: &str = "proposal is not an object";
const MODEL: &str = "proposal does not match the model";
const ARCHIVE_BUDGET: &str = "archive exceeds the budget";
const ARCHIVE_BASE64: &str = "archive is not strict base64";
const ARCHIVE_TYPE: &str = "archive is neither null nor a string";
const CHANGE_PATH: &str = "change path is unsafe";
const OWNED_PATH: &str = "owned path is unsafe";

/// Custom serde errors carry one of the reasons above behind this marker, so the typed parse can
/// say which rule failed without quoting anything.
const TAG: &str = "\u{1}reason:";

fn tagged<E: de::Error>(reason: &'static str) -> E {
    E::custom(format_args!("{TAG}{reason}\u{1}"))
}

fn reason_of(e: &serde_json::Error) -> &'static str {
    let text = e.to_string();
    [
        BOUNDS,
        KEYS,
        NOT_OBJECT,
        ARCHIVE_BUDGET,
        ARCHIVE_BASE64,
        ARCHIVE_TYPE,
        CHANGE_PATH,
        OWNED_PATH,
    ]
    .into_iter()
    .find(|r| text.contains(&format!("{TAG}{r}\u{1}")))
    .unwrap_or(if e.is_data() { MODEL } else { NOT_JSON })
}

/// Reference `_parse_turn_output`, with bounded memory (see the module docs). Takes the stdout
/// buffer by value: the archive is decoded into it and read from it in place.
///
/// # Errors
/// `REPOSITORY_DOCKER_INVALID_OUTPUT` with a fixed reason.
///
/// # Security
/// Nothing the container printed is quoted, kept as text, or trusted: every path is checked as a
/// canonical repository path, the archive is read strictly and its entry set and the claimed
/// operations are checked against the grants.
pub fn parse_turn_output(
    mut stdout: Vec<u8>,
    limits: &OutputLimits,
) -> Result<VerifiedOutput, TurnError> {
    scan::scan(&stdout, &limits.scan_limits()).map_err(|e| {
        invalid(match e {
            scan::ScanError::Syntax | scan::ScanError::DuplicateKey => NOT_JSON,
            scan::ScanError::Bounds => BOUNDS,
            scan::ScanError::ArchiveText | scan::ScanError::Content => ARCHIVE_BUDGET,
            scan::ScanError::ArchiveEncoding => ARCHIVE_BASE64,
        })
    })?;
    let wire = {
        let mut de = serde_json::Deserializer::from_slice(&stdout);
        let seed = TopSeed {
            base: stdout.as_ptr().addr(),
            max_base64_len: limits.max_base64_len(),
        };
        let wire = seed
            .deserialize(&mut de)
            .map_err(|e| invalid(reason_of(&e)))?;
        de.end().map_err(|_| invalid(NOT_JSON))?;
        wire
    };
    let TopWire {
        proposal: claimed,
        archive: archive_text,
    } = wire;
    if claimed.status == ProposalStatus::Completed {
        if claimed.changed_files.is_empty() {
            return Err(invalid("completed turn without changes"));
        }
    } else if !matches!(archive_text, ArchiveText::Null) || !claimed.changed_files.is_empty() {
        return Err(invalid("unfinished turn returned changes"));
    }
    let archive = match archive_text {
        ArchiveText::Null => None,
        ArchiveText::Span { start, len } => {
            decode_in_place(&mut stdout, start, len)?;
            stdout.shrink_to_fit();
            Some(stdout)
        }
    };
    let archive = match archive {
        None => None,
        Some(bytes) => {
            let data = check_archive(bytes, &claimed, limits)?;
            Some(data)
        }
    };
    if claimed.status == ProposalStatus::Completed && archive.is_none() {
        return Err(invalid("completed turn without an archive"));
    }
    Ok(VerifiedOutput {
        usage: claimed.usage,
        proposal: sanitize(claimed.status, claimed.changed_files, claimed.owned_paths),
        archive,
    })
}

/// Decodes the strict standard base64 at `buf[start..start + len]` into `buf[..n]` and truncates
/// `buf` to `n`, chunk by chunk (a 4-character group becomes 3 bytes, so the write position never
/// passes the read position). Equivalent to decoding the whole text at once: every chunk but the
/// last is a padding-free multiple of 4 characters.
fn decode_in_place(buf: &mut Vec<u8>, start: usize, len: usize) -> Result<(), TurnError> {
    const CHUNK: usize = 4096;
    let engine = &base64::engine::general_purpose::STANDARD;
    let mut out = [0_u8; CHUNK / 4 * 3];
    let mut read = start;
    let end = start.checked_add(len).ok_or(invalid(ARCHIVE_BASE64))?;
    let mut written = 0_usize;
    while read < end {
        let next = end.min(read.saturating_add(CHUNK));
        let chunk = buf.get(read..next).ok_or(invalid(ARCHIVE_BASE64))?;
        let n = engine
            .decode_slice(chunk, &mut out)
            .map_err(|_| invalid(ARCHIVE_BASE64))?;
        let decoded = out.get(..n).ok_or(invalid(ARCHIVE_BASE64))?;
        buf.get_mut(written..written + n)
            .ok_or(invalid(ARCHIVE_BASE64))?
            .copy_from_slice(decoded);
        written += n;
        read = next;
    }
    buf.truncate(written);
    Ok(())
}

/// The archive crate's rule for the empty marker (reference §5.6), over this turn's grants.
fn empty_marker_permitted(limits: &OutputLimits) -> bool {
    let paths = |set: &BTreeSet<RepoPath>| set.iter().cloned().collect::<Vec<_>>();
    archive::empty_marker_permitted(
        &paths(&limits.selected),
        &paths(&limits.creates),
        &paths(&limits.deletes),
    )
}

/// Reads the archive once and checks it against the grants and the claims (reference §10.6
/// step 3, with staging's entry-set rule).
fn check_archive(
    data: Vec<u8>,
    claimed: &ClaimedProposal,
    limits: &OutputLimits,
) -> Result<archive::VerifiedArchive, TurnError> {
    if data.len() > limits.max_archive_bytes {
        return Err(invalid(ARCHIVE_BUDGET));
    }
    let marker = data == archive::EMPTY_ARCHIVE_MARKER;
    if marker && !empty_marker_permitted(limits) {
        return Err(invalid("empty marker without matching delete grants"));
    }
    let grants = !limits.creates.is_empty() || !limits.deletes.is_empty();
    let max_files = limits.selected.len() + limits.creates.len();
    let expected = (!grants).then_some(limits.selected.len());
    let archive_limits = archive::ArchiveLimits::new(max_files, limits.max_archive_bytes)
        .map_err(|_| invalid("archive budget rejected"))?;
    let verified =
        archive::VerifiedArchive::read(data, expected, &archive_limits).map_err(|e| {
            invalid(match e {
                archive::ArchiveError::Budget { .. } | archive::ArchiveError::Format { .. } => {
                    "archive directory rejected"
                }
                _ => "archive envelope rejected",
            })
        })?;
    let entries: BTreeSet<&RepoPath> = verified.paths().collect();
    // Staging's entry-set rule (reference §6.3 step 6).
    let kept_missing = limits
        .selected
        .iter()
        .any(|p| !entries.contains(p) && !limits.deletes.contains(p));
    let unexpected = entries
        .iter()
        .any(|p| !limits.selected.contains(*p) && !limits.creates.contains(*p));
    if kept_missing || unexpected {
        return Err(invalid("archive entries differ from the grants"));
    }
    for change in &claimed.changed_files {
        let path = RepoPath::parse(&change.path).map_err(|_| invalid("change path is unsafe"))?;
        let granted = match change.op {
            FileOp::Update => limits.selected.contains(&path),
            FileOp::Create => limits.creates.contains(&path),
            FileOp::Delete => limits.deletes.contains(&path),
        };
        if !granted {
            return Err(invalid("change operation is not granted"));
        }
    }
    Ok(verified)
}

/// The host-owned proposal: fresh ID, fixed provider and text; only status, changed files and
/// owned paths survive. Provider model, usage, events and all agent-written text are dropped.
fn sanitize(
    status: ProposalStatus,
    changed_files: Vec<ProposedFileChange>,
    owned_paths: Vec<String>,
) -> StagedPatchProposal {
    let completed = status == ProposalStatus::Completed;
    StagedPatchProposal {
        proposal_id: uuid::Uuid::new_v4().simple().to_string(),
        provider_id: PROVIDER_ID.to_owned(),
        provider_model: None,
        status,
        usage: None,
        summary: SANITIZED_SUMMARY.to_owned(),
        rationale: SANITIZED_RATIONALE.to_owned(),
        changed_files,
        owned_paths,
        validation_strategy_hint: None,
        validation_commands: Vec::new(),
        start_preview: false,
        needs_human_review: false,
        tool_context_loaded: false,
        error: (!completed).then(|| format!("Isolated coding turn reported {}.", status.as_str())),
        provider_events: Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// The typed wire form. Every type below keeps only what the host uses, checks the rest for type
// and size, and allocates nothing whose size the pre-scan did not bound.

/// The top level: exactly `proposal` and `workspace_archive_base64`.
struct TopWire {
    proposal: ClaimedProposal,
    archive: ArchiveText,
}

/// The archive text: `null`, or a span of the stdout buffer (the pre-scan admits base64 alphabet
/// bytes only, so the text is never escaped), decoded later in place.
enum ArchiveText {
    Null,
    Span { start: usize, len: usize },
}

struct TopSeed {
    base: usize,
    max_base64_len: usize,
}

impl<'de> DeserializeSeed<'de> for TopSeed {
    type Value = TopWire;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<TopWire, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed {
    type Value = TopWire;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TAG}{KEYS}\u{1}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopWire, A::Error> {
        let mut proposal = None;
        let mut archive = None;
        while let Some(key) = map.next_key::<TopKey>()? {
            match key {
                TopKey::Proposal if proposal.is_none() => {
                    proposal = Some(map.next_value_seed(ProposalSeed)?);
                }
                TopKey::Archive if archive.is_none() => {
                    archive = Some(map.next_value_seed(ArchiveSeed {
                        base: self.base,
                        max_base64_len: self.max_base64_len,
                    })?);
                }
                _ => return Err(tagged(KEYS)),
            }
        }
        match (proposal, archive) {
            (Some(proposal), Some(archive)) => Ok(TopWire { proposal, archive }),
            _ => Err(tagged(KEYS)),
        }
    }
}

enum TopKey {
    Proposal,
    Archive,
    Other,
}

impl<'de> Deserialize<'de> for TopKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TopKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TopKey, E> {
                Ok(match v {
                    "proposal" => TopKey::Proposal,
                    "workspace_archive_base64" => TopKey::Archive,
                    _ => TopKey::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

struct ArchiveSeed {
    base: usize,
    max_base64_len: usize,
}

impl<'de> DeserializeSeed<'de> for ArchiveSeed {
    type Value = ArchiveText;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ArchiveText, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ArchiveSeed {
    type Value = ArchiveText;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TAG}{ARCHIVE_TYPE}\u{1}")
    }

    fn visit_unit<E: de::Error>(self) -> Result<ArchiveText, E> {
        Ok(ArchiveText::Null)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<ArchiveText, E> {
        if v.len() > self.max_base64_len {
            return Err(tagged(ARCHIVE_BUDGET));
        }
        // `v` borrows the stdout buffer: keep its position, decode later in place.
        let start = v
            .as_ptr()
            .addr()
            .checked_sub(self.base)
            .ok_or(tagged(MODEL))?;
        Ok(ArchiveText::Span {
            start,
            len: v.len(),
        })
    }

    fn visit_str<E: de::Error>(self, _v: &str) -> Result<ArchiveText, E> {
        // Only an escaped text arrives here, and the pre-scan refuses those (the base64 alphabet
        // never needs an escape): refused again rather than decoded into a second buffer.
        Err(tagged(ARCHIVE_BASE64))
    }
}

/// What the host keeps of the agent's proposal.
struct ClaimedProposal {
    status: ProposalStatus,
    usage: Option<IsolatedAcpUsage>,
    changed_files: Vec<ProposedFileChange>,
    owned_paths: Vec<String>,
}

struct ProposalSeed;

impl<'de> DeserializeSeed<'de> for ProposalSeed {
    type Value = ClaimedProposal;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ClaimedProposal, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ProposalSeed {
    type Value = ClaimedProposal;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{TAG}{NOT_OBJECT}\u{1}")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ClaimedProposal, A::Error> {
        let wire = WireProposal::deserialize(de::value::MapAccessDeserializer::new(map))?;
        if wire.proposal_id.0 == 0 || wire.provider_id.0 == 0 {
            return Err(de::Error::custom("empty id"));
        }
        Ok(ClaimedProposal {
            status: wire.status,
            usage: wire.usage.0,
            changed_files: wire.changed_files.0,
            owned_paths: wire.owned_paths.0,
        })
    }
}

/// `StagedPatchProposal` field for field (unknown and duplicate keys rejected), in its bounded
/// wire form: agent texts are checked and dropped, lists are capped.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "fields that are only type-checked, then dropped")]
struct WireProposal {
    proposal_id: Dropped,
    provider_id: Dropped,
    #[serde(default)]
    provider_model: Option<Dropped>,
    status: ProposalStatus,
    #[serde(default)]
    usage: WireUsage,
    #[serde(default)]
    summary: Dropped,
    #[serde(default)]
    rationale: Dropped,
    #[serde(default)]
    changed_files: Bounded<WireChange, MAX_OUTPUT_PATHS>,
    #[serde(default)]
    owned_paths: Bounded<PathText<true>, MAX_OUTPUT_PATHS>,
    #[serde(default)]
    validation_strategy_hint: Option<Dropped>,
    #[serde(default)]
    validation_commands: Bounded<Dropped, MAX_OUTPUT_VALUES>,
    #[serde(default)]
    start_preview: bool,
    #[serde(default)]
    needs_human_review: bool,
    #[serde(default)]
    tool_context_loaded: bool,
    #[serde(default)]
    error: Option<Dropped>,
    #[serde(default)]
    provider_events: Bounded<WireEvent, MAX_PROVIDER_EVENTS>,
}

/// `ProposedFileChange` (unknown keys rejected); becomes the snapshot type.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireChangeFields {
    path: PathText<false>,
    #[serde(default = "default_op")]
    op: FileOp,
    #[serde(default)]
    content: Option<String>,
}

fn default_op() -> FileOp {
    FileOp::Update
}

struct WireChange(ProposedFileChange);

impl<'de> Deserialize<'de> for WireChange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let f = WireChangeFields::deserialize(d)?;
        Ok(Self(ProposedFileChange {
            path: f.path.0,
            op: f.op,
            content: f.content,
        }))
    }
}

/// `ProviderEventRecord`: kind and a summary of at most 500 characters, both dropped.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WireEvent {
    #[expect(dead_code, reason = "type-checked, then dropped")]
    kind: WireEventKind,
    summary: EventSummary,
}

impl WireEvent {
    fn check<E: de::Error>(self) -> Result<Self, E> {
        if self.summary.0 > MAX_PROVIDER_EVENT_SUMMARY_CHARS {
            return Err(E::custom("event summary too long"));
        }
        Ok(self)
    }
}

/// Provider event kinds (reference §10.6).
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireEventKind {
    Plan,
    ToolCall,
    ModeChange,
}

/// Most provider events a proposal may carry (reference §10.6).
const MAX_PROVIDER_EVENTS: usize = 200;
/// Longest provider event summary, in characters (reference §10.6).
const MAX_PROVIDER_EVENT_SUMMARY_CHARS: usize = 500;

/// A string that is type-checked and dropped; keeps its length in characters.
struct EventSummary(usize);

impl<'de> Deserialize<'de> for EventSummary {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EventSummary;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<EventSummary, E> {
                Ok(EventSummary(v.chars().count()))
            }
        }
        d.deserialize_str(V)
    }
}

/// A string that is type-checked and dropped; keeps its length in bytes. Never allocates (serde
/// hands it a borrowed or scratch slice, bounded by the pre-scan).
#[derive(Default)]
struct Dropped(usize);

impl<'de> Deserialize<'de> for Dropped {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Dropped;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Dropped, E> {
                Ok(Dropped(v.len()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Element hook for [`Bounded`]: per-element checks after the element parsed.
trait Element: Sized {
    type Kept;
    fn keep<E: de::Error>(self) -> Result<Self::Kept, E>;
}

/// A path claimed by the agent, checked as a canonical repository path before it is kept (so a
/// kept path is as bounded as a repository path). `OWNED` picks the reason:
/// `owned_paths` or `changed_files[].path`.
struct PathText<const OWNED: bool>(String);

impl<'de, const OWNED: bool> Deserialize<'de> for PathText<OWNED> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const OWNED: bool>;
        impl<const OWNED: bool> Visitor<'_> for V<OWNED> {
            type Value = PathText<OWNED>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a path")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<PathText<OWNED>, E> {
                match RepoPath::parse(v) {
                    Ok(_) => Ok(PathText(v.to_owned())),
                    Err(_) => Err(tagged(if OWNED { OWNED_PATH } else { CHANGE_PATH })),
                }
            }
        }
        d.deserialize_str(V::<OWNED>)
    }
}

impl Element for PathText<true> {
    type Kept = String;
    fn keep<E: de::Error>(self) -> Result<String, E> {
        Ok(self.0)
    }
}

impl Element for Dropped {
    type Kept = ();
    fn keep<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

impl Element for WireChange {
    type Kept = ProposedFileChange;
    fn keep<E: de::Error>(self) -> Result<ProposedFileChange, E> {
        Ok(self.0)
    }
}

impl Element for WireEvent {
    type Kept = ();
    fn keep<E: de::Error>(self) -> Result<(), E> {
        self.check().map(|_| ())
    }
}

/// A list of at most `N` elements; one more fails the parse before it is built.
struct Bounded<T: Element, const N: usize>(Vec<T::Kept>);

impl<T: Element, const N: usize> Default for Bounded<T, N> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<'de, T: Element + Deserialize<'de>, const N: usize> Deserialize<'de> for Bounded<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Element + Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Bounded<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<T>()? {
                    if out.len() == N {
                        return Err(tagged(BOUNDS));
                    }
                    out.push(item.keep()?);
                }
                Ok(Bounded(out))
            }
        }
        d.deserialize_seq(V::<T, N>(std::marker::PhantomData))
    }
}

/// `usage`: parsed strictly into [`IsolatedAcpUsage`] when it is exactly the three counts;
/// anything else (any type, any shape) is consumed without being built and becomes `None`
/// (reference §11: malformed usage never invalidates a patch).
#[derive(Default)]
struct WireUsage(Option<IsolatedAcpUsage>);

impl<'de> Deserialize<'de> for WireUsage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UsageVisitor)
    }
}

struct UsageVisitor;

impl<'de> Visitor<'de> for UsageVisitor {
    type Value = WireUsage;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<WireUsage, E> {
        Ok(WireUsage(None))
    }
    fn visit_i64<E>(self, _: i64) -> Result<WireUsage, E> {
        Ok(WireUsage(None))
    }
    fn visit_u64<E>(self, _: u64) -> Result<WireUsage, E> {
        Ok(WireUsage(None))
    }
    fn visit_f64<E>(self, _: f64) -> Result<WireUsage, E> {
        Ok(WireUsage(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<WireUsage, E> {
        Ok(WireUsage(None))
    }
    fn visit_unit<E>(self) -> Result<WireUsage, E> {
        Ok(WireUsage(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WireUsage, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(WireUsage(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WireUsage, A::Error> {
        let mut counts: [Option<u64>; 3] = [None; 3];
        let mut valid = true;
        let mut entries = 0_usize;
        while let Some(key) = map.next_key::<UsageKey>()? {
            entries += 1;
            let count = map.next_value::<UsageCount>()?.0;
            let slot = match key {
                UsageKey::Prompt => counts.get_mut(0),
                UsageKey::Completion => counts.get_mut(1),
                UsageKey::Total => counts.get_mut(2),
                UsageKey::Other => None,
            };
            match (slot, count) {
                (Some(slot), Some(count)) => *slot = Some(count),
                _ => valid = false,
            }
        }
        let usage = match (valid && entries == 3, counts) {
            (true, [Some(p), Some(c), Some(t)]) => IsolatedAcpUsage::new(p, c, t),
            _ => None,
        };
        Ok(WireUsage(usage))
    }
}

enum UsageKey {
    Prompt,
    Completion,
    Total,
    Other,
}

impl<'de> Deserialize<'de> for UsageKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = UsageKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<UsageKey, E> {
                Ok(match v {
                    "prompt_tokens" => UsageKey::Prompt,
                    "completion_tokens" => UsageKey::Completion,
                    "total_tokens" => UsageKey::Total,
                    _ => UsageKey::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// One usage count: only a JSON integer (`true`, `1.0` and strings are refused: pydantic strict
/// mode); anything else is consumed and becomes `None`.
struct UsageCount(Option<u64>);

impl<'de> Deserialize<'de> for UsageCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CountVisitor)
    }
}

struct CountVisitor;

impl<'de> Visitor<'de> for CountVisitor {
    type Value = UsageCount;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_u64<E>(self, v: u64) -> Result<UsageCount, E> {
        Ok(UsageCount(Some(v)))
    }
    fn visit_bool<E>(self, _: bool) -> Result<UsageCount, E> {
        Ok(UsageCount(None))
    }
    fn visit_i64<E>(self, v: i64) -> Result<UsageCount, E> {
        Ok(UsageCount(u64::try_from(v).ok()))
    }
    fn visit_f64<E>(self, _: f64) -> Result<UsageCount, E> {
        Ok(UsageCount(None))
    }
    fn visit_str<E>(self, _: &str) -> Result<UsageCount, E> {
        Ok(UsageCount(None))
    }
    fn visit_unit<E>(self) -> Result<UsageCount, E> {
        Ok(UsageCount(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UsageCount, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(UsageCount(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UsageCount, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(UsageCount(None))
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
