//! Who owns a turn container, recorded in its labels so that a sweeper on any host, in any PID
//! namespace, can tell an abandoned turn from a live one without guessing:
//!
//! | label | value |
//! |---|---|
//! | `mozaiks.refinement.repository_turn.host` | this host's id: 32 hex, a keyed hash of `/etc/machine-id`, else an id generated once in the state directory |
//! | `mozaiks.refinement.repository_turn.pid_namespace` | the inode of the owner's PID namespace (`/proc/self/ns/pid`) |
//! | `mozaiks.refinement.repository_turn.owner` | `<pid>:<process start ticks>` of the owner, as seen in that namespace |
//! | `mozaiks.refinement.repository_turn.instance` | 32 hex, random per owning process |
//! | `mozaiks.refinement.repository_turn.attempt` | 32 hex, random per turn |
//! | `mozaiks.refinement.repository_turn.deadline` | the turn's absolute deadline, Unix seconds |
//!
//! A service turn (`serve`) also carries [`JobBinding`]'s labels: `service_host` (the claiming
//! service host), `job_store` (the job store's [`vocab::StoreId`]), `job` and `job_attempt` (the
//! store's attempt id, its fencing token).
//!
//! A value this process cannot establish (no procfs of its own PID namespace) is written as
//! `unknown`, which can never prove an owner gone.

use std::io::Read as _;
use std::path::Path;
use std::sync::OnceLock;

use vocab::{AttemptId, HostId, InstanceId, RANDOM_ID_BYTES, StoreId};

use crate::ids::is_lower_hex;

/// Label: the owner's host id.
pub const HOST_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.host";
/// Label: the inode of the owner's PID namespace.
pub const PID_NAMESPACE_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.pid_namespace";
/// Label: the owning process, `<pid>:<process start ticks>`.
pub const OWNER_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.owner";
/// Label: the owning process instance (random per process).
pub const INSTANCE_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.instance";
/// Label: the attempt id of the turn (random per turn).
pub const ATTEMPT_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.attempt";
/// Label: the turn's absolute deadline in Unix seconds.
pub const DEADLINE_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.deadline";
/// Label (service turns only): the job the turn runs.
pub const JOB_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.job";
/// Label (service turns only): the job store's attempt id (its fencing token).
pub const JOB_ATTEMPT_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.job_attempt";
/// Label (service turns only): the id of the service host that claimed the job.
pub const SERVICE_HOST_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.service_host";
/// Label (service turns only): the id of the job store the attempt belongs to
/// ([`vocab::StoreId`]); a service's janitor judges only the turns of its own store.
pub const JOB_STORE_LABEL_KEY: &str = "mozaiks.refinement.repository_turn.job_store";

/// The label value of a fact this process could not establish.
const UNKNOWN: &str = "unknown";
/// Domain separation of the host id hash (the machine id itself is never published).
const HOST_ID_DOMAIN: &str = "patch-candidate.host-id.v1:";
/// Largest accepted `/etc/machine-id` or host-id file.
const MAX_ID_FILE_BYTES: u64 = 128;

/// 16 random bytes (a version-4 UUID's) for a fresh 32-hex id.
fn random_bytes() -> [u8; RANDOM_ID_BYTES] {
    *uuid::Uuid::new_v4().as_bytes()
}

/// A fresh random id of one turn attempt (its `attempt` label).
#[must_use]
pub fn generate_attempt_id() -> AttemptId {
    AttemptId::from_random(random_bytes())
}

/// A turn owner's host id: exactly 32 lowercase hex (the `host` label is never anything else).
fn owner_host_id(s: &str) -> Option<HostId> {
    if !is_lower_hex(s, 32) {
        return None;
    }
    HostId::parse(s).ok()
}

/// A process as seen in one PID namespace: its PID and its start time in clock ticks since boot,
/// so that a recycled PID is never mistaken for the owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    pid: u32,
    start_ticks: u64,
}

impl ProcessIdentity {
    /// Parses `<pid>:<start ticks>`, both non-zero decimals.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        let (pid, ticks) = s.split_once(':')?;
        let pid = parse_decimal(pid).and_then(|p| u32::try_from(p).ok())?;
        let start_ticks = parse_decimal(ticks)?;
        (pid != 0 && start_ticks != 0).then_some(Self { pid, start_ticks })
    }

    /// The PID.
    #[must_use]
    pub fn pid(self) -> u32 {
        self.pid
    }

    fn label(self) -> String {
        format!("{}:{}", self.pid, self.start_ticks)
    }
}

/// The inode number of a PID namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidNamespace(u64);

impl PidNamespace {
    /// Parses a decimal, non-zero inode number.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        parse_decimal(s).filter(|n| *n != 0).map(Self)
    }
}

/// Plain ASCII decimal without sign or leading zeros (reject, never repair).
fn parse_decimal(s: &str) -> Option<u64> {
    let plain = !s.is_empty()
        && s.len() <= 20
        && s.bytes().all(|b| b.is_ascii_digit())
        && !(s.len() > 1 && s.starts_with('0'));
    if plain { s.parse().ok() } else { None }
}

/// This process as the owner of the turns it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOwner {
    host: HostId,
    instance: InstanceId,
    pid_namespace: Option<PidNamespace>,
    process: Option<ProcessIdentity>,
}

impl LocalOwner {
    /// Reads this process's identity (see the module documentation).
    fn detect() -> Self {
        let own_procfs = procfs_is_own();
        Self {
            host: host_id(),
            instance: InstanceId::from_random(random_bytes()),
            pid_namespace: own_procfs.then(own_pid_namespace).flatten(),
            process: own_procfs
                .then(|| {
                    let pid = std::process::id();
                    process_start_ticks(pid)
                        .ok()
                        .flatten()
                        .map(|start_ticks| ProcessIdentity { pid, start_ticks })
                        .filter(|p| p.start_ticks != 0)
                })
                .flatten(),
        }
    }

    /// A synthetic owner for the unit tests.
    #[cfg(test)]
    pub(crate) fn synthetic(
        host: &str,
        pid_namespace: Option<u64>,
        process: Option<(u32, u64)>,
    ) -> Self {
        Self {
            host: owner_host_id(host).expect("a 32-hex test host"),
            instance: InstanceId::from_random(random_bytes()),
            pid_namespace: pid_namespace.map(PidNamespace),
            process: process.map(|(pid, start_ticks)| ProcessIdentity { pid, start_ticks }),
        }
    }

    /// This host's id.
    #[must_use]
    pub fn host(&self) -> &HostId {
        &self.host
    }

    /// This process's PID namespace, when its procfs is its own.
    #[must_use]
    pub fn pid_namespace(&self) -> Option<PidNamespace> {
        self.pid_namespace
    }

    /// The labels of one turn owned by this process.
    #[must_use]
    pub fn turn_labels(&self, attempt: &AttemptId, deadline_unix: i64) -> TurnLabels {
        TurnLabels {
            pairs: vec![
                (HOST_LABEL_KEY, self.host.as_str().to_owned()),
                (
                    PID_NAMESPACE_LABEL_KEY,
                    self.pid_namespace
                        .map_or_else(|| UNKNOWN.to_owned(), |n| n.0.to_string()),
                ),
                (
                    OWNER_LABEL_KEY,
                    self.process
                        .map_or_else(|| UNKNOWN.to_owned(), ProcessIdentity::label),
                ),
                (INSTANCE_LABEL_KEY, self.instance.as_str().to_owned()),
                (ATTEMPT_LABEL_KEY, attempt.as_str().to_owned()),
                (DEADLINE_LABEL_KEY, deadline_unix.to_string()),
            ],
        }
    }
}

/// What ties a service turn to its job: the job store, the service host, the job and the store's
/// attempt id (its fencing token). Each value is a plain label-safe identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobBinding {
    store: StoreId,
    host: String,
    job: String,
    attempt: String,
}

/// `[A-Za-z0-9._-]{1,64}`, not starting with `.`: what a job-store id looks like (never a path,
/// never free text).
fn label_safe(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

impl JobBinding {
    /// Binds a turn to `job` / `attempt` of the job store `store`, claimed by `host`.
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_CONTEXT_MISMATCH` when a value is not `[A-Za-z0-9._-]{1,64}`.
    pub fn new(
        store: &StoreId,
        host: &str,
        job: &str,
        attempt: &str,
    ) -> Result<Self, crate::error::ContainerError> {
        if ![host, job, attempt].iter().all(|v| label_safe(v)) {
            return Err(crate::error::ContainerError::ContextMismatch {
                field: "job binding",
            });
        }
        Ok(Self {
            store: store.clone(),
            host: host.to_owned(),
            job: job.to_owned(),
            attempt: attempt.to_owned(),
        })
    }

    /// The job store.
    #[must_use]
    pub fn store(&self) -> &StoreId {
        &self.store
    }

    /// The job id.
    #[must_use]
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The store's attempt id.
    #[must_use]
    pub fn attempt(&self) -> &str {
        &self.attempt
    }
}

impl TurnLabels {
    /// Adds the job labels of a service turn.
    #[must_use]
    pub fn with_job(mut self, binding: Option<&JobBinding>) -> Self {
        if let Some(b) = binding {
            self.pairs.extend([
                (SERVICE_HOST_LABEL_KEY, b.host.clone()),
                (JOB_STORE_LABEL_KEY, b.store.as_str().to_owned()),
                (JOB_LABEL_KEY, b.job.clone()),
                (JOB_ATTEMPT_LABEL_KEY, b.attempt.clone()),
            ]);
        }
        self
    }
}

/// The owner labels of one turn container (besides the static turn label).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnLabels {
    pairs: Vec<(&'static str, String)>,
}

impl TurnLabels {
    /// `(key, value)` pairs.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.pairs.iter().map(|(k, v)| (*k, v.as_str()))
    }
}

/// This process as an owner, detected once.
#[must_use]
pub fn local_owner() -> &'static LocalOwner {
    static OWNER: OnceLock<LocalOwner> = OnceLock::new();
    OWNER.get_or_init(LocalOwner::detect)
}

/// Whether an owner process still exists, as far as this process can prove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// The process exists (same PID, same start time).
    Alive,
    /// Provably gone: no such PID in this namespace, or the PID belongs to a later process.
    Gone,
    /// Cannot tell (procfs unreadable, not this namespace's, hiding PIDs, malformed).
    Unknown,
}

/// The process table the sweeper consults (procfs, or a fake in the tests).
pub trait ProcessTable {
    /// Whether `owner` (a process of this PID namespace) still exists.
    fn liveness(&self, owner: ProcessIdentity) -> Liveness;
}

/// The process table of this PID namespace, read from `/proc`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcFs;

impl ProcessTable for ProcFs {
    fn liveness(&self, owner: ProcessIdentity) -> Liveness {
        if !procfs_is_own() {
            return Liveness::Unknown;
        }
        match process_start_ticks(owner.pid) {
            Ok(Some(ticks)) if ticks == owner.start_ticks => Liveness::Alive,
            Ok(Some(_)) => Liveness::Gone,
            Ok(None) => Liveness::Unknown,
            Err(ProcRead::Missing) if !procfs_hides_pids() => Liveness::Gone,
            Err(_) => Liveness::Unknown,
        }
    }
}

/// Why a procfs read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProcRead {
    /// `ENOENT`: no such process (unless procfs hides other users' PIDs).
    Missing,
    /// Anything else: permission, I/O, no procfs.
    Unreadable,
}

/// `/proc/<pid>/stat` field 22 (start time in clock ticks since boot). `Ok(None)` when the file
/// is readable but malformed.
fn process_start_ticks(pid: u32) -> Result<Option<u64>, ProcRead> {
    // Linux procfs: an ambient read on a path built from a number.
    let mut text = String::new();
    std::fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ProcRead::Missing
            } else {
                ProcRead::Unreadable
            }
        })?;
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    Ok(text
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .and_then(parse_decimal))
}

/// True when `/proc` is the procfs of this process's own PID namespace: `/proc/self` names our
/// own PID. (In a new PID namespace without a fresh procfs mount, `/proc` shows another
/// namespace's PIDs and proves nothing about ours.)
fn procfs_is_own() -> bool {
    std::fs::read_link("/proc/self").is_ok_and(|target| {
        target
            .to_str()
            .and_then(parse_decimal)
            .is_some_and(|pid| pid == u64::from(std::process::id()))
    })
}

/// The inode of this process's PID namespace (`pid:[N]`).
fn own_pid_namespace() -> Option<PidNamespace> {
    let target = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let text = target.to_str()?;
    PidNamespace::parse(text.strip_prefix("pid:[")?.strip_suffix(']')?)
}

/// True unless `/proc` is known to show every PID: a `hidepid` mount makes other users'
/// processes look missing, which must not read as "gone".
fn procfs_hides_pids() -> bool {
    let mut text = String::new();
    let read = std::fs::File::open("/proc/self/mountinfo")
        .and_then(|f| f.take(1 << 20).read_to_string(&mut text));
    if read.is_err() {
        return true;
    }
    let mut found = false;
    for line in text.lines() {
        let Some((mount, fs)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = mount.split(' ').nth(4);
        let mut fs_fields = fs.split(' ');
        let fs_type = fs_fields.next();
        let super_options = fs_fields.nth(1).unwrap_or_default();
        if mount_point != Some("/proc") || fs_type != Some("proc") {
            continue;
        }
        found = true;
        let hides = super_options.split(',').any(|o| {
            o.strip_prefix("hidepid=")
                .is_some_and(|v| v != "0" && v != "off")
        });
        if hides {
            return true;
        }
    }
    !found
}

/// Reads a small id file: its first line must be 32 lowercase hex.
fn read_id_file(path: &Path) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_ID_FILE_BYTES).read_to_string(&mut text))
        .ok()?;
    let id = text.strip_suffix('\n').unwrap_or(&text);
    is_lower_hex(id, 32).then(|| id.to_owned())
}

/// The host id: a keyed hash of `/etc/machine-id`; without one, an id generated once in the state
/// directory; without that, a random id (then only the deadline rule can remove this process's
/// abandoned turns).
fn host_id() -> HostId {
    if let Some(machine) = read_id_file(Path::new("/etc/machine-id")) {
        let digest = vocab::sha256_bare_hex(format!("{HOST_ID_DOMAIN}{machine}").as_bytes());
        if let Some(id) = digest.get(..32).and_then(owner_host_id) {
            return id;
        }
    }
    crate::state::state_dir()
        .ok()
        .and_then(|dir| persisted_host_id(&dir))
        .unwrap_or_else(|| HostId::from_random(random_bytes()))
}

/// `<state dir>/host-id`, created (0600, exclusively) when missing.
fn persisted_host_id(state: &Path) -> Option<HostId> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = state::HOST_ID.path_in(state);
    if let Some(id) = read_id_file(&path) {
        return owner_host_id(&id);
    }
    // The state directory is the operator's: the one ambient write of this module.
    let _ = state::create_private_dir(state);
    let fresh = HostId::from_random(random_bytes());
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path);
    match created {
        Ok(mut file) => {
            file.write_all(format!("{fresh}\n").as_bytes()).ok()?;
            Some(fresh)
        }
        // Another process won the race: use its id.
        Err(_) => read_id_file(&path).and_then(|id| owner_host_id(&id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_recycled_or_missing_pids_are_gone() {
        let me = local_owner();
        let process = me.process.expect("procfs of this namespace is readable");
        assert_eq!(ProcFs.liveness(process), Liveness::Alive);
        let recycled = ProcessIdentity {
            start_ticks: process.start_ticks + 1,
            ..process
        };
        assert_eq!(ProcFs.liveness(recycled), Liveness::Gone);
        // PIDs above the kernel maximum (4194304) never exist.
        let missing = ProcessIdentity::parse("4294967295:1").unwrap();
        let expected = if procfs_hides_pids() {
            Liveness::Unknown
        } else {
            Liveness::Gone
        };
        assert_eq!(ProcFs.liveness(missing), expected);
    }

    #[test]
    fn labels_carry_every_owner_fact() {
        let me = local_owner();
        let attempt = generate_attempt_id();
        let labels = me.turn_labels(&attempt, 1_700_000_000);
        let map: std::collections::BTreeMap<&str, &str> = labels.pairs().collect();
        assert_eq!(map.len(), 6);
        assert_eq!(map[HOST_LABEL_KEY], me.host().as_str());
        assert_eq!(map[ATTEMPT_LABEL_KEY], attempt.as_str());
        assert_eq!(map[DEADLINE_LABEL_KEY], "1700000000");
        assert!(InstanceId::parse(map[INSTANCE_LABEL_KEY]).is_ok());
        let ns = PidNamespace::parse(map[PID_NAMESPACE_LABEL_KEY]).unwrap();
        assert_eq!(Some(ns), me.pid_namespace());
        let owner = ProcessIdentity::parse(map[OWNER_LABEL_KEY]).unwrap();
        assert_eq!(owner.pid(), std::process::id());
        // Stable per host: detecting again gives the same host and a new instance.
        let again = LocalOwner::detect();
        assert_eq!(again.host, me.host);
        assert_ne!(again.instance, me.instance);
    }

    #[test]
    fn label_values_are_parsed_strictly() {
        for bad in [
            "", "1", "1:", ":1", "0:5", "5:0", "01:5", "+1:5", "1:5:6", "a:1", " 1:5",
        ] {
            assert_eq!(ProcessIdentity::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            ProcessIdentity::parse("42:7"),
            Some(ProcessIdentity {
                pid: 42,
                start_ticks: 7
            })
        );
        assert_eq!(ProcessIdentity::parse("4294967296:1"), None);
        for bad in ["", "0", "unknown", "-1", "1.0"] {
            assert_eq!(PidNamespace::parse(bad), None, "{bad:?}");
        }
        assert!(owner_host_id(&"a".repeat(32)).is_some());
        assert!(owner_host_id(&"A".repeat(32)).is_none());
        assert!(owner_host_id(&"a".repeat(31)).is_none());
    }

    #[test]
    fn the_host_id_file_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let first = persisted_host_id(&state).unwrap();
        let second = persisted_host_id(&state).unwrap();
        assert_eq!(first, second);
        std::fs::write(state.join("host-id"), "not hex\n").unwrap();
        // A corrupt file is never overwritten or repaired; without an id the caller falls back.
        assert_eq!(persisted_host_id(&state), None);
    }
}
