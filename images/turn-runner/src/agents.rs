//! One adapter per live agent: how the runner starts it, how it hands the agent the loopback
//! gateway (through ACP or the agent's own settings; never a key, never a secret in the image),
//! which client capabilities it announces, and how the turn ends. Permission answers are the same
//! for every agent (the runner's policy: allow once an edit of approved paths, refuse the rest),
//! and every agent is stopped the same way (its whole process group is killed when the turn
//! ends: not every agent exits when its stdin closes).
//!
//! # Security
//! No adapter advertises the ACP `terminal` or `fs` capability: each agent's own file and shell
//! tools run inside the container, whose tree is harvested and checked by the host like any
//! other. The gateway an adapter names is the runner's own
//! listener on the container's loopback, and the only header it asks the agent to send is none:
//! the host adds the credential outside the container.

use std::path::PathBuf;

/// The agents a live turn can run (the request's `live.agent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveAgent {
    /// `codex-acp` over the native `codex` (Responses API through the worker's gateway).
    Codex,
    /// `claude-agent-acp` over the native `claude` (Anthropic Messages).
    Claude,
    /// `gemini --acp` (Gemini `streamGenerateContent`).
    Gemini,
}

impl LiveAgent {
    /// The agent of a wire name; `None` for any other text.
    #[must_use]
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "codex" => Some(Self::Codex),
            "claude" => Some(Self::Claude),
            "gemini" => Some(Self::Gemini),
            _ => None,
        }
    }
}

/// `codex-acp` in the Codex live image.
pub const CODEX_ENTRY: &str =
    "/opt/codex/node_modules/@agentclientprotocol/codex-acp/dist/index.js";
/// The native `codex` binary in the Codex live image (the adapter starts it as `codex
/// app-server`).
pub const CODEX_EXECUTABLE: &str = "/opt/codex/codex";
/// Node in the live images.
pub const NODE: &str = "/bin/node";
/// Gemini CLI's bundle in its live image.
pub const GEMINI_ENTRY: &str = "/opt/gemini/bundle/gemini.js";
/// `claude-agent-acp` in the Claude live image.
pub const CLAUDE_ENTRY: &str =
    "/opt/claude/node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js";
/// The native `claude` binary in the Claude live image.
pub const CLAUDE_EXECUTABLE: &str = "/opt/claude/claude";

/// ACP `authenticate` with a gateway: `{"methodId": method, "_meta": {"gateway": {"baseUrl":
/// base_url, "headers": {}}}}`, announced by `clientCapabilities.auth._meta.gateway = true`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayAuth {
    /// The agent's gateway auth method id.
    pub method: &'static str,
    /// The base URL the agent joins its provider's paths to.
    pub base_url: String,
}

/// What the runner's ACP client announces and sends before `session/new`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpSetup {
    /// Announce `fs.readTextFile`/`fs.writeTextFile` (served confined to the workspace).
    pub client_fs: bool,
    /// Authenticate with the loopback gateway.
    pub gateway: Option<GatewayAuth>,
}

impl AcpSetup {
    /// The offline proof's client: `fs` served, no authentication.
    #[must_use]
    pub fn offline() -> Self {
        Self {
            client_fs: true,
            gateway: None,
        }
    }
}

/// How to start one agent for one live turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adapter {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (after any test-only arguments the runner was given).
    pub args: Vec<String>,
    /// Environment beyond `PATH` and `HOME` (settings only: nothing secret).
    pub env: Vec<(String, String)>,
    /// The ACP client's announcement and authentication.
    pub acp: AcpSetup,
}

/// The adapter of `agent` with `model`, its gateway at `127.0.0.1:port`.
#[must_use]
pub(crate) fn adapter(agent: LiveAgent, model: &str, port: u16) -> Adapter {
    match agent {
        LiveAgent::Codex => Adapter {
            program: PathBuf::from(NODE),
            args: vec![CODEX_ENTRY.to_owned()],
            env: vec![
                ("CODEX_PATH".to_owned(), CODEX_EXECUTABLE.to_owned()),
                ("CODEX_CONFIG".to_owned(), codex_config(model, port)),
                // Codex's own sandbox and approvals off: the container is the sandbox, and the
                // harvest judges what the turn wrote.
                (
                    "INITIAL_AGENT_MODE".to_owned(),
                    "agent-full-access".to_owned(),
                ),
                ("NO_COLOR".to_owned(), "1".to_owned()),
            ],
            acp: AcpSetup {
                client_fs: false,
                gateway: None,
            },
        },
        LiveAgent::Gemini => Adapter {
            program: PathBuf::from(NODE),
            args: vec![
                GEMINI_ENTRY.to_owned(),
                "--acp".to_owned(),
                "--model".to_owned(),
                model.to_owned(),
            ],
            // Usage statistics off and the folder trust prompt settled come from the image's
            // read-only system settings (/etc/gemini-cli/settings.json).
            env: vec![("NO_COLOR".to_owned(), "1".to_owned())],
            acp: AcpSetup {
                client_fs: false,
                gateway: Some(GatewayAuth {
                    method: "gateway",
                    base_url: format!("http://127.0.0.1:{port}"),
                }),
            },
        },
        LiveAgent::Claude => Adapter {
            program: PathBuf::from(NODE),
            args: vec![CLAUDE_ENTRY.to_owned()],
            env: vec![
                (
                    "CLAUDE_CODE_EXECUTABLE".to_owned(),
                    CLAUDE_EXECUTABLE.to_owned(),
                ),
                // No telemetry, error reports or auto-update (none could leave anyway).
                (
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
                    "1".to_owned(),
                ),
                // The turn's model, also for the helper calls Claude Code makes.
                ("ANTHROPIC_MODEL".to_owned(), model.to_owned()),
                ("ANTHROPIC_SMALL_FAST_MODEL".to_owned(), model.to_owned()),
            ],
            acp: AcpSetup {
                client_fs: false,
                gateway: Some(GatewayAuth {
                    method: "gateway",
                    base_url: format!("http://127.0.0.1:{port}"),
                }),
            },
        },
    }
}

/// Codex's settings (the adapter's `CODEX_CONFIG`, JSON): a model provider `gw` at the loopback
/// listener (no `env_key`, so no Authorization header), no retries (the gateway budgets every
/// request), no web search tool, no sub-agents (their tools come as a `namespace`, which the
/// gateway refuses, and a bounded turn is one agent), no update check, and Codex's own sandbox
/// off with no approvals (the container is the sandbox).
fn codex_config(model: &str, port: u16) -> String {
    serde_json::json!({
        "model_provider": "gw",
        "model_providers": {"gw": {
            "name": "gw",
            "base_url": format!("http://127.0.0.1:{port}/v1"),
            "wire_api": "responses",
            "request_max_retries": 0,
            "stream_max_retries": 0,
        }},
        "model": model,
        "sandbox_mode": "danger-full-access",
        "approval_policy": "never",
        "web_search": "disabled",
        "features": {"multi_agent": false},
        "check_for_update_on_startup": false,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_parse_and_nothing_else() {
        for (name, agent) in [
            ("codex", LiveAgent::Codex),
            ("claude", LiveAgent::Claude),
            ("gemini", LiveAgent::Gemini),
        ] {
            assert_eq!(LiveAgent::parse(name), Some(agent));
        }
        for bad in ["", "Codex", "gemini-cli", "claude-code", "codex "] {
            assert_eq!(LiveAgent::parse(bad), None);
        }
    }

    #[test]
    fn codex_is_configured_for_the_loopback_gateway() {
        let a = adapter(LiveAgent::Codex, "gpt-5.5", 8417);
        assert_eq!(a.program, PathBuf::from(NODE));
        assert_eq!(a.args, [CODEX_ENTRY]);
        assert!(!a.acp.client_fs);
        assert_eq!(a.acp.gateway, None);
        let env: std::collections::BTreeMap<&str, &str> = a
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(env.get("CODEX_PATH"), Some(&CODEX_EXECUTABLE));
        assert_eq!(env.get("INITIAL_AGENT_MODE"), Some(&"agent-full-access"));
        let config: serde_json::Value =
            serde_json::from_str(env.get("CODEX_CONFIG").copied().unwrap_or("")).unwrap();
        assert_eq!(
            config,
            serde_json::json!({
                "model_provider": "gw",
                "model_providers": {"gw": {
                    "name": "gw",
                    "base_url": "http://127.0.0.1:8417/v1",
                    "wire_api": "responses",
                    "request_max_retries": 0,
                    "stream_max_retries": 0,
                }},
                "model": "gpt-5.5",
                "sandbox_mode": "danger-full-access",
                "approval_policy": "never",
                "web_search": "disabled",
                "features": {"multi_agent": false},
                "check_for_update_on_startup": false,
            })
        );
        // No provider key variable: the provider has no `env_key`, and the host adds the
        // credential outside the container.
        assert!(
            a.env
                .iter()
                .all(|(k, v)| !k.contains("KEY") && !k.contains("TOKEN") && !v.contains("env_key"))
        );
    }

    #[test]
    fn gemini_and_claude_get_the_gateway_through_acp_and_no_client_fs() {
        let g = adapter(LiveAgent::Gemini, "gemini-2.5-flash", 9000);
        assert_eq!(g.program, PathBuf::from(NODE));
        assert_eq!(
            g.args,
            [GEMINI_ENTRY, "--acp", "--model", "gemini-2.5-flash"]
        );
        let c = adapter(LiveAgent::Claude, "claude-sonnet-4-5", 9000);
        assert_eq!(c.args, [CLAUDE_ENTRY]);
        assert!(c.env.contains(&(
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
            "1".to_owned()
        )));
        for a in [&g, &c] {
            assert!(!a.acp.client_fs);
            assert_eq!(
                a.acp.gateway,
                Some(GatewayAuth {
                    method: "gateway",
                    base_url: "http://127.0.0.1:9000".to_owned(),
                })
            );
            // Settings only: no variable an agent reads a credential from.
            assert!(
                a.env
                    .iter()
                    .all(|(k, _)| !k.contains("KEY") && !k.contains("TOKEN"))
            );
        }
    }
}
