//! The review web UI of `patch-candidate serve`, as a library: view models, the auto-escaping
//! templates (askama: compile-time checked, every value HTML-escaped; no `|safe` anywhere), the
//! diff renderer (unified and split, line numbers, whitespace-insensitive mode, hidden
//! characters made visible, "too big to show" with a size), the sessions and CSRF tokens, and the
//! security headers. The service owns the routes and calls into this crate; nothing here does
//! I/O.
#![forbid(unsafe_code)]

mod diff;
mod error;
mod headers;
mod session;
mod text;
mod views;

pub use diff::{Body, DiffOptions, Rendered, render as render_diff};
pub use error::{ERROR_CODES, UiError};
pub use headers::{COMMON, CSP_REPORT_PATH, PAGE_CSP, RAW_CSP, STYLESHEET};
pub use session::{FAILURE_WINDOW, SESSION_LIFETIME, Session, Sessions, SignInForm};
pub use text::Shown;
pub use views::{
    AttemptItem, AuditItem, CandidatePage, ChainItem, DecisionItem, EventItem, FileItem,
    FindingItem, GateItem, JobItem, JobPage, JobsPage, LONG_CHARS, MAX_PAGE_DIFF_BYTES,
    MessagePage, PAGE_SIZE, SignInPage, SignedIn, StateCount, UsageItem, UsagePage, lines, short,
    utc,
};
