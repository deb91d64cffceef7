//! `patch-candidate tokens create NAME [--role R]… | list | roles NAME [--role R]… | revoke
//! NAME`: the service's named API tokens, each a principal with roles (`submit`, `review`,
//! `publish`, `admin`) that every API route and UI action checks. The store keeps the token's
//! SHA-256 only; the token is printed once, at creation. The first-start token
//! (`<state dir>/api-token`) stays the principal `operator`, with every role. This command opens
//! the job store itself, so its acts (create, roles, revoke; each audited in the store) are the
//! operator's.

use clap::{Args, Subcommand};
use jobs::{Role, Roles, TokenName};

use super::jobs_cmd::{StoreArgs, open};
use super::outcome::TOKEN_NOT_FOUND_CODE;
use super::{CliError, Outcome, render};

/// `tokens` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum TokensCommand {
    /// Create a named token with its roles and print it once (stdout; it is not stored in clear
    /// anywhere). Without `--role` the token may only read (jobs, candidates, reviews).
    Create(RolesArgs),
    /// List the named tokens (names, roles and times; never a token or its hash).
    List(ListArgs),
    /// Set a live token's roles (all of them: the roles not named are taken away; no `--role`
    /// leaves it read-only). Audited with the new and the previous roles.
    Roles(RolesArgs),
    /// Revoke a named token: requests with it are refused (401) from now on; the name is
    /// never reused.
    Revoke(NameArgs),
}

/// Parses one role (`submit`, `review`, `publish`, `admin`), exactly.
pub(crate) fn parse_role(text: &str) -> Result<Role, String> {
    Role::parse(text).map_err(|_| "expected submit, review, publish or admin".to_owned())
}

/// A token name argument.
#[derive(Debug, Clone, Args)]
pub(crate) struct NameArgs {
    /// The token's principal name (1-64 of `A-Z a-z 0-9 . _ @ -`; not `operator`).
    pub name: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// A token name and its roles.
#[derive(Debug, Clone, Args)]
pub(crate) struct RolesArgs {
    /// The token's principal name (1-64 of `A-Z a-z 0-9 . _ @ -`; not `operator`).
    pub name: String,
    /// A role of the token, repeatable: `submit` (submit, cancel and re-queue jobs), `review`
    /// (accept, reject, retry a candidate), `publish` (publish an accepted candidate), `admin`
    /// (forced accepts, the audit trail). A role named twice is refused.
    #[arg(long = "role", value_name = "ROLE", value_parser = parse_role)]
    pub roles: Vec<Role>,
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
    let by = jobs::OPERATOR_PRINCIPAL;
    match command {
        TokensCommand::Create(args) => {
            let name = TokenName::parse(&args.name)?;
            let roles = Roles::from_list(&args.roles)?;
            let (rt, store) = open(&args.store)?;
            let (token, hash) = service::mint_token()?;
            rt.block_on(store.create_token(&name, &hash, roles, by))?;
            Ok(Outcome {
                text: format!("{token}\n"),
                json: serde_json::json!({"name": name.as_str(), "token": token, "roles": roles}),
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
                let migrated = if t.roles_migrated {
                    " (migrated: every role; set them with `tokens roles`)"
                } else {
                    ""
                };
                text.push_str(&format!(
                    "{}  roles {}{migrated}  created at {}  {state}\n",
                    render::name(&t.name),
                    t.roles,
                    t.created_at_ms
                ));
            }
            Ok(Outcome {
                text,
                json: serde_json::json!({"tokens": tokens}),
            })
        }
        TokensCommand::Roles(args) => {
            let name = TokenName::parse(&args.name)?;
            let roles = Roles::from_list(&args.roles)?;
            let (rt, store) = open(&args.store)?;
            let Some(before) = rt.block_on(store.set_token_roles(&name, roles, by))? else {
                return Err(CliError::rejected(
                    TOKEN_NOT_FOUND_CODE,
                    format!("no live token named {}", render::name(name.as_str())),
                ));
            };
            Ok(Outcome {
                text: format!(
                    "{}: roles {roles} (were {before})\n",
                    render::name(name.as_str())
                ),
                json: serde_json::json!({"name": name.as_str(), "roles": roles, "before": before}),
            })
        }
        TokensCommand::Revoke(args) => {
            let name = TokenName::parse(&args.name)?;
            let (rt, store) = open(&args.store)?;
            let revoked = rt.block_on(store.revoke_token(&name, by))?;
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
