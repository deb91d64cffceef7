//! The container's stdin payload (reference §10.3), parsed strictly.
//!
//! The host serialises `app_id, build_family, build_record_id, change_class, raw_user_request,
//! files, read_only_files` and, iff any grant exists, `create_paths` and `delete_paths` (both,
//! sorted). Unknown keys, duplicate keys, `NaN`, invalid UTF-8 and trailing data are refused by
//! [`vocab::from_slice_strict`]; every path becomes a [`RepoPath`] or the request is refused.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use snapshot::{
    BaselineFiles, MAX_READ_ONLY_INSPECTION_BYTES, MAX_READ_ONLY_INSPECTION_FILES, RepoPath,
    is_secret_sensitive_path,
};
use vocab::from_slice_strict;

use crate::error::ProofError;

/// Largest accepted stdin payload (reference `REPOSITORY_DOCKER_REQUEST_BUDGET`).
pub const MAX_REQUEST_BYTES: usize = 20_971_520;
/// Most files (editable + creates + read-only) a turn may stage: the archive's file cap.
pub const MAX_TURN_FILES: usize = archive::MAX_ARCHIVE_FILES;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRequest {
    app_id: String,
    build_family: String,
    build_record_id: String,
    change_class: String,
    raw_user_request: String,
    files: BTreeMap<String, String>,
    read_only_files: BTreeMap<String, String>,
    #[serde(default)]
    create_paths: Option<Vec<String>>,
    #[serde(default)]
    delete_paths: Option<Vec<String>>,
    /// Live turns only (`turn-runner --live`): which agent, model and loopback port.
    #[serde(default)]
    live: Option<WireLive>,
    /// Follow-up turns only: the review of the candidate a reviewer asked to retry.
    #[serde(default)]
    review_feedback: Option<WireFeedback>,
    /// Live turns only, optional: how the repository is checked (the operator's gate commands).
    #[serde(default)]
    validation_hints: Option<Vec<String>>,
    /// Follow-up turns only: the starting tree, an overlay of the baseline `files`.
    #[serde(default)]
    start_from: Option<WireStart>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireStart {
    candidate: String,
    files: BTreeMap<String, String>,
    #[serde(default)]
    absent: Vec<String>,
}

/// A follow-up turn's starting tree: the candidate it continues and the overlay of the baseline
/// that candidate's post-images make (written content, or absent). The workspace's manifests stay
/// the baseline's, so the proposal's changes are still claimed against the baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFrom {
    /// The `sha256:` digest of the candidate the turn continues.
    pub candidate: String,
    pub overlay: archive::StartOverlay,
}

impl StartFrom {
    fn parse(w: WireStart) -> Result<Self, ProofError> {
        if !vocab::is_typed_sha256(&w.candidate) {
            return Err(ProofError::RequestFormat {
                reason: "start_from: candidate is not a sha256: digest".to_owned(),
            });
        }
        let mut overlay = archive::StartOverlay::new();
        for (path, content) in w.files {
            overlay.insert(repo_path(&path)?, Some(content));
        }
        for path in w.absent {
            if overlay.insert(repo_path(&path)?, None).is_some() {
                return Err(ProofError::Grants {
                    reason: "start_from names a path twice",
                });
            }
        }
        if overlay.is_empty() {
            return Err(ProofError::Grants {
                reason: "start_from changes nothing",
            });
        }
        Ok(Self {
            candidate: w.candidate,
            overlay,
        })
    }
}

/// The most validation hints (the host's cap).
pub const MAX_VALIDATION_HINTS: usize = 16;
/// The longest validation hint, in bytes.
pub const MAX_VALIDATION_HINT_BYTES: usize = 1024;

/// The validation hints, checked: at most [`MAX_VALIDATION_HINTS`], each 1 to
/// [`MAX_VALIDATION_HINT_BYTES`] bytes of printable text (no control character, so no hint can
/// start a line of its own in the prompt); only in a live turn.
fn validation_hints(hints: Option<Vec<String>>, live: bool) -> Result<Vec<String>, ProofError> {
    let Some(hints) = hints else {
        return Ok(Vec::new());
    };
    let bad = |reason: &str| ProofError::RequestFormat {
        reason: format!("validation_hints: {reason}"),
    };
    if !live {
        return Err(bad("only a live turn carries them"));
    }
    if hints.is_empty() || hints.len() > MAX_VALIDATION_HINTS {
        return Err(bad("empty or too many"));
    }
    for hint in &hints {
        if hint.is_empty()
            || hint.len() > MAX_VALIDATION_HINT_BYTES
            || hint.chars().any(char::is_control)
        {
            return Err(bad("a hint is empty, too long or has control characters"));
        }
    }
    Ok(hints)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireFeedback {
    supersedes_candidate: String,
    #[serde(default)]
    note: Option<String>,
    gates: Vec<WireGate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireGate {
    gate: String,
    verdict: String,
    #[serde(default)]
    new_failures: Option<Vec<String>>,
    #[serde(default)]
    excerpt: Option<String>,
}

/// The longest reviewer note (the host's cap).
pub const MAX_FEEDBACK_NOTE_BYTES: usize = 8192;
/// The most gate verdicts (the host's cap).
pub const MAX_FEEDBACK_GATES: usize = 64;
/// The most failing test ids of one gate (the host's cap).
pub const MAX_FEEDBACK_FAILURES: usize = 32;
/// The longest failing test id, in bytes.
pub const MAX_FEEDBACK_FAILURE_BYTES: usize = 512;
/// The longest output excerpt of one gate, in bytes (the host's cap).
pub const MAX_FEEDBACK_EXCERPT_BYTES: usize = 4096;

/// One gate of the review: its verdict, the test ids that newly fail, and the tail of its output
/// (escaped printable ASCII, already checked by the host's content policy). All untrusted text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedbackGate {
    pub gate: String,
    pub verdict: String,
    pub new_failures: Vec<String>,
    pub excerpt: Option<String>,
}

impl FeedbackGate {
    fn parse(w: WireGate) -> Option<Self> {
        let failures = w.new_failures.unwrap_or_default();
        let failures_ok = failures.len() <= MAX_FEEDBACK_FAILURES
            && failures.iter().all(|f| {
                (1..=MAX_FEEDBACK_FAILURE_BYTES).contains(&f.len())
                    && !f.chars().any(char::is_control)
            });
        // The host's excerpt is the gate evidence's escaped log: printable ASCII, newline, tab.
        let excerpt_ok = w.excerpt.as_ref().is_none_or(|e| {
            (1..=MAX_FEEDBACK_EXCERPT_BYTES).contains(&e.len())
                && e.bytes()
                    .all(|b| b == b'\n' || b == b'\t' || (0x20..0x7f).contains(&b))
        });
        (is_token(&w.gate) && is_token(&w.verdict) && failures_ok && excerpt_ok).then_some(Self {
            gate: w.gate,
            verdict: w.verdict,
            new_failures: failures,
            excerpt: w.excerpt,
        })
    }
}

/// A follow-up turn's review feedback, validated: untrusted context the prompt quotes, never
/// scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewFeedback {
    /// The superseded candidate's `sha256:` digest.
    pub supersedes_candidate: String,
    pub note: Option<String>,
    /// The gates, each name and verdict a plain token.
    pub gates: Vec<FeedbackGate>,
}

fn is_token(text: &str) -> bool {
    (1..=64).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

impl TryFrom<WireFeedback> for ReviewFeedback {
    type Error = ProofError;
    fn try_from(w: WireFeedback) -> Result<Self, ProofError> {
        let bad = |reason: &str| ProofError::RequestFormat {
            reason: format!("review_feedback: {reason}"),
        };
        if !vocab::is_typed_sha256(&w.supersedes_candidate) {
            return Err(bad("supersedes_candidate is not a sha256: digest"));
        }
        if let Some(note) = &w.note {
            let controls = note
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t');
            if note.is_empty() || note.len() > MAX_FEEDBACK_NOTE_BYTES || controls {
                return Err(bad("the note is empty, too long or has control characters"));
            }
        }
        if w.gates.len() > MAX_FEEDBACK_GATES {
            return Err(bad("the gate verdicts are malformed"));
        }
        let gates = w
            .gates
            .into_iter()
            .map(FeedbackGate::parse)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("the gate verdicts are malformed"))?;
        Ok(Self {
            supersedes_candidate: w.supersedes_candidate,
            note: w.note,
            gates,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireLive {
    agent: String,
    model: String,
    port: u16,
}

pub use crate::agents::LiveAgent;

/// Longest model name.
pub const MAX_MODEL_CHARS: usize = 64;

/// A live turn's agent settings, validated: the model name is a plain token (it is written into
/// the agent's configuration) and the port is unprivileged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveSpec {
    pub agent: LiveAgent,
    pub model: String,
    pub port: u16,
}

impl TryFrom<WireLive> for LiveSpec {
    type Error = ProofError;
    fn try_from(w: WireLive) -> Result<Self, ProofError> {
        let agent = LiveAgent::parse(&w.agent).ok_or(ProofError::LiveRequest {
            reason: "unknown agent",
        })?;
        let model_ok = !w.model.is_empty()
            && w.model.len() <= MAX_MODEL_CHARS
            && w.model
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':'));
        if !model_ok {
            return Err(ProofError::LiveRequest {
                reason: "model name is not a plain token",
            });
        }
        if w.port < 1024 {
            return Err(ProofError::LiveRequest {
                reason: "port is privileged",
            });
        }
        Ok(Self {
            agent,
            model: w.model,
            port: w.port,
        })
    }
}

/// A validated turn request.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    #[expect(
        dead_code,
        reason = "a checked field of the wire request; the runner never needs it"
    )]
    pub app_id: String,
    #[expect(
        dead_code,
        reason = "a checked field of the wire request; the runner never needs it"
    )]
    pub build_family: String,
    #[expect(
        dead_code,
        reason = "a checked field of the wire request; the runner never needs it"
    )]
    pub build_record_id: String,
    #[expect(
        dead_code,
        reason = "a checked field of the wire request; the runner never needs it"
    )]
    pub change_class: String,
    pub raw_user_request: String,
    pub files: BaselineFiles,
    pub read_only_files: BaselineFiles,
    pub create_paths: Vec<RepoPath>,
    pub delete_paths: Vec<RepoPath>,
    /// Present exactly in live turns.
    pub live: Option<LiveSpec>,
    /// Present exactly in follow-up turns.
    pub review_feedback: Option<ReviewFeedback>,
    /// Live turns: the operator's gate commands, as hints for the agent (empty when none).
    pub validation_hints: Vec<String>,
    /// Follow-up turns that continue an earlier candidate: the starting tree.
    pub start_from: Option<StartFrom>,
}

fn repo_path(raw: &str) -> Result<RepoPath, ProofError> {
    RepoPath::parse(raw).map_err(|_| ProofError::RequestPath {
        path: raw.to_owned(),
    })
}

fn path_map(raw: BTreeMap<String, String>) -> Result<BaselineFiles, ProofError> {
    raw.into_iter()
        .map(|(k, v)| Ok((repo_path(&k)?, v)))
        .collect()
}

fn grant_list(raw: Vec<String>) -> Result<Vec<RepoPath>, ProofError> {
    let paths = raw
        .iter()
        .map(|p| repo_path(p))
        .collect::<Result<Vec<_>, _>>()?;
    if !paths.windows(2).all(|w| matches!(w, [a, b] if a < b)) {
        return Err(ProofError::Grants {
            reason: "grant list is not sorted and unique",
        });
    }
    Ok(paths)
}

impl TurnRequest {
    /// Parses and validates the stdin bytes.
    ///
    /// # Errors
    /// `PROOF_WORKER_REQUEST_BUDGET` over [`MAX_REQUEST_BYTES`]; `PROOF_WORKER_REQUEST_FORMAT`
    /// for any strict-JSON or shape failure; `PROOF_WORKER_REQUEST_PATH` for a path outside the
    /// portable profile; `PROOF_WORKER_GRANTS` / `PROOF_WORKER_FILE_BUDGET` for inconsistent
    /// grants or file counts.
    pub fn parse(bytes: &[u8]) -> Result<Self, ProofError> {
        if bytes.len() > MAX_REQUEST_BYTES {
            return Err(ProofError::RequestBudget {
                limit: MAX_REQUEST_BYTES,
            });
        }
        let wire: WireRequest =
            from_slice_strict(bytes, MAX_REQUEST_BYTES).map_err(|e| ProofError::RequestFormat {
                reason: e.to_string(),
            })?;
        let (create_paths, delete_paths) = match (wire.create_paths, wire.delete_paths) {
            (None, None) => (Vec::new(), Vec::new()),
            (Some(c), Some(d)) => {
                if c.is_empty() && d.is_empty() {
                    return Err(ProofError::Grants {
                        reason: "grant lists present but empty",
                    });
                }
                (grant_list(c)?, grant_list(d)?)
            }
            _ => {
                return Err(ProofError::Grants {
                    reason: "create and delete grants travel together",
                });
            }
        };
        let validation_hints = validation_hints(wire.validation_hints, wire.live.is_some())?;
        let request = Self {
            validation_hints,
            app_id: wire.app_id,
            build_family: wire.build_family,
            build_record_id: wire.build_record_id,
            change_class: wire.change_class,
            raw_user_request: wire.raw_user_request,
            files: path_map(wire.files)?,
            read_only_files: path_map(wire.read_only_files)?,
            create_paths,
            delete_paths,
            live: wire.live.map(LiveSpec::try_from).transpose()?,
            review_feedback: wire
                .review_feedback
                .map(ReviewFeedback::try_from)
                .transpose()?,
            start_from: wire.start_from.map(StartFrom::parse).transpose()?,
        };
        request.check_scope()?;
        Ok(request)
    }

    fn check_scope(&self) -> Result<(), ProofError> {
        let editable = self.files.len() + self.create_paths.len();
        if editable == 0 {
            return Err(ProofError::FileBudget {
                count: 0,
                limit: MAX_TURN_FILES,
            });
        }
        let staged = editable + self.read_only_files.len();
        if staged > MAX_TURN_FILES {
            return Err(ProofError::FileBudget {
                count: staged,
                limit: MAX_TURN_FILES,
            });
        }
        if self.read_only_files.len() > MAX_READ_ONLY_INSPECTION_FILES {
            return Err(ProofError::FileBudget {
                count: self.read_only_files.len(),
                limit: MAX_READ_ONLY_INSPECTION_FILES,
            });
        }
        let inspection_bytes: usize = self.read_only_files.values().map(String::len).sum();
        if inspection_bytes > MAX_READ_ONLY_INSPECTION_BYTES {
            return Err(ProofError::InspectionBudget {
                limit: MAX_READ_ONLY_INSPECTION_BYTES,
            });
        }
        let mut folded = BTreeSet::new();
        for path in self
            .files
            .keys()
            .chain(self.read_only_files.keys())
            .chain(&self.create_paths)
        {
            if !folded.insert(path.collision_key()) {
                return Err(ProofError::Grants {
                    reason: "paths collide (case-folded)",
                });
            }
            if is_secret_sensitive_path(path.as_str()) {
                return Err(ProofError::Grants {
                    reason: "secret-sensitive path",
                });
            }
        }
        if self
            .delete_paths
            .iter()
            .any(|d| !self.files.contains_key(d))
        {
            return Err(ProofError::Grants {
                reason: "deletion is not a selected editable path",
            });
        }
        self.check_start()
    }

    /// A starting tree stays inside the grants (it writes editable files and granted creates,
    /// and leaves out only granted deletions) and continues the candidate the review names.
    fn check_start(&self) -> Result<(), ProofError> {
        let Some(start) = &self.start_from else {
            return Ok(());
        };
        let granted = start.overlay.iter().all(|(path, content)| match content {
            Some(_) => self.files.contains_key(path) || self.create_paths.contains(path),
            None => self.delete_paths.contains(path),
        });
        if !granted {
            return Err(ProofError::Grants {
                reason: "start_from leaves the grants",
            });
        }
        if self
            .review_feedback
            .as_ref()
            .is_none_or(|r| r.supersedes_candidate != start.candidate)
        {
            return Err(ProofError::Grants {
                reason: "start_from continues a candidate the review does not name",
            });
        }
        Ok(())
    }

    /// Every path the agent may write: editable files and granted creates.
    #[cfg(test)]
    #[must_use]
    pub fn writable(&self, path: &RepoPath) -> bool {
        self.files.contains_key(path) || self.create_paths.contains(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TurnRequest, ProofError> {
        TurnRequest::parse(text.as_bytes())
    }

    const BASE: &str = r#""app_id":"app","build_family":"app_bundle","build_record_id":"b1","change_class":"patch","raw_user_request":"do it""#;

    #[test]
    fn accepts_reference_shape_with_and_without_grants() {
        let r = parse(&format!(
            r#"{{{BASE},"files":{{"app/a.txt":"x\n"}},"read_only_files":{{"tests/t.py":"y"}}}}"#
        ))
        .unwrap();
        assert_eq!(r.files.len(), 1);
        assert!(r.create_paths.is_empty());
        let r = parse(&format!(
            r#"{{{BASE},"files":{{"app/a.txt":"x"}},"read_only_files":{{}},"create_paths":["app/b.txt"],"delete_paths":["app/a.txt"]}}"#
        ))
        .unwrap();
        assert_eq!(r.create_paths[0].as_str(), "app/b.txt");
        assert!(r.writable(&RepoPath::parse("app/b.txt").unwrap()));
    }

    #[test]
    fn refuses_lenient_json_and_bad_scope() {
        let ok_files = r#""files":{"a.txt":"x"},"read_only_files":{}"#;
        let cases = [
            (
                format!(r#"{{{BASE},{ok_files},"extra":1}}"#),
                "PROOF_WORKER_REQUEST_FORMAT",
            ),
            (
                format!(r#"{{{BASE},{ok_files},"app_id":"again"}}"#),
                "PROOF_WORKER_REQUEST_FORMAT",
            ),
            (
                format!(r#"{{{BASE},"files":{{"a.txt":"x","a.txt":"y"}},"read_only_files":{{}}}}"#),
                "PROOF_WORKER_REQUEST_FORMAT",
            ),
            (
                format!(r#"{{{BASE},{ok_files},"create_paths":[NaN],"delete_paths":[]}}"#),
                "PROOF_WORKER_REQUEST_FORMAT",
            ),
            (
                format!(r#"{{{BASE},"files":{{"../x":"x"}},"read_only_files":{{}}}}"#),
                "PROOF_WORKER_REQUEST_PATH",
            ),
            (
                format!(r#"{{{BASE},"files":{{"/etc/passwd":"x"}},"read_only_files":{{}}}}"#),
                "PROOF_WORKER_REQUEST_PATH",
            ),
            (
                format!(r#"{{{BASE},{ok_files},"create_paths":["b.txt"]}}"#),
                "PROOF_WORKER_GRANTS",
            ),
            (
                format!(
                    r#"{{{BASE},{ok_files},"create_paths":["c.txt","b.txt"],"delete_paths":[]}}"#
                ),
                "PROOF_WORKER_GRANTS",
            ),
            (
                format!(r#"{{{BASE},{ok_files},"create_paths":[],"delete_paths":["z.txt"]}}"#),
                "PROOF_WORKER_GRANTS",
            ),
            (
                format!(r#"{{{BASE},{ok_files},"create_paths":["A.TXT"],"delete_paths":[]}}"#),
                "PROOF_WORKER_GRANTS",
            ),
            (
                format!(r#"{{{BASE},"files":{{".env":"x"}},"read_only_files":{{}}}}"#),
                "PROOF_WORKER_GRANTS",
            ),
            (
                format!(r#"{{{BASE},"files":{{}},"read_only_files":{{}}}}"#),
                "PROOF_WORKER_FILE_BUDGET",
            ),
        ];
        for (text, code) in cases {
            assert_eq!(parse(&text).unwrap_err().code(), code, "{text}");
        }
        let bad_utf8 = [br#"{"app_id":""#.as_slice(), b"\xff", br#""}"#].concat();
        assert_eq!(
            TurnRequest::parse(&bad_utf8).unwrap_err().code(),
            "PROOF_WORKER_REQUEST_FORMAT"
        );
        let many: Vec<String> = (0..51).map(|i| format!(r#""f{i}.txt":"x""#)).collect();
        let text = format!(
            r#"{{{BASE},"files":{{{}}},"read_only_files":{{}}}}"#,
            many.join(",")
        );
        assert_eq!(parse(&text).unwrap_err().code(), "PROOF_WORKER_FILE_BUDGET");
        let ro: Vec<String> = (0..=MAX_READ_ONLY_INSPECTION_FILES)
            .map(|i| format!(r#""t{i}.py":"x""#))
            .collect();
        let text = format!(
            r#"{{{BASE},"files":{{"a.txt":"x"}},"read_only_files":{{{}}}}}"#,
            ro.join(",")
        );
        assert_eq!(parse(&text).unwrap_err().code(), "PROOF_WORKER_FILE_BUDGET");
        // Editable and read-only files count together against the archive's cap.
        let files: Vec<String> = (0..10).map(|i| format!(r#""f{i}.txt":"x""#)).collect();
        let ro: Vec<String> = (0..41).map(|i| format!(r#""t{i}.py":"x""#)).collect();
        let text = format!(
            r#"{{{BASE},"files":{{{}}},"read_only_files":{{{}}}}}"#,
            files.join(","),
            ro.join(",")
        );
        assert_eq!(parse(&text).unwrap_err().code(), "PROOF_WORKER_FILE_BUDGET");
        let big = "x".repeat(MAX_READ_ONLY_INSPECTION_BYTES + 1);
        let text =
            format!(r#"{{{BASE},"files":{{"a.txt":"x"}},"read_only_files":{{"t.py":"{big}"}}}}"#);
        assert_eq!(
            parse(&text).unwrap_err().code(),
            "PROOF_WORKER_INSPECTION_BUDGET"
        );
        let huge = vec![b' '; MAX_REQUEST_BYTES + 1];
        assert_eq!(
            TurnRequest::parse(&huge).unwrap_err().code(),
            "PROOF_WORKER_REQUEST_BUDGET"
        );
    }
}
