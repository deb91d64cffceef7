//! The stable fuzz harness: runs a fuzz target's body (the same function the cargo-fuzz target
//! calls) over seed corpora plus deterministic mutations of every seed, with no nightly toolchain
//! and no libFuzzer. A panic (a crash or a failed invariant) in any input fails the run; the
//! offending input is written to `--artifacts DIR` for `cargo fuzz run <target> <file>`.
//!
//! ```text
//! corpus TARGET [--mutations N] [--random N] [--artifacts DIR] PATH...
//! TARGET: archive_reader, archive_paths, gate_wire, tunnel_decoder, gateway_http, gateway_sse
//! ```
//! Each PATH is a file or a directory (its files, sorted by name; not recursive).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A small deterministic generator (xorshift64*): the same inputs on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// A mutation of `seed`: a few bit flips, a truncation, an inserted byte or a duplicated tail.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = seed.to_vec();
    match rng.below(4) {
        0 => {
            for _ in 0..=rng.below(4) {
                let at = rng.below(out.len());
                if let Some(b) = out.get_mut(at) {
                    *b ^= 1 << rng.below(8);
                }
            }
        }
        1 => out.truncate(rng.below(out.len())),
        2 => {
            let at = rng.below(out.len() + 1);
            out.insert(at, (rng.next() & 0xff) as u8);
        }
        _ => {
            let from = rng.below(out.len());
            let tail = out.get(from..).map(<[u8]>::to_vec).unwrap_or_default();
            out.extend_from_slice(&tail);
        }
    }
    out
}

struct Args {
    target: fn(&[u8]),
    name: String,
    mutations: usize,
    random: usize,
    artifacts: Option<PathBuf>,
    paths: Vec<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let name = it.next().ok_or("usage: corpus TARGET [options] PATH...")?;
    let target: fn(&[u8]) = match name.as_str() {
        "archive_reader" => patch_candidate_fuzz::archive_reader,
        "archive_paths" => patch_candidate_fuzz::archive_paths_bytes,
        "gate_wire" => patch_candidate_fuzz::gate_wire,
        "tunnel_decoder" => patch_candidate_fuzz::tunnel_decoder,
        "gateway_http" => patch_candidate_fuzz::gateway_http,
        "gateway_sse" => patch_candidate_fuzz::gateway_sse,
        "forge_webhook" => patch_candidate_fuzz::forge_webhook,
        other => return Err(format!("unknown target {other}")),
    };
    let mut args = Args {
        target,
        name,
        mutations: 32,
        random: 0,
        artifacts: None,
        paths: Vec::new(),
    };
    while let Some(arg) = it.next() {
        let mut number = |flag: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{flag} needs a number"))
        };
        match arg.as_str() {
            "--mutations" => args.mutations = number("--mutations")?,
            "--random" => args.random = number("--random")?,
            "--artifacts" => {
                args.artifacts = Some(it.next().ok_or("--artifacts needs a directory")?.into());
            }
            _ => args.paths.push(arg.into()),
        }
    }
    Ok(args)
}

fn seeds(paths: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut inner: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect();
            inner.sort();
            files.extend(inner);
        } else {
            files.push(path.clone());
        }
    }
    files
        .iter()
        .map(|f| {
            std::fs::read(f)
                .map(|bytes| (f.display().to_string(), bytes))
                .map_err(|e| format!("{}: {e}", f.display()))
        })
        .collect()
}

fn save(dir: Option<&Path>, name: &str, index: usize, input: &[u8]) {
    let Some(dir) = dir else { return };
    let file = dir.join(format!("crash-{name}-{index}"));
    if std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&file, input))
        .is_ok()
    {
        eprintln!("corpus: input saved as {}", file.display());
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("corpus: {e}");
            return ExitCode::from(2);
        }
    };
    let seeds = match seeds(&args.paths) {
        Ok(seeds) => seeds,
        Err(e) => {
            eprintln!("corpus: {e}");
            return ExitCode::from(2);
        }
    };
    if seeds.is_empty() && args.random == 0 {
        eprintln!("corpus: no inputs for {}", args.name);
        return ExitCode::from(2);
    }
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (name, bytes) in &seeds {
        for k in 0..args.mutations {
            inputs.push((format!("{name} (mutation {k})"), mutate(bytes, &mut rng)));
        }
    }
    for k in 0..args.random {
        let len = rng.below(512);
        let bytes = (0..len).map(|_| (rng.next() & 0xff) as u8).collect();
        inputs.push((format!("random input {k}"), bytes));
    }
    let seed_count = seeds.len();
    let all = seeds.into_iter().chain(inputs);
    let (mut ran, mut failed) = (0usize, 0usize);
    for (index, (name, bytes)) in all.enumerate() {
        ran += 1;
        let target = args.target;
        if std::panic::catch_unwind(|| target(&bytes)).is_err() {
            failed += 1;
            eprintln!("corpus: {} FAILED on {name}", args.name);
            save(args.artifacts.as_deref(), &args.name, index, &bytes);
        }
    }
    eprintln!(
        "corpus: {}: {ran} inputs ({seed_count} seeds, {} mutations each, {} random), {failed} failed",
        args.name, args.mutations, args.random
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
