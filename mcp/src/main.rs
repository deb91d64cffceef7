//! `patch-candidate-mcp --workspace-root DIR [--candidate-store DIR]`: serves MCP over stdio.
//! stdout carries protocol frames only; logs go to stderr.
#![forbid(unsafe_code)]
#![deny(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use mcp::{McpServer, ServerOptions};
use rmcp::ServiceExt as _;

/// Read-only MCP server (mozaiks.mcp.v1) over one workspace, stdio transport only.
#[derive(Debug, Parser)]
#[command(name = "patch-candidate-mcp", version)]
struct Args {
    /// The workspace root (must exist and be a directory); bound once for the whole session.
    #[arg(long, value_name = "DIR")]
    workspace_root: PathBuf,
    /// An existing candidate store directory to expose read-only.
    #[arg(long, value_name = "DIR")]
    candidate_store: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .init();
    let options = ServerOptions {
        workspace_root: args.workspace_root,
        candidate_store: args.candidate_store,
    };
    let server = match McpServer::bind(&options) {
        Ok(server) => server,
        Err(e) => {
            tracing::error!(code = e.code(), "{e}");
            return ExitCode::from(3);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("runtime: {e}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(serve(server)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::from(1)
        }
    }
}

async fn serve(server: McpServer) -> anyhow::Result<()> {
    let transport = mcp::BoundedTransport::new(tokio::io::stdin(), tokio::io::stdout());
    let running = match server.serve(transport).await {
        Ok(running) => running,
        // stdin closed before initialisation: nothing to serve, a clean exit.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    running.waiting().await?;
    Ok(())
}
