//! `fake-agent`: the synthetic ACP agent (stdio). With `--idle` it only sleeps (the payload of the
//! fork-bomb mode).
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Duration;

use turn_runner::agent::{IDLE_FLAG, serve_stdio};

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(IDLE_FLAG) {
        std::thread::sleep(Duration::from_secs(60));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(3);
    };
    match runtime.block_on(serve_stdio()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(code = ?e.code, "connection ended with an error");
            ExitCode::from(1)
        }
    }
}
