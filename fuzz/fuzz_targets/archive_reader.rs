//! Fuzzes the strict archive reader with raw bytes (seed corpus: `fixtures/hostile-zips/`).
//! The body and its invariants: `patch_candidate_fuzz::archive_reader`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| patch_candidate_fuzz::archive_reader(data));
