//! Publication from the review UI: the service's one publish action
//! ([`review_api::publish`](super::super::review_api::publish)) to the operator's
//! `serve --publish-remote`; without one the UI offers no publish form and the POST is refused
//! with the action's own code.

use std::sync::Arc;

use axum::http::StatusCode;
use vocab::JobId;

use super::super::review_api::{self, PublishBody};
use super::super::{ApiError, Caller};
use super::PublishForm;
use crate::Shared;

/// Whether this service can publish (an operator-configured remote).
pub(crate) fn configured(sh: &Shared) -> bool {
    sh.opts.publish.is_some()
}

/// Publishes the accepted candidate of `id` to a new branch of the configured remote (base
/// branch `main` rechecked; no rebase from the UI).
pub(crate) async fn publish(
    sh: &Arc<Shared>,
    id: &JobId,
    caller: &Caller,
    form: &PublishForm,
) -> Result<(), ApiError> {
    if form.branch.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_UI_FORM",
            "PATCH_CANDIDATE_UI_FORM: name the branch to create",
        ));
    }
    let body = PublishBody {
        candidate_digest: form.candidate_digest.clone(),
        branch: form.branch.trim().to_owned(),
        base: None,
        rebase: false,
    };
    review_api::publish(sh, id, caller, &body).await?;
    tracing::info!(code = "PATCH_CANDIDATE_UI_PUBLISHED", job = %id, "published from the review UI");
    Ok(())
}
