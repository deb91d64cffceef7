//! Hidden text: every character that reorders text or renders as nothing. The set is Unicode's
//! `Default_Ignorable_Code_Point` property (`vocab::is_default_ignorable`, which the review
//! page and every other display escape too), split into classes so a finding says what it is:
//!
//! | rule | code points |
//! |---|---|
//! | `bidi-control` | U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C |
//! | `zero-width-character` | U+200B–U+200D, U+2060, U+FEFF (not at offset 0 of the content) |
//! | `tag-character` | U+E0000–U+E007F |
//! | `variation-selector` | U+FE00–U+FE0F, U+E0100–U+E01EF, U+180B–U+180D, U+180F |
//! | `invisible-character` | every other default-ignorable code point: U+00AD, U+034F, the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, U+17B4, U+17B5, U+180E, U+2061–U+2065, U+206A–U+206F, U+FFF0–U+FFF8, U+1BCA0–U+1BCA3, U+1D173–U+1D17A, U+E0080–U+E00FF, U+E01F0–U+E0FFF |
//!
//! One exception keeps ordinary emoji clean: U+FE0E / U+FE0F (text / emoji presentation) right
//! after a visible non-ASCII character, or between a keycap base (`0`–`9`, `#`, `*`) and U+20E3,
//! is how Unicode spells `❤️` or `1️⃣`, and is not a finding. A selector anywhere else (after ASCII,
//! after another invisible character, in a run) is.

use vocab::is_default_ignorable;

/// A hidden-text class (one rule id each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hidden {
    Bidi,
    ZeroWidth,
    Tag,
    VariationSelector,
    Invisible,
}

impl Hidden {
    pub(crate) const ALL: [Hidden; 5] = [
        Hidden::Bidi,
        Hidden::ZeroWidth,
        Hidden::Tag,
        Hidden::VariationSelector,
        Hidden::Invisible,
    ];

    pub(crate) fn rule(self) -> &'static str {
        match self {
            Self::Bidi => "bidi-control",
            Self::ZeroWidth => "zero-width-character",
            Self::Tag => "tag-character",
            Self::VariationSelector => "variation-selector",
            Self::Invisible => "invisible-character",
        }
    }

    pub(crate) fn bit(self) -> u8 {
        match self {
            Self::Bidi => 1,
            Self::ZeroWidth => 2,
            Self::Tag => 4,
            Self::VariationSelector => 8,
            Self::Invisible => 16,
        }
    }
}

/// The class of `c`, or `None` for a visible character. U+FEFF is `ZeroWidth` (the caller
/// exempts offset 0); the emoji presentation exception is [`selector_is_presentation`]'s.
pub(crate) fn class(c: char) -> Option<Hidden> {
    if !is_default_ignorable(c) {
        return None;
    }
    Some(match u32::from(c) {
        0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C => Hidden::Bidi,
        0x200B..=0x200D | 0x2060 | 0xFEFF => Hidden::ZeroWidth,
        0xE0000..=0xE007F => Hidden::Tag,
        0xFE00..=0xFE0F | 0xE0100..=0xE01EF | 0x180B..=0x180D | 0x180F => Hidden::VariationSelector,
        _ => Hidden::Invisible,
    })
}

const KEYCAP: char = '\u{20E3}';

/// True when the presentation selector `c` (U+FE0E / U+FE0F) between `prev` and `next` is the
/// ordinary spelling of an emoji or a keycap.
pub(crate) fn selector_is_presentation(prev: Option<char>, c: char, next: Option<char>) -> bool {
    if c != '\u{FE0E}' && c != '\u{FE0F}' {
        return false;
    }
    match prev {
        Some(p) if !p.is_ascii() => !is_default_ignorable(p),
        Some('0'..='9' | '#' | '*') => next == Some(KEYCAP),
        _ => false,
    }
}

/// The automaton patterns of hidden text: the UTF-8 encoding of every default-ignorable code
/// point below U+E0000, and the two-byte prefix `F3 A0` that every code point of
/// U+E0000–U+E0FFF (and only those) starts with.
pub(crate) fn patterns() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (0..0xE0000_u32)
        .filter_map(char::from_u32)
        .filter(|c| is_default_ignorable(*c))
        .map(|c| {
            let mut buf = [0_u8; 4];
            c.encode_utf8(&mut buf).as_bytes().to_vec()
        })
        .collect();
    out.push(vec![0xF3, 0xA0]);
    out
}

/// The character whose encoding starts at `pos` of `bytes` (valid UTF-8 at a char boundary).
pub(crate) fn char_at(bytes: &[u8], pos: usize) -> Option<char> {
    let len = match bytes.get(pos)? {
        b if *b < 0x80 => 1,
        b if *b >= 0xF0 => 4,
        b if *b >= 0xE0 => 3,
        _ => 2,
    };
    std::str::from_utf8(bytes.get(pos..pos + len)?)
        .ok()?
        .chars()
        .next()
}

/// The character that ends right before `pos` of `bytes`.
pub(crate) fn char_before(bytes: &[u8], pos: usize) -> Option<char> {
    let mut start = pos.checked_sub(1)?;
    while start > 0 && pos - start < 4 && bytes.get(start).is_some_and(|b| (b & 0xC0) == 0x80) {
        start -= 1;
    }
    char_at(bytes, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_ignorable_code_point_has_a_class_and_nothing_else_does() {
        for cp in 0..=0x10_FFFF_u32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            assert_eq!(class(c).is_some(), is_default_ignorable(c), "U+{cp:04X}");
        }
        for c in [
            '\u{115F}', '\u{1160}', '\u{3164}', '\u{FFA0}', '\u{AD}', '\u{180E}',
        ] {
            assert_eq!(class(c), Some(Hidden::Invisible));
        }
        for cp in 0x2061..=0x2064 {
            assert_eq!(class(char::from_u32(cp).unwrap()), Some(Hidden::Invisible));
        }
    }

    #[test]
    fn the_patterns_cover_exactly_the_default_ignorable_encodings() {
        let patterns = patterns();
        for cp in 0..=0x10_FFFF_u32 {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let mut buf = [0_u8; 4];
            let enc = c.encode_utf8(&mut buf).as_bytes();
            let hit = patterns.iter().any(|p| enc.starts_with(p));
            assert_eq!(hit, is_default_ignorable(c), "U+{cp:04X}");
        }
    }

    #[test]
    fn presentation_selectors_after_emoji_and_keycaps_only() {
        assert!(selector_is_presentation(Some('❤'), '\u{FE0F}', None));
        assert!(selector_is_presentation(
            Some('1'),
            '\u{FE0F}',
            Some('\u{20E3}')
        ));
        assert!(!selector_is_presentation(Some('a'), '\u{FE0F}', None));
        assert!(!selector_is_presentation(Some('1'), '\u{FE0F}', Some('x')));
        assert!(!selector_is_presentation(
            Some('\u{FE0F}'),
            '\u{FE0F}',
            None
        ));
        assert!(!selector_is_presentation(None, '\u{FE0F}', None));
        assert!(!selector_is_presentation(Some('❤'), '\u{FE01}', None));
    }

    #[test]
    fn chars_around_a_position() {
        let s = "a❤\u{FE0F}b".as_bytes();
        assert_eq!(char_at(s, 1), Some('❤'));
        assert_eq!(char_before(s, 4), Some('❤'));
        assert_eq!(char_before(s, 1), Some('a'));
        assert_eq!(char_before(s, 0), None);
        assert_eq!(char_at(s, 4), Some('\u{FE0F}'));
    }
}
