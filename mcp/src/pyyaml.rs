//! YAML loaded the way the upstream core library loads it: PyYAML's `safe_load` (YAML 1.1
//! implicit typing of plain scalars, one document at most, only the safe constructor's tags,
//! duplicate keys allowed with the last value kept, unhashable keys and malformed merge keys
//! refused). The syntax itself comes from `saphyr-parser` events; this module only builds values
//! and applies the constructor's rules, so a file accepted here is one `safe_load` accepts.
//!
//! Values keep only what callers need: strings keep their text, other scalars keep their kind
//! and Python's `str()` of them. Nothing here quotes file content in an error.

use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, SpannedEventReceiver, Tag};

/// Deepest collection nesting accepted: the shared bounded parser's limit (PyYAML's composer
/// recurses per level and gives up near Python's recursion limit, deeper than this).
pub const MAX_DEPTH: usize = crate::bounded::MAX_YAML_DEPTH;
/// Most nodes one file may build, alias expansions included.
pub const MAX_NODES: usize = 200_000;
/// Most scalar bytes alias expansions may copy.
pub const MAX_EXPANDED_BYTES: usize = 4 * 1024 * 1024;

/// A constructed value.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `None`.
    Null,
    /// `True` / `False`.
    Bool(bool),
    /// An `int`, with Python's `str()` of it.
    Int(String),
    /// A `float`, with its source text.
    Float(String),
    /// A `str`.
    Str(String),
    /// A `datetime` / `date` (YAML 1.1 timestamp).
    Timestamp(String),
    /// `bytes` (`!!binary`).
    Binary,
    /// A `list`.
    Seq(Vec<PyValue>),
    /// A `dict` in insertion order (duplicate keys already collapsed, last value kept).
    Map(Vec<(PyValue, PyValue)>),
    /// A `set` (`!!set`).
    Set,
}

impl PyValue {
    /// The string, if this is a `str`.
    #[must_use]
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The entries, if this is a `dict`.
    #[must_use]
    pub fn as_map(&self) -> Option<&[(PyValue, PyValue)]> {
        match self {
            Self::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The value under string key `key` of a `dict`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&PyValue> {
        crate::bounded::value_under(self.as_map()?, key, Self::as_str)
    }

    /// Python truthiness (`value or ""` idioms).
    #[must_use]
    pub fn truthy(&self) -> bool {
        match self {
            Self::Null => false,
            Self::Bool(b) => *b,
            Self::Int(s) => s != "0",
            Self::Float(s) => !s
                .trim_start_matches(['+', '-'])
                .trim_matches(['0', '.', '_'])
                .is_empty(),
            Self::Str(s) => !s.is_empty(),
            Self::Seq(items) => !items.is_empty(),
            Self::Map(entries) => !entries.is_empty(),
            Self::Timestamp(_) | Self::Binary | Self::Set => true,
        }
    }

    /// Python's `str(value)` for scalars (collections give a placeholder that is never a valid
    /// identifier, which is all callers need).
    #[must_use]
    pub fn py_str(&self) -> String {
        match self {
            Self::Null => "None".to_owned(),
            Self::Bool(true) => "True".to_owned(),
            Self::Bool(false) => "False".to_owned(),
            Self::Int(s) | Self::Float(s) | Self::Str(s) | Self::Timestamp(s) => s.clone(),
            Self::Binary => "b''".to_owned(),
            Self::Seq(_) => "[...]".to_owned(),
            Self::Map(_) => "{...}".to_owned(),
            Self::Set => "set()".to_owned(),
        }
    }
}

/// Why `safe_load` would refuse a file (never quoting it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlProblem {
    /// The scanner or parser refused the text (1-based line, 1-based column).
    Syntax {
        /// Line.
        line: u64,
        /// Column.
        column: u64,
    },
    /// More than one document: `safe_load` expects a single document in the stream.
    MultipleDocuments {
        /// Line where the second document starts.
        line: u64,
    },
    /// A tag the safe constructor has no constructor for.
    UnsupportedTag {
        /// Line.
        line: u64,
    },
    /// A node the safe constructor cannot build (bad merge key, unhashable key, impossible date,
    /// explicit tag on a value of the wrong shape).
    Unconstructible {
        /// Line.
        line: u64,
        /// Which rule (our vocabulary).
        what: &'static str,
    },
    /// Nesting deeper than [`MAX_DEPTH`].
    TooDeep,
    /// More nodes than [`MAX_NODES`] (alias expansion included).
    TooManyNodes,
    /// The bytes are not UTF-8.
    NotUtf8,
}

impl YamlProblem {
    /// The line concerned, when known.
    #[must_use]
    pub fn line(&self) -> Option<u64> {
        match self {
            Self::Syntax { line, .. }
            | Self::MultipleDocuments { line }
            | Self::UnsupportedTag { line }
            | Self::Unconstructible { line, .. } => Some(*line),
            Self::TooDeep | Self::TooManyNodes | Self::NotUtf8 => None,
        }
    }

    /// The column concerned, when known.
    #[must_use]
    pub fn column(&self) -> Option<u64> {
        match self {
            Self::Syntax { column, .. } => Some(*column),
            _ => None,
        }
    }

    /// One sentence, never quoting the file.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Syntax { .. } => "YAML does not parse.".to_owned(),
            Self::MultipleDocuments { .. } => {
                "YAML stream has more than one document (safe_load expects a single document)."
                    .to_owned()
            }
            Self::UnsupportedTag { .. } => {
                "YAML uses a tag the safe loader has no constructor for.".to_owned()
            }
            Self::Unconstructible { what, .. } => {
                format!("YAML node cannot be constructed: {what}.")
            }
            Self::TooDeep => format!("YAML nesting exceeds {MAX_DEPTH} levels."),
            Self::TooManyNodes => format!(
                "YAML expands to more than {MAX_NODES} nodes or {MAX_EXPANDED_BYTES} alias-copied bytes."
            ),
            Self::NotUtf8 => "File is not UTF-8.".to_owned(),
        }
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `yaml.safe_load(text)`: `Ok(None)` for an empty stream, `Ok(Some(value))` for one document.
///
/// # Errors
/// The first rule `safe_load` would refuse the text for.
pub fn safe_load(bytes: &[u8]) -> Result<Option<PyValue>, YamlProblem> {
    let text = std::str::from_utf8(bytes).map_err(|_| YamlProblem::NotUtf8)?;
    // The shared bounded loader first: its depth, node and expansion limits (and the working
    // memory budget) apply before anything is built here; its YAML 1.2 syntax verdicts are not
    // used (duplicate keys, for one, are allowed by PyYAML).
    if let Err(e) = crate::bounded::load_yaml(text, &crate::bounded::YamlLimits::default())
        && e.is_limit()
    {
        return Err(match e {
            crate::bounded::ParseError::TooDeep { .. } => YamlProblem::TooDeep,
            _ => YamlProblem::TooManyNodes,
        });
    }
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    let outcome = parser.load(&mut builder, true);
    if let Some(problem) = builder.problem.take() {
        return Err(problem);
    }
    if let Err(e) = outcome {
        let marker = e.marker();
        return Err(YamlProblem::Syntax {
            line: to_u64(marker.line()),
            column: to_u64(marker.col()).saturating_add(1),
        });
    }
    Ok(builder.root)
}

#[derive(Debug)]
enum Frame {
    Seq {
        items: Vec<PyValue>,
        anchor: usize,
        tag: Option<String>,
        line: u64,
    },
    Map {
        entries: Vec<(PyValue, PyValue)>,
        merges: Vec<PyValue>,
        key: Option<(PyValue, bool)>,
        anchor: usize,
        tag: Option<String>,
        line: u64,
    },
}

#[derive(Debug, Default)]
struct Builder {
    docs: usize,
    stack: Vec<Frame>,
    anchors: HashMap<usize, PyValue>,
    root: Option<PyValue>,
    problem: Option<YamlProblem>,
    nodes: usize,
    expanded_bytes: usize,
}

const CORE: &str = "tag:yaml.org,2002:";

/// The tag as PyYAML sees it: `None` for no tag or the non-specific `!`.
fn full_tag(tag: Option<&Tag>) -> Option<String> {
    let tag = tag?;
    if tag.handle == "!" && tag.suffix.is_empty() {
        return None;
    }
    Some(if tag.handle == "!" {
        format!("!{}", tag.suffix)
    } else {
        format!("{}{}", tag.handle, tag.suffix)
    })
}

impl SpannedEventReceiver<'_> for Builder {
    fn on_event(&mut self, ev: Event<'_>, span: Span) {
        if self.problem.is_some() {
            return;
        }
        if let Err(problem) = self.event(ev, span) {
            self.problem = Some(problem);
        }
    }
}

impl Builder {
    fn event(&mut self, ev: Event<'_>, span: Span) -> Result<(), YamlProblem> {
        let line = to_u64(span.start.line());
        match ev {
            Event::DocumentStart(_) => {
                self.docs += 1;
                if self.docs > 1 {
                    return Err(YamlProblem::MultipleDocuments { line });
                }
            }
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
            Event::SequenceStart(anchor, tag) => {
                self.open(Frame::Seq {
                    items: Vec::new(),
                    anchor,
                    tag: full_tag(tag.as_deref()),
                    line,
                })?;
            }
            Event::MappingStart(anchor, tag) => {
                self.open(Frame::Map {
                    entries: Vec::new(),
                    merges: Vec::new(),
                    key: None,
                    anchor,
                    tag: full_tag(tag.as_deref()),
                    line,
                })?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let frame = self
                    .stack
                    .pop()
                    .ok_or(YamlProblem::Syntax { line, column: 1 })?;
                let (value, anchor) = close(frame)?;
                self.insert(value, anchor, line, false)?;
            }
            Event::Scalar(text, style, anchor, tag) => {
                let tag = full_tag(tag.as_deref());
                let (value, is_merge) = scalar(&text, style, tag.as_deref(), line)?;
                self.insert(value, anchor, line, is_merge)?;
            }
            Event::Alias(id) => {
                let value = self
                    .anchors
                    .get(&id)
                    .cloned()
                    .ok_or(YamlProblem::Syntax { line, column: 1 })?;
                let (nodes, bytes) = count_nodes(&value);
                self.nodes = self.nodes.saturating_add(nodes);
                self.expanded_bytes = self.expanded_bytes.saturating_add(bytes);
                if self.nodes > MAX_NODES || self.expanded_bytes > MAX_EXPANDED_BYTES {
                    return Err(YamlProblem::TooManyNodes);
                }
                self.insert(value, 0, line, false)?;
            }
        }
        Ok(())
    }

    fn open(&mut self, frame: Frame) -> Result<(), YamlProblem> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlProblem::TooDeep);
        }
        self.bump()?;
        self.stack.push(frame);
        Ok(())
    }

    fn bump(&mut self) -> Result<(), YamlProblem> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(YamlProblem::TooManyNodes);
        }
        Ok(())
    }

    fn insert(
        &mut self,
        value: PyValue,
        anchor: usize,
        line: u64,
        is_merge: bool,
    ) -> Result<(), YamlProblem> {
        if !matches!(value, PyValue::Seq(_) | PyValue::Map(_)) {
            self.bump()?;
        }
        if anchor > 0 {
            self.anchors.insert(anchor, value.clone());
        }
        match self.stack.last_mut() {
            None => {
                if is_merge {
                    return Err(YamlProblem::UnsupportedTag { line });
                }
                self.root = Some(value);
            }
            Some(Frame::Seq { items, .. }) => {
                if is_merge {
                    return Err(YamlProblem::UnsupportedTag { line });
                }
                items.push(value);
            }
            Some(Frame::Map {
                entries,
                merges,
                key,
                ..
            }) => match key.take() {
                None => {
                    if !is_merge && matches!(value, PyValue::Seq(_) | PyValue::Map(_)) {
                        return Err(YamlProblem::Unconstructible {
                            line,
                            what: "a mapping key is a list or mapping (unhashable)",
                        });
                    }
                    *key = Some((value, is_merge));
                }
                Some((_, true)) => {
                    if is_merge {
                        return Err(YamlProblem::UnsupportedTag { line });
                    }
                    let ok = match &value {
                        PyValue::Map(_) => true,
                        PyValue::Seq(items) => items.iter().all(|i| matches!(i, PyValue::Map(_))),
                        _ => false,
                    };
                    if !ok {
                        return Err(YamlProblem::Unconstructible {
                            line,
                            what: "a merge key needs a mapping or a list of mappings",
                        });
                    }
                    merges.push(value);
                }
                Some((k, false)) => {
                    if is_merge {
                        return Err(YamlProblem::UnsupportedTag { line });
                    }
                    put(entries, k, value);
                }
            },
        }
        Ok(())
    }
}

/// `dict[key] = value`: the first position is kept, the last value wins.
fn put(entries: &mut Vec<(PyValue, PyValue)>, key: PyValue, value: PyValue) {
    if let Some(slot) = entries.iter_mut().find(|(k, _)| *k == key) {
        slot.1 = value;
    } else {
        entries.push((key, value));
    }
}

/// Nodes and scalar bytes an alias expansion copies (counted before it is copied).
fn count_nodes(value: &PyValue) -> (usize, usize) {
    let mut count = 0usize;
    let mut bytes = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        count += 1;
        match v {
            PyValue::Int(t) | PyValue::Float(t) | PyValue::Str(t) | PyValue::Timestamp(t) => {
                bytes = bytes.saturating_add(t.len());
            }
            PyValue::Seq(items) => stack.extend(items.iter()),
            PyValue::Map(entries) => {
                for (k, val) in entries {
                    stack.push(k);
                    stack.push(val);
                }
            }
            _ => {}
        }
        if count > MAX_NODES || bytes > MAX_EXPANDED_BYTES {
            break;
        }
    }
    (count, bytes)
}

fn close(frame: Frame) -> Result<(PyValue, usize), YamlProblem> {
    match frame {
        Frame::Seq {
            items,
            anchor,
            tag,
            line,
        } => {
            match tag.as_deref().and_then(|t| t.strip_prefix(CORE)) {
                None if tag.is_none() => {}
                Some("seq") => {}
                Some("omap" | "pairs") => {
                    let pairs = items
                        .iter()
                        .all(|i| matches!(i, PyValue::Map(e) if e.len() == 1));
                    if !pairs {
                        return Err(YamlProblem::Unconstructible {
                            line,
                            what: "an ordered map needs single-pair mappings",
                        });
                    }
                }
                Some(_) if tag.as_deref().is_some_and(|t| t.starts_with(CORE)) => {
                    return Err(YamlProblem::Unconstructible {
                        line,
                        what: "a scalar or mapping tag on a sequence",
                    });
                }
                _ => return Err(YamlProblem::UnsupportedTag { line }),
            }
            Ok((PyValue::Seq(items), anchor))
        }
        Frame::Map {
            entries,
            merges,
            key,
            anchor,
            tag,
            line,
        } => {
            if key.is_some() {
                return Err(YamlProblem::Syntax { line, column: 1 });
            }
            let value = match tag.as_deref().and_then(|t| t.strip_prefix(CORE)) {
                None if tag.is_none() => merged(entries, merges),
                Some("map") => merged(entries, merges),
                Some("set") => PyValue::Set,
                Some(_) if tag.as_deref().is_some_and(|t| t.starts_with(CORE)) => {
                    return Err(YamlProblem::Unconstructible {
                        line,
                        what: "a scalar or sequence tag on a mapping",
                    });
                }
                _ => return Err(YamlProblem::UnsupportedTag { line }),
            };
            Ok((value, anchor))
        }
    }
}

/// PyYAML's `flatten_mapping`: merged entries first (earlier merges win over later ones),
/// explicit entries override them.
fn merged(entries: Vec<(PyValue, PyValue)>, merges: Vec<PyValue>) -> PyValue {
    if merges.is_empty() {
        return PyValue::Map(entries);
    }
    let mut sources: Vec<Vec<(PyValue, PyValue)>> = Vec::new();
    for m in merges {
        match m {
            PyValue::Map(e) => sources.push(e),
            PyValue::Seq(items) => {
                for item in items {
                    if let PyValue::Map(e) = item {
                        sources.push(e);
                    }
                }
            }
            _ => {}
        }
    }
    let mut out: Vec<(PyValue, PyValue)> = Vec::new();
    for source in sources.into_iter().rev() {
        for (k, v) in source {
            put(&mut out, k, v);
        }
    }
    for (k, v) in entries {
        put(&mut out, k, v);
    }
    PyValue::Map(out)
}

/// Resolves and constructs one scalar; the bool says "this is the `<<` merge key".
fn scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<&str>,
    line: u64,
) -> Result<(PyValue, bool), YamlProblem> {
    let resolved = match tag {
        Some(t) => match t.strip_prefix(CORE) {
            Some(kind) => kind.to_owned(),
            None => return Err(YamlProblem::UnsupportedTag { line }),
        },
        None if style == ScalarStyle::Plain => implicit_kind(text).to_owned(),
        None => "str".to_owned(),
    };
    let bad = |what: &'static str| YamlProblem::Unconstructible { line, what };
    let value = match resolved.as_str() {
        "str" => PyValue::Str(text.to_owned()),
        "null" => PyValue::Null,
        "bool" => match text.to_ascii_lowercase().as_str() {
            "yes" | "true" | "on" => PyValue::Bool(true),
            "no" | "false" | "off" => PyValue::Bool(false),
            _ => return Err(bad("not a boolean")),
        },
        "int" => PyValue::Int(int_text(text).ok_or_else(|| bad("not an integer"))?),
        "float" => {
            if !(is_float(text) || is_int(text) || text.trim().parse::<f64>().is_ok()) {
                return Err(bad("not a float"));
            }
            PyValue::Float(text.to_owned())
        }
        "timestamp" => {
            if !valid_timestamp(text) {
                return Err(bad("not a valid date or time"));
            }
            PyValue::Timestamp(text.to_owned())
        }
        "binary" => {
            if !is_base64(text) {
                return Err(bad("not base64"));
            }
            PyValue::Binary
        }
        "merge" if tag.is_none() => return Ok((PyValue::Null, true)),
        "seq" | "map" | "omap" | "pairs" | "set" => {
            return Err(bad("a collection tag on a scalar"));
        }
        _ => return Err(YamlProblem::UnsupportedTag { line }),
    };
    Ok((value, false))
}

/// PyYAML's implicit resolvers for plain scalars (YAML 1.1), in its order.
fn implicit_kind(text: &str) -> &'static str {
    if matches!(
        text,
        "yes"
            | "Yes"
            | "YES"
            | "no"
            | "No"
            | "NO"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
    ) {
        return "bool";
    }
    if is_float(text) {
        return "float";
    }
    if is_int(text) {
        return "int";
    }
    if text == "<<" {
        return "merge";
    }
    if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
        return "null";
    }
    if timestamp_parts(text).is_some() {
        return "timestamp";
    }
    if text == "=" {
        return "value";
    }
    "str"
}

/// A tiny cursor for the hand-written matchers below (each mirrors one PyYAML regex).
struct Cur<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cur<'a> {
    fn new(s: &'a str) -> Self {
        Self {
            b: s.as_bytes(),
            i: 0,
        }
    }
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }
    fn eat(&mut self, f: impl Fn(u8) -> bool) -> bool {
        match self.peek() {
            Some(c) if f(c) => {
                self.i += 1;
                true
            }
            _ => false,
        }
    }
    fn eat_byte(&mut self, c: u8) -> bool {
        self.eat(|x| x == c)
    }
    fn many(&mut self, f: impl Fn(u8) -> bool + Copy) -> usize {
        let mut n = 0;
        while self.eat(f) {
            n += 1;
        }
        n
    }
    fn sign(&mut self) {
        let _ = self.eat(|c| c == b'-' || c == b'+');
    }
    fn done(&self) -> bool {
        self.i == self.b.len()
    }
    fn eat_str(&mut self, s: &str) -> bool {
        let end = self.i + s.len();
        if self.b.get(self.i..end) == Some(s.as_bytes()) {
            self.i = end;
            true
        } else {
            false
        }
    }
}

fn digit(c: u8) -> bool {
    c.is_ascii_digit()
}
fn digit_(c: u8) -> bool {
    c.is_ascii_digit() || c == b'_'
}

/// `[eE][-+][0-9]+` (optional).
fn exponent(c: &mut Cur<'_>) -> bool {
    let save = c.i;
    if c.eat(|x| x == b'e' || x == b'E') {
        if c.eat(|x| x == b'-' || x == b'+') && c.many(digit) > 0 {
            return true;
        }
        c.i = save;
        return false;
    }
    true
}

/// `(?::[0-5]?[0-9])+`
fn sexagesimal(c: &mut Cur<'_>) -> bool {
    let mut groups = 0;
    loop {
        let save = c.i;
        if !c.eat_byte(b':') {
            break;
        }
        let a = c.eat(digit);
        if !a {
            c.i = save;
            break;
        }
        // `[0-5]?[0-9]`: one digit, or a 0-5 digit followed by another digit.
        let first = c.b.get(c.i - 1).copied().unwrap_or(b'9');
        if first <= b'5' {
            let _ = c.eat(digit);
        }
        groups += 1;
    }
    groups > 0
}

fn is_float(text: &str) -> bool {
    let alternatives: [&dyn Fn(&mut Cur<'_>) -> bool; 5] = [
        &|c| {
            c.sign();
            c.eat(digit)
                && {
                    c.many(digit_);
                    c.eat_byte(b'.')
                }
                && {
                    c.many(digit_);
                    exponent(c)
                }
        },
        &|c| {
            c.eat_byte(b'.') && c.eat(digit) && {
                c.many(digit_);
                exponent(c)
            }
        },
        &|c| {
            c.sign();
            c.eat(digit)
                && {
                    c.many(digit_);
                    sexagesimal(c)
                }
                && c.eat_byte(b'.')
                && {
                    c.many(digit_);
                    true
                }
        },
        &|c| {
            c.sign();
            c.eat_byte(b'.') && (c.eat_str("inf") || c.eat_str("Inf") || c.eat_str("INF"))
        },
        &|c| c.eat_byte(b'.') && (c.eat_str("nan") || c.eat_str("NaN") || c.eat_str("NAN")),
    ];
    alternatives.iter().any(|alt| {
        let mut c = Cur::new(text);
        alt(&mut c) && c.done()
    })
}

fn is_int(text: &str) -> bool {
    let alternatives: [&dyn Fn(&mut Cur<'_>) -> bool; 5] = [
        &|c| {
            c.sign();
            c.eat_str("0b") && c.many(|x| x == b'0' || x == b'1' || x == b'_') > 0
        },
        &|c| {
            c.sign();
            c.eat_byte(b'0') && c.many(|x| (b'0'..=b'7').contains(&x) || x == b'_') > 0
        },
        &|c| {
            c.sign();
            c.eat_byte(b'0')
                || (c.eat(|x| (b'1'..=b'9').contains(&x)) && {
                    c.many(digit_);
                    true
                })
        },
        &|c| {
            c.sign();
            c.eat_str("0x") && c.many(|x| x.is_ascii_hexdigit() || x == b'_') > 0
        },
        &|c| {
            c.sign();
            c.eat(|x| (b'1'..=b'9').contains(&x)) && {
                c.many(digit_);
                sexagesimal(c)
            }
        },
    ];
    alternatives.iter().any(|alt| {
        let mut c = Cur::new(text);
        alt(&mut c) && c.done()
    })
}

/// PyYAML's `construct_yaml_int`, rendered as Python's `str()` of the result; `None` when the
/// constructor raises.
fn int_text(text: &str) -> Option<String> {
    let cleaned: String = text.chars().filter(|c| *c != '_').collect();
    let (negative, body) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest.to_owned()),
        None => (
            false,
            cleaned.strip_prefix('+').unwrap_or(&cleaned).to_owned(),
        ),
    };
    let magnitude: Option<i128> = if body == "0" {
        Some(0)
    } else if let Some(bin) = body.strip_prefix("0b") {
        i128::from_str_radix(bin, 2).ok()
    } else if let Some(hex) = body.strip_prefix("0x") {
        i128::from_str_radix(hex, 16).ok()
    } else if let Some(oct) = body.strip_prefix('0') {
        i128::from_str_radix(oct, 8).ok()
    } else if body.contains(':') {
        let mut total: i128 = 0;
        for part in body.split(':') {
            total = total
                .checked_mul(60)?
                .checked_add(part.parse::<i128>().ok()?)?;
        }
        Some(total)
    } else {
        body.parse::<i128>().ok()
    };
    match magnitude {
        Some(m) => Some(if negative && m != 0 {
            format!("-{m}")
        } else {
            m.to_string()
        }),
        // Outside i128 but syntactically an integer: Python has big ints.
        None if !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()) => {
            Some(if negative { format!("-{body}") } else { body })
        }
        None => None,
    }
}

/// The fields of a YAML 1.1 timestamp, when the text matches PyYAML's timestamp regex.
#[derive(Debug, Clone, Copy)]
struct Stamp {
    year: u32,
    month: u32,
    day: u32,
    time: Option<(u32, u32, u32)>,
    tz_minutes: Option<u32>,
}

fn number(c: &mut Cur<'_>, min: usize, max: usize) -> Option<u32> {
    let start = c.i;
    let mut n = 0;
    while n < max && c.eat(digit) {
        n += 1;
    }
    if n < min {
        return None;
    }
    std::str::from_utf8(c.b.get(start..c.i)?).ok()?.parse().ok()
}

fn timestamp_parts(text: &str) -> Option<Stamp> {
    let mut c = Cur::new(text);
    let year = number(&mut c, 4, 4)?;
    if !c.eat_byte(b'-') {
        return None;
    }
    // Date only: exactly two-digit month and day.
    let save = c.i;
    if let Some(month) = number(&mut c, 2, 2)
        && c.eat_byte(b'-')
        && let Some(day) = number(&mut c, 2, 2)
        && c.done()
    {
        return Some(Stamp {
            year,
            month,
            day,
            time: None,
            tz_minutes: None,
        });
    }
    c.i = save;
    let month = number(&mut c, 1, 2)?;
    if !c.eat_byte(b'-') {
        return None;
    }
    let day = number(&mut c, 1, 2)?;
    if !c.eat(|x| x == b'T' || x == b't') && c.many(|x| x == b' ' || x == b'\t') == 0 {
        return None;
    }
    let hour = number(&mut c, 1, 2)?;
    if !c.eat_byte(b':') {
        return None;
    }
    let minute = number(&mut c, 2, 2)?;
    if !c.eat_byte(b':') {
        return None;
    }
    let second = number(&mut c, 2, 2)?;
    if c.eat_byte(b'.') {
        c.many(digit);
    }
    let before_tz = c.i;
    c.many(|x| x == b' ' || x == b'\t');
    let mut tz_minutes = None;
    if c.eat_byte(b'Z') {
        tz_minutes = Some(0);
    } else if c.eat(|x| x == b'-' || x == b'+') {
        let h = number(&mut c, 1, 2)?;
        let m = if c.eat_byte(b':') {
            number(&mut c, 2, 2)?
        } else {
            0
        };
        tz_minutes = Some(h * 60 + m);
    } else {
        c.i = before_tz;
    }
    if !c.done() {
        return None;
    }
    Some(Stamp {
        year,
        month,
        day,
        time: Some((hour, minute, second)),
        tz_minutes,
    })
}

/// Whether Python's `datetime` accepts the fields (the constructor raises otherwise).
fn valid_timestamp(text: &str) -> bool {
    let Some(s) = timestamp_parts(text) else {
        return false;
    };
    let leap = (s.year % 4 == 0 && s.year % 100 != 0) || s.year % 400 == 0;
    let days = match s.month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if s.year == 0 || s.day == 0 || s.day > days {
        return false;
    }
    if let Some((h, m, sec)) = s.time
        && (h > 23 || m > 59 || sec > 59)
    {
        return false;
    }
    s.tz_minutes.is_none_or(|tz| tz < 24 * 60)
}

fn is_base64(text: &str) -> bool {
    let cleaned: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    cleaned.len().is_multiple_of(4)
        && cleaned
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Option<PyValue>, YamlProblem> {
        safe_load(text.as_bytes())
    }

    /// `load(text)` is refused with a problem of the variant `kind`.
    macro_rules! assert_refused {
        ($text:expr, $kind:ident) => {
            assert!(
                matches!(load($text), Err(YamlProblem::$kind { .. })),
                "{:?}",
                $text
            )
        };
    }

    #[test]
    fn yaml11_implicit_types() {
        let doc = load(
            "a: yes\nb: off\nc: 0x1F\nd: 0o7\ne: 1_000\nf: 1.5\ng: 1e3\nh: ~\ni: 2026-01-02\nj: '2026-01-02'\nk: 1:30\nl: .inf\nm: 012\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(doc.get("a"), Some(&PyValue::Bool(true)));
        assert_eq!(doc.get("b"), Some(&PyValue::Bool(false)));
        assert_eq!(doc.get("c"), Some(&PyValue::Int("31".into())));
        assert_eq!(doc.get("d"), Some(&PyValue::Str("0o7".into())));
        assert_eq!(doc.get("e"), Some(&PyValue::Int("1000".into())));
        assert_eq!(doc.get("f"), Some(&PyValue::Float("1.5".into())));
        assert_eq!(doc.get("g"), Some(&PyValue::Str("1e3".into())));
        assert_eq!(doc.get("h"), Some(&PyValue::Null));
        assert!(matches!(doc.get("i"), Some(PyValue::Timestamp(_))));
        assert_eq!(doc.get("j"), Some(&PyValue::Str("2026-01-02".into())));
        assert_eq!(doc.get("k"), Some(&PyValue::Int("90".into())));
        assert!(matches!(doc.get("l"), Some(PyValue::Float(_))));
        assert_eq!(doc.get("m"), Some(&PyValue::Int("10".into())));
    }

    #[test]
    fn safe_load_refusals() {
        assert_eq!(load(""), Ok(None));
        assert_eq!(load("# only a comment\n"), Ok(None));
        assert!(matches!(
            load("a: 1\n---\nb: 2\n"),
            Err(YamlProblem::MultipleDocuments { line: 2 })
        ));
        assert_refused!("a: !custom 1\n", UnsupportedTag);
        assert_refused!("a: !!python/object:os.system x\n", UnsupportedTag);
        assert_refused!("? [a]\n: 1\n", Unconstructible);
        assert_refused!("a: 2026-02-30\n", Unconstructible);
        assert_refused!("a: =\n", UnsupportedTag);
        assert_refused!("a: [1, 2\n", Syntax);
        assert_refused!("<<: 1\n", Unconstructible);
        // Duplicate keys are allowed (the last value wins), like PyYAML.
        let doc = load("a: 1\na: 2\n").unwrap().unwrap();
        assert_eq!(doc.as_map().map(<[_]>::len), Some(1));
        assert_eq!(doc.get("a"), Some(&PyValue::Int("2".into())));
        // Merge keys.
        let doc = load("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\n")
            .unwrap()
            .unwrap();
        let d = doc.get("d").unwrap();
        assert_eq!(d.get("x"), Some(&PyValue::Int("1".into())));
        assert_eq!(d.get("y"), Some(&PyValue::Int("3".into())));
        assert!(load("a: !!int '12'\nb: !!str 1\nc: !!binary aGVsbG8=\n").is_ok());
        assert_refused!("a: !!int x\n", Unconstructible);
    }

    #[test]
    fn bounded() {
        // Block nesting hits the shared depth bound; deep flow nesting may hit the scanner's first.
        let deep = format!("{}x\n", "- ".repeat(MAX_DEPTH + 1));
        assert_eq!(load(&deep), Err(YamlProblem::TooDeep));
        let ok = format!("{}x\n", "- ".repeat(MAX_DEPTH - 4));
        assert!(load(&ok).is_ok());
        let flow = format!("{}{}", "[".repeat(300), "]".repeat(300));
        assert!(matches!(
            load(&flow),
            Err(YamlProblem::TooDeep | YamlProblem::Syntax { .. })
        ));
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
        assert_eq!(load(bomb), Err(YamlProblem::TooManyNodes));
        let big = "x".repeat(100_000);
        let wide = format!("a: &a {big}\nb: [{}]\n", vec!["*a"; 50].join(", "));
        assert_eq!(load(&wide), Err(YamlProblem::TooManyNodes));
    }
}
