//! The scripted upstream as a process, for trying `run --live` by hand:
//! `scripted_upstream [edit PATH OLD NEW | create PATH TEXT]...` serves those replies in order,
//! then "Done." messages; it prints its base URL, then each request's target and whether it
//! carried an `authorization` header (never the value).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use gateway::testkit::{Reply, ScriptedUpstream};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut replies = Vec::new();
    let mut rest = args.as_slice();
    while let Some((verb, tail)) = rest.split_first() {
        match (verb.as_str(), tail) {
            ("edit", [path, old, new, more @ ..]) => {
                replies.push(Reply::edit_file(path, old, new));
                rest = more;
            }
            ("create", [path, text, more @ ..]) => {
                replies.push(Reply::create_file(path, text));
                rest = more;
            }
            _ => {
                eprintln!("usage: scripted_upstream [edit PATH OLD NEW | create PATH TEXT]...");
                std::process::exit(2);
            }
        }
    }
    let upstream = ScriptedUpstream::start(replies).await.unwrap();
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
