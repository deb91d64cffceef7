//! The REST calls back to a forge, after the branch is pushed or while a job runs: the pull
//! request (GitHub `POST {api}/repos/{owner}/{repo}/pulls`, Gitea / Forgejo
//! `POST {base}/api/v1/repos/{owner}/{repo}/pulls`, GitLab
//! `POST {base}/api/v4/projects/{group%2F…%2Fproject}/merge_requests`), a comment on an issue or
//! pull / merge request ([`post_comment`]) and a commit status ([`set_commit_status`]). The token
//! comes from a file (the same rules as a credential file); every text sent is host-owned (the
//! caller's) and checked. Each answer is read up to 1 MiB within 30 s, and only the fields named
//! here are taken from it, each checked.

use std::num::NonZeroU64;
use std::path::Path;
use std::time::Duration;

pub use ::forge::ForgeKind;
use ::forge::{CommentTarget, ProjectPath};
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
/// Longest comment sent.
const MAX_COMMENT_BYTES: usize = 64 * 1024;
/// Longest commit status context (GitLab: name) sent.
const MAX_STATUS_CONTEXT_BYTES: usize = 100;
/// Longest commit status description sent (GitHub keeps 140 characters).
const MAX_STATUS_DESCRIPTION_CHARS: usize = 140;

fn forge_error(detail: &'static str) -> PublishError {
    PublishError::Forge { detail }
}

fn input(detail: &'static str) -> PublishError {
    PublishError::Input { detail }
}

/// Where the calls go: the API and the repository (GitLab: the project, nested groups allowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeEndpoint {
    kind: ForgeKind,
    api_base: String,
    project: ProjectPath,
}

fn plain_name(text: &str) -> bool {
    (1..=100).contains(&text.len())
        && text != "."
        && text != ".."
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// An `https://` URL (or `http://` to a loopback host) without user info, query or fragment.
fn check_api_base(api_base: &str) -> Result<(), PublishError> {
    if api_base.len() > MAX_URL_BYTES
        || api_base
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(input("forge API base must be a plain URL"));
    }
    let uri: http::Uri = api_base
        .parse()
        .map_err(|_| input("forge API base is not a URL"))?;
    let authority = uri
        .authority()
        .ok_or_else(|| input("forge API base has no host"))?;
    if authority.as_str().contains('@') || uri.query().is_some() || api_base.contains('#') {
        return Err(input(
            "forge API base must not carry user info, a query or a fragment",
        ));
    }
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if crate::types::is_loopback_authority(authority.as_str()) => Ok(()),
        Some("http") => Err(input("plain http is accepted for a loopback forge only")),
        _ => Err(input("forge API base must be http or https")),
    }
}

impl ForgeEndpoint {
    /// Builds an endpoint for `owner/repo`.
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
        if !plain_name(owner) || !plain_name(repo) {
            return Err(input(
                "forge owner and repository must be 1..=100 of [A-Za-z0-9._-]",
            ));
        }
        let project = ProjectPath::parse(kind, &format!("{owner}/{repo}"))
            .map_err(|_| input("forge owner and repository must be 1..=100 of [A-Za-z0-9._-]"))?;
        Self::for_project(kind, api_base, &project)
    }

    /// Builds an endpoint for a project path, e.g. the one a webhook named
    /// (`forge::RepositoryRef::path`); GitLab's may hold nested groups.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_PUBLISH_INPUT` for the `api_base` rules of [`ForgeEndpoint::new`], or a
    /// path that is not one of `kind`'s (`owner/name` on GitHub and Gitea).
    pub fn for_project(
        kind: ForgeKind,
        api_base: &str,
        project: &ProjectPath,
    ) -> Result<Self, PublishError> {
        check_api_base(api_base)?;
        let project = ProjectPath::parse(kind, project.as_str())
            .map_err(|_| input("the project path is not one of this forge's"))?;
        Ok(Self {
            kind,
            api_base: api_base.trim_end_matches('/').to_owned(),
            project,
        })
    }

    /// The repository's API root: `…/repos/{owner}/{repo}` or `…/api/v4/projects/{encoded}`.
    fn repo_url(&self) -> String {
        match self.kind {
            ForgeKind::GitHub => format!("{}/repos/{}", self.api_base, self.project),
            ForgeKind::Gitea => format!("{}/api/v1/repos/{}", self.api_base, self.project),
            _ => format!(
                "{}/api/v4/projects/{}",
                self.api_base,
                self.project.url_encoded()
            ),
        }
    }

    fn pulls_url(&self) -> String {
        match self.kind {
            ForgeKind::GitHub | ForgeKind::Gitea => format!("{}/pulls", self.repo_url()),
            _ => format!("{}/merge_requests", self.repo_url()),
        }
    }

    fn comments_url(&self, target: CommentTarget) -> String {
        match (self.kind, target) {
            (ForgeKind::GitHub | ForgeKind::Gitea, CommentTarget::Issue(n))
            | (ForgeKind::GitHub | ForgeKind::Gitea, CommentTarget::PullRequest(n)) => {
                format!("{}/issues/{n}/comments", self.repo_url())
            }
            (_, CommentTarget::Issue(n)) => format!("{}/issues/{n}/notes", self.repo_url()),
            (_, CommentTarget::PullRequest(n)) => {
                format!("{}/merge_requests/{n}/notes", self.repo_url())
            }
        }
    }

    fn statuses_url(&self, commit: &str) -> String {
        format!("{}/statuses/{commit}", self.repo_url())
    }
}

/// The pull request (GitLab: merge request) the forge opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// The forge's pull request number (GitLab: the merge request's `iid`).
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

#[derive(Serialize)]
struct MergeRequestBody<'a> {
    source_branch: &'a str,
    target_branch: &'a str,
    title: String,
    description: String,
}

/// What is read from a GitHub / Gitea answer (everything else is ignored).
#[derive(Deserialize)]
struct PullAnswer {
    number: u64,
    html_url: String,
}

/// What is read from a GitLab answer.
#[derive(Deserialize)]
struct MergeRequestAnswer {
    iid: u64,
    web_url: String,
}

/// What is read from a comment's or status's answer.
#[derive(Deserialize)]
struct IdAnswer {
    id: NonZeroU64,
}

/// How a refusal of one call is told.
struct Refusals {
    /// 409 and 422: the forge refused the content.
    conflict: &'static str,
    /// Any other status but success and 401/403.
    other: &'static str,
}

/// POSTs `json` to `url` with the endpoint's token header; the answer's body on 200/201.
async fn post_json(
    endpoint: &ForgeEndpoint,
    token: &str,
    url: String,
    json: Vec<u8>,
    refusals: Refusals,
) -> Result<Bytes, PublishError> {
    send_json(endpoint, token, http::Method::POST, url, json, refusals).await
}

/// Sends `json` (empty for a GET) to `url` with the endpoint's token header; the answer's body
/// on 200/201.
async fn send_json(
    endpoint: &ForgeEndpoint,
    token: &str,
    method: http::Method,
    url: String,
    json: Vec<u8>,
    refusals: Refusals,
) -> Result<Bytes, PublishError> {
    let (name, scheme) = match endpoint.kind {
        ForgeKind::GitHub => (http::header::AUTHORIZATION, "Bearer "),
        ForgeKind::Gitea => (http::header::AUTHORIZATION, "token "),
        _ => (http::HeaderName::from_static("private-token"), ""),
    };
    let mut auth = http::HeaderValue::from_str(&format!("{scheme}{token}")).map_err(|_| {
        PublishError::Credential {
            detail: "the token holds characters a header cannot carry",
        }
    })?;
    auth.set_sensitive(true);
    let mut request = http::Request::builder()
        .method(method)
        .uri(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, "patch-candidate-publish")
        .header(name, auth);
    request = match endpoint.kind {
        ForgeKind::GitHub => request
            .header(http::header::ACCEPT, "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28"),
        _ => request.header(http::header::ACCEPT, "application/json"),
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
        200 | 201 => Ok(bytes),
        401 | 403 => Err(PublishError::Auth),
        422 | 409 => Err(forge_error(refusals.conflict)),
        _ => Err(forge_error(refusals.other)),
    }
}

fn web_url_ok(url: &str) -> bool {
    url.len() <= MAX_URL_BYTES
        && (url.starts_with("https://") || url.starts_with("http://"))
        && !url.chars().any(|c| c.is_control() || c.is_whitespace())
}

/// Opens a pull request (GitLab: a merge request) from the published branch onto `base`. Its
/// body is host-owned: the digest, the commit, the base tip, and `extra` (the caller's own
/// lines, e.g. gate verdicts and a review link; never agent text).
///
/// # Errors
/// `PATCH_CANDIDATE_PUBLISH_INPUT` (`candidate_digest` not a `sha256:` digest),
/// `…_CREDENTIAL` (the token file), `…_AUTH` (401/403), `…_FORGE` (unreachable, timed out,
/// refused — 422 when a pull request for the branch exists —, or an answer outside the documented
/// shape), `…_REMOTE_UNREACHABLE`.
///
/// # Security
/// The token is sent only in the `Authorization` header (GitLab: `PRIVATE-TOKEN`), marked
/// sensitive, never logged or put in an error; the title and body hold only the digest, the
/// commit and the base tip.
pub async fn open_pull_request(
    endpoint: &ForgeEndpoint,
    token_file: &Path,
    record: &PublicationRecord,
    base: &BranchName,
    candidate_digest: &str,
    extra: &str,
) -> Result<PullRequest, PublishError> {
    if !vocab::is_typed_sha256(candidate_digest) {
        return Err(input("the candidate digest is not a sha256 digest"));
    }
    if extra.len() > MAX_COMMENT_BYTES / 2
        || extra
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        return Err(input(
            "the extra text must be at most 32 KiB without control characters but tab and line feed",
        ));
    }
    let token = read_token_file(token_file)?;
    let short = candidate_digest.get(7..19).unwrap_or_default();
    let title = format!("Patch candidate {short}");
    let text = format!(
        "Published by patch-candidate from a reviewed, accepted candidate.\n\n\
         - Candidate digest: `{candidate_digest}`\n\
         - Commit: `{}`\n\
         - Base tip checked: `{}`\n\
         - Rebased onto a moved base: {}\n{extra}",
        record.commit_id,
        record.base_tip_seen,
        if record.rebased { "yes" } else { "no" }
    );
    let json = match endpoint.kind {
        ForgeKind::GitHub | ForgeKind::Gitea => serde_json::to_vec(&PullBody {
            title,
            head: record.branch.as_str(),
            base: base.as_str(),
            body: text,
        }),
        _ => serde_json::to_vec(&MergeRequestBody {
            source_branch: record.branch.as_str(),
            target_branch: base.as_str(),
            title,
            description: text,
        }),
    }
    .map_err(|_| forge_error("cannot encode the request"))?;
    let refusals = Refusals {
        conflict: "the forge refused the pull request (one may already exist for the branch)",
        other: "the forge refused the pull request",
    };
    let bytes = post_json(endpoint, &token, endpoint.pulls_url(), json, refusals).await?;
    let not_a_pull = || forge_error("the forge's answer is not a pull request");
    let (number, url) = match endpoint.kind {
        ForgeKind::GitHub | ForgeKind::Gitea => {
            let answer: PullAnswer = serde_json::from_slice(&bytes).map_err(|_| not_a_pull())?;
            (answer.number, answer.html_url)
        }
        _ => {
            let answer: MergeRequestAnswer =
                serde_json::from_slice(&bytes).map_err(|_| not_a_pull())?;
            (answer.iid, answer.web_url)
        }
    };
    if !web_url_ok(&url) || number == 0 {
        return Err(not_a_pull());
    }
    Ok(PullRequest { number, url })
}

/// A query value, percent-encoded (everything but unreserved characters and `/`).
fn query_value(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What is read of a Gitea / Forgejo pull request in a list.
#[derive(Deserialize)]
struct GiteaPullAnswer {
    number: u64,
    html_url: String,
    head: GiteaHead,
    base: GiteaHead,
}

#[derive(Deserialize)]
struct GiteaHead {
    #[serde(rename = "ref")]
    name: String,
}

/// Most pages of a Gitea / Forgejo pull request list read (50 each), newest first.
const MAX_LIST_PAGES: u32 = 10;

/// The pull request (GitLab: merge request) from `branch` onto `base`, open or not, if the
/// forge has one: what is looked up before one is opened, so a call repeated after an answer
/// that was lost (a host killed between the forge's answer and its record) opens no second one.
/// GitHub: `GET …/pulls?head={owner}:{branch}&base={base}&state=all`; GitLab:
/// `GET …/merge_requests?source_branch=…&target_branch=…&state=all`; Gitea / Forgejo, whose list
/// has no branch filter: `GET …/pulls?state=all&sort=newest&limit=50`, at most 10 pages.
///
/// # Errors
/// As [`open_pull_request`].
pub async fn find_pull_request(
    endpoint: &ForgeEndpoint,
    token_file: &Path,
    branch: &BranchName,
    base: &BranchName,
) -> Result<Option<PullRequest>, PublishError> {
    let token = read_token_file(token_file)?;
    let checked = |number: u64, url: String| {
        if web_url_ok(&url) && number > 0 {
            Ok(PullRequest { number, url })
        } else {
            Err(not_a_list())
        }
    };
    match endpoint.kind {
        ForgeKind::GitHub => {
            let owner = endpoint
                .project
                .as_str()
                .split('/')
                .next()
                .unwrap_or_default();
            let url = format!(
                "{}?head={}&base={}&state=all",
                endpoint.pulls_url(),
                query_value(&format!("{owner}:{}", branch.as_str())),
                query_value(base.as_str())
            );
            let list: Vec<PullAnswer> = get_list(endpoint, &token, url).await?;
            list.into_iter()
                .next()
                .map(|p| checked(p.number, p.html_url))
                .transpose()
        }
        ForgeKind::Gitea => {
            for page in 1..=MAX_LIST_PAGES {
                let url = format!(
                    "{}?state=all&sort=newest&limit=50&page={page}",
                    endpoint.pulls_url()
                );
                let list: Vec<GiteaPullAnswer> = get_list(endpoint, &token, url).await?;
                let last = list.len() < 50;
                if let Some(p) = list
                    .into_iter()
                    .find(|p| p.head.name == branch.as_str() && p.base.name == base.as_str())
                {
                    return checked(p.number, p.html_url).map(Some);
                }
                if last {
                    break;
                }
            }
            Ok(None)
        }
        _ => {
            let url = format!(
                "{}?source_branch={}&target_branch={}&state=all",
                endpoint.pulls_url(),
                query_value(branch.as_str()),
                query_value(base.as_str())
            );
            let list: Vec<MergeRequestAnswer> = get_list(endpoint, &token, url).await?;
            list.into_iter()
                .next()
                .map(|p| checked(p.iid, p.web_url))
                .transpose()
        }
    }
}

fn not_a_list() -> PublishError {
    forge_error("the forge's answer is not a list of pull requests")
}

/// GETs `url` and reads the answer as a list of `T`.
async fn get_list<T: serde::de::DeserializeOwned>(
    endpoint: &ForgeEndpoint,
    token: &str,
    url: String,
) -> Result<Vec<T>, PublishError> {
    let refusals = Refusals {
        conflict: "the forge refused the pull request lookup",
        other: "the forge refused the pull request lookup",
    };
    let bytes = send_json(
        endpoint,
        token,
        http::Method::GET,
        url,
        Vec::new(),
        refusals,
    )
    .await?;
    serde_json::from_slice(&bytes).map_err(|_| not_a_list())
}

#[derive(Serialize)]
struct CommentBody<'a> {
    body: &'a str,
}

/// Posts a comment on an issue or a pull / merge request; the forge's id of the comment.
///
/// GitHub and Gitea take both on `…/issues/{n}/comments`; GitLab on `…/issues/{iid}/notes` or
/// `…/merge_requests/{iid}/notes`.
///
/// # Errors
/// `PATCH_CANDIDATE_PUBLISH_INPUT` (`body` empty, over 64 KiB or with a control character other
/// than tab and line feed), `…_CREDENTIAL`, `…_AUTH` (401/403), `…_FORGE` (unreachable, timed
/// out, refused, or an answer without a non-zero `id`).
///
/// # Security
/// `body` must be host-owned text (it is posted as the host's account); the token is sent only
/// in its sensitive header.
pub async fn post_comment(
    endpoint: &ForgeEndpoint,
    token_file: &Path,
    target: CommentTarget,
    body: &str,
) -> Result<NonZeroU64, PublishError> {
    if body.is_empty()
        || body.len() > MAX_COMMENT_BYTES
        || body
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\t'))
    {
        return Err(input(
            "a comment must be 1..=64 KiB without control characters but tab and line feed",
        ));
    }
    let token = read_token_file(token_file)?;
    let json = serde_json::to_vec(&CommentBody { body })
        .map_err(|_| forge_error("cannot encode the request"))?;
    let refusals = Refusals {
        conflict: "the forge refused the comment",
        other: "the forge refused the comment (is the issue or pull request there?)",
    };
    let bytes = post_json(
        endpoint,
        &token,
        endpoint.comments_url(target),
        json,
        refusals,
    )
    .await?;
    let answer: IdAnswer = serde_json::from_slice(&bytes)
        .map_err(|_| forge_error("the forge's answer is not a comment"))?;
    Ok(answer.id)
}

/// A commit status's state, mapped onto each forge's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StatusState {
    /// Queued (all forges: `pending`).
    Pending,
    /// Running (GitLab `running`; GitHub and Gitea have none: `pending`).
    Running,
    /// Passed (`success`).
    Success,
    /// The check failed (GitHub, Gitea `failure`; GitLab `failed`).
    Failure,
    /// The check could not run (GitHub, Gitea `error`; GitLab `failed`).
    Error,
}

impl StatusState {
    fn word(self, kind: ForgeKind) -> &'static str {
        match (kind, self) {
            (_, Self::Pending) => "pending",
            (ForgeKind::GitHub | ForgeKind::Gitea, Self::Running) => "pending",
            (_, Self::Running) => "running",
            (_, Self::Success) => "success",
            (ForgeKind::GitHub | ForgeKind::Gitea, Self::Failure) => "failure",
            (ForgeKind::GitHub | ForgeKind::Gitea, Self::Error) => "error",
            (_, Self::Failure | Self::Error) => "failed",
        }
    }
}

/// A commit status: host-owned words only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitStatus {
    /// The state.
    pub state: StatusState,
    /// Which check (GitHub, Gitea `context`; GitLab `name`): 1..=100 printable ASCII.
    pub context: String,
    /// One line, at most 140 characters, no control characters.
    pub description: String,
    /// Where the details are: an http(s) URL, at most 2048 bytes.
    pub target_url: Option<String>,
}

#[derive(Serialize)]
struct StatusBody<'a> {
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    target_url: Option<&'a str>,
}

/// Sets a commit status on `commit` (40 or 64 lowercase hex digits).
///
/// # Errors
/// `PATCH_CANDIDATE_PUBLISH_INPUT` (the commit or a status field outside its rules),
/// `…_CREDENTIAL`, `…_AUTH` (401/403), `…_FORGE` (unreachable, timed out, refused — 422 for a
/// commit the forge does not have —, or an answer without a non-zero `id`).
///
/// # Security
/// Every field is the host's; the token is sent only in its sensitive header.
pub async fn set_commit_status(
    endpoint: &ForgeEndpoint,
    token_file: &Path,
    commit: &str,
    status: &CommitStatus,
) -> Result<(), PublishError> {
    if !matches!(commit.len(), 40 | 64) || !commit.bytes().all(vocab::is_lower_hex) {
        return Err(input("the commit is not 40 or 64 lowercase hex digits"));
    }
    let context_ok = (1..=MAX_STATUS_CONTEXT_BYTES).contains(&status.context.len())
        && status
            .context
            .bytes()
            .all(|b| b.is_ascii_graphic() || b == b' ');
    let description_ok = status.description.chars().count() <= MAX_STATUS_DESCRIPTION_CHARS
        && !status.description.chars().any(char::is_control);
    let url_ok = status.target_url.as_deref().is_none_or(web_url_ok);
    if !context_ok || !description_ok || !url_ok {
        return Err(input(
            "a commit status needs a 1..=100 printable context, a one-line description of at most 140 characters and an http(s) target URL",
        ));
    }
    let token = read_token_file(token_file)?;
    let gitlab = !matches!(endpoint.kind, ForgeKind::GitHub | ForgeKind::Gitea);
    let json = serde_json::to_vec(&StatusBody {
        state: status.state.word(endpoint.kind),
        context: (!gitlab).then_some(status.context.as_str()),
        name: gitlab.then_some(status.context.as_str()),
        description: &status.description,
        target_url: status.target_url.as_deref(),
    })
    .map_err(|_| forge_error("cannot encode the request"))?;
    let refusals = Refusals {
        conflict: "the forge refused the commit status (is the commit there?)",
        other: "the forge refused the commit status",
    };
    let bytes = post_json(
        endpoint,
        &token,
        endpoint.statuses_url(commit),
        json,
        refusals,
    )
    .await?;
    let _: IdAnswer = serde_json::from_slice(&bytes)
        .map_err(|_| forge_error("the forge's answer is not a commit status"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_https_or_loopback_http_with_plain_names() {
        let gh =
            ForgeEndpoint::new(ForgeKind::GitHub, "https://api.github.com/", "o", "r").unwrap();
        assert_eq!(gh.pulls_url(), "https://api.github.com/repos/o/r/pulls");
        let gl_path = ProjectPath::parse(ForgeKind::GitLab, "g/sub/p").unwrap();
        let gl = ForgeEndpoint::for_project(ForgeKind::GitLab, "https://gitlab.example", &gl_path)
            .unwrap();
        assert_eq!(
            gl.pulls_url(),
            "https://gitlab.example/api/v4/projects/g%2Fsub%2Fp/merge_requests"
        );
        let n = NonZeroU64::new(5).unwrap();
        assert_eq!(
            gl.comments_url(CommentTarget::PullRequest(n)),
            "https://gitlab.example/api/v4/projects/g%2Fsub%2Fp/merge_requests/5/notes"
        );
        assert_eq!(
            gh.comments_url(CommentTarget::PullRequest(n)),
            "https://api.github.com/repos/o/r/issues/5/comments"
        );
        assert!(ForgeEndpoint::for_project(ForgeKind::GitHub, "https://x", &gl_path).is_err());
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
