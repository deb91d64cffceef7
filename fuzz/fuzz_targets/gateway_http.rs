//! Fuzzes the gateway's HTTP/1.1 head parser and request body check, per provider.
//! The body and its invariants: `patch_candidate_fuzz::gateway_http`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| patch_candidate_fuzz::gateway_http(data));
