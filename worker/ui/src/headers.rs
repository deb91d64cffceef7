//! The security headers of every UI response.

/// The page policy: nothing but same-origin styles and images, forms posting to this origin,
/// no framing, no `<base>`; violations reported to [`CSP_REPORT_PATH`]. No script source at
/// all: the UI ships no JavaScript.
pub const PAGE_CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; report-uri /ui/csp-report";
/// The policy of raw file views (`text/plain`): sandboxed, nothing loads.
pub const RAW_CSP: &str = "default-src 'none'; sandbox; frame-ancestors 'none'";
/// Where browsers send CSP violation reports.
pub const CSP_REPORT_PATH: &str = "/ui/csp-report";

/// The headers every UI response carries besides its CSP: name, value.
pub const COMMON: [(&str, &str); 5] = [
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
];

/// The one stylesheet.
pub const STYLESHEET: &str = include_str!("../static/ui.css");
