//! A tiny static entrypoint for the real-Docker turn scenarios (packed `FROM scratch` into
//! `patch-candidate-turn-fixture:test`). Each mode exercises one behaviour of the host that the
//! proof images do not: stdin delivery and EOF, an OOM kill, and in-container isolation probes
//! (including one attempt per system call family the turn seccomp profile denies).
//! It reports through `owned_paths` of an `empty` proposal, which the host passes through.
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::{Read as _, Write as _};

fn report(facts: &[String]) -> ! {
    let doc = serde_json::json!({
        "proposal": {
            "proposal_id": "fixture",
            "provider_id": "fixture",
            "status": "empty",
            "owned_paths": facts,
        },
        "workspace_archive_base64": null,
    });
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
        "live" | "live-stop" | "live-deaf" | "live-hostile" => live(mode.as_str()),
        _ => {
            eprintln!("unknown mode");
            std::process::exit(2);
        }
    }
}

/// SHA-256 via the snapshot crate's digest (the same one the host uses).
/// The framed stdio of a live turn, spoken minimally: HELLO, the request, then per mode one
/// tunnelled model request (`live`), waiting for STOP (`live-stop`), one model request and then
/// never reading stdin again (`live-deaf`), or DATA on a channel never opened (`live-hostile`);
/// facts reported through a RESULT like `report`.
fn live(mode: &str) -> ! {
    use tunnel::{ChannelId, Decoder, Frame};
    let mut stdin = std::io::stdin().lock();
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
    let body = serde_json::json!({"model": model, "stream": true, "input": []}).to_string();
    let http = format!(
        "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8417\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut model_request = vec![Frame::Open(one)];
    model_request.extend(Frame::data_frames(one, http.as_bytes()));
    match mode {
        "live" => {
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
        _ => {
            let chunk =
                tunnel::Chunk::try_from(b"x".to_vec()).unwrap_or_else(|_| std::process::exit(2));
            let nine = ChannelId::try_from(9).unwrap_or_else(|_| std::process::exit(2));
            send(&[Frame::Data(nine, chunk)]);
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
    }
    let result = serde_json::json!({
        "proposal": {
            "proposal_id": "fixture",
            "provider_id": "fixture",
            "status": "empty",
            "owned_paths": facts,
        },
        "workspace_archive_base64": null,
    })
    .to_string();
    let mut out: Vec<Frame> = Frame::result_frames(result.as_bytes()).collect();
    out.push(Frame::ResultEnd);
    send(&out);
    std::process::exit(0)
}

fn sha2_hex(bytes: &[u8]) -> String {
    snapshot::sha256_bare_hex(bytes)
}
