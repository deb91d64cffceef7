//! [`TurnConfig`]: the operator's validated turn configuration. Its fields are private, so the
//! range checks cannot be bypassed and the derived wall deadline can never overflow.

use std::time::Duration;

use crate::error::TurnError;
use crate::limits::{MAX_STDERR_BYTES, MAX_STDOUT_BYTES, MAX_TURN_ARCHIVE_BYTES};
use container::JobBinding;
use container::{ImageId, ImageReference, RuntimeName};
use container::{MAX_WALL_SECONDS, WALL_SLACK};

/// The operator's turn configuration (reference §10.2 steps 1–4). The image ID is pinned when an
/// operator approves a build; it is never taken from a request or resolved from the tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnConfig {
    image: ImageReference,
    expected_image_id: ImageId,
    max_wall_seconds: u64,
    max_archive_bytes: usize,
    runtime: Option<RuntimeName>,
    max_stdout_bytes: usize,
    max_stderr_bytes: usize,
    job: Option<JobBinding>,
    build_tmp_mib: Option<u64>,
}

/// The largest build `/tmp` a live image's environment may ask for, in MiB (its pages count
/// against the turn's memory limit).
pub const MAX_BUILD_TMP_MIB: u64 = 4096;

impl TurnConfig {
    /// Validates the budgets; the image reference and ID are already typed (parse them in the
    /// reference order: image, then ID).
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_WALL_BUDGET` unless `1..=MAX_WALL_SECONDS`,
    /// `REPOSITORY_DOCKER_ARCHIVE_BUDGET` unless `1..=MAX_TURN_ARCHIVE_BYTES`.
    pub fn new(
        image: ImageReference,
        expected_image_id: ImageId,
        max_wall_seconds: u64,
        max_archive_bytes: usize,
    ) -> Result<Self, TurnError> {
        if !(1..=MAX_WALL_SECONDS).contains(&max_wall_seconds) {
            return Err(TurnError::WallBudget);
        }
        if !(1..=MAX_TURN_ARCHIVE_BYTES).contains(&max_archive_bytes) {
            return Err(TurnError::ArchiveBudget);
        }
        Ok(Self {
            image,
            expected_image_id,
            max_wall_seconds,
            max_archive_bytes,
            runtime: None,
            max_stdout_bytes: MAX_STDOUT_BYTES,
            max_stderr_bytes: MAX_STDERR_BYTES,
            job: None,
            build_tmp_mib: None,
        })
    }

    /// Parses the operator arguments in the reference order, then validates as [`Self::new`].
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_IMAGE`, `…_EXPECTED_IMAGE_ID`, `…_WALL_BUDGET`, `…_ARCHIVE_BUDGET`.
    pub fn parse(
        image: &str,
        expected_image_id: &str,
        max_wall_seconds: u64,
        max_archive_bytes: usize,
    ) -> Result<Self, TurnError> {
        let image = image.parse()?;
        let expected_image_id = expected_image_id.parse()?;
        Self::new(
            image,
            expected_image_id,
            max_wall_seconds,
            max_archive_bytes,
        )
    }

    /// Runs turns under `runtime` (e.g. `runsc`), verified by the pre-start inspection.
    #[must_use]
    pub fn with_runtime(mut self, runtime: Option<RuntimeName>) -> Self {
        self.runtime = runtime;
        self
    }

    /// Binds the turn to a service job: its container carries the job labels the service's
    /// janitor decides by.
    #[must_use]
    pub fn with_job(mut self, job: Option<JobBinding>) -> Self {
        self.job = job;
        self
    }

    /// Gives the turn's `/tmp` `mib` MiB and `exec`, for an environment whose agent builds code
    /// there (clamped to [`MAX_BUILD_TMP_MIB`]); `None` keeps the turn's default `/tmp`.
    #[must_use]
    pub fn with_build_tmp_mib(mut self, mib: Option<u64>) -> Self {
        self.build_tmp_mib = mib.map(|m| m.clamp(1, MAX_BUILD_TMP_MIB));
        self
    }

    /// The build `/tmp` size in MiB, when the turn's environment asks for one.
    #[must_use]
    pub fn build_tmp_mib(&self) -> Option<u64> {
        self.build_tmp_mib
    }

    /// The job binding of a service turn.
    #[must_use]
    pub fn job(&self) -> Option<&JobBinding> {
        self.job.as_ref()
    }

    /// A smaller stdout cap, for the streaming-cap unit tests.
    #[cfg(test)]
    pub(crate) fn with_stdout_cap(mut self, max_stdout_bytes: usize) -> Self {
        self.max_stdout_bytes = max_stdout_bytes.min(MAX_STDOUT_BYTES);
        self
    }

    /// The image tag the operator named.
    #[must_use]
    pub fn image(&self) -> &ImageReference {
        &self.image
    }

    /// The approved immutable image ID.
    #[must_use]
    pub fn expected_image_id(&self) -> &ImageId {
        &self.expected_image_id
    }

    /// The wall budget in seconds (`1..=MAX_WALL_SECONDS`).
    #[must_use]
    pub fn max_wall_seconds(&self) -> u64 {
        self.max_wall_seconds
    }

    /// The whole life of a turn: wall budget plus [`WALL_SLACK`]. Cannot overflow: the budget is
    /// at most [`MAX_WALL_SECONDS`].
    #[must_use]
    pub fn turn_lifetime(&self) -> Duration {
        Duration::from_secs(self.max_wall_seconds).saturating_add(WALL_SLACK)
    }

    /// The archive budget in bytes.
    #[must_use]
    pub fn max_archive_bytes(&self) -> usize {
        self.max_archive_bytes
    }

    /// The OCI runtime, when one is configured.
    #[must_use]
    pub fn runtime(&self) -> Option<&RuntimeName> {
        self.runtime.as_ref()
    }

    /// The stdout cap applied while streaming.
    #[must_use]
    pub fn max_stdout_bytes(&self) -> usize {
        self.max_stdout_bytes
    }

    /// The stderr cap applied while streaming.
    #[must_use]
    pub fn max_stderr_bytes(&self) -> usize {
        self.max_stderr_bytes
    }
}
