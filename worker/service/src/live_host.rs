//! Live jobs on a serving host: the host's gateway settings (upstream, where the credential is,
//! the operator's gateway config) and the fresh gateway each live attempt gets.
//!
//! The credential is read again for every live attempt, from the environment variable or the
//! file the operator named, exactly as one `run --live` reads it once per turn: a rotated
//! credential file is picked up by the next turn without a restart, and nothing but this host's
//! process ever holds it (it never enters a job, the job store, a log or a container). It is also
//! read once at start-up, so a host that cannot read it refuses to start.

use std::path::PathBuf;
use std::sync::Arc;

use gateway::{Credential, Gateway, GatewayConfig, TurnGateway, UpstreamUrl};
use turn::Agent;

use super::ServiceError;
use turn::{LiveNote, LiveSettings};

/// Where this host reads the model credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CredentialSource {
    /// An environment variable of the serving process, by name.
    Env(String),
    /// A file (its content, less one final line ending).
    File(PathBuf),
}

impl CredentialSource {
    /// Reads the credential now.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CREDENTIAL` (naming the variable or file, never the value).
    pub fn read(&self) -> Result<Credential, gateway::GatewaySetupError> {
        match self {
            Self::Env(name) => Credential::from_env(name),
            Self::File(path) => Credential::from_file(path),
        }
    }
}

/// The gateway settings of a host that runs live jobs (`serve --live-upstream …`).
#[derive(Clone, Debug)]
pub struct LiveHost {
    /// The model upstream's base URL.
    pub upstream: UpstreamUrl,
    /// Where the credential is read.
    pub credential: CredentialSource,
    /// The operator's gateway config; `None`: the defaults, with the job's model as the one
    /// allowed model (as `run --live` without `--gateway-config`).
    pub config: Option<GatewayConfig>,
    /// The agent whose live jobs this host runs: the upstream speaks that agent's provider
    /// (Codex: Responses, Claude: Messages, Gemini: `streamGenerateContent`). Jobs of another
    /// agent are snoozed here, for a host serving that agent.
    pub agent: Agent,
}

/// One live attempt's agent settings and its fresh gateway state (budgets and the trusted usage
/// count). The runner keeps it, so the counters can be read after the turn ends however it ends.
#[derive(Debug)]
pub(crate) struct LiveTurn {
    pub settings: LiveSettings,
    pub gateway: TurnGateway,
}

impl LiveHost {
    /// Checks the settings once at start-up: the config is valid and the credential readable.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CONFIG`, `PATCH_CANDIDATE_GATEWAY_CREDENTIAL`,
    /// `PATCH_CANDIDATE_GATEWAY_TLS`.
    pub fn check(&self) -> Result<(), gateway::GatewaySetupError> {
        if let Some(config) = &self.config {
            config.validate()?;
        }
        let credential = self.credential.read()?;
        let config = self
            .config
            .clone()
            .unwrap_or_else(|| GatewayConfig::for_model("check"));
        Gateway::new(
            config,
            self.agent.provider().provider(),
            credential,
            self.upstream.clone(),
        )
        .map(|_| ())
    }

    /// The gateway of one live attempt of a job bound to `job`'s agent and model: the agent's
    /// own provider (Codex: Responses, Claude: Messages, Gemini: `streamGenerateContent`) in
    /// front of this host's upstream.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_LIVE_AGENT` for a stored agent this host does not know;
    /// `PATCH_CANDIDATE_SERVICE_LIVE_AGENT` for another agent than this host's;
    /// `PATCH_CANDIDATE_SERVICE_LIVE_MODEL` when this host's gateway config does not allow the
    /// model; the gateway's setup codes (the credential cannot be read now, …). Both mean this
    /// host cannot run the job now: the caller snoozes it.
    pub(crate) fn turn(&self, job: &jobs::LiveJob) -> Result<LiveTurn, ServiceError> {
        let agent = Agent::from_stored(job.agent.as_deref())?;
        if agent != self.agent {
            return Err(ServiceError::LiveAgent);
        }
        let model = job.model.as_str();
        let config = match &self.config {
            Some(config) => config.clone(),
            None => GatewayConfig::for_model(model),
        };
        if !config.models.iter().any(|m| m == model) {
            return Err(ServiceError::LiveModel);
        }
        let credential = self.credential.read()?;
        let gateway = Arc::new(Gateway::new(
            config,
            agent.provider().provider(),
            credential,
            self.upstream.clone(),
        )?);
        Ok(LiveTurn {
            settings: LiveSettings::new(agent, model),
            gateway: gateway.start_turn(),
        })
    }
}

/// The service's live progress: numbers and codes only (never agent events or model output).
pub(crate) fn log_note(note: &LiveNote) {
    match note {
        LiveNote::ModelRequest {
            channel,
            report,
            usage,
        } => tracing::info!(
            code = report.error.as_ref().map_or(
                "PATCH_CANDIDATE_GATEWAY_REQUEST",
                gateway::GatewayError::code
            ),
            channel,
            status = report.status.unwrap_or(0),
            response_bytes = report.response_bytes,
            total_tokens = usage.total_tokens,
            "model request ended"
        ),
        LiveNote::AgentEvent(_) | LiveNote::AgentEventsSuppressed { .. } => {}
        LiveNote::Stopped => tracing::info!(
            code = "PATCH_CANDIDATE_LIVE_STOPPED",
            "wall budget spent: STOP sent to the agent"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(agent: Agent, dir: &std::path::Path) -> LiveHost {
        let key = dir.join("key");
        std::fs::write(&key, "sk-host-test\n").unwrap();
        LiveHost {
            upstream: "http://127.0.0.1:9/v1".parse().unwrap(),
            credential: CredentialSource::File(key),
            config: None,
            agent,
        }
    }

    fn job(agent: Option<&str>) -> jobs::LiveJob {
        jobs::LiveJob {
            model: "m".to_owned(),
            agent: agent.map(str::to_owned),
            environment: None,
        }
    }

    #[test]
    fn a_host_runs_only_its_agent_with_that_agent_s_provider() {
        let dir = tempfile::tempdir().unwrap();
        let codex = host(Agent::Codex, dir.path());
        codex.check().unwrap();
        let turn = codex.turn(&job(None)).unwrap();
        assert_eq!(turn.settings, LiveSettings::new(Agent::Codex, "m"));
        let gemini = host(Agent::Gemini, dir.path());
        let turn = gemini.turn(&job(Some("gemini"))).unwrap();
        assert_eq!(turn.settings.agent, Agent::Gemini);
        // Another agent's job is snoozed on this host; an unknown stored agent is refused.
        for (host, other) in [
            (&codex, Some("gemini")),
            (&gemini, None),
            (&gemini, Some("claude")),
        ] {
            assert_eq!(
                host.turn(&job(other)).unwrap_err().code(),
                "PATCH_CANDIDATE_SERVICE_LIVE_AGENT"
            );
        }
        assert_eq!(
            codex.turn(&job(Some("gpt"))).unwrap_err().code(),
            "PATCH_CANDIDATE_LIVE_AGENT"
        );
    }
}
