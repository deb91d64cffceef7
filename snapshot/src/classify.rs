//! Path classifiers: secret-sensitive paths, root env templates and the secrets contract gate.

use crate::error::SnapshotError;
use crate::path::casefold;

/// The one secrets manifest a change may touch, and only names-only.
pub const SECRET_CONTRACT_PATH: &str = "app/security/secrets.yaml";

const ENV_TEMPLATES: [&str; 3] = [
    ".env.example",
    ".env.staging.example",
    ".env.production.example",
];
const SECRET_SUFFIXES: [&str; 7] = [
    ".key",
    ".pem",
    ".p12",
    ".pfx",
    ".pkcs12",
    ".keystore",
    ".jks",
];
const SECRET_WORDS: [&str; 9] = [
    "secret",
    "credential",
    "token",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "private_key",
];
const SECRET_FILES: [&str; 5] = [
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".htpasswd",
    ".git-credentials",
];

/// Root-level env templates (`.env.example`, `.env.staging.example`, `.env.production.example`),
/// case-insensitive. They need a names-only content gate and are never editable.
#[must_use]
pub fn is_repository_env_template_path(path: &str) -> bool {
    let folded = casefold(path);
    ENV_TEMPLATES.contains(&folded.as_str())
}

/// The secrets contract manifest (`app/security/secrets.yaml`).
#[must_use]
pub fn is_secret_contract_path(path: &str) -> bool {
    path == SECRET_CONTRACT_PATH
}

/// Segment-wise secret classifier. Each segment is case-folded, split on `:` and stripped of
/// trailing dots and spaces; a segment is sensitive when it starts with `.env`, contains a secret
/// word (`secret`, `credential`, `token`, `password`, …), matches `service role` / `private key`
/// spellings, ends with a key-store suffix (`.key .pem .p12 .pfx .pkcs12 .keystore .jks`), is an
/// SSH private key name (`id_rsa` … without `.pub`) or a well-known credential file (`.netrc` …).
/// The root env templates and the secrets contract are *not* sensitive here: they have their own
/// content gates.
#[must_use]
pub fn is_secret_sensitive_path(path: &str) -> bool {
    if is_repository_env_template_path(path) || is_secret_contract_path(path) {
        return false;
    }
    let normalized = path.replace('\\', "/");
    normalized
        .split('/')
        .flat_map(|seg| seg.split(':'))
        .any(|seg| segment_is_sensitive(&casefold(seg)))
}

fn squash(text: &str) -> String {
    text.chars()
        .filter(|c| !matches!(c, '.' | '_' | '-') && !c.is_whitespace())
        .collect()
}

fn segment_is_sensitive(segment: &str) -> bool {
    let name = segment.trim_end_matches([' ', '.']);
    if name.is_empty() {
        return false;
    }
    if name.starts_with(".env") {
        return true;
    }
    if SECRET_WORDS.iter().any(|w| name.contains(w)) {
        return true;
    }
    let squashed = squash(name);
    if squashed.contains("servicerole") || squashed.contains("privatekey") {
        return true;
    }
    if SECRET_SUFFIXES.iter().any(|s| name.ends_with(s)) {
        return true;
    }
    if SECRET_FILES.contains(&name) {
        return true;
    }
    for key in ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"] {
        if name.starts_with(key) && !name.ends_with(".pub") {
            return true;
        }
    }
    false
}

/// Reference `_reject_env_template_path`.
///
/// # Errors
/// `REPOSITORY_PATCH_ENV_TEMPLATE`.
pub fn reject_env_template_path(path: &str) -> Result<(), SnapshotError> {
    if is_repository_env_template_path(path) {
        return Err(SnapshotError::EnvTemplate {
            path: path.to_owned(),
        });
    }
    Ok(())
}

/// The names-only gate for the secrets contract. Accepted shape (YAML subset): comments, blank
/// lines, a `secrets:` key whose items are names (`- NAME` or `- name: NAME` with an optional
/// `description:`/`required:` line), or `NAME:` keys with an empty value. Anything that carries a
/// value — `key: something` outside those fields — is rejected. The error never echoes the value.
///
/// # Errors
/// `REPOSITORY_PATCH_SECRET_CONTRACT` (message contains `names-only`).
pub fn validate_secret_contract_text(path: &str, content: &str) -> Result<(), SnapshotError> {
    let reject = || SnapshotError::SecretContract {
        path: path.to_owned(),
    };
    for raw_line in content.lines() {
        let line = raw_line.split(" #").next().unwrap_or_default();
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "---" {
            continue;
        }
        let item = trimmed.strip_prefix("- ").unwrap_or(trimmed).trim();
        if item.is_empty() {
            return Err(reject());
        }
        match item.split_once(':') {
            None => {
                if !is_secret_name(item) {
                    return Err(reject());
                }
            }
            Some((key, value)) => {
                let key = key.trim();
                let value = value.trim();
                let ok = match key {
                    "secrets" | "version" | "schema_version" => {
                        value.is_empty() || is_plain_scalar(value)
                    }
                    "name" => is_secret_name(value),
                    "description" => !value.is_empty(),
                    "required" => matches!(value, "true" | "false"),
                    _ => is_secret_name(key) && value.is_empty(),
                };
                if !ok {
                    return Err(reject());
                }
            }
        }
    }
    Ok(())
}

fn is_secret_name(text: &str) -> bool {
    let t = text.trim_matches(['"', '\'']);
    !t.is_empty()
        && t.len() <= 128
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

fn is_plain_scalar(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// Reference `_validate_output_text`: env-template rejection, then the secrets contract gate.
///
/// # Errors
/// `REPOSITORY_PATCH_ENV_TEMPLATE` or `REPOSITORY_PATCH_SECRET_CONTRACT`.
pub fn validate_output_text(path: &str, content: &str) -> Result<(), SnapshotError> {
    reject_env_template_path(path)?;
    if is_secret_contract_path(path) {
        validate_secret_contract_text(path, content)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_secret_outcomes() {
        for p in [
            ".env.example",
            "app/security/secrets.yaml",
            "app/modules/support/service.py",
        ] {
            assert!(!is_secret_sensitive_path(p), "{p}");
        }
        for p in [
            "secrets/.env.example",
            "config/secrets.yaml",
            "keys/id_rsa",
            "certs/server.pem",
            "tests/token.txt",
            ".env",
            ".env.local",
            "a/service_role.json",
            "a/Private-Key.txt",
            "x/store.JKS",
            "home/.netrc",
        ] {
            assert!(is_secret_sensitive_path(p), "{p}");
        }
        assert!(!is_secret_sensitive_path("keys/id_rsa.pub"));
    }

    #[test]
    fn env_templates_are_root_only_and_case_insensitive() {
        for p in [
            ".env.example",
            ".ENV.EXAMPLE",
            ".env.staging.example",
            ".env.production.example",
        ] {
            assert!(is_repository_env_template_path(p), "{p}");
            assert_eq!(
                validate_output_text(p, "A=\n").unwrap_err().code(),
                "REPOSITORY_PATCH_ENV_TEMPLATE"
            );
        }
        assert!(!is_repository_env_template_path("app/.env.example"));
    }

    #[test]
    fn secret_contract_is_names_only_and_never_echoes_values() {
        let ok = "secrets:\n  - name: STRIPE_KEY\n    description: payments\n  - OTHER_NAME\n";
        validate_output_text(SECRET_CONTRACT_PATH, ok).unwrap();
        let bad = "secrets:\n  - name: STRIPE_KEY\nraw_token: sk-sentinel\n";
        let err = validate_output_text(SECRET_CONTRACT_PATH, bad).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("names-only"), "{msg}");
        assert!(!msg.contains("sk-sentinel"), "{msg}");
    }
}
