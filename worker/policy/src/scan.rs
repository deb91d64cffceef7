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
use crate::hidden::{Hidden, char_at, char_before, class, selector_is_presentation};
use crate::report::{
    Finding, FindingKind, KindCounts, MAX_FINDINGS, MAX_FINDINGS_PER_FILE, POLICY_REPORT_SCHEMA,
    PolicyReport,
};
use crate::rules::{
    MAX_SECRET_RULES, Pattern, RuleSet, SecretGroup, SecretRule, Special, shannon_entropy,
};

/// Rule ids of the built-in (code, not rule-file) checks (hidden text: `Hidden::rule`).
const ESCAPE_RULE: &str = "terminal-escape";
const NUL_RULE: &str = "nul-byte";
const SHEBANG_RULE: &str = "script-shebang";
const ELF_RULE: &str = "elf-binary";
const EXECUTABLE_NAME_RULE: &str = "executable-name";
const BINARY_NAME_RULE: &str = "binary-name";
const CI_RULE: &str = "ci-config";

/// Keyword hits of one line: a bit per secret rule, a bit per hidden-text class, a flag per
/// other special.
#[derive(Debug, Default)]
struct LineHits {
    rules: [u64; MAX_SECRET_RULES.div_ceil(64)],
    hidden: u8,
    escape: bool,
    nul: bool,
}

impl LineHits {
    fn any(&self) -> bool {
        self.rules.iter().any(|w| *w != 0) || self.hidden != 0 || self.escape || self.nul
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

/// The hidden-text classes of `text` (a name), as bits of `Hidden::bit`.
fn hidden_in(text: &str) -> u8 {
    let mut bits = 0;
    let mut prev = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if let Some(h) = class(c)
            && !selector_is_presentation(prev, c, chars.peek().copied())
        {
            bits |= h.bit();
        }
        prev = Some(c);
    }
    bits
}

fn push_hidden(bits: u8, line: Option<u64>, out: &mut FileFindings) {
    for h in Hidden::ALL {
        if bits & h.bit() != 0 {
            out.push(FindingKind::HiddenText, h.rule(), line);
        }
    }
}

/// The name rules of a created file.
fn scan_name(rules: &RuleSet, path: &str, out: &mut FileFindings) {
    // A token followed by an extension or a directory separator still ends: the secret rules
    // read a name with its `/` and `.` as spaces (no name-matched token contains either).
    let spaced: Vec<u8> = path
        .bytes()
        .map(|b| if b == b'/' || b == b'.' { b' ' } else { b })
        .collect();
    let mut hits = LineHits::default();
    for m in rules.automaton.find_overlapping_iter(&spaced) {
        if let Some(Pattern::Keyword(index)) = rules.patterns.get(m.pattern().as_usize()) {
            hits.set_rule(*index);
        }
    }
    for (index, rule) in rules.secrets.iter().enumerate() {
        if rule.names && hits.has_rule(index) && secret_matches(rules, rule, &spaced) {
            out.push(FindingKind::Secret, &rule.id, None);
            out.withhold_path = true;
        }
    }
    for rule in &rules.secret_paths {
        if rule.regex.is_match(path.as_bytes()) {
            out.push(FindingKind::Secret, &rule.id, None);
        }
    }
    push_hidden(hidden_in(path), None, out);
    if rules.executable_names.is_match(path) {
        out.push(FindingKind::Executable, EXECUTABLE_NAME_RULE, None);
    }
    if rules.binary_names.is_match(path) {
        out.push(FindingKind::Binary, BINARY_NAME_RULE, None);
    }
}

/// True when `rule` reports a secret in `text` the way gitleaks decides it: some match of the
/// regex whose secret (its `secret_group`, or the first non-empty capture group, found by
/// rerunning the regex over the match alone) has an entropy above the rule's threshold and is
/// allowed neither by gitleaks' global value allow-list nor by one of the rule's own.
fn secret_matches(rules: &RuleSet, rule: &SecretRule, text: &[u8]) -> bool {
    rule.regex
        .find_iter(text)
        .any(|m| finding_survives(rules, rule, m.as_bytes()))
}

fn finding_survives(rules: &RuleSet, rule: &SecretRule, matched: &[u8]) -> bool {
    let secret = secret_of(rule, matched);
    if let Some(threshold) = rule.entropy
        && threshold != 0.0
        && shannon_entropy(secret) <= threshold
    {
        return false;
    }
    !rules.allowlist.allows(secret, matched)
        && !rule.allowlists.iter().any(|a| a.allows(secret, matched))
}

fn secret_of<'a>(rule: &SecretRule, matched: &'a [u8]) -> &'a [u8] {
    if rule.regex.captures_len() < 2 {
        return matched;
    }
    let Some(caps) = rule.regex.captures(matched) else {
        return matched;
    };
    match rule.group {
        SecretGroup::Index(n) => caps.get(n).map_or(&[][..], |g| g.as_bytes()),
        SecretGroup::FirstNonEmpty => caps
            .iter()
            .skip(1)
            .flatten()
            .map(|g| g.as_bytes())
            .find(|g| !g.is_empty())
            .unwrap_or(matched),
    }
}

/// The checks of one added line that holds at least one keyword or special character.
fn check_line(
    rules: &RuleSet,
    (text, path): (&[u8], &str),
    number: u64,
    hits: &LineHits,
    out: &mut FileFindings,
) {
    for (index, rule) in rules.secrets.iter().enumerate() {
        if hits.has_rule(index)
            && rule
                .path
                .as_ref()
                .is_none_or(|p| p.is_match(path.as_bytes()))
            && secret_matches(rules, rule, text)
        {
            out.push(FindingKind::Secret, &rule.id, Some(number));
        }
    }
    push_hidden(hits.hidden, Some(number), out);
    if hits.escape {
        out.push(FindingKind::HiddenText, ESCAPE_RULE, Some(number));
    }
    if hits.nul {
        out.push(FindingKind::Binary, NUL_RULE, Some(number));
    }
}

/// The first-line checks of an added line 1 (a new script, an ELF image).
fn check_first_line(content: &str, out: &mut FileFindings) {
    if content.starts_with("#!") {
        out.push(FindingKind::Executable, SHEBANG_RULE, Some(1));
    }
    if content.starts_with("\u{7f}ELF") {
        out.push(FindingKind::Executable, ELF_RULE, Some(1));
    }
}

/// Walks the automaton's hits over `bytes[seg_start..seg_end]`, a run of whole added lines
/// whose first line has the 0-based index `first_line`, and checks every line with a hit.
fn scan_segment(
    rules: &RuleSet,
    (bytes, path): (&[u8], &str),
    (first_line, seg_start, seg_end): (usize, usize, usize),
    out: &mut FileFindings,
) {
    let Some(segment) = bytes.get(seg_start..seg_end) else {
        return;
    };
    let line_end = |pos: usize| {
        bytes
            .get(pos..seg_end)
            .and_then(|rest| memchr(b'\n', rest))
            .map_or(seg_end, |p| pos + p)
    };
    // The current line: 0-based index and byte range (its `\n` excluded).
    let mut line = first_line;
    let mut start = seg_start;
    let mut end = line_end(seg_start);
    let mut hits = LineHits::default();
    let flush = |line: usize, start: usize, end: usize, hits: &LineHits, out: &mut FileFindings| {
        if hits.any()
            && let Some(text) = bytes.get(start..end)
        {
            check_line(rules, (text, path), line as u64 + 1, hits, out);
        }
    };
    for m in rules.automaton.find_overlapping_iter(segment) {
        let pos = seg_start + m.start();
        if pos > end {
            flush(line, start, end, &hits, out);
            hits = LineHits::default();
            let skipped = bytes.get(end..pos).unwrap_or_default();
            line += memchr::memchr_iter(b'\n', skipped).count();
            start = memrchr(b'\n', bytes.get(seg_start..pos).unwrap_or_default())
                .map_or(seg_start, |p| seg_start + p + 1);
            end = line_end(pos);
        }
        match rules.patterns.get(m.pattern().as_usize()) {
            Some(Pattern::Keyword(index)) => hits.set_rule(*index),
            Some(Pattern::Special(Special::Hidden)) => hits.hidden |= hidden_at(bytes, pos),
            Some(Pattern::Special(Special::Escape)) => hits.escape = true,
            Some(Pattern::Special(Special::Nul)) => hits.nul = true,
            None => {}
        }
    }
    flush(line, start, end, &hits, out);
}

/// The hidden-text class bit of the character at `pos` (an automaton hit), 0 when it is a
/// byte order mark at offset 0 or an emoji's presentation selector.
fn hidden_at(bytes: &[u8], pos: usize) -> u8 {
    let Some(c) = char_at(bytes, pos) else {
        return 0;
    };
    if c == '\u{FEFF}' && pos == 0 {
        return 0;
    }
    let next = char_at(bytes, pos + c.len_utf8());
    match class(c) {
        Some(_) if selector_is_presentation(char_before(bytes, pos), c, next) => 0,
        Some(h) => h.bit(),
        None => 0,
    }
}

/// Lines of `text` in Git's model (a final fragment without `\n` is a line).
fn line_count(text: &str) -> usize {
    let newlines = memchr::memchr_iter(b'\n', text.as_bytes()).count();
    newlines + usize::from(!text.is_empty() && !text.ends_with('\n'))
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
        let bytes = content.as_bytes();
        match file.op() {
            FileOp::Update => {
                let lines = Lines::of(content);
                match added_by_diff(file.diff(), content, &lines) {
                    Added::All => {
                        scanned = lines.count() as u64;
                        check_first_line(content, &mut out);
                        scan_segment(rules, (bytes, path), (0, 0, bytes.len()), &mut out);
                    }
                    Added::Some(set) => {
                        if set.first() == Some(&true) {
                            check_first_line(content, &mut out);
                        }
                        for run in lines.runs(&set) {
                            scanned += run.lines as u64;
                            scan_segment(
                                rules,
                                (bytes, path),
                                (run.first, run.start, run.end),
                                &mut out,
                            );
                        }
                    }
                }
            }
            FileOp::Create | FileOp::Delete => {
                scanned = line_count(content) as u64;
                check_first_line(content, &mut out);
                scan_segment(rules, (bytes, path), (0, 0, bytes.len()), &mut out);
            }
        }
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
/// inline allow comment (`gitleaks:allow`, `nosec`, `pragma: allowlist secret`) is honoured; the
/// only allow-lists are gitleaks' value allow-lists pinned in the rule file (on a match's secret
/// or the match itself, never on its path or the rest of its line).
pub fn scan(candidate: &RepositoryPatchCandidate) -> Result<PolicyReport, PolicyError> {
    let candidate_digest = repository_patch_digest(candidate)?;
    scan_with_digest(candidate, candidate_digest)
}

/// [`scan`] for a caller that already holds the candidate's digest (a digest-verifying read
/// such as `CandidateStore::get` returned both), so the candidate is not hashed twice.
///
/// # Errors
/// `PATCH_CANDIDATE_POLICY_RULES` if the shipped rule file does not compile (a build defect).
///
/// # Security
/// `candidate_digest` must be `repository_patch_digest(candidate)`: the report is bound to
/// whatever is passed. [`verify`] always recomputes it, so a report bound to a wrong digest never
/// verifies. Everything else is as for [`scan`].
pub fn scan_with_digest(
    candidate: &RepositoryPatchCandidate,
    candidate_digest: vocab::Sha256,
) -> Result<PolicyReport, PolicyError> {
    Ok(scan_with_rules(
        crate::rules::shipped()?,
        candidate,
        candidate_digest,
    ))
}

/// The scan itself, with a compiled rule set.
pub(crate) fn scan_with_rules(
    rules: &RuleSet,
    candidate: &RepositoryPatchCandidate,
    candidate_digest: vocab::Sha256,
) -> PolicyReport {
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
    PolicyReport {
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
    }
}

/// The line that stands in for a withheld line of [`withhold_flagged_lines`].
pub const WITHHELD_LINE: &str = "[line withheld by the content policy]";
/// What stands in for the whole text when its findings are too many to place line by line.
pub const WITHHELD_TEXT: &str = "[output withheld by the content policy]";
/// The file name the secret rules see for a text checked by [`withhold_flagged_lines`] (rules
/// bound to other paths do not apply to it).
const OUTPUT_PATH: &str = "gate-output.log";

/// A text after [`withhold_flagged_lines`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedText {
    /// The text, each flagged line replaced by [`WITHHELD_LINE`] (or the whole of it by
    /// [`WITHHELD_TEXT`]).
    pub text: String,
    /// How many lines were withheld (every line when the whole text was).
    pub withheld_lines: usize,
}

/// The content policy over an untrusted text that is about to be shown to an agent (a gate's
/// output tail in a follow-up turn's prompt): every line in which a secret rule fires by value,
/// or that holds hidden text, a terminal escape or a NUL, is replaced by [`WITHHELD_LINE`]. When
/// a line's findings could not all be placed (more than the per-file finding cap), the whole text
/// is withheld instead. Lines are split at `\n`.
///
/// # Errors
/// `PATCH_CANDIDATE_POLICY_RULES` if the shipped rule file does not compile (a build defect).
///
/// # Security
/// The result never holds a line the policy flags; the flagged values are not kept anywhere.
pub fn withhold_flagged_lines(text: &str) -> Result<CheckedText, PolicyError> {
    let rules = crate::rules::shipped()?;
    let bytes = text.as_bytes();
    let mut out = FileFindings::new(0);
    scan_segment(rules, (bytes, OUTPUT_PATH), (0, 0, bytes.len()), &mut out);
    let line_count = text.split('\n').count();
    if out.found.len() < out.total.len() {
        return Ok(CheckedText {
            text: WITHHELD_TEXT.to_owned(),
            withheld_lines: line_count,
        });
    }
    let flagged: std::collections::BTreeSet<u64> =
        out.found.iter().filter_map(|(_, _, line)| *line).collect();
    let kept: Vec<&str> = text
        .split('\n')
        .zip(1_u64..)
        .map(|(line, number)| {
            if flagged.contains(&number) {
                WITHHELD_LINE
            } else {
                line
            }
        })
        .collect();
    Ok(CheckedText {
        text: kept.join("\n"),
        withheld_lines: flagged.len(),
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
