//! The events acted on, parsed from a verified delivery's body into typed, bounded values:
//! an issue that got a label, and a new comment on an issue or a pull / merge request. Every
//! other event or action is `Ok(None)` (acknowledged and ignored).
//!
//! | forge | issue labeled | new comment |
//! |---|---|---|
//! | GitHub | `issues`, action `labeled`: `label.name` | `issue_comment`, action `created` (a pull request when `issue.pull_request` is present) |
//! | Gitea / Forgejo | `issue_label` (or `issues`), action `label_updated`: the issue's current `labels` (the payload does not say which one was added) | `issue_comment` / `pull_request_comment`, action `created` (a pull request when `is_pull` or `issue.pull_request`) |
//! | GitLab | `Issue Hook`: on `open` the issue's `labels`, on `update` the titles in `changes.labels.current` not in `changes.labels.previous` | `Note Hook` on an `Issue` or `MergeRequest`, action `create` (or no action: older GitLab sends none and fires only on creation) |
//!
//! Text is refused, never truncated: a title over [`MAX_TITLE_BYTES`] or with a control
//! character, a body or comment over [`MAX_TEXT_BYTES`] or with a control character other than
//! tab, line feed and carriage return. Numbers are non-zero. Unknown fields are ignored.

use std::num::NonZeroU64;

use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use crate::error::{ForgeError, payload};
use crate::kind::{CloneUrl, ForgeKind, ForgeUser, ProjectPath};
use crate::verify::Delivery;

/// Longest issue title accepted, in bytes.
pub const MAX_TITLE_BYTES: usize = 1024;
/// Longest issue body or comment accepted, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Longest label name accepted, in bytes.
const MAX_LABEL_BYTES: usize = 255;
/// Most labels read from one event.
const MAX_LABELS: usize = 100;

/// The repository an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryRef {
    /// Its full path on the forge (`full_name`; GitLab `path_with_namespace`).
    pub path: ProjectPath,
    /// Its clone address as the forge reports it (`clone_url`; GitLab `git_http_url`). Match the
    /// path against the host's configuration; do not fetch from an address a delivery names.
    pub clone_url: CloneUrl,
}

/// The labeled issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueRef {
    /// The issue's number in its repository (GitLab: `iid`).
    pub number: NonZeroU64,
    /// Its title: untrusted, at most [`MAX_TITLE_BYTES`], no control character. Show it only
    /// through `vocab::Untrusted`.
    pub title: String,
    /// Its body (empty when the forge sends none): untrusted, at most [`MAX_TEXT_BYTES`].
    pub body: String,
}

/// What a comment was made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommentTarget {
    /// An issue, by number (GitLab: `iid`).
    Issue(NonZeroU64),
    /// A pull request (GitLab: merge request), by number (GitLab: `iid`).
    PullRequest(NonZeroU64),
}

/// An event acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForgeEvent {
    /// An issue got one or more labels.
    IssueLabeled {
        /// The repository.
        repository: RepositoryRef,
        /// The issue.
        issue: IssueRef,
        /// The labels added (Gitea: every label the issue now has), each 1..=255 bytes without
        /// control characters, at most 100; never empty.
        labels_added: Vec<String>,
        /// Who labeled it.
        sender: ForgeUser,
    },
    /// A new comment on an issue or a pull / merge request.
    Comment {
        /// The repository.
        repository: RepositoryRef,
        /// What it was made on.
        target: CommentTarget,
        /// The forge's id of the comment (GitLab: the note's `id`).
        comment_id: NonZeroU64,
        /// The comment: untrusted, at most [`MAX_TEXT_BYTES`].
        body: String,
        /// Who wrote it.
        sender: ForgeUser,
    },
}

fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ForgeError> {
    serde_json::from_slice(body)
        .map_err(|_| payload("the payload is not JSON of the documented shape"))
}

fn title(text: String) -> Result<String, ForgeError> {
    if text.len() > MAX_TITLE_BYTES || text.chars().any(char::is_control) {
        return Err(payload(
            "an issue title is longer than 1 KiB or holds a control character",
        ));
    }
    Ok(text)
}

fn text(text: Option<String>) -> Result<String, ForgeError> {
    let text = text.unwrap_or_default();
    if text.len() > MAX_TEXT_BYTES
        || text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(payload(
            "a body or comment is longer than 64 KiB or holds a control character",
        ));
    }
    Ok(text)
}

fn labels(names: impl IntoIterator<Item = String>) -> Result<Vec<String>, ForgeError> {
    let mut out = Vec::new();
    for name in names {
        if out.len() == MAX_LABELS {
            return Err(payload("the event names more than 100 labels"));
        }
        if !(1..=MAX_LABEL_BYTES).contains(&name.len()) || name.chars().any(char::is_control) {
            return Err(payload(
                "a label name is not 1..=255 bytes without control characters",
            ));
        }
        out.push(name);
    }
    Ok(out)
}

/// `repository` of GitHub and Gitea.
#[derive(Deserialize)]
struct Repository {
    full_name: String,
    clone_url: String,
}

impl Repository {
    fn typed(self, kind: ForgeKind) -> Result<RepositoryRef, ForgeError> {
        Ok(RepositoryRef {
            path: ProjectPath::parse(kind, &self.full_name)?,
            clone_url: CloneUrl::parse(&self.clone_url)?,
        })
    }
}

/// `sender` of GitHub (`login`) and Gitea (`login`, also sent as `username`).
#[derive(Deserialize)]
struct Sender {
    login: Option<String>,
    username: Option<String>,
}

impl Sender {
    fn typed(self, kind: ForgeKind) -> Result<ForgeUser, ForgeError> {
        let name = self
            .login
            .or(self.username)
            .ok_or_else(|| payload("the sender has no login"))?;
        ForgeUser::parse(kind, &name)
    }
}

#[derive(Deserialize)]
struct Action {
    action: Option<String>,
}

#[derive(Deserialize)]
struct LabeledIssue {
    number: NonZeroU64,
    title: String,
    body: Option<String>,
    #[serde(default)]
    labels: Vec<NamedLabel>,
    pull_request: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct NamedLabel {
    name: String,
}

#[derive(Deserialize)]
struct CommentedIssue {
    number: NonZeroU64,
    pull_request: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Comment {
    id: NonZeroU64,
    body: Option<String>,
}

#[derive(Deserialize)]
struct GitHubLabeled {
    issue: LabeledIssue,
    label: NamedLabel,
    repository: Repository,
    sender: Sender,
}

#[derive(Deserialize)]
struct GiteaLabeled {
    issue: LabeledIssue,
    repository: Repository,
    sender: Sender,
}

#[derive(Deserialize)]
struct Commented {
    issue: CommentedIssue,
    comment: Comment,
    repository: Repository,
    sender: Sender,
    /// Gitea: true on a pull request.
    #[serde(default)]
    is_pull: bool,
}

/// Parses the body of a verified delivery into the event it carries, if it is one acted on.
///
/// # Errors
/// `PATCH_CANDIDATE_FORGE_PAYLOAD` when an acted-on event's body is not JSON of the documented
/// shape or a value is out of bounds (see the module documentation).
///
/// # Security
/// Call it only with a [`Delivery`] from [`crate::verify`] of the same body. The body is
/// parsed with serde into bounded, typed values; no error quotes it.
pub fn parse_event(delivery: &Delivery, body: &[u8]) -> Result<Option<ForgeEvent>, ForgeError> {
    match delivery.kind {
        ForgeKind::GitHub => github(delivery.event.as_str(), body),
        ForgeKind::Gitea => gitea(delivery.event.as_str(), body),
        ForgeKind::GitLab => gitlab(delivery.event.as_str(), body),
    }
}

fn action_is(body: &[u8], wanted: &str) -> Result<bool, ForgeError> {
    let head: Action = json(body)?;
    Ok(head.action.as_deref() == Some(wanted))
}

fn comment_event(kind: ForgeKind, event: Commented, pull: bool) -> Result<ForgeEvent, ForgeError> {
    let number = event.issue.number;
    let pull = pull || event.is_pull || event.issue.pull_request.is_some();
    Ok(ForgeEvent::Comment {
        repository: event.repository.typed(kind)?,
        target: if pull {
            CommentTarget::PullRequest(number)
        } else {
            CommentTarget::Issue(number)
        },
        comment_id: event.comment.id,
        body: text(event.comment.body)?,
        sender: event.sender.typed(kind)?,
    })
}

impl IssueRef {
    /// An issue with its title and body checked ([`title`], [`text`]).
    fn checked(
        number: NonZeroU64,
        title_text: String,
        body: Option<String>,
    ) -> Result<Self, ForgeError> {
        Ok(Self {
            number,
            title: title(title_text)?,
            body: text(body)?,
        })
    }
}

fn github(event: &str, body: &[u8]) -> Result<Option<ForgeEvent>, ForgeError> {
    let kind = ForgeKind::GitHub;
    match event {
        "issues" if action_is(body, "labeled")? => {
            let event: GitHubLabeled = json(body)?;
            if event.issue.pull_request.is_some() {
                return Ok(None);
            }
            Ok(Some(ForgeEvent::IssueLabeled {
                repository: event.repository.typed(kind)?,
                issue: IssueRef::checked(event.issue.number, event.issue.title, event.issue.body)?,
                labels_added: labels([event.label.name])?,
                sender: event.sender.typed(kind)?,
            }))
        }
        "issue_comment" if action_is(body, "created")? => {
            comment_event(kind, json(body)?, false).map(Some)
        }
        _ => Ok(None),
    }
}

fn gitea(event: &str, body: &[u8]) -> Result<Option<ForgeEvent>, ForgeError> {
    let kind = ForgeKind::Gitea;
    match event {
        "issues" | "issue_label" if action_is(body, "label_updated")? => {
            let event: GiteaLabeled = json(body)?;
            if event.issue.pull_request.is_some() {
                return Ok(None);
            }
            let added = labels(event.issue.labels.into_iter().map(|l| l.name))?;
            if added.is_empty() {
                return Ok(None);
            }
            Ok(Some(ForgeEvent::IssueLabeled {
                repository: event.repository.typed(kind)?,
                issue: IssueRef::checked(event.issue.number, event.issue.title, event.issue.body)?,
                labels_added: added,
                sender: event.sender.typed(kind)?,
            }))
        }
        "issue_comment" | "pull_request_comment" if action_is(body, "created")? => {
            comment_event(kind, json(body)?, event == "pull_request_comment").map(Some)
        }
        _ => Ok(None),
    }
}

#[derive(Deserialize)]
struct GitLabUser {
    username: String,
}

#[derive(Deserialize)]
struct GitLabProject {
    path_with_namespace: String,
    git_http_url: String,
}

impl GitLabProject {
    fn typed(self) -> Result<RepositoryRef, ForgeError> {
        Ok(RepositoryRef {
            path: ProjectPath::parse(ForgeKind::GitLab, &self.path_with_namespace)?,
            clone_url: CloneUrl::parse(&self.git_http_url)?,
        })
    }
}

#[derive(Deserialize)]
struct TitledLabel {
    title: String,
}

#[derive(Deserialize)]
struct GitLabAttributesHead {
    action: Option<String>,
    noteable_type: Option<String>,
}

#[derive(Deserialize)]
struct GitLabHead {
    object_attributes: GitLabAttributesHead,
}

#[derive(Deserialize)]
struct GitLabIssueAttributes {
    iid: NonZeroU64,
    title: String,
    description: Option<String>,
}

#[derive(Deserialize)]
struct GitLabLabelChange {
    #[serde(default)]
    previous: Vec<TitledLabel>,
    #[serde(default)]
    current: Vec<TitledLabel>,
}

#[derive(Deserialize)]
struct GitLabChanges {
    labels: Option<GitLabLabelChange>,
}

#[derive(Deserialize)]
struct GitLabIssueHook {
    user: GitLabUser,
    project: GitLabProject,
    object_attributes: GitLabIssueAttributes,
    #[serde(default)]
    labels: Vec<TitledLabel>,
    changes: Option<GitLabChanges>,
}

#[derive(Deserialize)]
struct GitLabNoteAttributes {
    id: NonZeroU64,
    note: Option<String>,
}

#[derive(Deserialize)]
struct GitLabIid {
    iid: NonZeroU64,
}

#[derive(Deserialize)]
struct GitLabNoteHook {
    user: GitLabUser,
    project: GitLabProject,
    object_attributes: GitLabNoteAttributes,
    issue: Option<GitLabIid>,
    merge_request: Option<GitLabIid>,
}

fn gitlab(event: &str, body: &[u8]) -> Result<Option<ForgeEvent>, ForgeError> {
    let kind = ForgeKind::GitLab;
    match event {
        "Issue Hook" => {
            let head: GitLabHead = json(body)?;
            let opened = match head.object_attributes.action.as_deref() {
                Some("open") => true,
                Some("update") => false,
                _ => return Ok(None),
            };
            let hook: GitLabIssueHook = json(body)?;
            let change = hook.changes.and_then(|c| c.labels);
            let added: Vec<String> = match (opened, change) {
                (true, _) => hook.labels.into_iter().map(|l| l.title).collect(),
                (false, Some(change)) => {
                    let previous = labels(change.previous.into_iter().map(|l| l.title))?;
                    change
                        .current
                        .into_iter()
                        .map(|l| l.title)
                        .filter(|t| !previous.contains(t))
                        .collect()
                }
                (false, None) => Vec::new(),
            };
            let added = labels(added)?;
            if added.is_empty() {
                return Ok(None);
            }
            Ok(Some(ForgeEvent::IssueLabeled {
                repository: hook.project.typed()?,
                issue: IssueRef::checked(
                    hook.object_attributes.iid,
                    hook.object_attributes.title,
                    hook.object_attributes.description,
                )?,
                labels_added: added,
                sender: ForgeUser::parse(kind, &hook.user.username)?,
            }))
        }
        "Note Hook" => {
            let head: GitLabHead = json(body)?;
            if !matches!(
                head.object_attributes.action.as_deref(),
                None | Some("create")
            ) {
                return Ok(None);
            }
            let on_merge_request = match head.object_attributes.noteable_type.as_deref() {
                Some("Issue") => false,
                Some("MergeRequest") => true,
                _ => return Ok(None),
            };
            let hook: GitLabNoteHook = json(body)?;
            let target = if on_merge_request {
                let mr = hook
                    .merge_request
                    .ok_or_else(|| payload("a merge request note has no merge_request"))?;
                CommentTarget::PullRequest(mr.iid)
            } else {
                let issue = hook
                    .issue
                    .ok_or_else(|| payload("an issue note has no issue"))?;
                CommentTarget::Issue(issue.iid)
            };
            Ok(Some(ForgeEvent::Comment {
                repository: hook.project.typed()?,
                target,
                comment_id: hook.object_attributes.id,
                body: text(hook.object_attributes.note)?,
                sender: ForgeUser::parse(kind, &hook.user.username)?,
            }))
        }
        _ => Ok(None),
    }
}
