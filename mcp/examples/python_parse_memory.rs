//! Measures what `rustpython-parser` allocates for one Python file: peak resident memory (VmHWM)
//! before and after parsing it, and the parse time. It runs one file per process so the peak
//! belongs to that file (see benches/mcp-deep-python/run.sh).
//!
//! Usage: python_parse_memory FILE
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::print_stdout
)]

use std::time::Instant;

use snapshot::testkit::peak_rss_kib;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: python_parse_memory FILE");
    let text = std::fs::read_to_string(&path).unwrap();
    let before = peak_rss_kib();
    let started = Instant::now();
    let parsed = rustpython_parser::parse(&text, rustpython_parser::Mode::Module, &path);
    let elapsed = started.elapsed();
    let after = peak_rss_kib();
    let ok = parsed.is_ok();
    drop(parsed);
    let grown = (after.saturating_sub(before)) * 1024;
    println!(
        "{{\"bytes\": {}, \"parsed\": {ok}, \"peak_growth_bytes\": {grown}, \"per_input_byte\": {:.1}, \"parse_ms\": {}}}",
        text.len(),
        grown as f64 / text.len().max(1) as f64,
        elapsed.as_millis()
    );
}
