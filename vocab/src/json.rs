//! Strict JSON for untrusted documents (container stdin/stdout, approvals): invalid UTF-8, a BOM,
//! duplicate object keys, `NaN`/`Infinity` and trailing data are all rejected; nesting and size are
//! bounded. serde_json alone lets the last duplicate key win inside maps, so a first pass here
//! walks the document with a visitor that refuses duplicates (serde_json has no option for it).
//!
//! Errors never quote the document: a shape error names the JSON path of the offending value (our
//! field names and array indexes; a map key only through [`crate::Untrusted`], capped) and the
//! kind of mismatch, never serde's text, which quotes input values (`invalid value: string "…"`,
//! `unknown field `…``).

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::Untrusted;

/// Deepest accepted nesting of arrays and objects.
const MAX_JSON_DEPTH: usize = 64;

/// Why a document was refused (never quotes the document).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StrictJsonError {
    #[error("document exceeds {limit} bytes")]
    TooLarge { limit: usize },
    #[error("document is not UTF-8")]
    NotUtf8,
    #[error("document starts with a byte order mark")]
    Bom,
    #[error("duplicate object key")]
    DuplicateKey,
    #[error("document nests deeper than {MAX_JSON_DEPTH}")]
    TooDeep,
    #[error("malformed JSON at line {line} column {column}")]
    Syntax { line: usize, column: usize },
    /// The document is well-formed JSON but does not fit the expected type.
    #[error(
        "JSON does not match the expected shape at {path} (line {line} column {column}): {kind}"
    )]
    Shape {
        /// Where, as a JSON path (`$.allowed_paths[2]`); map keys appear escaped and capped.
        path: String,
        /// What kind of mismatch.
        kind: ShapeKind,
        line: usize,
        column: usize,
    },
}

/// The kind of a shape mismatch (serde's error categories, without the input excerpt).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShapeKind {
    /// A value of the wrong JSON type (a string where a list is expected, ...).
    InvalidType,
    /// A value of the right type that the field does not accept.
    InvalidValue,
    /// A list or tuple of the wrong length.
    InvalidLength,
    /// An enum value that is not one of the accepted names.
    UnknownVariant,
    /// An object key the type does not define.
    UnknownField,
    /// A required field is absent (the name is the schema's, never the input's).
    MissingField(String),
    /// A field appears twice.
    DuplicateField,
    /// Any other refusal by the type.
    Other,
}

impl fmt::Display for ShapeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidType => f.write_str("invalid type"),
            Self::InvalidValue => f.write_str("invalid value"),
            Self::InvalidLength => f.write_str("invalid length"),
            Self::UnknownVariant => f.write_str("unknown variant"),
            Self::UnknownField => f.write_str("unknown field"),
            Self::MissingField(name) => write!(f, "missing field {name}"),
            Self::DuplicateField => f.write_str("duplicate field"),
            Self::Other => f.write_str("value refused"),
        }
    }
}

/// Parses `bytes` as `T` with every strictness rule above, refusing documents over `max_bytes`.
///
/// # Errors
/// A [`StrictJsonError`] naming the first rule broken.
pub fn from_slice_strict<T: DeserializeOwned>(
    bytes: &[u8],
    max_bytes: usize,
) -> Result<T, StrictJsonError> {
    if bytes.len() > max_bytes {
        return Err(StrictJsonError::TooLarge { limit: max_bytes });
    }
    let text = std::str::from_utf8(bytes).map_err(|_| StrictJsonError::NotUtf8)?;
    if text.starts_with('\u{feff}') {
        return Err(StrictJsonError::Bom);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let check = de.deserialize_any(StrictVisitor { depth: 0 });
    match check {
        Ok(()) => {}
        Err(e) => return Err(classify(&e)),
    }
    de.end().map_err(|e| classify(&e))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        if e.inner().is_data() {
            shape(e.path(), e.inner())
        } else {
            classify(e.inner())
        }
    })?;
    de.end().map_err(|e| classify(&e))?;
    Ok(value)
}

/// Longest map key shown in a shape error's path, in characters.
const MAX_PATH_KEY_CHARS: usize = 64;

/// A shape error: the path rendered from our field names and indexes, the kind from serde's
/// error category. serde's message is read only for its fixed prefix and never copied.
fn shape(path: &serde_path_to_error::Path, e: &serde_json::Error) -> StrictJsonError {
    use serde_path_to_error::Segment;
    let message = e.to_string();
    let kind = if message.starts_with("invalid type: ") {
        ShapeKind::InvalidType
    } else if message.starts_with("invalid value: ") {
        ShapeKind::InvalidValue
    } else if message.starts_with("invalid length ") {
        ShapeKind::InvalidLength
    } else if message.starts_with("unknown variant ") {
        ShapeKind::UnknownVariant
    } else if message.starts_with("unknown field ") {
        ShapeKind::UnknownField
    } else if message.starts_with("duplicate field ") {
        ShapeKind::DuplicateField
    } else if let Some(rest) = message.strip_prefix("missing field `") {
        // serde names the schema's field; keep it only if it looks like one.
        match rest.split_once('`') {
            Some((name, _)) if is_identifier(name) => ShapeKind::MissingField(name.to_owned()),
            _ => ShapeKind::Other,
        }
    } else {
        ShapeKind::Other
    };
    let mut segments: Vec<&Segment> = path.iter().collect();
    // The path of an unknown field ends with the unknown key itself: that is input, not schema.
    if kind == ShapeKind::UnknownField && matches!(segments.last(), Some(Segment::Map { .. })) {
        segments.pop();
    }
    let mut rendered = String::from("$");
    for segment in segments {
        match segment {
            Segment::Seq { index } => rendered.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if is_identifier(key) {
                    rendered.push('.');
                    rendered.push_str(key);
                } else {
                    rendered.push('[');
                    rendered.push_str(&Untrusted::quoted(key).limit(MAX_PATH_KEY_CHARS).render());
                    rendered.push(']');
                }
            }
            Segment::Unknown => rendered.push_str(".?"),
        }
    }
    StrictJsonError::Shape {
        path: rendered,
        kind,
        line: e.line(),
        column: e.column(),
    }
}

/// A field-name-like key: ASCII letters, digits and `_`, at most 64 characters.
fn is_identifier(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_PATH_KEY_CHARS
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn classify(e: &serde_json::Error) -> StrictJsonError {
    let msg = e.to_string();
    if msg.starts_with(DUPLICATE) {
        StrictJsonError::DuplicateKey
    } else if msg.starts_with(TOO_DEEP) {
        StrictJsonError::TooDeep
    } else if e.is_data() {
        StrictJsonError::Shape {
            path: "$".to_owned(),
            kind: ShapeKind::Other,
            line: e.line(),
            column: e.column(),
        }
    } else {
        StrictJsonError::Syntax {
            line: e.line(),
            column: e.column(),
        }
    }
}

const DUPLICATE: &str = "strict-json: duplicate key";
const TOO_DEEP: &str = "strict-json: too deep";

struct StrictVisitor {
    depth: usize,
}

struct Nested(usize);

impl<'de> de::DeserializeSeed<'de> for Nested {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(StrictVisitor { depth: self.0 })
    }
}

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        if v.is_finite() {
            Ok(())
        } else {
            Err(E::custom("non-finite number"))
        }
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        if depth > MAX_JSON_DEPTH {
            return Err(de::Error::custom(TOO_DEEP));
        }
        while seq.next_element_seed(Nested(depth))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let depth = self.depth + 1;
        if depth > MAX_JSON_DEPTH {
            return Err(de::Error::custom(TOO_DEEP));
        }
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key) {
                return Err(de::Error::custom(DUPLICATE));
            }
            map.next_value_seed(Nested(depth))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    type Doc = BTreeMap<String, serde_json::Value>;

    #[test]
    fn rejects_every_lenient_form() {
        let parse = |s: &[u8]| from_slice_strict::<Doc>(s, 1024);
        assert!(parse(br#"{"a":1,"b":[1,{"c":null}]}"#).is_ok());
        assert_eq!(
            parse(br#"{"a":1,"a":2}"#),
            Err(StrictJsonError::DuplicateKey)
        );
        assert_eq!(
            parse(br#"{"x":{"a":1,"a":1}}"#),
            Err(StrictJsonError::DuplicateKey)
        );
        assert!(matches!(
            parse(br#"{"a":NaN}"#),
            Err(StrictJsonError::Syntax { .. })
        ));
        assert!(matches!(
            parse(br#"{"a":Infinity}"#),
            Err(StrictJsonError::Syntax { .. })
        ));
        assert!(matches!(
            parse(br#"{"a":1} x"#),
            Err(StrictJsonError::Syntax { .. })
        ));
        assert_eq!(parse(b"{\"a\":\"\xff\"}"), Err(StrictJsonError::NotUtf8));
        assert_eq!(parse("\u{feff}{}".as_bytes()), Err(StrictJsonError::Bom));
        assert!(matches!(
            parse(br#"[1]"#),
            Err(StrictJsonError::Shape {
                kind: ShapeKind::InvalidType,
                ..
            })
        ));
        assert_eq!(
            from_slice_strict::<Doc>(br#"{"a":1}"#, 3),
            Err(StrictJsonError::TooLarge { limit: 3 })
        );
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(
            parse(deep.as_bytes()).unwrap_err(),
            StrictJsonError::TooDeep
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Typed {
        name: String,
        list: Vec<u32>,
        map: BTreeMap<String, u32>,
    }

    /// Shape errors name the path and the kind and never echo an input value or unknown key.
    #[test]
    fn shape_errors_name_the_path_never_the_input() {
        let parse = |s: &str| from_slice_strict::<Typed>(s.as_bytes(), 1024).unwrap_err();
        let secret = "sk-secret\\u001b]52;c;ZXZpbA==\\u0007";
        let cases = [
            (
                format!(r#"{{"name":"{secret}","list":[1,"{secret}"],"map":{{}}}}"#),
                "$.list[1]",
                ShapeKind::InvalidType,
            ),
            (
                format!(r#"{{"name":"a","list":[],"map":{{"{secret}":"{secret}"}}}}"#),
                "$.map['sk-secret\\x1b]52;c;ZXZpbA==\\x07']",
                ShapeKind::InvalidType,
            ),
            (
                format!(r#"{{"name":"a","list":[],"map":{{}},"{secret}":1}}"#),
                "$",
                ShapeKind::UnknownField,
            ),
            (
                r#"{"list":[],"map":{}}"#.to_owned(),
                "$",
                ShapeKind::MissingField("name".to_owned()),
            ),
            (
                r#"{"name":"a","list":[-1],"map":{}}"#.to_owned(),
                "$.list[0]",
                ShapeKind::InvalidValue,
            ),
        ];
        for (doc, want_path, want_kind) in cases {
            let err = parse(&doc);
            let StrictJsonError::Shape { path, kind, .. } = &err else {
                panic!("{err:?}");
            };
            assert_eq!((path.as_str(), kind), (want_path, &want_kind), "{doc}");
            let shown = err.to_string();
            assert!(
                !shown.contains("sk-secret") || shown.contains("$.map["),
                "{shown}"
            );
            assert!(
                !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
                "{shown}"
            );
        }
    }
}
