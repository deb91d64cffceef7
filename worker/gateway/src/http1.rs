//! Strict parse of one tunnelled HTTP/1.1 request head. It accepts exactly the grammar of RFC 9112
//! for a request the gateway serves and refuses everything a smuggling or differential attack
//! needs: bare CR or LF, obs-fold, whitespace before the colon, non-token names, control bytes or
//! obs-text in values, any transfer-encoding, a missing, duplicate or non-decimal content-length,
//! absolute-form, authority-form (CONNECT) and asterisk-form targets, other versions.

use crate::error::GatewayError;
use crate::provider::{Provider, Route, RouteKind, RouteMethod};

/// Caps of one request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadLimits {
    /// Bytes of the request line and all header lines, with their CRLFs and the final CRLF.
    pub max_head_bytes: usize,
    /// Header lines.
    pub max_headers: usize,
    /// Declared body length.
    pub max_body_bytes: u64,
}

impl Default for HeadLimits {
    fn default() -> Self {
        Self {
            max_head_bytes: 32 * 1024,
            max_headers: 64,
            max_body_bytes: 8 * 1_048_576,
        }
    }
}

/// A parsed request head: the path, the route it matched, the headers (lower-case names) and the
/// body length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The origin-form target (path and query) as sent.
    pub path: String,
    /// The provider's route the method and target matched.
    pub route: Route,
    /// Header lines in order, names lower-cased, values without surrounding whitespace.
    pub headers: Vec<(String, String)>,
    /// The declared body length.
    pub content_length: u64,
}

impl RequestHead {
    /// The value of a single-valued header.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        first_value(&self.headers, name)
    }
}

/// The first value of header `name` in `(name, value)` pairs.
pub(crate) fn first_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

/// Headers that must appear at most once.
const SINGLE: &[&str] = &[
    "host",
    "content-type",
    "accept",
    "authorization",
    "connection",
    "user-agent",
];

/// Headers that would change the exchange (continue, trailers, proxies; an upgrade has its own
/// code, see [`is_upgrade`]).
const REFUSED: &[&str] = &[
    "expect",
    "te",
    "trailer",
    "proxy-authorization",
    "proxy-connection",
    "http2-settings",
];

/// Parses the head at the start of `buf` and matches it to one of `provider`'s routes.
///
/// Returns `Ok(None)` while the head is incomplete (and still within the caps), and
/// `Ok(Some((head, n)))` once it is complete, `n` being its length in bytes.
///
/// Order of the checks: the request line's grammar, each header line's grammar, an upgrade
/// (refused whatever the method and path, `PATCH_CANDIDATE_GATEWAY_UPGRADE`), the route (method,
/// exact path, exact query; a refused side call is `PATCH_CANDIDATE_GATEWAY_SIDE_CALL`), then
/// the framing headers.
///
/// # Errors
/// The first rule the bytes break (see [`GatewayError`]); bytes seen so far are enough to refuse
/// a bare LF or CR without waiting for the rest.
pub fn parse_head(
    buf: &[u8],
    limits: &HeadLimits,
    provider: &dyn Provider,
) -> Result<Option<(RequestHead, usize)>, GatewayError> {
    let Some(end) = head_end(buf, limits)? else {
        return Ok(None);
    };
    let head = buf.get(..end).ok_or(GatewayError::Header)?;
    // `head` ends with CRLF CRLF; split it into lines without their CRLF.
    let body = head.strip_suffix(b"\r\n\r\n").ok_or(GatewayError::Header)?;
    let mut lines = body
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or(GatewayError::RequestLine)?;
    let (method, target) = parse_request_line(request_line)?;
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in lines {
        if headers.len() >= limits.max_headers {
            return Err(GatewayError::HeadersSize {
                limit: limits.max_headers,
            });
        }
        headers.push(parse_header_line(line)?);
    }
    if is_upgrade(&headers) {
        return Err(GatewayError::Upgrade);
    }
    let route = provider.route(method, target)?;
    if route.kind == RouteKind::Refused {
        return Err(GatewayError::SideCall);
    }
    let content_length = match (check_headers(&headers)?, route.method) {
        (Some(n), RouteMethod::Post) => n,
        // A GET carries no body: no content-length, or zero.
        (None | Some(0), RouteMethod::Get) => 0,
        (None, RouteMethod::Post) | (Some(_), RouteMethod::Get) => {
            return Err(GatewayError::ContentLength);
        }
    };
    if content_length > limits.max_body_bytes {
        return Err(GatewayError::BodySize {
            limit: limits.max_body_bytes,
        });
    }
    Ok(Some((
        RequestHead {
            path: String::from_utf8_lossy(target).into_owned(),
            route,
            headers,
            content_length,
        },
        end,
    )))
}

/// Finds the end of the head (index after CRLF CRLF), refusing bare CR/LF and oversize heads.
fn head_end(buf: &[u8], limits: &HeadLimits) -> Result<Option<usize>, GatewayError> {
    let mut previous = 0u8;
    let mut line_start = 0usize;
    for (i, &b) in buf.iter().enumerate() {
        if i >= limits.max_head_bytes {
            return Err(GatewayError::HeadersSize {
                limit: limits.max_head_bytes,
            });
        }
        if previous == b'\r' && b != b'\n' {
            return Err(GatewayError::Header);
        }
        if b == b'\n' {
            if previous != b'\r' {
                return Err(GatewayError::Header);
            }
            if i + 1 - line_start == 2 && line_start > 0 {
                return Ok(Some(i + 1));
            }
            if i + 1 - line_start == 2 {
                // An empty first line: no request line.
                return Err(GatewayError::RequestLine);
            }
            line_start = i + 1;
        }
        previous = b;
    }
    Ok(None)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Checks the request line's grammar; returns the method and the origin-form target.
fn parse_request_line(line: &[u8]) -> Result<(&[u8], &[u8]), GatewayError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(GatewayError::RequestLine);
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) || target.is_empty() {
        return Err(GatewayError::RequestLine);
    }
    if method == b"CONNECT" || target.first() != Some(&b'/') || target.starts_with(b"//") {
        return Err(GatewayError::Target);
    }
    if !target.iter().all(|&b| b.is_ascii_graphic()) {
        return Err(GatewayError::RequestLine);
    }
    if version != b"HTTP/1.1" {
        let shaped = version.len() == 8
            && version.starts_with(b"HTTP/")
            && version.get(5).is_some_and(u8::is_ascii_digit)
            && version.get(6) == Some(&b'.')
            && version.get(7).is_some_and(u8::is_ascii_digit);
        return Err(if shaped {
            GatewayError::Version
        } else {
            GatewayError::RequestLine
        });
    }
    Ok((method, target))
}

/// An `upgrade` header, or `upgrade` among the tokens of a `connection` header (any case).
fn is_upgrade(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(n, v)| {
        n == "upgrade"
            || (n == "connection"
                && v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade")))
    })
}

fn parse_header_line(line: &[u8]) -> Result<(String, String), GatewayError> {
    // obs-fold: a continuation line starting with whitespace.
    if line.first().is_some_and(|&b| b == b' ' || b == b'\t') {
        return Err(GatewayError::Header);
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(GatewayError::Header)?;
    let (name, rest) = line.split_at_checked(colon).ok_or(GatewayError::Header)?;
    let value = rest.get(1..).ok_or(GatewayError::Header)?;
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(GatewayError::Header);
    }
    if !value
        .iter()
        .all(|&b| b == b' ' || b == b'\t' || b.is_ascii_graphic())
    {
        return Err(GatewayError::Header);
    }
    let value = value.trim_ascii();
    let name = String::from_utf8(name.to_ascii_lowercase()).map_err(|_| GatewayError::Header)?;
    let value = String::from_utf8(value.to_vec()).map_err(|_| GatewayError::Header)?;
    Ok((name, value))
}

/// Checks the framing headers; returns the content-length, if one was sent.
fn check_headers(headers: &[(String, String)]) -> Result<Option<u64>, GatewayError> {
    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        return Err(GatewayError::TransferEncoding);
    }
    if headers.iter().any(|(n, _)| REFUSED.contains(&n.as_str())) {
        return Err(GatewayError::HeaderRefused);
    }
    let lengths: Vec<&str> = headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.as_str())
        .collect();
    let length = match lengths.as_slice() {
        [] => None,
        [length] => {
            if length.is_empty() || length.len() > 19 || !length.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(GatewayError::ContentLength);
            }
            Some(
                length
                    .parse::<u64>()
                    .map_err(|_| GatewayError::ContentLength)?,
            )
        }
        _ => return Err(GatewayError::ContentLength),
    };
    for single in SINGLE {
        if headers.iter().filter(|(n, _)| n == single).count() > 1 {
            return Err(GatewayError::HeaderDuplicate);
        }
    }
    if !headers.iter().any(|(n, _)| n == "host") {
        return Err(GatewayError::Header);
    }
    Ok(length)
}
