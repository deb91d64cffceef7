//! Runtime profiles: what a turn's limits are, and what the daemon must look like, under each OCI
//! runtime the worker supports (`runc`, the daemon's default, and gVisor's `runsc`).
//!
//! Every isolation field of the container spec is the same under both runtimes except the pids
//! limit: under gVisor the cgroup's pids limit counts the sandbox's own host threads (the Sentry,
//! the gofer and, on the ptrace platform, the stub threads behind every sandboxed task), not the
//! agent's processes, so the runc value (64) makes gVisor fail to start its own init.
//!
//! Under `runsc` the pre-start checks also read the daemon's `/info` and require that the runtime
//! named `runsc` is registered as exactly [`RUNSC_PATH`] with exactly [`RUNSC_ARGS`]: a daemon
//! that registers another binary under that name, or gVisor with its own network stack or
//! without the turn's seccomp profile applied inside the sandbox, is refused before create with
//! `REPOSITORY_DOCKER_RUNTIME_MISMATCH`.

use std::collections::HashMap;

use crate::error::ContainerError;
use crate::ids::RuntimeName;

/// The runtime name the `runsc` profile applies to.
pub const RUNSC: &str = "runsc";
/// The binary the daemon must have registered as `runsc` (Debian's package installs it here).
pub const RUNSC_PATH: &str = "/usr/bin/runsc";
/// The exact `runtimeArgs` of the registered `runsc`, in order: no network stack in the sandbox
/// at all (the container's network mode is `none` as well), and the OCI seccomp profile (the
/// turn profile the worker sends) applied to the sandboxed application by the Sentry.
pub const RUNSC_ARGS: [&str; 2] = ["--network=none", "--oci-seccomp"];

/// `--pids-limit` under runc: the agent's processes and threads.
pub const RUNC_PIDS_LIMIT: i64 = 64;
/// `--pids-limit` under runsc: the sandbox's host threads. A hardened turn with `--init` needs
/// more than 64 just to start; on the ptrace platform every sandboxed process costs its own stub
/// threads. Codex (its Node adapter and `codex app-server`, 45 tasks at most under runc) peaked
/// at about 270 host threads in a turn, so 512 leaves room for its commands. When an agent
/// exhausts it, the Sentry cannot create a thread and the whole sandbox ends (the turn fails
/// closed).
pub const RUNSC_PIDS_LIMIT: i64 = 512;

/// The turn's limits and daemon expectations under one runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeProfile {
    /// The daemon's default runtime, or any runtime named other than `runsc` (runc semantics).
    Runc,
    /// gVisor's `runsc`, registered as [`RUNSC_PATH`] with [`RUNSC_ARGS`].
    Runsc,
}

/// A runtime as the daemon's `/info` lists it (unvalidated).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisteredRuntime {
    /// The runtime binary.
    pub path: Option<String>,
    /// Its `runtimeArgs`.
    pub args: Vec<String>,
}

impl RuntimeProfile {
    /// The profile of a configured runtime (`None`: the daemon default).
    #[must_use]
    pub fn for_runtime(runtime: Option<&RuntimeName>) -> Self {
        match runtime.map(RuntimeName::as_str) {
            Some(RUNSC) => Self::Runsc,
            _ => Self::Runc,
        }
    }

    /// The profile's name (`runc` or `runsc`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Runc => "runc",
            Self::Runsc => RUNSC,
        }
    }

    /// The `--pids-limit` of a turn under this runtime.
    #[must_use]
    pub fn pids_limit(self) -> i64 {
        match self {
            Self::Runc => RUNC_PIDS_LIMIT,
            Self::Runsc => RUNSC_PIDS_LIMIT,
        }
    }

    /// Whether the daemon's runtime registration must be read from `/info` before create.
    #[must_use]
    pub fn verifies_registration(self) -> bool {
        self == Self::Runsc
    }

    /// Checks the daemon's registered runtimes against this profile.
    ///
    /// # Errors
    /// `REPOSITORY_DOCKER_RUNTIME_MISMATCH` when `runsc` is not registered, or registered with
    /// another binary or other arguments.
    pub fn verify_registration(
        self,
        registered: &HashMap<String, RegisteredRuntime>,
    ) -> Result<(), ContainerError> {
        if self != Self::Runsc {
            return Ok(());
        }
        let entry = registered
            .get(RUNSC)
            .ok_or(ContainerError::RuntimeMismatch {
                field: "not registered",
            })?;
        if entry.path.as_deref() != Some(RUNSC_PATH) {
            return Err(ContainerError::RuntimeMismatch { field: "path" });
        }
        if !entry.args.iter().map(String::as_str).eq(RUNSC_ARGS) {
            return Err(ContainerError::RuntimeMismatch {
                field: "runtimeArgs",
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(path: &str, args: &[&str]) -> HashMap<String, RegisteredRuntime> {
        HashMap::from([(
            RUNSC.to_owned(),
            RegisteredRuntime {
                path: Some(path.to_owned()),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
            },
        )])
    }

    #[test]
    fn profile_follows_the_runtime_name() {
        let runsc: RuntimeName = "runsc".parse().unwrap();
        let runc: RuntimeName = "runc".parse().unwrap();
        assert_eq!(
            RuntimeProfile::for_runtime(Some(&runsc)),
            RuntimeProfile::Runsc
        );
        assert_eq!(
            RuntimeProfile::for_runtime(Some(&runc)),
            RuntimeProfile::Runc
        );
        assert_eq!(RuntimeProfile::for_runtime(None), RuntimeProfile::Runc);
        assert_eq!(RuntimeProfile::Runc.pids_limit(), 64);
        assert_eq!(RuntimeProfile::Runsc.pids_limit(), 512);
        assert!(RuntimeProfile::Runsc.verifies_registration());
        assert!(!RuntimeProfile::Runc.verifies_registration());
    }

    #[test]
    fn runsc_registration_must_match_exactly() {
        let ok = registered(RUNSC_PATH, &RUNSC_ARGS);
        assert!(RuntimeProfile::Runsc.verify_registration(&ok).is_ok());
        let field = |r: &HashMap<String, RegisteredRuntime>| match RuntimeProfile::Runsc
            .verify_registration(r)
        {
            Err(ContainerError::RuntimeMismatch { field }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(&HashMap::new()), "not registered");
        assert_eq!(
            field(&registered("/usr/local/bin/runsc", &RUNSC_ARGS)),
            "path"
        );
        for args in [
            &[][..],
            &["--network=none"][..],
            &["--oci-seccomp", "--network=none"][..],
            &["--network=host", "--oci-seccomp"][..],
            &["--network=none", "--oci-seccomp", "--net-raw"][..],
        ] {
            assert_eq!(
                field(&registered(RUNSC_PATH, args)),
                "runtimeArgs",
                "{args:?}"
            );
        }
        let no_path = HashMap::from([(RUNSC.to_owned(), RegisteredRuntime::default())]);
        assert_eq!(field(&no_path), "path");
        // The runc profile never reads the registration.
        assert!(
            RuntimeProfile::Runc
                .verify_registration(&HashMap::new())
                .is_ok()
        );
    }
}
