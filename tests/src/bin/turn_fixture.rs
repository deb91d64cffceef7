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
        _ => {
            eprintln!("unknown mode");
            std::process::exit(2);
        }
    }
}

/// SHA-256 via the snapshot crate's digest (the same one the host uses).
fn sha2_hex(bytes: &[u8]) -> String {
    snapshot::sha256_bare_hex(bytes)
}
