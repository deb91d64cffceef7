//! [`CommandCounts`]: what the agent's commands amounted to in a live turn, counted by the worker
//! from the runner's tool-call EVENT frames, timed by the worker's clock. No command text, title
//! or output is kept: only counts and milliseconds.

use std::collections::HashMap;
use std::collections::HashSet;

use serde::Serialize;
use tokio::time::Instant;

/// Most command IDs the tally remembers (a turn sends at most 2,000 events; an ID beyond this is
/// not counted, so a flood of invented IDs costs bounded memory).
const MAX_TRACKED: usize = 512;
/// Longest tool-call ID kept as a key (the runner caps them at 200 characters).
const MAX_ID_BYTES: usize = 256;

/// The agent's commands in one live turn: how many it started (tool calls of kind `execute`),
/// how many ended `failed`, and the worker-clock time from each one's first event to its end.
/// Counted on the worker from the container's advisory events, so an agent that reports nothing
/// counts nothing; the time is the worker's own measure of what was reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CommandCounts {
    /// Commands started.
    pub commands: u32,
    /// Of those, ended with status `failed`.
    pub failed: u32,
    /// Milliseconds between each ended command's first and last event, summed.
    pub command_ms: u64,
}

/// The tally's state across EVENT frames.
#[derive(Debug, Default)]
pub(crate) struct CommandTally {
    counts: CommandCounts,
    /// Every command ID counted (never counted twice).
    seen: HashSet<String>,
    /// Commands started and not yet ended, with the instant of their first event.
    open: HashMap<String, Instant>,
}

impl CommandTally {
    /// Counts one EVENT object received at `now`.
    pub(crate) fn observe(
        &mut self,
        event: &serde_json::Map<String, serde_json::Value>,
        now: Instant,
    ) {
        let field = |name| event.get(name).and_then(serde_json::Value::as_str);
        // A command starts at its first report: an allowed permission request (an agent that
        // asks before it runs one), or its tool call.
        let starts = match field("event") {
            Some("tool_call") => true,
            Some("permission") => field("decision") == Some("allowed"),
            _ => return,
        };
        let Some(id) = field("id") else {
            return;
        };
        if id.len() > MAX_ID_BYTES {
            return;
        }
        if starts
            && field("kind") == Some("execute")
            && !self.seen.contains(id)
            && self.seen.len() < MAX_TRACKED
        {
            self.seen.insert(id.to_owned());
            self.open.insert(id.to_owned(), now);
            self.counts.commands = self.counts.commands.saturating_add(1);
        }
        let status = field("status");
        if field("event") == Some("tool_call")
            && matches!(status, Some("completed" | "failed"))
            && let Some(started) = self.open.remove(id)
        {
            let ms = u64::try_from(now.duration_since(started).as_millis()).unwrap_or(u64::MAX);
            self.counts.command_ms = self.counts.command_ms.saturating_add(ms);
            if status == Some("failed") {
                self.counts.failed = self.counts.failed.saturating_add(1);
            }
        }
    }

    /// The counts so far (commands still open at the end count as started, not ended).
    pub(crate) fn counts(&self) -> CommandCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::time::Duration;

    fn event(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn commands_are_counted_once_timed_and_failures_told_apart() {
        use serde_json::json;
        let mut tally = CommandTally::default();
        let t0 = Instant::now();
        let exec = |id: &str, status: &str| json!({"event": "tool_call", "id": id, "kind": "execute", "status": status});
        let update =
            |id: &str, status: &str| json!({"event": "tool_call", "id": id, "status": status});
        let permission = |id: &str, decision: &str| json!({"event": "permission", "id": id, "kind": "execute", "decision": decision});
        // (event, milliseconds after t0), in the order the worker receives them.
        let steps = [
            (exec("a", "pending"), 0),
            (exec("a", "in_progress"), 10),
            (update("a", "failed"), 1500),
            (exec("b", "in_progress"), 2000),
            (update("b", "completed"), 2250),
            // An edit and a refused permission are not commands.
            (
                json!({"event": "tool_call", "id": "c", "kind": "edit", "status": "completed"}),
                2300,
            ),
            (permission("d", "refused"), 2300),
            // Still running at the end: started, not ended.
            (exec("e", "in_progress"), 3000),
            // An end for a command never started, or ended twice, changes nothing.
            (update("zz", "failed"), 3100),
            (update("a", "failed"), 3200),
            // An agent that asks first: the command starts at the allowed request, and the tool
            // call that reports it (once, already completed) ends it.
            (permission("f", "allowed"), 4000),
            (exec("f", "completed"), 4400),
        ];
        for (value, at) in steps {
            tally.observe(&event(value), t0 + Duration::from_millis(at));
        }
        assert_eq!(
            tally.counts(),
            CommandCounts {
                commands: 4,
                failed: 1,
                command_ms: 1500 + 250 + 400,
            }
        );
    }

    #[test]
    fn invented_ids_cost_bounded_memory() {
        let mut tally = CommandTally::default();
        let now = Instant::now();
        for i in 0..10_000 {
            tally.observe(
                &event(serde_json::json!({"event": "tool_call", "id": format!("id-{i}"), "kind": "execute"})),
                now,
            );
        }
        tally.observe(
            &event(
                serde_json::json!({"event": "tool_call", "id": "x".repeat(300), "kind": "execute"}),
            ),
            now,
        );
        assert_eq!(tally.counts().commands, 512);
        assert!(tally.seen.len() <= MAX_TRACKED && tally.open.len() <= MAX_TRACKED);
    }
}
