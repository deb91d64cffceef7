//! Fuzzes the gateway's SSE and JSON-answer usage scanner, per provider.
//! The body and its invariants: `patch_candidate_fuzz::gateway_sse`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| patch_candidate_fuzz::gateway_sse(data));
