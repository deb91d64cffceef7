//! One long-lived thread for every Python parse of the server.
//!
//! A syntax tree is millions of small allocations. The allocator keeps what a thread freed in
//! that thread's arena, so trees parsed one after another on the fresh thread of each tool call
//! would each leave their memory resident in another arena: four calls in turn held about twice
//! the work budget (glibc, measured in BENCHMARKS.md). On one thread every tree reuses the memory
//! the previous one freed, so the resident memory of parsing stays at the largest single parse,
//! which the work budget bounds. The thread has the tool threads' large stack (the parser, the
//! placement checks and the tree's drop recurse).

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock, PoisonError};

type Job = Box<dyn FnOnce() + Send>;

static JOBS: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();

fn start() -> Option<Mutex<mpsc::Sender<Job>>> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("mcp-python-parser".into())
        .stack_size(crate::budget::TOOL_STACK_BYTES)
        .spawn(move || {
            for job in rx {
                // A panicking job drops its answer channel (the caller sees no result); the
                // thread lives on for the next one.
                let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
            }
        })
        .ok()?;
    Some(Mutex::new(tx))
}

/// Runs `f` on the parser thread and waits for its result; `None` when the thread could not be
/// started or `f` panicked.
pub(crate) fn run<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let jobs = JOBS.get_or_init(start).as_ref()?;
    let (tx, rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    jobs.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .send(job)
        .ok()?;
    rx.recv().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_turn_on_one_thread_and_survive_a_panic() {
        let name = || std::thread::current().name().map(str::to_owned);
        assert_eq!(run(name).flatten().as_deref(), Some("mcp-python-parser"));
        let failed = run(|| -> u8 { panic!("a parser bug") });
        assert_eq!(failed, None);
        assert_eq!(run(|| 7), Some(7));
    }
}
