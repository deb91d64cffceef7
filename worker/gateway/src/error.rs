//! The gateway's refusals. Each has a stable code (it goes into the turn's events and into the
//! JSON error body the agent receives) and the HTTP status the agent sees. No variant carries a
//! byte of the agent's request, of the upstream's answer, or of the credential.

/// `PATCH_CANDIDATE_GATEWAY_CONFIG`: the operator's gateway configuration is not valid (also the
/// command line's code when it disagrees with `--model`).
pub const CONFIG_CODE: &str = "PATCH_CANDIDATE_GATEWAY_CONFIG";

/// Every code [`GatewayError::code`], [`GatewaySetupError::code`] and
/// `UnknownProvider::code` can return, for documentation and
/// contract tests.
pub const ERROR_CODES: &[&str] = vocab::code_table!(
    GatewayError::CODES,
    GatewaySetupError::CODES,
    &["PATCH_CANDIDATE_GATEWAY_PROVIDER"],
);

/// Why the gateway refused or cut a tunnelled model request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum GatewayError {
    /// The request line is not `METHOD SP TARGET SP HTTP/x.y CRLF`.
    #[error("PATCH_CANDIDATE_GATEWAY_REQUEST_LINE: malformed request line")]
    RequestLine,
    /// A method other than the route's.
    #[error("PATCH_CANDIDATE_GATEWAY_METHOD: the method is not the route's")]
    Method,
    /// Absolute-form, authority-form (CONNECT), asterisk-form or an unusual origin-form target.
    #[error("PATCH_CANDIDATE_GATEWAY_TARGET: only an origin-form path is served")]
    Target,
    /// An origin-form path that is none of the provider's routes (a model in the path that is not
    /// a plain model name included).
    #[error("PATCH_CANDIDATE_GATEWAY_PATH: the path is not one of the provider's routes")]
    Path,
    /// A protocol version other than HTTP/1.1.
    #[error("PATCH_CANDIDATE_GATEWAY_VERSION: only HTTP/1.1 is served")]
    Version,
    /// The path is one of the provider's, the query string is not the route's exact one.
    #[error("PATCH_CANDIDATE_GATEWAY_QUERY: the query string is not the route's")]
    Query,
    /// A side call of the provider the gateway answers itself, never forwarded.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_SIDE_CALL: this side call is answered by the gateway, not forwarded"
    )]
    SideCall,
    /// A protocol upgrade (`upgrade:` or `connection: upgrade`, e.g. a WebSocket handshake).
    #[error("PATCH_CANDIDATE_GATEWAY_UPGRADE: protocol upgrades (WebSocket) are refused")]
    Upgrade,
    /// A header line that is not `name: value CRLF` (bare CR or LF, obs-fold, bad characters).
    #[error("PATCH_CANDIDATE_GATEWAY_HEADER: malformed header line")]
    Header,
    /// Too many header lines or too many header bytes.
    #[error("PATCH_CANDIDATE_GATEWAY_HEADERS_SIZE: headers exceed {limit} (count or bytes)")]
    HeadersSize {
        /// The cap that was hit.
        limit: usize,
    },
    /// A header that must appear at most once appeared twice.
    #[error("PATCH_CANDIDATE_GATEWAY_HEADER_DUPLICATE: a single-valued header appears twice")]
    HeaderDuplicate,
    /// Any transfer-encoding (the gateway reads content-length bodies only).
    #[error(
        "PATCH_CANDIDATE_GATEWAY_TRANSFER_ENCODING: transfer-encoding is refused; send content-length"
    )]
    TransferEncoding,
    /// No content-length, or one that is not plain decimal digits.
    #[error("PATCH_CANDIDATE_GATEWAY_CONTENT_LENGTH: a single decimal content-length is required")]
    ContentLength,
    /// `expect`, `upgrade` and other headers that change the exchange.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_HEADER_REFUSED: a header that changes the exchange is refused"
    )]
    HeaderRefused,
    /// The declared body exceeds the per-request cap.
    #[error("PATCH_CANDIDATE_GATEWAY_BODY_SIZE: body exceeds {limit} bytes")]
    BodySize {
        /// The cap.
        limit: u64,
    },
    /// The request did not arrive complete before the read deadline.
    #[error("PATCH_CANDIDATE_GATEWAY_READ_TIMEOUT: the request did not arrive within {millis} ms")]
    ReadTimeout {
        /// The deadline.
        millis: u64,
    },
    /// The channel closed before the request was complete, or bytes followed it.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_INCOMPLETE: the request is incomplete or followed by extra bytes"
    )]
    Incomplete,
    /// The body is not one JSON object of the provider's shape.
    #[error("PATCH_CANDIDATE_GATEWAY_BODY: the body is not a JSON request of the provider's shape")]
    Body,
    /// The body holds more JSON values (object keys included) than the cap (pre-scan).
    #[error("PATCH_CANDIDATE_GATEWAY_BODY_VALUES: the body holds more than {limit} JSON values")]
    BodyValues {
        /// The cap.
        limit: u64,
    },
    /// The body nests arrays and objects deeper than the cap (pre-scan).
    #[error("PATCH_CANDIDATE_GATEWAY_BODY_DEPTH: the body nests deeper than {limit}")]
    BodyDepth {
        /// The cap.
        limit: u32,
    },
    /// A string of the body is longer than the cap (pre-scan).
    #[error("PATCH_CANDIDATE_GATEWAY_BODY_STRING: a string of the body exceeds {limit} bytes")]
    BodyString {
        /// The cap.
        limit: u64,
    },
    /// A key that differs from a key policy reads only by case or `_` (`"Tools"`, `"MODEL"`,
    /// `"Image_URL"`, `"fileURI"`), so that a lenient JSON reader upstream could take it for the
    /// key the gateway checked.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_BODY_KEY: a key spelled like a policy key in another case is refused"
    )]
    BodyKey,
    /// A content part names a URL the provider would fetch (any scheme but `data:`), or a source
    /// that is not inline data.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_CONTENT_URL: a content part asks the provider to fetch a URL; send it inline as data"
    )]
    ContentUrl,
    /// A content part names a file stored at the provider that the operator did not allow.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_CONTENT_FILE: a content part references a provider-stored file the operator did not allow"
    )]
    ContentFile,
    /// The request refers to state stored at the provider (an earlier response, a conversation,
    /// a stored prompt, an item reference, cached content) or asks for a background run.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_STORED_STATE: the request refers to provider-stored state or asks for a background run"
    )]
    StoredState,
    /// `stream` is not `true`.
    #[error("PATCH_CANDIDATE_GATEWAY_STREAM: only streamed requests are served")]
    Stream,
    /// The model is not in the operator's allowlist.
    #[error("PATCH_CANDIDATE_GATEWAY_MODEL: the model is not allowed")]
    Model,
    /// A tool the operator refuses.
    #[error("PATCH_CANDIDATE_GATEWAY_TOOL: the request offers a refused tool")]
    Tool,
    /// The per-turn request count is spent.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_BUDGET_REQUESTS: more than {limit} model requests in one turn"
    )]
    BudgetRequests {
        /// The cap.
        limit: u64,
    },
    /// The per-turn request bytes are spent.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_BUDGET_REQUEST_BYTES: request bytes exceed {limit} in one turn"
    )]
    BudgetRequestBytes {
        /// The cap.
        limit: u64,
    },
    /// The per-turn response bytes are spent (the answer in flight is cut).
    #[error(
        "PATCH_CANDIDATE_GATEWAY_BUDGET_RESPONSE_BYTES: response bytes exceed {limit} in one turn"
    )]
    BudgetResponseBytes {
        /// The cap.
        limit: u64,
    },
    /// The per-turn token budget is spent.
    #[error("PATCH_CANDIDATE_GATEWAY_BUDGET_TOKENS: tokens exceed {limit} in one turn")]
    BudgetTokens {
        /// The cap.
        limit: u64,
    },
    /// An earlier answer ended without a usage count, so the token budget cannot be enforced.
    #[error("PATCH_CANDIDATE_GATEWAY_USAGE_MISSING: an earlier answer carried no usage count")]
    UsageMissing,
    /// The upstream could not be reached or broke the exchange.
    #[error("PATCH_CANDIDATE_GATEWAY_UPSTREAM: the model upstream failed")]
    Upstream,
    /// The upstream answered with a content or transfer coding other than identity (and
    /// chunked): the credential scrubber cannot read a compressed body, so none of it is sent on.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_UPSTREAM_ENCODING: the model upstream answered with a content coding other than identity"
    )]
    UpstreamEncoding,
    /// The upstream did not answer (or went silent) within the deadline.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_UPSTREAM_TIMEOUT: the model upstream was silent for {millis} ms"
    )]
    UpstreamTimeout {
        /// The deadline.
        millis: u64,
    },
    /// The upstream answered with a non-success status (passed on to the agent).
    #[error("PATCH_CANDIDATE_GATEWAY_UPSTREAM_STATUS: the model upstream answered {status}")]
    UpstreamStatus {
        /// The status.
        status: u16,
    },
    /// The turn ended (or the channel was reset) while the request was in flight.
    #[error("PATCH_CANDIDATE_GATEWAY_CANCELLED: the turn ended while the request was in flight")]
    Cancelled,
}

impl GatewayError {
    /// The HTTP status the agent receives for this refusal.
    #[must_use]
    pub fn status(&self) -> u16 {
        match self {
            Self::RequestLine
            | Self::Target
            | Self::Header
            | Self::HeaderDuplicate
            | Self::Incomplete
            | Self::Body
            | Self::BodyDepth { .. }
            | Self::BodyKey
            | Self::Stream => 400,
            Self::Method => 405,
            Self::Path | Self::Query | Self::SideCall => 404,
            Self::Upgrade => 426,
            Self::Version => 505,
            Self::HeadersSize { .. } => 431,
            Self::TransferEncoding => 501,
            Self::ContentLength => 411,
            Self::HeaderRefused => 417,
            Self::BodySize { .. } | Self::BodyValues { .. } | Self::BodyString { .. } => 413,
            Self::ReadTimeout { .. } => 408,
            Self::Model | Self::Tool | Self::ContentUrl | Self::ContentFile | Self::StoredState => {
                403
            }
            Self::BudgetRequests { .. }
            | Self::BudgetRequestBytes { .. }
            | Self::BudgetResponseBytes { .. }
            | Self::BudgetTokens { .. }
            | Self::UsageMissing => 429,
            Self::Upstream | Self::UpstreamEncoding | Self::UpstreamStatus { .. } => 502,
            Self::UpstreamTimeout { .. } => 504,
            Self::Cancelled => 503,
        }
    }
}

/// Why the gateway could not be set up (operator input: config, credential, upstream URL).
#[derive(Debug, thiserror::Error, vocab::Coded)]
#[non_exhaustive]
pub enum GatewaySetupError {
    /// The operator config is not valid.
    #[error("PATCH_CANDIDATE_GATEWAY_CONFIG: invalid gateway configuration at {path}: {reason}")]
    #[coded(code = CONFIG_CODE, usage)]
    Config {
        /// JSON path of the problem (never the value).
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The credential could not be read or is not a single visible-ASCII token.
    #[error(
        "PATCH_CANDIDATE_GATEWAY_CREDENTIAL: the credential {source_name} is missing or not a single visible-ASCII token"
    )]
    #[coded(usage)]
    Credential {
        /// Where it was to come from (the variable or file name, never the value).
        source_name: String,
    },
    /// The upstream URL is not an http(s) base URL the gateway accepts.
    #[error("PATCH_CANDIDATE_GATEWAY_UPSTREAM_URL: {reason}")]
    #[coded(usage)]
    UpstreamUrl {
        /// What is wrong.
        reason: &'static str,
    },
    /// The TLS client could not be built.
    #[error("PATCH_CANDIDATE_GATEWAY_TLS: the TLS client could not be set up")]
    #[coded(environment)]
    Tls,
}
