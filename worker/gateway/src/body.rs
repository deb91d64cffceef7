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

/// Checks the body's bytes against `limits` without allocating: valid UTF-8, and the counts the
/// JSON grammar would give (the syntax itself is checked by the typed extraction after this).
///
/// # Errors
/// `PATCH_CANDIDATE_GATEWAY_BODY` (not UTF-8), `_BODY_VALUES`, `_BODY_DEPTH`, `_BODY_STRING`.
pub fn prescan(body: &[u8], limits: &BodyLimits) -> Result<(), GatewayError> {
    std::str::from_utf8(body).map_err(|_| GatewayError::Body)?;
    let mut depth = 0u32;
    let mut values = 0u64;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_scalar = false;
    let mut string_bytes = 0u64;
    for &b in body {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                continue;
            }
            string_bytes += 1;
            if string_bytes > limits.max_string_bytes {
                return Err(GatewayError::BodyString {
                    limit: limits.max_string_bytes,
                });
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                string_bytes = 0;
                in_scalar = false;
                values += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                if depth > limits.max_depth {
                    return Err(GatewayError::BodyDepth {
                        limit: limits.max_depth,
                    });
                }
                in_scalar = false;
                values += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                in_scalar = false;
            }
            b',' | b':' | b' ' | b'\t' | b'\n' | b'\r' => in_scalar = false,
            _ => {
                if !in_scalar {
                    in_scalar = true;
                    values += 1;
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
