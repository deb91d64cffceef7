//! Host memory of the gateway's body check for hostile body shapes (benches/gateway-bodies/run.sh
//! measures the peak RSS of this process with `/usr/bin/time -v`).
//!
//! Usage: `body_shapes SHAPE [PARALLEL]`; each of `PARALLEL` threads (default 4) builds one body
//! of about 8 MiB (the default body cap) of that shape, with a model the allowlist refuses, and
//! runs the provider's check on it.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use gateway::{GatewayConfig, OpenAiResponses, Provider as _};

const CAP: usize = 8 * 1_048_576;

fn body(shape: &str) -> Option<Vec<u8>> {
    let head = br#"{"model":"refused-model","stream":true,"input":"#;
    let room = CAP - head.len() - 2;
    let mut out = head.to_vec();
    match shape {
        // `[0,0,0,…]`: two bytes per value.
        "tiny-array" => {
            out.push(b'[');
            while out.len() + 3 < head.len() + room {
                out.extend_from_slice(b"0,");
            }
            out.extend_from_slice(b"0]");
        }
        // `[[[[…]]]]` as deep as the body allows.
        "deep" => {
            let depth = room / 2;
            out.extend(std::iter::repeat_n(b'[', depth));
            out.extend(std::iter::repeat_n(b']', depth));
        }
        // One string filling the body.
        "huge-string" => {
            out.push(b'"');
            out.extend(std::iter::repeat_n(b'a', room - 2));
            out.push(b'"');
        }
        // `{"k0":0,"k1":0,…}`.
        "many-keys" => {
            out.push(b'{');
            let mut i = 0u64;
            while out.len() + 32 < head.len() + room {
                out.extend_from_slice(format!("\"k{i}\":0,").as_bytes());
                i += 1;
            }
            out.extend_from_slice(b"\"end\":0}");
        }
        // `"model":"x"` repeated: the object's keys are all `model`.
        "duplicate-model" => {
            out.truncate(1);
            while out.len() + 32 < CAP {
                out.extend_from_slice(br#""model":"refused-model","#);
            }
            out.extend_from_slice(br#""stream":true,"input":[]"#);
        }
        // The largest shapes within the default pre-scan caps (262,144 values, depth 64,
        // 4 MiB strings), padded to the body cap with one string: these reach the typed
        // extraction and are refused for their model.
        "tiny-array-max" | "many-keys-max" | "deep-max" => {
            if shape == "deep-max" {
                out.extend(std::iter::repeat_n(b'[', 60));
                out.extend(std::iter::repeat_n(b']', 60));
            } else {
                out.push(if shape == "tiny-array-max" {
                    b'['
                } else {
                    b'{'
                });
                let per = if shape == "tiny-array-max" { 1 } else { 2 };
                for i in 0..(262_000 / per) {
                    if shape == "tiny-array-max" {
                        out.extend_from_slice(b"0,");
                    } else {
                        out.extend_from_slice(format!("\"k{i}\":0,").as_bytes());
                    }
                }
                out.extend_from_slice(if shape == "tiny-array-max" {
                    b"0]"
                } else {
                    b"\"e\":0}"
                });
            }
            out.extend_from_slice(b",\"pad\":\"");
            let fill = CAP.saturating_sub(out.len() + 3).min(4 * 1_048_576);
            out.extend(std::iter::repeat_n(b'a', fill));
            out.push(b'"');
        }
        _ => return None,
    }
    out.push(b'}');
    Some(out)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let shape = args.next().unwrap_or_default();
    let parallel: usize = args.next().and_then(|p| p.parse().ok()).unwrap_or(4);
    let config = GatewayConfig::for_model("gpt-5.3-codex");
    let Some(probe) = body(&shape) else {
        eprintln!(
            "usage: body_shapes tiny-array|deep|huge-string|many-keys|duplicate-model [PARALLEL]"
        );
        std::process::exit(2);
    };
    drop(probe);
    let route = OpenAiResponses
        .route(b"POST", b"/v1/responses")
        .unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(2);
        });
    let results: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..parallel)
            .map(|_| {
                s.spawn(|| {
                    let Some(bytes) = body(&shape) else {
                        return "no body".to_owned();
                    };
                    match OpenAiResponses.check_body(&route, &bytes, &config) {
                        Ok(_) => "accepted".to_owned(),
                        Err(e) => e.code().to_owned(),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| "panicked".to_owned()))
            .collect()
    });
    println!("{shape} x{parallel}: {}", results.join(" "));
}
