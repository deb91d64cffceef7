//! Raw HTTP/1.1 exchanges: one request, its answer read to the end (the requests say
//! `Connection: close`).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends one request to `addr` (`Host: localhost`, `Connection: close`) with the header lines
/// `headers` (each ending in CRLF) and, if any, `body` as (content type, bytes); returns what came
/// back until the server closed or `timeout` passed. A body the server does not read to the end
/// (it may answer, say 413, and close first) is no error.
pub fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: Option<(&str, &[u8])>,
    timeout: Duration,
) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}");
    if let Some((content_type, bytes)) = body {
        head.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            bytes.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    if let Some((_, bytes)) = body {
        let _ = stream.write_all(bytes);
    }
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    raw
}

/// Splits a whole answer into its status, its head (as sent) and its body (de-chunked).
pub fn parse_answer(raw: &[u8]) -> (u16, String, Vec<u8>) {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut body = raw[end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, head, body)
}

/// A chunked body's bytes.
pub fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap().trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
    out
}

/// The value of header `name` (any case) in an answer's head.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}
