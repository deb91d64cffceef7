//! `run --live`: the options of a live turn, the model gateway built from them, and the progress
//! lines the turn prints on stderr while the agent works.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use gateway::{Gateway, GatewayConfig, UpstreamUrl};
use service::{CredentialSource, LiveHost};
use turn::{Agent, LiveNote, LiveSettings};

use super::CliError;
use super::outcome::{GATEWAY_CONFIG_CODE, LIVE_AGENT_CODE, LIVE_CREDENTIAL_CODE, LIVE_MODEL_CODE};
use super::paths::read_file;
use super::render;

/// The default model upstream of each agent's provider (the base URL its paths are joined to).
pub(crate) fn default_upstream(agent: Agent) -> &'static str {
    match agent {
        Agent::Codex => "https://api.openai.com/v1",
        Agent::Claude => "https://api.anthropic.com/v1",
        Agent::Gemini => "https://generativelanguage.googleapis.com/v1beta",
    }
}

/// The agent named by `--agent` (Codex when omitted).
///
/// # Errors
/// `PATCH_CANDIDATE_LIVE_AGENT` (usage) for a name that is no agent.
pub(crate) fn parse_agent(name: Option<&str>) -> Result<Agent, CliError> {
    name.map_or(Ok(Agent::Codex), |n| {
        n.parse().map_err(|_| {
            CliError::usage(
                LIVE_AGENT_CODE,
                "--agent must be one of codex, claude, gemini",
            )
        })
    })
}
/// Largest gateway config accepted.
const MAX_GATEWAY_CONFIG_BYTES: usize = 256 * 1024;

/// Live turn options.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct LiveArgs {
    /// Run a live turn: a real ACP agent (Codex unless --agent) in its live image, with no
    /// network; its model requests reach the upstream only through the model gateway in this
    /// process, which holds the credential.
    #[arg(long)]
    pub live: bool,
    /// The agent of the live turn: codex (OpenAI Responses), claude (Anthropic Messages) or
    /// gemini (Gemini streamGenerateContent); each runs in its own live image
    /// (`image build --live --agent NAME`) behind its own gateway provider. Default: codex.
    #[arg(long, value_name = "NAME", requires = "live")]
    pub agent: Option<String>,
    /// The model the agent uses; it must be in the gateway's allowlist (by default the allowlist
    /// is exactly this model).
    #[arg(long, value_name = "NAME", requires = "live")]
    pub model: Option<String>,
    /// Model upstream base URL (https; plain http only for a loopback address). Default: the
    /// agent's vendor API (api.openai.com/v1, api.anthropic.com/v1,
    /// generativelanguage.googleapis.com/v1beta).
    #[arg(long, value_name = "URL", requires = "live")]
    pub upstream: Option<String>,
    /// Read the model credential from this environment variable.
    #[arg(
        long,
        value_name = "VAR",
        requires = "live",
        conflicts_with = "credential_file"
    )]
    pub credential_env: Option<String>,
    /// Read the model credential from this file (its content, less one final line ending).
    #[arg(long, value_name = "FILE", requires = "live")]
    pub credential_file: Option<PathBuf>,
    /// Operator gateway settings (strict JSON: models, refused_tools, budgets, size caps,
    /// deadlines; see docs/LIVE.md).
    #[arg(long, value_name = "FILE", requires = "live")]
    pub gateway_config: Option<PathBuf>,
}

/// `serve`'s live settings: the gateway every live job this host runs goes through. The
/// credential is read again for each live attempt (a rotated file is picked up).
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct ServeLiveArgs {
    /// Run live jobs (`jobs submit --live`): their agents' model requests reach this upstream
    /// base URL only through the model gateway in this process, which holds the credential
    /// (https; plain http only for a loopback address). Without it, this host snoozes the live
    /// jobs it claims (no attempt spent), so hosts with and without live settings can share a
    /// queue.
    #[arg(long, value_name = "URL")]
    pub live_upstream: Option<String>,
    /// The agent whose live jobs this host runs (the upstream speaks its provider): codex,
    /// claude or gemini. Live jobs of another agent are snoozed here. Default: codex.
    #[arg(long, value_name = "NAME", requires = "live_upstream")]
    pub live_agent: Option<String>,
    /// Read the model credential from this environment variable (at start-up and for every live
    /// attempt).
    #[arg(
        long,
        value_name = "VAR",
        requires = "live_upstream",
        conflicts_with = "credential_file"
    )]
    pub credential_env: Option<String>,
    /// Read the model credential from this file (its content, less one final line ending), at
    /// start-up and again for every live attempt.
    #[arg(long, value_name = "FILE", requires = "live_upstream")]
    pub credential_file: Option<PathBuf>,
    /// Operator gateway settings for live jobs (strict JSON: models, refused_tools, budgets, size
    /// caps, deadlines; see docs/LIVE.md). Default: each job's model is the one allowed model. A
    /// job whose model is not in `models` is snoozed on this host.
    #[arg(long, value_name = "FILE", requires = "live_upstream")]
    pub gateway_config: Option<PathBuf>,
}

/// The model of a live turn or job: `--live` needs `--model`.
///
/// # Errors
/// `PATCH_CANDIDATE_LIVE_MODEL` (usage) when it is missing.
pub(crate) fn require_model(model: Option<&str>) -> Result<&str, CliError> {
    model.ok_or_else(|| CliError::usage(LIVE_MODEL_CODE, "--live needs --model NAME"))
}

/// Where the credential comes from: exactly one of the two options.
fn credential_source(
    env: Option<&String>,
    file: Option<&PathBuf>,
) -> Result<CredentialSource, CliError> {
    match (env, file) {
        (Some(var), None) => Ok(CredentialSource::Env(var.clone())),
        (None, Some(file)) => Ok(CredentialSource::File(file.clone())),
        _ => Err(CliError::usage(
            LIVE_CREDENTIAL_CODE,
            "--live needs --credential-env VAR or --credential-file FILE",
        )),
    }
}

fn upstream(url: Option<&str>, agent: Agent) -> Result<UpstreamUrl, CliError> {
    Ok(url.unwrap_or(default_upstream(agent)).parse()?)
}

/// The live turn's settings and its gateway, from the options.
///
/// # Errors
/// A usage error for a missing `--model` or credential option; the gateway's setup codes.
pub(crate) fn live_setup(args: &LiveArgs) -> Result<(LiveSettings, Arc<Gateway>), CliError> {
    let agent = parse_agent(args.agent.as_deref())?;
    let model = require_model(args.model.as_deref())?;
    let credential =
        credential_source(args.credential_env.as_ref(), args.credential_file.as_ref())?.read()?;
    let config = match &args.gateway_config {
        Some(path) => gateway_config(path)?,
        None => GatewayConfig::for_model(model),
    };
    config.validate()?;
    if !config.models.iter().any(|m| m == model) {
        return Err(CliError::usage(
            GATEWAY_CONFIG_CODE,
            "the --model is not in the gateway config's models",
        ));
    }
    let upstream = upstream(args.upstream.as_deref(), agent)?;
    let settings = LiveSettings::new(agent, model);
    let gateway = Gateway::new(config, agent.provider().provider(), credential, upstream)?;
    Ok((settings, Arc::new(gateway)))
}

/// `serve`'s live settings, checked as `run --live` checks its own (the same parsers and codes;
/// the credential is read once here so a host that cannot read it does not start). `None`
/// without `--live-upstream`.
///
/// # Errors
/// A usage error for a missing credential option; the gateway's setup codes.
pub(crate) fn live_host(args: &ServeLiveArgs) -> Result<Option<LiveHost>, CliError> {
    let Some(url) = args.live_upstream.as_deref() else {
        return Ok(None);
    };
    let agent = parse_agent(args.live_agent.as_deref())?;
    let host = LiveHost {
        agent,
        upstream: upstream(Some(url), agent)?,
        credential: credential_source(args.credential_env.as_ref(), args.credential_file.as_ref())?,
        config: args
            .gateway_config
            .as_deref()
            .map(gateway_config)
            .transpose()?,
    };
    host.check()?;
    Ok(Some(host))
}

fn gateway_config(path: &Path) -> Result<GatewayConfig, CliError> {
    let bytes = read_file("--gateway-config", path, MAX_GATEWAY_CONFIG_BYTES)?;
    Ok(GatewayConfig::from_json(&bytes)?)
}

/// One progress line on stderr per note. Everything from the container or the upstream is shown
/// only through the untrusted-text display.
pub(crate) fn print_note(note: &LiveNote) {
    match note {
        LiveNote::ModelRequest {
            channel,
            report,
            usage,
        } => {
            let model = report
                .model
                .as_deref()
                .map_or_else(|| "-".to_owned(), render::name);
            let status = report
                .status
                .map_or_else(|| "-".to_owned(), |s| s.to_string());
            match &report.error {
                Some(e) => tracing::info!(
                    "model: request on channel {channel}: {status} {model}: {} ({} tokens so far)",
                    e.code(),
                    usage.total_tokens
                ),
                None => tracing::info!(
                    "model: request on channel {channel}: {status} {model}, {} bytes streamed ({} tokens so far)",
                    report.response_bytes,
                    usage.total_tokens
                ),
            }
        }
        LiveNote::AgentEvent(object) => tracing::info!("agent: {}", agent_event_line(object)),
        LiveNote::AgentEventsSuppressed { events, bytes } => tracing::info!(
            "agent: {events} more events ({bytes} bytes) not shown (byte cap or rate limit)"
        ),
        LiveNote::Stopped => tracing::info!("turn: wall budget spent, STOP sent to the agent"),
    }
}

/// One line for an advisory EVENT: its `event`, `kind`, `status`, `decision` words and the files
/// it names (`files`, or `path`), each through the untrusted-text display, bounded in count.
fn agent_event_line(object: &serde_json::Map<String, serde_json::Value>) -> String {
    let word = |k: &str| {
        object
            .get(k)
            .and_then(serde_json::Value::as_str)
            .map(render::name)
    };
    let mut parts: Vec<String> = ["event", "kind", "status", "decision"]
        .iter()
        .filter_map(|k| word(k))
        .collect();
    let mut files: Vec<String> = object
        .get("files")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .take(8)
                .map(render::name)
                .collect()
        })
        .unwrap_or_default();
    files.extend(word("path"));
    if !files.is_empty() {
        parts.push(files.join(", "));
    }
    if parts.is_empty() {
        "event".to_owned()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> LiveArgs {
        LiveArgs {
            live: true,
            model: Some("gpt-5.3-codex".to_owned()),
            upstream: Some("http://127.0.0.1:9/v1".to_owned()),
            ..LiveArgs::default()
        }
    }

    fn key_file(dir: &Path, content: &str) -> PathBuf {
        let path = dir.join("key");
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn agent_events_show_their_words_and_files_escaped() {
        let object = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert_eq!(
            agent_event_line(&object(serde_json::json!({
                "event": "tool_call", "kind": "edit", "status": "completed",
                "files": ["src/app.py", "src/\u{1b}[2Jx.py"]
            }))),
            "tool_call edit completed src/app.py, 'src/\\x1b[2Jx.py'"
        );
        assert_eq!(
            agent_event_line(&object(
                serde_json::json!({"kind": "file", "path": "a.txt"})
            )),
            "file a.txt"
        );
        assert_eq!(
            agent_event_line(&object(serde_json::json!({"n": 1}))),
            "event"
        );
    }

    #[test]
    fn serve_live_settings_use_the_same_checks_and_never_echo_the_key() {
        let dir = tempfile::tempdir().unwrap();
        assert!(live_host(&ServeLiveArgs::default()).unwrap().is_none());
        let file = key_file(dir.path(), "sk-serve-secret-31\n");
        let ok = ServeLiveArgs {
            live_upstream: Some("http://127.0.0.1:9/v1".to_owned()),
            credential_file: Some(file.clone()),
            ..ServeLiveArgs::default()
        };
        let host = live_host(&ok).unwrap().unwrap();
        assert_eq!(host.credential, CredentialSource::File(file));
        assert!(!format!("{host:?}").contains("sk-serve-secret-31"));
        let no_key = ServeLiveArgs {
            credential_file: None,
            ..ok.clone()
        };
        assert_eq!(
            live_host(&no_key).unwrap_err().code,
            "PATCH_CANDIDATE_LIVE_CREDENTIAL"
        );
        let unreadable = ServeLiveArgs {
            credential_file: Some(dir.path().join("absent")),
            ..ok.clone()
        };
        assert_eq!(
            live_host(&unreadable).unwrap_err().code,
            "PATCH_CANDIDATE_GATEWAY_CREDENTIAL"
        );
        let remote_http = ServeLiveArgs {
            live_upstream: Some("http://203.0.113.7/v1".to_owned()),
            ..ok.clone()
        };
        assert_eq!(
            live_host(&remote_http).unwrap_err().code,
            "PATCH_CANDIDATE_GATEWAY_UPSTREAM_URL"
        );
        let config = dir.path().join("gateway.json");
        std::fs::write(&config, br#"{"models": [], "x": 1}"#).unwrap();
        let bad_config = ServeLiveArgs {
            gateway_config: Some(config),
            ..ok
        };
        assert_eq!(
            live_host(&bad_config).unwrap_err().code,
            "PATCH_CANDIDATE_GATEWAY_CONFIG"
        );
    }

    #[test]
    fn live_setup_checks_every_option_and_never_echoes_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args();
        a.credential_file = Some(key_file(dir.path(), "sk-cli-secret-77\n"));
        let (settings, gateway) = live_setup(&a).unwrap();
        assert_eq!(settings.model, "gpt-5.3-codex");
        assert_eq!(settings.agent, Agent::Codex);
        assert_eq!(gateway.provider_name(), "openai-responses");
        for (name, agent, provider) in [
            ("codex", Agent::Codex, "openai-responses"),
            ("claude", Agent::Claude, "anthropic-messages"),
            ("gemini", Agent::Gemini, "gemini"),
        ] {
            let named = LiveArgs {
                agent: Some(name.to_owned()),
                ..a.clone()
            };
            let (settings, gateway) = live_setup(&named).unwrap();
            assert_eq!(settings.agent, agent);
            assert_eq!(gateway.provider_name(), provider);
        }
        let bad_agent = LiveArgs {
            agent: Some("claude-code".to_owned()),
            ..a.clone()
        };
        assert_eq!(
            live_setup(&bad_agent).unwrap_err().code,
            "PATCH_CANDIDATE_LIVE_AGENT"
        );
        assert_eq!(settings.port, turn::DEFAULT_LIVE_PORT);
        assert!(!format!("{gateway:?}").contains("sk-cli-secret-77"));

        let no_model = LiveArgs {
            model: None,
            ..a.clone()
        };
        assert_eq!(
            live_setup(&no_model).unwrap_err().code,
            "PATCH_CANDIDATE_LIVE_MODEL"
        );
        let no_key = LiveArgs {
            credential_file: None,
            ..a.clone()
        };
        assert_eq!(
            live_setup(&no_key).unwrap_err().code,
            "PATCH_CANDIDATE_LIVE_CREDENTIAL"
        );
        let unset = LiveArgs {
            credential_file: None,
            credential_env: Some("PATCH_CANDIDATE_TEST_SURELY_UNSET".to_owned()),
            ..a.clone()
        };
        let e = live_setup(&unset).unwrap_err();
        assert_eq!(e.code, "PATCH_CANDIDATE_GATEWAY_CREDENTIAL");
        let remote_http = LiveArgs {
            upstream: Some("http://203.0.113.7/v1".to_owned()),
            ..a.clone()
        };
        assert_eq!(
            live_setup(&remote_http).unwrap_err().code,
            "PATCH_CANDIDATE_GATEWAY_UPSTREAM_URL"
        );
        let config = dir.path().join("gateway.json");
        std::fs::write(&config, br#"{"models": ["other-model"]}"#).unwrap();
        let outside = LiveArgs {
            gateway_config: Some(config.clone()),
            ..a.clone()
        };
        assert_eq!(
            live_setup(&outside).unwrap_err().code,
            "PATCH_CANDIDATE_GATEWAY_CONFIG"
        );
        std::fs::write(&config, br#"{"models": ["gpt-5.3-codex"], "budget": {}}"#).unwrap();
        let unknown = LiveArgs {
            gateway_config: Some(config),
            ..a
        };
        assert_eq!(
            live_setup(&unknown).unwrap_err().code,
            "PATCH_CANDIDATE_GATEWAY_CONFIG"
        );
        let bad_key = LiveArgs {
            credential_file: Some(key_file(dir.path(), "two words\n")),
            ..args()
        };
        let e = live_setup(&bad_key).unwrap_err();
        assert_eq!(e.code, "PATCH_CANDIDATE_GATEWAY_CREDENTIAL");
        assert!(!e.message().contains("two words"));
    }
}
