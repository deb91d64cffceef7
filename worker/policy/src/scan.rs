//! [`scan`]: the content policy over one candidate. Every changed file's path is checked against
//! the CI list; every created file's name against the name rules (secrets, hidden text,
//! executable and binary names); every added line (see `added.rs`) against the secret rules and
//! the hidden-text and NUL characters. One Aho-Corasick pass over each post-image finds every
//! keyword and special character; a rule's regex then runs once over each added line that holds
//! one of its keywords, so the work is linear in the content times the number of rules a line
//! triggers.

use finalizer::{RepositoryPatchCandidate, RepositoryPatchFile, repository_patch_digest};
use memchr::{memchr, memrchr};
use snapshot::FileOp;

use crate::added::{Added, Lines, added_by_diff};
use crate::error::PolicyError;
use crate::report::{
    Finding, FindingKind, KindCounts, MAX_FINDINGS, MAX_FINDINGS_PER_FILE, POLICY_REPORT_SCHEMA,
    PolicyReport,
};
use crate::rules::{
    BIDI, MAX_SECRET_RULES, Pattern, RuleSet, Special, ZERO_WIDTH, shannon_entropy,
};

/// Rule ids of the built-in (code, not rule-file) checks.
const BIDI_RULE: &str = "bidi-control";
const ZERO_WIDTH_RULE: &str = "zero-width-character";
const ESCAPE_RULE: &str = "terminal-escape";
const NUL_RULE: &str = "nul-byte";
const SHEBANG_RULE: &str = "script-shebang";
const ELF_RULE: &str = "elf-binary";
const EXECUTABLE_NAME_RULE: &str = "executable-name";
const BINARY_NAME_RULE: &str = "binary-name";
const CI_RULE: &str = "ci-config";

/// Keyword hits of one line: a bit per secret rule, a flag per special.
#[derive(Debug, Default)]
struct LineHits {
    rules: [u64; MAX_SECRET_RULES / 64],
    bidi: bool,
    zero_width: bool,
    escape: bool,
    nul: bool,
}

impl LineHits {
    fn any(&self) -> bool {
        self.rules.iter().any(|w| *w != 0)
            || self.bidi
            || self.zero_width
            || self.escape
            || self.nul
    }

    fn set_rule(&mut self, index: usize) {
        if let Some(word) = self.rules.get_mut(index / 64) {
            *word |= 1 << (index % 64);
        }
    }

    fn has_rule(&self, index: usize) -> bool {
        self.rules
            .get(index / 64)
            .is_some_and(|w| w & (1 << (index % 64)) != 0)
    }
}

/// The findings of the whole scan, bounded as they are recorded.
#[derive(Debug, Default)]
struct Collector {
    counts: KindCounts,
    listed: Vec<Finding>,
}

/// The findings of one file before they join the collector (the name rule decides whether the
/// path is shown, and it is known only once the name has been checked).
#[derive(Debug)]
struct FileFindings {
    file_index: u32,
    found: Vec<(FindingKind, String, Option<u64>)>,
    total: Vec<FindingKind>,
    withhold_path: bool,
}

impl FileFindings {
    fn new(file_index: u32) -> Self {
        Self {
            file_index,
            found: Vec::new(),
            total: Vec::new(),
            withhold_path: false,
        }
    }

    fn push(&mut self, kind: FindingKind, rule: &str, line: Option<u64>) {
        self.total.push(kind);
        if self.found.len() < MAX_FINDINGS_PER_FILE {
            self.found.push((kind, rule.to_owned(), line));
        }
    }
}

impl Collector {
    fn absorb(&mut self, file: FileFindings, path: &str) {
        for kind in &file.total {
            self.counts.bump(*kind);
        }
        for (kind, rule, line) in file.found {
            if self.listed.len() >= MAX_FINDINGS {
                break;
            }
            self.listed.push(Finding {
                rule_id: rule,
                kind,
                file_index: file.file_index,
                path: (!file.withhold_path).then(|| path.to_owned()),
                line,
                severity: kind.severity(),
            });
        }
    }
}

fn has_any(text: &str, chars: &[char]) -> bool {
    text.chars().any(|c| chars.contains(&c))
}

/// The name rules of a created file.
fn scan_name(rules: &RuleSet, path: &str, out: &mut FileFindings) {
    let mut hits = LineHits::default();
    for m in rules.automaton.find_overlapping_iter(path) {
        if let Some(Pattern::Keyword(index)) = rules.patterns.get(m.pattern().as_usize()) {
            hits.set_rule(*index);
        }
    }
    for (index, rule) in rules.secrets.iter().enumerate() {
        if rule.names && hits.has_rule(index) && secret_matches(rule, path) {
            out.push(FindingKind::Secret, &rule.id, None);
            out.withhold_path = true;
        }
    }
    for rule in &rules.secret_paths {
        if rule.regex.is_match(path) {
            out.push(FindingKind::Secret, &rule.id, None);
        }
    }
    if has_any(path, &BIDI) {
        out.push(FindingKind::HiddenText, BIDI_RULE, None);
    }
    if has_any(path, &ZERO_WIDTH) || path.contains('\u{FEFF}') {
        out.push(FindingKind::HiddenText, ZERO_WIDTH_RULE, None);
    }
    if rules.executable_names.is_match(path) {
        out.push(FindingKind::Executable, EXECUTABLE_NAME_RULE, None);
    }
    if rules.binary_names.is_match(path) {
        out.push(FindingKind::Binary, BINARY_NAME_RULE, None);
    }
}

/// True when `rule` matches `text` with a secret that passes its entropy threshold.
fn secret_matches(rule: &crate::rules::SecretRule, text: &str) -> bool {
    match rule.entropy {
        None => rule.regex.is_match(text),
        Some(threshold) if rule.group == 0 => rule
            .regex
            .find_iter(text)
            .any(|m| shannon_entropy(m.as_str().as_bytes()) >= threshold),
        Some(threshold) => rule.regex.captures_iter(text).any(|c| {
            c.get(rule.group)
                .is_some_and(|g| shannon_entropy(g.as_str().as_bytes()) >= threshold)
        }),
    }
}

/// The checks of one added line that holds at least one keyword or special character.
fn check_line(rules: &RuleSet, text: &str, number: u64, hits: &LineHits, out: &mut FileFindings) {
    for (index, rule) in rules.secrets.iter().enumerate() {
        if hits.has_rule(index) && secret_matches(rule, text) {
            out.push(FindingKind::Secret, &rule.id, Some(number));
        }
    }
    if hits.bidi {
        out.push(FindingKind::HiddenText, BIDI_RULE, Some(number));
    }
    if hits.zero_width {
        out.push(FindingKind::HiddenText, ZERO_WIDTH_RULE, Some(number));
    }
    if hits.escape {
        out.push(FindingKind::HiddenText, ESCAPE_RULE, Some(number));
    }
    if hits.nul {
        out.push(FindingKind::Binary, NUL_RULE, Some(number));
    }
}

/// Walks the automaton's hits over `content` line by line and checks every added line hit.
fn scan_content(rules: &RuleSet, content: &str, added: &Added, out: &mut FileFindings) {
    let bytes = content.as_bytes();
    if added.contains(0) {
        if content.starts_with("#!") {
            out.push(FindingKind::Executable, SHEBANG_RULE, Some(1));
        }
        if content.starts_with("\u{7f}ELF") {
            out.push(FindingKind::Executable, ELF_RULE, Some(1));
        }
    }
    // The current line: 0-based index and byte range (its `\n` excluded).
    let mut line = 0_usize;
    let mut start = 0_usize;
    let mut end = memchr(b'\n', bytes).unwrap_or(bytes.len());
    let mut hits = LineHits::default();
    let flush = |line: usize, start: usize, end: usize, hits: &LineHits, out: &mut FileFindings| {
        if hits.any()
            && let Some(text) = content.get(start..end)
        {
            check_line(rules, text, line as u64 + 1, hits, out);
        }
    };
    for m in rules.automaton.find_overlapping_iter(content) {
        let pos = m.start();
        if pos > end {
            flush(line, start, end, &hits, out);
            hits = LineHits::default();
            let skipped = bytes.get(end..pos).unwrap_or_default();
            line += memchr::memchr_iter(b'\n', skipped).count();
            start = memrchr(b'\n', bytes.get(..pos).unwrap_or_default()).map_or(0, |p| p + 1);
            end = bytes
                .get(pos..)
                .and_then(|rest| memchr(b'\n', rest))
                .map_or(bytes.len(), |p| pos + p);
        }
        if !added.contains(line) {
            continue;
        }
        match rules.patterns.get(m.pattern().as_usize()) {
            Some(Pattern::Keyword(index)) => hits.set_rule(*index),
            Some(Pattern::Special(Special::Bidi)) => hits.bidi = true,
            Some(Pattern::Special(Special::ZeroWidth)) => hits.zero_width = true,
            Some(Pattern::Special(Special::Bom)) => hits.zero_width |= pos != 0,
            Some(Pattern::Special(Special::Escape)) => hits.escape = true,
            Some(Pattern::Special(Special::Nul)) => hits.nul = true,
            None => {}
        }
    }
    flush(line, start, end, &hits, out);
}

/// One changed file: returns its findings and the number of added lines scanned.
fn scan_file(rules: &RuleSet, index: u32, file: &RepositoryPatchFile) -> (FileFindings, u64) {
    let mut out = FileFindings::new(index);
    let path = file.path().as_str();
    if file.op() == FileOp::Create {
        scan_name(rules, path, &mut out);
    }
    if rules.ci.is_match(path) {
        out.push(FindingKind::CiConfig, CI_RULE, None);
    }
    let mut scanned = 0;
    if let Some(content) = file.content() {
        let lines = Lines::of(content);
        let added = match file.op() {
            FileOp::Update => added_by_diff(file.diff(), content, &lines),
            FileOp::Create | FileOp::Delete => Added::All,
        };
        scanned = added.count(&lines) as u64;
        scan_content(rules, content, &added, &mut out);
    }
    (out, scanned)
}

/// Runs the content policy over `candidate` and returns the report bound to its digest.
///
/// # Errors
/// The candidate digest's own codes (`REPOSITORY_PATCH_DIGEST_*`: a content hash that does not
/// match, colliding paths, a candidate over the 64 MiB digest budget, which also bounds the
/// scan); `PATCH_CANDIDATE_POLICY_RULES` if the shipped rule file does not compile (a build
/// defect).
///
/// # Security
/// The report, its `Debug` form and every error name rules, kinds, files and lines, never a
/// matched value; a created file whose name matched a secret rule has its path withheld. No
/// allow-list of the repository (`.gitleaksignore`, `.gitleaks.toml`, `.secretsignore`) and no
/// inline allow comment (`gitleaks:allow`, `nosec`, `pragma: allowlist secret`) is honoured.
pub fn scan(candidate: &RepositoryPatchCandidate) -> Result<PolicyReport, PolicyError> {
    let rules = crate::rules::shipped()?;
    let candidate_digest = repository_patch_digest(candidate)?;
    let mut collector = Collector::default();
    let mut added_lines_scanned = 0_u64;
    let files = candidate.changed_files();
    for (index, file) in files.iter().enumerate() {
        // At most 50 files (the candidate type's bound).
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let (found, scanned) = scan_file(rules, index, file);
        added_lines_scanned = added_lines_scanned.saturating_add(scanned);
        collector.absorb(found, file.path().as_str());
    }
    let findings_total = collector.counts.total();
    let truncated = (collector.listed.len() as u64) < findings_total;
    Ok(PolicyReport {
        schema: POLICY_REPORT_SCHEMA.to_owned(),
        candidate_digest,
        rules_version: rules.version.clone(),
        rules_sha256: rules.sha256,
        files_scanned: files.len() as u64,
        added_lines_scanned,
        counts: collector.counts,
        findings_total,
        findings: collector.listed,
        truncated,
        clean: findings_total == 0,
    })
}

/// Checks that `report` is the report this build makes for `candidate`: the same rule file,
/// the candidate's digest, and a rescan equal in every field.
///
/// # Errors
/// `PATCH_CANDIDATE_POLICY_RULES_VERSION` (another rule file), `PATCH_CANDIDATE_POLICY_BINDING`
/// (another candidate, or a rescan that differs), and [`scan`]'s errors.
pub fn verify(
    report: &PolicyReport,
    candidate: &RepositoryPatchCandidate,
) -> Result<(), PolicyError> {
    let rules = crate::rules::shipped()?;
    if report.rules_version != rules.version || report.rules_sha256 != rules.sha256 {
        return Err(PolicyError::RulesVersion);
    }
    let again = scan(candidate)?;
    if again.candidate_digest != report.candidate_digest {
        return Err(PolicyError::Binding {
            detail: "the report is for another candidate",
        });
    }
    if again != *report {
        return Err(PolicyError::Binding {
            detail: "a rescan of the candidate differs from the report",
        });
    }
    Ok(())
}
