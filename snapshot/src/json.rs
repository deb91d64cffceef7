//! Strict JSON for untrusted documents (container stdin/stdout, approvals): invalid UTF-8, a BOM,
//! duplicate object keys, `NaN`/`Infinity` and trailing data are all rejected; nesting and size are
//! bounded. serde_json alone lets the last duplicate key win inside maps, so a first pass here
//! walks the document with a visitor that refuses duplicates (serde_json has no option for it).

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};

/// Deepest accepted nesting of arrays and objects.
pub const MAX_JSON_DEPTH: usize = 64;

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
    #[error("JSON does not match the expected shape")]
    Shape,
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
    serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            StrictJsonError::Shape
        } else {
            classify(&e)
        }
    })
}

fn classify(e: &serde_json::Error) -> StrictJsonError {
    let msg = e.to_string();
    if msg.starts_with(DUPLICATE) {
        StrictJsonError::DuplicateKey
    } else if msg.starts_with(TOO_DEEP) {
        StrictJsonError::TooDeep
    } else if e.is_data() {
        StrictJsonError::Shape
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
        assert_eq!(parse(br#"[1]"#), Err(StrictJsonError::Shape));
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
}
