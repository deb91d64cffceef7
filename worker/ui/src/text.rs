//! Untrusted text as template segments: plain runs (escaped by the template engine like every
//! value) and visible escapes for every character [`vocab::is_printable`] rejects (bidi
//! controls, zero-width characters, C0/C1 controls, …), spelled `<U+202E>` and rendered in a
//! marked span. Tabs stay tabs. Long text is capped with an explicit marker, never silently.

/// One run of a line: shown as is (`escaped == false`) or a visible escape of a hidden character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub text: String,
    pub escaped: bool,
}

/// A line (or name, or summary) ready for a template.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shown {
    pub segments: Vec<Segment>,
    /// Bytes of the source not shown (the cap was reached); 0 when shown whole.
    pub cut_bytes: usize,
    /// Hidden characters found (each shown as an escape).
    pub hidden: usize,
}

impl Shown {
    /// `text` split into segments, at most `max_chars` source characters shown.
    #[must_use]
    pub fn new(text: &str, max_chars: usize) -> Self {
        let mut out = Self::default();
        let mut run = String::new();
        for (shown, (at, c)) in text.char_indices().enumerate() {
            if shown >= max_chars {
                out.cut_bytes = text.len().saturating_sub(at);
                break;
            }
            if c == '\t' || vocab::is_printable(c) {
                run.push(c);
            } else {
                if !run.is_empty() {
                    out.segments.push(Segment {
                        text: std::mem::take(&mut run),
                        escaped: false,
                    });
                }
                out.hidden += 1;
                out.segments.push(Segment {
                    text: format!("<U+{:04X}>", u32::from(c)),
                    escaped: true,
                });
            }
        }
        if !run.is_empty() {
            out.segments.push(Segment {
                text: run,
                escaped: false,
            });
        }
        out
    }

    /// Whether nothing is shown.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn hidden_characters_become_marked_escapes() {
        let s = Shown::new("a\u{202E}b\u{200D}\u{1b}[31m\tc", 100);
        let parts: Vec<(&str, bool)> = s
            .segments
            .iter()
            .map(|g| (g.text.as_str(), g.escaped))
            .collect();
        assert_eq!(
            parts,
            vec![
                ("a", false),
                ("<U+202E>", true),
                ("b", false),
                ("<U+200D>", true),
                ("<U+001B>", true),
                ("[31m\tc", false)
            ]
        );
        assert_eq!((s.hidden, s.cut_bytes), (3, 0));
    }

    /// Default-ignorable letters and marks (Hangul fillers, variation selectors, tag characters,
    /// invisible operators, …) render as nothing; on the review page they are escapes too.
    #[test]
    fn every_default_ignorable_character_becomes_an_escape() {
        for c in [
            '\u{115F}',
            '\u{1160}',
            '\u{3164}',
            '\u{FFA0}',
            '\u{34F}',
            '\u{AD}',
            '\u{180E}',
            '\u{FE00}',
            '\u{FE0F}',
            '\u{E0041}',
            '\u{E007F}',
            '\u{E0100}',
            '\u{2061}',
            '\u{2064}',
        ] {
            let s = Shown::new(&format!("x{c} = 1"), 100);
            let escape = format!("<U+{:04X}>", u32::from(c));
            assert_eq!(s.hidden, 1, "U+{:04X}", u32::from(c));
            assert!(
                s.segments.iter().any(|g| g.escaped && g.text == escape),
                "U+{:04X}",
                u32::from(c)
            );
            assert!(s.segments.iter().all(|g| !g.text.contains(c)));
        }
    }

    #[test]
    fn long_text_is_cut_with_a_count() {
        let long = "é".repeat(10);
        let s = Shown::new(&long, 4);
        assert_eq!(s.segments[0].text, "éééé");
        assert_eq!(s.cut_bytes, 12);
    }
}
