//! One coding turn inside the container: parse the payload, materialise the workspace, drive the
//! agent over ACP (`initialize`, `session/new`, `session/prompt`), harvest and export, and build
//! the `{"proposal": …, "workspace_archive_base64": …}` document.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AuthCapabilities, AuthenticateRequest, ClientCapabilities, ContentBlock, CreateTerminalRequest,
    FileSystemCapabilities, InitializeRequest, NewSessionRequest, PermissionOptionKind,
    PromptRequest, ReadTextFileRequest, ReadTextFileResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionNotification, SessionUpdate, StopReason, TextContent, ToolCallContent, ToolKind,
    WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{Agent, Client, ErrorCode};
use archive::{HarvestOptions, StagedWorkspace, WorkspaceHarvest};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use snapshot::{FileOp, ProposalStatus, ProposedFileChange, RepoPath, StagedPatchProposal};
use snapshot::{ProviderEventKind, ProviderEventRecord};
use vocab::{Sha256, Untrusted};

use crate::agents::AcpSetup;
use crate::confine::{ConfinedWorkspace, FsRefusal};
use crate::error::ProofError;
use crate::markers::{ProbeSelection, probe_selection};
use crate::probes;
use crate::prompt::build_prompt;
use crate::request::TurnRequest;
use crate::synthetic_agent::AgentReport;
use crate::transport::{BudgetFlag, ChannelLimits, bounded_lines};

/// The proof image's turn deadline (reference §12.1).
pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(30);
/// Most reply text kept from the agent; more is a budget violation.
pub const MAX_REPLY_BYTES: usize = 1 << 20;
/// Longest summary / rationale, in characters (reference: 2000).
pub const MAX_SUMMARY_CHARS: usize = 2000;
/// Most paths a refusal summary names (each escaped and capped by [`Untrusted::bare`]).
const MAX_LISTED_NAMES: usize = 8;
/// Highest token count a usage field may carry (reference §11).
pub const MAX_USAGE_TOKENS: u64 = 10_000_000;

/// Directories a live turn's commands leave behind that are dropped before the harvest (when
/// they hold no approved file): Python's bytecode caches and pytest's cache. The agent's
/// environment already asks both tools not to write them ([`COMMAND_ENV`]); this catches the rest.
pub const BYPRODUCT_DIRS: &[&str] = &["__pycache__", ".pytest_cache"];

/// Settings every live agent's commands inherit, steering build byproducts out of the workspace:
/// no Python bytecode, no pytest cache, and cargo's target directory in `/tmp` (which a rust
/// environment's live image mounts `exec` and sized for builds), built without incremental data.
pub const COMMAND_ENV: &[(&str, &str)] = &[
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTEST_ADDOPTS", "-p no:cacheprovider"),
    ("CARGO_TARGET_DIR", "/tmp/cargo-target"),
    ("CARGO_INCREMENTAL", "0"),
];

/// Most EVENT objects one live turn sends (the protocol allows more; progress needs fewer).
pub const MAX_LIVE_EVENTS: u32 = 2_000;
/// Longest string field in an EVENT object, in characters.
const MAX_EVENT_FIELD_CHARS: usize = 200;

/// Receives progress objects of a live turn (advisory; the live runner turns them into EVENT
/// frames).
pub type EventSink = Arc<dyn Fn(serde_json::Map<String, serde_json::Value>) + Send + Sync>;

/// What a live turn adds to the offline one: an external stop (the worker's STOP frame), a
/// progress sink, and the permission policy for approved edits. The default is the offline turn.
#[derive(Clone, Default)]
pub struct TurnHooks {
    /// The turn is live: the request must carry its `live` object, and permission requests for
    /// edits of approved paths are allowed (everything else is still refused).
    pub live: bool,
    /// Cancelled when the agent must stop now; the workspace is harvested as it stands.
    pub stop: Option<tokio_util::sync::CancellationToken>,
    /// Progress objects.
    pub events: Option<EventSink>,
}

impl std::fmt::Debug for TurnHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnHooks")
            .field("live", &self.live)
            .field("stop", &self.stop.is_some())
            .field("events", &self.events.is_some())
            .finish()
    }
}

/// How permission requests are answered.
#[derive(Debug, Clone)]
enum PermissionPolicy {
    /// The offline proof: reject once when offered, otherwise cancel. Never allow.
    RejectAll,
    /// Live turns: allow once a command (`execute`: the container is the sandbox, and the
    /// harvest, not the answer, decides what leaves it) and an edit whose every path (diffs and
    /// locations) is an approved editable file or granted create inside the workspace root;
    /// refuse everything else (reads the agent asks about, fetches, edits anywhere else).
    ApprovedEdits {
        root: PathBuf,
        writable: std::collections::BTreeSet<RepoPath>,
    },
}

impl PermissionPolicy {
    fn allows(&self, req: &RequestPermissionRequest) -> bool {
        let Self::ApprovedEdits { root, writable } = self else {
            return false;
        };
        let fields = &req.tool_call.fields;
        if fields.kind == Some(ToolKind::Execute) {
            return true;
        }
        if fields.kind != Some(ToolKind::Edit) {
            return false;
        }
        let paths = tool_paths(fields);
        !paths.is_empty()
            && paths
                .iter()
                .all(|p| relative_repo_path(root, p).is_some_and(|rel| writable.contains(&rel)))
    }
}

/// Every path a tool call names (diff targets and locations).
fn tool_paths(fields: &agent_client_protocol::v1::schema::ToolCallUpdateFields) -> Vec<PathBuf> {
    let diffs = fields.content.iter().flatten().filter_map(|c| match c {
        ToolCallContent::Diff(d) => Some(d.path.clone()),
        _ => None,
    });
    let locations = fields.locations.iter().flatten().map(|l| l.path.clone());
    diffs.chain(locations).collect()
}

/// `path` as a repository path when it is absolute and under `root` (no `..`, no other escape:
/// the remainder must pass the portable-path check).
fn relative_repo_path(root: &Path, path: &Path) -> Option<RepoPath> {
    if !path.is_absolute() {
        return None;
    }
    let rel = path.strip_prefix(root).ok()?;
    RepoPath::parse(rel.to_str()?).ok()
}

fn capped(text: &str) -> serde_json::Value {
    serde_json::Value::String(text.chars().take(MAX_EVENT_FIELD_CHARS).collect())
}

/// How the runner is configured (the binary fills it from its flags).
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// Directory under which a fresh turn directory is created (absolute).
    pub workspace_root: PathBuf,
    /// The agent executable.
    pub agent: PathBuf,
    /// Arguments for the agent.
    pub agent_args: Vec<String>,
    /// The agent's complete environment (only `PATH` and `HOME`).
    pub agent_env: Vec<(String, String)>,
    /// Deadline for the whole ACP exchange.
    pub turn_timeout: Duration,
    /// Archive byte cap (≤ 16 MiB).
    pub max_archive_bytes: usize,
    /// ACP channel caps.
    pub limits: ChannelLimits,
    /// A live turn takes the program from the request's agent adapter (`turn-runner --live`
    /// without `--agent`).
    pub agent_from_request: bool,
    /// What the ACP client announces and sends before `session/new`.
    pub acp: AcpSetup,
}

impl RunnerConfig {
    /// The in-image defaults: `/workspace`, `/fake-agent`, 30 s, 16 MiB.
    #[must_use]
    pub fn image_defaults() -> Self {
        Self {
            workspace_root: PathBuf::from("/workspace"),
            agent: PathBuf::from("/fake-agent"),
            agent_args: Vec::new(),
            agent_env: default_agent_env(),
            turn_timeout: DEFAULT_TURN_TIMEOUT,
            max_archive_bytes: archive::MAX_ARCHIVE_BYTES,
            limits: ChannelLimits::RUNNER,
            agent_from_request: false,
            acp: AcpSetup::offline(),
        }
    }
}

/// `PATH` and `HOME` for the agent: the runner's own values when set, else fixed defaults.
#[must_use]
pub fn default_agent_env() -> Vec<(String, String)> {
    let get = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    vec![
        ("PATH".to_owned(), get("PATH", "/")),
        ("HOME".to_owned(), get("HOME", "/home/sandbox")),
    ]
}

/// The one stdout document (reference §10.6), in wire field order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnOutput {
    pub proposal: StagedPatchProposal,
    pub workspace_archive_base64: Option<String>,
}

/// The turn's output plus every isolation exposure found (non-empty ⇒ the turn fails).
#[derive(Debug, Clone)]
pub struct TurnResult {
    pub output: TurnOutput,
    pub exposures: Vec<String>,
}

#[derive(Debug, Default)]
struct SharedState {
    reply: String,
    reply_overflow: bool,
    terminal_requests: u32,
    fs_refusals: Vec<FsRefusal>,
    /// Permission requests refused (live and offline).
    permissions_refused: u32,
    /// Permission requests allowed (live turns, approved edits only).
    permissions_allowed: u32,
    /// The turn was stopped from outside (STOP) before the agent ended it.
    stopped: bool,
    events_sent: u32,
}

/// How the ACP exchange ended.
#[derive(Debug)]
enum Ended {
    Stopped(StopReason),
    TimedOut,
    Budget,
    ReplyBudget,
    Failed,
    /// Stopped from outside (the worker's STOP): the workspace is harvested as it stands.
    Halted,
}

/// Runs one turn over the stdin bytes.
///
/// # Errors
/// Request errors (`PROOF_WORKER_REQUEST_*`, `PROOF_WORKER_GRANTS`, `PROOF_WORKER_FILE_BUDGET`),
/// workspace setup or cleanup failures, and a failure to start the agent. Agent misbehaviour is not
/// an error: it becomes the proposal status.
pub async fn run_turn(cfg: &RunnerConfig, stdin: &[u8]) -> Result<TurnResult, ProofError> {
    run_turn_with(cfg, stdin, &TurnHooks::default()).await
}

/// [`run_turn`] with the live turn's hooks.
///
/// # Errors
/// As [`run_turn`], and `PROOF_WORKER_LIVE_REQUEST` when the request's `live` object is missing
/// in a live turn or present in an offline one.
pub async fn run_turn_with(
    cfg: &RunnerConfig,
    stdin: &[u8],
    hooks: &TurnHooks,
) -> Result<TurnResult, ProofError> {
    let request = TurnRequest::parse(stdin)?;
    match (hooks.live, request.live.is_some()) {
        (true, false) => {
            return Err(ProofError::LiveRequest {
                reason: "a live turn needs the live object",
            });
        }
        (false, true) => {
            return Err(ProofError::LiveRequest {
                reason: "the live object in an offline turn",
            });
        }
        _ => {}
    }
    if !cfg.workspace_root.is_absolute() {
        return Err(ProofError::Workspace {
            reason: "workspace root must be absolute".to_owned(),
        });
    }
    let selection = probe_selection(&request.raw_user_request);
    let probing = probes_requested(&selection);
    let own_probe = probing.then(|| probes::collect(&selection));

    let turn_dir = cfg.workspace_root.join(turn_dir_name(stdin));
    let no_start = archive::StartOverlay::new();
    let start = request
        .start_from
        .as_ref()
        .map_or(&no_start, |s| &s.overlay);
    let ws = archive::materialize_workspace_from(
        &turn_dir,
        &request.files,
        &request.read_only_files,
        start,
    )?;
    let result = run_in_workspace(cfg, &request, &ws, stdin, hooks).await;
    let cleanup = ws.cleanup();
    let (output, agent_report) = result?;
    cleanup?;

    let mut exposures = Vec::new();
    if let Some(own) = own_probe {
        exposures.extend(own.exposures().into_iter().map(|e| format!("runner:{e}")));
        match agent_report.and_then(|r| r.probes) {
            Some(agent) => {
                exposures.extend(agent.exposures().into_iter().map(|e| format!("agent:{e}")))
            }
            None => exposures.push("agent:probe_report_missing".to_owned()),
        }
    }
    Ok(TurnResult { output, exposures })
}

fn probes_requested(sel: &ProbeSelection) -> bool {
    sel.any()
}

fn turn_dir_name(stdin: &[u8]) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = format!(
        "{}:{}:{}",
        Sha256::of(stdin).bare_hex(),
        std::process::id(),
        nanos
    );
    let hex = Sha256::of(seed.as_bytes()).bare_hex();
    format!("turn-{}", hex.get(..24).unwrap_or(&hex))
}

async fn run_in_workspace(
    cfg: &RunnerConfig,
    request: &TurnRequest,
    ws: &StagedWorkspace,
    stdin: &[u8],
    hooks: &TurnHooks,
) -> Result<(TurnOutput, Option<AgentReport>), ProofError> {
    let confined = ConfinedWorkspace::open(
        ws.root(),
        request.files.keys().cloned().collect(),
        request.read_only_files.keys().cloned().collect(),
        request.create_paths.iter().cloned().collect(),
    )?;
    let prompt = build_prompt(request);
    let state = Arc::new(Mutex::new(SharedState::default()));
    let policy = if hooks.live {
        PermissionPolicy::ApprovedEdits {
            root: ws.root().to_path_buf(),
            writable: request
                .files
                .keys()
                .chain(&request.create_paths)
                .cloned()
                .collect(),
        }
    } else {
        PermissionPolicy::RejectAll
    };
    let ended = drive_agent(
        cfg,
        ws.root(),
        &prompt,
        Arc::new(confined),
        state.clone(),
        hooks,
        policy,
    )
    .await?;
    let (reply, overflow, refused) = match state.lock() {
        Ok(s) => (s.reply.clone(), s.reply_overflow, s.permissions_refused),
        Err(_) => (String::new(), true, 0),
    };
    let report: Option<AgentReport> =
        vocab::from_slice_strict(reply.as_bytes(), MAX_REPLY_BYTES).ok();
    let mut builder = ProposalBuilder::new(stdin, &prompt, &reply);
    if let Some(live) = &request.live {
        builder.model = live.model.clone();
    }
    if let Ok(s) = state.lock() {
        builder.events = refusal_events(&s);
    }
    let ended = match ended {
        Ended::Stopped(_) | Ended::Failed if overflow => Ended::ReplyBudget,
        other => other,
    };
    let output = match ended {
        Ended::TimedOut => {
            builder.finish(ProposalStatus::Timeout, Some("PROOF_WORKER_TURN_TIMEOUT"))
        }
        Ended::Budget => builder.finish(
            ProposalStatus::BudgetExceeded,
            Some("PROOF_WORKER_CHANNEL_BUDGET"),
        ),
        Ended::ReplyBudget => builder.finish(
            ProposalStatus::BudgetExceeded,
            Some("PROOF_WORKER_REPLY_BUDGET"),
        ),
        Ended::Failed => builder.finish(ProposalStatus::Failed, Some("PROOF_WORKER_AGENT_FAILED")),
        Ended::Stopped(StopReason::EndTurn) | Ended::Halted => {
            if hooks.live {
                // What the agent's commands built is never part of a candidate (docs/LIVE.md).
                // A failure leaves them in place, and the harvest below refuses them.
                let _removed = ws.remove_byproducts(BYPRODUCT_DIRS);
            }
            harvest_and_export(cfg, request, ws, &mut builder)?
        }
        // An agent that offers no "deny and continue" cancels its turn after a refused
        // permission: it asked for something outside the approval; nothing is harvested.
        Ended::Stopped(StopReason::Cancelled) if refused > 0 => {
            builder.summary = "the agent asked for an action outside the approval".to_owned();
            builder.finish(
                ProposalStatus::RejectedScope,
                Some("PROOF_WORKER_PERMISSION_REFUSED"),
            )
        }
        Ended::Stopped(_) => {
            builder.finish(ProposalStatus::Failed, Some("PROOF_WORKER_AGENT_STOPPED"))
        }
    };
    Ok((output, report))
}

fn harvest_and_export(
    cfg: &RunnerConfig,
    request: &TurnRequest,
    ws: &StagedWorkspace,
    builder: &mut ProposalBuilder,
) -> Result<TurnOutput, ProofError> {
    let harvested = ws.harvest(HarvestOptions {
        allow_new_files: !request.create_paths.is_empty(),
        allow_deletes: !request.delete_paths.is_empty(),
    });
    let harvest: WorkspaceHarvest = match harvested {
        Ok(h) => h,
        Err(e) if e.is_environment() => return Err(e.into()),
        Err(e) => {
            // The agent grew the tree past the harvest's own bounds (entries, bytes, depth).
            builder.summary = format!("workspace harvest refused: {}", e.code());
            return Ok(builder.finish(status_for(&e), Some(e.code())));
        }
    };
    if !harvest.violations.is_empty() {
        let listed: Vec<String> = harvest
            .violations
            .iter()
            .take(MAX_LISTED_NAMES)
            .map(|v| format!("{} ({})", Untrusted::bare(&v.path), v.kind))
            .collect();
        builder.summary = format!("out-of-scope modifications: {}", listed.join(", "));
        return Ok(builder.finish(
            ProposalStatus::RejectedScope,
            Some("REPOSITORY_PATCH_ARCHIVE_SCOPE"),
        ));
    }
    let unapproved: Vec<String> = harvest
        .files
        .iter()
        .filter(|f| match f.op {
            FileOp::Create => !request.create_paths.contains(&f.path),
            FileOp::Delete => !request.delete_paths.contains(&f.path),
            FileOp::Update => false,
        })
        .take(MAX_LISTED_NAMES)
        .map(|f| format!("{} ({})", Untrusted::bare(f.path.as_str()), f.op.as_str()))
        .collect();
    if !unapproved.is_empty() {
        builder.summary = format!("unapproved operations: {}", unapproved.join(", "));
        return Ok(builder.finish(
            ProposalStatus::RejectedScope,
            Some("REPOSITORY_PATCH_ARCHIVE_OP"),
        ));
    }
    let changed: Vec<&archive::HarvestedFile> = harvest
        .files
        .iter()
        .filter(|f| f.modified || f.op != FileOp::Update)
        .collect();
    if changed.is_empty() {
        return Ok(builder.finish(ProposalStatus::Empty, None));
    }
    let max_files =
        request.files.len() + request.create_paths.len() + request.read_only_files.len();
    let archive = match archive::export_workspace_archive(
        ws,
        max_files,
        cfg.max_archive_bytes,
        &request.create_paths,
        &request.delete_paths,
    ) {
        Ok(bytes) => bytes,
        Err(e) => {
            builder.summary = format!("workspace export refused: {}", e.code());
            return Ok(builder.finish(status_for(&e), Some(e.code())));
        }
    };
    for file in changed {
        let content = match (&file.op, &file.content) {
            (FileOp::Delete, _) => None,
            (_, Some(bytes)) => match String::from_utf8(bytes.clone()) {
                Ok(text) => Some(text),
                Err(_) => {
                    return Ok(builder.finish(
                        ProposalStatus::RejectedScope,
                        Some("REPOSITORY_PATCH_ARCHIVE_UTF8"),
                    ));
                }
            },
            (_, None) => {
                return Ok(builder.finish(
                    ProposalStatus::RejectedScope,
                    Some("REPOSITORY_PATCH_ARCHIVE_OP"),
                ));
            }
        };
        builder.changed.push(ProposedFileChange {
            path: file.path.to_string(),
            op: file.op,
            content,
        });
    }
    let mut output = builder.finish(ProposalStatus::Completed, None);
    output.workspace_archive_base64 =
        Some(base64::engine::general_purpose::STANDARD.encode(archive));
    Ok(output)
}

/// One provider event per refused request (codes only), bounded by the proposal's event cap.
fn refusal_events(state: &SharedState) -> Vec<ProviderEventRecord> {
    let terminal = (0..state.terminal_requests).map(|_| "refused terminal/create".to_owned());
    let fs = state
        .fs_refusals
        .iter()
        .map(|r| format!("refused fs request: {}", r.code()));
    let permissions = (0..state.permissions_refused).map(|_| "refused permission".to_owned());
    let stopped = state
        .stopped
        .then(|| "turn stopped by the worker".to_owned());
    terminal
        .chain(fs)
        .chain(permissions)
        .chain(stopped)
        .take(snapshot::MAX_PROVIDER_EVENTS)
        .map(|summary| ProviderEventRecord {
            kind: ProviderEventKind::ToolCall,
            summary,
        })
        .collect()
}

fn status_for(e: &archive::ArchiveError) -> ProposalStatus {
    if e.code() == "REPOSITORY_PATCH_ARCHIVE_BUDGET" {
        ProposalStatus::BudgetExceeded
    } else {
        ProposalStatus::RejectedScope
    }
}

struct ProposalBuilder {
    events: Vec<ProviderEventRecord>,
    model: String,
    proposal_id: String,
    usage: serde_json::Value,
    summary: String,
    changed: Vec<ProposedFileChange>,
}

fn tokens(bytes: usize) -> u64 {
    (bytes.div_ceil(4) as u64).min(MAX_USAGE_TOKENS / 2)
}

impl ProposalBuilder {
    fn new(stdin: &[u8], prompt: &str, reply: &str) -> Self {
        let hex = Sha256::of(stdin).bare_hex();
        let prompt_tokens = tokens(prompt.len());
        let completion_tokens = tokens(reply.len());
        Self {
            events: Vec::new(),
            model: "proof-model".to_owned(),
            proposal_id: format!("acp-proof-{}", hex.get(..32).unwrap_or(&hex)),
            usage: serde_json::json!({
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }),
            summary: reply.chars().take(MAX_SUMMARY_CHARS).collect(),
            changed: Vec::new(),
        }
    }

    fn finish(&mut self, status: ProposalStatus, error: Option<&str>) -> TurnOutput {
        let summary: String = self.summary.chars().take(MAX_SUMMARY_CHARS).collect();
        let changed = std::mem::take(&mut self.changed);
        let owned_paths = changed.iter().map(|c| c.path.clone()).collect();
        TurnOutput {
            proposal: StagedPatchProposal {
                proposal_id: self.proposal_id.clone(),
                provider_id: "acp".to_owned(),
                provider_model: Some(self.model.clone()),
                status,
                usage: Some(self.usage.clone()),
                rationale: summary.clone(),
                summary,
                changed_files: changed,
                owned_paths,
                validation_strategy_hint: Some("local".to_owned()),
                validation_commands: Vec::new(),
                start_preview: false,
                needs_human_review: true,
                tool_context_loaded: false,
                error: error.map(str::to_owned),
                provider_events: self.events.clone(),
            },
            workspace_archive_base64: None,
        }
    }
}

fn refusal_error(r: FsRefusal) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(ErrorCode::INVALID_PARAMS, r.code())
}

fn record_refusal(state: &Mutex<SharedState>, r: FsRefusal) {
    if let Ok(mut s) = state.lock() {
        s.fs_refusals.push(r);
    }
}

async fn drive_agent(
    cfg: &RunnerConfig,
    ws_root: &Path,
    prompt: &str,
    confined: Arc<ConfinedWorkspace>,
    state: Arc<Mutex<SharedState>>,
    hooks: &TurnHooks,
    policy: PermissionPolicy,
) -> Result<Ended, ProofError> {
    let mut command = tokio::process::Command::new(&cfg.agent);
    command
        .args(&cfg.agent_args)
        .env_clear()
        .envs(cfg.agent_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(ws_root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .process_group(0);
    let mut child = command.spawn().map_err(|_| ProofError::AgentSpawn)?;
    let group = child.id();
    // Under memory pressure the kernel should kill the agent, not the runner that reports it.
    if let Some(pid) = group {
        let _ = std::fs::write(format!("/proc/{pid}/oom_score_adj"), b"1000");
    }
    let (Some(agent_stdin), Some(agent_stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(ProofError::AgentSpawn);
    };
    let flag = BudgetFlag::default();
    let transport = bounded_lines(agent_stdout, agent_stdin, cfg.limits, flag.clone());

    let notify_state = state.clone();
    let permission_state = state.clone();
    let notify_events = hooks.events.clone();
    let permission_events = hooks.events.clone();
    let notify_root = ws_root.to_path_buf();
    let read_state = state.clone();
    let write_state = state.clone();
    let terminal_state = state.clone();
    let read_ws = confined.clone();
    let write_ws = confined;
    let cwd = ws_root.to_path_buf();
    let prompt_text = prompt.to_owned();
    let acp = cfg.acp.clone();

    let exchange = Client
        .v1()
        .name("turn-runner")
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                if let Some(sink) = &notify_events
                    && let Some(event) = progress_event(&notify_root, &n.update)
                {
                    emit(&notify_state, sink, event);
                }
                if let SessionUpdate::AgentMessageChunk(chunk) = n.update
                    && let ContentBlock::Text(t) = chunk.content
                    && let Ok(mut s) = notify_state.lock()
                {
                    if s.reply.len() + t.text.len() > MAX_REPLY_BYTES {
                        s.reply_overflow = true;
                    } else {
                        s.reply.push_str(&t.text);
                    }
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                // Allow once only what the policy allows (and only when "allow once" is offered);
                // otherwise reject once when offered, else cancel.
                let allow = policy
                    .allows(&req)
                    .then(|| {
                        req.options
                            .iter()
                            .find(|o| o.kind == PermissionOptionKind::AllowOnce)
                    })
                    .flatten();
                let reject = req.options.iter().find(|o| {
                    matches!(
                        o.kind,
                        PermissionOptionKind::RejectOnce | PermissionOptionKind::RejectAlways
                    )
                });
                if let Ok(mut s) = permission_state.lock() {
                    if allow.is_some() {
                        s.permissions_allowed += 1;
                    } else {
                        s.permissions_refused += 1;
                    }
                }
                if let Some(sink) = &permission_events {
                    let kind = req
                        .tool_call
                        .fields
                        .kind
                        .and_then(|k| serde_json::to_value(k).ok())
                        .unwrap_or(serde_json::Value::Null);
                    let mut event = serde_json::Map::new();
                    event.insert("event".to_owned(), "permission".into());
                    event.insert("id".to_owned(), capped(&req.tool_call.tool_call_id.0));
                    event.insert("kind".to_owned(), kind);
                    let decision = if allow.is_some() {
                        "allowed"
                    } else {
                        "refused"
                    };
                    event.insert("decision".to_owned(), decision.into());
                    emit(&permission_state, sink, event);
                }
                let outcome = match allow.or(reject) {
                    Some(o) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                        o.option_id.clone(),
                    )),
                    None => RequestPermissionOutcome::Cancelled,
                };
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ReadTextFileRequest, responder, _cx| match read_ws
                .read(&req.path, req.line, req.limit)
            {
                Ok(content) => responder.respond(ReadTextFileResponse::new(content)),
                Err(r) => {
                    record_refusal(&read_state, r);
                    responder.respond_with_error(refusal_error(r))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: WriteTextFileRequest, responder, _cx| match write_ws
                .write(&req.path, &req.content)
            {
                Ok(()) => responder.respond(WriteTextFileResponse::new()),
                Err(r) => {
                    record_refusal(&write_state, r);
                    responder.respond_with_error(refusal_error(r))
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: CreateTerminalRequest, responder, _cx| {
                // Terminals are never advertised; any request is refused.
                if let Ok(mut s) = terminal_state.lock() {
                    s.terminal_requests += 1;
                }
                responder.respond_with_error(agent_client_protocol::Error::method_not_found())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
            let mut caps = ClientCapabilities::new()
                .fs(FileSystemCapabilities::new()
                    .read_text_file(acp.client_fs)
                    .write_text_file(acp.client_fs))
                .terminal(false);
            if acp.gateway.is_some() {
                caps = caps.auth(AuthCapabilities::new().meta(meta("gateway", true.into())));
            }
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps))
                .block_task()
                .await?;
            if let Some(gateway) = &acp.gateway {
                let target = serde_json::json!({"baseUrl": gateway.base_url, "headers": {}});
                cx.send_request(
                    AuthenticateRequest::new(gateway.method).meta(meta("gateway", target)),
                )
                .block_task()
                .await?;
            }
            let session = cx
                .send_request(NewSessionRequest::new(cwd))
                .block_task()
                .await?;
            let done = cx
                .send_request(PromptRequest::new(
                    session.session_id,
                    vec![ContentBlock::Text(TextContent::new(prompt_text))],
                ))
                .block_task()
                .await?;
            Ok(done.stop_reason)
        });

    let stop = hooks.stop.clone();
    let halted = async move {
        match stop {
            Some(token) => token.cancelled_owned().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        outcome = tokio::time::timeout(cfg.turn_timeout, exchange) => Some(outcome),
        () = halted => None,
    };
    // Not every agent exits when its stdin closes, and its commands may outlive it: the whole
    // process group is killed.
    stop_agent(&mut child, group).await;
    let Some(outcome) = outcome else {
        if let Ok(mut s) = state.lock() {
            s.stopped = true;
        }
        return Ok(Ended::Halted);
    };
    Ok(match outcome {
        Err(_) => Ended::TimedOut,
        Ok(_) if flag.exceeded() => Ended::Budget,
        Ok(Ok(stop)) => Ended::Stopped(stop),
        Ok(Err(e)) => {
            tracing::warn!(code = ?e.code, "agent exchange failed");
            Ended::Failed
        }
    })
}

/// A `_meta` object with one key.
fn meta(key: &str, value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert(key.to_owned(), value);
    m
}

/// Sends one progress object unless the turn's event cap is reached.
fn emit(
    state: &Mutex<SharedState>,
    sink: &EventSink,
    event: serde_json::Map<String, serde_json::Value>,
) {
    let allowed = match state.lock() {
        Ok(mut s) if s.events_sent < MAX_LIVE_EVENTS => {
            s.events_sent += 1;
            true
        }
        _ => false,
    };
    if allowed {
        sink(event);
    }
}

/// A progress object for a tool call the agent reports: its kind, status, capped title, and the
/// workspace paths it names (files touched), as repository paths when they are inside the root.
fn progress_event(
    root: &Path,
    update: &SessionUpdate,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let (id, fields) = match update {
        SessionUpdate::ToolCall(call) => (
            call.tool_call_id.0.to_string(),
            agent_client_protocol::v1::schema::ToolCallUpdateFields::new()
                .kind(call.kind)
                .status(call.status)
                .title(call.title.clone())
                .content(call.content.clone())
                .locations(call.locations.clone()),
        ),
        SessionUpdate::ToolCallUpdate(update) => {
            (update.tool_call_id.0.to_string(), update.fields.clone())
        }
        _ => return None,
    };
    let mut event = serde_json::Map::new();
    event.insert("event".to_owned(), "tool_call".into());
    event.insert("id".to_owned(), capped(&id));
    if let Some(kind) = fields.kind.and_then(|k| serde_json::to_value(k).ok()) {
        event.insert("kind".to_owned(), kind);
    }
    if let Some(status) = fields.status.and_then(|k| serde_json::to_value(k).ok()) {
        event.insert("status".to_owned(), status);
    }
    if let Some(title) = &fields.title {
        event.insert("title".to_owned(), capped(title));
    }
    let files: Vec<serde_json::Value> = tool_paths(&fields)
        .iter()
        .take(MAX_LISTED_NAMES)
        .map(|p| match relative_repo_path(root, p) {
            Some(rel) => capped(rel.as_str()),
            None => "(outside the workspace)".into(),
        })
        .collect();
    if !files.is_empty() {
        event.insert("files".to_owned(), files.into());
    }
    Some(event)
}

/// Kills the agent's whole process group (it runs in its own), then reaps the agent.
async fn stop_agent(child: &mut tokio::process::Child, group: Option<u32>) {
    if let Some(pid) = group
        .and_then(|g| i32::try_from(g).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill().await;
}

#[cfg(test)]
mod tests {
    use agent_client_protocol::v1::schema::{
        PermissionOption, ToolCallLocation, ToolCallUpdate, ToolCallUpdateFields,
    };

    use super::*;

    fn request(kind: ToolKind, paths: &[&str]) -> RequestPermissionRequest {
        let mut fields = ToolCallUpdateFields::default();
        fields.kind = Some(kind);
        fields.locations = Some(paths.iter().map(ToolCallLocation::new).collect());
        RequestPermissionRequest::new(
            "session-1".to_owned(),
            ToolCallUpdate::new("tool-1", fields),
            vec![PermissionOption::new(
                "allow",
                "Allow",
                PermissionOptionKind::AllowOnce,
            )],
        )
    }

    #[test]
    fn live_turns_allow_commands_and_approved_edits_only() {
        let live = PermissionPolicy::ApprovedEdits {
            root: PathBuf::from("/workspace/turn-1"),
            writable: [RepoPath::parse("app/service.py").unwrap()]
                .into_iter()
                .collect(),
        };
        // The container is the sandbox: a command is allowed whatever it names.
        assert!(live.allows(&request(ToolKind::Execute, &[])));
        assert!(live.allows(&request(ToolKind::Execute, &["/etc/passwd"])));
        assert!(live.allows(&request(
            ToolKind::Edit,
            &["/workspace/turn-1/app/service.py"]
        )));
        for (kind, paths) in [
            (ToolKind::Edit, vec!["/workspace/turn-1/app/other.py"]),
            (
                ToolKind::Edit,
                vec!["/workspace/turn-1/../turn-1/app/service.py"],
            ),
            (ToolKind::Edit, vec![]),
            (ToolKind::Read, vec!["/workspace/turn-1/app/service.py"]),
            (ToolKind::Fetch, vec![]),
            (ToolKind::Other, vec![]),
        ] {
            assert!(!live.allows(&request(kind, &paths)), "{kind:?} {paths:?}");
        }
        // Offline turns allow nothing, commands included.
        assert!(!PermissionPolicy::RejectAll.allows(&request(ToolKind::Execute, &[])));
    }
}
