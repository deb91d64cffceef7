//! The worker's state directory, `${PATCH_CANDIDATE_STATE_DIR:-$HOME/.local/state/patch-candidate}`:
//! one owner for where it is ([`StateDir::locate`]), what it holds (one [`Entry`] per file or
//! folder, documented in docs/WORKER.md), how it is created (0700, [`create_private_dir`]), how
//! its records are written (0600, atomically: `write_private_atomic`) and read
//! ([`read_record`]), and the lock of `serve` ([`StateDir::lock_serve`]).
//!
//! The directory is the operator's: paths into it are ambient by design; callers that write many
//! files open it (or a folder of it) once as a cap-std [`cap_std::fs::Dir`].

mod bounded;
mod create;
mod dir;
mod entries;
mod error;
mod lock;
mod read;
mod write;

pub use bounded::{BoundedReadError, open_regular_file, read_bounded_file};
pub use create::{OpenDirError, create_private_dir, open_or_create_dir};
pub use dir::StateDir;
pub use entries::{
    API_TOKEN, CANDIDATES, Entry, GATE_BASELINES, GATE_IMAGES, HOST_ID, IMAGES, JOBS_DATABASE,
    LIVE_IMAGE_CLAUDE, LIVE_IMAGE_CODEX, LIVE_IMAGE_GEMINI, MIRRORS, REVIEWS, SERVE_STAGING,
    SERVICE_HOST_ID, USAGE_LEDGER,
};
pub use error::{ERROR_CODES, STATE_CODE, StateError};
pub use lock::LockError;
pub use read::{RecordDetails, read_record};
pub use write::{WriteError, write_atomic};
