//! The typed inputs of a publication (remote, branch, identity, credential source) and its
//! record. Every value from outside becomes typed only through a fallible constructor.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{PublishError, input};

/// Longest remote text accepted.
const MAX_REMOTE_BYTES: usize = 2048;
/// Longest branch name accepted.
const MAX_BRANCH_BYTES: usize = 200;
/// Longest identity name or e-mail accepted.
const MAX_IDENTITY_BYTES: usize = 256;

/// Where the branch is published: an absolute path to a repository on this machine, an
/// `https://` URL, or a plain `http://` URL whose host is a loopback address (`localhost`,
/// `127.0.0.0/8`, `[::1]`): plain http elsewhere would carry the credential and the pushed
/// objects in clear text. A URL never carries a user or password (credentials come from a
/// [`CredentialSource`]), a query or a fragment, so its text is its credential-free form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    text: String,
    kind: RemoteKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RemoteKind {
    Path,
    Http,
    Https,
}

impl Remote {
    /// Parses a remote.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_INPUT` for relative paths, other schemes, plain `http://` to a
    /// host that is not a loopback address, user info, a query or fragment, whitespace or control
    /// characters, or over 2048 bytes.
    pub fn parse(text: &str) -> Result<Self, PublishError> {
        if text.is_empty() || text.len() > MAX_REMOTE_BYTES {
            return Err(input("remote must be 1..=2048 bytes"));
        }
        if text.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(input(
                "remote must not contain whitespace or control characters",
            ));
        }
        let kind = if text.starts_with('/') {
            RemoteKind::Path
        } else if let Some(rest) = text.strip_prefix("https://") {
            check_authority(rest)?;
            RemoteKind::Https
        } else if let Some(rest) = text.strip_prefix("http://") {
            let authority = check_authority(rest)?;
            if !is_loopback_authority(authority) {
                return Err(input(
                    "plain http is accepted for a loopback remote only (use https)",
                ));
            }
            RemoteKind::Http
        } else {
            return Err(input("remote must be an absolute path or an http(s) URL"));
        };
        Ok(Self {
            text: text.to_owned(),
            kind,
        })
    }

    /// The remote's credential-free text (as given: it cannot carry a credential).
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for a repository on this machine.
    #[must_use]
    pub fn is_path(&self) -> bool {
        self.kind == RemoteKind::Path
    }

    /// The one transport git may use for this remote (`GIT_ALLOW_PROTOCOL`).
    pub(crate) fn protocol(&self) -> &'static str {
        match self.kind {
            RemoteKind::Path => "file",
            RemoteKind::Http => "http",
            RemoteKind::Https => "https",
        }
    }
}

/// Checks the part of a URL after its scheme and returns its authority (`host[:port]`).
fn check_authority(rest: &str) -> Result<&str, PublishError> {
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err(input("remote URL has no host"));
    }
    if authority.contains('@') {
        return Err(input(
            "remote URL must not carry user info (credentials come from a credential source)",
        ));
    }
    if rest.contains('?') || rest.contains('#') {
        return Err(input("remote URL must not carry a query or fragment"));
    }
    Ok(authority)
}

/// True when the authority's host (`host`, `host:port`, `[v6]` or `[v6]:port`) is `localhost`
/// or a loopback IP address. Anything unparsable is not loopback.
pub(crate) fn is_loopback_authority(authority: &str) -> bool {
    let host = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, rest)) if rest.is_empty() || port_suffix(rest) => host,
            _ => return false,
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) if port_suffix(&format!(":{port}")) => host,
            Some(_) => return false,
            None => authority,
        },
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `:` followed by 1..=5 digits.
fn port_suffix(text: &str) -> bool {
    text.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// A branch name: 1..=200 bytes of ASCII letters, digits and `-_./`, slash-separated components
/// that neither start with `.` or `-` nor end with `.lock`, no `..`, not ending in `/` or `.`.
/// Stricter than `git check-ref-format --branch`, checked without running git.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct BranchName(String);

impl BranchName {
    /// Parses a branch name (without `refs/heads/`).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_INPUT` when the name breaks the rule above.
    pub fn parse(text: &str) -> Result<Self, PublishError> {
        let bad = || input("branch name must be 1..=200 of [A-Za-z0-9._/-] in safe components");
        if text.is_empty() || text.len() > MAX_BRANCH_BYTES {
            return Err(bad());
        }
        if !text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
        {
            return Err(bad());
        }
        if text.contains("..") || text.ends_with('.') || text == "HEAD" {
            return Err(bad());
        }
        for part in text.split('/') {
            if part.is_empty()
                || part.starts_with('.')
                || part.starts_with('-')
                || part.ends_with(".lock")
            {
                return Err(bad());
            }
        }
        Ok(Self(text.to_owned()))
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `refs/heads/<name>`.
    #[must_use]
    pub fn full_ref(&self) -> String {
        format!("refs/heads/{}", self.0)
    }
}

impl<'de> Deserialize<'de> for BranchName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// The fixed author and committer of published commits, from the operator's configuration:
/// name, e-mail, and a date (seconds since the epoch and a UTC offset in minutes). The same
/// identity and candidate always give the same commit id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitIdentity {
    name: String,
    email: String,
    seconds: i64,
    offset_minutes: i16,
}

fn identity_text(text: &str, what: &'static str) -> Result<(), PublishError> {
    let ok = !text.is_empty()
        && text.len() <= MAX_IDENTITY_BYTES
        && text.trim() == text
        && !text
            .chars()
            .any(|c| c.is_control() || matches!(c, '<' | '>'));
    if ok { Ok(()) } else { Err(input(what)) }
}

impl CommitIdentity {
    /// Builds an identity.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_INPUT` when the name or e-mail is empty, over 256 bytes, padded,
    /// or holds `<`, `>` or control characters; a negative time; an offset beyond ±14 hours.
    pub fn new(
        name: &str,
        email: &str,
        seconds: i64,
        offset_minutes: i16,
    ) -> Result<Self, PublishError> {
        identity_text(name, "identity name must be 1..=256 plain characters")?;
        identity_text(email, "identity e-mail must be 1..=256 plain characters")?;
        if seconds < 0 {
            return Err(input("identity date must not be before 1970"));
        }
        if offset_minutes.unsigned_abs() > 14 * 60 {
            return Err(input("identity UTC offset must be within 14 hours"));
        }
        Ok(Self {
            name: name.to_owned(),
            email: email.to_owned(),
            seconds,
            offset_minutes,
        })
    }

    /// The name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The e-mail address.
    #[must_use]
    pub fn email(&self) -> &str {
        &self.email
    }

    /// Git's raw date form: `<seconds> <+|-HHMM>`.
    pub(crate) fn git_date(&self) -> String {
        let sign = if self.offset_minutes < 0 { '-' } else { '+' };
        let abs = self.offset_minutes.unsigned_abs();
        format!("{} {sign}{:02}{:02}", self.seconds, abs / 60, abs % 60)
    }
}

/// Where git gets the remote's credential.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CredentialSource {
    /// No credential (a path remote, or an HTTP remote that needs none).
    None,
    /// A file (mode 0600 or stricter, at most 4 KiB) holding one line: `user:password`, or a
    /// token alone (sent as the password of the user `x-access-token`, which GitHub, Gitea and
    /// Forgejo accept). It reaches git only through this crate's credential helper, which reads
    /// a private copy; it is never in any argv or environment.
    File(PathBuf),
    /// A credential helper the operator names (as `credential.helper` takes it: `store`,
    /// `cache`, an absolute path, or `!command`). It runs in git's scrubbed environment.
    Helper(String),
}

impl CredentialSource {
    /// A credential file.
    #[must_use]
    pub fn file(path: &Path) -> Self {
        Self::File(path.to_owned())
    }

    /// An operator-named credential helper.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_INPUT` when the name is empty, over 1024 bytes or holds control
    /// characters.
    pub fn helper(name: &str) -> Result<Self, PublishError> {
        if name.is_empty() || name.len() > 1024 || name.chars().any(char::is_control) {
            return Err(input("credential helper must be 1..=1024 plain characters"));
        }
        Ok(Self::Helper(name.to_owned()))
    }
}

/// What one publication did: where, which branch, which commit, the base tip it checked, when
/// the branch was pushed, whether the commit was rebased onto a moved base, and the commit it
/// extends (a follow-up pushed onto our own earlier commit). Strict JSON (unknown fields are
/// refused); a record written before `extends` existed still parses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicationRecord {
    /// The remote's credential-free form.
    pub remote: String,
    /// The branch created (without `refs/heads/`).
    pub branch: BranchName,
    /// The published commit (recorded before the push: deterministic).
    pub commit_id: String,
    /// The base branch's tip when the destination was rechecked.
    pub base_tip_seen: String,
    /// When the push completed (RFC 3339, UTC, seconds).
    pub pushed_at: String,
    /// True when the commit was rebuilt onto a moved base (merged and gated again).
    pub rebased: bool,
    /// False when the branch already held exactly this commit (an idempotent repeat, e.g. a
    /// concurrent publish of the same candidate): nothing was pushed.
    pub created: bool,
    /// For an extension: the commit this one was pushed on top of (its single parent, our
    /// previous publication on the same branch). Absent for a branch created by this commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
}

/// RFC 3339 (UTC, seconds) of a time since the epoch ([`vocab::rfc3339_utc`]).
pub(crate) fn rfc3339_utc(seconds: u64) -> String {
    vocab::rfc3339_utc(i64::try_from(seconds).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_are_paths_or_http_urls_without_credentials() {
        for ok in [
            "/srv/r.git",
            "http://127.0.0.1:8080/r.git",
            "http://127.8.9.10/r.git",
            "http://localhost:3000/o/r",
            "http://[::1]:8080/r.git",
            "https://example.invalid/o/r",
            "https://example.invalid:8443/o/r",
        ] {
            assert_eq!(Remote::parse(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "r.git",
            "ssh://h/r",
            "file:///r",
            "https://user:pw@example.invalid/r",
            "https://tok@example.invalid/r",
            "https://example.invalid/r?x=1",
            "https://example.invalid/r#f",
            "https:///r",
            "/srv/r .git",
            "/srv/r\n",
            "-uhttp://x",
            // Plain http leaves the machine: refused (r_plain_http_remote_off_loopback).
            "http://example.invalid/r.git",
            "http://10.0.0.1:8080/r.git",
            "http://192.168.1.5/r.git",
            "http://[::2]/r.git",
            "http://localhost.example.invalid/r.git",
            "http://127.0.0.1.example.invalid/r.git",
            "http://0.0.0.0/r.git",
            "http://127.0.0.1:80x/r.git",
            "http://[::1]x/r.git",
        ] {
            assert_eq!(
                Remote::parse(bad).unwrap_err().code(),
                "PATCH_CANDIDATE_PUBLISH_INPUT",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn branch_names_are_refused_not_repaired() {
        for ok in ["candidate/abc", "pc-1", "a.b_c"] {
            assert_eq!(
                BranchName::parse(ok).unwrap().full_ref(),
                format!("refs/heads/{ok}")
            );
        }
        for bad in [
            "", "-x", "a..b", "a/", "/a", "a//b", ".a", "a/.b", "a.lock", "a/b.lock", "a.", "a b",
            "a~1", "a^", "a:b", "a@{1}", "a\\b", "HEAD", "é",
        ] {
            assert!(BranchName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(BranchName::parse(&"a".repeat(201)).is_err());
    }

    #[test]
    fn identity_gives_gits_raw_date() {
        let id = CommitIdentity::new("Host", "host@example.invalid", 1_700_000_000, -330).unwrap();
        assert_eq!(id.git_date(), "1700000000 -0530");
        for (name, email) in [
            ("", "e"),
            ("a<b", "e"),
            ("n", "e>"),
            ("n\n", "e"),
            (" n", "e"),
        ] {
            assert!(CommitIdentity::new(name, email, 0, 0).is_err());
        }
        assert!(CommitIdentity::new("n", "e", -1, 0).is_err());
        assert!(CommitIdentity::new("n", "e", 0, 15 * 60).is_err());
    }

    /// The vocabulary's formatting (its own tests pin the dates) of the seconds as given.
    #[test]
    fn rfc3339_is_the_vocabularys() {
        for seconds in [0_u64, 951_782_400, 1_700_000_000] {
            let signed = i64::try_from(seconds).unwrap();
            assert_eq!(rfc3339_utc(seconds), vocab::rfc3339_utc(signed));
        }
    }

    #[test]
    fn record_is_strict() {
        let record = PublicationRecord {
            remote: "/srv/r.git".into(),
            branch: BranchName::parse("b").unwrap(),
            commit_id: "a".repeat(40),
            base_tip_seen: "b".repeat(40),
            pushed_at: rfc3339_utc(0),
            rebased: false,
            created: true,
            extends: None,
        };
        let json = serde_json::to_value(&record).unwrap();
        assert!(json.get("extends").is_none(), "{json}");
        let back: PublicationRecord = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back, record);
        let mut extra = json.clone();
        extra["token"] = "x".into();
        assert!(serde_json::from_value::<PublicationRecord>(extra).is_err());
        let mut bad = json;
        bad["branch"] = "a..b".into();
        assert!(serde_json::from_value::<PublicationRecord>(bad).is_err());
    }

    /// A record stored before extensions existed (no `extends` field) still parses; an
    /// extension's record carries its parent and reads back the same.
    #[test]
    fn an_old_record_without_extends_still_parses() {
        let old = format!(
            r#"{{"remote":"/srv/r.git","branch":"b","commit_id":"{}","base_tip_seen":"{}","pushed_at":"2023-11-14T22:13:20Z","rebased":false,"created":true}}"#,
            "a".repeat(40),
            "b".repeat(40)
        );
        let record: PublicationRecord = serde_json::from_str(&old).unwrap();
        assert_eq!(record.extends, None);
        assert_eq!(record.commit_id, "a".repeat(40));
        assert_eq!(serde_json::to_string(&record).unwrap(), old);

        let extension = PublicationRecord {
            extends: Some("c".repeat(40)),
            ..record
        };
        let json = serde_json::to_value(&extension).unwrap();
        assert_eq!(json["extends"], "c".repeat(40));
        assert_eq!(
            serde_json::from_value::<PublicationRecord>(json).unwrap(),
            extension
        );
    }
}
