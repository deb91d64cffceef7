//! The synthetic ACP agent: deterministic edits driven by the prompt, isolation probes, and hostile
//! modes selected by `mode: NAME` markers in the task. Every hostile mode is a real attempt; the
//! agent reports what happened in one JSON `agent_message_chunk` ([`AgentReport`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, ContentBlock, ContentChunk, CreateTerminalRequest, InitializeRequest,
    InitializeResponse, NewSessionRequest, NewSessionResponse, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, ReadTextFileRequest,
    RequestPermissionOutcome, RequestPermissionRequest, SessionId, SessionNotification,
    SessionUpdate, StopReason, TextContent, ToolCallUpdate, ToolCallUpdateFields,
    WriteTextFileRequest,
};
use agent_client_protocol::{Agent, Client};
use serde::{Deserialize, Serialize};

use crate::markers::{self, mode_arg};
use crate::probes::{self, ProbeReport};
use crate::transport::{BudgetFlag, ChannelLimits, bounded_lines};

/// The session id the agent hands out (the reference's value).
pub const SESSION_ID: &str = "acp-container-proof";
/// Command-line flag that turns the binary into an idle child (the fork-bomb payload).
pub const IDLE_FLAG: &str = "--idle";

/// One attempted action and what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Attempt {
    pub action: String,
    pub outcome: String,
}

/// The agent's reply: the modes it ran, its probe report (when asked), and its attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentReport {
    pub modes: Vec<String>,
    pub probes: Option<ProbeReport>,
    pub attempts: Vec<Attempt>,
}

/// The file lists the prompt names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptScope {
    pub editable: Vec<String>,
    pub read_only: Vec<String>,
    pub creates: Vec<String>,
    pub deletes: Vec<String>,
    /// `escape-target: /path` markers: absolute paths the `escape-fs` mode tries to write.
    pub escape_targets: Vec<String>,
    /// The prompt carries a review of an earlier attempt: its gate verdict lines and the first
    /// line of the reviewer's note.
    pub review: Option<ReviewSeen>,
}

/// What the agent read of a follow-up turn's review section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReviewSeen {
    pub gates: Vec<String>,
    /// The failing test ids the gates listed, in order.
    pub new_failures: Vec<String>,
    pub first_note_line: Option<String>,
    /// The prompt says the workspace continues the earlier attempt.
    pub continues: bool,
}

fn review_seen(prompt: &str) -> Option<ReviewSeen> {
    let mut lines = prompt.lines();
    lines.find(|l| l.starts_with(crate::prompt::REVIEW_HEADING))?;
    let mut seen = ReviewSeen::default();
    for line in lines.take_while(|l| !l.is_empty()) {
        if let Some(gate) = line.strip_prefix("* ") {
            seen.gates.push(gate.to_owned());
        } else if let Some(ids) = line.strip_prefix("  new failures: ") {
            seen.new_failures.extend(ids.split(", ").map(str::to_owned));
        } else if line.starts_with(crate::prompt::CONTINUES_LINE) {
            seen.continues = true;
        } else if let Some(note) = line.strip_prefix("> ") {
            seen.first_note_line.get_or_insert_with(|| note.to_owned());
        }
    }
    Some(seen)
}

/// Reads the `- path` lists under the prompt's headings (reference §12.3).
#[must_use]
pub fn parse_scope(prompt: &str) -> PromptScope {
    let mut scope = PromptScope {
        escape_targets: markers::marker_lines(prompt)
            .filter(|(k, _)| *k == "escape-target")
            .map(|(_, v)| v.to_owned())
            .collect(),
        review: review_seen(prompt),
        ..PromptScope::default()
    };
    let mut current: Option<&mut Vec<String>> = None;
    for line in prompt.lines() {
        if line.starts_with("Editable files:") {
            current = Some(&mut scope.editable);
        } else if line.starts_with("Read-only inspection files") {
            current = Some(&mut scope.read_only);
        } else if line.starts_with("Approved creation paths:") {
            current = Some(&mut scope.creates);
        } else if line.starts_with("Approved deletion paths:") {
            current = Some(&mut scope.deletes);
        } else if let Some(path) = line.strip_prefix("- ") {
            if let Some(list) = current.as_mut() {
                list.push(path.to_owned());
            }
        } else if line.is_empty() {
            current = None;
        }
    }
    scope
}

/// Runs the agent over the process's stdin/stdout until the client closes the connection.
///
/// # Errors
/// A protocol error from the connection.
pub async fn serve_stdio() -> Result<(), agent_client_protocol::Error> {
    let (limits, flag) = (ChannelLimits::AGENT, BudgetFlag::default());
    match stdio_pipes() {
        Some((rx, tx)) => serve(bounded_lines(rx, tx, limits, flag)).await,
        None => {
            serve(bounded_lines(
                tokio::io::stdin(),
                tokio::io::stdout(),
                limits,
                flag,
            ))
            .await
        }
    }
}

/// stdin/stdout as non-blocking pipes on the runtime's reactor when they are pipes (as under the
/// runner); tokio's own `stdin()` reads on a blocking thread, one hand-off per message.
fn stdio_pipes() -> Option<(
    tokio::net::unix::pipe::Receiver,
    tokio::net::unix::pipe::Sender,
)> {
    use std::os::fd::AsFd;
    let rx = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let tx = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
    Some((
        tokio::net::unix::pipe::Receiver::from_owned_fd(rx).ok()?,
        tokio::net::unix::pipe::Sender::from_owned_fd(tx).ok()?,
    ))
}

async fn serve(
    transport: impl agent_client_protocol::ConnectTo<Agent> + 'static,
) -> Result<(), agent_client_protocol::Error> {
    let cwd: Arc<Mutex<Option<PathBuf>>> = Arc::new(Mutex::new(None));
    let cwd_for_session = cwd.clone();
    Agent
        .v1()
        .name("fake-agent")
        .on_receive_request(
            async move |init: InitializeRequest, responder, _cx| {
                responder.respond(
                    InitializeResponse::new(init.protocol_version)
                        .agent_capabilities(AgentCapabilities::new()),
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest, responder, _cx| {
                if let Ok(mut slot) = cwd_for_session.lock() {
                    *slot = Some(req.cwd.clone());
                }
                responder.respond(NewSessionResponse::new(SESSION_ID))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, cx: ConnectionTo<Client>| {
                let session_cwd = cwd.lock().ok().and_then(|c| c.clone());
                let task_cx = cx.clone();
                cx.spawn(async move {
                    let text = prompt_text(&req.prompt);
                    let report = run_prompt(&task_cx, &req.session_id, session_cwd, &text).await;
                    let body = serde_json::to_string(&report)
                        .unwrap_or_else(|_| "{\"error\":\"encode\"}".to_owned());
                    send_text(&task_cx, &req.session_id, body)?;
                    responder.respond(PromptResponse::new(StopReason::EndTurn))
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_to(transport)
        .await
}

fn prompt_text(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn send_text(
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    text: String,
) -> Result<(), agent_client_protocol::Error> {
    cx.send_notification(SessionNotification::new(
        session.clone(),
        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(
            text,
        )))),
    ))
}

struct Turn<'a> {
    cx: &'a ConnectionTo<Client>,
    session: &'a SessionId,
    root: PathBuf,
    attempts: Vec<Attempt>,
}

impl Turn<'_> {
    fn note(&mut self, action: impl Into<String>, outcome: impl Into<String>) {
        self.attempts.push(Attempt {
            action: action.into(),
            outcome: outcome.into(),
        });
    }

    fn abs(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    async fn acp_read(&mut self, path: PathBuf) -> Option<String> {
        let action = format!("acp_read {}", path.display());
        match self
            .cx
            .send_request(ReadTextFileRequest::new(self.session.clone(), path))
            .block_task()
            .await
        {
            Ok(resp) => {
                self.note(action, "ok");
                Some(resp.content)
            }
            Err(e) => {
                self.note(action, format!("refused: {}", e.message));
                None
            }
        }
    }

    async fn acp_write(&mut self, path: PathBuf, content: String) -> bool {
        let action = format!("acp_write {}", path.display());
        match self
            .cx
            .send_request(WriteTextFileRequest::new(
                self.session.clone(),
                path,
                content,
            ))
            .block_task()
            .await
        {
            Ok(_) => {
                self.note(action, "ok");
                true
            }
            Err(e) => {
                self.note(action, format!("refused: {}", e.message));
                false
            }
        }
    }

    fn fs_result(&mut self, action: String, result: std::io::Result<()>) {
        match result {
            Ok(()) => self.note(action, "ok"),
            Err(e) => self.note(action, format!("failed: {:?}", e.kind())),
        }
    }

    /// Direct filesystem write, relative to the process working directory (the workspace).
    fn fs_write(&mut self, rel: &str, bytes: &[u8]) {
        let r = std::fs::write(rel, bytes);
        self.fs_result(format!("fs_write {rel}"), r);
    }

    fn fs_remove(&mut self, rel: &str) {
        let r = std::fs::remove_file(rel);
        self.fs_result(format!("fs_remove {rel}"), r);
    }
}

async fn run_prompt(
    cx: &ConnectionTo<Client>,
    session: &SessionId,
    session_cwd: Option<PathBuf>,
    prompt: &str,
) -> AgentReport {
    let process_cwd = std::env::current_dir().unwrap_or_default();
    let root = session_cwd.unwrap_or_else(|| process_cwd.clone());
    let mut turn = Turn {
        cx,
        session,
        root,
        attempts: Vec::new(),
    };
    let modes = markers::modes(prompt);
    let scope = parse_scope(prompt);
    let selection = markers::probe_selection(prompt);
    let probes = selection.any().then(|| probes::collect(&selection));
    let hostile = !modes.is_empty();

    if !hostile {
        default_edits(&mut turn, &scope).await;
    }
    for mode in &modes {
        run_mode(&mut turn, &scope, &modes, mode).await;
    }
    AgentReport {
        modes,
        probes,
        attempts: turn.attempts,
    }
}

/// The default edit: one marker line appended. After a review it says what reached the agent
/// (the gate verdicts, the failing test ids, the note's first line, capped, and whether the
/// workspace continued the earlier attempt), so a follow-up's tests can check it.
fn edited(original: &str, path: &str, review: Option<&ReviewSeen>) -> String {
    let after = review.map_or_else(String::new, |r| {
        let note = r.first_note_line.as_deref().unwrap_or("(none)");
        let failures = if r.new_failures.is_empty() {
            String::new()
        } else {
            format!("; new failures: {}", r.new_failures.join(", "))
        };
        let start = if r.continues {
            "continued"
        } else {
            "restarted"
        };
        let said = format!(
            " after review ({start}; gates: {}{failures}; note: {note})",
            r.gates.join(", ")
        );
        said.chars().take(512).collect()
    });
    format!("{original}// fake-agent: edited {path}{after}\n")
}

async fn default_edits(turn: &mut Turn<'_>, scope: &PromptScope) {
    if scope.creates.is_empty() && scope.deletes.is_empty() {
        if let Some(first) = scope.editable.first() {
            update_via_acp(turn, first, scope.review.as_ref()).await;
        }
        return;
    }
    for create in &scope.creates {
        let content = format!("// fake-agent: created {create}\n");
        turn.acp_write(turn.abs(create), content).await;
    }
    for delete in &scope.deletes {
        turn.fs_remove(delete);
    }
}

async fn update_via_acp(turn: &mut Turn<'_>, rel: &str, review: Option<&ReviewSeen>) {
    let path = turn.abs(rel);
    if let Some(original) = turn.acp_read(path.clone()).await {
        turn.acp_write(path, edited(&original, rel, review)).await;
    }
}

async fn run_mode(turn: &mut Turn<'_>, scope: &PromptScope, modes: &[String], mode: &str) {
    let first_editable = scope.editable.first().cloned().unwrap_or_default();
    let first_read_only = scope.read_only.first().cloned().unwrap_or_default();
    let name = mode.split_once('=').map_or(mode, |(n, _)| n);
    match name {
        "noop" => turn.note("noop", "ok"),
        "edit" => update_via_acp(turn, &first_editable, None).await,
        // The default edit with what reached the agent after a review (`edit` ignores it).
        "answer" => update_via_acp(turn, &first_editable, scope.review.as_ref()).await,
        // A first attempt edits; a follow-up (the prompt holds a review) changes nothing more.
        "edit-once" => {
            if scope.review.is_none() {
                update_via_acp(turn, &first_editable, None).await;
            } else {
                turn.note("edit-once", "follow-up: no change");
            }
        }
        "edit-all" => {
            for rel in &scope.editable {
                update_via_acp(turn, rel, None).await;
            }
        }
        "grants" => default_edits(turn, scope).await,
        "edit-direct" => {
            let original = std::fs::read_to_string(&first_editable).unwrap_or_default();
            turn.fs_write(
                &first_editable,
                edited(&original, &first_editable, None).as_bytes(),
            );
        }
        "edit-read-only" => {
            turn.acp_write(
                turn.abs(&first_read_only),
                "changed inspection\n".to_owned(),
            )
            .await;
            turn.fs_write(&first_read_only, b"changed inspection\n");
        }
        "delete-read-only" => turn.fs_remove(&first_read_only),
        "create-ungranted" => {
            turn.acp_write(turn.abs("unapproved/new.txt"), "new\n".to_owned())
                .await;
            turn.fs_write("unapproved.txt", b"new\n");
        }
        "delete-ungranted" => turn.fs_remove(&first_editable),
        "symlink" => {
            let r = std::os::unix::fs::symlink("/etc/passwd", "link-to-passwd");
            turn.fs_result("fs_symlink link-to-passwd".to_owned(), r);
            turn.acp_write(turn.abs("link-to-passwd"), "x\n".to_owned())
                .await;
        }
        "invalid-utf8" => turn.fs_write(&first_editable, b"valid prefix \xff\xfe\n"),
        "escape-acp" => {
            let parent = turn
                .root
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            turn.acp_write(PathBuf::from("/etc/acp-escape.txt"), "x\n".to_owned())
                .await;
            turn.acp_write(parent.join("acp-escape.txt"), "x\n".to_owned())
                .await;
            turn.acp_write(
                turn.root.join("..").join("acp-escape.txt"),
                "x\n".to_owned(),
            )
            .await;
            turn.acp_write(PathBuf::from("relative.txt"), "x\n".to_owned())
                .await;
            turn.acp_read(PathBuf::from("/etc/passwd")).await;
            turn.acp_read(turn.root.join("..").join("..").join("etc").join("passwd"))
                .await;
        }
        "escape-fs" => {
            turn.fs_write("../fs-escape.txt", b"x\n");
            for target in &scope.escape_targets {
                turn.fs_write(target, b"x\n");
            }
        }
        "terminal" => {
            let req = CreateTerminalRequest::new(turn.session.clone(), "/bin/sh");
            let outcome = match turn.cx.send_request(req).block_task().await {
                Ok(_) => "granted".to_owned(),
                Err(e) => format!("refused: {}", e.message),
            };
            turn.note("terminal_create", outcome);
        }
        "permission" => {
            let options = vec![
                PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
                PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
            ];
            let req = RequestPermissionRequest::new(
                turn.session.clone(),
                ToolCallUpdate::new("tool-1", ToolCallUpdateFields::default()),
                options,
            );
            let outcome = match turn.cx.send_request(req).block_task().await {
                Ok(resp) => match resp.outcome {
                    RequestPermissionOutcome::Selected(s) => format!("selected: {}", s.option_id),
                    RequestPermissionOutcome::Cancelled => "cancelled".to_owned(),
                    _ => "other".to_owned(),
                },
                Err(e) => format!("refused: {}", e.message),
            };
            turn.note("permission", outcome);
        }
        "fork-bomb" => {
            let cap = mode_arg(modes, "fork-bomb").unwrap_or(100_000);
            let outcome = fork_bomb(cap);
            turn.note("fork_bomb", outcome);
        }
        "thread-bomb" => {
            let cap = mode_arg(modes, "thread-bomb").unwrap_or(100_000);
            let outcome = thread_bomb(cap);
            turn.note("thread_bomb", outcome);
        }
        "memory-bomb" => {
            let cap = mode_arg(modes, "memory-bomb").unwrap_or(8192);
            let outcome = memory_bomb(cap);
            turn.note("memory_bomb", outcome);
        }
        "fill-tmpfs" => {
            let cap = mode_arg(modes, "fill-tmpfs").unwrap_or(4096);
            let outcome = fill_disk("fill.bin", cap);
            turn.note("fill_tmpfs", outcome);
        }
        "sleep" => {
            let secs = mode_arg(modes, "sleep").unwrap_or(3600);
            tokio::time::sleep(Duration::from_secs(secs)).await;
            turn.note("sleep", "woke");
        }
        "flood" => {
            let mib = mode_arg(modes, "flood").unwrap_or(512);
            let outcome = flood(turn.cx, turn.session, mib).await;
            turn.note("flood", outcome);
        }
        "giant-message" => {
            let text = "x".repeat(48 << 20);
            let outcome = match send_text(turn.cx, turn.session, text) {
                Ok(()) => "sent",
                Err(_) => "failed",
            };
            turn.note("giant_message", outcome);
        }
        "hijack-stdout" => {
            // Reopen the runner's stdout through /proc and write into the output stream.
            let target = format!("/proc/{}/fd/1", std::os::unix::process::parent_id());
            let r = std::fs::OpenOptions::new()
                .write(true)
                .open(&target)
                .and_then(|mut f| f.write_all(b"{\"hijacked\":true}\n"));
            turn.fs_result("hijack_stdout".to_owned(), r);
        }
        "exit" => std::process::exit(3),
        other => turn.note(format!("unknown mode {other}"), "skipped"),
    }
}

/// Spawns idle copies of this binary until the kernel refuses or `cap` is reached, then kills them.
fn fork_bomb(cap: u64) -> String {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    let mut children = Vec::new();
    let mut refused = None;
    while (children.len() as u64) < cap {
        let child = std::process::Command::new(&exe)
            .arg(IDLE_FLAG)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                refused = Some(e.kind());
                break;
            }
        }
    }
    let spawned = children.len();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    match refused {
        Some(kind) => format!("spawned {spawned}, then refused: {kind:?}"),
        None => format!("spawned {spawned}, cap reached"),
    }
}

/// Spawns parked threads until the kernel refuses or `cap` is reached, then releases them.
fn thread_bomb(cap: u64) -> String {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut refused = None;
    while (threads.len() as u64) < cap {
        let stop = std::sync::Arc::clone(&stop);
        let spawned = std::thread::Builder::new()
            .stack_size(64 << 10)
            .spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::thread::park();
                }
            });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                refused = Some(e.kind());
                break;
            }
        }
    }
    let spawned = threads.len();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        t.thread().unpark();
        let _ = t.join();
    }
    match refused {
        Some(kind) => format!("spawned {spawned} threads, then refused: {kind:?}"),
        None => format!("spawned {spawned} threads, cap reached"),
    }
}

/// Allocates and touches 16 MiB blocks up to `cap_mib`.
fn memory_bomb(cap_mib: u64) -> String {
    const BLOCK: usize = 16 << 20;
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    while (blocks.len() as u64) * 16 < cap_mib {
        let mut block = Vec::new();
        if block.try_reserve_exact(BLOCK).is_err() {
            return format!("allocated {} MiB, then refused", blocks.len() * 16);
        }
        block.resize(BLOCK, 0xA5);
        blocks.push(block);
    }
    let total: usize = blocks.iter().map(Vec::len).sum();
    format!("allocated {} MiB, cap reached", total >> 20)
}

/// Writes 1 MiB chunks to `rel` until the filesystem refuses or `cap_mib` is reached.
fn fill_disk(rel: &str, cap_mib: u64) -> String {
    let chunk = vec![0u8; 1 << 20];
    let mut file = match std::fs::File::create(rel) {
        Ok(f) => f,
        Err(e) => return format!("failed: {:?}", e.kind()),
    };
    let mut written = 0u64;
    while written < cap_mib {
        if let Err(e) = file.write_all(&chunk).and_then(|()| file.flush()) {
            return format!("wrote {written} MiB, then refused: {:?}", e.kind());
        }
        written += 1;
    }
    format!("wrote {written} MiB, cap reached")
}

async fn flood(cx: &ConnectionTo<Client>, session: &SessionId, mib: u64) -> String {
    let chunk = "f".repeat(64 << 10);
    let mut sent = 0u64;
    while sent < mib * 16 {
        if send_text(cx, session, chunk.clone()).is_err() {
            return format!("sent {sent} chunks, then the channel closed");
        }
        sent += 1;
        tokio::task::yield_now().await;
    }
    format!("sent {sent} chunks")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_prompt_lists() {
        let prompt = "pre\n\nRequest: x\n\nEditable files:\n- a.txt\n- b/c.txt\n\nRead-only inspection files (do not modify):\n(none)\n\nApproved creation paths:\n- n.txt\n\nApproved deletion paths:\n- a.txt\n\nCreate only.";
        let scope = parse_scope(prompt);
        assert_eq!(scope.editable, vec!["a.txt", "b/c.txt"]);
        assert!(scope.read_only.is_empty());
        assert_eq!(scope.creates, vec!["n.txt"]);
        assert_eq!(scope.deletes, vec!["a.txt"]);
    }

    #[test]
    fn bounded_bombs_report_their_outcome() {
        assert_eq!(memory_bomb(32), "allocated 32 MiB, cap reached");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fill.bin");
        assert_eq!(
            fill_disk(path.to_str().unwrap(), 2),
            "wrote 2 MiB, cap reached"
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 << 20);
    }
}
