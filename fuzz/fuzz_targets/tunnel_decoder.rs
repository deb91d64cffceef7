//! Fuzzes the tunnel's incremental frame decoder (whole and in pieces, re-encoded).
//! The body and its invariants: `patch_candidate_fuzz::tunnel_decoder`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| patch_candidate_fuzz::tunnel_decoder(data));
