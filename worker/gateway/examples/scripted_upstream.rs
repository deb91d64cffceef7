//! The scripted upstream as a process, for trying `run --live` by hand:
//! `scripted_upstream [--gemini | --claude] [edit PATH OLD NEW | create PATH TEXT]...` serves
//! those replies in order (Responses-API shapes; with `--gemini` Gemini `streamGenerateContent`
//! chunks calling `replace` / `write_file`; with `--claude` Anthropic Messages calling `Read`
//! then `Edit`, or `Write`, at the turn's working directory), then "Done." messages; it prints its base URL, then each
//! request's target and whether it carried an `authorization` header (never the value).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use gateway::testkit::{DEFAULT_USAGE, Reply, ScriptedUpstream, anthropic, gemini};
use serde_json::json;

/// The model the Claude replies name (the benchmark's `--model`).
const CLAUDE_MODEL: &str = "claude-sonnet-4-5";

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut replies = Vec::new();
    let (flag, mut rest) = match args.split_first() {
        Some((flag, more)) if flag == "--gemini" || flag == "--claude" => (flag.as_str(), more),
        _ => ("", args.as_slice()),
    };
    let (is_gemini, is_claude) = (flag == "--gemini", flag == "--claude");
    while let Some((verb, tail)) = rest.split_first() {
        match (verb.as_str(), tail) {
            ("edit", [path, old, new, more @ ..]) if is_claude => {
                let file = format!("{{workdir}}/{path}");
                replies.push(anthropic::tool_use(
                    CLAUDE_MODEL,
                    "Read",
                    &json!({"file_path": file}),
                    DEFAULT_USAGE,
                ));
                let args = json!({"file_path": file, "old_string": old, "new_string": new});
                replies.push(anthropic::tool_use(
                    CLAUDE_MODEL,
                    "Edit",
                    &args,
                    DEFAULT_USAGE,
                ));
                rest = more;
            }
            ("create", [path, text, more @ ..]) if is_claude => {
                let args = json!({"file_path": format!("{{workdir}}/{path}"), "content": text});
                replies.push(anthropic::tool_use(
                    CLAUDE_MODEL,
                    "Write",
                    &args,
                    DEFAULT_USAGE,
                ));
                rest = more;
            }
            ("edit", [path, old, new, more @ ..]) if is_gemini => {
                let args = json!({"file_path": path, "old_string": old, "new_string": new,
                                  "instruction": "edit"});
                replies.push(gemini::function_call("replace", &args, DEFAULT_USAGE));
                rest = more;
            }
            ("create", [path, text, more @ ..]) if is_gemini => {
                let args = json!({"file_path": path, "content": text});
                replies.push(gemini::function_call("write_file", &args, DEFAULT_USAGE));
                rest = more;
            }
            ("edit", [path, old, new, more @ ..]) => {
                replies.push(Reply::edit_file(path, old, new));
                rest = more;
            }
            ("create", [path, text, more @ ..]) => {
                replies.push(Reply::create_file(path, text));
                rest = more;
            }
            _ => {
                eprintln!(
                    "usage: scripted_upstream [--gemini | --claude] [edit PATH OLD NEW | create PATH TEXT]..."
                );
                std::process::exit(2);
            }
        }
    }
    let upstream = if is_claude {
        let upstream = ScriptedUpstream::start([]).await.unwrap();
        let done = anthropic::text(CLAUDE_MODEL, "Done.", DEFAULT_USAGE);
        anthropic::claude_code(&upstream, CLAUDE_MODEL, replies, DEFAULT_USAGE, done);
        upstream
    } else {
        ScriptedUpstream::start(replies).await.unwrap()
    };
    if is_gemini {
        upstream.set_fallback(gemini::text("Done.", DEFAULT_USAGE));
    }
    println!("{}", upstream.base_url());
    let mut seen = 0;
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let requests = upstream.requests();
        for r in requests.iter().skip(seen) {
            println!(
                "{} {} authorization={}",
                r.method,
                r.target,
                r.header("authorization").is_some()
            );
        }
        seen = requests.len();
    }
}
