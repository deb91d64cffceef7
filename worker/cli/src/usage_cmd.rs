//! `patch-candidate usage`: lists the local token-usage ledger.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use turn::UsageLedger;

use super::docker_args::state_dir;
use super::{CliError, Outcome, render};

/// `usage` arguments.
#[derive(Debug, Args)]
pub(crate) struct UsageArgs {
    /// Ledger database (default: `<state dir>/usage.sqlite3`).
    #[arg(long)]
    ledger: Option<PathBuf>,
}

pub(crate) fn run(args: &UsageArgs) -> Result<Outcome, CliError> {
    let path = match &args.ledger {
        Some(p) => {
            // A ledger the user names must exist; the default one may not have been created yet.
            if !p.is_file() {
                return Err(match std::fs::metadata(p) {
                    Ok(_) => CliError::path_kind("--ledger", p, "a regular file"),
                    Err(_) => CliError::missing_path("--ledger", p),
                });
            }
            p.clone()
        }
        None => state::USAGE_LEDGER.path_in(&state_dir()?),
    };
    let records = if path.exists() {
        UsageLedger::open(&path)?.list()?
    } else {
        Vec::new()
    };
    let mut text = String::new();
    let _ = writeln!(text, "{} record(s)", records.len());
    for r in &records {
        let _ = writeln!(
            text,
            "  {}  app {}  build {}  prompt {}  completion {}  total {}",
            render::name(&r.event_id),
            render::name(&r.identity.app_id),
            render::name(r.identity.build_id.as_deref().unwrap_or("-")),
            r.prompt_tokens,
            r.completion_tokens,
            r.total_tokens
        );
    }
    let json = serde_json::json!({ "ledger": path.display().to_string(), "records": records });
    Ok(Outcome { json, text })
}
