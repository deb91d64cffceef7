//! Policy before allocation: a request body is first pre-scanned as bytes (UTF-8, value count,
//! nesting depth, string sizes — no allocation), then only the fields policy reads are extracted
//! by a typed visitor that skips everything else with [`serde::de::IgnoredAny`]. No JSON value
//! tree of the body is ever built, so the memory of a check is the body itself plus the few
//! strings policy reads, whatever the body's shape.
//!
//! Duplicate keys: a second `model`, `stream` or `tools` at the top level, or a second `type` or
//! `name` in one tool, is refused (`PATCH_CANDIDATE_GATEWAY_BODY`): the body is forwarded as the
//! agent sent it, so a field policy reads must have one meaning for every JSON reader. Duplicates
//! of keys policy does not read are forwarded as sent.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::error::GatewayError;

/// Caps of the byte-level pre-scan of a request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimits {
    /// JSON values, object keys included.
    pub max_values: u64,
    /// Nesting depth of arrays and objects.
    pub max_depth: u32,
    /// Bytes of one string (object keys included), as written (escapes count as their bytes).
    pub max_string_bytes: u64,
}

/// Deepest nesting the pre-scan tracks (the config's `max_request_body_depth` is at most this).
pub const MAX_SCAN_DEPTH: u32 = 256;

/// Which provider's content rules the pre-scan applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini `generateContent`.
    Gemini,
}

/// The content rules of one request: the provider's dialect and the stored files the operator
/// allows a content part to reference (exact ids).
#[derive(Clone, Copy, Debug)]
pub struct ContentPolicy<'a> {
    /// The provider's dialect.
    pub dialect: Dialect,
    /// `file_id`s (Responses, Anthropic) or `fileUri`s (Gemini) allowed, matched exactly.
    pub allowed_file_ids: &'a [String],
}

/// What the value after a key means to policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    /// Nothing.
    None,
    /// The top-level `tools`: its subtree is the tool allowlist's (only the tool objects' own
    /// keys are looked at here).
    Tools,
    /// A URL the provider would fetch: a string starting with `data:` (any case), or null;
    /// Gemini: also a stored file the operator allows.
    Url,
    /// A provider-stored file id: one the operator allows, or null.
    FileId,
    /// Anthropic `source`: an object value is a source (its `type` is allowlisted).
    Source,
    /// The `type` of an Anthropic source: `base64`, `text`, `content` or `file`.
    SourceType,
    /// A Responses `type`: `item_reference` names a stored item.
    Type,
}

/// What a key means, by provider and place. `fold`: a key that equals `norm` once ASCII case,
/// `_` and `-` are dropped but is none of `exact` is refused (`_BODY_KEY`).
struct KeyRule {
    norm: &'static [u8],
    exact: &'static [&'static [u8]],
    place: Place,
    meaning: Meaning,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Keys of the root object.
    Top,
    /// Keys of any object outside the top-level `tools`.
    Any,
    /// Keys of an Anthropic source object.
    InSource,
}

#[derive(Clone, PartialEq, Eq)]
enum Meaning {
    Value(Pending),
    /// The key itself is refused, whatever its value.
    Refused(GatewayError),
}

const fn rule(
    norm: &'static [u8],
    exact: &'static [&'static [u8]],
    place: Place,
    meaning: Meaning,
) -> KeyRule {
    KeyRule {
        norm,
        exact,
        place,
        meaning,
    }
}

/// A top-level key whose presence alone refuses the request with `error`.
const fn refused(
    norm: &'static [u8],
    exact: &'static [&'static [u8]],
    error: GatewayError,
) -> KeyRule {
    rule(norm, exact, Top, Refused(error))
}

use Meaning::{Refused, Value as Val};
use Place::{Any, InSource, Top};

const RESPONSES_KEYS: &[KeyRule] = &[
    rule(b"model", &[b"model"], Top, Val(Pending::None)),
    rule(b"stream", &[b"stream"], Top, Val(Pending::None)),
    rule(b"tools", &[b"tools"], Top, Val(Pending::Tools)),
    refused(
        b"previousresponseid",
        &[b"previous_response_id"],
        GatewayError::StoredState,
    ),
    refused(
        b"conversation",
        &[b"conversation"],
        GatewayError::StoredState,
    ),
    refused(b"prompt", &[b"prompt"], GatewayError::StoredState),
    refused(b"background", &[b"background"], GatewayError::StoredState),
    rule(b"imageurl", &[b"image_url"], Any, Val(Pending::Url)),
    rule(b"fileurl", &[b"file_url"], Any, Val(Pending::Url)),
    rule(b"fileid", &[b"file_id"], Any, Val(Pending::FileId)),
];

const ANTHROPIC_KEYS: &[KeyRule] = &[
    rule(b"model", &[b"model"], Top, Val(Pending::None)),
    rule(b"stream", &[b"stream"], Top, Val(Pending::None)),
    rule(b"tools", &[b"tools"], Top, Val(Pending::Tools)),
    refused(b"mcpservers", &[b"mcp_servers"], GatewayError::Tool),
    refused(b"container", &[b"container"], GatewayError::Tool),
    rule(b"type", &[b"type"], InSource, Val(Pending::SourceType)),
    rule(b"source", &[b"source"], Any, Val(Pending::Source)),
    rule(b"fileid", &[b"file_id"], Any, Val(Pending::FileId)),
];

const GEMINI_KEYS: &[KeyRule] = &[
    rule(b"tools", &[b"tools"], Top, Val(Pending::Tools)),
    refused(
        b"cachedcontent",
        &[b"cachedContent", b"cached_content"],
        GatewayError::StoredState,
    ),
    rule(
        b"fileuri",
        &[b"fileUri", b"file_uri"],
        Any,
        Val(Pending::Url),
    ),
];

/// Keys of one tool object (the tool allowlist reads them by their exact spelling).
const TOOL_KEYS: &[KeyRule] = &[
    rule(b"type", &[b"type"], Any, Val(Pending::None)),
    rule(b"name", &[b"name"], Any, Val(Pending::None)),
];

/// Source types of Anthropic content that carry their data inline (`file` names a stored file,
/// whose `file_id` is checked on its own).
const ANTHROPIC_SOURCE_TYPES: &[&[u8]] = &[b"base64", b"text", b"content", b"file"];

/// Bytes of a decoded string kept for comparisons (longer ones compare as not equal to any
/// policy word or allowed id).
const DECODED: usize = 256;

/// A string's decoded bytes (escapes resolved), at most [`DECODED`] of them.
struct Decoded {
    buf: [u8; DECODED],
    len: usize,
    truncated: bool,
}

impl Decoded {
    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
    /// The whole string equals `s`.
    fn is(&self, s: &[u8]) -> bool {
        !self.truncated && self.bytes() == s
    }
    fn starts_with_ci(&self, prefix: &[u8]) -> bool {
        self.bytes()
            .get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    }
}

fn hex4(raw: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &b in raw.get(..4)? {
        v = v * 16 + char::from(b).to_digit(16)?;
    }
    Some(v)
}

/// Decodes a string's raw bytes (between the quotes) as JSON decodes them, keeping the first
/// [`DECODED`] bytes. An invalid escape decodes to `0xFF` (a byte no policy word holds; such a
/// body is refused by the typed extraction anyway).
fn decode(raw: &[u8]) -> Decoded {
    let mut out = Decoded {
        buf: [0; DECODED],
        len: 0,
        truncated: false,
    };
    let push = |out: &mut Decoded, bytes: &[u8]| {
        for &b in bytes {
            match out.buf.get_mut(out.len) {
                Some(slot) => {
                    *slot = b;
                    out.len += 1;
                }
                None => out.truncated = true,
            }
        }
    };
    let mut i = 0usize;
    while let Some(&b) = raw.get(i) {
        if out.truncated {
            break;
        }
        if b != b'\\' {
            push(&mut out, &[b]);
            i += 1;
            continue;
        }
        let Some(&e) = raw.get(i + 1) else {
            push(&mut out, &[0xFF]);
            break;
        };
        i += 2;
        let simple = match e {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0C),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            _ => None,
        };
        if let Some(c) = simple {
            push(&mut out, &[c]);
            continue;
        }
        if e != b'u' {
            push(&mut out, &[0xFF]);
            continue;
        }
        let Some(hi) = raw.get(i..).and_then(hex4) else {
            push(&mut out, &[0xFF]);
            continue;
        };
        i += 4;
        let mut code = hi;
        if (0xD800..0xDC00).contains(&hi)
            && raw.get(i) == Some(&b'\\')
            && raw.get(i + 1) == Some(&b'u')
            && let Some(lo) = raw.get(i + 2..).and_then(hex4)
            && (0xDC00..0xE000).contains(&lo)
        {
            code = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
            i += 6;
        }
        match char::from_u32(code) {
            Some(c) => {
                let mut utf8 = [0u8; 4];
                push(&mut out, c.encode_utf8(&mut utf8).as_bytes());
            }
            None => push(&mut out, &[0xFF]),
        }
    }
    out
}

/// The key folded for comparison: ASCII lower case, `_` and `-` dropped; `None` when longer
/// than any policy key.
fn fold(key: &[u8]) -> Option<([u8; 32], usize)> {
    let mut buf = [0u8; 32];
    let mut len = 0usize;
    for &b in key {
        if b == b'_' || b == b'-' {
            continue;
        }
        *buf.get_mut(len)? = b.to_ascii_lowercase();
        len += 1;
    }
    Some((buf, len))
}

/// A stack of one bit per nesting level, without allocation.
#[derive(Default)]
struct Bits([u64; (MAX_SCAN_DEPTH / 64) as usize]);

impl Bits {
    fn get(&self, depth: u32) -> bool {
        if depth == 0 {
            return false;
        }
        let i = depth - 1;
        self.0
            .get((i / 64) as usize)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    fn set(&mut self, depth: u32, on: bool) {
        let i = depth.saturating_sub(1);
        if let Some(w) = self.0.get_mut((i / 64) as usize) {
            let mask = 1u64 << (i % 64);
            if on {
                *w |= mask;
            } else {
                *w &= !mask;
            }
        }
    }
}

/// The walk's state: containers open, what the next value means, where `tools` began.
struct Walk<'p> {
    policy: &'p ContentPolicy<'p>,
    depth: u32,
    object: Bits,
    source: Bits,
    typed: Bits,
    /// Responses: the object has an `id` key.
    has_id: Bits,
    /// Responses: the object's `type` is a string other than `item_reference`.
    own_type: Bits,
    /// Responses: a `type` of the object is not a string (null, a number, a container).
    bad_type: Bits,
    expect_key: bool,
    pending: Pending,
    /// Depth of the top-level `tools` container (0: not inside it).
    tools_depth: u32,
}

impl Walk<'_> {
    fn keys(&self) -> &'static [KeyRule] {
        match self.policy.dialect {
            Dialect::Responses => RESPONSES_KEYS,
            Dialect::Anthropic => ANTHROPIC_KEYS,
            Dialect::Gemini => GEMINI_KEYS,
        }
    }

    fn in_tools(&self) -> bool {
        self.tools_depth > 0 && self.depth >= self.tools_depth
    }

    /// A key of the object at the current depth.
    fn key(&mut self, raw: &[u8]) -> Result<(), GatewayError> {
        self.pending = Pending::None;
        let (rules, in_source): (&[KeyRule], bool) = if self.in_tools() {
            if self.depth != self.tools_depth + 1 {
                return Ok(());
            }
            (TOOL_KEYS, false)
        } else {
            (self.keys(), self.source.get(self.depth))
        };
        let key = decode(raw);
        let Some((folded, len)) = fold(key.bytes()) else {
            return Ok(());
        };
        let folded = folded.get(..len).unwrap_or_default();
        for r in rules {
            let here = match r.place {
                Place::Top => self.depth == 1 && !self.in_tools(),
                Place::Any => true,
                Place::InSource => in_source,
            };
            if !here || r.norm != folded {
                continue;
            }
            if !r.exact.iter().any(|e| key.is(e)) {
                return Err(GatewayError::BodyKey);
            }
            match &r.meaning {
                Meaning::Refused(e) => return Err(e.clone()),
                &Meaning::Value(p) => {
                    if p == Pending::SourceType {
                        self.typed.set(self.depth, true);
                    }
                    self.pending = p;
                }
            }
        }
        if self.policy.dialect == Dialect::Responses && !self.in_tools() {
            if key.is(b"type") {
                self.pending = Pending::Type;
            } else if key.is(b"id") {
                self.has_id.set(self.depth, true);
            }
        }
        Ok(())
    }

    /// Responses: the object closing now is an element of an array, has an `id`, and has no
    /// `type` that is a string other than `item_reference` (the API's `type` of an item reference
    /// is optional and nullable, so `{"id": "msg_…"}` names a stored item as well). A `type` that
    /// is not a string at all (null, or a duplicate key's other value) counts as none.
    fn stored_item_reference(&self) -> bool {
        self.policy.dialect == Dialect::Responses
            && !self.in_tools()
            && self.depth >= 2
            && self.object.get(self.depth)
            && !self.object.get(self.depth - 1)
            && self.has_id.get(self.depth)
            && (!self.own_type.get(self.depth) || self.bad_type.get(self.depth))
    }

    fn allowed_file(&self, value: &Decoded) -> bool {
        self.policy
            .allowed_file_ids
            .iter()
            .any(|id| value.is(id.as_bytes()))
    }

    /// A string value.
    fn string(&mut self, raw: &[u8]) -> Result<(), GatewayError> {
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        match pending {
            Pending::None | Pending::Tools | Pending::Source => Ok(()),
            Pending::Url => {
                let v = decode(raw);
                if v.starts_with_ci(b"data:") || self.allowed_file(&v) {
                    Ok(())
                } else if self.policy.dialect == Dialect::Gemini
                    && (v.starts_with_ci(b"files/")
                        || v.starts_with_ci(b"https://generativelanguage.googleapis.com/"))
                {
                    Err(GatewayError::ContentFile)
                } else {
                    Err(GatewayError::ContentUrl)
                }
            }
            Pending::FileId => {
                if self.allowed_file(&decode(raw)) {
                    Ok(())
                } else {
                    Err(GatewayError::ContentFile)
                }
            }
            Pending::SourceType => {
                let v = decode(raw);
                if ANTHROPIC_SOURCE_TYPES.iter().any(|t| v.is(t)) {
                    Ok(())
                } else {
                    Err(GatewayError::ContentUrl)
                }
            }
            Pending::Type => {
                if decode(raw).is(b"item_reference") {
                    Err(GatewayError::StoredState)
                } else {
                    self.own_type.set(self.depth, true);
                    Ok(())
                }
            }
        }
    }

    /// A value that is not a string: `first` is its first byte (`{`, `[`, or a scalar's).
    fn other(&mut self, first: u8) -> Result<(), GatewayError> {
        let pending = std::mem::replace(&mut self.pending, Pending::None);
        let null = first == b'n';
        if pending == Pending::Type {
            self.bad_type.set(self.depth, true);
        }
        match pending {
            Pending::None | Pending::Type | Pending::Source | Pending::Tools => Ok(()),
            Pending::Url if null => Ok(()),
            Pending::FileId if null => Ok(()),
            Pending::Url | Pending::SourceType => Err(GatewayError::ContentUrl),
            Pending::FileId => Err(GatewayError::ContentFile),
        }
    }

    fn open(&mut self, b: u8, limits: &BodyLimits) -> Result<(), GatewayError> {
        let pending = self.pending;
        self.other(b)?;
        self.depth += 1;
        if self.depth > limits.max_depth || self.depth > MAX_SCAN_DEPTH {
            return Err(GatewayError::BodyDepth {
                limit: limits.max_depth.min(MAX_SCAN_DEPTH),
            });
        }
        let object = b == b'{';
        self.object.set(self.depth, object);
        self.source.set(
            self.depth,
            object && pending == Pending::Source && !self.in_tools(),
        );
        self.typed.set(self.depth, false);
        self.has_id.set(self.depth, false);
        self.own_type.set(self.depth, false);
        self.bad_type.set(self.depth, false);
        if pending == Pending::Tools && self.tools_depth == 0 {
            self.tools_depth = self.depth;
        }
        self.expect_key = object;
        Ok(())
    }

    fn close(&mut self) -> Result<(), GatewayError> {
        if self.source.get(self.depth) && !self.typed.get(self.depth) {
            // A source without a type is not inline data.
            return Err(GatewayError::ContentUrl);
        }
        if self.stored_item_reference() {
            return Err(GatewayError::StoredState);
        }
        self.source.set(self.depth, false);
        if self.depth == self.tools_depth {
            self.tools_depth = 0;
        }
        self.depth = self.depth.saturating_sub(1);
        self.pending = Pending::None;
        self.expect_key = false;
        Ok(())
    }
}

/// Checks the body's bytes against `limits` and the provider's content rules in one pass,
/// without allocating: valid UTF-8, the counts the JSON grammar would give (values, depth,
/// string sizes), and the keys and values that could make the provider reach out (the syntax
/// itself is checked by the typed extraction after this, and nothing is forwarded unless it
/// passes, so the walk only has to read valid JSON right).
///
/// Every object outside the top-level `tools` is looked at, wherever it sits (a tool result's
/// parts included): a URL source must be a `data:` URL, a stored file must be one the operator
/// allows, an Anthropic source must be of an inline type, and keys that name stored state are
/// refused. Keys are compared as JSON decodes them (escapes resolved), and a key that equals a
/// policy key once case, `_` and `-` are ignored must be one of its exact spellings.
///
/// # Errors
/// `PATCH_CANDIDATE_GATEWAY_BODY` (not UTF-8), `_BODY_VALUES`, `_BODY_DEPTH`, `_BODY_STRING`,
/// `_BODY_KEY`, `_CONTENT_URL`, `_CONTENT_FILE`, `_STORED_STATE`, `_TOOL` (Anthropic
/// `mcp_servers`, `container`).
pub fn prescan(
    body: &[u8],
    limits: &BodyLimits,
    policy: &ContentPolicy<'_>,
) -> Result<(), GatewayError> {
    std::str::from_utf8(body).map_err(|_| GatewayError::Body)?;
    let mut walk = Walk {
        policy,
        depth: 0,
        object: Bits::default(),
        source: Bits::default(),
        typed: Bits::default(),
        has_id: Bits::default(),
        own_type: Bits::default(),
        bad_type: Bits::default(),
        expect_key: false,
        pending: Pending::None,
        tools_depth: 0,
    };
    let mut values = 0u64;
    let mut in_scalar = false;
    let mut i = 0usize;
    while let Some(&b) = body.get(i) {
        i += 1;
        match b {
            b'"' => {
                in_scalar = false;
                values += 1;
                let start = i;
                // The closing quote: the next `"` not escaped by a `\`.
                let mut end = None;
                while let Some(at) = body.get(i..).and_then(|r| memchr::memchr2(b'"', b'\\', r)) {
                    let at = i + at;
                    if body.get(at) == Some(&b'\\') {
                        i = at + 2;
                        continue;
                    }
                    end = Some(at);
                    break;
                }
                let end = end.unwrap_or(body.len()).min(body.len());
                i = end + 1;
                if (end.saturating_sub(start)) as u64 > limits.max_string_bytes {
                    return Err(GatewayError::BodyString {
                        limit: limits.max_string_bytes,
                    });
                }
                let raw = body.get(start..end).unwrap_or_default();
                if walk.expect_key && walk.object.get(walk.depth) {
                    walk.expect_key = false;
                    walk.key(raw)?;
                } else {
                    walk.string(raw)?;
                }
            }
            b'{' | b'[' => {
                in_scalar = false;
                values += 1;
                walk.open(b, limits)?;
            }
            b'}' | b']' => {
                in_scalar = false;
                walk.close()?;
            }
            b',' => {
                in_scalar = false;
                walk.expect_key = walk.object.get(walk.depth);
            }
            b':' | b' ' | b'\t' | b'\n' | b'\r' => in_scalar = false,
            _ => {
                if !in_scalar {
                    in_scalar = true;
                    values += 1;
                    walk.other(b)?;
                }
            }
        }
        if values > limits.max_values {
            return Err(GatewayError::BodyValues {
                limit: limits.max_values,
            });
        }
    }
    Ok(())
}

/// The fields of a Responses-API body that policy reads.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PolicyFields {
    /// `model`, when it is a string.
    pub model: Option<String>,
    /// `stream` is exactly `true`.
    pub stream: bool,
    /// Each tool's `type` and `name`, when they are strings.
    pub tools: Vec<ToolFields>,
    /// A top-level `mcp_servers` or `container` key (Anthropic: remote MCP servers and
    /// server-side containers), whatever its value.
    pub server_side: bool,
}

/// The fields of one offered tool that policy reads.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ToolFields {
    /// `type`, when it is a string.
    pub kind: Option<String>,
    /// `name`, when it is a string.
    pub name: Option<String>,
    /// Every key of the tool object, in order (Gemini names a tool by its key).
    pub keys: Vec<String>,
}

/// Extracts [`PolicyFields`] from a body that passed [`prescan`]: one JSON object, nothing
/// after it; `tools`, when present, an array of objects.
///
/// # Errors
/// `PATCH_CANDIDATE_GATEWAY_BODY`: not one JSON object, `model` not a string, `tools` not an
/// array of objects, or a duplicate of a field policy reads.
pub fn extract(body: &[u8]) -> Result<PolicyFields, GatewayError> {
    let fields = extract_fields(body)?;
    fields.model.as_ref().ok_or(GatewayError::Body)?;
    Ok(fields)
}

/// As [`extract`], for bodies that need not name a model (Gemini names it in the path).
///
/// # Errors
/// `PATCH_CANDIDATE_GATEWAY_BODY`: not one JSON object, `model` present but not a string,
/// `tools` not an array of objects, or a duplicate of a field policy reads.
pub fn extract_fields(body: &[u8]) -> Result<PolicyFields, GatewayError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let fields = de
        .deserialize_map(TopVisitor)
        .map_err(|_| GatewayError::Body)?;
    de.end().map_err(|_| GatewayError::Body)?;
    Ok(fields)
}

/// A key, told apart without allocating.
enum Key {
    Model,
    Stream,
    Tools,
    Type,
    Name,
    ServerSide,
    Other,
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
        Ok(match v {
            "model" => Key::Model,
            "stream" => Key::Stream,
            "tools" => Key::Tools,
            "type" => Key::Type,
            "name" => Key::Name,
            "mcp_servers" | "container" => Key::ServerSide,
            _ => Key::Other,
        })
    }
}

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_identifier(KeyVisitor)
    }
}

fn duplicate<E: de::Error>() -> E {
    E::custom("a field policy reads appears twice")
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = PolicyFields;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PolicyFields, A::Error> {
        let mut fields = PolicyFields::default();
        let (mut model, mut stream, mut tools) = (false, false, false);
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Model => {
                    if std::mem::replace(&mut model, true) {
                        return Err(duplicate());
                    }
                    fields.model = Some(map.next_value::<String>()?);
                }
                Key::Stream => {
                    if std::mem::replace(&mut stream, true) {
                        return Err(duplicate());
                    }
                    fields.stream =
                        map.next_value_seed(MaybeSeed::<bool>::default())? == Some(true);
                }
                Key::Tools => {
                    if std::mem::replace(&mut tools, true) {
                        return Err(duplicate());
                    }
                    fields.tools = map.next_value_seed(ToolsSeed)?;
                }
                Key::ServerSide => {
                    fields.server_side = true;
                    map.next_value::<IgnoredAny>()?;
                }
                Key::Type | Key::Name | Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

struct ToolsSeed;

impl<'de> DeserializeSeed<'de> for ToolsSeed {
    type Value = Vec<ToolFields>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ToolsSeed {
    type Value = Vec<ToolFields>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of tool objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut tools = Vec::new();
        while let Some(tool) = seq.next_element_seed(ToolSeed)? {
            tools.push(tool);
        }
        Ok(tools)
    }
}

struct ToolSeed;

impl<'de> DeserializeSeed<'de> for ToolSeed {
    type Value = ToolFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ToolSeed {
    type Value = ToolFields;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a tool object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolFields, A::Error> {
        let mut tool = ToolFields::default();
        let (mut kind, mut name) = (false, false);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "type" => {
                    if std::mem::replace(&mut kind, true) {
                        return Err(duplicate());
                    }
                    tool.kind = map.next_value_seed(MaybeSeed::<String>::default())?;
                }
                "name" => {
                    if std::mem::replace(&mut name, true) {
                        return Err(duplicate());
                    }
                    tool.name = map.next_value_seed(MaybeSeed::<String>::default())?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            tool.keys.push(key);
        }
        Ok(tool)
    }
}

/// Any JSON value: `Some` when it is of type `T` (a bool or a string), `None` otherwise (the
/// value is skipped without being built).
struct MaybeSeed<T>(std::marker::PhantomData<T>);

impl<T> Default for MaybeSeed<T> {
    fn default() -> Self {
        Self(std::marker::PhantomData)
    }
}

/// The one scalar type a [`MaybeSeed`] keeps.
trait Scalar: Sized {
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    fn from_str(_: &str) -> Option<Self> {
        None
    }
}

impl Scalar for bool {
    fn from_bool(v: bool) -> Option<Self> {
        Some(v)
    }
}

impl Scalar for String {
    fn from_str(v: &str) -> Option<Self> {
        Some(v.to_owned())
    }
}

impl<'de, T: Scalar> DeserializeSeed<'de> for MaybeSeed<T> {
    type Value = Option<T>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Scalar> Visitor<'de> for MaybeSeed<T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(T::from_bool(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(T::from_str(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const LIMITS: BodyLimits = BodyLimits {
        max_values: 16,
        max_depth: 3,
        max_string_bytes: 8,
    };

    fn prescan(body: &[u8], limits: &BodyLimits) -> Result<(), GatewayError> {
        super::prescan(
            body,
            limits,
            &ContentPolicy {
                dialect: Dialect::Responses,
                allowed_file_ids: &[],
            },
        )
    }

    fn scan(dialect: Dialect, body: &str) -> Result<(), GatewayError> {
        let limits = BodyLimits {
            max_values: 1 << 20,
            max_depth: MAX_SCAN_DEPTH,
            max_string_bytes: 1 << 20,
        };
        let allowed = ["file-ok".to_owned()];
        super::prescan(
            body.as_bytes(),
            &limits,
            &ContentPolicy {
                dialect,
                allowed_file_ids: &allowed,
            },
        )
    }

    #[test]
    fn the_walk_tells_keys_from_values_across_escapes() {
        use Dialect::Responses as R;
        let url = Err(GatewayError::ContentUrl);
        // An escaped quote does not end a string; an escaped backslash before a quote does.
        assert_eq!(scan(R, r#"{"a\"image_url":"https://x"}"#), Ok(()));
        assert_eq!(scan(R, r#"{"x":"\"","image_url":"https://x"}"#), url);
        assert_eq!(scan(R, r#"{"x":"\\","image_url":"https://x"}"#), url);
        assert_eq!(scan(R, r#"{"x":"\\\"","image_url":"data:x"}"#), Ok(()));
        // A policy word as a value, or in an array, is not a key.
        assert_eq!(scan(R, r#"{"a":"image_url","b":"https://x"}"#), Ok(()));
        assert_eq!(scan(R, r#"["image_url","https://x"]"#), Ok(()));
        assert_eq!(
            scan(
                R,
                r#"{"a":["image_url",{"k":1},"file_id"],"image_url":"data:x"}"#
            ),
            Ok(())
        );
        assert_eq!(scan(R, r#"{"a":{"k":[1,{"image_url":"https://x"}]}}"#), url);
        // Escapes decode as JSON decodes them, surrogate pairs included.
        assert_eq!(scan(R, r#"{"image\u005Furl":"https://x"}"#), url);
        assert_eq!(
            scan(R, r#"{"image_url":"\u0064\u0061\u0074\u0061:x"}"#),
            Ok(())
        );
        assert_eq!(scan(R, r#"{"image_url":"\ud83d\ude00data:x"}"#), url);
        assert_eq!(scan(R, r#"{"image_url":"\ud83ddata:x"}"#), url);
        assert_eq!(scan(R, r#"{"image_url":"\/\/x"}"#), url);
        // Null is absent; every other non-string is refused.
        assert_eq!(scan(R, r#"{"image_url":null,"file_id":null}"#), Ok(()));
        assert_eq!(scan(R, r#"{"image_url":false}"#), url);
        assert_eq!(
            scan(R, r#"{"file_id":{"id":"file-ok"}}"#),
            Err(GatewayError::ContentFile)
        );
        // Allowed ids match exactly, never by prefix or past the decode buffer.
        assert_eq!(scan(R, r#"{"file_id":"file-ok"}"#), Ok(()));
        assert_eq!(scan(R, r#"{"file_id":"file-o\u006b"}"#), Ok(()));
        for id in ["file-ok2", "file-o", "FILE-OK"] {
            assert_eq!(
                scan(R, &format!(r#"{{"file_id":"{id}"}}"#)),
                Err(GatewayError::ContentFile),
                "{id}"
            );
        }
        let long = format!(r#"{{"file_id":"file-ok{}"}}"#, " ".repeat(300));
        assert_eq!(scan(R, &long), Err(GatewayError::ContentFile));
    }

    #[test]
    fn the_walk_tracks_every_level_up_to_the_depth_cap() {
        use Dialect::{Anthropic as A, Responses as R};
        for depth in [1usize, 63, 64, 65, 130, 250] {
            let open = "[".repeat(depth);
            let close = "]".repeat(depth);
            let body = format!(r#"{{"a":{open}{{"b":1}},{{"image_url":"https://x"}}{close}}}"#);
            assert_eq!(scan(R, &body), Err(GatewayError::ContentUrl), "{depth}");
            let body = format!(r#"{{"a":{open}{{"b":1}},{{"image_url":"data:x"}}{close}}}"#);
            assert_eq!(scan(R, &body), Ok(()), "{depth}");
            // After a deep array closes, the enclosing object's keys are keys again.
            let body = format!(r#"{{"a":{open}"x"{close},"image_url":"https://x"}}"#);
            assert_eq!(scan(R, &body), Err(GatewayError::ContentUrl), "{depth}");
        }
        let too_deep = format!("{}{}", "[".repeat(257), "]".repeat(257));
        assert_eq!(
            scan(R, &too_deep),
            Err(GatewayError::BodyDepth {
                limit: MAX_SCAN_DEPTH
            })
        );
        // A source's own type is checked after a nested source closed inside it.
        let nested = |outer: &str| {
            format!(
                r#"{{"source":{{"content":[{{"type":"image","source":{{"type":"base64","data":"x"}}}}],"type":"{outer}"}}}}"#
            )
        };
        assert_eq!(scan(A, &nested("content")), Ok(()));
        assert_eq!(scan(A, &nested("url")), Err(GatewayError::ContentUrl));
        assert_eq!(
            scan(
                A,
                r#"{"source":{"content":[{"source":{"type":"url"}}],"type":"content"}}"#
            ),
            Err(GatewayError::ContentUrl)
        );
        assert_eq!(
            scan(A, r#"{"source":{"content":[]}}"#),
            Err(GatewayError::ContentUrl)
        );
        // A type seen in one source says nothing of the next one at the same depth.
        assert_eq!(
            scan(
                A,
                r#"[{"source":{"type":"text"}},{"source":{"url":"https://x"}}]"#
            ),
            Err(GatewayError::ContentUrl)
        );
    }

    #[test]
    fn only_the_top_level_tools_are_left_to_the_tool_allowlist() {
        use Dialect::{Gemini as G, Responses as R};
        let url = Err(GatewayError::ContentUrl);
        assert_eq!(
            scan(
                R,
                r#"{"tools":[{"type":"function","parameters":{"image_url":"https://x"}}]}"#
            ),
            Ok(())
        );
        // The content rules resume once `tools` closes, and a nested `tools` skips nothing.
        assert_eq!(
            scan(
                R,
                r#"{"tools":[{"type":"function"}],"input":[{"image_url":"https://x"}]}"#
            ),
            url
        );
        assert_eq!(
            scan(R, r#"{"input":[{"tools":[{"image_url":"https://x"}]}]}"#),
            url
        );
        assert_eq!(scan(R, r#"{"tools":[],"image_url":"https://x"}"#), url);
        // Tool objects' own keys are spelled exactly.
        assert_eq!(
            scan(R, r#"{"tools":[{"type":"function","NAME":"x"}]}"#),
            Err(GatewayError::BodyKey)
        );
        assert_eq!(
            scan(
                R,
                r#"{"tools":[{"type":"function","parameters":{"Type":"x"}}]}"#
            ),
            Ok(())
        );
        // Policy keys of the root object only count at the root.
        assert_eq!(scan(R, r#"{"input":[{"background":true}]}"#), Ok(()));
        assert_eq!(
            scan(R, r#"{"background":true}"#),
            Err(GatewayError::StoredState)
        );
        assert_eq!(scan(G, r#"{"contents":[{"cachedContent":"x"}]}"#), Ok(()));
        assert_eq!(
            scan(
                G,
                r#"{"contents":[{"parts":[{"fileData":{"file_uri":"files/x"}}]}]}"#
            ),
            Err(GatewayError::ContentFile)
        );
    }

    #[test]
    fn the_prescan_counts_values_depth_and_string_bytes() {
        assert_eq!(
            prescan(br#"{"model":"m","a":[1,true,null]}"#, &LIMITS),
            Ok(())
        );
        assert_eq!(
            prescan(b"[[[[]]]]", &LIMITS),
            Err(GatewayError::BodyDepth { limit: 3 })
        );
        assert_eq!(
            prescan(br#"{"k":"123456789"}"#, &LIMITS),
            Err(GatewayError::BodyString { limit: 8 })
        );
        // An escaped quote does not end the string.
        assert_eq!(
            prescan(br#"["1234\"5678"]"#, &LIMITS),
            Err(GatewayError::BodyString { limit: 8 })
        );
        assert_eq!(
            prescan(b"[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]", &LIMITS),
            Err(GatewayError::BodyValues { limit: 16 })
        );
        // Brackets inside strings are not structure.
        assert_eq!(prescan(br#"["[[[[[[["]"#, &LIMITS), Ok(()));
        assert_eq!(prescan(b"[\"\xff\"]", &LIMITS), Err(GatewayError::Body));
    }

    #[test]
    fn only_the_policy_fields_are_extracted() {
        let fields = extract(
            br#"{"input":[{"deep":[1,2,{"model":"inner"}]}],"model":"m","stream":true,
                "tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},{"type":7}]}"#,
        )
        .unwrap();
        assert_eq!(
            fields,
            PolicyFields {
                model: Some("m".to_owned()),
                stream: true,
                tools: vec![
                    ToolFields {
                        kind: Some("function".to_owned()),
                        name: Some("shell".to_owned()),
                        keys: vec![
                            "type".to_owned(),
                            "name".to_owned(),
                            "parameters".to_owned()
                        ],
                    },
                    ToolFields {
                        keys: vec!["type".to_owned()],
                        ..ToolFields::default()
                    },
                ],
                server_side: false,
            }
        );
        assert!(!extract(br#"{"model":"m","stream":[true]}"#).unwrap().stream);
        assert!(!extract(br#"{"model":"m","stream":"true"}"#).unwrap().stream);
        // Escaped keys mean what they say.
        assert_eq!(
            extract(br#"{"mod\u0065l":"m"}"#).unwrap().model.as_deref(),
            Some("m")
        );
    }

    #[test]
    fn shapes_policy_cannot_read_are_refused() {
        for body in [
            &br#"["model","m"]"#[..],
            br#"{"model":1}"#,
            br#"{"stream":true}"#,
            br#"{"model":"m","tools":{"type":"web_search"}}"#,
            br#"{"model":"m","tools":[["web_search"]]}"#,
            br#"{"model":"m","tools":["web_search"]}"#,
            br#"{"model":"m"} {}"#,
            br#"{"model":"m""#,
            // Duplicates of the fields policy reads.
            br#"{"model":"o3-pro","model":"m"}"#,
            br#"{"model":"m","mod\u0065l":"x"}"#,
            br#"{"model":"m","stream":false,"stream":true}"#,
            br#"{"model":"m","tools":[],"tools":[]}"#,
            br#"{"model":"m","tools":[{"type":"function","type":"web_search"}]}"#,
            br#"{"model":"m","tools":[{"name":"a","name":"web_search"}]}"#,
        ] {
            assert_eq!(
                extract(body),
                Err(GatewayError::Body),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // Duplicates policy does not read are the upstream's business.
        assert!(extract(br#"{"model":"m","input":1,"input":2}"#).is_ok());
    }
}

/// The byte walk against an independent reading of the same rules over the parsed tree: for any
/// body (keys and values drawn from the policy words, in every case and spelling, written with
/// random `\u` escapes), the pre-scan's verdict is the tree's.
#[cfg(test)]
mod differential {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    const KEYS: &[&str] = &[
        "type",
        "Type",
        "image_url",
        "Image_URL",
        "imageUrl",
        "file_url",
        "file_id",
        "FILE_ID",
        "source",
        "Source",
        "tools",
        "Tools",
        "model",
        "stream",
        "background",
        "prompt",
        "previous_response_id",
        "mcp_servers",
        "container",
        "fileUri",
        "file_uri",
        "FileUri",
        "cachedContent",
        "cached_content",
        "name",
        "NAME",
        "content",
        "url",
        "a",
    ];
    const STRINGS: &[&str] = &[
        "data:x",
        "DATA:y",
        "https://x",
        " data:",
        "url",
        "base64",
        "text",
        "content",
        "file",
        "item_reference",
        "file-ok",
        "file-ok2",
        "files/x",
        "https://generativelanguage.googleapis.com/v1beta/files/x",
        "function",
        "a\"b\\c",
        "é",
        "\\",
        "q\"",
        "\u{1F600}",
    ];

    /// The keys the rules turn on, drawn more often than the rest.
    const CORE: &[&str] = &[
        "type",
        "source",
        "image_url",
        "file_id",
        "fileUri",
        "tools",
        "a",
    ];

    fn key() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            3 => proptest::sample::select(CORE),
            2 => proptest::sample::select(KEYS),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            1 => Just(Value::Null),
            1 => any::<bool>().prop_map(Value::Bool),
            1 => (0u32..100).prop_map(Value::from),
            4 => proptest::sample::select(STRINGS).prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(6, 48, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..5).prop_map(|kv| {
                    Value::Object(
                        kv.into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect::<Map<String, Value>>(),
                    )
                }),
            ]
        })
    }

    /// Writes `v` as JSON, escaping the `i`-th character of every string as `\uXXXX` when bit
    /// `i % 64` of `mask` is set (plus the escapes JSON requires).
    fn write(v: &Value, mask: u64, out: &mut String) {
        match v {
            Value::String(s) => write_str(s, mask, out),
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, mask, out);
                }
                out.push(']');
            }
            Value::Object(o) => {
                out.push('{');
                for (i, (k, x)) in o.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_str(k, mask.rotate_left(7), out);
                    out.push(':');
                    write(x, mask, out);
                }
                out.push('}');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    fn write_str(s: &str, mask: u64, out: &mut String) {
        out.push('"');
        for (i, c) in s.chars().enumerate() {
            let escape = mask >> (i % 64) & 1 == 1;
            // The short escapes JSON has (and a `\/` now and then), then `\u` ones.
            if c == '"' || c == '\\' || (c == '/' && escape) {
                out.push('\\');
                out.push(c);
            } else if escape {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04X}"));
                }
            } else {
                out.push(c);
            }
        }
        out.push('"');
    }

    fn folded(k: &str) -> String {
        k.chars()
            .filter(|c| *c != '_' && *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    }

    struct Reference {
        dialect: Dialect,
    }

    impl Reference {
        fn url(&self, v: &Value) -> Result<(), GatewayError> {
            match v {
                Value::Null => Ok(()),
                Value::String(s)
                    if s.get(..5).is_some_and(|p| p.eq_ignore_ascii_case("data:"))
                        || s == "file-ok" =>
                {
                    Ok(())
                }
                Value::String(s)
                    if self.dialect == Dialect::Gemini
                        && ["files/", "https://generativelanguage.googleapis.com/"]
                            .iter()
                            .any(|pre| {
                                s.get(..pre.len())
                                    .is_some_and(|p| p.eq_ignore_ascii_case(pre))
                            }) =>
                {
                    Err(GatewayError::ContentFile)
                }
                _ => Err(GatewayError::ContentUrl),
            }
        }

        fn file(v: &Value) -> Result<(), GatewayError> {
            match v {
                Value::Null => Ok(()),
                Value::String(s) if s == "file-ok" => Ok(()),
                _ => Err(GatewayError::ContentFile),
            }
        }

        /// `top`: the root object; `source`: an Anthropic source object; `tool`: a tool object.
        fn object(
            &self,
            o: &Map<String, Value>,
            top: bool,
            source: bool,
            tool: bool,
        ) -> Result<(), GatewayError> {
            let exact = |k: &str, want: &[&str]| {
                if want.contains(&k) {
                    Ok(())
                } else {
                    Err(GatewayError::BodyKey)
                }
            };
            let mut typed = false;
            for (k, v) in o {
                let f = folded(k);
                if tool {
                    if f == "type" || f == "name" {
                        exact(k, &[f.as_str()])?;
                    }
                    self.inside_tools(v)?;
                    continue;
                }
                let mut as_source = false;
                let mut tools = false;
                match (self.dialect, f.as_str()) {
                    (Dialect::Responses | Dialect::Anthropic, "model" | "stream") if top => {
                        exact(k, &[f.as_str()])?;
                    }
                    (_, "tools") if top => {
                        exact(k, &["tools"])?;
                        tools = true;
                    }
                    (
                        Dialect::Responses,
                        "previousresponseid" | "conversation" | "prompt" | "background",
                    ) if top => {
                        exact(
                            k,
                            &[
                                "previous_response_id",
                                "conversation",
                                "prompt",
                                "background",
                            ],
                        )?;
                        return Err(GatewayError::StoredState);
                    }
                    (Dialect::Anthropic, "mcpservers" | "container") if top => {
                        exact(k, &["mcp_servers", "container"])?;
                        return Err(GatewayError::Tool);
                    }
                    (Dialect::Gemini, "cachedcontent") if top => {
                        exact(k, &["cachedContent", "cached_content"])?;
                        return Err(GatewayError::StoredState);
                    }
                    (Dialect::Responses, "imageurl" | "fileurl") => {
                        exact(k, &["image_url", "file_url"])?;
                        self.url(v)?;
                    }
                    (Dialect::Responses | Dialect::Anthropic, "fileid") => {
                        exact(k, &["file_id"])?;
                        Self::file(v)?;
                    }
                    (Dialect::Gemini, "fileuri") => {
                        exact(k, &["fileUri", "file_uri"])?;
                        self.url(v)?;
                    }
                    (Dialect::Anthropic, "type") if source => {
                        exact(k, &["type"])?;
                        typed = true;
                        match v {
                            Value::String(s)
                                if ["base64", "text", "content", "file"].contains(&s.as_str()) => {}
                            _ => return Err(GatewayError::ContentUrl),
                        }
                    }
                    (Dialect::Anthropic, "source") => {
                        exact(k, &["source"])?;
                        as_source = true;
                    }
                    (Dialect::Responses, "type") if k == "type" && v == "item_reference" => {
                        return Err(GatewayError::StoredState);
                    }
                    _ => {}
                }
                if tools {
                    match v {
                        Value::Array(a) => a.iter().try_for_each(|t| self.tool_level(t))?,
                        Value::Object(o) => o.values().try_for_each(|t| self.tool_level(t))?,
                        _ => {}
                    }
                } else {
                    self.value(v, as_source)?;
                }
            }
            if source && !typed {
                return Err(GatewayError::ContentUrl);
            }
            Ok(())
        }

        fn tool_level(&self, v: &Value) -> Result<(), GatewayError> {
            match v {
                Value::Object(o) => self.object(o, false, false, true),
                other => self.inside_tools(other),
            }
        }

        /// Below a tool object: nothing is looked at.
        fn inside_tools(&self, _v: &Value) -> Result<(), GatewayError> {
            Ok(())
        }

        fn value(&self, v: &Value, source: bool) -> Result<(), GatewayError> {
            match v {
                Value::Object(o) => self.object(o, false, source, false),
                Value::Array(a) => a.iter().try_for_each(|x| {
                    self.value(x, false)?;
                    // An array element with an `id` and no string `type` other than
                    // `item_reference` names a stored item.
                    if self.dialect == Dialect::Responses
                        && let Value::Object(o) = x
                        && o.contains_key("id")
                        && !matches!(o.get("type"), Some(Value::String(t)) if t != "item_reference")
                    {
                        return Err(GatewayError::StoredState);
                    }
                    Ok(())
                }),
                _ => Ok(()),
            }
        }

        fn check(&self, v: &Value) -> Result<(), GatewayError> {
            match v {
                Value::Object(o) => self.object(o, true, false, false),
                other => self.value(other, false),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        #[test]
        fn the_byte_walk_reads_every_body_as_the_tree_does(
            root in proptest::collection::vec((key(), value()), 0..6),
            mask in any::<u64>(),
            which in 0usize..3,
        ) {
            let root = Value::Object(root.into_iter().map(|(k, v)| (k.to_owned(), v)).collect());
            let mut text = String::new();
            write(&root, mask, &mut text);
            prop_assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), root.clone());
            let dialect = [Dialect::Responses, Dialect::Anthropic, Dialect::Gemini][which];
            let limits = BodyLimits {
                max_values: 1 << 20,
                max_depth: MAX_SCAN_DEPTH,
                max_string_bytes: 1 << 20,
            };
            let allowed = ["file-ok".to_owned()];
            let policy = ContentPolicy { dialect, allowed_file_ids: &allowed };
            let walked = prescan(text.as_bytes(), &limits, &policy);
            let reference = Reference { dialect }.check(&root);
            prop_assert_eq!(walked, reference, "{:?}: {}", dialect, text);
        }
    }
}
