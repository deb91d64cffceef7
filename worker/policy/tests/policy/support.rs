//! Candidate builders and a deterministic generator of fake, real-looking secrets.

use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};

pub use finalizer::testkit::{create, delete, update, update_with_diff};

pub fn fields() -> CandidateFields {
    CandidateFields {
        summary: "Approved repository file operations: 1.".into(),
        rationale: finalizer::CANDIDATE_RATIONALE.into(),
        required_validation_gates: vec![],
        required_security_gates: vec![],
        ..finalizer::testkit::fields()
    }
}

/// Files sorted by path, as the finalizer orders them.
pub fn candidate(mut files: Vec<RepositoryPatchFile>) -> RepositoryPatchCandidate {
    files.sort_by(|a, b| a.path().cmp(b.path()));
    RepositoryPatchCandidate::new(fields(), files).unwrap()
}

/// A deterministic xorshift generator of secret-shaped strings.
pub struct Gen(u64);

pub const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
pub const UPPER32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
pub const HEX: &str = "0123456789abcdef";
pub const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const DIGITS: &str = "0123456789";

impl Gen {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn of(&mut self, alphabet: &str, n: usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| chars[(self.next() % chars.len() as u64) as usize])
            .collect()
    }
}

/// One fake secret: the rule expected to fire, the full token as it appears in the line, and
/// its random part (the part that must never appear in any output).
pub struct Fake {
    pub rule: &'static str,
    pub line: String,
    pub token: String,
    pub random: Vec<String>,
}

fn fake(rule: &'static str, line: String, token: String, random: Vec<String>) -> Fake {
    Fake {
        rule,
        line,
        token,
        random,
    }
}

/// A token assigned to a variable the way code carries it: `NAME = "TOKEN"`.
fn assigned(rule: &'static str, prefix: &str, random: String, suffix: &str) -> Fake {
    let token = format!("{prefix}{random}{suffix}");
    fake(
        rule,
        format!("CONFIG_VALUE = \"{token}\""),
        token,
        vec![random],
    )
}

/// The corpus: one real-looking (fake) secret per rule, with the line that carries it.
pub fn corpus() -> Vec<Fake> {
    let mut g = Gen::new(7);
    let mut out = vec![
        assigned("aws-access-token", "AKIA", g.of(UPPER32, 16), ""),
        assigned("gcp-api-key", "AIza", g.of(ALNUM, 35), ""),
        assigned("github-pat", "ghp_", g.of(ALNUM, 36), ""),
        assigned(
            "github-fine-grained-pat",
            "github_pat_",
            g.of(ALNUM, 82),
            "",
        ),
        assigned("github-oauth", "gho_", g.of(ALNUM, 36), ""),
        assigned("github-app-token", "ghs_", g.of(ALNUM, 36), ""),
        assigned("github-refresh-token", "ghr_", g.of(ALNUM, 36), ""),
        assigned("gitlab-pat", "glpat-", g.of(ALNUM, 20), ""),
        assigned("gitlab-ptt", "glptt-", g.of(HEX, 40), ""),
        assigned(
            "gitlab-runner-authentication-token",
            "glrt-",
            g.of(ALNUM, 20),
            "",
        ),
        assigned("gitlab-deploy-token", "gldt-", g.of(ALNUM, 20), ""),
        assigned("digitalocean-pat", "dop_v1_", g.of(HEX, 64), ""),
        assigned("stripe-access-token", "sk_live_", g.of(ALNUM, 32), ""),
        assigned("twilio-api-key", "SK", g.of(HEX, 32), ""),
        assigned("npm-access-token", "npm_", g.of(ALNUM, 36), ""),
        assigned(
            "pypi-upload-token",
            "pypi-AgEIcHlwaS5vcmc",
            g.of(ALNUM, 70),
            "",
        ),
        assigned("anthropic-api-key", "sk-ant-api03-", g.of(ALNUM, 93), "AA"),
        assigned(
            "anthropic-admin-api-key",
            "sk-ant-admin01-",
            g.of(ALNUM, 93),
            "AA",
        ),
    ];
    let (a, b) = (g.of(ALNUM, 74), g.of(ALNUM, 74));
    out.push(fake(
        "openai-api-key",
        format!("OPENAI_KEY = \"sk-proj-{a}T3BlbkFJ{b}\""),
        format!("sk-proj-{a}T3BlbkFJ{b}"),
        vec![a, b],
    ));
    let (a, b) = (g.of(ALNUM, 22), g.of(ALNUM, 43));
    out.push(fake(
        "sendgrid-api-token",
        format!("SENDGRID = \"SG.{a}.{b}\""),
        format!("SG.{a}.{b}"),
        vec![a, b],
    ));
    let (a, b, c) = (g.of(DIGITS, 11), g.of(DIGITS, 12), g.of(ALNUM, 24));
    out.push(fake(
        "slack-bot-token",
        format!("SLACK = \"xoxb-{a}-{b}-{c}\""),
        format!("xoxb-{a}-{b}-{c}"),
        vec![c],
    ));
    let hook = g.of(ALNUM, 44);
    out.push(fake(
        "slack-webhook-url",
        format!("WEBHOOK = \"https://hooks.slack.com/services/{hook}\""),
        format!("hooks.slack.com/services/{hook}"),
        vec![hook],
    ));
    let secret = g.of(B64, 40);
    out.push(fake(
        "aws-secret-access-key",
        format!("aws_secret_access_key = \"{secret}\""),
        secret.clone(),
        vec![secret],
    ));
    let (a, b) = (g.of(ALNUM, 3), g.of(ALNUM, 32));
    out.push(fake(
        "azure-ad-client-secret",
        format!("client_secret: '{a}8Q~{b}'"),
        format!("{a}8Q~{b}"),
        vec![b],
    ));
    let key = g.of(ALNUM, 86);
    out.push(fake(
        "azure-storage-account-key",
        format!("CONN = \"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={key}==;\""),
        format!("{key}=="),
        vec![key],
    ));
    let (h, p, s) = (g.of(ALNUM, 30), g.of(ALNUM, 40), g.of(ALNUM, 43));
    out.push(fake(
        "jwt",
        format!("AUTH_HEADER = \"eyJ{h}.eyJ{p}.{s}\""),
        format!("eyJ{h}.eyJ{p}.{s}"),
        vec![h, p, s],
    ));
    let body = g.of(B64, 64);
    out.push(fake(
        "gcp-service-account-key",
        format!(
            "  \"private_key\": \"-----BEGIN PRIVATE KEY-----\\n{body}\\n-----END PRIVATE KEY-----\\n\","
        ),
        body.clone(),
        vec![body],
    ));
    let pw = g.of(ALNUM, 24);
    out.push(fake(
        "generic-api-key",
        format!("db_password = \"{pw}\""),
        pw.clone(),
        vec![pw],
    ));
    let key = g.of(ALNUM, 32);
    out.push(fake(
        "generic-api-key",
        format!("API_KEY: {key}"),
        key.clone(),
        vec![key],
    ));
    out
}

/// Private key blocks over several lines: (rule, text, random body lines).
pub fn key_blocks() -> Vec<(String, Vec<String>)> {
    let mut g = Gen::new(11);
    [
        "RSA PRIVATE KEY",
        "EC PRIVATE KEY",
        "OPENSSH PRIVATE KEY",
        "PRIVATE KEY",
        "PGP PRIVATE KEY BLOCK",
    ]
    .iter()
    .map(|label| {
        let body: Vec<String> = (0..4).map(|_| g.of(B64, 64)).collect();
        let text = format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            body.join("\n")
        );
        (text, body)
    })
    .collect()
}

/// Asserts no 8-character window of any `random` part occurs in `output`.
pub fn assert_absent(output: &str, random: &[String], what: &str) {
    for part in random {
        let chars: Vec<char> = part.chars().collect();
        for window in chars.windows(8) {
            let w: String = window.iter().collect();
            assert!(!output.contains(&w), "{what}: a piece of a secret leaked");
        }
    }
}
