//! Command-line parsing and dispatch. Each command group lives in its own module and returns a
//! [`Outcome`] (a JSON value plus human text) or a [`CliError`] carrying a stable code.

mod output;
mod snapshot_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use output::{CliError, Outcome};

/// Sandboxed repository-patch pipeline: snapshot a repository at a pinned commit, run one coding
/// turn in a locked-down Docker container, verify the returned archive, and produce a digested
/// patch candidate — without ever writing to the repository.
#[derive(Debug, Parser)]
#[command(name = "patch-candidate", version, propagate_version = true)]
pub(crate) struct Cli {
    /// Print machine-readable JSON on stdout (errors as `{"error": {"code", "message"}}`).
    #[arg(long, global = true)]
    json: bool,
    /// More progress detail on stderr.
    #[arg(long, short, global = true)]
    pub(crate) verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Snapshot a local Git repository at a pinned commit and print its evidence.
    Snapshot(snapshot_cmd::SnapshotArgs),
}

/// Runs the parsed command and maps the outcome to stdout/stderr and an exit code.
pub(crate) fn run(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Snapshot(args) => snapshot_cmd::run(&args),
    };
    output::emit(result, cli.json)
}
