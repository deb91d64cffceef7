//! One attempt's usage row read back for people (`jobs show`, the review UI's job page): the
//! outcome, the turn's wall time and, for a live turn, the model, the gateway's trusted counts
//! and the agent's commands as the worker counted them. The row is the service's own document,
//! but it comes back from the job store, so it is read field by field: a missing or malformed
//! field is left out, never guessed, and text fields are kept only in their written shape.

use serde_json::Value;

/// The longest outcome word or model name kept (the service writes short ASCII tokens).
const MAX_WORD: usize = 128;

/// The agent's commands in one live turn, as recorded in the usage row (`live.commands`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AttemptCommands {
    /// Commands the agent started.
    pub commands: u64,
    /// Of those, ended `failed`.
    pub failed: u64,
    /// Milliseconds the commands ran, summed (the worker's clock).
    pub command_ms: u64,
}

/// One attempt's usage row, typed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AttemptUsage {
    /// The attempt's ID.
    pub attempt: String,
    /// `completed`, `failed`, `cancelled`, `released`, …
    pub outcome: Option<String>,
    /// The turn's wall time.
    pub wall_ms: Option<u64>,
    /// The model of a live turn.
    pub model: Option<String>,
    /// Model requests the gateway received.
    pub requests: Option<u64>,
    /// Tokens the upstream reported to the gateway.
    pub total_tokens: Option<u64>,
    /// The agent's commands, when the live attempt produced its candidate.
    pub commands: Option<AttemptCommands>,
}

/// A short token as written by the service: ASCII letters, digits and `-._:/@`, at most
/// [`MAX_WORD`] bytes.
fn word(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?;
    let ok = !s.is_empty()
        && s.len() <= MAX_WORD
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._:/@".contains(&b));
    ok.then(|| s.to_owned())
}

impl AttemptUsage {
    /// Reads one stored usage row (`jobs::JobStore::usage`). Never fails: what cannot be read
    /// is left out.
    #[must_use]
    pub fn read(attempt: &str, usage_json: &str) -> Self {
        let doc: Value = serde_json::from_str(usage_json).unwrap_or(Value::Null);
        let live = doc.get("live");
        let count = |name: &str| live.and_then(|l| l.get(name)).and_then(Value::as_u64);
        let commands = live.and_then(|l| l.get("commands")).and_then(|c| {
            Some(AttemptCommands {
                commands: c.get("commands")?.as_u64()?,
                failed: c.get("failed")?.as_u64()?,
                command_ms: c.get("command_ms")?.as_u64()?,
            })
        });
        Self {
            attempt: attempt.to_owned(),
            outcome: word(doc.get("outcome")),
            wall_ms: doc.get("wall_ms").and_then(Value::as_u64),
            model: word(live.and_then(|l| l.get("model"))),
            requests: count("requests"),
            total_tokens: count("total_tokens"),
            commands,
        }
    }

    /// One line for `jobs show`, e.g. `attempt a-1: completed in 12.4 s; model m, 3 requests,
    /// 12800 tokens; 4 commands (1 failed, 2.1 s)`.
    #[must_use]
    pub fn line(&self) -> String {
        let mut line = format!(
            "attempt {}: {}",
            self.attempt,
            self.outcome.as_deref().unwrap_or("unknown outcome")
        );
        if let Some(ms) = self.wall_ms {
            line.push_str(&format!(" in {}", ms_as_seconds(ms)));
        }
        if let Some(model) = &self.model {
            line.push_str(&format!(
                "; model {model}, {} requests, {} tokens",
                self.requests.unwrap_or(0),
                self.total_tokens.unwrap_or(0)
            ));
        }
        if let Some(c) = &self.commands {
            line.push_str(&format!(
                "; {} commands ({} failed, {})",
                c.commands,
                c.failed,
                ms_as_seconds(c.command_ms)
            ));
        }
        line
    }
}

/// Milliseconds as seconds with one decimal, e.g. `2.1 s`.
#[must_use]
pub fn ms_as_seconds(ms: u64) -> String {
    format!("{}.{} s", ms / 1000, (ms % 1000) / 100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_row_reads_with_its_commands() {
        let row = r#"{"outcome":"completed","code":null,"class":null,"wall_ms":12400,
            "usage":null,"live":{"requests":3,"forwarded":3,"refused":0,"input_tokens":12000,
            "output_tokens":800,"total_tokens":12800,"model":"gpt-5.3-codex",
            "commands":{"commands":4,"failed":1,"command_ms":2150}}}"#;
        let u = AttemptUsage::read("attempt-1", row);
        assert_eq!(u.outcome.as_deref(), Some("completed"));
        assert_eq!(u.model.as_deref(), Some("gpt-5.3-codex"));
        assert_eq!(u.requests, Some(3));
        assert_eq!(u.total_tokens, Some(12800));
        assert_eq!(
            u.commands,
            Some(AttemptCommands {
                commands: 4,
                failed: 1,
                command_ms: 2150
            })
        );
        assert_eq!(
            u.line(),
            "attempt attempt-1: completed in 12.4 s; model gpt-5.3-codex, 3 requests, \
             12800 tokens; 4 commands (1 failed, 2.1 s)"
        );
    }

    #[test]
    fn an_offline_row_has_no_live_part() {
        let u = AttemptUsage::read("a", r#"{"outcome":"failed","wall_ms":900}"#);
        assert_eq!(u.line(), "attempt a: failed in 0.9 s");
        assert_eq!(u.commands, None);
    }

    #[test]
    fn malformed_fields_are_left_out_not_guessed() {
        for row in [
            "not json",
            r#"{"outcome":"<script>","wall_ms":-1,"live":{"model":"a b","commands":{"commands":1}}}"#,
            r#"{"outcome":7,"live":{"commands":{"commands":"1","failed":0,"command_ms":0}}}"#,
        ] {
            let u = AttemptUsage::read("a", row);
            assert_eq!(u.outcome, None, "{row}");
            assert_eq!(u.wall_ms, None, "{row}");
            assert_eq!(u.model, None, "{row}");
            assert_eq!(u.commands, None, "{row}");
        }
        let long = format!(r#"{{"outcome":"{}"}}"#, "a".repeat(MAX_WORD + 1));
        assert_eq!(AttemptUsage::read("a", &long).outcome, None);
    }
}
