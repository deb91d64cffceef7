//! A Git HTTP remote for the tests: a loopback HTTP/1.1 server (std only, one thread per
//! connection, `Connection: close`) that checks basic auth against a credentials file and runs
//! `git http-backend` as a CGI for every authenticated request. It can hold an authenticated
//! `git-receive-pack` POST (the push itself) until the test releases it, so the test can look at
//! every process while the push is in flight.
//!
//! Self-contained (std and base64 only): the scenario suite includes this same file for its
//! forge tests' remote.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use base64::Engine as _;

#[derive(Debug, Default)]
struct Hold {
    enabled: bool,
    held: bool,
    released: bool,
}

pub struct GitHttpServer {
    pub port: u16,
    hold: Arc<(Mutex<Hold>, Condvar)>,
    stop: Arc<AtomicBool>,
    /// Requests answered 401 (no or wrong credentials).
    pub unauthorized: Arc<AtomicUsize>,
    /// Requests that passed the credential check.
    pub authorized: Arc<AtomicUsize>,
}

impl GitHttpServer {
    /// Serves the repositories under `root`; `credentials_file` holds `user:password` lines.
    pub fn start(root: &Path, credentials_file: &Path) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hold = Arc::new((Mutex::new(Hold::default()), Condvar::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let unauthorized = Arc::new(AtomicUsize::new(0));
        let authorized = Arc::new(AtomicUsize::new(0));
        let accepted: Vec<String> = std::fs::read_to_string(credentials_file)
            .unwrap()
            .lines()
            .map(|l| base64::engine::general_purpose::STANDARD.encode(l))
            .collect();
        let ctx = Arc::new(Context {
            root: root.to_owned(),
            accepted,
            hold: Arc::clone(&hold),
            unauthorized: Arc::clone(&unauthorized),
            authorized: Arc::clone(&authorized),
        });
        let stop_flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop_flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let ctx = Arc::clone(&ctx);
                std::thread::spawn(move || {
                    let _ = serve(&ctx, stream);
                });
            }
        });
        Self {
            port,
            hold,
            stop,
            unauthorized,
            authorized,
        }
    }

    pub fn url(&self, repo: &str) -> String {
        format!("http://127.0.0.1:{}/{repo}", self.port)
    }

    /// The next authenticated receive-pack POST waits until [`Self::release`].
    pub fn hold_next_push(&self) {
        self.hold.0.lock().unwrap().enabled = true;
    }

    /// Blocks until a push is held; false after `timeout`.
    pub fn wait_held(&self, timeout: std::time::Duration) -> bool {
        let (lock, cvar) = &*self.hold;
        let guard = lock.lock().unwrap();
        let (guard, _) = cvar
            .wait_timeout_while(guard, timeout, |h| !h.held)
            .unwrap();
        guard.held
    }

    pub fn release(&self) {
        let (lock, cvar) = &*self.hold;
        lock.lock().unwrap().released = true;
        cvar.notify_all();
    }
}

impl Drop for GitHttpServer {
    fn drop(&mut self) {
        self.release();
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

struct Context {
    root: PathBuf,
    accepted: Vec<String>,
    hold: Arc<(Mutex<Hold>, Condvar)>,
    unauthorized: Arc<AtomicUsize>,
    authorized: Arc<AtomicUsize>,
}

fn serve(ctx: &Context, stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    let RequestHead {
        method,
        target,
        headers,
    } = read_request_head(&mut reader)?;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let body = if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        read_chunked(&mut reader)?
    } else {
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        body
    };
    let authorized = header("authorization")
        .and_then(|v| v.strip_prefix("Basic ").map(str::to_owned))
        .is_some_and(|token| ctx.accepted.contains(&token));
    if !authorized {
        ctx.unauthorized.fetch_add(1, Ordering::SeqCst);
        out.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"test\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return Ok(());
    }
    ctx.authorized.fetch_add(1, Ordering::SeqCst);
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if method == "POST" && path.ends_with("/git-receive-pack") {
        let (lock, cvar) = &*ctx.hold;
        let mut hold = lock.lock().unwrap();
        if hold.enabled && !hold.held {
            hold.held = true;
            cvar.notify_all();
            drop(cvar.wait_while(hold, |h| !h.released).unwrap());
        }
    }
    let mut cgi = Command::new("git");
    cgi.arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", &ctx.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("REMOTE_USER", "publisher")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("CONTENT_LENGTH", body.len().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(v) = header("content-type") {
        cgi.env("CONTENT_TYPE", v);
    }
    if let Some(v) = header("content-encoding") {
        cgi.env("HTTP_CONTENT_ENCODING", v);
    }
    if let Some(v) = header("git-protocol") {
        cgi.env("GIT_PROTOCOL", v);
    }
    let mut child = cgi.spawn()?;
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&body);
    });
    let mut output = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut output)?;
    let _ = feeder.join();
    child.wait()?;
    let split = output
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| (p, 4))
        .or_else(|| output.windows(2).position(|w| w == b"\n\n").map(|p| (p, 2)));
    let Some((at, sep)) = split else {
        out.write_all(b"HTTP/1.1 500 Bad CGI\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    };
    let head = String::from_utf8_lossy(&output[..at]).into_owned();
    let cgi_body = &output[at + sep..];
    let mut status = "200 OK".to_owned();
    let mut response = Vec::new();
    for line in head.lines() {
        if let Some(s) = line.strip_prefix("Status:") {
            status = s.trim().to_owned();
        } else {
            response.extend_from_slice(line.as_bytes());
            response.extend_from_slice(b"\r\n");
        }
    }
    let mut all = format!("HTTP/1.1 {status}\r\n").into_bytes();
    all.extend_from_slice(&response);
    all.extend_from_slice(
        format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            cgi_body.len()
        )
        .as_bytes(),
    );
    all.extend_from_slice(cgi_body);
    out.write_all(&all)?;
    out.flush()
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size_line = String::new();
        reader.read_line(&mut size_line)?;
        let size = usize::from_str_radix(size_line.trim().split(';').next().unwrap_or("0"), 16)
            .map_err(|_| std::io::Error::other("bad chunk size"))?;
        if size == 0 {
            let mut trailer = String::new();
            loop {
                trailer.clear();
                reader.read_line(&mut trailer)?;
                if trailer.trim().is_empty() {
                    return Ok(body);
                }
            }
        }
        let mut chunk = vec![0; size];
        reader.read_exact(&mut chunk)?;
        body.extend_from_slice(&chunk);
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

/// An HTTP/1.1 request's head: its method, target and headers (names lowercased, values
/// trimmed).
pub struct RequestHead {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, String)>,
}

/// Reads a request's head up to the blank line that ends it; a header line without a colon is
/// skipped.
pub fn read_request_head(reader: &mut impl std::io::BufRead) -> std::io::Result<RequestHead> {
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    Ok(RequestHead {
        method,
        target,
        headers,
    })
}
