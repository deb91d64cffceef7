//! The pinned rule file (`rules/policy.toml`, compiled into the crate) and its compiled form: one
//! Aho-Corasick automaton over every secret keyword and every hidden-text character, size-limited
//! regexes, and the path glob sets. Compiled once per process.

use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;
use snapshot::Sha256;

use crate::error::PolicyError;

/// The rule file's exact bytes, as shipped.
pub(crate) const RULE_FILE: &str = include_str!("../rules/policy.toml");

/// Compiled-program cap of one rule regex (the largest shipped rule needs well under it).
const REGEX_SIZE_LIMIT: usize = 8 * 1024 * 1024;
/// Lazy-DFA cache cap of one rule regex.
const REGEX_DFA_LIMIT: usize = 2 * 1024 * 1024;
/// The rule file's own size cap, checked before parsing.
const MAX_RULE_FILE_BYTES: usize = 256 * 1024;
/// A rule set larger than this is a build defect (keyword masks are `u64` words per line).
pub(crate) const MAX_SECRET_RULES: usize = 128;

/// A hidden-text character class: what the automaton's non-keyword patterns mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C.
    Bidi,
    /// U+200B–U+200D, U+2060, and U+FEFF anywhere but offset 0 of the content.
    ZeroWidth,
    /// U+FEFF (zero-width no-break space / BOM): zero-width unless at offset 0.
    Bom,
    /// U+001B (ESC): a terminal escape sequence.
    Escape,
    /// U+0000: binary content.
    Nul,
}

/// Bidi controls (rule `bidi-control`).
pub(crate) const BIDI: [char; 12] = [
    '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}', '\u{2068}',
    '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
];
/// Zero-width characters (rule `zero-width-character`), U+FEFF handled apart.
pub(crate) const ZERO_WIDTH: [char; 4] = ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}'];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    version: String,
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
    #[serde(rename = "description")]
    _description: String,
    regex: String,
    keywords: Vec<String>,
    #[serde(default)]
    secret_group: usize,
    entropy: Option<f64>,
    #[serde(default)]
    names: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecretPath {
    id: String,
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

/// One compiled secret rule.
#[derive(Debug)]
pub(crate) struct SecretRule {
    pub(crate) id: String,
    pub(crate) regex: Regex,
    pub(crate) group: usize,
    pub(crate) entropy: Option<f64>,
    pub(crate) names: bool,
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

fn build_regex(text: &str) -> Result<Regex, PolicyError> {
    RegexBuilder::new(text)
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
        if rule.secret_group >= regex.captures_len() {
            return Err(rules_error("a rule's secret group does not exist"));
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
        secrets.push(SecretRule {
            id: rule.id,
            regex,
            group: rule.secret_group,
            entropy: rule.entropy,
            names: rule.names,
        });
    }
    let specials = BIDI
        .iter()
        .map(|c| (*c, Special::Bidi))
        .chain(ZERO_WIDTH.iter().map(|c| (*c, Special::ZeroWidth)))
        .chain([
            ('\u{FEFF}', Special::Bom),
            ('\u{1B}', Special::Escape),
            ('\u{0}', Special::Nul),
        ]);
    for (c, special) in specials {
        let mut buf = [0_u8; 4];
        keywords.push(c.encode_utf8(&mut buf).as_bytes().to_vec());
        patterns.push(Pattern::Special(special));
    }
    let automaton = AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::Standard)
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

/// Shannon entropy of `bytes` in bits per byte (gitleaks computes it per character; for the
/// ASCII alphabets every rule's secret group uses, the two agree).
pub(crate) fn shannon_entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let mut counts = [0_u32; 256];
    for &b in bytes {
        if let Some(c) = counts.get_mut(usize::from(b)) {
            *c += 1;
        }
    }
    let len = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / len;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_compiles_with_every_rule() {
        let rules = shipped().unwrap();
        assert!(rules.secrets.len() >= 30, "{}", rules.secrets.len());
        assert_eq!(rules.sha256, Sha256::of(RULE_FILE.as_bytes()));
        assert_eq!(rule_set_info().unwrap().version, rules.version);
    }

    #[test]
    fn entropy_matches_known_values() {
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
