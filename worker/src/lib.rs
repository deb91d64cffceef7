//! The trusted worker: Docker transport, container spec and pre-start verification, turn output
//! parsing, cleanup and sweeping, the usage ledger — and the `patch-candidate` command line.
#![forbid(unsafe_code)]
