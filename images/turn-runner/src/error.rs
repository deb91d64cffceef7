//! The crate's one error type. Messages never quote file contents or agent output.

use vocab::Untrusted;

/// Every code [`ProofError::code`] can return (archive and tunnel errors keep their crate's
/// code), and the codes of the runner's refusals of the agent's file requests (`FsRefusal`), for
/// documentation and contract tests.
pub const ERROR_CODES: &[&str] = vocab::code_table!(
    ProofError::CODES,
    &[
        "FS_OUTSIDE_WORKSPACE",
        "FS_UNSAFE_PATH",
        "FS_NOT_IN_SCOPE",
        "FS_READ_ONLY",
        "FS_SYMLINK",
        "FS_NOT_A_FILE",
        "FS_TOO_LARGE",
        "FS_NOT_UTF8",
        "FS_NOT_FOUND",
        "FS_IO",
    ],
);

/// Why a turn could not be run or reported. Every message starts with its code (see
/// [`vocab::Coded`]); names are shown only through [`Untrusted`]. The class separates the
/// runner's environment (I/O, workspace setup, starting the agent) from a refused request.
/// Isolation failures are refusals here; the runner gives them their own exit status.
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum ProofError {
    #[error("PROOF_WORKER_REQUEST_BUDGET: request exceeds {limit} bytes")]
    RequestBudget { limit: usize },
    /// `reason` is the strict parser's message, shown escaped and capped.
    #[error("PROOF_WORKER_REQUEST_FORMAT: request is not a valid turn payload: {}", Untrusted::bare(.reason))]
    RequestFormat { reason: String },
    #[error("PROOF_WORKER_REQUEST_PATH: unsafe path in request: {}", Untrusted::quoted(.path))]
    RequestPath { path: String },
    #[error("PROOF_WORKER_GRANTS: invalid operation grants: {reason}")]
    Grants { reason: &'static str },
    #[error("PROOF_WORKER_FILE_BUDGET: request file count {count} outside 1..={limit}")]
    FileBudget { count: usize, limit: usize },
    #[error("PROOF_WORKER_INSPECTION_BUDGET: read-only inspection files exceed {limit} bytes")]
    InspectionBudget { limit: usize },
    #[error("PROOF_WORKER_WORKSPACE: workspace setup failed: {reason}")]
    #[coded(environment)]
    Workspace { reason: String },
    #[error("PROOF_WORKER_AGENT_SPAWN: agent could not be started")]
    #[coded(environment)]
    AgentSpawn,
    /// `exposures` include names the agent reported: each is shown escaped and capped.
    #[error("ACP_PROOF_ISOLATION_FAILED: isolation exposure: {}", list_bare(.exposures))]
    Isolation { exposures: Vec<String> },
    #[error("PROOF_WORKER_OUTPUT: output could not be encoded")]
    Output,
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error("PROOF_WORKER_IO: i/o failure: {kind}")]
    #[coded(environment)]
    Io { kind: std::io::ErrorKind },
    /// The `live` object is missing where required, present where not, or invalid.
    #[error("PROOF_WORKER_LIVE_REQUEST: invalid live turn settings: {reason}")]
    LiveRequest { reason: &'static str },
    /// The worker broke the framed protocol (or the stream ended early).
    #[error(transparent)]
    #[coded(rejected)]
    Tunnel(#[from] tunnel::TunnelError),
    /// The loopback listener for the agent's model requests could not be opened.
    #[error("PROOF_WORKER_LIVE_LISTEN: cannot listen on 127.0.0.1:{port}")]
    #[coded(environment)]
    LiveListen { port: u16 },
}

/// Most exposures a message names; the rest are counted.
const MAX_LISTED_EXPOSURES: usize = 20;

fn list_bare(items: &[String]) -> String {
    let mut parts: Vec<String> = items
        .iter()
        .take(MAX_LISTED_EXPOSURES)
        .map(|s| Untrusted::bare(s).to_string())
        .collect();
    if items.len() > MAX_LISTED_EXPOSURES {
        parts.push(format!("and {} more", items.len() - MAX_LISTED_EXPOSURES));
    }
    parts.join(", ")
}

impl From<std::io::Error> for ProofError {
    fn from(e: std::io::Error) -> Self {
        Self::Io { kind: e.kind() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One sample of every variant (the all-variants test fails until a new variant has one).
    fn samples() -> Vec<ProofError> {
        vec![
            ProofError::RequestBudget { limit: 10 },
            ProofError::RequestFormat {
                reason: "missing field".to_owned(),
            },
            ProofError::RequestPath {
                path: "../x".to_owned(),
            },
            ProofError::Grants {
                reason: "duplicate",
            },
            ProofError::FileBudget {
                count: 0,
                limit: 50,
            },
            ProofError::InspectionBudget { limit: 10 },
            ProofError::Workspace {
                reason: "read-only file system".to_owned(),
            },
            ProofError::AgentSpawn,
            ProofError::Isolation {
                exposures: vec!["runner:network".to_owned()],
            },
            ProofError::Output,
            ProofError::Archive(archive::ArchiveError::Set),
            ProofError::Io {
                kind: std::io::ErrorKind::BrokenPipe,
            },
            ProofError::LiveRequest {
                reason: "unknown agent",
            },
            ProofError::Tunnel(tunnel::TunnelError::Hello),
            ProofError::LiveListen { port: 8417 },
        ]
    }

    #[test]
    fn every_variant_starts_with_its_code_once() {
        let samples = samples();
        vocab::check_coded_samples(&samples).unwrap();
    }

    #[test]
    fn the_table_lists_every_own_code_once() {
        use crate::confine::FsRefusal;
        let samples = samples();
        let own = samples
            .iter()
            .filter(|e| !matches!(e, ProofError::Archive(_) | ProofError::Tunnel(_)))
            .map(ProofError::code);
        let refusals = [
            FsRefusal::OutsideWorkspace,
            FsRefusal::UnsafePath,
            FsRefusal::NotInScope,
            FsRefusal::ReadOnly,
            FsRefusal::Symlink,
            FsRefusal::NotAFile,
            FsRefusal::TooLarge,
            FsRefusal::NotUtf8,
            FsRefusal::NotFound,
            FsRefusal::Io,
        ];
        for r in refusals {
            match r {
                FsRefusal::OutsideWorkspace
                | FsRefusal::UnsafePath
                | FsRefusal::NotInScope
                | FsRefusal::ReadOnly
                | FsRefusal::Symlink
                | FsRefusal::NotAFile
                | FsRefusal::TooLarge
                | FsRefusal::NotUtf8
                | FsRefusal::NotFound
                | FsRefusal::Io => {}
            }
        }
        let refusal_codes: Vec<String> = refusals.iter().map(|r| r.code()).collect();
        let mut produced: Vec<&str> = own.collect();
        produced.extend(refusal_codes.iter().map(String::as_str));
        vocab::check_code_table(ERROR_CODES, produced).unwrap();
    }

    #[test]
    fn r_request_paths_are_escaped() {
        let e = ProofError::RequestPath {
            path: "a\u{1b}[31m\u{202e}".to_owned(),
        };
        assert_eq!(
            e.to_string(),
            "PROOF_WORKER_REQUEST_PATH: unsafe path in request: 'a\\x1b[31m\\u202e'"
        );
    }
}
