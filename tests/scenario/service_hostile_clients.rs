//! `patch-candidate serve` under clients that never finish, never stop, or post from another
//! site: a real `serve` process spoken to over raw TCP (so every byte and its timing is the
//! test's choice, and the client's source address too: loopback has all of `127.0.0.0/8`).
//!
//! What they prove: a flood of slow-body requests to the unauthenticated UI routes (more of them
//! than the service serves at once) leaves `/healthz` and an authenticated API call answering
//! within a second, and each slow body is cut off by the body-read timeout; a connection that
//! sends no complete request head is closed by the header-read timeout (a fresh one and an idle
//! keep-alive one); failed sign-ins from one address throttle that address's wrong tokens but
//! never the right token, from another address or from the same one; sign-in and sign-out need
//! their CSRF token; the session cookie is `__Host-` (Secure, `Path=/`, no `Domain`).

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::*;

/// What the service promises (docs/SERVICE.md): the header-read timeout and the body-read
/// timeout of the unauthenticated routes.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
const PUBLIC_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// More slow bodies per route than the service serves at once (64 before this change).
const FLOOD: usize = 80;

/// A connection from `from` (a loopback address) to `to` (std has no bind-before-connect, so
/// tokio's socket connects it, on a thread of its own: the tests run inside a runtime).
fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    std::thread::spawn(move || {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stream = rt.block_on(socket.connect(to)).unwrap().into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        stream
    })
    .join()
    .unwrap()
}

/// One answer: status, head (as sent), body (de-chunked).
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// The values of every `Set-Cookie` header.
    fn set_cookies(&self) -> Vec<&str> {
        self.head
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("set-cookie")
                    .then(|| v.trim())
            })
            .collect()
    }

    /// The `Set-Cookie` value whose cookie name ends with `suffix`.
    fn cookie(&self, suffix: &str) -> Option<&str> {
        self.set_cookies().into_iter().find(|c| {
            c.split('=')
                .next()
                .is_some_and(|name| name.ends_with(suffix))
        })
    }

    /// The `csrf` hidden field of the page, if it has one.
    fn csrf(&self) -> Option<String> {
        let marker = "name=\"csrf\" value=\"";
        let at = self.body.find(marker)? + marker.len();
        self.body[at..].split('"').next().map(str::to_owned)
    }
}

/// One request with `Connection: close` from `from`, read to the end within `limit`.
fn request(
    from: Ipv4Addr,
    to: SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    body: Option<&str>,
    limit: Duration,
) -> Answer {
    let mut stream = connect_from(from, to);
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(body.unwrap_or_default());
    stream.write_all(head.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let read = stream.read_to_end(&mut raw);
    assert!(
        read.is_ok(),
        "{method} {path}: no complete answer within {limit:?}: {read:?}"
    );
    let (status, head, body) = parse_answer(&raw);
    Answer {
        status,
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

const LOCAL: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const WAIT: Duration = Duration::from_secs(30);

/// A GET from `from`, read to the end within [`WAIT`].
fn get(from: Ipv4Addr, to: SocketAddr, path: &str, headers: &[String]) -> Answer {
    request(from, to, "GET", path, headers, None, WAIT)
}

/// A form POST from `from`, read to the end within [`WAIT`].
fn post(from: Ipv4Addr, to: SocketAddr, path: &str, headers: &[String], body: &str) -> Answer {
    request(from, to, "POST", path, headers, Some(body), WAIT)
}

/// The sign-in form as a browser gets it: the pre-session cookie (`name=value`) and the form's
/// CSRF token, each when the page has one.
fn sign_in_form(from: Ipv4Addr, to: SocketAddr) -> (Option<String>, Option<String>) {
    let page = get(from, to, "/ui/sign-in", &[]);
    assert_eq!(page.status, 200, "{page:?}");
    let cookie = page
        .cookie("pc_sign_in")
        .and_then(|c| c.split(';').next())
        .map(str::to_owned);
    (cookie, page.csrf())
}

/// A sign-in as a browser does it (the form first, then the POST with its cookie and token).
fn sign_in(from: Ipv4Addr, to: SocketAddr, token: &str) -> Answer {
    let (cookie, csrf) = sign_in_form(from, to);
    let headers: Vec<String> = cookie.iter().map(|c| format!("Cookie: {c}")).collect();
    let body = match csrf {
        Some(t) => format!("csrf={t}&token={token}"),
        None => format!("token={token}"),
    };
    post(from, to, "/ui/sign-in", &headers, &body)
}

/// The session cookie (`name=value`) of a successful sign-in.
fn session_of(answer: &Answer) -> String {
    assert_eq!(answer.status, 303, "{answer:?}");
    answer
        .cookie("pc_session")
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie: {answer:?}"))
        .to_owned()
}

/// A request that sends its head and one byte of a body it says is much longer, then stalls.
fn slow_body(to: SocketAddr, path: &str, content_type: &str) -> TcpStream {
    let mut stream = connect_from(LOCAL, to);
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: 100000\r\n\r\nt"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

/// Reads until the peer closes or `limit` passes: what arrived, and when the close came.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Duration>) {
    let started = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0_u8; 4096];
    loop {
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            return (got, None);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return (got, Some(started.elapsed())),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (got, Some(started.elapsed()));
            }
            Err(_) => return (got, None),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_slow_body_flood_leaves_healthz_and_the_api_answering() {
    let Some((_guard, _state, service, addr, token)) = serve_fresh().await else {
        return;
    };
    let flood_started = Instant::now();
    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        flood.push(slow_body(addr, "/ui/csp-report", "application/csp-report"));
        flood.push(slow_body(
            addr,
            "/ui/sign-in",
            "application/x-www-form-urlencoded",
        ));
    }
    // Every slow request has reached its handler (or its queue) by now.
    std::thread::sleep(Duration::from_millis(500));
    for round in 0..3 {
        for (path, auth) in [
            ("/healthz", None),
            ("/readyz", None),
            ("/v1/jobs", Some(token.as_str())),
        ] {
            let headers: Vec<String> = auth
                .map(|t| format!("Authorization: Bearer {t}"))
                .into_iter()
                .collect();
            let t = Instant::now();
            let answer = request(
                LOCAL,
                addr,
                "GET",
                path,
                &headers,
                None,
                Duration::from_secs(1),
            );
            assert_eq!(answer.status, 200, "round {round} {path}: {answer:?}");
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "round {round} {path}: {:?}",
                t.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // The slow bodies are cut off: each is answered (408, or 503 for those that never got a
    // slot) and closed within the body-read timeout (plus the queue wait and some slack).
    let mut timed_out = 0;
    for stream in &mut flood {
        let left = (PUBLIC_BODY_TIMEOUT + Duration::from_secs(10))
            .saturating_sub(flood_started.elapsed())
            .max(Duration::from_secs(1));
        let (got, closed) = read_until_closed(stream, left);
        assert!(
            closed.is_some(),
            "a slow body still open after {:?}",
            flood_started.elapsed()
        );
        let text = String::from_utf8_lossy(&got);
        if text.starts_with("HTTP/1.1 408") {
            assert!(
                text.contains("PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT"),
                "{text}"
            );
            timed_out += 1;
        } else {
            assert!(text.starts_with("HTTP/1.1 503"), "{text}");
            assert!(text.contains("PATCH_CANDIDATE_SERVICE_BUSY"), "{text}");
        }
    }
    assert!(timed_out > 0, "no slow body reached a handler");
    // And the sign-in page answers again once the flood is gone.
    let page = get(LOCAL, addr, "/ui/sign-in", &[]);
    assert_eq!(page.status, 200);
    assert!(service.logged("PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT"));
    tally("docker_slow_body_flood_leaves_healthz_and_the_api_answering");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_header_read_timeout_closes_idle_connections() {
    let Some((_guard, _state, _service, addr, _token)) = serve_fresh().await else {
        return;
    };
    let limit = HEADER_READ_TIMEOUT + Duration::from_secs(5);
    // Nothing at all, and half a head.
    let mut silent = connect_from(LOCAL, addr);
    let mut half = connect_from(LOCAL, addr);
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    // A keep-alive connection that goes idle after its first answer.
    let mut idle = connect_from(LOCAL, addr);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    for (what, stream) in [
        ("silent", &mut silent),
        ("half a head", &mut half),
        ("idle keep-alive", &mut idle),
    ] {
        let (got, closed) = read_until_closed(stream, limit);
        let closed = closed.unwrap_or_else(|| panic!("{what}: still open after {limit:?}"));
        assert!(
            closed >= HEADER_READ_TIMEOUT.saturating_sub(Duration::from_secs(1))
                || what != "silent",
            "{what}: closed too early ({closed:?})"
        );
        let text = String::from_utf8_lossy(&got);
        if what == "idle keep-alive" {
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        }
    }
    // The service still answers.
    let answer = get(LOCAL, addr, "/healthz", &[]);
    assert_eq!(answer.status, 200);
    tally("docker_header_read_timeout_closes_idle_connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_failed_sign_ins_never_lock_out_the_right_token() {
    let Some((_guard, _state, service, addr, token)) = serve_fresh().await else {
        return;
    };
    let wrong = "1".repeat(64);
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(sign_in(OTHER, addr, &wrong).status);
    }
    assert_eq!(statuses[0], 401, "{statuses:?}");
    assert_eq!(
        *statuses.last().unwrap(),
        429,
        "wrong tokens from one address are throttled: {statuses:?}"
    );
    // The right token: from another address, and from the throttled one.
    let elsewhere = sign_in(LOCAL, addr, &token);
    let _ = session_of(&elsewhere);
    let same = sign_in(OTHER, addr, &token);
    let session = session_of(&same);
    let jobs = get(OTHER, addr, "/ui/jobs", &[format!("Cookie: {session}")]);
    assert_eq!(jobs.status, 200, "{jobs:?}");
    // The throttled address's wrong tokens are still refused, with a time to retry.
    let refused = sign_in(OTHER, addr, &wrong);
    assert_eq!(refused.status, 429);
    assert!(
        refused.head.to_ascii_lowercase().contains("retry-after:"),
        "{refused:?}"
    );
    assert!(service.logged("PATCH_CANDIDATE_UI_SIGN_IN"));
    assert!(service.logged("PATCH_CANDIDATE_UI_SIGN_IN_LIMIT"));
    tally("docker_failed_sign_ins_never_lock_out_the_right_token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_sign_in_and_out_need_their_csrf_token_and_the_cookie_is_host_only() {
    let Some((_guard, _state, service, addr, token)) = serve_fresh().await else {
        return;
    };

    // Sign-in without the form's cookie and token (what another site's page can send).
    let bare = post(LOCAL, addr, "/ui/sign-in", &[], &format!("token={token}"));
    assert_eq!(bare.status, 403, "{bare:?}");
    assert!(bare.body.contains("PATCH_CANDIDATE_UI_CSRF"), "{bare:?}");
    assert!(bare.cookie("pc_session").is_none());
    // The cookie of one form with the token of another, and the token without its cookie.
    let (cookie_a, _) = sign_in_form(LOCAL, addr);
    let (_, csrf_b) = sign_in_form(LOCAL, addr);
    let cookie_a = cookie_a.expect("the sign-in page sets its cookie");
    let csrf_b = csrf_b.expect("the sign-in form has a csrf field");
    for (headers, body) in [
        (
            vec![format!("Cookie: {cookie_a}")],
            format!("csrf={csrf_b}&token={token}"),
        ),
        (vec![], format!("csrf={csrf_b}&token={token}")),
        (
            vec![format!("Cookie: {cookie_a}")],
            format!("token={token}"),
        ),
    ] {
        let answer = post(LOCAL, addr, "/ui/sign-in", &headers, &body);
        assert_eq!(answer.status, 403, "{answer:?}");
        assert!(answer.cookie("pc_session").is_none());
    }
    // Refusals for CSRF are not failed sign-ins: nothing is throttled.
    assert!(!service.logged("PATCH_CANDIDATE_UI_SIGN_IN"));

    // The whole form signs in; the cookies are host-only and Secure.
    let (form_cookie, _) = sign_in_form(LOCAL, addr);
    let form_cookie = form_cookie.unwrap();
    assert!(form_cookie.starts_with("__Host-"), "{form_cookie}");
    let signed = sign_in(LOCAL, addr, &token);
    let set = signed.cookie("pc_session").unwrap().to_owned();
    let name = set.split('=').next().unwrap();
    assert_eq!(name, "__Host-pc_session", "{set}");
    let attrs: Vec<String> = set
        .split(';')
        .skip(1)
        .map(|a| a.trim().to_ascii_lowercase())
        .collect();
    for want in ["secure", "httponly", "path=/", "samesite=strict"] {
        assert!(attrs.iter().any(|a| a == want), "{want} missing: {set}");
    }
    assert!(
        !attrs.iter().any(|a| a.starts_with("domain")),
        "no Domain: {set}"
    );
    let session = session_of(&signed);

    // Sign-out without its token leaves the session alone.
    let cookie = format!("Cookie: {session}");
    let out = post(
        LOCAL,
        addr,
        "/ui/sign-out",
        std::slice::from_ref(&cookie),
        "",
    );
    assert_eq!(out.status, 403, "{out:?}");
    assert!(out.body.contains("PATCH_CANDIDATE_UI_CSRF"), "{out:?}");
    let jobs = get(LOCAL, addr, "/ui/jobs", std::slice::from_ref(&cookie));
    assert_eq!(jobs.status, 200, "still signed in: {jobs:?}");
    // With the token of the page's sign-out form it ends the session.
    let csrf = jobs.csrf().expect("the sign-out form carries a csrf field");
    let out = post(
        LOCAL,
        addr,
        "/ui/sign-out",
        std::slice::from_ref(&cookie),
        &format!("csrf={csrf}"),
    );
    assert_eq!(out.status, 303, "{out:?}");
    let cleared = out.cookie("pc_session").unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    let jobs = get(LOCAL, addr, "/ui/jobs", &[cookie]);
    assert_eq!(jobs.status, 303, "signed out: {jobs:?}");
    tally("docker_sign_in_and_out_need_their_csrf_token_and_the_cookie_is_host_only");
}

/// Signs in from loopback as a browser does; the `Cookie` header value of the session.
pub(crate) fn sign_in_as_a_browser(addr: SocketAddr, token: &str) -> String {
    session_of(&sign_in(LOCAL, addr, token))
}

/// A browser's GET with its session cookie (`name=value`): the status and the body.
pub(crate) fn browser_get(addr: SocketAddr, path: &str, cookie: &str) -> (u16, String) {
    let answer = request(
        LOCAL,
        addr,
        "GET",
        path,
        &[format!("Cookie: {cookie}")],
        None,
        Duration::from_secs(60),
    );
    (answer.status, answer.body)
}

/// A GET with an optional cookie (`name=value`) and bearer token: the status and the time to
/// the whole answer, in milliseconds.
pub(crate) fn timed_get(
    addr: SocketAddr,
    path: &str,
    cookie: Option<&str>,
    token: Option<&str>,
) -> (u16, f64) {
    let mut headers: Vec<String> = cookie.map(|c| format!("Cookie: {c}")).into_iter().collect();
    headers.extend(token.map(|t| format!("Authorization: Bearer {t}")));
    let t = Instant::now();
    let answer = request(
        LOCAL,
        addr,
        "GET",
        path,
        &headers,
        None,
        Duration::from_secs(300),
    );
    (answer.status, t.elapsed().as_secs_f64() * 1000.0)
}
