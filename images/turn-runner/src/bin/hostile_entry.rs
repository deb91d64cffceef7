//! `hostile-entry MODE`: the test-only entrypoint of the hostile image. Reads the payload, then
//! breaks the output contract as MODE says (see `turn_runner::hostile_entry::MODES`).
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use turn_runner::hostile_entry::{HANG_SLICE, MODES, action};
use turn_runner::{MAX_REQUEST_BYTES, read_capped};

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let stdin = read_capped(std::io::stdin().lock(), MAX_REQUEST_BYTES).unwrap_or_default();
    let Some(act) = action(&mode, &stdin) else {
        let _ = writeln!(
            std::io::stderr(),
            "hostile-entry: unknown mode; one of {}",
            MODES.join(", ")
        );
        return ExitCode::from(2);
    };
    if act.stderr_bytes > 0 {
        let chunk = vec![b'e'; 1 << 16];
        let mut err = std::io::stderr().lock();
        let mut written = 0;
        while written < act.stderr_bytes {
            if err.write_all(&chunk).is_err() {
                break;
            }
            written += chunk.len();
        }
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&act.stdout).and_then(|()| out.flush());
    if act.hang {
        loop {
            std::thread::sleep(HANG_SLICE);
        }
    }
    ExitCode::from(u8::try_from(act.exit_code).unwrap_or(1))
}
