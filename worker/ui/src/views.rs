//! The pages' view models and their templates (`templates/`). Every field a template prints is
//! escaped by askama; agent-controlled text arrives as [`Shown`] (hidden characters already
//! split out as marked escapes). Nothing here is marked safe.

use askama::Template;

use crate::diff::{Body, Row, SplitRow};
use crate::text::Shown;

/// Jobs per list page.
pub const PAGE_SIZE: usize = 50;
/// Diff bytes one candidate page renders at most; files past it are "too big to show" with
/// their size and a raw link.
pub const MAX_PAGE_DIFF_BYTES: usize = 8 * 1024 * 1024;

/// Characters of a summary, a reason or a name shown before the cut marker.
const SHORT_CHARS: usize = 400;
/// Characters of a rationale or a log tail shown.
pub const LONG_CHARS: usize = 8_000;

/// Untrusted single-line text for a template.
#[must_use]
pub fn short(text: &str) -> Shown {
    Shown::new(text, SHORT_CHARS)
}

/// Untrusted multi-line text: one [`Shown`] per line.
#[must_use]
pub fn lines(text: &str, max_chars: usize) -> Vec<Shown> {
    let mut left = max_chars;
    let mut out = Vec::new();
    for line in text.split('\n') {
        if left == 0 {
            break;
        }
        let s = Shown::new(line, left);
        left = left.saturating_sub(line.chars().count());
        out.push(s);
    }
    out
}

/// A UTC timestamp (`YYYY-MM-DD HH:MM:SSZ`) of milliseconds since the epoch.
#[must_use]
pub fn utc(ms: i64) -> String {
    vocab::utc_timestamp(ms.div_euclid(1000), ' ')
}

/// The sign-in page.
#[derive(Debug, Template)]
#[template(path = "sign_in.html")]
pub struct SignInPage {
    /// A fixed message (never the input).
    pub error: Option<&'static str>,
    /// The form's CSRF token, bound to the pre-session cookie set with the page.
    pub csrf: String,
}

/// Who is signed in, as every page's navigation shows it, with the sign-out form's token.
#[derive(Debug)]
pub struct SignedIn {
    pub name: Shown,
    pub sign_out_csrf: String,
}

/// An error or notice page.
#[derive(Debug, Template)]
#[template(path = "message.html")]
pub struct MessagePage {
    pub principal: Option<SignedIn>,
    pub title: &'static str,
    pub code: Option<&'static str>,
    /// The error's own message (errors never quote agent text; shown escaped all the same).
    pub message: Shown,
    pub back: Option<String>,
}

/// One state filter with its count.
#[derive(Debug)]
pub struct StateCount {
    pub state: &'static str,
    pub count: usize,
    pub current: bool,
}

/// One row of the jobs list.
#[derive(Debug)]
pub struct JobItem {
    pub id: String,
    pub state: &'static str,
    pub kind: &'static str,
    pub attempts: u32,
    pub max_attempts: u32,
    pub created: String,
    pub updated: String,
    pub digest: Option<String>,
    pub error_code: Option<Shown>,
    pub review: &'static str,
}

/// The jobs list.
#[derive(Debug, Template)]
#[template(path = "jobs.html")]
pub struct JobsPage {
    pub principal: Option<SignedIn>,
    pub counts: Vec<StateCount>,
    /// Jobs looked at for the counts (the newest, bounded).
    pub total: usize,
    pub bounded: bool,
    pub filter: Option<&'static str>,
    pub jobs: Vec<JobItem>,
    pub page: usize,
    pub pages: usize,
    pub prev: Option<String>,
    pub next: Option<String>,
}

/// One job event.
#[derive(Debug)]
pub struct EventItem {
    pub at: String,
    pub code: Shown,
    pub message: Shown,
}

/// One gate's evidence.
#[derive(Debug)]
pub struct GateItem {
    pub gate: Shown,
    pub required: bool,
    pub outcome: String,
    pub code: Option<Shown>,
    pub tests: Option<String>,
    pub new_failures: Vec<Shown>,
    pub new_failures_count: u64,
    pub fixed: Vec<Shown>,
    pub fixed_count: u64,
    pub log_tail: Vec<Shown>,
    pub log_total_bytes: u64,
    pub wall_ms: u64,
    pub evidence_digest: Option<String>,
}

/// One recorded decision.
#[derive(Debug)]
pub struct DecisionItem {
    pub seq: u64,
    pub decision: &'static str,
    pub principal: Shown,
    pub at: String,
    pub reason: Option<Shown>,
    pub forced: bool,
}

/// One entry of the audit trail (the acts about a job, on its page).
#[derive(Debug)]
pub struct AuditItem {
    pub seq: i64,
    pub at: String,
    pub principal: Shown,
    /// The act's wire name (a closed set).
    pub act: &'static str,
    pub detail: Shown,
}

/// One attempt of a job's chain (the job page lists them, oldest first).
#[derive(Debug)]
pub struct ChainItem {
    /// Its place: 1 for the chain's first turn.
    pub attempt: usize,
    pub job: String,
    /// 0 for a first turn or a reviewer's retry, else the automatic follow-up's round.
    pub round: u32,
    pub state: &'static str,
    pub digest: Option<String>,
    /// `gate: outcome` of each gate evidence bound to its candidate.
    pub gates: Vec<String>,
    /// The tokens the chain's live turns spent before this attempt.
    pub tokens_before: u64,
    /// Whether this is the job the page is about.
    pub current: bool,
}

/// The job page.
#[derive(Debug, Template)]
#[template(path = "job.html")]
pub struct JobPage {
    pub principal: Option<SignedIn>,
    pub id: String,
    pub state: &'static str,
    pub kind: &'static str,
    pub attempts: u32,
    pub max_attempts: u32,
    pub created: String,
    pub updated: String,
    pub host: Option<String>,
    pub attempt: Option<String>,
    pub error_code: Option<Shown>,
    pub error_message: Option<Shown>,
    pub digest: Option<String>,
    pub running: bool,
    pub events: Vec<EventItem>,
    pub gates: Vec<GateItem>,
    pub review: &'static str,
    pub decisions: Vec<DecisionItem>,
    pub publication: Vec<Shown>,
    /// The attempts of the job's chain, oldest first; empty when the job is alone.
    pub chain: Vec<ChainItem>,
    /// The principal whose submission created the job (its chain's), when recorded.
    pub submitted_by: Option<Shown>,
    /// The latest privileged acts about the job (decisions, publication), oldest first.
    pub audit: Vec<AuditItem>,
    /// Each recorded attempt's usage, oldest first.
    pub usage: Vec<AttemptItem>,
}

/// One attempt's usage row on the job page; `—` where the row has no such value.
#[derive(Debug)]
pub struct AttemptItem {
    pub attempt: String,
    pub outcome: String,
    /// The turn's wall time, e.g. `12.4 s`.
    pub wall: String,
    pub model: String,
    pub requests: String,
    pub tokens: String,
    /// Commands the agent ran in the turn, as the worker counted them.
    pub commands: String,
    pub failed: String,
    /// Their time, summed, e.g. `2.1 s`.
    pub command_time: String,
}

/// One redacted policy finding.
#[derive(Debug)]
pub struct FindingItem {
    pub rule: Shown,
    pub path: Option<Shown>,
    pub line: Option<u64>,
}

/// One changed file of the candidate page.
#[derive(Debug)]
pub struct FileItem {
    pub index: usize,
    pub path: Shown,
    pub operation: &'static str,
    pub new_bytes: Option<u64>,
    pub diff_bytes: u64,
    pub added: u64,
    pub removed: u64,
    pub hidden: usize,
    pub cut_lines: usize,
    pub body: Body,
}

impl FileItem {
    /// The unified rows, if that is the body.
    #[must_use]
    pub fn unified(&self) -> &[Row] {
        match &self.body {
            Body::Unified(rows) => rows,
            _ => &[],
        }
    }

    /// The split rows, if that is the body.
    #[must_use]
    pub fn split(&self) -> &[SplitRow] {
        match &self.body {
            Body::Split(rows) => rows,
            _ => &[],
        }
    }
}

/// The candidate page.
#[derive(Debug, Template)]
#[template(path = "candidate.html")]
pub struct CandidatePage {
    pub principal: Option<SignedIn>,
    pub job_id: String,
    pub digest: String,
    pub repository: Shown,
    pub baseline: Shown,
    pub summary: Shown,
    pub rationale: Vec<Shown>,
    pub validation_state: String,
    pub review_state: String,
    pub route: String,
    pub policy_clean: bool,
    pub policy_digest: Option<String>,
    pub findings: Vec<FindingItem>,
    pub hidden_total: usize,
    pub hidden_files: usize,
    pub gates: Vec<GateItem>,
    pub files: Vec<FileItem>,
    pub split: bool,
    pub ignore_ws: bool,
    pub unified_href: String,
    pub split_href: String,
    pub ws_href: String,
    pub csrf: String,
    pub actions: Vec<&'static str>,
    pub can_decide: bool,
    /// The signed-in principal may force an accept (`serve --force-role`): the override box.
    pub can_force: bool,
    pub can_publish: bool,
    pub published: Vec<Shown>,
    pub decisions: Vec<DecisionItem>,
    /// The job this one is a follow-up of (its id: `job_` and 32 hex digits).
    pub supersedes: Option<String>,
    /// The follow-up jobs `retry` decisions on this candidate queued (their ids).
    pub follow_ups: Vec<String>,
    /// The follow-up's round in its chain of automatic follow-ups (0: a retry or a first turn).
    pub round: u32,
    /// The later attempt that continues this candidate (its job id), when there is one.
    pub superseded_by: Option<String>,
    /// The diff from the previous attempt's candidate to this one, file by file (`operation`:
    /// `changed`, `added` or `reverted`); empty without a previous attempt.
    pub attempt_files: Vec<FileItem>,
    /// Whether an accept is open (not for a superseded candidate).
    pub can_accept: bool,
    /// The outcome of the last form (a fixed sentence or an error code).
    pub notice: Option<Shown>,
    pub notice_error: bool,
}

/// One row of the usage page: a UTC day, a principal and a repository, and their spend (or
/// the totals, without day, principal and repository).
#[derive(Debug)]
pub struct UsageItem {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// The jobs' principal; `None` for jobs queued before principals were recorded.
    pub principal: Option<Shown>,
    /// The jobs' repository locator.
    pub repository: Shown,
    pub attempts: u64,
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
}

/// The usage page: the spend ledger's report of a range of UTC days.
#[derive(Debug, Template)]
#[template(path = "usage.html")]
pub struct UsagePage {
    pub principal: Option<SignedIn>,
    /// The first day shown, `YYYY-MM-DD`.
    pub from: String,
    /// The last day shown, `YYYY-MM-DD`.
    pub to: String,
    /// Whether every principal's rows are shown (`admin`), else only the caller's own.
    pub everyone: bool,
    pub rows: Vec<UsageItem>,
    /// The sums of the rows (`day`, `principal`, `repository` unused).
    pub totals: UsageItem,
}

#[cfg(test)]
#[path = "views_tests.rs"]
mod tests;
