//! Isolation probes for the seccomp profile a turn runs under: each [`Probe`] attempts one
//! system call family the profile denies, with arguments that do nothing even where the call is
//! allowed (null or invalid pointers, a query instead of an action, any descriptor it gets is
//! closed at once), and reports the outcome. A filter denial shows as `EPERM` (the profile's
//! default action) or `ENOSYS` (io_uring); the kernel itself answers differently (`EFAULT`,
//! `EINVAL`, `ESRCH`, `ENOKEY`, a descriptor) when the call reaches it.
//!
//! Used inside the container by the proof image's agent and runner and by the worker's turn
//! fixture; never on the host.
//!
//! # Security
//! The only `unsafe` code is the private `raw` module: one `libc::syscall` per probe, each with
//! a `SAFETY:` comment.
#![deny(unsafe_code)]

mod raw;

/// One denied system call family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Probe {
    /// `io_uring_setup(1, &params)`.
    IoUringSetup,
    /// `socket(AF_VSOCK, SOCK_STREAM, 0)`.
    SocketVsock,
    /// `ptrace(PTRACE_PEEKDATA, 1, 0, 0)` (PID 1 is not traced: `ESRCH` when allowed).
    Ptrace,
    /// `perf_event_open(NULL, 0, -1, -1, 0)` (`EFAULT` when allowed).
    PerfEventOpen,
    /// `bpf(BPF_MAP_CREATE, NULL, 0)`.
    Bpf,
    /// `userfaultfd(O_CLOEXEC)`.
    Userfaultfd,
    /// `keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0)` (a query).
    Keyctl,
    /// `init_module(NULL, 0, NULL)`.
    InitModule,
    /// `mount(NULL, NULL, NULL, 0, NULL)`.
    Mount,
}

impl Probe {
    /// Every probe, in documentation order.
    pub const ALL: [Self; 9] = [
        Self::IoUringSetup,
        Self::SocketVsock,
        Self::Ptrace,
        Self::PerfEventOpen,
        Self::Bpf,
        Self::Userfaultfd,
        Self::Keyctl,
        Self::InitModule,
        Self::Mount,
    ];

    /// The probe's stable name (used in reports and task markers).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::IoUringSetup => "io_uring_setup",
            Self::SocketVsock => "socket_vsock",
            Self::Ptrace => "ptrace",
            Self::PerfEventOpen => "perf_event_open",
            Self::Bpf => "bpf",
            Self::Userfaultfd => "userfaultfd",
            Self::Keyctl => "keyctl",
            Self::InitModule => "init_module",
            Self::Mount => "mount",
        }
    }

    /// The probe named `name`, if any.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Attempts the call once.
    #[must_use]
    pub fn attempt(self) -> Outcome {
        raw::attempt(self)
    }
}

/// What one attempt returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The call returned a non-negative value (any descriptor was closed).
    Succeeded,
    /// The call failed with this errno.
    Failed(i32),
}

impl Outcome {
    /// True for `EPERM` and `ENOSYS`: what the turn profile answers for a denied call.
    #[must_use]
    pub fn denied(self) -> bool {
        matches!(self, Self::Failed(libc::EPERM | libc::ENOSYS))
    }

    /// `ok` or `errno-N`, for reports.
    #[must_use]
    pub fn label(self) -> String {
        match self {
            Self::Succeeded => "ok".to_owned(),
            Self::Failed(errno) => format!("errno-{errno}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_denial_is_eperm_or_enosys() {
        for p in Probe::ALL {
            assert_eq!(Probe::from_name(p.name()), Some(p));
        }
        assert_eq!(Probe::from_name("nope"), None);
        assert!(Outcome::Failed(libc::EPERM).denied());
        assert!(Outcome::Failed(libc::ENOSYS).denied());
        assert!(!Outcome::Failed(libc::EFAULT).denied());
        assert!(!Outcome::Succeeded.denied());
        assert_eq!(Outcome::Failed(1).label(), "errno-1");
    }
}
