//! Test support: a Git repository builder, candidates, definitions and a simulated runner behind
//! the container crate's fake runtime.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use container::OutputChunk;
use container::testkit::{FakeRuntime, LiveOutput};
use finalizer::{CandidateFields, RepositoryPatchCandidate, RepositoryPatchFile};
use gate_runner::{
    CaseId, CaseOutcome, ExitStatus, GateReport, GateRequest, JunitCase, JunitReport, LogTail,
    RunStatus, StableCode,
};
use snapshot::{FileOp, RepoPath};
use tokio::io::AsyncReadExt as _;
use vocab::Sha256;

use crate::definition::GateDefinitions;

/// `git ARGS` in `dir`, isolated from the host (see [`snapshot::testkit::git_command`]), which
/// must succeed; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    snapshot::testkit::git_text(dir, args).trim().to_owned()
}

/// A repository with one commit holding `files` (path, content, executable); returns the commit.
pub fn repo(dir: &Path, files: &[(&str, &str, bool)]) -> String {
    let files = files.iter().map(|(p, c, x)| (*p, c.as_bytes(), *x));
    snapshot::testkit::init_repo(dir, files, "base")
}

pub enum Change<'a> {
    Create(&'a str, &'a str),
    Update(&'a str, &'a str, &'a str),
    Delete(&'a str, &'a str),
}

pub fn candidate(commit: &str, changes: &[Change<'_>]) -> RepositoryPatchCandidate {
    let files = changes
        .iter()
        .map(|c| {
            let (path, op, prev, new) = match c {
                Change::Create(p, n) => (*p, FileOp::Create, None, Some(*n)),
                Change::Update(p, o, n) => (*p, FileOp::Update, Some(*o), Some(*n)),
                Change::Delete(p, o) => (*p, FileOp::Delete, Some(*o), None),
            };
            RepositoryPatchFile::new(
                path.parse::<RepoPath>().unwrap(),
                op,
                prev.map(|o| Sha256::of(o.as_bytes())),
                new.map(|n| Sha256::of(n.as_bytes())),
                new.map(str::to_owned),
                String::new(),
            )
            .unwrap()
        })
        .collect();
    RepositoryPatchCandidate::new(
        CandidateFields {
            baseline_commit_sha: commit.to_owned(),
            summary: "test".to_owned(),
            required_validation_gates: vec!["unit".to_owned()],
            ..CandidateFields::default()
        },
        files,
    )
    .unwrap()
}

pub fn definitions(extra: &str) -> GateDefinitions {
    let text = format!(
        r#"version = 1
[gates.unit]
image = "{}"
argv = ["run-tests"]
cwd = "."
wall_seconds = 30
kill_grace_ms = 100
memory_mib = 256
pids = 64
cpu_millis = 1000
workspace_mib = 16
tmp_mib = 16
log_tail_bytes = 1024
pinned = ["tests/conftest.py"]
{extra}
[gates.unit.junit]
path = ".gate-junit.xml"
max_bytes = 65536
max_cases = 100
max_depth = 8
"#,
        container::testkit::image_id()
    );
    GateDefinitions::parse(text.as_bytes()).unwrap()
}

/// What the simulated runner received.
#[derive(Debug, Clone, Default)]
pub struct Received {
    pub request: Option<GateRequest>,
    pub files: TarFiles,
    pub dirs: Vec<String>,
}

pub type TarFiles = BTreeMap<String, (u32, Vec<u8>)>;

/// Reads a contract tar stream fully (test-side reader, independent of the writer).
pub fn read_tar(mut data: &[u8]) -> (TarFiles, Vec<String>) {
    let mut files = BTreeMap::new();
    let mut dirs = Vec::new();
    let mut long: Option<String> = None;
    loop {
        let (h, rest) = data.split_at(512);
        data = rest;
        if h.iter().all(|b| *b == 0) {
            assert!(data.len() >= 512 && data[..512].iter().all(|b| *b == 0));
            return (files, dirs);
        }
        let field = |a: usize, b: usize| {
            let f = &h[a..b];
            let end = f.iter().position(|x| *x == 0).unwrap_or(f.len());
            std::str::from_utf8(&f[..end]).unwrap().to_owned()
        };
        assert_eq!(&h[257..265], b"ustar\x0000");
        let sum: u32 = h
            .iter()
            .enumerate()
            .map(|(i, b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(*b)
                }
            })
            .sum();
        assert_eq!(u32::from_str_radix(field(148, 155).trim(), 8).unwrap(), sum);
        let size = usize::from_str_radix(&field(124, 135), 8).unwrap();
        let mode = u32::from_str_radix(&field(100, 107), 8).unwrap();
        let padded = size.div_ceil(512) * 512;
        let (body, rest) = data.split_at(padded);
        data = rest;
        let name = long.take().unwrap_or_else(|| field(0, 100));
        match h[156] {
            b'x' => {
                let rec = std::str::from_utf8(&body[..size]).unwrap();
                let (len, kv) = rec.split_once(' ').unwrap();
                assert_eq!(len.parse::<usize>().unwrap(), rec.len());
                long = Some(
                    kv.strip_prefix("path=")
                        .unwrap()
                        .strip_suffix('\n')
                        .unwrap()
                        .to_owned(),
                );
            }
            b'5' => dirs.push(name.strip_suffix('/').unwrap().to_owned()),
            b'0' => {
                files.insert(name, (mode, body[..size].to_vec()));
            }
            t => panic!("type {t}"),
        }
    }
}

/// How the simulated runner answers.
pub type Behaviour = Arc<dyn Fn(&GateRequest, &Received) -> Vec<u8> + Send + Sync>;

/// An honest report: one case per `(id, outcome)`, exit 1 when any fails.
pub fn honest(req: &GateRequest, cases: &[(&str, CaseOutcome)]) -> Vec<u8> {
    let failing = cases
        .iter()
        .any(|(_, o)| matches!(o, CaseOutcome::Failed | CaseOutcome::Error));
    report(
        req,
        RunStatus::Completed,
        None,
        Some(ExitStatus::Code(i32::from(failing))),
        cases,
    )
}

pub fn report(
    req: &GateRequest,
    status: RunStatus,
    runner_error: Option<&str>,
    exit: Option<ExitStatus>,
    cases: &[(&str, CaseOutcome)],
) -> Vec<u8> {
    let r = GateReport::new(
        req.nonce().clone(),
        status,
        runner_error.map(|c| c.parse::<StableCode>().unwrap()),
        exit,
        7,
        LogTail::new(12, b"log \x1b[31mred".to_vec()).unwrap(),
        Some(JunitReport::Ok {
            cases: cases
                .iter()
                .map(|(id, o)| JunitCase {
                    id: CaseId::try_from((*id).to_owned()).unwrap(),
                    outcome: *o,
                })
                .collect(),
            truncated: false,
        }),
    )
    .unwrap();
    let mut out = Vec::new();
    r.write_frame(&mut out).unwrap();
    out
}

/// A fake runtime whose container is a simulated runner: it reads the request and the whole
/// tar, records them in `seen`, then writes what `behaviour` returns on stdout.
pub fn simulated(behaviour: Behaviour, seen: Arc<std::sync::Mutex<Vec<Received>>>) -> FakeRuntime {
    FakeRuntime::live(Arc::new(
        move |mut stdin: tokio::io::DuplexStream, out: LiveOutput| {
            let behaviour = Arc::clone(&behaviour);
            let seen = Arc::clone(&seen);
            Box::pin(async move {
                let mut all = Vec::new();
                stdin.read_to_end(&mut all).await.unwrap();
                let len = u32::from_be_bytes(all[..4].try_into().unwrap()) as usize;
                let request = GateRequest::from_json(&all[4..4 + len]).unwrap();
                let (files, dirs) = read_tar(&all[4 + len..]);
                let received = Received {
                    request: Some(request.clone()),
                    files,
                    dirs,
                };
                let stdout = behaviour(&request, &received);
                seen.lock().unwrap().push(received);
                let _ = out.send(Ok(OutputChunk::Stderr(b"runner diagnostics".to_vec())));
                let _ = out.send(Ok(OutputChunk::Stdout(stdout)));
            })
        },
    ))
}
