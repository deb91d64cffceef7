//! The one way untrusted text reaches a human: [`Untrusted`].
//!
//! Paths, entry names, diffs, summaries and any string that came from a container, an agent, an
//! archive, a model upstream or a user's file are printed, logged or put into an error message only
//! through this type. It makes every character that a terminal, a log viewer or a bidi-aware editor
//! could interpret visible as an escape, and caps the length with an explicit marker.
//!
//! Escaped: every character Python's `str.isprintable()` rejects — general categories `Cc`
//! (C0, DEL, C1), `Cf` (bidi embeddings/overrides/isolates, zero-width space/joiners, BOM, tag
//! characters, soft hyphen), `Cs`, `Co` (private use), `Cn` (unassigned), `Zl`, `Zp` and every `Zs`
//! other than the ASCII space — and, beyond Python, every `Default_Ignorable_Code_Point`
//! ([`is_default_ignorable`]: the Hangul fillers, variation selectors, the combining grapheme
//! joiner, … which render as nothing though their category is a letter or a mark) — plus the
//! quote and the backslash in [`Untrusted::quoted`] mode. The escape spelling is Python's `repr`
//! (`\n`, `\t`, `\r`, `\\`, `\xNN`, `\uNNNN`, `\UNNNNNNNN`), so quoted names match the reference
//! implementation's messages byte for byte, except for names holding one of those invisible
//! letters or marks, which Python would print raw.
//!
//! Hand-written rather than `str::escape_debug`: that keeps bidi controls only partly visible and
//! has no Python-compatible quoting or length cap.

use std::fmt::{self, Write as _};

use unicode_general_category::{GeneralCategory, get_general_category};

/// Default cap, in characters of the source text, for a quoted untrusted string.
pub const DEFAULT_QUOTED_CHARS: usize = 200;

/// Untrusted text, made safe to display. See the module docs.
#[derive(Clone, Copy)]
pub struct Untrusted<'a> {
    text: &'a str,
    mode: Mode,
    limit: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Python-repr quoting: one line, quotes, every special character escaped.
    Quoted,
    /// As `Quoted` but without the surrounding quotes (quotes are then left alone), for formats
    /// that name a path bare, e.g. `kind:path`.
    Bare,
    /// Multi-line text (diffs, summaries): `\n` and `\t` kept, no quotes, the rest as in `Quoted`
    /// except that backslashes and quotes are left alone.
    Lines,
}

impl fmt::Debug for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl<'a> Untrusted<'a> {
    /// A single-line, quoted rendering (Python `repr` style), capped at
    /// [`DEFAULT_QUOTED_CHARS`] source characters.
    #[must_use]
    pub fn quoted(text: &'a str) -> Self {
        Self {
            text,
            mode: Mode::Quoted,
            limit: DEFAULT_QUOTED_CHARS,
        }
    }

    /// A single-line rendering without quotes (for reference formats such as `kind:path`):
    /// every character [`Self::quoted`] escapes is escaped, backslashes included, except the
    /// quotes themselves. Capped at [`DEFAULT_QUOTED_CHARS`] source characters.
    #[must_use]
    pub fn bare(text: &'a str) -> Self {
        Self {
            text,
            mode: Mode::Bare,
            limit: DEFAULT_QUOTED_CHARS,
        }
    }

    /// A multi-line rendering for diffs and other block text: line feeds and tabs are kept, every
    /// other control or format character is escaped. Not capped unless [`Self::limit`] is called.
    #[must_use]
    pub fn lines(text: &'a str) -> Self {
        Self {
            text,
            mode: Mode::Lines,
            limit: usize::MAX,
        }
    }

    /// Caps the rendering at `chars` source characters; the rest is replaced by a marker that says
    /// how many characters the full text has.
    #[must_use]
    pub fn limit(mut self, chars: usize) -> Self {
        self.limit = chars;
        self
    }

    /// The rendering as an owned string (for error fields that are formatted later).
    #[must_use]
    pub fn render(&self) -> String {
        self.to_string()
    }
}

/// Quoted rendering of `text` as an owned string: shorthand for
/// `Untrusted::quoted(text).to_string()`.
#[must_use]
pub fn quote(text: &str) -> String {
    Untrusted::quoted(text).to_string()
}

/// True when `c` has Unicode's `Default_Ignorable_Code_Point` property (Unicode 15.1
/// `DerivedCoreProperties.txt`): characters a renderer shows as nothing, whatever their general
/// category — soft hyphen, combining grapheme joiner, Hangul fillers (U+115F, U+1160, U+3164,
/// U+FFA0), Khmer inherent vowels, Mongolian variation selectors and vowel separator, zero-width
/// and bidi controls, invisible operators (U+2061–U+2064), variation selectors, the BOM,
/// shorthand format and musical beam controls, tag characters and the rest of U+E0000–U+E0FFF.
#[must_use]
pub fn is_default_ignorable(c: char) -> bool {
    matches!(
        u32::from(c),
        0xAD | 0x34F
            | 0x61C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

/// True when `c` is shown as itself: Python's `str.isprintable()` for one character, and not
/// [`is_default_ignorable`].
#[must_use]
pub fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !is_default_ignorable(c)
        && !matches!(
            get_general_category(c),
            GeneralCategory::Control
                | GeneralCategory::Format
                | GeneralCategory::Surrogate
                | GeneralCategory::PrivateUse
                | GeneralCategory::Unassigned
                | GeneralCategory::LineSeparator
                | GeneralCategory::ParagraphSeparator
                | GeneralCategory::SpaceSeparator
        )
}

fn write_escape(f: &mut fmt::Formatter<'_>, c: char) -> fmt::Result {
    match c {
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        c if u32::from(c) < 0x100 => write!(f, "\\x{:02x}", u32::from(c)),
        c if u32::from(c) < 0x10000 => write!(f, "\\u{:04x}", u32::from(c)),
        c => write!(f, "\\U{:08x}", u32::from(c)),
    }
}

impl fmt::Display for Untrusted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quote = match self.mode {
            Mode::Quoted if self.text.contains('\'') && !self.text.contains('"') => Some('"'),
            Mode::Quoted => Some('\''),
            Mode::Bare | Mode::Lines => None,
        };
        if let Some(q) = quote {
            f.write_char(q)?;
        }
        let mut truncated = false;
        for (shown, c) in self.text.chars().enumerate() {
            if shown == self.limit {
                truncated = true;
                break;
            }
            match (self.mode, c) {
                (Mode::Lines, '\n' | '\t') => f.write_char(c)?,
                (Mode::Quoted | Mode::Bare, '\\') => f.write_str("\\\\")?,
                (Mode::Quoted, c) if Some(c) == quote => {
                    f.write_char('\\')?;
                    f.write_char(c)?;
                }
                (_, c) if is_printable(c) => f.write_char(c)?,
                (_, c) => write_escape(f, c)?,
            }
        }
        if let Some(q) = quote {
            f.write_char(q)?;
        }
        if truncated {
            write!(f, "... ({} characters)", self.text.chars().count())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_repr_spelling() {
        assert_eq!(quote("a.txt"), "'a.txt'");
        assert_eq!(quote("it's"), "\"it's\"");
        assert_eq!(quote("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(quote("a\0b\\c\n"), "'a\\x00b\\\\c\\n'");
        assert_eq!(quote("Répörts"), "'Répörts'");
        assert_eq!(quote("\u{202e}evil"), "'\\u202eevil'");
        assert_eq!(quote("x\u{200b}y"), "'x\\u200by'");
        assert_eq!(quote("\u{e0041}"), "'\\U000e0041'");
        assert_eq!(quote("\u{1b}[2K"), "'\\x1b[2K'");
        assert_eq!(quote("a\u{a0}b"), "'a\\xa0b'");
    }

    #[test]
    fn bare_is_quoted_without_quotes() {
        assert_eq!(Untrusted::bare("app/x.py").to_string(), "app/x.py");
        assert_eq!(Untrusted::bare("it's \"x\"").to_string(), "it's \"x\"");
        assert_eq!(
            Untrusted::bare("a\nb\\c\u{202e}").to_string(),
            "a\\nb\\\\c\\u202e"
        );
        assert_eq!(
            Untrusted::bare(&"y".repeat(300)).to_string(),
            format!("{}... (300 characters)", "y".repeat(DEFAULT_QUOTED_CHARS))
        );
    }

    #[test]
    fn lines_keep_newlines_and_tabs_only() {
        let diff = "+curl x | sh # hidden\r\u{1b}[2K+harmless\n\tok\u{2028}\u{7}\u{9b}";
        assert_eq!(
            Untrusted::lines(diff).to_string(),
            "+curl x | sh # hidden\\r\\x1b[2K+harmless\n\tok\\u2028\\x07\\x9b"
        );
        assert_eq!(Untrusted::lines("a\\b'\"").to_string(), "a\\b'\"");
    }

    #[test]
    fn cap_has_marker_with_full_count() {
        let long = "x".repeat(1000);
        let shown = Untrusted::quoted(&long).to_string();
        assert_eq!(
            shown,
            format!(
                "'{}'... (1000 characters)",
                "x".repeat(DEFAULT_QUOTED_CHARS)
            )
        );
        assert_eq!(
            Untrusted::lines("abcdef").limit(3).to_string(),
            "abc... (6 characters)"
        );
        assert_eq!(Untrusted::quoted("abc").limit(3).to_string(), "'abc'");
    }

    /// Every code point: the rendering never contains a character a terminal or bidi algorithm
    /// could act on, and printable characters are kept as they are.
    #[test]
    fn every_code_point_is_safe() {
        for cp in 0..=0x10_ffffu32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let text = c.to_string();
            for rendered in [
                Untrusted::quoted(&text).to_string(),
                Untrusted::bare(&text).to_string(),
                Untrusted::lines(&text).to_string(),
            ] {
                for out in rendered.chars() {
                    assert!(
                        is_printable(out) || out == '\n' || out == '\t',
                        "U+{cp:04X} rendered with U+{:04X}",
                        u32::from(out)
                    );
                    assert!(
                        !matches!(get_general_category(out), GeneralCategory::Format),
                        "U+{cp:04X}"
                    );
                }
                if is_printable(c) && c != '\\' && c != '\'' {
                    assert!(rendered.contains(c), "U+{cp:04X} not kept");
                }
            }
        }
    }

    #[test]
    fn known_dangerous_characters_are_escaped() {
        let dangerous = [
            '\u{0}',
            '\u{7}',
            '\u{8}',
            '\u{d}',
            '\u{1b}',
            '\u{7f}',
            '\u{80}',
            '\u{85}',
            '\u{9b}',
            '\u{9d}',
            '\u{ad}',
            '\u{61c}',
            '\u{180e}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{200e}',
            '\u{200f}',
            '\u{2028}',
            '\u{2029}',
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2060}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{feff}',
            '\u{fff9}',
            '\u{e0001}',
            '\u{e007f}',
            '\u{e000}',
            '\u{3000}',
            // Default-ignorable letters and marks Python calls printable.
            '\u{115f}',
            '\u{1160}',
            '\u{3164}',
            '\u{ffa0}',
            '\u{34f}',
            '\u{17b4}',
            '\u{180b}',
            '\u{fe00}',
            '\u{fe0f}',
            '\u{e0100}',
            '\u{e01ef}',
            '\u{2061}',
            '\u{2064}',
        ];
        for c in dangerous {
            assert!(!is_printable(c), "U+{:04X}", u32::from(c));
            let text = format!("a{c}b");
            assert!(!quote(&text).contains(c));
            assert!(!Untrusted::lines(&text).to_string().contains(c));
        }
    }
}
