//! The service's counters, rendered in the Prometheus text format. Labels are drawn from fixed
//! sets (an outcome, a failure class, a route template, a status class): never a job id, a host
//! path or a code from outside this crate's lists, so the series count is bounded.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use vocab::GateVerdict;

/// How a job attempt on this host ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Completed,
    Failed,
    Retried,
    Snoozed,
    Released,
    Cancelled,
    LeaseLost,
}

const OUTCOMES: [(AttemptOutcome, &str); 7] = [
    (AttemptOutcome::Completed, "completed"),
    (AttemptOutcome::Failed, "failed"),
    (AttemptOutcome::Retried, "retried"),
    (AttemptOutcome::Snoozed, "snoozed"),
    (AttemptOutcome::Released, "released"),
    (AttemptOutcome::Cancelled, "cancelled"),
    (AttemptOutcome::LeaseLost, "lease_lost"),
];

/// The API's route templates (what a request is counted under).
pub const ROUTES: [&str; 13] = [
    "healthz",
    "readyz",
    "metrics",
    "jobs",
    "job",
    "job_cancel",
    "job_retry",
    "job_candidate",
    "job_review",
    "job_publish",
    "audit",
    "usage",
    "other",
];
/// Review decisions, by kind (the counter's `decision` label).
const DECISIONS: [&str; 3] = ["accept", "reject", "retry"];
const STATUS_CLASSES: [&str; 4] = ["2xx", "4xx", "5xx", "other"];

/// Consecutive failed store calls after which the store counts as unreachable. One failure may be
/// a blip (a connection the server just closed, replaced on the next call); three in a row, with
/// the claim loop, the maintenance pass and every heartbeat calling the store, is an outage: it
/// takes about one poll interval (or one heartbeat interval while every slot is busy) to reach.
pub const STORE_FAILURES_UNREACHABLE: u64 = 3;

/// Every counter and gauge of one serve process.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    claimed: AtomicU64,
    outcomes: [AtomicU64; 7],
    store_errors: AtomicU64,
    /// Store calls that failed since the last one that succeeded.
    store_failures_in_a_row: AtomicU64,
    janitor_removed: AtomicU64,
    rescued: AtomicU64,
    running: AtomicU64,
    max_turns: AtomicU64,
    draining: AtomicU64,
    turn_seconds_sum_ms: AtomicU64,
    turn_count: AtomicU64,
    http: [[AtomicU64; 4]; ROUTES.len()],
    /// Review decisions recorded through this host's API, by [`DECISIONS`] kind.
    decisions: [AtomicU64; 3],
    /// Forced accepts (overrides of unmet gates or an unclean policy).
    forced: AtomicU64,
    /// Publications recorded through this host's API.
    publications: AtomicU64,
    /// Gate runs by verdict ([`GateVerdict::ALL`] order): count and summed wall milliseconds.
    gates: [AtomicU64; 5],
    gate_ms: [AtomicU64; 5],
    /// Tokens of the usage rows this host recorded, by [`SPEND_TOKEN_KINDS`].
    spend_tokens: [AtomicU64; 3],
    /// Model requests of the usage rows this host recorded.
    spend_requests: AtomicU64,
    /// The agents' commands in the live turns this host recorded: run, failed, milliseconds.
    agent_commands: [AtomicU64; 3],
    /// Quota refusals, by [`QUOTA_LABELS`] (scope × where).
    quota_refused: [AtomicU64; 4],
    /// Forge webhook deliveries this host recorded, by [`FORGE_DELIVERY_LABELS`], and the
    /// redeliveries it answered without a change.
    forge_deliveries: [AtomicU64; 2],
    forge_duplicates: AtomicU64,
}

/// The `state` labels of the forge delivery counter.
const FORGE_DELIVERY_LABELS: [&str; 2] = ["queued", "ignored"];

/// The `kind` labels of the spend token counter, in the order of `Metrics::spend_tokens`.
const SPEND_TOKEN_KINDS: [&str; 3] = ["input", "output", "total"];

/// The labels of the quota refusal counter: (scope, at).
const QUOTA_LABELS: [(&str, &str); 4] = [
    ("principal", "submit"),
    ("principal", "claim"),
    ("repository", "submit"),
    ("repository", "claim"),
];

impl Metrics {
    /// A daily token quota refused a submission or held a claimed job (`scope`: `principal` or
    /// `repository`; `at`: `submit` or `claim`).
    pub fn quota_refused(&self, scope: &str, at: &str) {
        if let Some(i) = QUOTA_LABELS.iter().position(|l| *l == (scope, at))
            && let Some(c) = self.quota_refused.get(i)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// This host recorded an attempt's usage row (the write applied) with these gateway counts
    /// (all 0 for an offline turn): the spend ledger's counts, without principal or repository.
    /// Counts the commands of one recorded live turn.
    pub(crate) fn agent_commands(&self, commands: u64, failed: u64, ms: u64) {
        for (c, n) in self.agent_commands.iter().zip([commands, failed, ms]) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn spend_recorded(&self, requests: u64, input: u64, output: u64, total: u64) {
        self.spend_requests.fetch_add(requests, Ordering::Relaxed);
        for (c, n) in self.spend_tokens.iter().zip([input, output, total]) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A verified forge delivery was answered: recorded now (`created`) in `state`, or seen
    /// before.
    pub(crate) fn forge_delivery(&self, state: jobs::DeliveryState, created: bool) {
        if !created {
            self.forge_duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let i = usize::from(state != jobs::DeliveryState::Queued);
        if let Some(c) = self.forge_deliveries.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn claimed(&self, n: usize) {
        self.claimed
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn outcome(&self, outcome: AttemptOutcome) {
        if let Some(i) = OUTCOMES.iter().position(|(o, _)| *o == outcome)
            && let Some(c) = self.outcomes.get(i)
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A job store call failed (the database unavailable or erroring).
    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
        self.store_failures_in_a_row.fetch_add(1, Ordering::Relaxed);
    }

    /// A job store write succeeded: the database answers and takes writes.
    pub fn store_ok(&self) {
        self.store_failures_in_a_row.store(0, Ordering::Relaxed);
    }

    /// True while the job store is unreachable: the last `STORE_FAILURES_UNREACHABLE` calls
    /// all failed. `/readyz` answers 503 meanwhile; the first write that succeeds ends it.
    pub fn store_unreachable(&self) -> bool {
        self.store_failures_in_a_row.load(Ordering::Relaxed) >= STORE_FAILURES_UNREACHABLE
    }

    pub fn janitor_removed(&self, n: usize) {
        self.janitor_removed
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn rescued(&self, n: u64) {
        self.rescued.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set_running(&self, n: usize) {
        self.running
            .store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn set_max_turns(&self, n: usize) {
        self.max_turns
            .store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub fn set_draining(&self) {
        self.draining.store(1, Ordering::Relaxed);
    }

    pub fn turn_finished(&self, elapsed: std::time::Duration) {
        self.turn_seconds_sum_ms.fetch_add(
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.turn_count.fetch_add(1, Ordering::Relaxed);
    }

    /// One required gate ran for a job (labels: its verdict only, a fixed set).
    pub fn gate_finished(&self, verdict: GateVerdict, elapsed: std::time::Duration) {
        let Some(i) = GateVerdict::ALL.iter().position(|v| *v == verdict) else {
            return;
        };
        if let (Some(c), Some(ms)) = (self.gates.get(i), self.gate_ms.get(i)) {
            c.fetch_add(1, Ordering::Relaxed);
            ms.fetch_add(
                u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
    }

    /// A review decision was recorded (`decision`: accept, reject or retry; anything else is
    /// not counted).
    pub fn decision(&self, decision: &str, forced: bool) {
        if let Some(c) = DECISIONS
            .iter()
            .position(|d| *d == decision)
            .and_then(|i| self.decisions.get(i))
        {
            c.fetch_add(1, Ordering::Relaxed);
        }
        if forced {
            self.forced.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A publication was recorded.
    pub fn published(&self) {
        self.publications.fetch_add(1, Ordering::Relaxed);
    }

    pub fn http(&self, route: &str, status: u16) {
        let r = ROUTES
            .iter()
            .position(|x| *x == route)
            .unwrap_or(ROUTES.len() - 1);
        let s = match status {
            200..=299 => 0,
            400..=499 => 1,
            500..=599 => 2,
            _ => 3,
        };
        if let Some(c) = self.http.get(r).and_then(|row| row.get(s)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The Prometheus text exposition (format 0.0.4).
    #[must_use]
    pub fn render(&self) -> String {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, kind: &str, lines: Vec<(String, u64)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, v) in lines {
                let _ = writeln!(out, "{name}{labels} {v}");
            }
        };
        counter(
            "patch_candidate_jobs_claimed_total",
            "Job attempts this host claimed.",
            "counter",
            vec![(String::new(), load(&self.claimed))],
        );
        counter(
            "patch_candidate_job_attempts_total",
            "Job attempts this host ended, by outcome.",
            "counter",
            OUTCOMES
                .iter()
                .zip(&self.outcomes)
                .map(|((_, name), c)| (format!("{{outcome=\"{name}\"}}"), load(c)))
                .collect(),
        );
        counter(
            "patch_candidate_quota_refusals_total",
            "Submissions refused and claimed jobs held by a daily token quota, by scope and where.",
            "counter",
            QUOTA_LABELS
                .iter()
                .zip(&self.quota_refused)
                .map(|((scope, at), c)| (format!("{{scope=\"{scope}\",at=\"{at}\"}}"), load(c)))
                .collect(),
        );
        counter(
            "patch_candidate_forge_deliveries_total",
            "Verified forge webhook deliveries this host recorded, by state (queued: starts a job).",
            "counter",
            FORGE_DELIVERY_LABELS
                .iter()
                .zip(&self.forge_deliveries)
                .map(|(state, c)| (format!("{{state=\"{state}\"}}"), load(c)))
                .collect(),
        );
        counter(
            "patch_candidate_forge_redeliveries_total",
            "Forge webhook deliveries answered as seen before (nothing changed).",
            "counter",
            vec![(String::new(), load(&self.forge_duplicates))],
        );
        counter(
            "patch_candidate_spend_tokens_total",
            "Tokens of the live turns' usage rows this host recorded, by kind.",
            "counter",
            SPEND_TOKEN_KINDS
                .iter()
                .zip(&self.spend_tokens)
                .map(|(kind, c)| (format!("{{kind=\"{kind}\"}}"), load(c)))
                .collect(),
        );
        counter(
            "patch_candidate_spend_requests_total",
            "Model requests of the live turns' usage rows this host recorded.",
            "counter",
            vec![(String::new(), load(&self.spend_requests))],
        );
        counter(
            "patch_candidate_agent_commands_total",
            "Commands the agents ran in the live turns this host recorded (counted by the worker).",
            "counter",
            vec![(String::new(), load(&self.agent_commands[0]))],
        );
        counter(
            "patch_candidate_agent_commands_failed_total",
            "Of those, commands that ended failed.",
            "counter",
            vec![(String::new(), load(&self.agent_commands[1]))],
        );

        counter(
            "patch_candidate_store_errors_total",
            "Job store calls that failed (database unavailable or erroring).",
            "counter",
            vec![(String::new(), load(&self.store_errors))],
        );
        counter(
            "patch_candidate_store_unreachable",
            "1 while the job store is unreachable (consecutive failed calls); /readyz answers 503.",
            "gauge",
            vec![(String::new(), u64::from(self.store_unreachable()))],
        );
        counter(
            "patch_candidate_janitor_removed_total",
            "Turn containers of attempts no longer current, removed.",
            "counter",
            vec![(String::new(), load(&self.janitor_removed))],
        );
        counter(
            "patch_candidate_leases_rescued_total",
            "Expired leases this host returned to the queue.",
            "counter",
            vec![(String::new(), load(&self.rescued))],
        );
        counter(
            "patch_candidate_turns_running",
            "Turns running on this host now.",
            "gauge",
            vec![(String::new(), load(&self.running))],
        );
        counter(
            "patch_candidate_max_turns",
            "Turn slots of this host.",
            "gauge",
            vec![(String::new(), load(&self.max_turns))],
        );
        counter(
            "patch_candidate_draining",
            "1 while the host drains after SIGTERM.",
            "gauge",
            vec![(String::new(), load(&self.draining))],
        );
        counter(
            "patch_candidate_review_decisions_total",
            "Review decisions recorded through this host's API, by decision.",
            "counter",
            DECISIONS
                .iter()
                .zip(&self.decisions)
                .map(|(name, c)| (format!("{{decision=\"{name}\"}}"), load(c)))
                .collect(),
        );
        counter(
            "patch_candidate_review_forced_total",
            "Forced accepts (unmet gates or an unclean policy overridden with a reason).",
            "counter",
            vec![(String::new(), load(&self.forced))],
        );
        counter(
            "patch_candidate_publications_total",
            "Publications recorded through this host's API.",
            "counter",
            vec![(String::new(), load(&self.publications))],
        );
        let sum_ms = load(&self.turn_seconds_sum_ms);
        let _ = writeln!(
            out,
            "# HELP patch_candidate_job_seconds Wall time of finished job attempts.\n# TYPE patch_candidate_job_seconds summary\npatch_candidate_job_seconds_sum {}.{:03}\npatch_candidate_job_seconds_count {}",
            sum_ms / 1000,
            sum_ms % 1000,
            load(&self.turn_count)
        );
        let command_ms = load(&self.agent_commands[2]);
        let _ = writeln!(
            out,
            "# HELP patch_candidate_agent_command_seconds_total The time those commands ran, summed.\n# TYPE patch_candidate_agent_command_seconds_total counter\npatch_candidate_agent_command_seconds_total {}.{:03}",
            command_ms / 1000,
            command_ms % 1000
        );
        let _ = writeln!(
            out,
            "# HELP patch_candidate_gate_seconds Wall time of the required gates this host ran, by outcome.\n# TYPE patch_candidate_gate_seconds summary"
        );
        for ((verdict, count), ms) in GateVerdict::ALL.iter().zip(&self.gates).zip(&self.gate_ms) {
            let ms = load(ms);
            let outcome = verdict.as_str();
            let _ = writeln!(
                out,
                "patch_candidate_gate_seconds_sum{{outcome=\"{outcome}\"}} {}.{:03}\npatch_candidate_gate_seconds_count{{outcome=\"{outcome}\"}} {}",
                ms / 1000,
                ms % 1000,
                load(count)
            );
        }
        let mut lines = Vec::new();
        for (route, row) in ROUTES.iter().zip(&self.http) {
            for (class, c) in STATUS_CLASSES.iter().zip(row) {
                let v = load(c);
                if v > 0 {
                    lines.push((format!("{{route=\"{route}\",status=\"{class}\"}}"), v));
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP patch_candidate_http_requests_total API requests, by route and status class.\n# TYPE patch_candidate_http_requests_total counter"
        );
        for (labels, v) in lines {
            let _ = writeln!(out, "patch_candidate_http_requests_total{labels} {v}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_come_only_from_fixed_sets() {
        let m = Metrics::default();
        m.outcome(AttemptOutcome::Completed);
        m.http("job", 404);
        m.http("/v1/jobs/job_0123", 200);
        let text = m.render();
        assert!(text.contains("patch_candidate_job_attempts_total{outcome=\"completed\"} 1"));
        assert!(
            text.contains("patch_candidate_http_requests_total{route=\"job\",status=\"4xx\"} 1")
        );
        assert!(
            text.contains("patch_candidate_http_requests_total{route=\"other\",status=\"2xx\"} 1")
        );
        assert!(!text.contains("job_0123"));
    }

    #[test]
    fn decisions_forced_overrides_and_publications_are_counted() {
        let m = Metrics::default();
        m.decision("accept", true);
        m.decision("accept", false);
        m.decision("reject", false);
        m.decision("sha256:abc", false);
        m.published();
        let text = m.render();
        assert!(text.contains("patch_candidate_review_decisions_total{decision=\"accept\"} 2"));
        assert!(text.contains("patch_candidate_review_decisions_total{decision=\"reject\"} 1"));
        assert!(text.contains("patch_candidate_review_decisions_total{decision=\"retry\"} 0"));
        assert!(text.contains("patch_candidate_review_forced_total 1"));
        assert!(text.contains("patch_candidate_publications_total 1"));
        assert!(!text.contains("sha256"));
    }

    #[test]
    fn spend_and_quota_refusals_are_counted_without_principals() {
        let m = Metrics::default();
        m.spend_recorded(3, 100, 20, 120);
        m.spend_recorded(1, 5, 1, 6);
        m.spend_recorded(0, 0, 0, 0);
        m.agent_commands(4, 1, 2_500);
        m.agent_commands(2, 0, 500);
        m.quota_refused("principal", "claim");
        m.quota_refused("repository", "submit");
        m.quota_refused("alice", "submit");
        let text = m.render();
        assert!(text.contains("patch_candidate_spend_tokens_total{kind=\"input\"} 105"));
        assert!(text.contains("patch_candidate_spend_tokens_total{kind=\"output\"} 21"));
        assert!(text.contains("patch_candidate_spend_tokens_total{kind=\"total\"} 126"));
        assert!(text.contains("patch_candidate_spend_requests_total 4"));
        assert!(text.contains("patch_candidate_agent_commands_total 6"));
        assert!(text.contains("patch_candidate_agent_commands_failed_total 1"));
        assert!(text.contains("patch_candidate_agent_command_seconds_total 3.000"));
        assert!(
            text.contains(
                "patch_candidate_quota_refusals_total{scope=\"principal\",at=\"claim\"} 1"
            )
        );
        assert!(text.contains(
            "patch_candidate_quota_refusals_total{scope=\"repository\",at=\"submit\"} 1"
        ));
        assert!(
            text.contains(
                "patch_candidate_quota_refusals_total{scope=\"principal\",at=\"submit\"} 0"
            )
        );
        assert!(!text.contains("alice"));
    }

    #[test]
    fn gate_outcomes_and_durations_by_verdict() {
        let m = Metrics::default();
        m.gate_finished(GateVerdict::Failed, std::time::Duration::from_millis(1500));
        m.gate_finished(GateVerdict::Failed, std::time::Duration::from_millis(250));
        m.gate_finished(GateVerdict::Passed, std::time::Duration::from_millis(10));
        let text = m.render();
        assert!(text.contains("patch_candidate_gate_seconds_count{outcome=\"failed\"} 2"));
        assert!(text.contains("patch_candidate_gate_seconds_sum{outcome=\"failed\"} 1.750"));
        assert!(text.contains("patch_candidate_gate_seconds_count{outcome=\"passed\"} 1"));
        assert!(text.contains("patch_candidate_gate_seconds_count{outcome=\"policy_refused\"} 0"));
        assert_eq!(
            text.matches("patch_candidate_gate_seconds_count").count(),
            5
        );
    }

    #[test]
    fn the_store_is_unreachable_after_failures_in_a_row_until_one_call_succeeds() {
        let m = Metrics::default();
        for _ in 1..STORE_FAILURES_UNREACHABLE {
            m.store_error();
        }
        assert!(!m.store_unreachable());
        m.store_ok();
        for _ in 1..STORE_FAILURES_UNREACHABLE {
            m.store_error();
        }
        assert!(
            !m.store_unreachable(),
            "a success in between resets the count"
        );
        m.store_error();
        assert!(m.store_unreachable());
        assert!(m.render().contains("patch_candidate_store_unreachable 1"));
        m.store_ok();
        assert!(!m.store_unreachable());
        assert!(m.render().contains("patch_candidate_store_unreachable 0"));
        assert!(m.render().contains(&format!(
            "patch_candidate_store_errors_total {}",
            2 * STORE_FAILURES_UNREACHABLE - 1
        )));
    }
}
