//! Bounded parsers for workspace content: YAML, JSON and a Python pre-check.
//!
//! Workspace files are hostile input. Every parser here is bounded in nesting depth, in expanded
//! nodes and in expanded scalar bytes, with YAML aliases counted as what they expand to (an alias
//! of a 10,000-node anchor costs 10,000 nodes, wherever it appears, mapping keys included). Each
//! limit has its own stable code ([`ParseError::code`]). The YAML tree is built from parser events
//! without recursion, and the depth limit keeps every later walk, comparison and drop of the tree
//! far inside any thread stack.
//!
//! The API is small on purpose: [`load_yaml`] / [`load_yaml_single`] give [`YamlNode`] documents,
//! [`check_json`] / [`parse_json`] bound a JSON document before `serde_json` materialises it, and
//! [`check_python_nesting`] refuses sources nested deeper than CPython itself accepts.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use saphyr::Scalar;
use saphyr_parser::{Event, Parser, ScalarStyle, ScanError};
use serde::de::DeserializeOwned;

/// Deepest accepted nesting of YAML collections (the same bound as strict JSON).
pub const MAX_YAML_DEPTH: usize = 64;
/// Most YAML nodes one file may expand to (aliases counted as their expansion).
pub const MAX_YAML_NODES: usize = 100_000;
/// Most scalar bytes one YAML file may expand to (aliases counted as their expansion).
pub const MAX_YAML_EXPANDED_BYTES: usize = 4 * 1024 * 1024;
/// Deepest accepted JSON nesting (from the strict JSON reader).
pub const MAX_JSON_DEPTH: usize = 64;
/// Most JSON values one document may hold.
pub const MAX_JSON_NODES: usize = 100_000;
/// Deepest accepted bracket nesting in Python sources (CPython's own parser limit is 200).
pub const MAX_PYTHON_NESTING: usize = 200;

/// The codes of [`ParseError::code`] that are not [`crate::McpError`] codes (its limit codes,
/// `too_deep`, `too_many_nodes` and `expansion_too_large`, are listed in [`crate::ERROR_CODES`]):
/// the strict loaders' own refusals, which no tool reports today.
pub(crate) const PARSE_CODES: &[&str] =
    &["not_utf8", "invalid_yaml", "invalid_json", "invalid_python"];

/// Why a bounded parse refused its input. Never quotes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The text is not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// The document does not parse (position is 1-based line and column).
    #[error("does not parse at line {line} column {column}")]
    Syntax {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
    },
    /// A mapping repeats a key.
    #[error("duplicate key at line {line} column {column}")]
    DuplicateKey {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
    },
    /// An alias names an anchor that was never defined.
    #[error("unknown alias at line {line} column {column}")]
    UnknownAlias {
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
    },
    /// Collections nest deeper than the limit (aliases included).
    #[error("nesting exceeds {limit} levels")]
    TooDeep {
        /// The bound.
        limit: u64,
    },
    /// The document expands to more nodes than the limit.
    #[error("expands to more than {limit} nodes")]
    TooManyNodes {
        /// The bound.
        limit: u64,
    },
    /// The document's scalars expand to more bytes than the limit.
    #[error("expands to more than {limit} scalar bytes")]
    ExpansionTooLarge {
        /// The bound.
        limit: u64,
    },
    /// JSON that breaks a strictness rule (duplicate key, BOM, `NaN`, shape).
    #[error("JSON rejected: {reason}")]
    Json {
        /// The strict reader's reason (never document content).
        reason: String,
    },
}

impl ParseError {
    /// The stable code of this refusal. Limits have codes of their own; everything else is the
    /// format's generic code (`invalid_yaml`, `invalid_json`, `invalid_python`).
    #[must_use]
    pub fn code(&self, format: Format) -> &'static str {
        match self {
            Self::TooDeep { .. } => "too_deep",
            Self::TooManyNodes { .. } => "too_many_nodes",
            Self::ExpansionTooLarge { .. } => "expansion_too_large",
            Self::NotUtf8 => "not_utf8",
            Self::Syntax { .. }
            | Self::DuplicateKey { .. }
            | Self::UnknownAlias { .. }
            | Self::Json { .. } => format.invalid_code(),
        }
    }

    /// 1-based line and column, when the refusal has a position.
    #[must_use]
    pub fn position(&self) -> Option<(u64, u64)> {
        match self {
            Self::Syntax { line, column }
            | Self::DuplicateKey { line, column }
            | Self::UnknownAlias { line, column } => Some((*line, *column)),
            _ => None,
        }
    }

    /// Whether a limit (rather than a syntax rule) refused the input.
    #[must_use]
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            Self::TooDeep { .. } | Self::TooManyNodes { .. } | Self::ExpansionTooLarge { .. }
        )
    }
}

/// The format a [`ParseError`] came from (selects its generic code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
    /// Python.
    Python,
}

impl Format {
    fn invalid_code(self) -> &'static str {
        match self {
            Self::Yaml => "invalid_yaml",
            Self::Json => "invalid_json",
            Self::Python => "invalid_python",
        }
    }
}

/// Limits of one bounded YAML load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct YamlLimits {
    /// Deepest collection nesting.
    pub depth: usize,
    /// Most expanded nodes (all documents of the stream together).
    pub nodes: usize,
    /// Most expanded scalar bytes (all documents together).
    pub bytes: usize,
}

impl Default for YamlLimits {
    fn default() -> Self {
        Self {
            depth: MAX_YAML_DEPTH,
            nodes: MAX_YAML_NODES,
            bytes: MAX_YAML_EXPANDED_BYTES,
        }
    }
}

/// A resolved YAML scalar (core schema, as `saphyr` resolves it).
#[derive(Debug, Clone, PartialEq)]
pub enum YamlScalar {
    /// `null`, `~` or empty.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A value its tag does not admit (`!!int abc`).
    Bad,
}

/// One node of a bounded YAML document. Depth is bounded by [`YamlLimits::depth`], so walking,
/// comparing or dropping it recursively is safe.
#[derive(Debug, Clone, PartialEq)]
pub enum YamlNode {
    /// A scalar.
    Scalar(YamlScalar),
    /// A sequence.
    Sequence(Vec<YamlNode>),
    /// A mapping, in document order (keys are unique).
    Mapping(Vec<(YamlNode, YamlNode)>),
}

impl YamlNode {
    /// The string value, if this is a string scalar.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Scalar(YamlScalar::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// The items, if this is a sequence.
    #[must_use]
    pub fn as_vec(&self) -> Option<&[YamlNode]> {
        match self {
            Self::Sequence(items) => Some(items),
            _ => None,
        }
    }

    /// The entries, if this is a mapping.
    #[must_use]
    pub fn as_mapping(&self) -> Option<&[(YamlNode, YamlNode)]> {
        match self {
            Self::Mapping(entries) => Some(entries),
            _ => None,
        }
    }

    /// The value under the string key `key`, if this is a mapping holding it.
    #[must_use]
    pub fn as_mapping_get(&self, key: &str) -> Option<&YamlNode> {
        value_under(self.as_mapping()?, key, Self::as_str)
    }

    fn feed_hash(&self, state: &mut impl Hasher) {
        match self {
            Self::Scalar(s) => {
                0u8.hash(state);
                match s {
                    YamlScalar::Null => 0u8.hash(state),
                    YamlScalar::Bool(b) => (1u8, b).hash(state),
                    YamlScalar::Int(i) => (2u8, i).hash(state),
                    YamlScalar::Float(f) => (3u8, f.to_bits()).hash(state),
                    YamlScalar::Str(s) => (4u8, s).hash(state),
                    YamlScalar::Bad => 5u8.hash(state),
                }
            }
            Self::Sequence(items) => {
                (1u8, items.len()).hash(state);
                for item in items {
                    item.feed_hash(state);
                }
            }
            Self::Mapping(entries) => {
                (2u8, entries.len()).hash(state);
                for (k, v) in entries {
                    k.feed_hash(state);
                    v.feed_hash(state);
                }
            }
        }
    }

    fn key_hash(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.feed_hash(&mut hasher);
        hasher.finish()
    }
}

/// The value of the first pair whose key is the string `key` (mappings are kept as pair lists,
/// in document order).
pub(crate) fn value_under<'a, K, V>(
    pairs: &'a [(K, V)],
    key: &str,
    key_text: fn(&K) -> Option<&str>,
) -> Option<&'a V> {
    pairs
        .iter()
        .find(|(k, _)| key_text(k) == Some(key))
        .map(|(_, v)| v)
}

/// Size of a finished subtree, for alias accounting.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    nodes: usize,
    bytes: usize,
    /// Levels of collections in the subtree (0 for a scalar).
    height: usize,
}

enum Frame {
    Sequence {
        anchor: usize,
        items: Vec<YamlNode>,
        start: Cost,
        height: usize,
    },
    Mapping {
        anchor: usize,
        entries: Vec<(YamlNode, YamlNode)>,
        key: Option<(YamlNode, (u64, u64))>,
        index: HashMap<u64, Vec<usize>>,
        start: Cost,
        height: usize,
    },
}

struct Builder {
    limits: YamlLimits,
    used: Cost,
    stack: Vec<Frame>,
    anchors: HashMap<usize, (YamlNode, Cost)>,
    docs: Vec<YamlNode>,
}

fn at(mark: saphyr_parser::Marker) -> (u64, u64) {
    (
        u64::try_from(mark.line()).unwrap_or(u64::MAX),
        u64::try_from(mark.col())
            .unwrap_or(u64::MAX)
            .saturating_add(1),
    )
}

fn limit_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

impl Builder {
    fn charge(&mut self, cost: Cost) -> Result<(), ParseError> {
        self.used.nodes = self.used.nodes.saturating_add(cost.nodes);
        self.used.bytes = self.used.bytes.saturating_add(cost.bytes);
        if self.used.nodes > self.limits.nodes {
            return Err(ParseError::TooManyNodes {
                limit: limit_u64(self.limits.nodes),
            });
        }
        if self.used.bytes > self.limits.bytes {
            return Err(ParseError::ExpansionTooLarge {
                limit: limit_u64(self.limits.bytes),
            });
        }
        if self.stack.len().saturating_add(cost.height) > self.limits.depth {
            return Err(ParseError::TooDeep {
                limit: limit_u64(self.limits.depth),
            });
        }
        Ok(())
    }

    fn open(&mut self, anchor: usize, mapping: bool) -> Result<(), ParseError> {
        if self.stack.len() >= self.limits.depth {
            return Err(ParseError::TooDeep {
                limit: limit_u64(self.limits.depth),
            });
        }
        self.charge(Cost {
            nodes: 1,
            bytes: 0,
            height: 1,
        })?;
        // `start` excludes this collection's own node, added back when it closes.
        let start = Cost {
            nodes: self.used.nodes.saturating_sub(1),
            bytes: self.used.bytes,
            height: 0,
        };
        self.stack.push(if mapping {
            Frame::Mapping {
                anchor,
                entries: Vec::new(),
                key: None,
                index: HashMap::new(),
                start,
                height: 1,
            }
        } else {
            Frame::Sequence {
                anchor,
                items: Vec::new(),
                start,
                height: 1,
            }
        });
        Ok(())
    }

    fn close(&mut self) -> Result<(), ParseError> {
        let frame = self
            .stack
            .pop()
            .ok_or(ParseError::Syntax { line: 0, column: 0 })?;
        let (node, anchor, start, height) = match frame {
            Frame::Sequence {
                anchor,
                items,
                start,
                height,
            } => (YamlNode::Sequence(items), anchor, start, height),
            Frame::Mapping {
                anchor,
                entries,
                key,
                start,
                height,
                ..
            } => {
                if key.is_some() {
                    return Err(ParseError::Syntax { line: 0, column: 0 });
                }
                (YamlNode::Mapping(entries), anchor, start, height)
            }
        };
        let cost = Cost {
            nodes: self.used.nodes.saturating_sub(start.nodes),
            bytes: self.used.bytes.saturating_sub(start.bytes),
            height,
        };
        self.finish(node, anchor, cost, (0, 0))
    }

    /// Places a completed node (already charged) into its parent or the document list.
    fn finish(
        &mut self,
        node: YamlNode,
        anchor: usize,
        cost: Cost,
        pos: (u64, u64),
    ) -> Result<(), ParseError> {
        if anchor > 0 {
            // The anchor keeps a copy: charged like any other expansion.
            self.charge(Cost { height: 0, ..cost })?;
            self.anchors.insert(anchor, (node.clone(), cost));
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Sequence { items, height, .. }) => {
                *height = (*height).max(cost.height.saturating_add(1));
                items.push(node);
            }
            Some(Frame::Mapping {
                entries,
                key,
                index,
                height,
                ..
            }) => {
                *height = (*height).max(cost.height.saturating_add(1));
                match key.take() {
                    None => *key = Some((node, pos)),
                    Some((k, key_pos)) => {
                        let hash = k.key_hash();
                        let slots = index.entry(hash).or_default();
                        if slots
                            .iter()
                            .any(|&i| entries.get(i).is_some_and(|(e, _)| *e == k))
                        {
                            return Err(ParseError::DuplicateKey {
                                line: key_pos.0,
                                column: key_pos.1,
                            });
                        }
                        slots.push(entries.len());
                        entries.push((k, node));
                    }
                }
            }
        }
        Ok(())
    }

    fn scalar(
        &mut self,
        value: Cow<'_, str>,
        style: ScalarStyle,
        anchor: usize,
        tag: Option<&Cow<'_, saphyr_parser::Tag>>,
        pos: (u64, u64),
    ) -> Result<(), ParseError> {
        let cost = Cost {
            nodes: 1,
            bytes: value.len(),
            height: 0,
        };
        self.charge(cost)?;
        let scalar = match Scalar::parse_from_cow_and_metadata(value, style, tag) {
            Some(Scalar::Null) => YamlScalar::Null,
            Some(Scalar::Boolean(b)) => YamlScalar::Bool(b),
            Some(Scalar::Integer(i)) => YamlScalar::Int(i),
            Some(Scalar::FloatingPoint(f)) => YamlScalar::Float(f.into_inner()),
            Some(Scalar::String(s)) => YamlScalar::Str(s.into_owned()),
            None => YamlScalar::Bad,
        };
        self.finish(YamlNode::Scalar(scalar), anchor, cost, pos)
    }

    fn alias(&mut self, id: usize, pos: (u64, u64)) -> Result<(), ParseError> {
        let Some((_, cost)) = self.anchors.get(&id) else {
            return Err(ParseError::UnknownAlias {
                line: pos.0,
                column: pos.1,
            });
        };
        let cost = *cost;
        // Charged before cloning: the expansion is refused before it is allocated.
        self.charge(cost)?;
        let node = self.anchors.get(&id).map(|(node, _)| node.clone()).ok_or(
            ParseError::UnknownAlias {
                line: pos.0,
                column: pos.1,
            },
        )?;
        self.finish(node, 0, cost, pos)
    }
}

fn syntax(e: &ScanError) -> ParseError {
    let (line, column) = at(*e.marker());
    ParseError::Syntax { line, column }
}

/// Loads every document of a YAML stream within `limits`.
///
/// # Errors
/// [`ParseError`]: syntax, duplicate keys, unknown aliases, or the first limit exceeded.
///
/// # Security
/// Iterative: no recursion on the document's depth; aliases are charged at their expanded cost
/// before they are copied.
pub fn load_yaml(text: &str, limits: &YamlLimits) -> Result<Vec<YamlNode>, ParseError> {
    let _budget = crate::budget::reserve(
        crate::budget::Work::Yaml,
        u64::try_from(text.len()).unwrap_or(u64::MAX),
    );
    let mut parser = Parser::new_from_str(text);
    let mut builder = Builder {
        limits: *limits,
        used: Cost::default(),
        stack: Vec::new(),
        anchors: HashMap::new(),
        docs: Vec::new(),
    };
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| syntax(&e))?;
        let pos = at(span.start);
        match event {
            Event::StreamStart | Event::Nothing | Event::DocumentEnd => {}
            Event::StreamEnd => break,
            Event::DocumentStart(_) => builder.anchors.clear(),
            Event::Alias(id) => builder.alias(id, pos)?,
            Event::Scalar(value, style, anchor, tag) => {
                builder.scalar(value, style, anchor, tag.as_ref(), pos)?;
            }
            Event::SequenceStart(anchor, _) => builder.open(anchor, false)?,
            Event::MappingStart(anchor, _) => builder.open(anchor, true)?,
            Event::SequenceEnd | Event::MappingEnd => builder.close()?,
        }
    }
    Ok(builder.docs)
}

/// Loads a stream that must hold exactly one document.
///
/// # Errors
/// As [`load_yaml`]; `None` inside `Ok` never happens: a stream with zero or several documents
/// is [`SingleDocError::Count`].
pub fn load_yaml_single(bytes: &[u8], limits: &YamlLimits) -> Result<YamlNode, SingleDocError> {
    let text =
        std::str::from_utf8(bytes).map_err(|_| SingleDocError::Parse(ParseError::NotUtf8))?;
    let mut docs = load_yaml(text, limits).map_err(SingleDocError::Parse)?;
    if docs.len() != 1 {
        return Err(SingleDocError::Count);
    }
    docs.pop().ok_or(SingleDocError::Count)
}

/// Why [`load_yaml_single`] refused a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SingleDocError {
    /// The stream does not load.
    #[error("{0}")]
    Parse(ParseError),
    /// The stream holds zero or several documents.
    #[error("expected exactly one YAML document")]
    Count,
}

/// Checks the shape bounds of a JSON document without materialising it: nesting depth and value
/// count (strings are skipped with their escapes; the strict reader checks everything else).
///
/// # Errors
/// [`ParseError::TooDeep`] or [`ParseError::TooManyNodes`].
pub fn check_json(bytes: &[u8]) -> Result<(), ParseError> {
    let mut depth = 0usize;
    let mut values = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut expect_value = true;
    for &b in bytes {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        let starts_value = match b {
            b'[' | b'{' => {
                depth = depth.saturating_add(1);
                if depth > MAX_JSON_DEPTH {
                    return Err(ParseError::TooDeep {
                        limit: limit_u64(MAX_JSON_DEPTH),
                    });
                }
                true
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                false
            }
            b'"' => {
                in_string = true;
                true
            }
            b',' | b':' => {
                expect_value = true;
                continue;
            }
            b' ' | b'\t' | b'\n' | b'\r' => continue,
            _ => true,
        };
        if starts_value && expect_value {
            values = values.saturating_add(1);
            if values > MAX_JSON_NODES {
                return Err(ParseError::TooManyNodes {
                    limit: limit_u64(MAX_JSON_NODES),
                });
            }
        }
        expect_value = matches!(b, b'[' | b'{');
    }
    Ok(())
}

/// [`check_json`], then the strict reader (`vocab::from_slice_strict`).
///
/// # Errors
/// The limit exceeded, or the strict reader's refusal.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8], max_bytes: usize) -> Result<T, ParseError> {
    if bytes.len() > max_bytes {
        return Err(ParseError::ExpansionTooLarge {
            limit: limit_u64(max_bytes),
        });
    }
    check_json(bytes)?;
    let _budget = crate::budget::reserve(
        crate::budget::Work::Json,
        u64::try_from(bytes.len()).unwrap_or(u64::MAX),
    );
    vocab::from_slice_strict(bytes, max_bytes).map_err(|e| match e {
        vocab::StrictJsonError::Syntax { line, column } => ParseError::Syntax {
            line: limit_u64(line),
            column: limit_u64(column),
        },
        vocab::StrictJsonError::TooDeep => ParseError::TooDeep {
            limit: limit_u64(MAX_JSON_DEPTH),
        },
        vocab::StrictJsonError::NotUtf8 => ParseError::NotUtf8,
        other => ParseError::Json {
            reason: other.to_string(),
        },
    })
}

/// Refuses Python sources whose brackets nest deeper than [`MAX_PYTHON_NESTING`] (CPython refuses
/// them too), before the parser builds a tree for them. Strings and comments are skipped.
///
/// # Errors
/// [`ParseError::TooDeep`].
pub fn check_python_nesting(text: &str) -> Result<(), ParseError> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0usize;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'#' => {
                while bytes.get(i).is_some_and(|&c| c != b'\n') {
                    i += 1;
                }
                continue;
            }
            b'\'' | b'"' => {
                let triple = bytes.get(i + 1) == Some(&b) && bytes.get(i + 2) == Some(&b);
                let width = if triple { 3 } else { 1 };
                i += width;
                while let Some(&c) = bytes.get(i) {
                    if c == b'\\' {
                        i += 2;
                        continue;
                    }
                    if c == b
                        && (!triple
                            || (bytes.get(i + 1) == Some(&b) && bytes.get(i + 2) == Some(&b)))
                    {
                        i += width;
                        break;
                    }
                    if c == b'\n' && !triple {
                        break;
                    }
                    i += 1;
                }
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                if depth > MAX_PYTHON_NESTING {
                    return Err(ParseError::TooDeep {
                        limit: limit_u64(MAX_PYTHON_NESTING),
                    });
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
#[path = "bounded_tests.rs"]
mod tests;
