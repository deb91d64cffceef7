//! The operator's repository policy (`serve --repository-policy FILE`): per repository (a
//! locator pattern), a ceiling on what an approval may grant, the gates every job of the
//! repository must pass, the agents, models and budgets allowed, the base branches a publication
//! may target and the publication rule; and daily token quotas per principal and per repository.
//!
//! The file is TOML, parsed strictly (unknown keys refused, sizes and counts bounded, every value
//! checked, nothing repaired) and digested canonically like gate definitions. It belongs to the
//! operator: nothing a client, a submitter or an agent sends can widen it. A job records the
//! digest and the policy gates it was admitted under; a host re-admits every job it claims
//! under the policy it holds then (see [`RepositoryPolicy::admit`]).
//!
//! Refusals name the field that failed, never a value from the approval, the file or the request.

use std::collections::BTreeMap;
use std::path::Path;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Deserialize;
use serde_json::json;
use vocab::Sha256;

use crate::ServiceError;
use crate::forge_policy::ForgeConfig;

/// Largest policy file read.
pub const MAX_REPOSITORY_POLICY_BYTES: u64 = 1024 * 1024;
/// Most repository rules one file holds.
pub const MAX_REPOSITORY_RULES: usize = 2000;
/// Digest schema of a loaded policy.
pub const REPOSITORY_POLICY_DIGEST_SCHEMA: &str = "patch_candidate.repository_policy_digest.v1";

/// Most entries of one list (paths, gates, agents, models, branches) and of the named quotas.
const MAX_LIST: usize = 1000;
/// Longest pattern, path, model or branch entry, in bytes.
const MAX_ENTRY_BYTES: usize = 4096;
/// The agents a rule may name: `offline` is a turn without a model.
const AGENTS: [&str; 4] = ["offline", "codex", "claude", "gemini"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    version: u32,
    #[serde(default)]
    unmatched: Option<String>,
    #[serde(default)]
    quotas: Option<QuotasFile>,
    #[serde(default, rename = "repository")]
    repositories: Vec<RuleFile>,
    #[serde(default, rename = "forge")]
    forges: Vec<crate::forge_policy::ForgeFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotasFile {
    principal_daily_tokens: Option<u64>,
    repository_daily_tokens: Option<u64>,
    #[serde(default)]
    principals: BTreeMap<String, u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(rename = "match")]
    pattern: String,
    allowed_paths: Option<Vec<String>>,
    create_paths: Option<Vec<String>>,
    delete_paths: Option<Vec<String>>,
    #[serde(default)]
    required_gates: Vec<String>,
    agents: Option<Vec<String>>,
    models: Option<Vec<String>>,
    max_wall_seconds: Option<u64>,
    max_archive_bytes: Option<u64>,
    max_attempts: Option<u32>,
    base_branches: Option<Vec<String>>,
    daily_tokens: Option<u64>,
    publication: Option<PublicationFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublicationFile {
    remote: Option<String>,
    branch_prefix: Option<String>,
    #[serde(default)]
    forbidden_branches: Vec<String>,
}

/// One repository's rule, checked.
#[derive(Debug, Clone)]
pub struct RepositoryRule {
    /// Its place in the file (0-based): the first rule whose pattern matches applies.
    index: usize,
    pattern: String,
    allowed_paths: Option<Vec<String>>,
    create_paths: Option<Vec<String>>,
    delete_paths: Option<Vec<String>>,
    required_gates: Vec<String>,
    agents: Option<Vec<String>>,
    models: Option<Vec<String>>,
    max_wall_seconds: Option<u64>,
    max_archive_bytes: Option<u64>,
    max_attempts: Option<u32>,
    base_branches: Option<Vec<String>>,
    daily_tokens: Option<u64>,
    remote: Option<String>,
    branch_prefix: Option<String>,
    forbidden_branches: Option<GlobSet>,
}

impl RepositoryRule {
    /// The rule's place in the file (0-based).
    #[must_use]
    pub fn index(&self) -> usize {
        self.index
    }

    /// The gates every job of the repository must pass, in the file's order.
    #[must_use]
    pub fn required_gates(&self) -> &[String] {
        &self.required_gates
    }
}

/// The operator's repository policy, checked and digested.
#[derive(Debug, Clone)]
pub struct RepositoryPolicy {
    digest: Sha256,
    refuse_unmatched: bool,
    principal_daily_tokens: Option<u64>,
    repository_daily_tokens: Option<u64>,
    principals: BTreeMap<String, u64>,
    rules: Vec<RepositoryRule>,
    patterns: GlobSet,
    forges: Vec<ForgeConfig>,
}

/// What a job asks for, in the terms the policy checks: its repository, the approval's grants,
/// its agent and model, and its budgets.
#[derive(Debug, Clone, Copy)]
pub struct JobAsk<'a> {
    /// The repository locator, as stored.
    pub repository: &'a str,
    /// The approval's allowed roots (normalised).
    pub allowed_paths: &'a [String],
    /// The approval's exact create grants.
    pub create_paths: &'a [String],
    /// The approval's exact delete grants.
    pub delete_paths: &'a [String],
    /// `offline`, or the live job's agent.
    pub agent: &'a str,
    /// The live job's model; `None` offline.
    pub model: Option<&'a str>,
    /// The turn's wall-clock budget.
    pub max_wall_seconds: u64,
    /// The turn's archive budget.
    pub max_archive_bytes: u64,
    /// The job's attempts.
    pub max_attempts: u32,
}

/// What a job was admitted under: the policy's digest and the gates it adds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The digest of the policy that admitted the job.
    pub digest: Sha256,
    /// The policy's required gates for the repository (the job's required set is these and the
    /// approval's).
    pub required_gates: Vec<String>,
}

/// What a publication asks for.
#[derive(Debug, Clone, Copy)]
pub struct PublicationAsk<'a> {
    /// The job's repository locator.
    pub repository: &'a str,
    /// This host's publication remote, as configured.
    pub remote: &'a str,
    /// The base branch.
    pub base: &'a str,
    /// The new branch.
    pub branch: &'a str,
}

fn file_error(detail: impl Into<String>) -> ServiceError {
    ServiceError::PolicyFile {
        detail: detail.into(),
    }
}

fn refused(field: &'static str) -> ServiceError {
    ServiceError::PolicyRefused { field }
}

/// A list entry: 1 to 4096 bytes, no control characters.
fn check_entries(rule: usize, field: &str, values: &[String]) -> Result<(), ServiceError> {
    if values.len() > MAX_LIST {
        return Err(file_error(format!(
            "repository rule {rule}: {field} has more than {MAX_LIST} entries"
        )));
    }
    for v in values {
        if v.is_empty() || v.len() > MAX_ENTRY_BYTES || v.chars().any(char::is_control) {
            return Err(file_error(format!(
                "repository rule {rule}: {field} has an empty, oversized or control-character entry"
            )));
        }
    }
    Ok(())
}

/// A path root of a ceiling: relative, `/`-separated, no `.`/`..` segment, no trailing `/`
/// (`.` alone is the whole repository).
fn check_roots(rule: usize, field: &str, roots: &[String]) -> Result<(), ServiceError> {
    check_entries(rule, field, roots)?;
    for root in roots {
        let ok = root == "."
            || (!root.starts_with('/')
                && !root.ends_with('/')
                && root
                    .split('/')
                    .all(|s| !s.is_empty() && s != "." && s != ".."));
        if !ok {
            return Err(file_error(format!(
                "repository rule {rule}: {field} entries must be relative paths without . or .. segments"
            )));
        }
    }
    Ok(())
}

/// A gate name, as the gate definitions spell them: `[a-z0-9][a-z0-9_-]{0,63}`.
fn is_gate_name(s: &str) -> bool {
    s.len() <= 64
        && s.bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// A glob where `*` matches any run of characters, `/` included.
fn glob(rule: usize, field: &str, pattern: &str) -> Result<Glob, ServiceError> {
    GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|_| {
            file_error(format!(
                "repository rule {rule}: {field} is not a valid pattern"
            ))
        })
}

/// `path` equals `root` or lies under it (`.` holds everything).
fn under(path: &str, root: &str) -> bool {
    root == "."
        || path == root
        || path
            .strip_prefix(root)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl RepositoryRule {
    fn from_file(index: usize, f: RuleFile) -> Result<(Self, Glob), ServiceError> {
        let n = index;
        if f.pattern.is_empty() || f.pattern.len() > MAX_ENTRY_BYTES {
            return Err(file_error(format!(
                "repository rule {n}: match must be 1 to {MAX_ENTRY_BYTES} bytes"
            )));
        }
        let pattern = glob(n, "match", &f.pattern)?;
        for (field, roots) in [
            ("allowed_paths", &f.allowed_paths),
            ("create_paths", &f.create_paths),
            ("delete_paths", &f.delete_paths),
        ] {
            if let Some(roots) = roots {
                check_roots(n, field, roots)?;
            }
        }
        check_entries(n, "required_gates", &f.required_gates)?;
        if f.required_gates.iter().any(|g| !is_gate_name(g)) {
            return Err(file_error(format!(
                "repository rule {n}: required_gates entries must be gate names ([a-z0-9][a-z0-9_-]{{0,63}})"
            )));
        }
        let mut required_gates = Vec::with_capacity(f.required_gates.len());
        for g in f.required_gates {
            if !required_gates.contains(&g) {
                required_gates.push(g);
            }
        }
        if let Some(agents) = &f.agents {
            check_entries(n, "agents", agents)?;
            if agents.iter().any(|a| !AGENTS.contains(&a.as_str())) {
                return Err(file_error(format!(
                    "repository rule {n}: agents entries must be offline, codex, claude or gemini"
                )));
            }
        }
        if let Some(models) = &f.models {
            check_entries(n, "models", models)?;
        }
        if let Some(branches) = &f.base_branches {
            check_entries(n, "base_branches", branches)?;
        }
        if f.max_wall_seconds == Some(0) || f.max_archive_bytes == Some(0) {
            return Err(file_error(format!(
                "repository rule {n}: budgets must be at least 1"
            )));
        }
        if f.max_attempts == Some(0) {
            return Err(file_error(format!(
                "repository rule {n}: max_attempts must be at least 1"
            )));
        }
        let (remote, branch_prefix, forbidden_branches) = match f.publication {
            None => (None, None, None),
            Some(p) => {
                for (field, value) in [
                    ("publication.remote", &p.remote),
                    ("publication.branch_prefix", &p.branch_prefix),
                ] {
                    if let Some(v) = value {
                        check_entries(n, field, std::slice::from_ref(v))?;
                    }
                }
                check_entries(n, "publication.forbidden_branches", &p.forbidden_branches)?;
                let mut set = GlobSetBuilder::new();
                for b in &p.forbidden_branches {
                    set.add(glob(n, "publication.forbidden_branches", b)?);
                }
                let set = set.build().map_err(|_| {
                    file_error(format!(
                        "repository rule {n}: publication.forbidden_branches cannot be compiled"
                    ))
                })?;
                (p.remote, p.branch_prefix, Some(set))
            }
        };
        let rule = Self {
            index,
            pattern: f.pattern,
            allowed_paths: f.allowed_paths,
            create_paths: f.create_paths,
            delete_paths: f.delete_paths,
            required_gates,
            agents: f.agents,
            models: f.models,
            max_wall_seconds: f.max_wall_seconds,
            max_archive_bytes: f.max_archive_bytes,
            max_attempts: f.max_attempts,
            base_branches: f.base_branches,
            daily_tokens: f.daily_tokens,
            remote,
            branch_prefix,
            forbidden_branches,
        };
        Ok((rule, pattern))
    }

    /// The canonical form the digest covers (the file's meaning, not its spelling).
    fn canonical(&self, forbidden: &[String]) -> serde_json::Value {
        json!({
            "match": self.pattern,
            "allowed_paths": self.allowed_paths,
            "create_paths": self.create_paths,
            "delete_paths": self.delete_paths,
            "required_gates": self.required_gates,
            "agents": self.agents,
            "models": self.models,
            "max_wall_seconds": self.max_wall_seconds,
            "max_archive_bytes": self.max_archive_bytes,
            "max_attempts": self.max_attempts,
            "base_branches": self.base_branches,
            "daily_tokens": self.daily_tokens,
            "publication": {
                "remote": self.remote,
                "branch_prefix": self.branch_prefix,
                "forbidden_branches": forbidden,
            },
        })
    }

    /// Checks a job against this rule's ceilings, agents, models and budgets.
    fn check(&self, ask: &JobAsk<'_>) -> Result<(), ServiceError> {
        let within = |paths: &[String], ceiling: &Option<Vec<String>>| {
            ceiling
                .as_ref()
                .is_none_or(|roots| paths.iter().all(|p| roots.iter().any(|r| under(p, r))))
        };
        if !within(ask.allowed_paths, &self.allowed_paths) {
            return Err(refused("allowed_paths"));
        }
        if !within(ask.create_paths, &self.create_paths) {
            return Err(refused("create_paths"));
        }
        if !within(ask.delete_paths, &self.delete_paths) {
            return Err(refused("delete_paths"));
        }
        if self
            .agents
            .as_ref()
            .is_some_and(|a| !a.iter().any(|x| x == ask.agent))
        {
            return Err(refused("agent"));
        }
        if let (Some(models), Some(model)) = (&self.models, ask.model)
            && !models.iter().any(|m| m == model)
        {
            return Err(refused("model"));
        }
        if self
            .max_wall_seconds
            .is_some_and(|m| ask.max_wall_seconds > m)
        {
            return Err(refused("max_wall_seconds"));
        }
        if self
            .max_archive_bytes
            .is_some_and(|m| ask.max_archive_bytes > m)
        {
            return Err(refused("max_archive_bytes"));
        }
        if self.max_attempts.is_some_and(|m| ask.max_attempts > m) {
            return Err(refused("max_attempts"));
        }
        Ok(())
    }
}

impl RepositoryPolicy {
    /// Reads and checks the policy file at `path` (at most [`MAX_REPOSITORY_POLICY_BYTES`]) and
    /// the webhook secret file of each of its forges (what `serve` runs under).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_POLICY_FILE` when it or a secret file cannot be read or fails a
    /// check.
    pub fn load(path: &Path) -> Result<Self, ServiceError> {
        let mut policy = Self::load_rules(path)?;
        for forge in &mut policy.forges {
            forge.read_secret()?;
        }
        Ok(policy)
    }

    /// Reads and checks the policy file at `path` like [`RepositoryPolicy::load`], without
    /// reading its forges' webhook secrets: what `jobs submit --repository-policy` admits a job
    /// under (it needs the rules, never a secret; its forges answer no webhook).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_POLICY_FILE` when it cannot be read or fails a check.
    pub fn load_rules(path: &Path) -> Result<Self, ServiceError> {
        use std::io::Read as _;
        let file = std::fs::File::open(path)
            .map_err(|_| file_error("the repository policy file cannot be opened"))?;
        let mut bytes = Vec::new();
        file.take(MAX_REPOSITORY_POLICY_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|_| file_error("the repository policy file cannot be read"))?;
        Self::parse(&bytes)
    }

    /// Parses and checks a policy document.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_POLICY_FILE` naming the first failing check (never quoting the
    /// file).
    pub fn parse(bytes: &[u8]) -> Result<Self, ServiceError> {
        if bytes.len() as u64 > MAX_REPOSITORY_POLICY_BYTES {
            return Err(file_error(
                "the repository policy file is larger than 1 MiB",
            ));
        }
        let text = std::str::from_utf8(bytes)
            .map_err(|_| file_error("the repository policy file is not UTF-8"))?;
        let file: PolicyFile = toml::from_str(text).map_err(|e| {
            // The parser's message may quote the file; only its position is kept.
            let at = e
                .span()
                .map(|s| format!(" at byte {}", s.start))
                .unwrap_or_default();
            file_error(format!(
                "the repository policy file is not valid (strict TOML, known keys only){at}"
            ))
        })?;
        if file.version != 1 {
            return Err(file_error("version must be 1"));
        }
        let refuse_unmatched = match file.unmatched.as_deref() {
            None | Some("refuse") => true,
            Some("allow") => false,
            Some(_) => return Err(file_error("unmatched must be \"refuse\" or \"allow\"")),
        };
        if file.repositories.len() > MAX_REPOSITORY_RULES {
            return Err(file_error(format!(
                "more than {MAX_REPOSITORY_RULES} repository rules"
            )));
        }
        let (principal_daily_tokens, repository_daily_tokens, principals) = match file.quotas {
            None => (None, None, BTreeMap::new()),
            Some(q) => {
                if q.principals.len() > MAX_LIST {
                    return Err(file_error(format!(
                        "quotas.principals has more than {MAX_LIST} entries"
                    )));
                }
                if q.principals
                    .keys()
                    .any(|p| p != jobs::OPERATOR_PRINCIPAL && jobs::TokenName::parse(p).is_err())
                {
                    return Err(file_error(
                        "quotas.principals keys must be principals (1-64 of A-Z a-z 0-9 . _ @ -)",
                    ));
                }
                (
                    q.principal_daily_tokens,
                    q.repository_daily_tokens,
                    q.principals,
                )
            }
        };
        let mut rules = Vec::with_capacity(file.repositories.len());
        let mut patterns = GlobSetBuilder::new();
        let mut canonical_rules = Vec::with_capacity(file.repositories.len());
        for (index, f) in file.repositories.into_iter().enumerate() {
            let mut forbidden = f
                .publication
                .as_ref()
                .map(|p| p.forbidden_branches.clone())
                .unwrap_or_default();
            let (rule, pattern) = RepositoryRule::from_file(index, f)?;
            patterns.add(pattern);
            forbidden.sort();
            canonical_rules.push(rule.canonical(&forbidden));
            rules.push(rule);
        }
        let patterns = patterns
            .build()
            .map_err(|_| file_error("the repository patterns cannot be compiled"))?;
        let forges = ForgeConfig::from_files(file.forges)?;
        let mut canonical = json!({
            "version": 1,
            "unmatched": if refuse_unmatched { "refuse" } else { "allow" },
            "quotas": {
                "principal_daily_tokens": principal_daily_tokens,
                "repository_daily_tokens": repository_daily_tokens,
                "principals": principals,
            },
            "repositories": canonical_rules,
        });
        // A policy without forges keeps the digest it had before forges existed.
        if !forges.is_empty()
            && let Some(map) = canonical.as_object_mut()
        {
            map.insert(
                "forges".to_owned(),
                forges.iter().map(ForgeConfig::canonical).collect(),
            );
        }
        let digest = vocab::domain_digest(REPOSITORY_POLICY_DIGEST_SCHEMA, "policy", &canonical);
        Ok(Self {
            digest,
            refuse_unmatched,
            principal_daily_tokens,
            repository_daily_tokens,
            principals,
            rules,
            patterns,
            forges,
        })
    }

    /// The forge named `name` (its webhook route), if the policy has it.
    #[must_use]
    pub fn forge(&self, name: &str) -> Option<&ForgeConfig> {
        self.forges.iter().find(|f| f.name() == name)
    }

    /// The policy's canonical digest.
    #[must_use]
    pub fn digest(&self) -> &Sha256 {
        &self.digest
    }

    /// How many repository rules the policy holds.
    #[must_use]
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// The first rule whose pattern matches `repository`.
    #[must_use]
    pub fn rule_for(&self, repository: &str) -> Option<&RepositoryRule> {
        self.patterns
            .matches(repository)
            .into_iter()
            .min()
            .and_then(|i| self.rules.get(i))
    }

    /// The rule that governs `repository`: `None` when no rule matches and the policy allows
    /// unmatched repositories.
    fn governing(&self, repository: &str) -> Result<Option<&RepositoryRule>, ServiceError> {
        match self.rule_for(repository) {
            Some(rule) => Ok(Some(rule)),
            None if self.refuse_unmatched => Err(refused("repository")),
            None => Ok(None),
        }
    }

    /// Admits a job: the repository's rule (a repository no rule matches is refused unless the
    /// file says `unmatched = "allow"`), the approval's grants within its ceilings, the agent,
    /// model and budgets among those allowed. Returns the digest and the gates the policy adds.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_POLICY` naming the field outside the policy.
    pub fn admit(&self, ask: &JobAsk<'_>) -> Result<Admission, ServiceError> {
        let rule = self.governing(ask.repository)?;
        if let Some(rule) = rule {
            rule.check(ask)?;
        }
        Ok(Admission {
            digest: self.digest,
            required_gates: rule.map(|r| r.required_gates.clone()).unwrap_or_default(),
        })
    }

    /// Checks a publication: the rule's remote (when it names one) is this host's, the base
    /// branch is one it allows, the new branch starts with its prefix and matches none of its
    /// forbidden names.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_POLICY` naming `repository`, `publication.remote`, `base` or
    /// `branch`.
    pub fn check_publication(&self, ask: &PublicationAsk<'_>) -> Result<(), ServiceError> {
        let Some(rule) = self.governing(ask.repository)? else {
            return Ok(());
        };
        if rule.remote.as_deref().is_some_and(|r| r != ask.remote) {
            return Err(refused("publication.remote"));
        }
        if rule
            .base_branches
            .as_ref()
            .is_some_and(|b| !b.iter().any(|x| x == ask.base))
        {
            return Err(refused("base"));
        }
        if rule
            .branch_prefix
            .as_deref()
            .is_some_and(|p| !ask.branch.starts_with(p))
        {
            return Err(refused("branch"));
        }
        if rule
            .forbidden_branches
            .as_ref()
            .is_some_and(|set| set.is_match(ask.branch))
        {
            return Err(refused("branch"));
        }
        Ok(())
    }

    /// The daily token quota of `principal`: its own entry, else the default; `None`: no quota.
    #[must_use]
    pub fn principal_quota(&self, principal: &str) -> Option<u64> {
        self.principals
            .get(principal)
            .copied()
            .or(self.principal_daily_tokens)
    }

    /// The daily token quota of `repository`: its rule's, else the default; `None`: no quota.
    #[must_use]
    pub fn repository_quota(&self, repository: &str) -> Option<u64> {
        self.rule_for(repository)
            .and_then(|r| r.daily_tokens)
            .or(self.repository_daily_tokens)
    }

    /// Whether any quota is set (a policy without one needs no ledger lookup).
    #[must_use]
    pub fn has_quotas(&self) -> bool {
        self.principal_daily_tokens.is_some()
            || self.repository_daily_tokens.is_some()
            || !self.principals.is_empty()
            || self.rules.iter().any(|r| r.daily_tokens.is_some())
    }
}

#[cfg(test)]
#[path = "repository_policy_tests.rs"]
mod tests;
