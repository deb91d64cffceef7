//! The host-built request of one turn and its checks against the approval (reference §10.2 steps
//! 6–8), and the stdin document built from it (reference §10.3). Nothing here talks to Docker.

use std::collections::BTreeMap;

use serde::Serialize;
use snapshot::{
    ApprovedExecutionContext, ApprovedTurn, BaselineFiles, EXECUTION_CONTEXT_SCHEMA_VERSION,
    MAX_READ_ONLY_INSPECTION_BYTES, MAX_READ_ONLY_INSPECTION_FILES, MAX_REPOSITORY_FILES, RepoPath,
    SnapshotError, select_read_only_files,
};

use crate::error::TurnError;
use crate::feedback::ReviewFeedback;
use crate::follow_up::{StartFrom, WireStart};
use crate::limits::MAX_REQUEST_BYTES;
use container::ContainerError;

/// The `build_family` every turn request carries.
pub const BUILD_FAMILY: &str = "app_bundle";
/// The `change_class` every turn request carries.
pub const CHANGE_CLASS: &str = "patch";

/// `CodingWorkerRequest`, the host-built request for one turn.
#[derive(Debug, Clone)]
pub struct CodingWorkerRequest {
    pub app_id: String,
    pub target_app_id: Option<String>,
    pub build_family: String,
    pub build_key: String,
    pub change_class: String,
    pub raw_user_request: String,
    /// Selected editable files (exact baseline text).
    pub files: BaselineFiles,
    /// Approved read-only inspection files.
    pub read_only_files: BaselineFiles,
    /// A follow-up turn's review feedback (untrusted context for the agent); `None` otherwise,
    /// and then the stdin payload is exactly the reference's.
    pub review_feedback: Option<ReviewFeedback>,
    /// A follow-up turn that continues an earlier candidate: its starting tree (the container
    /// starts from it; `files` stays the baseline every host check uses).
    pub start_from: Option<StartFrom>,
}

impl CodingWorkerRequest {
    /// The request an approval describes, for `task` (which must equal the approved request).
    #[must_use]
    pub fn for_context(
        context: &ApprovedExecutionContext,
        task: &str,
        files: BaselineFiles,
        read_only_files: BaselineFiles,
    ) -> Self {
        Self {
            app_id: context.app_id().to_owned(),
            target_app_id: None,
            build_family: BUILD_FAMILY.to_owned(),
            build_key: context.build_registry_id().to_owned(),
            change_class: CHANGE_CLASS.to_owned(),
            raw_user_request: task.to_owned(),
            files,
            read_only_files,
            review_feedback: None,
            start_from: None,
        }
    }
}

/// The container's stdin document (reference §10.3), keys in this order.
#[derive(Debug, Serialize)]
struct StdinPayload<'a> {
    app_id: &'a str,
    build_family: &'a str,
    build_record_id: &'a str,
    change_class: &'a str,
    raw_user_request: &'a str,
    files: BTreeMap<&'a str, &'a str>,
    read_only_files: BTreeMap<&'a str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    create_paths: Option<Vec<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delete_paths: Option<Vec<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    review_feedback: Option<&'a ReviewFeedback>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_from: Option<WireStart<'a>>,
}

fn sorted_paths(paths: &[RepoPath]) -> Vec<&str> {
    let mut v: Vec<&str> = paths.iter().map(RepoPath::as_str).collect();
    v.sort_unstable();
    v
}

/// Serialises the stdin payload and applies its 20 MiB cap.
///
/// # Errors
/// `REPOSITORY_DOCKER_REQUEST_BUDGET`.
pub fn stdin_payload(
    request: &CodingWorkerRequest,
    context: &ApprovedExecutionContext,
) -> Result<Vec<u8>, TurnError> {
    let grants = !context.create_paths().is_empty() || !context.delete_paths().is_empty();
    let doc = StdinPayload {
        app_id: &request.app_id,
        build_family: &request.build_family,
        build_record_id: &request.build_key,
        change_class: &request.change_class,
        raw_user_request: &request.raw_user_request,
        files: request
            .files
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        read_only_files: request
            .read_only_files
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        create_paths: grants.then(|| sorted_paths(context.create_paths())),
        delete_paths: grants.then(|| sorted_paths(context.delete_paths())),
        review_feedback: request.review_feedback.as_ref(),
        start_from: request.start_from.as_ref().map(StartFrom::wire),
    };
    let bytes = serde_json::to_vec(&doc).map_err(|_| TurnError::RequestBudget {
        limit: MAX_REQUEST_BYTES,
    })?;
    if bytes.len() > MAX_REQUEST_BYTES {
        return Err(TurnError::RequestBudget {
            limit: MAX_REQUEST_BYTES,
        });
    }
    Ok(bytes)
}

/// Reference §10.2 steps 6 and 7: the file budget and the request's fields against the
/// approval. They come before the approval is bound to the request's files
/// ([`ApprovedTurn::new`]), and [`verify_turn_request`] repeats them.
///
/// # Errors
/// `REPOSITORY_DOCKER_FILE_BUDGET`, `…_CONTEXT_MISMATCH`.
pub(crate) fn check_request_fields(
    request: &CodingWorkerRequest,
    context: &ApprovedExecutionContext,
) -> Result<(), TurnError> {
    let total = request.files.len() + context.create_paths().len();
    if !(1..=MAX_REPOSITORY_FILES).contains(&total)
        || !context
            .delete_paths()
            .iter()
            .all(|d| request.files.contains_key(d))
    {
        return Err(TurnError::FileBudget);
    }
    let checks: [(bool, &'static str); 7] = [
        (
            context.schema_version() == EXECUTION_CONTEXT_SCHEMA_VERSION,
            "schema_version",
        ),
        (request.app_id == context.app_id(), "app_id"),
        (
            request
                .target_app_id
                .as_deref()
                .is_none_or(|t| t == context.app_id()),
            "target_app_id",
        ),
        (request.build_family == BUILD_FAMILY, "build_family"),
        (
            request.build_key == context.build_registry_id(),
            "build_key",
        ),
        (request.change_class == CHANGE_CLASS, "change_class"),
        (
            request.raw_user_request == context.raw_request(),
            "raw_user_request",
        ),
    ];
    if let Some((_, field)) = checks.iter().find(|(ok, _)| !ok) {
        return Err(TurnError::from(ContainerError::ContextMismatch { field }));
    }
    Ok(())
}

/// Reference §10.2 steps 6–8 for a request under the approved turn `approved`: budget, context
/// match, the request's editable files being the approved baseline (checked when `approved` was
/// bound), and the read-only selection.
///
/// # Errors
/// `REPOSITORY_DOCKER_FILE_BUDGET`, `…_CONTEXT_MISMATCH`, `REPOSITORY_PATCH_BASELINE_SET` when
/// the request carries other editable files than `approved` binds, or the read-only selection's
/// `REPOSITORY_PATCH_*`.
pub fn verify_turn_request(
    request: &CodingWorkerRequest,
    approved: &ApprovedTurn<'_>,
) -> Result<(), TurnError> {
    let context = approved.context();
    check_request_fields(request, context)?;
    if !std::ptr::eq(&request.files, approved.baseline()) && request.files != *approved.baseline() {
        return Err(TurnError::from(SnapshotError::BaselineSet));
    }
    if !request.read_only_files.is_empty() {
        let read_only: Vec<RepoPath> = request.read_only_files.keys().cloned().collect();
        select_read_only_files(
            context,
            approved.snapshot(),
            &read_only,
            &request.read_only_files,
            approved.policy(),
            MAX_READ_ONLY_INSPECTION_FILES,
            MAX_READ_ONLY_INSPECTION_BYTES,
        )?;
    }
    Ok(())
}
