//! The forges spoken, and the typed names every delivery and event is made of.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{ForgeError, delivery, payload};

/// Which forge: its webhook headers and payloads, and its REST API (in `publish`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ForgeKind {
    /// GitHub (REST base e.g. `https://api.github.com`).
    #[serde(rename = "github")]
    GitHub,
    /// Gitea or Forgejo (REST base is the site, e.g. `https://codeberg.org`; `/api/v1` is added).
    #[serde(rename = "gitea")]
    Gitea,
    /// GitLab (REST base is the site, e.g. `https://gitlab.com`; `/api/v4` is added).
    #[serde(rename = "gitlab")]
    GitLab,
}

impl ForgeKind {
    /// The name used in configuration and JSON: `github`, `gitea`, `gitlab`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GitHub => "github",
            Self::Gitea => "gitea",
            Self::GitLab => "gitlab",
        }
    }
}

impl fmt::Display for ForgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest delivery id accepted.
pub const MAX_DELIVERY_ID_BYTES: usize = 128;
/// Longest event name accepted.
const MAX_EVENT_NAME_BYTES: usize = 64;
/// Longest user name accepted.
const MAX_USER_BYTES: usize = 255;
/// Longest project path accepted (GitLab: every group of it, slashes included).
const MAX_PROJECT_PATH_BYTES: usize = 1024;
/// Most groups above a GitLab project (GitLab allows 20 levels).
const MAX_PROJECT_SEGMENTS: usize = 21;
/// Longest clone URL accepted.
const MAX_URL_BYTES: usize = 2048;

fn plain_token(text: &str, max: usize) -> bool {
    (1..=max).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A forge's id of one delivery (a GUID/UUID in practice): 1..=128 of `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// Checks a delivery id.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FORGE_DELIVERY` unless it is 1..=128 of `[A-Za-z0-9._-]`.
    pub fn parse(text: &str) -> Result<Self, ForgeError> {
        if plain_token(text, MAX_DELIVERY_ID_BYTES) {
            Ok(Self(text.to_owned()))
        } else {
            Err(delivery(
                "the delivery id must be 1..=128 of [A-Za-z0-9._-]",
            ))
        }
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The event a delivery announces (`issues`, `issue_comment`, GitLab's `Note Hook`): 1..=64 of
/// `[A-Za-z0-9._-]` and single inner spaces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventName(String);

impl EventName {
    /// Checks an event name.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FORGE_DELIVERY` unless it is 1..=64 of `[A-Za-z0-9._-]` with single
    /// spaces between words.
    pub fn parse(text: &str) -> Result<Self, ForgeError> {
        let ok = text.len() <= MAX_EVENT_NAME_BYTES
            && !text.is_empty()
            && text
                .split(' ')
                .all(|word| plain_token(word, MAX_EVENT_NAME_BYTES));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(delivery(
                "the event name must be 1..=64 of [A-Za-z0-9._-] and single spaces",
            ))
        }
    }

    /// The name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A forge account name: 1..=255 of `[A-Za-z0-9._-]`; on GitHub an app's account may end in
/// `[bot]` (e.g. `dependabot[bot]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ForgeUser(String);

impl ForgeUser {
    /// Checks an account name of `kind`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FORGE_PAYLOAD` unless it is 1..=255 of `[A-Za-z0-9._-]` (GitHub: with
    /// an optional `[bot]` suffix).
    pub fn parse(kind: ForgeKind, text: &str) -> Result<Self, ForgeError> {
        let name = match (kind, text.strip_suffix("[bot]")) {
            (ForgeKind::GitHub, Some(app)) => app,
            _ => text,
        };
        if plain_token(name, MAX_USER_BYTES) && text.len() <= MAX_USER_BYTES {
            Ok(Self(text.to_owned()))
        } else {
            Err(payload("a user name is not 1..=255 of [A-Za-z0-9._-]"))
        }
    }

    /// The account name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ForgeUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A repository's full path on its forge: `owner/name` on GitHub and Gitea (each 1..=100 of
/// `[A-Za-z0-9._-]`), `group/sub/…/project` on GitLab (2..=21 segments, each 1..=255 of the
/// same, 1024 bytes in all). No segment is `.` or `..`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProjectPath(String);

impl ProjectPath {
    /// Checks a project path of `kind`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FORGE_PAYLOAD` when it breaks the rules above.
    pub fn parse(kind: ForgeKind, text: &str) -> Result<Self, ForgeError> {
        let (segments, max_segment) = match kind {
            ForgeKind::GitHub | ForgeKind::Gitea => (2..=2, 100),
            ForgeKind::GitLab => (2..=MAX_PROJECT_SEGMENTS, 255),
        };
        let count = text.split('/').count();
        let ok = text.len() <= MAX_PROJECT_PATH_BYTES
            && segments.contains(&count)
            && text
                .split('/')
                .all(|s| s != "." && s != ".." && plain_token(s, max_segment));
        if ok {
            Ok(Self(text.to_owned()))
        } else {
            Err(payload(
                "a repository path is not owner/name (GitLab: group/…/project) of [A-Za-z0-9._-]",
            ))
        }
    }

    /// The path, e.g. `octo/widgets` or `group/sub/project`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path as one URL path segment (GitLab's project id form): `/` as `%2F`; the other
    /// bytes need no escaping.
    #[must_use]
    pub fn url_encoded(&self) -> String {
        self.0.replace('/', "%2F")
    }
}

impl fmt::Display for ProjectPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A repository's clone address as its forge reports it: `https://` or `http://`, a host, no
/// user info, query or fragment, printable ASCII, at most 2048 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CloneUrl(String);

impl CloneUrl {
    /// Checks a clone URL.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_FORGE_PAYLOAD` when it breaks the rules above.
    pub fn parse(text: &str) -> Result<Self, ForgeError> {
        let bad = || payload("a clone URL is not a plain http(s) URL");
        if text.len() > MAX_URL_BYTES || !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad());
        }
        let uri: http::Uri = text.parse().map_err(|_| bad())?;
        let authority = uri.authority().ok_or_else(bad)?;
        if authority.as_str().contains('@')
            || uri.query().is_some()
            || text.contains('#')
            || !matches!(uri.scheme_str(), Some("https" | "http"))
        {
            return Err(bad());
        }
        Ok(Self(text.to_owned()))
    }

    /// The URL.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CloneUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_strict() {
        assert!(DeliveryId::parse("72d3162e-cc78-11e3-81ab-4c9367dc0958").is_ok());
        for bad in ["", "a b", "a/b", "a\nb", "ü", &"a".repeat(129)] {
            assert!(DeliveryId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(EventName::parse("Merge Request Hook").is_ok());
        for bad in ["", " a", "a ", "a  b", "a\tb", &"a".repeat(65)] {
            assert!(EventName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ForgeUser::parse(ForgeKind::GitHub, "dependabot[bot]").is_ok());
        assert!(ForgeUser::parse(ForgeKind::Gitea, "dependabot[bot]").is_err());
        assert!(ForgeUser::parse(ForgeKind::GitHub, "[bot]").is_err());
        assert!(ForgeUser::parse(ForgeKind::GitLab, "a\u{1b}b").is_err());
        assert!(ProjectPath::parse(ForgeKind::GitLab, "g/s/p").is_ok());
        assert_eq!(
            ProjectPath::parse(ForgeKind::GitLab, "g/s/p")
                .unwrap()
                .url_encoded(),
            "g%2Fs%2Fp"
        );
        for bad in ["g/s/p", "o", "o/", "/o/r", "o/..", "o/r%2F", "o/r?x"] {
            assert!(ProjectPath::parse(ForgeKind::GitHub, bad).is_err(), "{bad}");
        }
        assert!(CloneUrl::parse("https://forge.example/o/r.git").is_ok());
        for bad in [
            "ssh://forge.example/o/r.git",
            "https://u:p@forge.example/o/r.git",
            "https://forge.example/o/r.git?x",
            "https://forge.example/o r.git",
            "file:///etc",
        ] {
            assert!(CloneUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
