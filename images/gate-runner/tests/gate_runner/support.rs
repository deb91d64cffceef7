//! Builders for requests and tree streams, and running the runner binary as a child.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use gate_runner::{
    Argv, CaseOutcome, Env, GateReport, GateRequest, JunitReport, JunitSpec, Nonce, RelPath,
    RunLimits, TreeTotals,
};

/// The runner binary under test.
pub const RUNNER: &str = env!("CARGO_BIN_EXE_gate-runner");

/// A request under construction.
#[derive(Debug, Clone)]
pub struct Req {
    nonce: Nonce,
    argv: Vec<String>,
    cwd: String,
    env: Vec<(String, String)>,
    wall_ms: u64,
    grace_ms: u64,
    tail: u64,
    junit: Option<String>,
    totals: Option<(u64, u64)>,
}

impl Req {
    pub fn argv(argv: &[&str]) -> Self {
        Self {
            nonce: Nonce::from_bytes(rand_bytes()),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: ".".to_owned(),
            env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            wall_ms: 30_000,
            grace_ms: 1000,
            tail: 65_536,
            junit: None,
            totals: None,
        }
    }
    pub fn sh(script: &str) -> Self {
        Self::argv(&["sh", "-c", script])
    }
    pub fn cwd(mut self, cwd: &str) -> Self {
        cwd.clone_into(&mut self.cwd);
        self
    }
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        self.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self
    }
    pub fn wall(mut self, ms: u64) -> Self {
        self.wall_ms = ms;
        self
    }
    pub fn grace(mut self, ms: u64) -> Self {
        self.grace_ms = ms;
        self
    }
    pub fn tail(mut self, bytes: u64) -> Self {
        self.tail = bytes;
        self
    }
    pub fn junit(mut self, path: &str) -> Self {
        self.junit = Some(path.to_owned());
        self
    }
    pub fn totals(mut self, entries: u64, bytes: u64) -> Self {
        self.totals = Some((entries, bytes));
        self
    }
    pub fn nonce(&self) -> &Nonce {
        &self.nonce
    }

    /// The request for `tree` (its real totals unless overridden).
    pub fn build(&self, tree: &Tree) -> GateRequest {
        let (entries, bytes) = self.totals.unwrap_or((tree.entries, tree.bytes));
        GateRequest::new(
            self.nonce.clone(),
            Argv::try_from(self.argv.clone()).unwrap(),
            self.cwd.parse::<RelPath>().unwrap(),
            Env::try_from(self.env.clone()).unwrap(),
            RunLimits::new(self.wall_ms, self.grace_ms, self.tail).unwrap(),
            self.junit
                .as_ref()
                .map(|p| JunitSpec::new(p.parse().unwrap(), 1 << 20, 1000, 32).unwrap()),
            TreeTotals::new(entries, bytes).unwrap(),
        )
        .unwrap()
    }

    /// The whole stdin: the request frame, then the tree stream.
    pub fn stdin(&self, tree: &Tree) -> Vec<u8> {
        let mut input = Vec::new();
        self.build(tree).write_frame(&mut input).unwrap();
        input.extend_from_slice(&tree.bytes_);
        input
    }
}

fn rand_bytes() -> [u8; 32] {
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 32];
    for chunk in out.chunks_mut(8) {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(1);
        chunk.copy_from_slice(&h.finish().to_le_bytes());
    }
    out
}

/// A tree stream and its totals.
#[derive(Debug, Clone)]
pub struct Tree {
    pub bytes_: Vec<u8>,
    pub entries: u64,
    pub bytes: u64,
}

/// A tree of directories (`"dir/"`, `None`) and files (`Some(data)`), in order.
pub fn tree(entries: &[(&str, Option<&[u8]>)]) -> Tree {
    let mut b = tar::Builder::new(Vec::new());
    let mut total = 0;
    for (name, data) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        match data {
            None => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                h.set_cksum();
                b.append(&h, &[][..]).unwrap();
            }
            Some(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(d.len() as u64);
                h.set_cksum();
                b.append(&h, *d).unwrap();
                total += d.len() as u64;
            }
        }
    }
    Tree {
        bytes_: b.into_inner().unwrap(),
        entries: entries.len() as u64,
        bytes: total,
    }
}

/// A one-entry tree holding a symlink.
pub fn tree_with_symlink() -> Tree {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_path("l").unwrap();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_link_name("/etc/passwd").unwrap();
    h.set_mode(0o777);
    h.set_size(0);
    h.set_cksum();
    b.append(&h, &[][..]).unwrap();
    Tree {
        bytes_: b.into_inner().unwrap(),
        entries: 1,
        bytes: 0,
    }
}

/// Runs the runner with `stdin` and `args`, collecting its output.
pub fn run_raw(stdin: &[u8], args: &[&str]) -> Output {
    let mut child = Command::new(RUNNER)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

/// Runs `req` on `tree` in a fresh root; the report must be the one valid frame on stdout.
/// The (id, outcome) of every case of a report's complete JUnit result (not truncated).
pub fn junit_outcomes(report: &GateReport) -> Vec<(&str, CaseOutcome)> {
    let Some(JunitReport::Ok { cases, truncated }) = report.junit() else {
        panic!("no junit: {:?}", report.junit());
    };
    assert!(!truncated);
    cases.iter().map(|c| (c.id.as_str(), c.outcome)).collect()
}

pub fn run_host(req: &Req, tree: &Tree) -> (GateReport, Output) {
    let root = tempfile::tempdir().unwrap();
    let out = run_raw(&req.stdin(tree), &["--root", root.path().to_str().unwrap()]);
    let report = GateReport::read_stream(&out.stdout[..]).unwrap_or_else(|e| {
        panic!(
            "no valid report ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(report.nonce(), req.nonce());
    (report, out)
}
