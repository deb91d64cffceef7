//! The credential scrubber: every byte the gateway streams from the upstream into the container
//! passes it. It replaces the credential and its common encodings by [`SCRUB_MARKER`], across
//! chunk and frame boundaries, holding back at most the longest pattern's length minus one byte.
//!
//! The patterns, for a credential `K` (`K` itself always; of its encodings only those of at
//! least [`MIN_PATTERN`] bytes, so a very short credential has fewer):
//! - `K` itself;
//! - `K` percent-encoded (every byte outside RFC 3986's unreserved set as `%XX`, upper- and
//!   lower-case hex), when that differs from `K`;
//! - `K` as JSON writes it in a string: `"` and `\` escaped; with every `/` as `\/`; and with
//!   every byte as `\u00xx` (lower- and upper-case hex);
//! - base64 (standard and URL-safe alphabets) of `K` at each of the three alignments inside a
//!   longer encoded value — so `base64("Bearer K")`, `base64("user:K")` (basic auth) and any
//!   other encoded text containing `K` are caught — plus the padded encoding of `K` alone;
//! - the masked forms providers print, for a credential of at least 16 bytes: `****`, `...` or
//!   `…` followed by its last four characters (`sk-proj-****…abcd`).
//!
//! Only the bytes that begin a pattern are held back, so an answer without the credential flows
//! through unchanged and undelayed. Mixed forms (some characters escaped, others not) and other
//! encodings are not matched.
//!
//! Matching runs the `aho-corasick` crate over the held-back tail plus each chunk (its stream
//! API wraps a `Read`, not a push-fed async stream; the hold-back here is what makes it
//! streaming).

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use crate::credential::Credential;
use crate::error::GatewaySetupError;

/// What replaces each occurrence.
pub const SCRUB_MARKER: &str = "[credential removed by the gateway]";

/// The code of the turn event recorded for an answer the scrubber changed.
pub const CREDENTIAL_SCRUBBED: &str = "PATCH_CANDIDATE_GATEWAY_CREDENTIAL_SCRUBBED";

/// Shortest pattern used (shorter fragments would match ordinary text).
pub const MIN_PATTERN: usize = 8;

/// The compiled patterns of one credential.
#[derive(Clone)]
pub struct CredentialPatterns {
    matcher: AhoCorasick,
    patterns: Vec<Vec<u8>>,
    longest: usize,
}

impl std::fmt::Debug for CredentialPatterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialPatterns(<redacted>)")
    }
}

impl CredentialPatterns {
    /// The patterns of `credential` (see the module documentation).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_GATEWAY_CREDENTIAL` if the matcher cannot be built.
    pub fn new(credential: &Credential) -> Result<Self, GatewaySetupError> {
        let patterns = patterns(credential.expose().as_bytes());
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(1);
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|_| GatewaySetupError::Credential {
                source_name: "scrubber patterns".to_owned(),
            })?;
        Ok(Self {
            matcher,
            patterns,
            longest,
        })
    }

    /// Bytes held back at most between two chunks.
    #[must_use]
    pub fn hold_back(&self) -> usize {
        self.longest.saturating_sub(1)
    }

    /// The first position of `buf`'s tail from which the rest of `buf` is a proper prefix of a
    /// pattern (an occurrence there may continue in the next chunk), or `buf.len()`.
    fn open_from(&self, buf: &[u8]) -> usize {
        let len = buf.len();
        (len.saturating_sub(self.hold_back())..len)
            .find(|&s| {
                let tail = buf.get(s..).unwrap_or_default();
                self.patterns
                    .iter()
                    .any(|p| p.len() > tail.len() && p.starts_with(tail))
            })
            .unwrap_or(len)
    }
}

/// The scrubber of one stream.
#[derive(Debug)]
pub struct Scrubber<'a> {
    patterns: &'a CredentialPatterns,
    held: Vec<u8>,
    found: u64,
}

impl<'a> Scrubber<'a> {
    /// A scrubber with nothing held.
    #[must_use]
    pub fn new(patterns: &'a CredentialPatterns) -> Self {
        Self {
            patterns,
            held: Vec::new(),
            found: 0,
        }
    }

    /// Appends to `out` what of `chunk` (after what was held) can be sent now, scrubbed; keeps
    /// back only the tail that is the start of a pattern (at most [`hold_back`] bytes), so text
    /// without one passes at once.
    ///
    /// [`hold_back`]: CredentialPatterns::hold_back
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        // An occurrence starting before `boundary` lies wholly inside `buf`; from `boundary` on,
        // the bytes may begin one that continues in the next chunk: they are held back.
        let boundary = self.patterns.open_from(&buf);
        let last = self.replace(&buf, boundary, out);
        let emit = boundary.max(last);
        out.extend_from_slice(buf.get(last..emit).unwrap_or_default());
        self.held = buf.get(emit..).unwrap_or_default().to_vec();
    }

    /// Appends the held tail, scrubbed (the stream ended).
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        let buf = std::mem::take(&mut self.held);
        let last = self.replace(&buf, buf.len(), out);
        out.extend_from_slice(buf.get(last..).unwrap_or_default());
    }

    /// Occurrences replaced so far.
    #[must_use]
    pub fn found(&self) -> u64 {
        self.found
    }

    /// Writes `buf` up to the end of the last occurrence starting before `before`, occurrences
    /// replaced; returns that end.
    fn replace(&mut self, buf: &[u8], before: usize, out: &mut Vec<u8>) -> usize {
        let mut last = 0;
        for m in self.patterns.matcher.find_iter(buf) {
            if m.start() >= before {
                break;
            }
            out.extend_from_slice(buf.get(last..m.start()).unwrap_or_default());
            out.extend_from_slice(SCRUB_MARKER.as_bytes());
            self.found += 1;
            last = m.end();
        }
        last
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// Every pattern of `key`, deduplicated: the key itself, its encodings at least [`MIN_PATTERN`]
/// bytes long, and the masked forms.
fn patterns(key: &[u8]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = vec![key.to_vec()];
    for upper in [true, false] {
        let mut percent = Vec::new();
        let mut unicode = Vec::new();
        for &b in key {
            let hex = if upper {
                format!("{b:02X}")
            } else {
                format!("{b:02x}")
            };
            if is_unreserved(b) {
                percent.push(b);
            } else {
                percent.push(b'%');
                percent.extend_from_slice(hex.as_bytes());
            }
            unicode.extend_from_slice(b"\\u00");
            unicode.extend_from_slice(hex.as_bytes());
        }
        out.push(percent);
        out.push(unicode);
    }
    let mut json = Vec::new();
    let mut json_slash = Vec::new();
    for &b in key {
        if b == b'"' || b == b'\\' {
            json.push(b'\\');
            json_slash.push(b'\\');
        }
        if b == b'/' {
            json_slash.push(b'\\');
        }
        json.push(b);
        json_slash.push(b);
    }
    out.push(json);
    out.push(json_slash);
    // base64 at each alignment: the characters that depend on `key`'s bytes only.
    let bits = key.len() * 8;
    for align in 0..3usize {
        let mut shifted = vec![0u8; align];
        shifted.extend_from_slice(key);
        let first = (align * 8).div_ceil(6);
        let end = (align * 8 + bits) / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&shifted);
            if let Some(inner) = encoded.as_bytes().get(first..end) {
                out.push(inner.to_vec());
            }
        }
    }
    out.push(STANDARD.encode(key).into_bytes());
    out.push(URL_SAFE.encode(key).into_bytes());
    out.retain(|p| p.len() >= MIN_PATTERN);
    // The key itself, however short.
    out.push(key.to_vec());
    if key.len() >= 16
        && let Some(last4) = key.get(key.len() - 4..)
    {
        for mask in [&b"****"[..], b"...", "\u{2026}".as_bytes()] {
            let mut p = mask.to_vec();
            p.extend_from_slice(last4);
            out.push(p);
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use proptest::prelude::*;

    const KEY: &str = "sk-proj-Ab/c+d=e\"f\\9xYz";

    fn pats() -> CredentialPatterns {
        CredentialPatterns::new(&Credential::from_value(KEY).unwrap()).unwrap()
    }

    fn scrub_in_pieces(p: &CredentialPatterns, input: &[u8], cuts: &[usize]) -> (Vec<u8>, u64) {
        let mut s = Scrubber::new(p);
        let mut out = Vec::new();
        let mut at = 0;
        for &cut in cuts {
            let cut = cut.clamp(at, input.len());
            s.push(&input[at..cut], &mut out);
            assert!(s.held.len() <= p.hold_back(), "held back more than allowed");
            at = cut;
        }
        s.push(&input[at..], &mut out);
        s.finish(&mut out);
        (out, s.found())
    }

    fn encodings() -> Vec<Vec<u8>> {
        let key = KEY.as_bytes();
        let mut bearer = b"Bearer ".to_vec();
        bearer.extend_from_slice(key);
        let mut basic = b"user:".to_vec();
        basic.extend_from_slice(key);
        let unicode: String = key.iter().map(|b| format!("\\u{b:04x}")).collect();
        vec![
            key.to_vec(),
            serde_json::to_string(KEY)
                .unwrap()
                .trim_matches('"')
                .as_bytes()
                .to_vec(),
            KEY.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('/', "\\/")
                .into_bytes(),
            unicode.clone().into_bytes(),
            unicode.to_uppercase().replace("\\U", "\\u").into_bytes(),
            STANDARD.encode(key).into_bytes(),
            STANDARD.encode(&bearer).into_bytes(),
            URL_SAFE_NO_PAD.encode(&bearer).into_bytes(),
            STANDARD.encode(&basic).into_bytes(),
            format!("x{}", STANDARD.encode([b"ab", key].concat())).into_bytes(),
            KEY.bytes()
                .map(|b| {
                    if is_unreserved(b) {
                        (b as char).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect::<String>()
                .into_bytes(),
            b"sk-proj-********************9xYz".to_vec(),
            b"sk-proj...9xYz".to_vec(),
        ]
    }

    #[test]
    fn every_listed_encoding_is_scrubbed_whole_and_split_at_every_boundary() {
        let p = pats();
        for enc in encodings() {
            let mut input = b"data: {\"echo\":\"".to_vec();
            input.extend_from_slice(&enc);
            input.extend_from_slice(b"\"}\n\n");
            for cut in 0..=input.len() {
                let (out, found) = scrub_in_pieces(&p, &input, &[cut]);
                let text = String::from_utf8_lossy(&out);
                assert!(
                    found >= 1,
                    "not found: {} cut at {cut}",
                    String::from_utf8_lossy(&enc)
                );
                assert!(text.contains(SCRUB_MARKER));
                assert!(!text.contains("9xYz"), "a fragment survived: {text}");
            }
        }
    }

    #[test]
    fn text_without_the_key_passes_unchanged() {
        let p = pats();
        let input =
            b"event: response.output_text.delta\ndata: {\"delta\":\"sk-proj- is a prefix\"}\n\n";
        for cut in 0..=input.len() {
            assert_eq!(scrub_in_pieces(&p, input, &[cut]), (input.to_vec(), 0));
        }
        // Nothing is held back unless the tail begins a pattern: each chunk goes out at once.
        let mut s = Scrubber::new(&p);
        let mut out = Vec::new();
        s.push(b"data: {\"delta\":\"hello\"}\n\n", &mut out);
        assert_eq!(
            (out.as_slice(), s.held.len()),
            (&b"data: {\"delta\":\"hello\"}\n\n"[..], 0)
        );
        out.clear();
        s.push(b"data: sk-pr", &mut out);
        assert_eq!(
            (out.as_slice(), s.held.as_slice()),
            (&b"data: "[..], &b"sk-pr"[..])
        );
    }

    #[test]
    fn a_short_key_is_still_scrubbed_itself() {
        let p = CredentialPatterns::new(&Credential::from_value("k3y").unwrap()).unwrap();
        let (out, found) = scrub_in_pieces(&p, b"a k3y b", &[3]);
        assert_eq!(found, 1);
        assert_eq!(out, format!("a {SCRUB_MARKER} b").into_bytes());
    }

    proptest! {
        #[test]
        fn split_anywhere_the_output_is_the_same(
            noise in proptest::collection::vec(any::<u8>(), 0..200),
            at in 0usize..200,
            which in 0usize..13,
            cuts in proptest::collection::vec(0usize..400, 0..12),
        ) {
            let p = pats();
            let encs = encodings();
            let enc = &encs[which % encs.len()];
            let at = at.min(noise.len());
            let mut input = noise[..at].to_vec();
            input.extend_from_slice(enc);
            input.extend_from_slice(&noise[at..]);
            let mut sorted = cuts.clone();
            sorted.sort_unstable();
            let whole = scrub_in_pieces(&p, &input, &[]);
            let pieces = scrub_in_pieces(&p, &input, &sorted);
            prop_assert_eq!(&whole, &pieces);
            prop_assert!(whole.1 >= 1);
            prop_assert!(!whole.0.windows(KEY.len()).any(|w| w == KEY.as_bytes()));
        }
    }
}
