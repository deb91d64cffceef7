//! The state directory of this host's own files (the host id), located by the `state` crate.

use std::path::PathBuf;

/// `${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}` ([`::state::StateDir::locate`]).
///
/// # Errors
/// `PATCH_CANDIDATE_STATE` when neither variable is set.
pub(crate) fn state_dir() -> Result<PathBuf, ::state::StateError> {
    ::state::StateDir::locate().map(::state::StateDir::into_path)
}
