//! `patch-candidate tokens create NAME | list | revoke NAME`: the service's named API tokens,
//! each a principal that review decisions record. The store keeps the token's SHA-256 only; the
//! token is printed once, at creation. The first-start token (`<state dir>/api-token`) stays the
//! principal `operator`.

use clap::{Args, Subcommand};
use jobs::TokenName;

use super::jobs_cmd::{StoreArgs, open};
use super::outcome::TOKEN_NOT_FOUND_CODE;
use super::{CliError, Outcome, render};

/// `tokens` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TokensCommand {
    /// Create a named token and print it once (stdout; it is not stored in clear anywhere).
    Create(NameArgs),
    /// List the named tokens (names and times; never a token or its hash).
    List(ListArgs),
    /// Revoke a named token: requests with it are refused (401) from now on; the name is
    /// never reused.
    Revoke(NameArgs),
}

/// A token name argument.
#[derive(Debug, Clone, Args)]
pub(crate) struct NameArgs {
    /// The token's principal name (1-64 of `A-Z a-z 0-9 . _ @ -`; not `operator`).
    pub name: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `tokens list` arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs one `tokens` subcommand.
pub(crate) fn run(command: &TokensCommand) -> Result<Outcome, CliError> {
    match command {
        TokensCommand::Create(args) => {
            let name = TokenName::parse(&args.name)?;
            let (rt, store) = open(&args.store)?;
            let (token, hash) = service::mint_token()?;
            rt.block_on(store.create_token(&name, &hash))?;
            Ok(Outcome {
                text: format!("{token}\n"),
                json: serde_json::json!({"name": name.as_str(), "token": token}),
            })
        }
        TokensCommand::List(args) => {
            let (rt, store) = open(&args.store)?;
            let tokens = rt.block_on(store.tokens())?;
            let mut text = String::new();
            for t in &tokens {
                let state = t
                    .revoked_at_ms
                    .map_or_else(|| "live".to_owned(), |at| format!("revoked at {at}"));
                text.push_str(&format!(
                    "{}  created at {}  {state}\n",
                    render::name(&t.name),
                    t.created_at_ms
                ));
            }
            Ok(Outcome {
                text,
                json: serde_json::json!({"tokens": tokens}),
            })
        }
        TokensCommand::Revoke(args) => {
            let name = TokenName::parse(&args.name)?;
            let (rt, store) = open(&args.store)?;
            let revoked = rt.block_on(store.revoke_token(&name))?;
            if !revoked {
                return Err(CliError::rejected(
                    TOKEN_NOT_FOUND_CODE,
                    format!("no live token named {}", render::name(name.as_str())),
                ));
            }
            Ok(Outcome {
                text: format!("revoked {}\n", render::name(name.as_str())),
                json: serde_json::json!({"name": name.as_str(), "revoked": true}),
            })
        }
    }
}
