//! Fuzzes the writer/reader pair with structured entry sets whose paths are built from hostile
//! tokens. The body and its invariants: `patch_candidate_fuzz::archive_paths`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use patch_candidate_fuzz::Entry;

fuzz_target!(|input: Vec<Entry>| patch_candidate_fuzz::archive_paths(&input));
