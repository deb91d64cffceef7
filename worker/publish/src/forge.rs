//! The optional pull request through a forge's REST API, after the branch is pushed: GitHub
//! (`POST {api}/repos/{owner}/{repo}/pulls`) and Gitea / Forgejo
//! (`POST {base}/api/v1/repos/{owner}/{repo}/pulls`). The token comes from a file (the same rules
//! as a credential file); title and body are host-owned (candidate digest, commit, base tip) and
//! quote no agent text. The answer is read up to 1 MiB and only `number` and `html_url` are
//! taken from it, both checked.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use https_client::ClientOptions;
use serde::{Deserialize, Serialize};

use crate::credential::read_token_file;
use crate::error::PublishError;
use crate::types::{BranchName, PublicationRecord};

/// Most bytes of a forge answer read.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// How long the whole request may take.
const FORGE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest API base and pull request URL accepted.
const MAX_URL_BYTES: usize = 2048;

fn forge_error(detail: &'static str) -> PublishError {
    PublishError::Forge { detail }
}

/// Which REST API the forge speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ForgeKind {
    /// GitHub (`api_base` e.g. `https://api.github.com`).
    GitHub,
    /// Gitea or Forgejo (`api_base` is the site, e.g. `https://codeberg.org`; `/api/v1` is added).
    Gitea,
}

/// Where the pull request is opened: the API and the repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeEndpoint {
    kind: ForgeKind,
    api_base: String,
    owner: String,
    repo: String,
}

fn plain_name(text: &str) -> bool {
    (1..=100).contains(&text.len())
        && text != "."
        && text != ".."
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl ForgeEndpoint {
    /// Builds an endpoint.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_INPUT` unless `api_base` is an `https://` URL (or `http://` to a
    /// loopback host) without user info, query or fragment, and `owner` / `repo` are 1..=100 of
    /// `[A-Za-z0-9._-]`.
    pub fn new(
        kind: ForgeKind,
        api_base: &str,
        owner: &str,
        repo: &str,
    ) -> Result<Self, PublishError> {
        let bad = |detail| PublishError::Input { detail };
        if api_base.len() > MAX_URL_BYTES
            || api_base
                .chars()
                .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(bad("forge API base must be a plain URL"));
        }
        let uri: http::Uri = api_base
            .parse()
            .map_err(|_| bad("forge API base is not a URL"))?;
        let authority = uri
            .authority()
            .ok_or_else(|| bad("forge API base has no host"))?;
        if authority.as_str().contains('@') || uri.query().is_some() || api_base.contains('#') {
            return Err(bad(
                "forge API base must not carry user info, a query or a fragment",
            ));
        }
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") => {
                if !crate::types::is_loopback_authority(authority.as_str()) {
                    return Err(bad("plain http is accepted for a loopback forge only"));
                }
            }
            _ => return Err(bad("forge API base must be http or https")),
        }
        if !plain_name(owner) || !plain_name(repo) {
            return Err(bad(
                "forge owner and repository must be 1..=100 of [A-Za-z0-9._-]",
            ));
        }
        Ok(Self {
            kind,
            api_base: api_base.trim_end_matches('/').to_owned(),
            owner: owner.to_owned(),
            repo: repo.to_owned(),
        })
    }

    fn pulls_url(&self) -> String {
        let prefix = match self.kind {
            ForgeKind::GitHub => "",
            ForgeKind::Gitea => "/api/v1",
        };
        format!(
            "{}{prefix}/repos/{}/{}/pulls",
            self.api_base, self.owner, self.repo
        )
    }
}

/// The pull request the forge opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// The forge's pull request number.
    pub number: u64,
    /// Its web address, as the forge gave it (checked: http(s), printable, bounded).
    pub url: String,
}

#[derive(Serialize)]
struct PullBody<'a> {
    title: String,
    head: &'a str,
    base: &'a str,
    body: String,
}

/// What is read from the answer (everything else is ignored).
#[derive(Deserialize)]
struct PullAnswer {
    number: u64,
    html_url: String,
}

/// Opens a pull request from the published branch onto `base`.
///
/// # Errors
/// `PATCH_CANDIDATE_PUBLISH_INPUT` (`candidate_digest` not a `sha256:` digest),
/// `…_CREDENTIAL` (the token file), `…_AUTH` (401/403), `…_FORGE` (unreachable, timed out,
/// refused — 422 when a pull request for the branch exists —, or an answer outside the documented
/// shape), `…_REMOTE_UNREACHABLE`.
///
/// # Security
/// The token is sent only in the `Authorization` header (marked sensitive), never logged or put
/// in an error; the title and body hold only the digest, the commit and the base tip.
pub async fn open_pull_request(
    endpoint: &ForgeEndpoint,
    token_file: &Path,
    record: &PublicationRecord,
    base: &BranchName,
    candidate_digest: &str,
) -> Result<PullRequest, PublishError> {
    if !vocab::is_typed_sha256(candidate_digest) {
        return Err(PublishError::Input {
            detail: "the candidate digest is not a sha256 digest",
        });
    }
    let token = read_token_file(token_file)?;
    let short = candidate_digest.get(7..19).unwrap_or_default();
    let body = PullBody {
        title: format!("Patch candidate {short}"),
        head: record.branch.as_str(),
        base: base.as_str(),
        body: format!(
            "Published by patch-candidate from a reviewed, accepted candidate.\n\n\
             - Candidate digest: `{candidate_digest}`\n\
             - Commit: `{}`\n\
             - Base tip checked: `{}`\n\
             - Rebased onto a moved base: {}\n",
            record.commit_id,
            record.base_tip_seen,
            if record.rebased { "yes" } else { "no" }
        ),
    };
    let json = serde_json::to_vec(&body).map_err(|_| forge_error("cannot encode the request"))?;
    let scheme = match endpoint.kind {
        ForgeKind::GitHub => "Bearer",
        ForgeKind::Gitea => "token",
    };
    let mut auth = http::HeaderValue::from_str(&format!("{scheme} {token}")).map_err(|_| {
        PublishError::Credential {
            detail: "the token holds characters a header cannot carry",
        }
    })?;
    auth.set_sensitive(true);
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(endpoint.pulls_url())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, "patch-candidate-publish")
        .header(http::header::AUTHORIZATION, auth);
    request = match endpoint.kind {
        ForgeKind::GitHub => request
            .header(http::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28"),
        ForgeKind::Gitea => request.header(http::header::ACCEPT, "application/json"),
    };
    let request = request
        .body(Full::new(Bytes::from(json)))
        .map_err(|_| forge_error("cannot build the request"))?;
    let client = https_client::client(ClientOptions::default())
        .map_err(|_| forge_error("TLS cannot be set up"))?;
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|_| forge_error("the forge cannot be reached"))?;
        let status = response.status();
        let collected = Limited::new(response.into_body(), MAX_RESPONSE_BYTES)
            .collect()
            .await
            .map_err(|_| forge_error("the forge's answer is too large or broken"))?;
        Ok::<_, PublishError>((status, collected.to_bytes()))
    };
    let (status, bytes) = tokio::time::timeout(FORGE_TIMEOUT, exchange)
        .await
        .map_err(|_| forge_error("the forge did not answer in time"))??;
    match status.as_u16() {
        200 | 201 => {}
        401 | 403 => return Err(PublishError::Auth),
        422 | 409 => {
            return Err(forge_error(
                "the forge refused the pull request (one may already exist for the branch)",
            ));
        }
        _ => return Err(forge_error("the forge refused the pull request")),
    }
    let answer: PullAnswer = serde_json::from_slice(&bytes)
        .map_err(|_| forge_error("the forge's answer is not a pull request"))?;
    let url_ok = answer.html_url.len() <= MAX_URL_BYTES
        && (answer.html_url.starts_with("https://") || answer.html_url.starts_with("http://"))
        && !answer
            .html_url
            .chars()
            .any(|c| c.is_control() || c.is_whitespace());
    if !url_ok || answer.number == 0 {
        return Err(forge_error("the forge's answer is not a pull request"));
    }
    Ok(PullRequest {
        number: answer.number,
        url: answer.html_url,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_https_or_loopback_http_with_plain_names() {
        let gh =
            ForgeEndpoint::new(ForgeKind::GitHub, "https://api.github.com/", "o", "r").unwrap();
        assert_eq!(gh.pulls_url(), "https://api.github.com/repos/o/r/pulls");
        let gt = ForgeEndpoint::new(ForgeKind::Gitea, "http://127.0.0.1:3000", "o", "r.x").unwrap();
        assert_eq!(
            gt.pulls_url(),
            "http://127.0.0.1:3000/api/v1/repos/o/r.x/pulls"
        );
        for (base, owner, repo) in [
            ("http://forge.example", "o", "r"),
            ("https://u:p@forge.example", "o", "r"),
            ("https://forge.example/?x=1", "o", "r"),
            ("ftp://forge.example", "o", "r"),
            ("https://forge.example", "..", "r"),
            ("https://forge.example", "o", "r/../x"),
            ("https://forge.example", "o", ""),
        ] {
            assert!(
                ForgeEndpoint::new(ForgeKind::GitHub, base, owner, repo).is_err(),
                "{base} {owner} {repo}"
            );
        }
    }
}
