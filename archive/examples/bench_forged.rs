//! Benchmark driver (see `benches/archive/run.sh`): how fast forged central-directory
//! declarations are refused. Loads the file once, then times `iterations` calls of the public
//! reader (default budgets) and of the raw preflight with the byte budget lifted, so the walk
//! itself is measured rather than the input-size check. Prints one JSON line.
//! Usage: `bench_forged FILE [ITERATIONS]`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use archive::{ArchiveLimits, preflight_archive_directory, read_archive_manifest};

fn median_ns(mut samples: Vec<u128>) -> u128 {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: bench_forged FILE [ITERATIONS]");
        return ExitCode::FAILURE;
    };
    let iterations: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(10_000);
    let Ok(data) = std::fs::read(&path) else {
        eprintln!("cannot read {path}");
        return ExitCode::FAILURE;
    };
    let limits = ArchiveLimits::default();
    let mut reader = Vec::with_capacity(iterations);
    let mut reader_code = "";
    let mut walk = Vec::with_capacity(iterations);
    let mut walk_code = "";
    for _ in 0..iterations {
        let t = Instant::now();
        let r = read_archive_manifest(black_box(&data), &limits);
        reader.push(t.elapsed().as_nanos());
        reader_code = r.err().map_or("ACCEPTED", |e| e.code());
        let t = Instant::now();
        let r = preflight_archive_directory(black_box(&data), None, usize::MAX, Some(50));
        walk.push(t.elapsed().as_nanos());
        walk_code = r.err().map_or("ACCEPTED", |e| e.code());
    }
    println!(
        "{{\"file_bytes\": {}, \"iterations\": {iterations}, \"reader_median_ns\": {}, \"reader_code\": \"{reader_code}\", \"preflight_median_ns\": {}, \"preflight_code\": \"{walk_code}\"}}",
        data.len(),
        median_ns(reader),
        median_ns(walk)
    );
    ExitCode::SUCCESS
}
