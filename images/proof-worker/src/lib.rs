//! In-container proof worker: `turn-runner` (ACP client) and `fake-agent` (synthetic ACP agent).
#![forbid(unsafe_code)]
