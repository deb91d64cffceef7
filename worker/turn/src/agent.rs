//! The agents a live turn can run: each has its own live image (and `image build` record), its
//! own model gateway provider, and its own adapter in the in-container runner (which speaks the
//! same name on the wire, `live.agent`).

use gateway::ProviderKind;

use crate::error::TurnError;

/// Default live image tag of Codex (`images/build.sh --live`).
pub const LIVE_IMAGE: &str = "patch-candidate-live:local";

/// A live turn's agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Agent {
    /// Codex through its ACP adapter; model requests speak the OpenAI Responses API.
    #[default]
    Codex,
    /// Claude Code through `claude-agent-acp`; model requests speak Anthropic Messages.
    Claude,
    /// Gemini CLI (`gemini --acp`); model requests speak Gemini `streamGenerateContent`.
    Gemini,
}

impl Agent {
    /// Every agent, in the order the documentation lists them.
    pub const ALL: [Agent; 3] = [Agent::Codex, Agent::Claude, Agent::Gemini];

    /// The agent's name on the command line, in the API, in a stored job and on the wire.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Codex => "codex",
            Self::Claude => "claude",
            Self::Gemini => "gemini",
        }
    }

    /// The gateway provider that speaks this agent's model API.
    #[must_use]
    pub fn provider(self) -> ProviderKind {
        match self {
            Self::Codex => ProviderKind::OpenAiResponses,
            Self::Claude => ProviderKind::AnthropicMessages,
            Self::Gemini => ProviderKind::Gemini,
        }
    }

    /// The default tag of this agent's live image (`image build --live --agent NAME`).
    #[must_use]
    pub fn default_image(self) -> &'static str {
        match self {
            Self::Codex => LIVE_IMAGE,
            Self::Claude => "patch-candidate-live-claude:local",
            Self::Gemini => "patch-candidate-live-gemini:local",
        }
    }

    /// The file in the state directory that records this agent's approved live image build
    /// (Codex keeps the file it always had).
    #[must_use]
    pub fn image_record(self) -> &'static str {
        self.image_record_entry().name
    }

    /// The state directory entry of [`Agent::image_record`].
    #[must_use]
    pub fn image_record_entry(self) -> &'static state::Entry {
        match self {
            Self::Codex => &state::LIVE_IMAGE_CODEX,
            Self::Claude => &state::LIVE_IMAGE_CLAUDE,
            Self::Gemini => &state::LIVE_IMAGE_GEMINI,
        }
    }

    /// The `image build` flags that record this agent's live image.
    #[must_use]
    pub fn image_build_flags(self) -> &'static str {
        match self {
            Self::Codex => " --live",
            Self::Claude => " --live --agent claude",
            Self::Gemini => " --live --agent gemini",
        }
    }

    /// The agent of a stored job or a submission: `None` is Codex (jobs stored before agents
    /// were a choice, and every Codex job, keep their binding and idempotency key).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_LIVE_AGENT` for a name that is no agent.
    pub fn from_stored(name: Option<&str>) -> Result<Self, TurnError> {
        name.map_or(Ok(Self::Codex), str::parse)
    }

    /// The name a job stores: `None` for Codex (see [`Agent::from_stored`]).
    #[must_use]
    pub fn stored(self) -> Option<&'static str> {
        (self != Self::Codex).then(|| self.name())
    }
}

impl std::fmt::Display for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Agent {
    type Err = TurnError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or(TurnError::UnknownAgent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_nothing_else_parses() {
        for agent in Agent::ALL {
            assert_eq!(agent.name().parse::<Agent>().unwrap(), agent);
            assert_eq!(agent.to_string(), agent.name());
        }
        for bad in ["", "Codex", "codex ", "claude-code", "gemini-cli", "x"] {
            let e = bad.parse::<Agent>().unwrap_err();
            assert_eq!(e.code(), "PATCH_CANDIDATE_LIVE_AGENT");
        }
    }

    #[test]
    fn each_agent_has_its_provider_image_and_record() {
        assert_eq!(Agent::Codex.provider(), ProviderKind::OpenAiResponses);
        assert_eq!(Agent::Claude.provider(), ProviderKind::AnthropicMessages);
        assert_eq!(Agent::Gemini.provider(), ProviderKind::Gemini);
        assert_eq!(Agent::Codex.default_image(), LIVE_IMAGE);
        assert_eq!(Agent::Codex.image_record(), "live-image.json");
        let images: std::collections::BTreeSet<_> =
            Agent::ALL.iter().map(|a| a.default_image()).collect();
        let records: std::collections::BTreeSet<_> =
            Agent::ALL.iter().map(|a| a.image_record()).collect();
        assert_eq!((images.len(), records.len()), (3, 3));
    }

    #[test]
    fn codex_is_stored_as_absent_so_its_keys_stay_unchanged() {
        assert_eq!(Agent::Codex.stored(), None);
        assert_eq!(Agent::from_stored(None).unwrap(), Agent::Codex);
        for agent in [Agent::Claude, Agent::Gemini] {
            assert_eq!(Agent::from_stored(agent.stored()).unwrap(), agent);
        }
        assert_eq!(
            Agent::from_stored(Some("gpt")).unwrap_err().code(),
            "PATCH_CANDIDATE_LIVE_AGENT"
        );
    }
}
