//! The structural pre-scan of a turn's stdout: one pass over the bytes, before any typed parse,
//! that refuses a document whose *shape* would make the host's memory follow the agent's JSON.
//!
//! It checks the JSON grammar (RFC 8259: no `NaN`/`Infinity`, no raw control characters in
//! strings, valid escapes, no trailing data), duplicate object keys at every depth, nesting depth,
//! the total number of values, and the decoded length of every string against the limit of the
//! place it sits in: the archive text, a change's `content` (each and in total), an object key,
//! or any other string. Only then does serde build typed values, so every allocation the parse
//! makes is bounded by these limits, never by what the container printed.
//!
//! The scan keeps no copy of the input: its memory is the key-hash sets of the open objects,
//! bounded by the value limit.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;

/// Limits of the scan (see [`crate::output::OutputLimits`] for the values of a turn).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanLimits {
    /// Deepest nesting of arrays and objects.
    pub(crate) max_depth: usize,
    /// Most values (scalars, arrays and objects, keys not counted) in the whole document.
    pub(crate) max_values: usize,
    /// Longest object key, in decoded UTF-8 bytes.
    pub(crate) max_key_bytes: usize,
    /// Longest string anywhere not named below, in decoded UTF-8 bytes.
    pub(crate) max_text_bytes: usize,
    /// Longest `workspace_archive_base64` text, in decoded bytes.
    pub(crate) max_archive_text_bytes: usize,
    /// Longest `proposal.changed_files[].content`, and the most all of them may add up to.
    pub(crate) max_content_bytes: usize,
}

/// Why the scan refused the document. Never carries input bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScanError {
    /// Not UTF-8, a byte order mark, a grammar error or trailing data.
    Syntax,
    /// The same key twice in one object.
    DuplicateKey,
    /// Nesting, value count, key or text length over its limit.
    Bounds,
    /// The archive text is longer than the archive budget allows.
    ArchiveText,
    /// The archive text holds a byte outside the base64 alphabet, or a JSON escape (the alphabet
    /// never needs one; an escaped text would be decoded into a second buffer before its base64
    /// check, doubling the host's peak memory).
    ArchiveEncoding,
    /// A change's content, or all of them together, over the archive budget.
    Content,
}

/// What the value at the cursor is, by its position in the output contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Top,
    Proposal,
    Changes,
    Change,
    ArchiveText,
    Content,
    Plain,
}

/// Scans `bytes` (see the module docs).
pub(crate) fn scan(bytes: &[u8], limits: &ScanLimits) -> Result<(), ScanError> {
    let text = std::str::from_utf8(bytes).map_err(|_| ScanError::Syntax)?;
    if text.starts_with('\u{feff}') {
        return Err(ScanError::Syntax);
    }
    let mut scanner = Scanner {
        bytes,
        pos: 0,
        values: 0,
        content_total: 0,
        limits,
        hasher: RandomState::new(),
    };
    scanner.skip_ws();
    scanner.value(0, Slot::Top)?;
    scanner.skip_ws();
    if scanner.pos != bytes.len() {
        return Err(ScanError::Syntax);
    }
    Ok(())
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    values: usize,
    content_total: usize,
    limits: &'a ScanLimits,
    hasher: RandomState,
}

/// A scanned string: its raw span (between the quotes) and decoded length.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    end: usize,
    escaped: bool,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn expect(&mut self, b: u8) -> Result<(), ScanError> {
        if self.bump() == Some(b) {
            Ok(())
        } else {
            Err(ScanError::Syntax)
        }
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize, slot: Slot) -> Result<(), ScanError> {
        self.values += 1;
        if self.values > self.limits.max_values {
            return Err(ScanError::Bounds);
        }
        match self.peek().ok_or(ScanError::Syntax)? {
            b'{' => self.object(depth + 1, slot),
            b'[' => self.array(depth + 1, slot),
            b'"' if slot == Slot::ArchiveText => self.archive_text(),
            b'"' => {
                let cap = match slot {
                    Slot::ArchiveText => self.limits.max_archive_text_bytes,
                    Slot::Content => self.limits.max_content_bytes,
                    _ => self.limits.max_text_bytes,
                };
                let (_, len) = self.string(cap).map_err(|e| match (e, slot) {
                    (ScanError::Bounds, Slot::ArchiveText) => ScanError::ArchiveText,
                    (ScanError::Bounds, Slot::Content) => ScanError::Content,
                    (e, _) => e,
                })?;
                if slot == Slot::Content {
                    self.content_total = self.content_total.saturating_add(len);
                    if self.content_total > self.limits.max_content_bytes {
                        return Err(ScanError::Content);
                    }
                }
                Ok(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(ScanError::Syntax),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ScanError> {
        let end = self.pos.checked_add(word.len()).ok_or(ScanError::Syntax)?;
        if self.bytes.get(self.pos..end) == Some(word) {
            self.pos = end;
            Ok(())
        } else {
            Err(ScanError::Syntax)
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<(), ScanError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(ScanError::Syntax),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(ScanError::Syntax);
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(ScanError::Syntax);
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, ScanError> {
        let mut v = 0_u32;
        for _ in 0..4 {
            let d = match self.bump().ok_or(ScanError::Syntax)? {
                b @ b'0'..=b'9' => b - b'0',
                b @ b'a'..=b'f' => b - b'a' + 10,
                b @ b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(ScanError::Syntax),
            };
            v = v * 16 + u32::from(d);
        }
        Ok(v)
    }

    /// Scans one string; fails with `Bounds` as soon as its decoded length passes `cap`. Returns
    /// the raw span and the decoded length in UTF-8 bytes.
    fn string(&mut self, cap: usize) -> Result<(Span, usize), ScanError> {
        self.expect(b'"')?;
        let start = self.pos;
        let mut len = 0_usize;
        let mut escaped = false;
        loop {
            let b = self.bump().ok_or(ScanError::Syntax)?;
            let add = match b {
                b'"' => break,
                0x00..=0x1f => return Err(ScanError::Syntax),
                b'\\' => {
                    escaped = true;
                    match self.bump().ok_or(ScanError::Syntax)? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 1,
                        b'u' => match self.hex4()? {
                            0..=0x7f => 1,
                            0x80..=0x7ff => 2,
                            // Each half of a surrogate pair counts 2 (4 bytes for the pair).
                            0xd800..=0xdfff => 2,
                            _ => 3,
                        },
                        _ => return Err(ScanError::Syntax),
                    }
                }
                _ => 1,
            };
            len += add;
            if len > cap {
                return Err(ScanError::Bounds);
            }
        }
        let end = self.pos - 1;
        Ok((
            Span {
                start,
                end,
                escaped,
            },
            len,
        ))
    }

    /// The archive text: base64 alphabet bytes (`A-Z a-z 0-9 + / =`) only, at most the archive
    /// limit of them. Its decoded size is checked against the budget by the typed parse.
    fn archive_text(&mut self) -> Result<(), ScanError> {
        self.expect(b'"')?;
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let mut len = 0_usize;
        for &b in rest {
            match b {
                b'"' => break,
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'+' | b'/' | b'=' => {}
                // A raw control byte is a grammar error here as anywhere else.
                0x00..=0x1f => return Err(ScanError::Syntax),
                _ => return Err(ScanError::ArchiveEncoding),
            }
            len += 1;
            if len > self.limits.max_archive_text_bytes {
                return Err(ScanError::ArchiveText);
            }
        }
        if rest.get(len) != Some(&b'"') {
            return Err(ScanError::Syntax);
        }
        self.pos += len + 1;
        Ok(())
    }

    fn array(&mut self, depth: usize, slot: Slot) -> Result<(), ScanError> {
        if depth > self.limits.max_depth {
            return Err(ScanError::Bounds);
        }
        self.expect(b'[')?;
        let child = if slot == Slot::Changes {
            Slot::Change
        } else {
            Slot::Plain
        };
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            self.value(depth, child)?;
            self.skip_ws();
            match self.bump() {
                Some(b',') => {}
                Some(b']') => return Ok(()),
                _ => return Err(ScanError::Syntax),
            }
        }
    }

    fn object(&mut self, depth: usize, slot: Slot) -> Result<(), ScanError> {
        if depth > self.limits.max_depth {
            return Err(ScanError::Bounds);
        }
        self.expect(b'{')?;
        // Decoded-key hash → raw span of the first key with that hash (exact compare on a hit).
        let mut seen: HashMap<u64, Span> = HashMap::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.skip_ws();
            let (key, _) = self.string(self.limits.max_key_bytes)?;
            let hash = self.hasher.hash_one(Decoded::new(self.bytes, key));
            if let Some(first) = seen.get(&hash) {
                if Decoded::new(self.bytes, *first).eq(Decoded::new(self.bytes, key)) {
                    return Err(ScanError::DuplicateKey);
                }
            } else {
                seen.insert(hash, key);
            }
            let child = child_slot(slot, Decoded::new(self.bytes, key));
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            self.value(depth, child)?;
            self.skip_ws();
            match self.bump() {
                Some(b',') => {}
                Some(b'}') => return Ok(()),
                _ => return Err(ScanError::Syntax),
            }
        }
    }
}

fn child_slot(parent: Slot, key: Decoded<'_>) -> Slot {
    match parent {
        Slot::Top if key.is(b"proposal") => Slot::Proposal,
        Slot::Top if key.is(b"workspace_archive_base64") => Slot::ArchiveText,
        Slot::Proposal if key.is(b"changed_files") => Slot::Changes,
        Slot::Change if key.is(b"content") => Slot::Content,
        _ => Slot::Plain,
    }
}

/// The decoded code units of a scanned (grammar-checked) string, without allocating.
#[derive(Debug, Clone, Copy)]
struct Decoded<'a> {
    raw: &'a [u8],
    escaped: bool,
}

impl<'a> Decoded<'a> {
    fn new(bytes: &'a [u8], span: Span) -> Self {
        Self {
            raw: bytes.get(span.start..span.end).unwrap_or_default(),
            escaped: span.escaped,
        }
    }

    /// True when the decoded string is exactly `word` (ASCII).
    fn is(self, word: &[u8]) -> bool {
        if self.escaped {
            self.chars().eq(word.iter().map(|b| u32::from(*b)))
        } else {
            self.raw == word
        }
    }

    /// Decoded units: a literal input byte, or the value of a `\X` / `\uXXXX` escape (the
    /// grammar was checked by the scan).
    fn units(self) -> impl Iterator<Item = Unit> + 'a {
        let mut rest = self.raw;
        std::iter::from_fn(move || {
            let (&b, tail) = rest.split_first()?;
            rest = tail;
            if b != b'\\' {
                return Some(Unit::Byte(b));
            }
            let (&e, tail) = rest.split_first()?;
            rest = tail;
            Some(Unit::Escaped(match e {
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => 0x0a,
                b'r' => 0x0d,
                b't' => 0x09,
                b'u' => {
                    let (hex, tail) = rest.split_at_checked(4)?;
                    rest = tail;
                    let hex = std::str::from_utf8(hex).ok()?;
                    u32::from_str_radix(hex, 16).ok()?
                }
                other => u32::from(other),
            }))
        })
    }

    /// The decoded code points, so `"é"` and `"\u00e9"` compare (and hash) equal.
    fn chars(self) -> impl Iterator<Item = u32> + 'a {
        let mut units = self.units().peekable();
        std::iter::from_fn(move || next_code_point(&mut units))
    }

    fn eq(self, other: Self) -> bool {
        self.chars().eq(other.chars())
    }
}

/// One decoded unit of a JSON string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// A literal byte of the (valid UTF-8) input.
    Byte(u8),
    /// The UTF-16 code unit (or ASCII character) of an escape.
    Escaped(u32),
}

/// Reassembles one code point: a literal UTF-8 sequence, or an escaped code unit (a high
/// surrogate followed by an escaped low surrogate makes one pair; a lone half stays itself).
fn next_code_point(units: &mut std::iter::Peekable<impl Iterator<Item = Unit>>) -> Option<u32> {
    match units.next()? {
        Unit::Byte(first) => {
            let (extra, init) = match first {
                0xc0..=0xdf => (1, first & 0x1f),
                0xe0..=0xef => (2, first & 0x0f),
                0xf0..=0xf7 => (3, first & 0x07),
                _ => (0, first),
            };
            let mut cp = u32::from(init);
            for _ in 0..extra {
                match units.peek() {
                    Some(&Unit::Byte(b)) => {
                        units.next();
                        cp = (cp << 6) | u32::from(b & 0x3f);
                    }
                    _ => break,
                }
            }
            Some(cp)
        }
        Unit::Escaped(high @ 0xd800..=0xdbff) => match units.peek() {
            Some(&Unit::Escaped(low @ 0xdc00..=0xdfff)) => {
                units.next();
                Some(0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00))
            }
            _ => Some(high),
        },
        Unit::Escaped(unit) => Some(unit),
    }
}

impl std::hash::Hash for Decoded<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for c in self.chars() {
            state.write_u32(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ScanLimits = ScanLimits {
        max_depth: 8,
        max_values: 64,
        max_key_bytes: 32,
        max_text_bytes: 8,
        max_archive_text_bytes: 12,
        max_content_bytes: 10,
    };

    fn run(s: &str) -> Result<(), ScanError> {
        scan(s.as_bytes(), &LIMITS)
    }

    #[test]
    fn accepts_the_contract_shape() {
        assert_eq!(
            run(
                r#" {"proposal":{"changed_files":[{"path":"a","content":"0123456789"}],"usage":{"n":-1.5e3}},"workspace_archive_base64":"AAAAAAAAAAAA"} "#
            ),
            Ok(())
        );
        assert_eq!(run(r#"{"a":[true,false,null,0,-0.1,"\u00e9\n"]}"#), Ok(()));
    }

    #[test]
    fn rejects_grammar_errors_and_trailing_data() {
        for bad in [
            "",
            "{",
            "{\"a\":1,}",
            "[1,]",
            "{\"a\":NaN}",
            "{\"a\":Infinity}",
            "{\"a\":01}",
            "{\"a\":1.}",
            "{\"a\":1e}",
            "{\"a\":\"\\x\"}",
            "{\"a\":\"\\u12g4\"}",
            "{\"a\":\"\u{1}\"}",
            "{\"a\":1} x",
            "{\"a\" 1}",
            "\u{feff}{}",
            "{'a':1}",
        ] {
            assert_eq!(run(bad), Err(ScanError::Syntax), "{bad:?}");
        }
        assert_eq!(scan(b"{\"a\":\"\xff\"}", &LIMITS), Err(ScanError::Syntax));
    }

    #[test]
    fn rejects_duplicate_keys_in_every_spelling_and_depth() {
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"{"x":[{"k":1,"k":1}]}"#,
            r#"{"a":1,"\u0061":2}"#,
            r#"{"é":1,"\u00e9":2}"#,
            r#"{"😀":1,"\ud83d\ude00":2}"#,
        ] {
            assert_eq!(run(bad), Err(ScanError::DuplicateKey), "{bad}");
        }
        assert_eq!(run(r#"{"a":1,"b":{"a":1}}"#), Ok(()));
        assert_eq!(run(r#"{"é":1,"\u00e8":2}"#), Ok(()));
        // Escaped code units are not UTF-8 bytes: "\u00c3\u00a9" is "Ã©", not "é".
        assert_eq!(run(r#"{"é":1,"\u00c3\u00a9":2}"#), Ok(()));
    }

    #[test]
    fn bounds_depth_width_and_every_string_by_its_position() {
        assert_eq!(
            run(&format!("{}{}", "[".repeat(9), "]".repeat(9))),
            Err(ScanError::Bounds)
        );
        assert_eq!(run(&format!("{}{}", "[".repeat(8), "]".repeat(8))), Ok(()));
        assert_eq!(
            run(&format!("[{}0]", "0,".repeat(63))),
            Err(ScanError::Bounds)
        );
        assert_eq!(run(&format!("[{}0]", "0,".repeat(62))), Ok(()));
        assert_eq!(
            run(&format!("{{\"{}\":1}}", "a".repeat(33))),
            Err(ScanError::Bounds)
        );
        assert_eq!(run(r#"{"a":"123456789"}"#), Err(ScanError::Bounds));
        // Escapes count by their decoded size.
        assert_eq!(run(r#"{"a":"\n\n\n\n\n\n\n\n"}"#), Ok(()));
        assert_eq!(run(r#"{"a":"\u20ac\u20ac\u20ac"}"#), Err(ScanError::Bounds));
        assert_eq!(run(r#"{"usage":"123456789"}"#), Err(ScanError::Bounds));
        assert_eq!(
            run(r#"{"workspace_archive_base64":"AAAAAAAAAAAAAAAA"}"#),
            Err(ScanError::ArchiveText)
        );
        // The archive text is base64 alphabet only: no escape, not even of an alphabet byte.
        assert_eq!(run(r#"{"workspace_archive_base64":"AAAA+/=="}"#), Ok(()));
        for bad in [
            r#"AA\/A"#,
            r#"AA\u0041A"#,
            r#"\n\n\n\n"#,
            "AA AA",
            "AA-_",
            "AA\u{e9}",
        ] {
            assert_eq!(
                run(&format!(r#"{{"workspace_archive_base64":"{bad}"}}"#)),
                Err(ScanError::ArchiveEncoding),
                "{bad}"
            );
        }
        assert_eq!(
            run("{\"workspace_archive_base64\":\"AA\tA\"}"),
            Err(ScanError::Syntax)
        );
        assert_eq!(
            run(r#"{"workspace_archive_base64":"AAAA"#),
            Err(ScanError::Syntax)
        );
        assert_eq!(
            run(r#"{"proposal":{"changed_files":[{"content":"0123456789A"}]}}"#),
            Err(ScanError::Content)
        );
        assert_eq!(
            run(r#"{"proposal":{"changed_files":[{"content":"012345"},{"content":"012345"}]}}"#),
            Err(ScanError::Content)
        );
        // Only the contract position gets the larger limit.
        assert_eq!(
            run(r#"{"proposal":{"content":"0123456789"}}"#),
            Err(ScanError::Bounds)
        );
    }
}
