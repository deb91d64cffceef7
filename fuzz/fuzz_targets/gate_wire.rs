//! Fuzzes the gate wire contract (reports, requests, frames) and the runner's JUnit reader. The
//! body and its invariants: `patch_candidate_fuzz::gate_wire`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| patch_candidate_fuzz::gate_wire(data));
