use super::*;

/// One case: the field the refusal names, and how the ask is bent to cross it.
type Bend = Box<dyn Fn(&mut JobAsk<'_>)>;

const POLICY: &str = r#"
version = 1

[quotas]
principal_daily_tokens = 1000
repository_daily_tokens = 50000
principals = { ci-bot = 10, "alice@example.org" = 2000 }

[[repository]]
match = "https://forge.example/team/*"
allowed_paths = ["src", "tests"]
create_paths = ["src/new"]
delete_paths = []
required_gates = ["unit", "lint", "unit"]
agents = ["offline", "claude"]
models = ["claude-sonnet-4-5"]
max_wall_seconds = 900
max_archive_bytes = 1048576
max_attempts = 3
base_branches = ["main", "develop"]
daily_tokens = 20000

[repository.publication]
remote = "https://forge.example/team/app.git"
branch_prefix = "agent/"
forbidden_branches = ["agent/release*", "agent/ci/*"]

[[repository]]
match = "*"
"#;

fn policy() -> RepositoryPolicy {
    RepositoryPolicy::parse(POLICY.as_bytes()).unwrap()
}

fn ask<'a>(repository: &'a str, allowed: &'a [String], create: &'a [String]) -> JobAsk<'a> {
    JobAsk {
        repository,
        allowed_paths: allowed,
        create_paths: create,
        delete_paths: &[],
        agent: "claude",
        model: Some("claude-sonnet-4-5"),
        max_wall_seconds: 600,
        max_archive_bytes: 1024,
        max_attempts: 3,
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

const TEAM: &str = "https://forge.example/team/app.git";

#[test]
fn a_job_within_the_rule_is_admitted_with_the_rules_gates_once_each() {
    let p = policy();
    let allowed = strings(&["src/app", "tests"]);
    let create = strings(&["src/new/mod.rs"]);
    let admitted = p.admit(&ask(TEAM, &allowed, &create)).unwrap();
    assert_eq!(admitted.required_gates, ["unit", "lint"]);
    assert_eq!(&admitted.digest, p.digest());
    assert_eq!(p.rule_for(TEAM).map(RepositoryRule::index), Some(0));
    // The catch-all second rule has no ceiling and adds no gate.
    let other = p
        .admit(&ask(
            "https://elsewhere.example/x.git",
            &strings(&["."]),
            &[],
        ))
        .unwrap();
    assert!(other.required_gates.is_empty());
}

#[test]
fn each_ceiling_budget_agent_and_model_is_refused_by_its_field_never_its_value() {
    let p = policy();
    let inside = strings(&["src"]);
    let cases: Vec<(&str, Bend)> = vec![
        ("allowed_paths", Box::new(|_| {})),
        ("create_paths", Box::new(|_| {})),
        ("agent", Box::new(|a| a.agent = "gemini")),
        ("model", Box::new(|a| a.model = Some("secret-model-name"))),
        ("max_wall_seconds", Box::new(|a| a.max_wall_seconds = 901)),
        (
            "max_archive_bytes",
            Box::new(|a| a.max_archive_bytes = 1_048_577),
        ),
        ("max_attempts", Box::new(|a| a.max_attempts = 4)),
    ];
    let outside = strings(&["srcx", "."]);
    let bad_create = strings(&["src/newer.rs"]);
    for (field, change) in cases {
        let mut a = match field {
            "allowed_paths" => ask(TEAM, &outside, &[]),
            "create_paths" => ask(TEAM, &inside, &bad_create),
            _ => ask(TEAM, &inside, &[]),
        };
        change(&mut a);
        let e = p.admit(&a).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_SERVICE_POLICY", "{field}");
        assert_eq!(
            e.to_string(),
            format!(
                "PATCH_CANDIDATE_SERVICE_POLICY: the repository policy does not allow this {field}"
            )
        );
        assert!(!e.to_string().contains("secret-model-name"));
    }
    // Offline turns name no model: the model list does not apply to them.
    let mut offline = ask(TEAM, &inside, &[]);
    offline.agent = "offline";
    offline.model = None;
    p.admit(&offline).unwrap();
}

#[test]
fn an_unmatched_repository_is_refused_unless_the_file_allows_it() {
    let strict = RepositoryPolicy::parse(
        b"version = 1\n[[repository]]\nmatch = \"/srv/repos/*\"\nrequired_gates = [\"unit\"]\n",
    )
    .unwrap();
    let e = strict
        .admit(&ask("/home/other/repo", &[], &[]))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "PATCH_CANDIDATE_SERVICE_POLICY: the repository policy does not allow this repository"
    );
    assert_eq!(
        strict
            .admit(&ask("/srv/repos/a", &[], &[]))
            .unwrap()
            .required_gates,
        ["unit"]
    );
    let open = RepositoryPolicy::parse(
        b"version = 1\nunmatched = \"allow\"\n[[repository]]\nmatch = \"/srv/repos/*\"\n",
    )
    .unwrap();
    assert!(
        open.admit(&ask("/home/other/repo", &[], &[]))
            .unwrap()
            .required_gates
            .is_empty()
    );
    assert_ne!(open.digest(), strict.digest());
}

#[test]
fn the_first_matching_rule_wins() {
    let p = RepositoryPolicy::parse(
        br#"version = 1
[[repository]]
match = "/srv/a/special"
required_gates = ["special"]
[[repository]]
match = "/srv/a/*"
required_gates = ["general"]
"#,
    )
    .unwrap();
    assert_eq!(
        p.admit(&ask("/srv/a/special", &[], &[]))
            .unwrap()
            .required_gates,
        ["special"]
    );
    assert_eq!(
        p.admit(&ask("/srv/a/other", &[], &[]))
            .unwrap()
            .required_gates,
        ["general"]
    );
    assert_eq!(
        p.admit(&ask("/srv/a/x/y", &[], &[]))
            .unwrap()
            .required_gates,
        ["general"]
    );
}

#[test]
fn publication_needs_the_remote_a_base_and_a_prefixed_allowed_branch() {
    let p = policy();
    let pub_ask = |remote, base, branch| PublicationAsk {
        repository: TEAM,
        remote,
        base,
        branch,
    };
    p.check_publication(&pub_ask(TEAM, "main", "agent/fix-1"))
        .unwrap();
    p.check_publication(&pub_ask(TEAM, "develop", "agent/x"))
        .unwrap();
    for (remote, base, branch, field) in [
        (
            "https://forge.example/other.git",
            "main",
            "agent/x",
            "publication.remote",
        ),
        (TEAM, "release", "agent/x", "base"),
        (TEAM, "main", "fix-1", "branch"),
        (TEAM, "main", "main", "branch"),
        (TEAM, "main", "agent/release-2", "branch"),
        (TEAM, "main", "agent/ci/deploy", "branch"),
    ] {
        let e = p
            .check_publication(&pub_ask(remote, base, branch))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "PATCH_CANDIDATE_SERVICE_POLICY: the repository policy does not allow this {field}"
            ),
            "{base} {branch}"
        );
    }
}

#[test]
fn quotas_come_from_the_principal_then_the_default_and_the_rule_then_the_default() {
    let p = policy();
    assert!(p.has_quotas());
    assert_eq!(p.principal_quota("ci-bot"), Some(10));
    assert_eq!(p.principal_quota("alice@example.org"), Some(2000));
    assert_eq!(p.principal_quota("bob"), Some(1000));
    assert_eq!(p.repository_quota(TEAM), Some(20000));
    assert_eq!(p.repository_quota("/elsewhere"), Some(50000));
    let none = RepositoryPolicy::parse(b"version = 1\n[[repository]]\nmatch = \"*\"\n").unwrap();
    assert!(!none.has_quotas());
    assert_eq!(none.principal_quota("bob"), None);
    assert_eq!(none.repository_quota(TEAM), None);
}

#[test]
fn the_digest_follows_the_meaning_not_the_spelling() {
    let a = policy();
    // Comments, spacing, key order and the order of forbidden names do not change the digest.
    let respelled = POLICY
        .replace("version = 1\n", "# the team's policy\nversion   =   1\n")
        .replace(
            r#"forbidden_branches = ["agent/release*", "agent/ci/*"]"#,
            r#"forbidden_branches = ["agent/ci/*", "agent/release*"]"#,
        );
    assert_eq!(
        RepositoryPolicy::parse(respelled.as_bytes())
            .unwrap()
            .digest(),
        a.digest()
    );
    // Any change of meaning does.
    let changed = POLICY.replace("max_attempts = 3", "max_attempts = 4");
    assert_ne!(
        RepositoryPolicy::parse(changed.as_bytes())
            .unwrap()
            .digest(),
        a.digest()
    );
    assert!(a.digest().to_string().starts_with("sha256:"));
}

#[test]
fn a_malformed_file_is_refused_by_its_check_without_quoting_it() {
    let secret = "hunter2-do-not-echo";
    let cases: Vec<String> = vec![
        format!("version = 1\nunknown_key = \"{secret}\"\n"),
        "version = 2\n".to_owned(),
        format!("version = 1\nunmatched = \"{secret}\"\n"),
        format!("version = 1\n[[repository]]\nmatch = \"*\"\nagents = [\"{secret}\"]\n"),
        format!("version = 1\n[[repository]]\nmatch = \"*\"\nallowed_paths = [\"../{secret}\"]\n"),
        "version = 1\n[[repository]]\nmatch = \"*\"\nallowed_paths = [\"/abs\"]\n".to_owned(),
        "version = 1\n[[repository]]\nmatch = \"*\"\nrequired_gates = [\"Unit Tests\"]\n"
            .to_owned(),
        "version = 1\n[[repository]]\nmatch = \"*\"\nmax_attempts = 0\n".to_owned(),
        "version = 1\n[[repository]]\nmatch = \"\"\n".to_owned(),
        "version = 1\n[[repository]]\nmatch = \"[unclosed\"\n".to_owned(),
        format!("version = 1\n[quotas]\nprincipals = {{ \"{secret} x\" = 1 }}\n"),
        format!("version = 1\n[[repository]]\nmatch = \"*\"\nmodels = [\"\"]\n# {secret}\n"),
        "version = 1\n[[repository]]\nmatch = \"*\"\ndaily_tokens = -1\n".to_owned(),
        format!(
            "version = 1\n[[repository]]\nmatch = \"*\"\n[repository.publication]\nremote_url = \"{secret}\"\n"
        ),
    ];
    for text in &cases {
        let e = RepositoryPolicy::parse(text.as_bytes()).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_SERVICE_POLICY_FILE", "{text}");
        assert!(!e.to_string().contains(secret), "{e}");
    }
    let big = vec![b'#'; usize::try_from(MAX_REPOSITORY_POLICY_BYTES).unwrap() + 1];
    assert_eq!(
        RepositoryPolicy::parse(&big).unwrap_err().code(),
        "PATCH_CANDIDATE_SERVICE_POLICY_FILE"
    );
    assert_eq!(
        RepositoryPolicy::parse(&[0xff, 0xfe]).unwrap_err().code(),
        "PATCH_CANDIDATE_SERVICE_POLICY_FILE"
    );
    let mut many = String::from("version = 1\n");
    for i in 0..=MAX_REPOSITORY_RULES {
        many.push_str(&format!("[[repository]]\nmatch = \"/r/{i}\"\n"));
    }
    assert_eq!(
        RepositoryPolicy::parse(many.as_bytes()).unwrap_err().code(),
        "PATCH_CANDIDATE_SERVICE_POLICY_FILE"
    );
}

#[test]
fn a_policy_file_is_loaded_from_disk_and_a_missing_one_is_a_file_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.toml");
    std::fs::write(&path, POLICY).unwrap();
    assert_eq!(
        RepositoryPolicy::load(&path).unwrap().digest(),
        policy().digest()
    );
    assert_eq!(
        RepositoryPolicy::load(&dir.path().join("absent.toml"))
            .unwrap_err()
            .code(),
        "PATCH_CANDIDATE_SERVICE_POLICY_FILE"
    );
}

/// `load` reads every forge's webhook secret (a missing one fails, naming the field, never the
/// path's content); `load_rules` reads the rules alone.
#[test]
fn forge_secrets_are_read_by_load_only() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("github.secret");
    let file = dir.path().join("policy.toml");
    std::fs::write(
        &file,
        format!(
            "version = 1\n[[forge]]\nname = \"github\"\nkind = \"github\"\nsecret_file = \"{}\"\nlabel = \"agent\"\n",
            secret.display()
        ),
    )
    .unwrap();
    let err = RepositoryPolicy::load(&file).unwrap_err().to_string();
    assert!(err.contains("forge.secret_file"), "{err}");
    let rules = RepositoryPolicy::load_rules(&file).unwrap();
    assert!(rules.forge("github").unwrap().secret().is_none());
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&secret)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"s3cret"))
        .unwrap();
    let loaded = RepositoryPolicy::load(&file).unwrap();
    assert!(loaded.forge("github").unwrap().secret().is_some());
    assert!(loaded.forge("gitlab").is_none());
    assert_eq!(loaded.digest(), rules.digest());
}
