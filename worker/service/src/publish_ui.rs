//! Publication from the review UI: the service publishes only to a remote its operator
//! configured on `serve`; without one the UI offers no publish form and refuses the POST.

use axum::http::StatusCode;
use jobs::JobId;

use super::Shared;
use super::http::ApiError;
use super::ui_routes::PublishForm;

/// Whether this service can publish (an operator-configured remote).
pub(crate) fn configured(_sh: &Shared) -> bool {
    false
}

/// Publishes the accepted candidate of `id` to a new branch of the configured remote.
pub(crate) async fn publish(
    sh: &Shared,
    _id: &JobId,
    _principal: &str,
    form: &PublishForm,
) -> Result<(), ApiError> {
    if form.branch.trim().is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "PATCH_CANDIDATE_UI_FORM",
            "PATCH_CANDIDATE_UI_FORM: name the branch to create",
        ));
    }
    if !configured(sh) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "PATCH_CANDIDATE_UI_PUBLISH_UNCONFIGURED",
            "PATCH_CANDIDATE_UI_PUBLISH_UNCONFIGURED: this service has no publication remote",
        ));
    }
    Ok(())
}
