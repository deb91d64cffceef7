//! `patch-candidate`: the command line of the sandboxed repository-patch pipeline.
//!
//! stdout carries only the result (JSON with `--json`); progress and diagnostics go to stderr.
//! Exit codes: 0 ok, 1 rejected (with a stable code), 2 usage, 3 environment (Docker, git, I/O).
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout)]

mod cli;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout and usage errors to stderr itself.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let level = if cli.verbose {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    };
    if cli.json_logs() {
        tracing_subscriber::fmt()
            .json()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .with_current_span(true)
            .with_span_list(false)
            .init();
        return cli::run(cli);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(if cli.verbose {
            tracing::Level::DEBUG
        } else {
            tracing::Level::INFO
        })
        .without_time()
        .init();
    cli::run(cli)
}
