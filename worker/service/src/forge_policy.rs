//! The forges of the repository policy (`[[forge]]`): per forge, its webhook secret file, the
//! label and the command word that start a job, the forge users mapped to principals, and per
//! forge project the template a triggered job is built from (repository locator, base branch,
//! scopes, gates). Everything here is the operator's: nothing in an issue or a comment can name
//! a repository, a path, a gate or a principal.
//!
//! ```toml
//! [[forge]]
//! name = "github"                 # the webhook route: POST /v1/forge/github
//! kind = "github"                 # github | gitea (also Forgejo) | gitlab
//! secret_file = "/etc/patch-candidate/github-webhook.secret"
//! label = "agent"                 # an issue that gets this label starts a job
//! command = "/agent"              # so does an issue comment starting with this word
//! users = { octocat = "alice" }   # forge login -> principal (a named token with `submit`)
//!
//! # Results back on the forge (all optional; off without `api_base` and `token_file`):
//! api_base = "https://api.github.com"   # the forge's REST API
//! token_file = "/etc/patch-candidate/github.token"   # comments, statuses, pull requests
//! review_url = "https://review.example"  # this service's public address, for review links
//! branch_prefix = "agent/"        # published branches: {prefix}{forge}-{issue}-{job}
//! auto_accept = false             # accept a candidate whose required gates all passed
//!
//! [[forge.project]]
//! path = "acme/app"               # the forge's project path
//! repository = "https://git.example/acme/app.git"
//! base = "main"
//! allowed_paths = ["src/", "tests/"]
//! read_only_paths = ["tests/"]
//! required_gates = ["pytest"]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use forge::{ForgeKind, ForgeUser, ProjectPath, WebhookSecret};
use serde::Deserialize;
use serde_json::json;

use crate::ServiceError;

/// Most forges one policy names, and most users and projects per forge.
const MAX_FORGES: usize = 16;
const MAX_ENTRIES: usize = 1000;
/// Longest label or command word, in bytes.
const MAX_WORD_BYTES: usize = 64;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForgeFile {
    name: String,
    kind: ForgeKind,
    secret_file: PathBuf,
    label: Option<String>,
    command: Option<String>,
    #[serde(default)]
    users: BTreeMap<String, String>,
    #[serde(default, rename = "project")]
    projects: Vec<ProjectFile>,
    api_base: Option<String>,
    token_file: Option<PathBuf>,
    review_url: Option<String>,
    branch_prefix: Option<String>,
    #[serde(default)]
    auto_accept: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    path: String,
    repository: String,
    base: String,
    allowed_paths: Vec<String>,
    #[serde(default)]
    read_only_paths: Vec<String>,
    #[serde(default)]
    prohibited_paths: Vec<String>,
    #[serde(default)]
    create_paths: Vec<String>,
    #[serde(default)]
    delete_paths: Vec<String>,
    #[serde(default)]
    required_gates: Vec<String>,
    max_wall_seconds: Option<u64>,
    max_attempts: Option<u32>,
}

/// What a job started from a forge project is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectTemplate {
    pub repository: String,
    pub base: String,
    pub allowed_paths: Vec<String>,
    pub read_only_paths: Vec<String>,
    pub prohibited_paths: Vec<String>,
    pub create_paths: Vec<String>,
    pub delete_paths: Vec<String>,
    pub required_gates: Vec<String>,
    pub max_wall_seconds: Option<u64>,
    pub max_attempts: Option<u32>,
}

/// One forge of the policy, checked.
#[derive(Debug, Clone)]
pub struct ForgeConfig {
    name: String,
    kind: ForgeKind,
    secret_file: PathBuf,
    /// Read by [`ForgeConfig::read_secret`] (at `serve` start and on every reload).
    secret: Option<std::sync::Arc<WebhookSecret>>,
    label: Option<String>,
    command: Option<String>,
    users: BTreeMap<String, String>,
    projects: BTreeMap<String, ProjectTemplate>,
    reporting: Option<Reporting>,
}

/// How results go back to a forge: its API and token, this service's public review address,
/// the prefix of published branches, and whether a candidate whose required gates all passed
/// is accepted without a reviewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporting {
    pub api_base: String,
    pub token_file: PathBuf,
    pub review_url: Option<String>,
    pub branch_prefix: String,
    pub auto_accept: bool,
}

/// The default prefix of published branches.
const DEFAULT_BRANCH_PREFIX: &str = "agent/";

fn bad(detail: impl Into<String>) -> ServiceError {
    ServiceError::PolicyFile {
        detail: detail.into(),
    }
}

/// A forge name: 1..=32 of `[a-z0-9-]` (it is a URL path segment).
fn forge_name_ok(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A label or command word: printable, no whitespace at either end, bounded.
fn word_ok(word: &str) -> bool {
    !word.is_empty()
        && word.len() <= MAX_WORD_BYTES
        && word.trim() == word
        && word.chars().all(vocab::is_printable)
}

fn list_ok(list: &[String]) -> bool {
    list.len() <= MAX_ENTRIES && list.iter().all(|p| !p.is_empty() && p.len() <= 4096)
}

impl ForgeConfig {
    /// Checks one `[[forge]]` entry.
    pub(crate) fn from_file(f: ForgeFile) -> Result<Self, ServiceError> {
        if !forge_name_ok(&f.name) {
            return Err(bad("forge.name must be 1-32 of a-z 0-9 -"));
        }
        if !f.secret_file.is_absolute() {
            return Err(bad("forge.secret_file must be an absolute path"));
        }
        if f.label.is_none() && f.command.is_none() {
            return Err(bad("a forge needs a label, a command word or both"));
        }
        if !f.label.as_deref().is_none_or(word_ok) || !f.command.as_deref().is_none_or(word_ok) {
            return Err(bad(
                "forge.label and forge.command must be 1-64 printable bytes without surrounding spaces",
            ));
        }
        if f.users.len() > MAX_ENTRIES || f.projects.len() > MAX_ENTRIES {
            return Err(bad("a forge names at most 1000 users and 1000 projects"));
        }
        for (login, principal) in &f.users {
            if ForgeUser::parse(f.kind, login).is_err() {
                return Err(bad("forge.users keys must be forge logins"));
            }
            if jobs::TokenName::parse(principal).is_err() {
                return Err(bad(
                    "forge.users values must be token names (1-64 of A-Z a-z 0-9 . _ @ -)",
                ));
            }
        }
        let mut projects = BTreeMap::new();
        for p in f.projects {
            let path = ProjectPath::parse(f.kind, &p.path)
                .map_err(|_| bad("forge.project.path must be the forge's project path"))?;
            crate::Locator::parse(&p.repository)
                .map_err(|_| bad("forge.project.repository must be a repository locator"))?;
            if publish::BranchName::parse(&p.base).is_err() {
                return Err(bad("forge.project.base must be a branch name"));
            }
            let lists = [
                &p.allowed_paths,
                &p.read_only_paths,
                &p.prohibited_paths,
                &p.create_paths,
                &p.delete_paths,
                &p.required_gates,
            ];
            if p.allowed_paths.is_empty() || !lists.iter().all(|l| list_ok(l)) {
                return Err(bad(
                    "forge.project needs allowed_paths; lists hold at most 1000 non-empty entries",
                ));
            }
            if p.max_attempts.is_some_and(|m| !(1..=20).contains(&m)) {
                return Err(bad("forge.project.max_attempts must be 1..=20"));
            }
            let template = ProjectTemplate {
                repository: p.repository,
                base: p.base,
                allowed_paths: p.allowed_paths,
                read_only_paths: p.read_only_paths,
                prohibited_paths: p.prohibited_paths,
                create_paths: p.create_paths,
                delete_paths: p.delete_paths,
                required_gates: p.required_gates,
                max_wall_seconds: p.max_wall_seconds,
                max_attempts: p.max_attempts,
            };
            if projects
                .insert(path.as_str().to_owned(), template)
                .is_some()
            {
                return Err(bad("a forge names each project path once"));
            }
        }
        let reporting = match (f.api_base, f.token_file) {
            (None, None) => {
                if f.review_url.is_some() || f.branch_prefix.is_some() || f.auto_accept {
                    return Err(bad(
                        "forge.review_url, branch_prefix and auto_accept need api_base and token_file",
                    ));
                }
                None
            }
            (Some(api_base), Some(token_file)) => {
                publish::ForgeEndpoint::new(f.kind, &api_base, "owner", "repo").map_err(|_| {
                    bad("forge.api_base must be an https URL (http for a loopback forge) without user info, query or fragment")
                })?;
                if !token_file.is_absolute() {
                    return Err(bad("forge.token_file must be an absolute path"));
                }
                if let Some(url) = &f.review_url {
                    let ok = (url.starts_with("https://") || url.starts_with("http://"))
                        && url.len() <= 512
                        && !url.chars().any(|c| c.is_control() || c.is_whitespace());
                    if !ok {
                        return Err(bad("forge.review_url must be an http(s) URL"));
                    }
                }
                let branch_prefix = f
                    .branch_prefix
                    .unwrap_or_else(|| DEFAULT_BRANCH_PREFIX.to_owned());
                if branch_prefix.len() > 64
                    || publish::BranchName::parse(&format!("{branch_prefix}x")).is_err()
                {
                    return Err(bad(
                        "forge.branch_prefix must start a branch name (at most 64 bytes)",
                    ));
                }
                Some(Reporting {
                    api_base,
                    token_file,
                    review_url: f.review_url.map(|u| u.trim_end_matches('/').to_owned()),
                    branch_prefix,
                    auto_accept: f.auto_accept,
                })
            }
            _ => return Err(bad("forge.api_base and forge.token_file go together")),
        };
        Ok(Self {
            name: f.name,
            kind: f.kind,
            secret_file: f.secret_file,
            secret: None,
            label: f.label,
            command: f.command,
            users: f.users,
            projects,
            reporting,
        })
    }

    /// Checks the whole list: bounded, names unique.
    pub(crate) fn from_files(files: Vec<ForgeFile>) -> Result<Vec<Self>, ServiceError> {
        if files.len() > MAX_FORGES {
            return Err(bad("at most 16 forges"));
        }
        let forges = files
            .into_iter()
            .map(Self::from_file)
            .collect::<Result<Vec<_>, _>>()?;
        let mut names: Vec<&str> = forges.iter().map(|f| f.name.as_str()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w.first() == w.get(1)) {
            return Err(bad("forge names must be unique"));
        }
        Ok(forges)
    }

    /// Reads the webhook secret from its file (the rules of `forge::read_secret_file`).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_POLICY_FILE` naming the forge's field, never the secret.
    pub(crate) fn read_secret(&mut self) -> Result<(), ServiceError> {
        let secret = WebhookSecret::from_file(&self.secret_file).map_err(|_| {
            bad("forge.secret_file cannot be read as a secret file (0600, owned, regular)")
        })?;
        self.secret = Some(std::sync::Arc::new(secret));
        Ok(())
    }

    /// The canonical form in the policy digest (the secret's file, never the secret).
    pub(crate) fn canonical(&self) -> serde_json::Value {
        let projects: BTreeMap<&str, serde_json::Value> = self
            .projects
            .iter()
            .map(|(path, t)| {
                (
                    path.as_str(),
                    json!({
                        "repository": t.repository,
                        "base": t.base,
                        "allowed_paths": t.allowed_paths,
                        "read_only_paths": t.read_only_paths,
                        "prohibited_paths": t.prohibited_paths,
                        "create_paths": t.create_paths,
                        "delete_paths": t.delete_paths,
                        "required_gates": t.required_gates,
                        "max_wall_seconds": t.max_wall_seconds,
                        "max_attempts": t.max_attempts,
                    }),
                )
            })
            .collect();
        let mut canonical = json!({
            "name": self.name,
            "kind": self.kind.as_str(),
            "secret_file": self.secret_file.to_string_lossy(),
            "label": self.label,
            "command": self.command,
            "users": self.users,
            "projects": projects,
        });
        // Only when present, so the digest of a policy without reporting is unchanged.
        if let (Some(r), Some(map)) = (&self.reporting, canonical.as_object_mut()) {
            map.insert(
                "reporting".to_owned(),
                json!({
                    "api_base": r.api_base,
                    "token_file": r.token_file.to_string_lossy(),
                    "review_url": r.review_url,
                    "branch_prefix": r.branch_prefix,
                    "auto_accept": r.auto_accept,
                }),
            );
        }
        canonical
    }

    /// How results go back to this forge, if they do.
    #[must_use]
    pub fn reporting(&self) -> Option<&Reporting> {
        self.reporting.as_ref()
    }

    /// The forge's name (its webhook route).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The forge's API kind.
    #[must_use]
    pub fn kind(&self) -> ForgeKind {
        self.kind
    }

    /// The webhook secret, once read.
    #[must_use]
    pub fn secret(&self) -> Option<&WebhookSecret> {
        self.secret.as_deref()
    }

    /// The label that starts a job.
    #[must_use]
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The command word that starts a job from an issue comment.
    #[must_use]
    pub fn command(&self) -> Option<&str> {
        self.command.as_deref()
    }

    /// The principal a forge login maps to.
    #[must_use]
    pub fn principal_of(&self, login: &ForgeUser) -> Option<&str> {
        self.users.get(login.as_str()).map(String::as_str)
    }

    /// The template of a forge project.
    #[must_use]
    pub fn project(&self, path: &str) -> Option<&ProjectTemplate> {
        self.projects.get(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<ForgeConfig>, ServiceError> {
        #[derive(Deserialize)]
        struct File {
            forge: Vec<ForgeFile>,
        }
        let file: File = toml::from_str(text).map_err(|_| bad("toml"))?;
        ForgeConfig::from_files(file.forge)
    }

    const GOOD: &str = r#"
[[forge]]
name = "github"
kind = "github"
secret_file = "/etc/pc/github.secret"
label = "agent"
command = "/agent"
users = { octocat = "alice" }
api_base = "https://api.github.com"
token_file = "/etc/pc/github.token"
auto_accept = true

[[forge.project]]
path = "acme/app"
repository = "https://git.example/acme/app.git"
base = "main"
allowed_paths = ["src/", "tests/"]
read_only_paths = ["tests/"]
required_gates = ["pytest"]

[[forge]]
name = "lab"
kind = "gitlab"
secret_file = "/etc/pc/lab.secret"
command = "@agent"

[[forge.project]]
path = "group/sub/app"
repository = "/srv/git/app.git"
base = "release/1"
allowed_paths = ["lib/"]
"#;

    #[test]
    fn forges_map_users_and_projects() {
        let forges = parse(GOOD).unwrap();
        assert_eq!(forges.len(), 2);
        let gh = &forges[0];
        assert_eq!((gh.name(), gh.kind()), ("github", ForgeKind::GitHub));
        assert_eq!((gh.label(), gh.command()), (Some("agent"), Some("/agent")));
        let octocat = ForgeUser::parse(ForgeKind::GitHub, "octocat").unwrap();
        let other = ForgeUser::parse(ForgeKind::GitHub, "mallory").unwrap();
        assert_eq!(gh.principal_of(&octocat), Some("alice"));
        assert_eq!(gh.principal_of(&other), None);
        let t = gh.project("acme/app").unwrap();
        assert_eq!(t.base, "main");
        assert_eq!(t.required_gates, ["pytest"]);
        assert!(gh.project("acme/other").is_none());
        assert!(gh.secret().is_none());
        assert_eq!(
            forges[1].project("group/sub/app").unwrap().base,
            "release/1"
        );
        assert_eq!(gh.canonical()["projects"]["acme/app"]["base"], "main");
        let r = gh.reporting().unwrap();
        assert_eq!((r.branch_prefix.as_str(), r.auto_accept), ("agent/", true));
        assert_eq!(gh.canonical()["reporting"]["auto_accept"], true);
        assert!(forges[1].reporting().is_none());
        assert!(forges[1].canonical().get("reporting").is_none());
    }

    #[test]
    fn malformed_forges_are_refused_naming_the_field() {
        for (from, to, field) in [
            ("name = \"github\"", "name = \"Git Hub\"", "forge.name"),
            ("kind = \"github\"", "kind = \"bitbucket\"", "toml"),
            (
                "\"/etc/pc/github.secret\"",
                "\"relative.secret\"",
                "secret_file",
            ),
            ("label = \"agent\"", "label = \" agent\"", "forge.label"),
            (
                "octocat = \"alice\"",
                "\"octo cat\" = \"alice\"",
                "forge.users",
            ),
            ("octocat = \"alice\"", "octocat = \"al ice\"", "forge.users"),
            (
                "path = \"acme/app\"",
                "path = \"../x\"",
                "forge.project.path",
            ),
            (
                "\"https://git.example/acme/app.git\"",
                "\"ssh://git.example/app.git\"",
                "forge.project.repository",
            ),
            ("base = \"main\"", "base = \"-x\"", "forge.project.base"),
            (
                "allowed_paths = [\"src/\", \"tests/\"]",
                "allowed_paths = []",
                "allowed_paths",
            ),
            ("name = \"lab\"", "name = \"github\"", "unique"),
            (
                "\"https://api.github.com\"",
                "\"http://api.github.com\"",
                "forge.api_base",
            ),
            ("token_file = \"/etc/pc/github.token\"\n", "", "go together"),
            (
                "auto_accept = true",
                "branch_prefix = \"-x\"",
                "branch_prefix",
            ),
            (
                "path = \"group/sub/app\"",
                "path = \"acme/app\"\nextra = 1",
                "toml",
            ),
        ] {
            let text = GOOD.replacen(from, to, 1);
            assert_ne!(text, GOOD, "{from}");
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(field), "{from} -> {err}");
        }
        let neither =
            GOOD.replacen("label = \"agent\"\n", "", 1)
                .replacen("command = \"/agent\"\n", "", 1);
        assert!(parse(&neither).unwrap_err().to_string().contains("label"));
    }
}
