//! The pinned rule file (`rules/policy.toml`, compiled into the crate) and its compiled form: one
//! Aho-Corasick automaton over every secret keyword and every hidden-text character, size-limited
//! regexes, and the path glob sets. Compiled once per process.

use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use vocab::Sha256;

use crate::error::PolicyError;

/// The rule file's exact bytes, as shipped.
pub(crate) const RULE_FILE: &str = include_str!("../rules/policy.toml");

/// Compiled-program cap of one rule regex (the largest shipped rule needs well under it).
const REGEX_SIZE_LIMIT: usize = 8 * 1024 * 1024;
/// Lazy-DFA cache cap of one rule regex.
const REGEX_DFA_LIMIT: usize = 2 * 1024 * 1024;
/// The rule file's own size cap, checked before parsing.
const MAX_RULE_FILE_BYTES: usize = 1024 * 1024;
/// A rule set larger than this is a build defect (keyword masks are `u64` words per line).
pub(crate) const MAX_SECRET_RULES: usize = 320;

/// What the automaton's non-keyword patterns mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// A default-ignorable code point (`hidden.rs` classifies the character at the hit).
    Hidden,
    /// U+001B (ESC): a terminal escape sequence.
    Escape,
    /// U+0000: binary content.
    Nul,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: String,
    allowlist: RawAllowlist,
    secret: Vec<RawSecret>,
    secret_path: Vec<RawSecretPath>,
    executable: RawGlobs,
    binary: RawGlobs,
    ci: RawGlobs,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    id: String,
    #[serde(rename = "origin")]
    _origin: String,
    #[serde(rename = "description")]
    _description: String,
    regex: String,
    keywords: Vec<String>,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    path: Option<String>,
    #[serde(default)]
    names: bool,
    #[serde(default)]
    allowlist: Vec<RawRuleAllowlist>,
}

/// gitleaks' global allow-list: value regexes and stop-words.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllowlist {
    #[serde(rename = "description")]
    _description: String,
    regexes: Vec<String>,
    stopwords: Vec<String>,
}

/// A rule's own allow-list, over its secret or its whole match.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRuleAllowlist {
    target: AllowTarget,
    regexes: Vec<String>,
    stopwords: Vec<String>,
}

/// What an allow-list's regexes run over (gitleaks' `regexTarget`; `line` is not ported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AllowTarget {
    Secret,
    Match,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretPath {
    id: String,
    #[serde(rename = "origin")]
    _origin: String,
    #[serde(rename = "description")]
    _description: String,
    regex: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGlobs {
    #[serde(rename = "description")]
    _description: String,
    globs: Vec<String>,
}

/// One compiled allow-list: a secret (or match) is allowed when one regex matches it or it
/// contains one stop-word (lowercased), as gitleaks decides with its default `OR` condition.
#[derive(Debug)]
pub(crate) struct Allowlist {
    pub(crate) target: AllowTarget,
    /// The regexes joined into one alternation (`None` when there are none).
    pub(crate) regex: Option<Regex>,
    /// Lowercase stop-words (`None` when there are none).
    pub(crate) stopwords: Option<AhoCorasick>,
}

impl Allowlist {
    fn compile(
        target: AllowTarget,
        regexes: &[String],
        stopwords: &[String],
    ) -> Result<Self, PolicyError> {
        let regex = if regexes.is_empty() {
            None
        } else {
            let joined = regexes
                .iter()
                .map(|r| format!("(?:{r})"))
                .collect::<Vec<_>>()
                .join("|");
            Some(build_regex(&joined)?)
        };
        let stopwords = if stopwords.is_empty() {
            None
        } else {
            if stopwords.iter().any(|s| *s != s.to_lowercase()) {
                return Err(rules_error("an allow-list stop-word is not lowercase"));
            }
            Some(
                AhoCorasick::new(stopwords)
                    .map_err(|_| rules_error("an allow-list's stop-words do not build"))?,
            )
        };
        Ok(Self {
            target,
            regex,
            stopwords,
        })
    }

    /// gitleaks' `checkFindingAllowed` for one allow-list: the regexes over the target (never
    /// over an empty one), the stop-words over the lowercased secret.
    pub(crate) fn allows(&self, secret: &[u8], matched: &[u8]) -> bool {
        let target = match self.target {
            AllowTarget::Secret => secret,
            AllowTarget::Match => matched,
        };
        if !target.is_empty() && self.regex.as_ref().is_some_and(|r| r.is_match(target)) {
            return true;
        }
        !secret.is_empty()
            && self
                .stopwords
                .as_ref()
                .is_some_and(|s| s.is_match(&secret.to_ascii_lowercase()))
    }
}

/// Which capture group holds a rule's secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretGroup {
    /// gitleaks' default: the first non-empty capture group, or the whole match without one.
    FirstNonEmpty,
    /// This group (gitleaks' `secretGroup`).
    Index(usize),
}

/// One compiled secret rule.
#[derive(Debug)]
pub(crate) struct SecretRule {
    pub(crate) id: String,
    pub(crate) regex: Regex,
    pub(crate) group: SecretGroup,
    pub(crate) entropy: Option<f64>,
    /// The rule applies only to files whose path matches (gitleaks' `path` on a regex rule).
    pub(crate) path: Option<Regex>,
    pub(crate) names: bool,
    pub(crate) allowlists: Vec<Allowlist>,
}

/// One compiled path rule.
#[derive(Debug)]
pub(crate) struct PathRule {
    pub(crate) id: String,
    pub(crate) regex: Regex,
}

/// What one automaton pattern stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pattern {
    /// A keyword of the secret rule at this index.
    Keyword(usize),
    Special(Special),
}

/// The compiled rule set.
#[derive(Debug)]
pub(crate) struct RuleSet {
    pub(crate) version: String,
    pub(crate) sha256: Sha256,
    /// gitleaks' global value allow-list.
    pub(crate) allowlist: Allowlist,
    pub(crate) secrets: Vec<SecretRule>,
    pub(crate) secret_paths: Vec<PathRule>,
    pub(crate) executable_names: GlobSet,
    pub(crate) binary_names: GlobSet,
    pub(crate) ci: GlobSet,
    pub(crate) automaton: AhoCorasick,
    /// Indexed by automaton pattern id.
    pub(crate) patterns: Vec<Pattern>,
}

fn rules_error(detail: &'static str) -> PolicyError {
    PolicyError::Rules { detail }
}

/// Compiles with RE2's (gitleaks') semantics: `\w`, `\d`, `\s` and `(?i)` are ASCII-only, and
/// the regex runs over bytes.
fn build_regex(text: &str) -> Result<Regex, PolicyError> {
    RegexBuilder::new(text)
        .unicode(false)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_LIMIT)
        .build()
        .map_err(|_| rules_error("a rule regex does not compile within its size limit"))
}

fn build_globs(globs: &[String]) -> Result<GlobSet, PolicyError> {
    let mut set = GlobSetBuilder::new();
    for glob in globs {
        let glob = GlobBuilder::new(glob)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|_| rules_error("a path glob does not compile"))?;
        set.add(glob);
    }
    set.build()
        .map_err(|_| rules_error("a path glob set does not compile"))
}

/// Parses and compiles `text` (the shipped file in production; tests compile variants).
pub(crate) fn compile(text: &str) -> Result<RuleSet, PolicyError> {
    if text.len() > MAX_RULE_FILE_BYTES {
        return Err(rules_error("the rule file exceeds its size cap"));
    }
    let raw: RawFile =
        toml::from_str(text).map_err(|_| rules_error("the rule file does not parse"))?;
    if raw.version.is_empty() || raw.secret.is_empty() || raw.secret.len() > MAX_SECRET_RULES {
        return Err(rules_error(
            "the rule file has no version or a bad rule count",
        ));
    }
    let mut secrets = Vec::with_capacity(raw.secret.len());
    let mut keywords: Vec<Vec<u8>> = Vec::new();
    let mut patterns = Vec::new();
    for (index, rule) in raw.secret.into_iter().enumerate() {
        let regex = build_regex(&rule.regex)?;
        let group = match rule.secret_group {
            None | Some(0) => SecretGroup::FirstNonEmpty,
            Some(n) if n < regex.captures_len() => SecretGroup::Index(n),
            Some(_) => return Err(rules_error("a rule's secret group does not exist")),
        };
        if rule.entropy.is_some_and(|e| !e.is_finite() || e < 0.0) {
            return Err(rules_error("a rule's entropy threshold is not a number"));
        }
        if rule.keywords.is_empty()
            || rule
                .keywords
                .iter()
                .any(|k| k.is_empty() || *k != k.to_ascii_lowercase())
        {
            return Err(rules_error(
                "a rule's keywords are missing or not lowercase",
            ));
        }
        if secrets.iter().any(|s: &SecretRule| s.id == rule.id) {
            return Err(rules_error("two rules share an id"));
        }
        for keyword in rule.keywords {
            keywords.push(keyword.into_bytes());
            patterns.push(Pattern::Keyword(index));
        }
        let allowlists = rule
            .allowlist
            .iter()
            .map(|a| Allowlist::compile(a.target, &a.regexes, &a.stopwords))
            .collect::<Result<Vec<_>, _>>()?;
        secrets.push(SecretRule {
            id: rule.id,
            regex,
            group,
            entropy: rule.entropy,
            path: rule.path.as_deref().map(build_regex).transpose()?,
            names: rule.names,
            allowlists,
        });
    }
    let allowlist = Allowlist::compile(
        AllowTarget::Secret,
        &raw.allowlist.regexes,
        &raw.allowlist.stopwords,
    )?;
    for bytes in crate::hidden::patterns() {
        keywords.push(bytes);
        patterns.push(Pattern::Special(Special::Hidden));
    }
    for (byte, special) in [(0x1B_u8, Special::Escape), (0, Special::Nul)] {
        keywords.push(vec![byte]);
        patterns.push(Pattern::Special(special));
    }
    let automaton = AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::Standard)
        // A full DFA: a few hundred short patterns make a table of a few MiB at most, and the
        // overlapping search (every keyword, even inside another) cannot use the prefilters.
        .kind(Some(AhoCorasickKind::DFA))
        .build(&keywords)
        .map_err(|_| rules_error("the keyword automaton does not build"))?;
    let secret_paths = raw
        .secret_path
        .into_iter()
        .map(|p| {
            Ok(PathRule {
                id: p.id,
                regex: build_regex(&p.regex)?,
            })
        })
        .collect::<Result<Vec<_>, PolicyError>>()?;
    Ok(RuleSet {
        version: raw.version,
        sha256: Sha256::of(text.as_bytes()),
        allowlist,
        secrets,
        secret_paths,
        executable_names: build_globs(&raw.executable.globs)?,
        binary_names: build_globs(&raw.binary.globs)?,
        ci: build_globs(&raw.ci.globs)?,
        automaton,
        patterns,
    })
}

/// The shipped rule set, compiled on first use.
pub(crate) fn shipped() -> Result<&'static RuleSet, PolicyError> {
    static RULES: OnceLock<Result<RuleSet, PolicyError>> = OnceLock::new();
    match RULES.get_or_init(|| compile(RULE_FILE)) {
        Ok(rules) => Ok(rules),
        Err(PolicyError::Rules { detail }) => Err(PolicyError::Rules { detail }),
        Err(_) => Err(rules_error("the rule file does not compile")),
    }
}

/// The identity of the shipped rule file: its `version` and the SHA-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSetInfo {
    pub version: String,
    pub sha256: Sha256,
}

/// The shipped rule file's identity (what every report records).
///
/// # Errors
/// `PATCH_CANDIDATE_POLICY_RULES` if the shipped file does not compile (a build defect).
pub fn rule_set_info() -> Result<RuleSetInfo, PolicyError> {
    let rules = shipped()?;
    Ok(RuleSetInfo {
        version: rules.version.clone(),
        sha256: rules.sha256,
    })
}

/// Shannon entropy of `bytes` as gitleaks computes it: symbol counts per character (per byte
/// where the bytes are not UTF-8), frequencies over the length in bytes.
pub(crate) fn shannon_entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let len = bytes.len() as f64;
    let term = |c: u32| {
        let p = f64::from(c) / len;
        -p * p.log2()
    };
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.is_ascii() => {
            let mut counts: Vec<(char, u32)> = Vec::new();
            for ch in text.chars() {
                match counts.iter_mut().find(|(c, _)| *c == ch) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((ch, 1)),
                }
            }
            counts.iter().map(|(_, n)| term(*n)).sum()
        }
        _ => {
            let mut counts = [0_u32; 256];
            for &b in bytes {
                if let Some(c) = counts.get_mut(usize::from(b)) {
                    *c += 1;
                }
            }
            counts.iter().filter(|&&c| c > 0).map(|&c| term(c)).sum()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_compiles_with_every_rule() {
        let rules = shipped().unwrap();
        // gitleaks' 221 regex rules and 3 local ones; gitleaks' path rule and 2 local ones.
        assert_eq!(rules.secrets.len(), 224);
        assert_eq!(rules.secret_paths.len(), 3);
        assert!(rules.secrets.iter().all(|r| r.regex.captures_len() >= 1));
        assert!(RULE_FILE.contains("b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b"));
        assert_eq!(rules.sha256, Sha256::of(RULE_FILE.as_bytes()));
        assert_eq!(rule_set_info().unwrap().version, rules.version);
    }

    /// gitleaks' global value allow-list and a rule's own allow-lists, as compiled.
    #[test]
    fn allow_lists_decide_on_the_secret_or_the_match() {
        let rules = shipped().unwrap();
        for allowed in [
            &b"${API_TOKEN}"[..],
            b"$TOKEN",
            b"{{ token }}",
            b"xxxxxxxxxxxx",
            b"true",
        ] {
            assert!(rules.allowlist.allows(allowed, allowed), "{allowed:?}");
        }
        assert!(!rules.allowlist.allows(b"Zf3D0LXCM3EIMbgJpUNnkRtO", b"x"));
        let aws = rules
            .secrets
            .iter()
            .find(|r| r.id == "aws-access-token")
            .unwrap();
        assert!(
            aws.allowlists
                .iter()
                .any(|a| a.allows(b"AKIAIOSFODNN7EXAMPLE", b""))
        );
        let generic = rules
            .secrets
            .iter()
            .find(|r| r.id == "generic-api-key")
            .unwrap();
        // A stop-word inside the secret, and a match-target regex (`public_key`).
        assert!(
            generic
                .allowlists
                .iter()
                .any(|a| a.allows(b"my-example-value-1", b"k=v"))
        );
        assert!(generic.allowlists.iter().any(|a| a.allows(
            b"Zf3D0LXCM3EIMbgJpUNnkRtO",
            b"public_key = Zf3D0LXCM3EIMbgJpUNnkRtO"
        )));
        assert!(!generic.allowlists.iter().any(|a| a.allows(
            b"Zf3D0LXCM3EIMbgJpUNnkRtO",
            b"api_key = Zf3D0LXCM3EIMbgJpUNnkRtO"
        )));
    }

    #[test]
    fn entropy_matches_known_values() {
        // gitleaks counts characters but divides by bytes: 2 × (2/6 · log2(6/2)) for "ééaa".
        let expected = 2.0 * (2.0 / 6.0) * 3.0_f64.log2();
        assert!((shannon_entropy("ééaa".as_bytes()) - expected).abs() < 1e-9);
        assert!((shannon_entropy(b"aaaa") - 0.0).abs() < 1e-9);
        assert!((shannon_entropy(b"abab") - 1.0).abs() < 1e-9);
        assert!((shannon_entropy(b"abcdefgh") - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_broken_rule_file_is_refused_with_the_rules_code() {
        let broken = RULE_FILE.replacen("version = ", "versio = ", 1);
        assert_eq!(
            compile(&broken).unwrap_err().code(),
            "PATCH_CANDIDATE_POLICY_RULES"
        );
        let bad_regex = RULE_FILE.replacen(r"ghp_[0-9a-zA-Z]{36}", r"ghp_[0-9a-zA-Z{36}", 1);
        assert_eq!(
            compile(&bad_regex).unwrap_err().code(),
            "PATCH_CANDIDATE_POLICY_RULES"
        );
    }
}
