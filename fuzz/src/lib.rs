//! The bodies of the fuzz targets, shared by the cargo-fuzz targets (`fuzz_targets/`, nightly,
//! libFuzzer) and the stable corpus runner (`src/bin/corpus.rs`, run by CI on every build).
//!
//! Each body asserts invariants, not just "no crash": a failed assertion panics, which libFuzzer
//! records as a crash and the corpus runner reports as a failure.

use std::io::{Cursor, Read as _};

use arbitrary::{Arbitrary, Unstructured};
use archive::{
    ArchiveLimits, build_deterministic_archive, preflight_archive_directory, read_archive_entries,
    read_archive_manifest,
};
use snapshot::{RepoPath, detect_collisions};
use vocab::Sha256;

/// The strict archive reader over raw bytes (seed corpus: `fixtures/hostile-zips/`).
///
/// Invariants, beyond "no panic":
/// * the manifest reader and the entry reader accept exactly the same inputs;
/// * accept ⇒ `write(read(x)) == x` (the reader accepts only canonical bytes);
/// * accepted paths are portable and collision-free;
/// * the `zip` crate, opened strictly, sees the same names and bytes (parity oracle);
/// * the raw preflight accepted whatever the reader accepted.
pub fn archive_reader(data: &[u8]) {
    let limits = ArchiveLimits::default();
    let manifest = read_archive_manifest(data, &limits);
    let entries = read_archive_entries(data, &limits);
    assert_eq!(manifest.is_ok(), entries.is_ok(), "readers disagree");
    if let (Err(a), Err(b)) = (&manifest, &entries) {
        assert_eq!(a.code(), b.code());
    }
    let (Ok(manifest), Ok(entries)) = (manifest, entries) else {
        return;
    };

    let rebuilt = build_deterministic_archive(&entries).expect("accepted entries re-serialise");
    assert_eq!(rebuilt, data, "accepted bytes are not canonical");
    for (path, _) in &entries {
        RepoPath::parse(path.as_str()).expect("accepted path is portable");
    }
    detect_collisions(entries.iter().map(|(p, _)| p)).expect("accepted paths are collision-free");
    preflight_archive_directory(data, Some(entries.len()), limits.max_bytes(), None)
        .expect("preflight accepts what the reader accepts");

    assert_eq!(manifest.entries.len(), entries.len());
    assert_eq!(manifest.archive_sha256, Sha256::of(data));
    for (m, (path, content)) in manifest.entries.iter().zip(&entries) {
        assert_eq!(&m.path, path);
        assert_eq!(m.size_bytes, content.len() as u64);
        assert_eq!(m.content_sha256, Sha256::of(content));
    }

    let config = zip::read::Config {
        archive_offset: zip::read::ArchiveOffset::Known(0),
    };
    let mut z = zip::ZipArchive::with_config(config, Cursor::new(data)).expect("zip opens it");
    z.validate_header_consistency()
        .expect("zip finds the headers consistent");
    assert!(!z.has_duplicate_names());
    assert_eq!(z.len(), entries.len());
    for (i, (path, content)) in entries.iter().enumerate() {
        let mut f = z.by_index(i).expect("zip reads the entry");
        assert_eq!(f.name_raw(), path.as_str().as_bytes());
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).expect("zip reads the data");
        assert_eq!(&bytes, content);
    }
}

/// Hostile path tokens for [`archive_paths`].
#[derive(Debug, Arbitrary)]
pub enum Token {
    Name(u8),
    Dot,
    DotDot,
    Empty,
    Backslash,
    Colon,
    Upper,
    SharpS,
    DoubleS,
    CafeNfc,
    CafeNfd,
    Device,
    TrailingDot,
    Space,
    Nul,
}

fn segment(tokens: &[Token]) -> String {
    let mut s = String::new();
    for t in tokens {
        match t {
            Token::Name(n) => s.push(char::from(b'a' + n % 4)),
            Token::Dot => s.push('.'),
            Token::DotDot => s.push_str(".."),
            Token::Empty => {}
            Token::Backslash => s.push('\\'),
            Token::Colon => s.push(':'),
            Token::Upper => s.push('A'),
            Token::SharpS => s.push('ß'),
            Token::DoubleS => s.push_str("SS"),
            Token::CafeNfc => s.push_str("caf\u{e9}"),
            Token::CafeNfd => s.push_str("cafe\u{301}"),
            Token::Device => s.push_str("con"),
            Token::TrailingDot => s.push_str("x."),
            Token::Space => s.push(' '),
            Token::Nul => s.push('\0'),
        }
    }
    s
}

/// One archive entry for [`archive_paths`]: a path built from hostile tokens, and its content.
#[derive(Debug, Arbitrary)]
pub struct Entry {
    pub segments: Vec<Vec<Token>>,
    pub content: Vec<u8>,
}

/// The writer/reader pair with structured entry sets whose paths are built from hostile tokens
/// (`..`, `.`, empty segments, `\`, `:`, case and normalisation twins, device names).
///
/// Invariants: the writer accepts a set iff every path is a canonical portable path and the set
/// is collision-free; whatever it writes, the strict reader reads back as the sorted set; and
/// input order never changes the bytes.
pub fn archive_paths(input: &[Entry]) {
    if input.len() > 50 {
        return;
    }
    let mut set = Vec::new();
    for e in input {
        let text: Vec<String> = e.segments.iter().map(|s| segment(s)).collect();
        match RepoPath::parse(&text.join("/")) {
            Ok(path) => set.push((path, e.content.clone())),
            Err(_) => return, // non-portable: not representable as an entry at all
        }
    }
    let collision_free = detect_collisions(set.iter().map(|(p, _)| p)).is_ok();
    let built = build_deterministic_archive(&set);
    assert_eq!(
        built.is_ok(),
        collision_free && !set.is_empty(),
        "writer acceptance"
    );
    let Ok(bytes) = built else { return };
    let mut reversed = set.iter().rev().cloned().collect::<Vec<_>>();
    assert_eq!(
        build_deterministic_archive(&reversed).expect("same set"),
        bytes
    );
    reversed.sort_by(|a, b| a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes()));
    if bytes.len() <= archive::MAX_ARCHIVE_BYTES {
        let read = read_archive_entries(&bytes, &ArchiveLimits::default()).expect("reads back");
        assert_eq!(read, reversed);
    }
}

/// [`archive_paths`] over raw bytes, decoded exactly as libfuzzer-sys decodes a typed input
/// (`arbitrary_take_rest`); bytes that do not decode are skipped, as libFuzzer skips them.
pub fn archive_paths_bytes(data: &[u8]) {
    if let Ok(input) = Vec::<Entry>::arbitrary_take_rest(Unstructured::new(data)) {
        archive_paths(&input);
    }
}

/// The gate wire contract and the runner's JUnit reader over raw bytes (seeds: the documents
/// infra/ci/post.d/20-fuzz.sh writes, and any `fuzz/corpus/gate_wire/`).
///
/// Invariants, beyond "no panic":
/// * an accepted report is canonical: `to_json(from_json(x)) == x`;
/// * an accepted request re-encodes to a request that parses back equal;
/// * a report stream is accepted only when its one frame is an accepted report;
/// * the JUnit reader never lists more cases than its cap.
pub fn gate_wire(data: &[u8]) {
    use gate_runner::{GateReport, GateRequest, JunitReport, parse_junit};
    if let Ok(report) = GateReport::from_json(data) {
        assert_eq!(report.to_json().expect("accepted report re-encodes"), data);
    }
    if let Ok(request) = GateRequest::from_json(data) {
        let again = request.to_json().expect("accepted request re-encodes");
        assert_eq!(
            GateRequest::from_json(&again).expect("re-encoded request parses"),
            request
        );
    }
    if let Ok(report) = GateReport::read_stream(data) {
        let payload = data.get(4..).expect("a frame has a length prefix");
        assert_eq!(report.to_json().expect("re-encodes"), payload);
    }
    if let Ok(JunitReport::Ok { cases, .. }) = parse_junit(data, 8, 16) {
        assert!(cases.len() <= 8);
    }
}

/// The tunnel's strict incremental frame decoder over raw bytes (seeds: the frame streams
/// infra/ci/post.d/20-fuzz.sh writes, and any `fuzz/corpus/tunnel_decoder/`).
///
/// Invariants, beyond "no panic":
/// * the input fed whole and fed in pieces (sizes taken from the input) gives the same frames,
///   the same buffered remainder, or the same error code;
/// * an error's code is one of `tunnel::ERROR_CODES`, and the decoder stays failed with it;
/// * accept ⇒ the frames re-encode to exactly the bytes consumed (`encode(decode(x)) == x`), and
///   each frame alone decodes back to itself;
/// * what the decoder holds never exceeds one header and one payload, and `finish` accepts
///   exactly when it holds nothing.
pub fn tunnel_decoder(data: &[u8]) {
    use tunnel::{Decoder, ERROR_CODES, HEADER_LEN, MAX_FRAME_PAYLOAD};

    let mut whole = Decoder::new();
    let whole_result = whole.push(data);
    let mut pieces = Decoder::new();
    let step = 1 + usize::from(data.first().copied().unwrap_or(0) % 17);
    let mut piece_frames = Vec::new();
    let mut piece_error = None;
    for chunk in data.chunks(step) {
        match pieces.push(chunk) {
            Ok(frames) => piece_frames.extend(frames),
            Err(e) => {
                piece_error = Some(e);
                break;
            }
        }
    }
    match (whole_result, piece_error) {
        (Ok(frames), None) => {
            assert_eq!(frames, piece_frames, "pieces decode differently");
            assert_eq!(whole.buffered(), pieces.buffered());
            let buffered = whole.buffered();
            assert!(
                buffered <= HEADER_LEN + MAX_FRAME_PAYLOAD,
                "holds {buffered} bytes"
            );
            assert_eq!(whole.finish().is_ok(), buffered == 0);
            let consumed = data.get(..data.len() - buffered).expect("buffered ≤ input");
            let mut encoded = Vec::new();
            for frame in &frames {
                let bytes = frame.to_bytes();
                let mut alone = Decoder::new();
                assert_eq!(
                    alone.push(&bytes).expect("a frame re-decodes"),
                    [frame.clone()]
                );
                assert!(alone.finish().is_ok());
                encoded.extend_from_slice(&bytes);
            }
            assert_eq!(encoded, consumed, "accepted frames are not canonical");
        }
        (Err(a), Some(b)) => {
            assert_eq!(a.code(), b.code(), "pieces fail differently");
            assert!(ERROR_CODES.contains(&a.code()), "unknown code {}", a.code());
            let again = whole
                .push(b"\x01")
                .expect_err("a failed decoder stays failed");
            assert_eq!(again.code(), a.code());
            assert_eq!(whole.finish().expect_err("still failed").code(), a.code());
        }
        (whole, pieces) => panic!("whole {whole:?} but pieces {pieces:?}"),
    }
}

/// The gateway's built-in providers, each with a POST target of its own.
fn gateway_providers() -> [(&'static dyn gateway::Provider, &'static [u8]); 3] {
    [
        (&gateway::OpenAiResponses, b"/v1/responses"),
        (&gateway::AnthropicMessages, b"/v1/messages?beta=true"),
        (
            &gateway::GeminiGenerateContent,
            b"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
        ),
    ]
}

/// The gateway's request parsers over raw bytes for every built-in provider: the strict HTTP/1.1
/// head parser (`parse_head`), then the body check (byte pre-scan and typed extraction) on the
/// bytes after a parsed head and on the whole input as a body (seeds: the requests
/// infra/ci/post.d/20-fuzz.sh writes, and any `fuzz/corpus/gateway_http/`).
///
/// Invariants, beyond "no panic":
/// * every refusal's code is one of `gateway::ERROR_CODES`;
/// * a parsed head is within its caps (head bytes, header count, body length), ends with
///   CRLF CRLF, has lower-case names, and parses again the same from exactly its own bytes;
/// * an incomplete head is shorter than the head cap;
/// * an accepted body is one JSON object no deeper than the depth cap, and the model it names is
///   on the allowlist.
pub fn gateway_http(data: &[u8]) {
    use gateway::{ERROR_CODES, GatewayConfig, HeadLimits, parse_head};

    let mut config = GatewayConfig::for_model("gpt-5.3-codex");
    config.models.push("claude-sonnet-4-5".to_owned());
    config.models.push("gemini-2.5-pro".to_owned());
    config.max_request_body_values = 256;
    config.max_request_body_depth = 8;
    config.max_request_body_string_bytes = 256;
    let limits = HeadLimits {
        max_head_bytes: 2048,
        max_headers: 16,
        max_body_bytes: 4096,
    };
    let check_body =
        |provider: &dyn gateway::Provider, route: &gateway::Route, body: &[u8]| match provider
            .check_body(route, body, &config)
        {
            Ok(checked) => {
                let value: serde_json::Value =
                    serde_json::from_slice(body).expect("an accepted body is JSON");
                assert!(value.is_object(), "an accepted body is an object");
                assert!(json_depth(&value) <= config.max_request_body_depth as usize);
                assert!(config.models.contains(&checked.model), "model not allowed");
            }
            Err(e) => assert!(ERROR_CODES.contains(&e.code()), "unknown code {}", e.code()),
        };
    for (provider, target) in gateway_providers() {
        match parse_head(data, &limits, provider) {
            Ok(Some((head, n))) => {
                assert!(n <= data.len() && n <= limits.max_head_bytes);
                let own = data.get(..n).expect("n ≤ input");
                assert!(own.ends_with(b"\r\n\r\n"));
                assert!(head.headers.len() <= limits.max_headers);
                assert!(head.content_length <= limits.max_body_bytes);
                for (name, _) in &head.headers {
                    assert_eq!(name, &name.to_ascii_lowercase());
                }
                let again = parse_head(own, &limits, provider).expect("its own bytes parse");
                assert_eq!(again, Some((head.clone(), n)));
                let rest = data.get(n..).unwrap_or_default();
                let len = usize::try_from(head.content_length).unwrap_or(usize::MAX);
                check_body(provider, &head.route, rest.get(..len).unwrap_or(rest));
            }
            Ok(None) => assert!(data.len() < limits.max_head_bytes + 4),
            Err(e) => assert!(ERROR_CODES.contains(&e.code()), "unknown code {}", e.code()),
        }
        let route = provider
            .route(b"POST", target)
            .expect("the provider's own route");
        check_body(provider, &route, data);
    }
}

fn json_depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(json_depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(json_depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The gateway's SSE usage scanner over raw bytes, for every built-in provider, as a stream and
/// as a JSON answer (seeds: the streams infra/ci/post.d/20-fuzz.sh writes, and any
/// `fuzz/corpus/gateway_sse/`).
///
/// Invariants, beyond "no panic":
/// * the usage found does not depend on how the bytes are cut into chunks;
/// * it is the usage an independent line splitter finds by folding every complete `data:` line
///   into the provider's tally (the oracle);
/// * a reported usage's total is at least its input and output counts wherever the provider
///   derives it (Gemini), and nothing is reported by a stream without a `data:` line.
pub fn gateway_sse(data: &[u8]) {
    use gateway::{MAX_EVENT_LINE, UsageScanner, UsageTally};

    let step = 1 + usize::from(data.first().copied().unwrap_or(0) % 23);
    for (provider, _) in gateway_providers() {
        let mut whole = UsageScanner::default();
        whole.feed(provider, data);
        let mut pieces = UsageScanner::default();
        for chunk in data.chunks(step) {
            pieces.feed(provider, chunk);
        }
        assert_eq!(whole.usage(), pieces.usage(), "chunking changes the usage");

        let mut tally = UsageTally::default();
        for line in data.split_inclusive(|&b| b == b'\n') {
            if !line.ends_with(b"\n") || line.len() > MAX_EVENT_LINE {
                continue;
            }
            let Some(json) = line.trim_ascii_end().strip_prefix(b"data:") else {
                continue;
            };
            if let Ok(event) = serde_json::from_slice(json.trim_ascii_start()) {
                provider.usage(&event, &mut tally);
            }
        }
        assert_eq!(whole.usage(), tally.complete, "scanner and oracle disagree");
        if !data.windows(5).any(|w| w == b"data:") {
            assert_eq!(whole.usage(), None);
        }
        if let (Some(usage), "gemini") = (whole.usage(), provider.name()) {
            assert!(usage.total_tokens >= usage.input_tokens.saturating_add(usage.output_tokens));
        }

        let mut answer = UsageScanner::json();
        let mut answer_pieces = UsageScanner::json();
        answer.feed(provider, data);
        for chunk in data.chunks(step) {
            answer_pieces.feed(provider, chunk);
        }
        answer.finish(provider);
        answer_pieces.finish(provider);
        assert_eq!(answer.usage(), answer_pieces.usage());
        let oracle = serde_json::from_slice(data)
            .ok()
            .and_then(|v| provider.answer_usage(&v));
        assert_eq!(answer.usage(), oracle, "JSON answer and oracle disagree");
    }
}

/// The webhook secret of [`forge_webhook`], read once from a private file (the only way a
/// `forge::WebhookSecret` is made).
fn forge_secret() -> &'static forge::WebhookSecret {
    static SECRET: std::sync::OnceLock<forge::WebhookSecret> = std::sync::OnceLock::new();
    SECRET.get_or_init(|| {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let path = std::env::temp_dir().join(format!(
            "patch-candidate-fuzz-forge-{}.secret",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("the secret file is created");
        f.write_all(FORGE_SECRET).expect("the secret is written");
        drop(f);
        let secret = forge::WebhookSecret::from_file(&path).expect("the secret file is read");
        let _ = std::fs::remove_file(&path);
        secret
    })
}

const FORGE_SECRET: &[u8] = b"fuzz-secret-0123456789";

/// Forge webhooks: byte 0 picks the forge, byte 1 the event header, the rest is the body.
///
/// Invariants, beyond "no panic":
/// * a body signed with the secret (an independent HMAC, the `hmac` crate used directly) is
///   verified, and names the delivery and event it was sent with;
/// * the same delivery with one signature bit flipped (GitLab: another token) is refused with
///   `PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG`, never accepted;
/// * a parsed event keeps every text within its bound (title, body, comment, labels) and every
///   label non-empty, and parsing is deterministic.
pub fn forge_webhook(data: &[u8]) {
    use hmac::Mac as _;
    let (Some(&k), Some(&e)) = (data.first(), data.get(1)) else {
        return;
    };
    let body = data.get(2..).unwrap_or_default();
    let kind = match k % 3 {
        0 => forge::ForgeKind::GitHub,
        1 => forge::ForgeKind::Gitea,
        _ => forge::ForgeKind::GitLab,
    };
    let events: &[&str] = match kind {
        forge::ForgeKind::GitHub => &["issues", "issue_comment", "ping", "push"],
        forge::ForgeKind::Gitea => &[
            "issues",
            "issue_label",
            "issue_comment",
            "pull_request_comment",
        ],
        _ => &["Issue Hook", "Note Hook", "Merge Request Hook", "Push Hook"],
    };
    let event = events[usize::from(e) % events.len()];
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(FORGE_SECRET).expect("any key");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let headers = |signature: &str| {
        let mut h = http::HeaderMap::new();
        let mut put = |name: &'static str, value: &str| {
            h.insert(name, http::HeaderValue::from_str(value).expect("ascii"));
        };
        match kind {
            forge::ForgeKind::GitHub => {
                put("x-github-event", event);
                put("x-github-delivery", "fuzz-1");
                put("x-hub-signature-256", &format!("sha256={signature}"));
            }
            forge::ForgeKind::Gitea => {
                put("x-gitea-event", event);
                put("x-gitea-delivery", "fuzz-1");
                put("x-gitea-signature", signature);
            }
            _ => {
                put("x-gitlab-event", event);
                put("x-gitlab-event-uuid", "fuzz-1");
                put("x-gitlab-token", signature);
            }
        }
        h
    };
    let good = match kind {
        forge::ForgeKind::GitLab => std::str::from_utf8(FORGE_SECRET).expect("ascii").to_owned(),
        _ => hex.clone(),
    };
    let verified = forge::verify(kind, &headers(&good), body, forge_secret());
    if body.len() > forge::MAX_WEBHOOK_BODY_BYTES {
        assert!(verified.is_err(), "an oversized body is refused");
        return;
    }
    let delivery = verified.expect("a correctly signed delivery verifies");
    assert_eq!(delivery.id.as_str(), "fuzz-1");
    assert_eq!(delivery.event.as_str(), event);
    let bad = match kind {
        forge::ForgeKind::GitLab => "another-token".to_owned(),
        _ => {
            let flip = if hex.starts_with('0') { "1" } else { "0" };
            format!("{flip}{}", hex.get(1..).unwrap_or_default())
        }
    };
    let refused = forge::verify(kind, &headers(&bad), body, forge_secret())
        .expect_err("a wrong signature is refused");
    assert_eq!(refused.code(), "PATCH_CANDIDATE_FORGE_SIGNATURE_WRONG");

    let parsed = forge::parse_event(&delivery, body);
    let again = forge::parse_event(&delivery, body);
    assert_eq!(parsed.is_ok(), again.is_ok(), "parsing is deterministic");
    match parsed {
        Ok(Some(forge::ForgeEvent::IssueLabeled {
            issue,
            labels_added,
            ..
        })) => {
            assert!(issue.title.len() <= forge::MAX_TITLE_BYTES);
            assert!(issue.body.len() <= forge::MAX_TEXT_BYTES);
            assert!(!labels_added.is_empty());
            assert!(labels_added.iter().all(|l| !l.is_empty() && l.len() <= 255));
        }
        Ok(Some(forge::ForgeEvent::Comment { body, .. })) => {
            assert!(body.len() <= forge::MAX_TEXT_BYTES);
        }
        Ok(_) => {}
        Err(e) => assert!(
            e.code().starts_with("PATCH_CANDIDATE_FORGE_"),
            "{}",
            e.code()
        ),
    }
}
