//! Fuzzes forge webhook verification and payload parsing. The body and its invariants:
//! `patch_candidate_fuzz::forge_webhook`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| patch_candidate_fuzz::forge_webhook(data));
