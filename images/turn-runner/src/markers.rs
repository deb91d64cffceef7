//! Task markers: `key: value` lines in the task text that select the synthetic agent's behaviour
//! and the isolation probes. Both the agent and the runner read them from the same text.

/// Probe selection parsed from the task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeSelection {
    /// `probe: isolation` — run the full probe suite.
    pub isolation: bool,
    /// `probe-tcp: HOST:PORT` (repeatable) — addresses that must not be reachable.
    pub tcp: Vec<String>,
    /// `probe-env: NAME` — an environment variable that must not be visible.
    pub env: Option<String>,
    /// `probe-file: /path` — a file that must not be visible.
    pub file: Option<String>,
}

impl ProbeSelection {
    /// True when any probe was asked for.
    #[must_use]
    pub fn any(&self) -> bool {
        self.isolation || !self.tcp.is_empty() || self.env.is_some() || self.file.is_some()
    }
}

/// Every `key: value` marker line of `text`, in order.
pub fn marker_lines(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| {
        // The prompt puts the task's first line after `Request: `.
        let line = line.trim();
        let line = line.strip_prefix("Request: ").unwrap_or(line);
        let (key, value) = line.split_once(':')?;
        let key = key.trim();
        let known =
            key == "probe" || key.starts_with("probe-") || key == "mode" || key == "escape-target";
        known.then_some((key, value.trim()))
    })
}

/// The hostile/edit modes (`mode: NAME`) named in `text`.
pub fn modes(text: &str) -> Vec<String> {
    marker_lines(text)
        .filter(|(k, _)| *k == "mode")
        .map(|(_, v)| v.to_owned())
        .collect()
}

/// The probe selection named in `text`.
#[must_use]
pub fn probe_selection(text: &str) -> ProbeSelection {
    let mut sel = ProbeSelection::default();
    for (key, value) in marker_lines(text) {
        match key {
            "probe" if value == "isolation" => sel.isolation = true,
            "probe-tcp" => sel.tcp.push(value.to_owned()),
            "probe-env" => sel.env = Some(value.to_owned()),
            "probe-file" => sel.file = Some(value.to_owned()),
            _ => {}
        }
    }
    sel
}

/// The numeric argument of a mode written `NAME=N` (e.g. `memory-bomb=256`), if any.
#[must_use]
pub fn mode_arg(modes: &[String], name: &str) -> Option<u64> {
    modes
        .iter()
        .find_map(|m| m.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

/// True when `name` (with or without `=N`) is among the modes.
#[cfg(test)]
#[must_use]
pub fn has_mode(modes: &[String], name: &str) -> bool {
    modes
        .iter()
        .any(|m| m == name || m.strip_prefix(name).is_some_and(|r| r.starts_with('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_markers_from_task_text() {
        let text = "Request: mode: noop\nprobe: isolation\nprobe-tcp: 127.0.0.1:9\n  mode: memory-bomb=64\nmode: symlink\nnot: a marker";
        let sel = probe_selection(text);
        assert!(sel.isolation);
        assert_eq!(sel.tcp, vec!["127.0.0.1:9".to_owned()]);
        assert_eq!(sel.env, None);
        let m = modes(text);
        assert_eq!(
            m,
            vec![
                "noop".to_owned(),
                "memory-bomb=64".to_owned(),
                "symlink".to_owned()
            ]
        );
        assert_eq!(mode_arg(&m, "memory-bomb"), Some(64));
        assert!(has_mode(&m, "memory-bomb") && has_mode(&m, "symlink") && !has_mode(&m, "memory"));
    }
}
