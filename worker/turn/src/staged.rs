//! The private staging tree of one turn, owned: removed when dropped, on every path.

/// Owns the private staging tree of one turn: removed when dropped, whatever happened.
#[derive(Debug)]
pub(crate) struct StagedTree {
    workspace: archive::StagedWorkspace,
}

impl StagedTree {
    pub(crate) fn new(workspace: archive::StagedWorkspace) -> Self {
        Self { workspace }
    }

    /// The staged workspace.
    pub(crate) fn workspace(&self) -> &archive::StagedWorkspace {
        &self.workspace
    }

    /// Removes the tree now and reports the result (dropping afterwards is a no-op).
    ///
    /// # Errors
    /// The archive crate's cleanup error.
    pub(crate) fn remove(self) -> Result<(), archive::ArchiveError> {
        self.workspace.cleanup()
    }
}

impl Drop for StagedTree {
    fn drop(&mut self) {
        // Idempotent: after `remove` this does nothing.
        if let Err(e) = self.workspace.cleanup() {
            tracing::warn!("{}: staging tree not removed", e.code());
        }
    }
}
