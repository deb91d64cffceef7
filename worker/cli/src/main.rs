//! `patch-candidate`: the command line of the sandboxed repository-patch pipeline.
//!
//! stdout carries only the result (JSON with `--json`); progress and diagnostics go to stderr.
//! Exit codes: 0 ok, 1 rejected (with a stable code), 2 usage, 3 environment (Docker, git, I/O).
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout)]

mod approve_cmd;
mod archive_cmd;
mod demo_cmd;
mod docker_args;
mod doctor_cmd;
mod export_cmd;
mod finalize_cmd;
mod gate_cmd;
mod image_cmd;
mod janitor_cmd;
mod jobs_cmd;
mod live_args;
mod outcome;
mod outfile;
mod paths;
mod plan_args;
mod policy_cmd;
mod publish_cmd;
mod render;
mod review_cmd;
mod run_cmd;
mod serve_cmd;
mod shell_cmd;
mod signals;
mod snapshot_cmd;
#[cfg(test)]
mod test_git;
mod tokens_cmd;
mod usage_cmd;

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub(crate) use outcome::{CliError, Outcome};

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

impl Cli {
    /// `serve` logs structured JSON lines (one object per event, with job/attempt/host ids).
    pub(crate) fn json_logs(&self) -> bool {
        matches!(self.command, Command::Serve(_))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Snapshot a local Git repository at a pinned commit and print its evidence.
    Snapshot(snapshot_cmd::SnapshotArgs),
    /// Write an approval for a change of a local repository (no hand-written JSON): scopes and
    /// grants checked against the tree at the commit, with the checks `run` makes.
    Approve(Box<approve_cmd::ApproveArgs>),
    /// Inspect a returned archive strictly, or pack a directory into the canonical envelope.
    #[command(subcommand)]
    Archive(archive_cmd::ArchiveCommand),
    /// Run one coding turn in Docker and produce a verified, digested patch candidate.
    Run(Box<run_cmd::RunArgs>),
    /// Run the job-worker service: claim queued jobs, run each as one turn, record exactly one
    /// result per job; HTTP API on 127.0.0.1 (bearer token in the state directory). SIGTERM
    /// drains. See docs/SERVICE.md.
    Serve(Box<serve_cmd::ServeArgs>),
    /// Submit, list, show, cancel and retry service jobs, and read their logs (straight from the
    /// job store: --database, default the state directory's SQLite file).
    #[command(subcommand)]
    Jobs(jobs_cmd::JobsCommand),
    /// Named API tokens of the service: create (printed once), list, revoke. Each is a
    /// principal; review decisions made through the API record it.
    #[command(subcommand)]
    Tokens(tokens_cmd::TokensCommand),
    /// List the service hosts registered in the job store.
    Workers(jobs_cmd::WorkersArgs),
    /// Build the proof image if needed, run a turn on a fixture repository, show the candidate.
    Demo(demo_cmd::DemoArgs),
    /// Build and record the proof images.
    #[command(subcommand)]
    Image(image_cmd::ImageCommand),
    /// Remove abandoned turn containers.
    Janitor(janitor_cmd::JanitorArgs),
    /// List the local token-usage ledger.
    Usage(usage_cmd::UsageArgs),
    /// Finalise a staged workspace into a digested patch candidate (optionally stored).
    Finalize(Box<finalize_cmd::FinalizeArgs>),
    /// Run a candidate's validation gates (operator definitions, `--gates`) in sealed containers
    /// against a cached baseline run; write one evidence file per gate, print one verdict line
    /// per gate. `gate init python|rust` prints a definition file to start from. See
    /// docs/GATES.md.
    Gate(Box<gate_cmd::GateArgs>),
    /// Review decisions bound to the candidate's digest: show the review document, accept,
    /// reject, or ask for a retry (local candidate store; docs/REVIEW.md).
    #[command(subcommand)]
    Review(review_cmd::ReviewCommand),
    /// Publish an accepted candidate: one deterministic commit (its id printed before the
    /// push) on a new branch of the remote, created only if absent, after the base branch's tip
    /// is rechecked against the candidate's baseline (docs/REVIEW.md).
    Publish(Box<publish_cmd::PublishArgs>),
    /// Print the digest of a candidate JSON file.
    Digest(finalize_cmd::DigestArgs),
    /// Re-validate a candidate's structure and digest; --digest binds it to the digest you expect;
    /// --repo checks it applies at its commit, its snapshot digest and its derived fields.
    Verify(finalize_cmd::VerifyArgs),
    /// Show a candidate: summary and diffs (coloured on a terminal).
    Show(finalize_cmd::ShowArgs),
    /// Run the content policy over a candidate: secrets, hidden text, executables and binaries,
    /// CI and build configuration changes; one line per finding (rule, path, line; never the
    /// matched value), the digested report with --json. See docs/REVIEW.md.
    Policy(policy_cmd::PolicyArgs),
    /// Report what the local Docker daemon offers (API, cgroups, seccomp, AppArmor, runtimes)
    /// and whether gVisor (`runsc`) passes a smoke turn.
    Doctor(doctor_cmd::DoctorArgs),
    /// Export a candidate as a patch (`--format git`: ready for `git apply`, empty files included).
    Export(export_cmd::ExportArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell).
    Completions(shell_cmd::CompletionsArgs),
    /// Print the man page (roff).
    Man(shell_cmd::ManArgs),
}

/// Runs the parsed command and maps the outcome to stdout/stderr and an exit code.
pub(crate) fn run(cli: Cli) -> ExitCode {
    outcome::set_json_mode(cli.json);
    let result = match cli.command {
        Command::Snapshot(args) => snapshot_cmd::run(&args),
        Command::Approve(args) => approve_cmd::run(&args),
        Command::Archive(command) => archive_cmd::run(&command),
        Command::Run(args) => run_cmd::run(&args),
        Command::Serve(args) => serve_cmd::run(&args),
        Command::Jobs(command) => jobs_cmd::run(&command),
        Command::Workers(args) => jobs_cmd::workers(&args),
        Command::Tokens(command) => tokens_cmd::run(&command),
        Command::Demo(args) => demo_cmd::run(&args),
        Command::Image(command) => image_cmd::run(&command),
        Command::Janitor(args) => janitor_cmd::run(&args),
        Command::Usage(args) => usage_cmd::run(&args),
        Command::Finalize(args) => finalize_cmd::finalize(&args),
        Command::Gate(args) => gate_cmd::run(&args),
        Command::Review(command) => review_cmd::run(&command),
        Command::Publish(args) => publish_cmd::run(&args),
        Command::Digest(args) => finalize_cmd::digest(&args),
        Command::Verify(args) => finalize_cmd::verify(&args),
        Command::Show(args) => finalize_cmd::show(&args),
        Command::Policy(args) => policy_cmd::run(&args),
        Command::Doctor(args) => doctor_cmd::run(&args),
        Command::Export(args) => export_cmd::run(&args),
        Command::Completions(args) => shell_cmd::completions(&args),
        Command::Man(args) => shell_cmd::man(&args),
    };
    outcome::emit(result, cli.json)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
        return run(cli);
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
    run(cli)
}
