//! SIGINT and SIGTERM for the commands that own Docker resources (`run`, and `demo` through it).
//!
//! The first signal cancels the work: its future is dropped, so the turn's container guard hands
//! the container's removal off and the staged tree removes itself; the command waits for those
//! removals (at most `CANCEL_CLEANUP_TIMEOUT`), prints one line starting with
//! `PATCH_CANDIDATE_INTERRUPTED` on stderr and exits with 130 (SIGINT) or 143 (SIGTERM). Under
//! `--json` stdout gets the error document every failed command writes
//! (`{"error": {"code", "message"}}`); otherwise nothing. A second signal during that cleanup
//! exits at once with the same status; whatever is left then carries its deadline and owner labels for `patch-candidate janitor`.

use std::future::Future;
use std::io::Write as _;

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::CliError;

use super::outcome::{INTERRUPTED_CODE, RUNTIME_CODE};

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Received {
    Interrupt,
    Terminate,
}

impl Received {
    fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal number, as a shell reports a process ended by it.
    fn exit_status(self) -> i32 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM handlers, installed before the work that owns resources starts.
#[derive(Debug)]
pub(crate) struct Interruptible {
    interrupt: Signal,
    terminate: Signal,
}

fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

impl Interruptible {
    /// Installs the handlers (from now on the signals no longer end the process by default).
    pub(crate) fn install() -> Result<Self, CliError> {
        let failed = |_| CliError::environment(RUNTIME_CODE, "cannot install signal handlers");
        Ok(Self {
            interrupt: signal(SignalKind::interrupt()).map_err(failed)?,
            terminate: signal(SignalKind::terminate()).map_err(failed)?,
        })
    }

    /// Runs `work` to completion, or — on the first signal — cancels it, waits for its cleanup and
    /// ends the process (this function then never returns).
    pub(crate) async fn run<T>(
        mut self,
        work: impl Future<Output = Result<T, CliError>>,
    ) -> Result<T, CliError> {
        let mut work = Box::pin(work);
        let received = tokio::select! {
            biased;
            _ = self.interrupt.recv() => Received::Interrupt,
            _ = self.terminate.recv() => Received::Terminate,
            result = &mut work => return result,
        };
        // Cancel: every guard inside is dropped here and hands its removal off.
        drop(work);
        say(&format!(
            "{}: removing the turn container and staging tree (signal again to stop at once)",
            received.name()
        ));
        let Self {
            mut interrupt,
            mut terminate,
        } = self;
        tokio::spawn(async move {
            let again = tokio::select! {
                _ = interrupt.recv() => Received::Interrupt,
                _ = terminate.recv() => Received::Terminate,
            };
            super::outcome::report_early_exit(
                INTERRUPTED_CODE,
                &format!(
                    "{INTERRUPTED_CODE}: {} again: stopped before cleanup finished; `patch-candidate janitor` removes what is left",
                    again.name()
                ),
            );
            std::process::exit(received.exit_status());
        });
        let remaining = container::settle_pending_removals(container::CANCEL_CLEANUP_TIMEOUT).await;
        let message = if remaining == 0 {
            format!(
                "{INTERRUPTED_CODE}: interrupted by {}; turn container and staging tree removed",
                received.name()
            )
        } else {
            format!(
                "{INTERRUPTED_CODE}: interrupted by {}; {remaining} container removal(s) did not finish: `patch-candidate janitor` removes them",
                received.name()
            )
        };
        super::outcome::report_early_exit(INTERRUPTED_CODE, &message);
        std::process::exit(received.exit_status());
    }
}
