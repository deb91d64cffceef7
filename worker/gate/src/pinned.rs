//! Pinned paths: exact repository paths or simple globs (`*` and `?` within one segment, `**` as
//! a whole segment for any number of segments). Matching is on the candidate's canonical paths.
//! Hand-written (a few lines) rather than globset: the semantics must be exactly these and stay
//! so, since a match is a security decision.

use std::str::FromStr;

/// One pinned path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedPattern(String);

impl PinnedPattern {
    /// The pattern text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `path` (a `/`-separated repository path) matches.
    #[must_use]
    pub fn matches(&self, path: &str) -> bool {
        let pat: Vec<&str> = self.0.split('/').collect();
        let segs: Vec<&str> = path.split('/').collect();
        match_segments(&pat, &segs)
    }
}

impl FromStr for PinnedPattern {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        let ok = !s.is_empty()
            && s.len() <= 1024
            && !s.starts_with('/')
            && s.split('/').all(|seg| {
                !seg.is_empty()
                    && seg != "."
                    && seg != ".."
                    && (seg == "**" || !seg.contains("**"))
                    && !seg
                        .bytes()
                        .any(|b| b < 0x20 || b == 0x7f || b == b'\\' || b == b'[')
            });
        if ok { Ok(Self(s.to_owned())) } else { Err(()) }
    }
}

fn match_segments(pat: &[&str], segs: &[&str]) -> bool {
    match pat.split_first() {
        None => segs.is_empty(),
        Some((&"**", rest)) => {
            (0..=segs.len()).any(|i| segs.get(i..).is_some_and(|tail| match_segments(rest, tail)))
        }
        Some((p, rest)) => match segs.split_first() {
            Some((s, tail)) => {
                match_segment(p.as_bytes(), s.as_bytes()) && match_segments(rest, tail)
            }
            None => false,
        },
    }
}

fn match_segment(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => {
            (0..=s.len()).any(|i| s.get(i..).is_some_and(|tail| match_segment(rest, tail)))
        }
        Some((b'?', rest)) => s
            .split_first()
            .is_some_and(|(_, tail)| match_segment(rest, tail)),
        Some((c, rest)) => s
            .split_first()
            .is_some_and(|(d, tail)| c == d && match_segment(rest, tail)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn m(p: &str, s: &str) -> bool {
        p.parse::<PinnedPattern>().unwrap().matches(s)
    }

    #[test]
    fn exact_and_globs() {
        assert!(m("pytest.ini", "pytest.ini"));
        assert!(!m("pytest.ini", "sub/pytest.ini"));
        assert!(m("**/conftest.py", "conftest.py"));
        assert!(m("**/conftest.py", "a/b/conftest.py"));
        assert!(!m("**/conftest.py", "a/b/conftest.pyc"));
        assert!(m("tests/*.py", "tests/test_a.py"));
        assert!(!m("tests/*.py", "tests/sub/test_a.py"));
        assert!(m("tests/**", "tests/sub/test_a.py"));
        assert!(m("build.r?", "build.rs"));
    }

    #[test]
    fn refuses_unsafe_patterns() {
        for p in ["", "/abs", "a/../b", "./a", "a//b", "a**b", "x[ab]", "a\\b"] {
            assert!(p.parse::<PinnedPattern>().is_err(), "{p}");
        }
    }
}
