//! A tiny static entrypoint for the real-Docker turn scenarios (packed `FROM scratch` into
//! `patch-candidate-turn-fixture:test`). Each mode exercises one behaviour of the host that the
//! proof images do not: stdin delivery and EOF, an OOM kill, and in-container isolation probes
//! (including one attempt per system call family the turn seccomp profile denies).
//! It reports through `owned_paths` of an `empty` proposal, which the host passes through.
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{Read as _, Write as _};

/// The worker result of an `empty` proposal reporting `facts` as its `owned_paths`.
fn empty_result(facts: &[String]) -> serde_json::Value {
    serde_json::json!({
        "proposal": {
            "proposal_id": "fixture",
            "provider_id": "fixture",
            "status": "empty",
            "owned_paths": facts,
        },
        "workspace_archive_base64": null,
    })
}

fn report(facts: &[String]) -> ! {
    let doc = empty_result(facts);
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(doc.to_string().as_bytes());
    let _ = out.flush();
    std::process::exit(0)
}

fn status_field(name: &str) -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
        .unwrap_or_else(|| "?".to_owned())
}

/// The size option of the `/dev/shm` mount, e.g. `size=1024k`.
fn shm_options() -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .find_map(|l| {
            let mut fields = l.split_whitespace();
            (fields.nth(1)? == "/dev/shm").then(|| {
                fields
                    .nth(1)?
                    .split(',')
                    .find(|o| o.starts_with("size="))
                    .map(str::to_owned)
            })?
        })
        .unwrap_or_else(|| "none".to_owned())
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "stdin" => {
            // Reads to EOF: hangs (and times out) if the host never closes stdin.
            let mut buf = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut buf);
            let digest = sha2_hex(&buf);
            report(&[
                format!("stdin-bytes-{}", buf.len()),
                format!("stdin-sha256-{digest}"),
            ]);
        }
        "probe" => {
            let mut buf = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut buf);
            let root_writable = std::fs::write("/probe", b"x").is_ok();
            let tmp_writable = std::fs::write("/tmp/probe", b"x").is_ok();
            let net = std::fs::read_to_string("/proc/net/dev").unwrap_or_default();
            let mut ifaces: Vec<&str> = net
                .lines()
                .skip(2)
                .filter_map(|l| l.split(':').next())
                .map(str::trim)
                .collect();
            ifaces.sort_unstable();
            let env: Vec<String> = std::env::vars().map(|(k, _)| k).collect();
            let nofile = std::fs::read_to_string("/proc/self/limits")
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .map(|l| {
                    l.split_whitespace()
                        .skip(3)
                        .take(2)
                        .collect::<Vec<_>>()
                        .join("/")
                })
                .unwrap_or_default();
            report(&[
                format!(
                    "uid-{}",
                    status_field("Uid:")
                        .split_whitespace()
                        .next()
                        .unwrap_or("?")
                ),
                format!("capeff-{}", status_field("CapEff:")),
                format!("capbnd-{}", status_field("CapBnd:")),
                format!("nonewprivs-{}", status_field("NoNewPrivs:")),
                format!("seccomp-{}", status_field("Seccomp:")),
                format!("root-writable-{root_writable}"),
                format!("tmp-writable-{tmp_writable}"),
                format!("ifaces-{}", ifaces.join(",")),
                format!("env-{}", env.join(",")),
                format!("nofile-{nofile}"),
                format!("shm-{}", shm_options()),
                format!(
                    "pid1-{}",
                    std::fs::read_to_string("/proc/1/comm")
                        .unwrap_or_default()
                        .trim()
                ),
            ]);
        }
        "syscalls" => {
            // Each family the turn seccomp profile denies, attempted harmlessly.
            let mut buf = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut buf);
            let facts: Vec<String> = syscall_probe::Probe::ALL
                .iter()
                .map(|p| format!("syscall-{}-{}", p.name(), p.attempt().label()))
                .collect();
            report(&facts);
        }
        "oom" => {
            // Touch every page of 1 GiB: the 768 MiB cgroup limit ends the process.
            let mut blocks: Vec<Vec<u8>> = Vec::new();
            for _ in 0..1024 {
                blocks.push(vec![1_u8; 1 << 20]);
            }
            report(&[format!("survived-{}", blocks.len())]);
        }
        "sleep" => loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        },
        "live" | "live-other-model" | "live-stop" | "live-deaf" | "live-hostile" | "live-flood"
        | "live-reset-on-text" | "live-event-flood" | "live-pipeline" => live(mode.as_str()),
        _ => {
            eprintln!("unknown mode");
            std::process::exit(2);
        }
    }
}

/// SHA-256 via the snapshot crate's digest (the same one the host uses).
/// The framed stdio of a live turn, spoken minimally: HELLO, the request, then per mode one
/// tunnelled model request (`live`; `live-other-model` names a model the turn was not given),
/// waiting for STOP (`live-stop`), one model request and then
/// never reading stdin again (`live-deaf`), DATA on a channel never opened (`live-hostile`), or
/// one of the hostile patterns of `hostile` (`live-flood`, `live-reset-on-text`,
/// `live-event-flood`, `live-pipeline`); facts reported through a RESULT like `report`.
fn live(mode: &str) -> ! {
    use tunnel::{ChannelId, Decoder, Frame};
    let mut stdin = std::io::stdin();
    let mut decoder = Decoder::new();
    let mut pending = std::collections::VecDeque::new();
    let mut next = move || -> Option<Frame> {
        loop {
            if let Some(f) = pending.pop_front() {
                return Some(f);
            }
            let mut buf = vec![0u8; 65536];
            let n = stdin.read(&mut buf).ok()?;
            if n == 0 {
                return None;
            }
            pending.extend(decoder.push(buf.get(..n)?).ok()?);
        }
    };
    let send = |frames: &[Frame]| {
        let mut bytes = Vec::new();
        for f in frames {
            f.encode(&mut bytes);
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&bytes);
        let _ = out.flush();
    };
    send(&[Frame::Hello]);
    let mut request = Vec::new();
    let mut frames = vec![];
    while let Some(f) = next() {
        match f {
            Frame::Hello => {}
            Frame::Request(c) => request.extend_from_slice(c.as_bytes()),
            Frame::RequestEnd => break,
            other => frames.push(format!("unexpected-{:?}", other.frame_type())),
        }
    }
    let doc: serde_json::Value = serde_json::from_slice(&request).unwrap_or_default();
    let model = doc
        .pointer("/live/model")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("none")
        .to_owned();
    let mut facts = vec![format!("model-{model}")];
    facts.extend(frames);
    let one = ChannelId::try_from(1).unwrap_or_else(|_| std::process::exit(2));
    // `live-other-model`: the one request names a model the turn was not given.
    let http = if mode == "live-other-model" {
        model_http("o3-pro-not-allowed")
    } else {
        model_http(&model)
    };
    let mut model_request = vec![Frame::Open(one)];
    model_request.extend(Frame::data_frames(one, http.as_bytes()));
    match mode {
        "live" | "live-other-model" => {
            send(&model_request);
            let mut answer = Vec::new();
            let mut closing = "none";
            while let Some(f) = next() {
                match f {
                    Frame::Data(_, c) => answer.extend_from_slice(c.as_bytes()),
                    Frame::Fin(_) => {
                        closing = "fin";
                        send(&[Frame::Fin(one)]);
                        break;
                    }
                    Frame::Reset(..) => {
                        closing = "reset";
                        break;
                    }
                    _ => {}
                }
            }
            let text = String::from_utf8_lossy(&answer);
            facts.push(format!("closing-{closing}"));
            facts.push(format!(
                "status-{}",
                text.split(' ').nth(1).unwrap_or("none")
            ));
            facts.push(format!(
                "completed-{}",
                text.contains("event: response.completed")
            ));
            facts.push(format!(
                "credential-seen-{}",
                text.contains("docker-live-credential")
            ));
        }
        "live-deaf" => {
            // The answer fills every buffer on the way back; nothing here reads it, nor STOP.
            send(&model_request);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        "live-stop" => {
            while let Some(f) = next() {
                if f == Frame::Stop {
                    facts.push("stop-received".to_owned());
                    break;
                }
            }
        }
        "live-hostile" => {
            let chunk =
                tunnel::Chunk::try_from(b"x".to_vec()).unwrap_or_else(|_| std::process::exit(2));
            let nine = ChannelId::try_from(9).unwrap_or_else(|_| std::process::exit(2));
            send(&[Frame::Data(nine, chunk)]);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        _ => facts.extend(hostile(mode, &model, next, &send)),
    }
    let result = empty_result(&facts).to_string();
    let mut out: Vec<Frame> = Frame::result_frames(result.as_bytes()).collect();
    out.push(Frame::ResultEnd);
    send(&out);
    std::process::exit(0)
}

/// One streamed Responses-API request for `model`, as the agent would send it to the gateway.
fn model_http(model: &str) -> String {
    let body = serde_json::json!({"model": model, "stream": true, "input": []}).to_string();
    format!(
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The hostile live modes (issue 22's findings through a real container); returns their facts.
/// - `live-flood`: one model request (the upstream holds it), then one-byte DATA frames on its
///   channel up to the per-channel byte cap, while another thread reads stdin for the RESET.
/// - `live-reset-on-text`: five model requests one after another, each channel reset as soon as
///   the answer's text starts; refused ones read to their FIN.
/// - `live-event-flood`: the tunnel's whole EVENT allowance (10,000) of 4,000 bytes each.
/// - `live-pipeline`: one model request, then, once its answer starts, a second request on the
///   same channel split across two DATA frames sent apart.
fn hostile(
    mode: &str,
    model: &str,
    next: impl FnMut() -> Option<tunnel::Frame> + Send + 'static,
    send: &dyn Fn(&[tunnel::Frame]),
) -> Vec<String> {
    use tunnel::{ChannelId, Frame};
    let id = |n: u32| ChannelId::try_from(n).unwrap_or_else(|_| std::process::exit(2));
    let request = |n: u32| {
        let mut frames = vec![Frame::Open(id(n))];
        frames.extend(Frame::data_frames(id(n), model_http(model).as_bytes()));
        frames
    };
    let mut next = next;
    let mut facts = Vec::new();
    match mode {
        "live-flood" => {
            send(&request(1));
            // The answer's start: the gateway is now serving the request.
            while let Some(f) = next() {
                if matches!(f, Frame::Data(..)) {
                    break;
                }
            }
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                while let Some(f) = next() {
                    if tx.send(f).is_err() {
                        break;
                    }
                }
            });
            let cap = usize::try_from(tunnel::Limits::default().max_channel_bytes_to_worker)
                .unwrap_or(usize::MAX);
            let frames = cap.saturating_sub(model_http(model).len());
            let one =
                tunnel::Chunk::try_from(b"x".to_vec()).unwrap_or_else(|_| std::process::exit(2));
            // Every frame is sent, whenever the RESET comes: data after it must be dropped too.
            let mut chunk = Vec::with_capacity(1 << 17);
            let mut sent = 0usize;
            let mut out = std::io::stdout();
            while sent < frames {
                Frame::Data(id(1), one.clone()).encode(&mut chunk);
                sent += 1;
                if chunk.len() >= 1 << 16 || sent == frames {
                    if out.write_all(&chunk).and_then(|()| out.flush()).is_err() {
                        break;
                    }
                    chunk.clear();
                }
            }
            let mut code = None;
            while code.is_none() {
                match rx.recv() {
                    Ok(Frame::Reset(_, c)) => code = Some(c.as_str().to_owned()),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            facts.push(format!("flood-frames-{sent}"));
            facts.push(format!(
                "reset-{}",
                code.unwrap_or_else(|| "none".to_owned())
            ));
        }
        "live-reset-on-text" => {
            for n in 1..=5u32 {
                send(&request(n));
                let mut answer = Vec::new();
                let mut closing = "none".to_owned();
                while let Some(f) = next() {
                    match f {
                        Frame::Data(m, c) if m == id(n) => {
                            answer.extend_from_slice(c.as_bytes());
                            if String::from_utf8_lossy(&answer).contains("partial answer") {
                                send(&[Frame::Reset(id(n), tunnel::ResetCode::default())]);
                                closing = "reset-sent".to_owned();
                                break;
                            }
                        }
                        Frame::Fin(m) if m == id(n) => {
                            send(&[Frame::Fin(id(n))]);
                            let text = String::from_utf8_lossy(&answer);
                            closing =
                                format!("status-{}", text.split(' ').nth(1).unwrap_or("none"));
                            break;
                        }
                        Frame::Reset(m, c) if m == id(n) => {
                            closing = format!("reset-{}", c.as_str());
                            break;
                        }
                        _ => {}
                    }
                }
                facts.push(format!("channel-{n}-{closing}"));
            }
        }
        "live-event-flood" => {
            let mut payload = br#"{"kind":"file","path":""#.to_vec();
            payload.resize(4_000 - 2, b'a');
            payload.extend_from_slice(br#""}"#);
            let event =
                tunnel::EventPayload::try_from(payload).unwrap_or_else(|_| std::process::exit(2));
            let events = tunnel::Limits::default().max_events;
            let mut chunk = Vec::new();
            let mut out = std::io::stdout();
            for _ in 0..events {
                Frame::Event(event.clone()).encode(&mut chunk);
                if chunk.len() >= 1 << 16 {
                    let _ = out.write_all(&chunk);
                    chunk.clear();
                }
            }
            let _ = out.write_all(&chunk);
            let _ = out.flush();
            facts.push(format!("events-sent-{events}"));
        }
        _ => {
            // live-pipeline
            send(&request(1));
            while let Some(f) = next() {
                if matches!(f, Frame::Data(..)) {
                    break;
                }
            }
            let second = model_http(model);
            let (head, rest) = second.as_bytes().split_at(10);
            let data = |bytes: &[u8]| Frame::data_frames(id(1), bytes).collect::<Vec<_>>();
            send(&data(head));
            std::thread::sleep(std::time::Duration::from_millis(20));
            send(&data(rest));
            let mut closing = "none".to_owned();
            while let Some(f) = next() {
                match f {
                    Frame::Reset(_, c) => {
                        closing = format!("reset-{}", c.as_str());
                        break;
                    }
                    Frame::Fin(_) => {
                        closing = "fin".to_owned();
                        break;
                    }
                    _ => {}
                }
            }
            facts.push(format!("closing-{closing}"));
        }
    }
    facts
}

fn sha2_hex(bytes: &[u8]) -> String {
    vocab::sha256_bare_hex(bytes)
}
