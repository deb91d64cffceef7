//! The operator's state directory (image records, usage ledger, candidates, host id).

use std::path::PathBuf;

use crate::error::ContainerError;

/// `${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}`.
///
/// # Errors
/// `PATCH_CANDIDATE_STATE` when neither variable is set.
pub fn state_dir() -> Result<PathBuf, ContainerError> {
    if let Some(dir) = std::env::var_os("PATCH_CANDIDATE_STATE_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(ContainerError::State {
            detail: "HOME is not set",
        })?;
    Ok(PathBuf::from(home).join(".local/state/patch-candidate"))
}
