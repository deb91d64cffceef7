//! Test-only hostile entrypoint modes: each breaks the container output contract (reference
//! §10.6) in one specific way, so the host-side parser can be proven against it. The image built
//! from this entrypoint is never approved for real turns.

use std::time::Duration;

use base64::Engine as _;
use snapshot::{FileOp, ProposalStatus, ProposedFileChange, RepoPath, StagedPatchProposal};

use crate::request::TurnRequest;
use crate::runner::TurnOutput;

/// Every mode, in documentation order.
pub const MODES: [&str; 12] = [
    "valid",
    "malformed-json",
    "duplicate-keys",
    "extra-key",
    "invalid-base64",
    "non-canonical-archive",
    "wrong-entry-set",
    "oversized-output",
    "exit-nonzero",
    "print-nothing",
    "sleep-forever",
    "flood-stderr",
];

/// Bytes written by `oversized-output` and `flood-stderr` (above the host's 40,000,000 cap).
pub const FLOOD_BYTES: usize = 48 << 20;

/// The hostile output shapes: mode `shape-<kind>-<position>` prints a contract-shaped document
/// (the `valid` one) whose value at `<position>` is replaced by a `<kind>` value filled so the
/// whole output is [`SHAPE_BYTES`] long, just under the host's stdout cap. They measure that the
/// host's memory follows its own limits, not the shape of the agent's JSON.
pub const SHAPE_KINDS: [&str; 5] = [
    "widearray",
    "wideobject",
    "deep",
    "hugestring",
    "hugeescaped",
];
/// Where a shape goes (see [`SHAPE_KINDS`]); the tests walk every one.
#[cfg(test)]
pub const SHAPE_POSITIONS: [&str; 10] = [
    "usage",
    "proposalid",
    "summary",
    "ownedpaths",
    "changedfiles",
    "content",
    "commands",
    "events",
    "eventsummary",
    "archive",
];
/// Length of every shape document.
pub const SHAPE_BYTES: usize = 39_900_000;

const HOLE: &str = "\u{1}shape-hole\u{1}";

/// A `kind` value exactly `fill` bytes long (or `None` for an unknown kind or a tiny fill).
fn shape_value(kind: &str, fill: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(fill);
    match kind {
        "widearray" => {
            out.push(b'[');
            // Stop early enough that the last `0` and the `]` always fit.
            while out.len() + 4 <= fill {
                out.extend_from_slice(b"0,");
            }
            out.push(b'0');
            out.resize(fill.saturating_sub(1), b' ');
            out.push(b']');
        }
        "wideobject" => {
            out.push(b'{');
            let mut i = 0_u64;
            loop {
                let entry = format!("\"k{i}\":0,");
                if out.len() + entry.len() + 8 > fill {
                    break;
                }
                out.extend_from_slice(entry.as_bytes());
                i += 1;
            }
            out.extend_from_slice(b"\"z\":0");
            out.resize(fill.saturating_sub(1), b' ');
            out.push(b'}');
        }
        "deep" => {
            let depth = fill / 2;
            out.resize(depth, b'[');
            out.resize(depth * 2, b']');
            out.resize(fill, b' ');
        }
        "hugestring" => {
            out.push(b'"');
            out.resize(fill.saturating_sub(1), b'x');
            out.push(b'"');
        }
        "hugeescaped" => {
            out.push(b'"');
            while out.len() + 3 <= fill {
                out.extend_from_slice(b"\\n");
            }
            out.resize(fill.saturating_sub(1), b'x');
            out.push(b'"');
        }
        _ => return None,
    }
    (out.len() == fill && fill > 2).then_some(out)
}

/// The `shape-<kind>-<position>` document for `mode`, if `mode` names one.
fn shape_document(mode: &str, request: Option<&TurnRequest>, archive_b64: &str) -> Option<Vec<u8>> {
    let rest = mode.strip_prefix("shape-")?;
    let (kind, position) = rest.split_once('-')?;
    if !SHAPE_KINDS.contains(&kind) {
        return None;
    }
    let mut doc = serde_json::to_value(completed(request, Some(archive_b64.to_owned()))).ok()?;
    let hole = serde_json::Value::String(HOLE.to_owned());
    let target = if position == "archive" {
        doc.get_mut("workspace_archive_base64")?
    } else {
        let proposal = doc.get_mut("proposal")?;
        match position {
            "usage" => proposal.get_mut("usage")?,
            "proposalid" => proposal.get_mut("proposal_id")?,
            "summary" => proposal.get_mut("summary")?,
            "ownedpaths" => proposal.get_mut("owned_paths")?,
            "changedfiles" => proposal.get_mut("changed_files")?,
            "content" => proposal
                .get_mut("changed_files")?
                .get_mut(0)?
                .get_mut("content")?,
            "commands" => proposal.get_mut("validation_commands")?,
            "events" => proposal.get_mut("provider_events")?,
            "eventsummary" => {
                let events = proposal.get_mut("provider_events")?;
                *events = serde_json::json!([{"kind": "plan", "summary": HOLE}]);
                events.get_mut(0)?.get_mut("summary")?
            }
            _ => return None,
        }
    };
    *target = hole;
    let text = serde_json::to_string(&doc).ok()?;
    let quoted = serde_json::to_string(HOLE).ok()?;
    let (head, tail) = text.split_once(&quoted)?;
    let fill = SHAPE_BYTES.checked_sub(head.len() + tail.len())?;
    let mut out = head.as_bytes().to_vec();
    out.extend_from_slice(&shape_value(kind, fill)?);
    out.extend_from_slice(tail.as_bytes());
    Some(out)
}

/// What the entrypoint does for a mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostileAction {
    /// Bytes for stdout.
    pub stdout: Vec<u8>,
    /// Bytes for stderr before stdout is written.
    pub stderr_bytes: usize,
    /// Sleep forever instead of exiting.
    pub hang: bool,
    /// Exit status.
    pub exit_code: i32,
}

fn completed(request: Option<&TurnRequest>, archive_b64: Option<String>) -> TurnOutput {
    let changed = request
        .and_then(|r| r.files.iter().next())
        .map(|(p, c)| ProposedFileChange {
            path: p.to_string(),
            op: FileOp::Update,
            content: Some(edit(c)),
        })
        .into_iter()
        .collect::<Vec<_>>();
    TurnOutput {
        proposal: StagedPatchProposal {
            proposal_id: "acp-proof-hostile".to_owned(),
            provider_id: "acp".to_owned(),
            provider_model: Some("proof-model".to_owned()),
            status: ProposalStatus::Completed,
            usage: Some(
                serde_json::json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}),
            ),
            summary: "hostile entrypoint".to_owned(),
            rationale: "hostile entrypoint".to_owned(),
            owned_paths: changed.iter().map(|c| c.path.clone()).collect(),
            changed_files: changed,
            validation_strategy_hint: Some("local".to_owned()),
            validation_commands: Vec::new(),
            start_preview: false,
            needs_human_review: true,
            tool_context_loaded: false,
            error: None,
            provider_events: Vec::new(),
        },
        workspace_archive_base64: archive_b64,
    }
}

fn edit(content: &str) -> String {
    format!("{content}// hostile entrypoint edit\n")
}

/// The canonical archive a correct runner would export: the first editable file edited, the
/// others unchanged, plus `extra` entries.
fn entries(request: Option<&TurnRequest>, extra: &[(&str, &str)]) -> Vec<(RepoPath, Vec<u8>)> {
    let mut out: Vec<(RepoPath, Vec<u8>)> = Vec::new();
    if let Some(r) = request {
        for (i, (path, content)) in r.files.iter().enumerate() {
            let bytes = if i == 0 {
                edit(content)
            } else {
                content.clone()
            };
            out.push((path.clone(), bytes.into_bytes()));
        }
    }
    for (p, c) in extra {
        if let Ok(path) = RepoPath::parse(p) {
            out.push((path, c.as_bytes().to_vec()));
        }
    }
    out
}

fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn archive_or_marker(entries: &[(RepoPath, Vec<u8>)]) -> Vec<u8> {
    if entries.is_empty() {
        return archive::EMPTY_ARCHIVE_MARKER.to_vec();
    }
    archive::build_deterministic_archive(entries).unwrap_or_default()
}

fn document(output: &TurnOutput) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(output).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Appends a one-byte ZIP comment: still a readable ZIP, no longer the canonical envelope.
fn with_comment(mut zip: Vec<u8>) -> Vec<u8> {
    let len = zip.len();
    if let Some(comment_len) = zip.get_mut(len.saturating_sub(2)..) {
        comment_len.copy_from_slice(&1u16.to_le_bytes());
        zip.push(b'!');
    }
    zip
}

/// The action for `mode` given the (possibly unparseable) stdin payload.
#[must_use]
pub fn action(mode: &str, stdin: &[u8]) -> Option<HostileAction> {
    let request = TurnRequest::parse(stdin).ok();
    let request = request.as_ref();
    let valid_archive = archive_or_marker(&entries(request, &[]));
    let valid = document(&completed(request, Some(encode(&valid_archive))));
    let plain = |stdout: Vec<u8>| HostileAction {
        stdout,
        stderr_bytes: 0,
        hang: false,
        exit_code: 0,
    };
    if mode.starts_with("shape-") {
        let archive_b64 = encode(&valid_archive);
        return shape_document(mode, request, &archive_b64).map(plain);
    }
    Some(match mode {
        "valid" => plain(valid),
        "malformed-json" => plain(b"{\"proposal\": {\"proposal_id\": \"x\",\n".to_vec()),
        "duplicate-keys" => {
            let text = String::from_utf8_lossy(&valid).into_owned();
            let doubled = text.replacen(
                "{\"proposal\":",
                "{\"workspace_archive_base64\":null,\"proposal\":",
                1,
            );
            plain(doubled.into_bytes())
        }
        "extra-key" => {
            let text = String::from_utf8_lossy(&valid).into_owned();
            plain(
                text.replacen("{\"proposal\":", "{\"extra\":true,\"proposal\":", 1)
                    .into_bytes(),
            )
        }
        "invalid-base64" => plain(document(&completed(
            request,
            Some("!!not*base64==".to_owned()),
        ))),
        "non-canonical-archive" => {
            let zip = with_comment(valid_archive.clone());
            plain(document(&completed(request, Some(encode(&zip)))))
        }
        "wrong-entry-set" => {
            let zip = archive_or_marker(&entries(
                request,
                &[("unapproved/extra.txt", "not granted\n")],
            ));
            plain(document(&completed(request, Some(encode(&zip)))))
        }
        "oversized-output" => {
            let mut out = b"{\"proposal\": \"".to_vec();
            out.resize(FLOOD_BYTES, b'x');
            plain(out)
        }
        "exit-nonzero" => HostileAction {
            stdout: valid,
            stderr_bytes: 0,
            hang: false,
            exit_code: 3,
        },
        "print-nothing" => plain(Vec::new()),
        "sleep-forever" => HostileAction {
            stdout: Vec::new(),
            stderr_bytes: 0,
            hang: true,
            exit_code: 0,
        },
        "flood-stderr" => HostileAction {
            stdout: valid,
            stderr_bytes: FLOOD_BYTES,
            hang: false,
            exit_code: 0,
        },
        _ => return None,
    })
}

/// How long one sleep of `sleep-forever` lasts (it loops).
pub const HANG_SLICE: Duration = Duration::from_secs(3600);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shape mode prints exactly `SHAPE_BYTES` of valid JSON with the shape in place (the
    /// host's parser, not JSON syntax, has to refuse it).
    #[test]
    fn every_shape_is_valid_json_of_the_exact_length() {
        for kind in SHAPE_KINDS {
            for position in SHAPE_POSITIONS {
                let mode = format!("shape-{kind}-{position}");
                let out = action(&mode, REQ).unwrap().stdout;
                assert_eq!(out.len(), SHAPE_BYTES, "{mode}");
                assert!(out.starts_with(b"{\"proposal\":{"), "{mode}");
                if kind != "deep" {
                    // Syntax only (no value tree): serde_json's recursion limit (128) would stop
                    // at the deep shapes, which are checked by their brackets instead.
                    serde_json::from_slice::<serde::de::IgnoredAny>(&out).unwrap();
                } else {
                    let text = std::str::from_utf8(&out).unwrap();
                    assert!(text.contains("[[[[") && text.contains("]]]]"), "{mode}");
                }
            }
        }
    }

    const REQ: &[u8] = br#"{"app_id":"a","build_family":"app_bundle","build_record_id":"b","change_class":"patch","raw_user_request":"r","files":{"app/a.txt":"one\n","app/b.txt":"two\n"},"read_only_files":{}}"#;

    fn strict(bytes: &[u8]) -> Result<TurnOutput, vocab::StrictJsonError> {
        vocab::from_slice_strict(bytes, 64 << 20)
    }

    #[test]
    fn each_mode_breaks_exactly_its_rule() {
        let valid = action("valid", REQ).unwrap();
        let out = strict(&valid.stdout).unwrap();
        let zip = base64::engine::general_purpose::STANDARD
            .decode(out.workspace_archive_base64.unwrap())
            .unwrap();
        let limits = archive::ArchiveLimits::default();
        let manifest = archive::read_archive_manifest(&zip, &limits).unwrap();
        assert_eq!(manifest.entries.len(), 2);

        assert!(strict(&action("malformed-json", REQ).unwrap().stdout).is_err());
        assert_eq!(
            strict(&action("duplicate-keys", REQ).unwrap().stdout).unwrap_err(),
            vocab::StrictJsonError::DuplicateKey
        );
        assert!(matches!(
            strict(&action("extra-key", REQ).unwrap().stdout).unwrap_err(),
            vocab::StrictJsonError::Shape {
                kind: vocab::ShapeKind::UnknownField,
                ..
            }
        ));
        let bad64 = strict(&action("invalid-base64", REQ).unwrap().stdout).unwrap();
        assert!(
            base64::engine::general_purpose::STANDARD
                .decode(bad64.workspace_archive_base64.unwrap())
                .is_err()
        );
        for mode in ["non-canonical-archive", "wrong-entry-set"] {
            let out = strict(&action(mode, REQ).unwrap().stdout).unwrap();
            let zip = base64::engine::general_purpose::STANDARD
                .decode(out.workspace_archive_base64.unwrap())
                .unwrap();
            let read = archive::read_archive_manifest(&zip, &limits);
            match mode {
                "non-canonical-archive" => assert!(read.is_err(), "{mode}"),
                _ => assert_eq!(read.unwrap().entries.len(), 3),
            }
        }
        assert!(action("oversized-output", REQ).unwrap().stdout.len() > 40_000_000);
        assert_eq!(action("exit-nonzero", REQ).unwrap().exit_code, 3);
        assert!(action("print-nothing", REQ).unwrap().stdout.is_empty());
        assert!(action("sleep-forever", REQ).unwrap().hang);
        assert!(action("flood-stderr", REQ).unwrap().stderr_bytes > 40_000_000);
        assert!(action("no-such-mode", REQ).is_none());
        assert!(action("shape-nokind-usage", REQ).is_none());
        assert!(action("shape-deep-nowhere", REQ).is_none());
        assert_eq!(
            MODES.iter().filter(|m| action(m, REQ).is_some()).count(),
            MODES.len()
        );
    }
}
