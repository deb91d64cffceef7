//! Repository paths: the `mozaiks.portable_path.v1` profile plus the canonical-spelling rule.
//!
//! A [`RepoPath`] is a relative, `/`-separated, NFC, portable path that no normalisation would
//! rewrite. It is built only by [`RepoPath::parse`] (also behind `FromStr`, `TryFrom` and
//! `Deserialize`), which rejects — never repairs — every form in the reference rejection table.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

use vocab::Untrusted;

/// Longest accepted path, in characters.
pub const MAX_PATH_CHARS: usize = 4096;
/// Longest accepted segment, in characters.
pub const MAX_SEGMENT_CHARS: usize = 255;

/// Why a path was rejected. `Display` gives the reference reason string exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PathRejection {
    /// `empty path`
    Empty,
    /// `path exceeds 4096 characters`
    TooLong,
    /// `null byte`
    NullByte,
    /// `backslash separator`
    Backslash,
    /// `absolute path`
    Absolute,
    /// `home-relative path`
    HomeRelative,
    /// `drive-qualified or drive-relative path`
    DriveQualified,
    /// `empty path segment`
    EmptySegment,
    /// `relative traversal segment`
    Traversal,
    /// `segment exceeds 255 characters`
    SegmentTooLong,
    /// `control character in segment`
    ControlCharacter,
    /// `character '<c>' is not portable`
    NotPortable(char),
    /// `glob metacharacter in segment`
    Glob,
    /// `trailing dot or space in segment`
    TrailingDotOrSpace,
    /// `leading space in segment`
    LeadingSpace,
    /// `reserved Windows device name`
    ReservedDeviceName,
    /// Canonical rule: the text is not in Unicode NFC.
    NotNfc,
    /// Canonical rule: surrounding (Unicode) whitespace would be stripped.
    SurroundingWhitespace,
}

impl fmt::Display for PathRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty path"),
            Self::TooLong => f.write_str("path exceeds 4096 characters"),
            Self::NullByte => f.write_str("null byte"),
            Self::Backslash => f.write_str("backslash separator"),
            Self::Absolute => f.write_str("absolute path"),
            Self::HomeRelative => f.write_str("home-relative path"),
            Self::DriveQualified => f.write_str("drive-qualified or drive-relative path"),
            Self::EmptySegment => f.write_str("empty path segment"),
            Self::Traversal => f.write_str("relative traversal segment"),
            Self::SegmentTooLong => f.write_str("segment exceeds 255 characters"),
            Self::ControlCharacter => f.write_str("control character in segment"),
            Self::NotPortable(c) => {
                let mut buf = [0_u8; 4];
                let text: &str = c.encode_utf8(&mut buf);
                write!(f, "character {} is not portable", Untrusted::quoted(text))
            }
            Self::Glob => f.write_str("glob metacharacter in segment"),
            Self::TrailingDotOrSpace => f.write_str("trailing dot or space in segment"),
            Self::LeadingSpace => f.write_str("leading space in segment"),
            Self::ReservedDeviceName => f.write_str("reserved Windows device name"),
            Self::NotNfc => f.write_str("path is not NFC-normalized"),
            Self::SurroundingWhitespace => f.write_str("surrounding whitespace"),
        }
    }
}

/// A validated repository-relative path (see the module docs).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoPath(String);

impl RepoPath {
    /// Validates `raw` against the portable profile and the canonical-spelling rule.
    ///
    /// # Errors
    /// The first [`PathRejection`] in the reference check order.
    pub fn parse(raw: &str) -> Result<Self, PathRejection> {
        check_portable(raw, true)?;
        Ok(Self(raw.to_owned()))
    }

    /// The path text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path's `/`-separated segments.
    pub fn segments(&self) -> std::str::Split<'_, char> {
        self.0.split('/')
    }

    /// Per-segment full Unicode case fold (`ß` ≈ `SS`), joined by `/`: the collision key.
    #[must_use]
    pub fn collision_key(&self) -> String {
        casefold(&self.0)
    }

    /// True when the path contains any character above U+007F.
    #[must_use]
    pub fn is_non_ascii(&self) -> bool {
        !self.0.is_ascii()
    }

    /// The proper directory prefixes of this path (`a`, `a/b` for `a/b/c`).
    pub fn parent_prefixes(&self) -> impl Iterator<Item = &str> {
        self.0
            .match_indices('/')
            .filter_map(|(i, _)| self.0.get(..i))
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The quoted, escaped form ([`Untrusted::quoted`]): a path in a `{:?}` never reaches a terminal
/// raw.
impl fmt::Debug for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Untrusted::quoted(&self.0), f)
    }
}

impl AsRef<str> for RepoPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for RepoPath {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl FromStr for RepoPath {
    type Err = PathRejection;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl TryFrom<&str> for RepoPath {
    type Error = PathRejection;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Self::parse(s)
    }
}

impl TryFrom<String> for RepoPath {
    type Error = PathRejection;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        check_portable(&s, true)?;
        Ok(Self(s))
    }
}

impl Serialize for RepoPath {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RepoPath {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::try_from(text).map_err(|r| serde::de::Error::custom(format!("unsafe path: {r}")))
    }
}

/// Full Unicode case folding (Python `str.casefold()`).
#[must_use]
pub fn casefold(text: &str) -> String {
    // Full case folding maps ASCII exactly like ASCII lowercasing; skip the table walk.
    if text.is_ascii() {
        return text.to_ascii_lowercase();
    }
    caseless::default_case_fold_str(text)
}

fn is_nfc(text: &str) -> bool {
    match is_nfc_quick(text.chars()) {
        IsNormalized::Yes => true,
        IsNormalized::No => false,
        IsNormalized::Maybe => text.nfc().eq(text.chars()),
    }
}

/// The portable-path check (reference §5.5). With `require_canonical`, also rejects non-NFC input
/// and surrounding whitespace, so the accepted text is exactly the normalised text.
///
/// # Errors
/// The first failing check, in the reference order.
pub fn check_portable(raw: &str, require_canonical: bool) -> Result<(), PathRejection> {
    if raw.is_empty() {
        return Err(PathRejection::Empty);
    }
    // A UTF-8 string never has more characters than bytes: count only when it could matter.
    if raw.len() > MAX_PATH_CHARS && raw.chars().count() > MAX_PATH_CHARS {
        return Err(PathRejection::TooLong);
    }
    if raw.contains('\0') {
        return Err(PathRejection::NullByte);
    }
    if raw.contains('\\') {
        return Err(PathRejection::Backslash);
    }
    if raw.starts_with('/') {
        return Err(PathRejection::Absolute);
    }
    if raw.starts_with('~') {
        return Err(PathRejection::HomeRelative);
    }
    let mut chars = raw.chars();
    if let (Some(first), Some(':')) = (chars.next(), chars.next())
        && first.is_ascii_alphabetic()
    {
        return Err(PathRejection::DriveQualified);
    }
    let nfc = is_nfc(raw);
    if require_canonical {
        if !nfc {
            return Err(PathRejection::NotNfc);
        }
        if raw.trim() != raw {
            return Err(PathRejection::SurroundingWhitespace);
        }
    }
    let normalized: std::borrow::Cow<'_, str> = if nfc {
        std::borrow::Cow::Borrowed(raw)
    } else {
        std::borrow::Cow::Owned(raw.nfc().collect())
    };
    for segment in normalized.split('/') {
        check_segment(segment)?;
    }
    Ok(())
}

fn check_segment(segment: &str) -> Result<(), PathRejection> {
    if segment.is_empty() {
        return Err(PathRejection::EmptySegment);
    }
    if segment == "." || segment == ".." {
        return Err(PathRejection::Traversal);
    }
    if segment.len() > MAX_SEGMENT_CHARS && segment.chars().count() > MAX_SEGMENT_CHARS {
        return Err(PathRejection::SegmentTooLong);
    }
    for c in segment.chars() {
        if (c as u32) < 0x20 || c == '\u{7f}' {
            return Err(PathRejection::ControlCharacter);
        }
        if matches!(c, '<' | '>' | ':' | '"' | '|' | '?' | '*') {
            return Err(PathRejection::NotPortable(c));
        }
        if c == '[' {
            return Err(PathRejection::Glob);
        }
    }
    if segment.ends_with('.') || segment.ends_with(' ') {
        return Err(PathRejection::TrailingDotOrSpace);
    }
    if segment.starts_with(' ') {
        return Err(PathRejection::LeadingSpace);
    }
    if is_reserved_device_name(segment) {
        return Err(PathRejection::ReservedDeviceName);
    }
    Ok(())
}

/// `^(CON|PRN|AUX|NUL|COM[1-9¹²³]|LPT[1-9¹²³])(\.|$)`, case-insensitive. No character outside
/// ASCII case-folds to one of these letters, so an ASCII comparison is exact (and allocation-free).
fn is_reserved_device_name(segment: &str) -> bool {
    let mut chars = segment.chars();
    let (Some(a), Some(b), Some(c)) = (chars.next(), chars.next(), chars.next()) else {
        return false;
    };
    let stem = [
        a.to_ascii_uppercase(),
        b.to_ascii_uppercase(),
        c.to_ascii_uppercase(),
    ];
    let ends_stem = |mut rest: std::str::Chars<'_>| matches!(rest.next(), None | Some('.'));
    match stem {
        ['C', 'O', 'N'] | ['P', 'R', 'N'] | ['A', 'U', 'X'] | ['N', 'U', 'L'] => ends_stem(chars),
        ['C', 'O', 'M'] | ['L', 'P', 'T'] => {
            matches!(chars.next(), Some('1'..='9' | '¹' | '²' | '³')) && ends_stem(chars)
        }
        _ => false,
    }
}

/// Reference `safe_artifact_relpath`: the lenient normaliser used for approval scopes.
/// Returns `None` for unsafe input; otherwise the PurePosixPath-normalised text (`"."` possible).
#[must_use]
pub fn safe_artifact_relpath(raw: &str) -> Option<String> {
    let replaced = raw.replace('\\', "/");
    let normalized = py_strip(&replaced);
    if normalized.is_empty() || normalized.contains('\0') || normalized.starts_with('/') {
        return None;
    }
    if normalized
        .split('/')
        .next()
        .is_some_and(|s| s.contains(':'))
    {
        return None;
    }
    let parts: Vec<&str> = normalized
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.contains(&"..") {
        return None;
    }
    if parts.is_empty() {
        return Some(".".to_owned());
    }
    Some(parts.join("/"))
}

/// Python `str.strip()`: removes leading and trailing characters for which `isspace()` holds.
fn py_strip(text: &str) -> &str {
    text.trim_matches(py_isspace)
}

fn py_isspace(c: char) -> bool {
    c.is_whitespace() || matches!(c, '\u{1c}'..='\u{1f}')
}

/// The scope test of reference §1.4: `candidate == root` or under `root/`; `"."` matches nothing.
#[must_use]
pub fn in_scope<S: AsRef<str>>(path: &str, scopes: &[S], fold: bool) -> bool {
    let candidate = if fold {
        casefold(path)
    } else {
        path.to_owned()
    };
    scopes.iter().any(|scope| {
        let trimmed = scope.as_ref().trim_end_matches('/');
        if trimmed == "." {
            return false;
        }
        let root = if fold {
            casefold(trimmed)
        } else {
            trimmed.to_owned()
        };
        candidate == root
            || candidate
                .strip_prefix(root.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Reference `_path_is_allowed`: denied under any prohibited or read-only root (case-folded),
/// allowed iff under an allowed root (case-sensitive).
#[must_use]
pub fn path_is_allowed<S: AsRef<str>>(
    path: &str,
    allowed: &[S],
    prohibited: &[S],
    read_only: &[S],
) -> bool {
    let Some(n) = safe_artifact_relpath(path) else {
        return false;
    };
    let folded = casefold(&n);
    let denied = prohibited.iter().chain(read_only.iter()).any(|root| {
        let root = casefold(root.as_ref().trim_end_matches('/'));
        folded == root
            || folded
                .strip_prefix(root.as_str())
                .is_some_and(|r| r.starts_with('/'))
    });
    if denied {
        return false;
    }
    allowed.iter().any(|root| {
        let root = root.as_ref().trim_end_matches('/');
        n == root || n.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
    })
}

/// A collision between two paths of one set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collision {
    /// The same text twice.
    Duplicate(RepoPath),
    /// Two spellings with one case-fold key: `(later, first)`.
    CaseFold(RepoPath, RepoPath),
    /// A file where another path needs a directory: `(file, other)`.
    FileDirectoryPrefix(RepoPath, RepoPath),
}

impl fmt::Display for Collision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duplicate(p) => write!(f, "duplicate path: {}", Untrusted::quoted(p.as_str())),
            Self::CaseFold(p, first) => write!(
                f,
                "case-fold duplicate of {}: {}",
                Untrusted::quoted(first.as_str()),
                Untrusted::quoted(p.as_str())
            ),
            Self::FileDirectoryPrefix(p, other) => write!(
                f,
                "file/directory prefix collision with {}: {}",
                Untrusted::quoted(other.as_str()),
                Untrusted::quoted(p.as_str())
            ),
        }
    }
}

/// Reference `detect_collisions`: duplicates and case-fold twins in order, then file/directory
/// prefix collisions. Linear in the total path length.
///
/// # Errors
/// The first [`Collision`] found.
pub fn detect_collisions<'a, I>(paths: I) -> Result<(), Collision>
where
    I: IntoIterator<Item = &'a RepoPath>,
{
    let mut by_key: HashMap<String, &RepoPath> = HashMap::new();
    let mut ordered: Vec<(&RepoPath, String)> = Vec::new();
    for path in paths {
        let key = path.collision_key();
        if let Some(first) = by_key.get(&key) {
            if *first == path {
                return Err(Collision::Duplicate(path.clone()));
            }
            return Err(Collision::CaseFold(path.clone(), (*first).clone()));
        }
        by_key.insert(key.clone(), path);
        ordered.push((path, key));
    }
    for (path, key) in &ordered {
        for (i, _) in key.match_indices('/') {
            if let Some(prefix) = key.get(..i)
                && let Some(file) = by_key.get(prefix)
            {
                return Err(Collision::FileDirectoryPrefix(
                    (*file).clone(),
                    (*path).clone(),
                ));
            }
        }
    }
    Ok(())
}

/// True when `paths` has two entries with the same case-fold key.
#[must_use]
pub fn has_casefold_duplicates<'a, I>(paths: I) -> bool
where
    I: IntoIterator<Item = &'a str>,
{
    let mut seen = HashSet::new();
    paths.into_iter().any(|p| !seen.insert(casefold(p)))
}
