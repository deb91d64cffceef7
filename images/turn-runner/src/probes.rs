//! Isolation probes. Each one is a real attempt from inside the process that runs it; a probe that
//! cannot read its evidence reports an exposure (fail closed).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::markers::ProbeSelection;

/// Directories that must not be writable.
pub const WRITE_PROBE_DIRS: [&str; 3] = ["/", "/etc", "/home"];
/// Docker socket locations that must not exist.
pub const DOCKER_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/docker.sock"];

/// What one process observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeReport {
    pub uid: Option<u32>,
    pub cap_eff: Option<String>,
    pub no_new_privs: Option<bool>,
    pub seccomp_mode: Option<u8>,
    pub non_loopback_interfaces: Option<Vec<String>>,
    pub writable_dirs: Vec<String>,
    pub docker_socket_visible: bool,
    pub tcp_reachable: Option<bool>,
    pub sentinel_env_visible: Option<bool>,
    pub sentinel_file_visible: Option<bool>,
    /// With `probe: isolation`: the system call families the turn seccomp profile must deny
    /// (`syscall_probe::Probe::ALL`) that were not answered `EPERM`/`ENOSYS`.
    #[serde(default)]
    pub undenied_syscalls: Option<Vec<String>>,
}

impl ProbeReport {
    /// The names of every exposure; empty means isolated. Unknown evidence counts as exposure.
    #[must_use]
    pub fn exposures(&self) -> Vec<&'static str> {
        let exposed = [
            (self.uid.is_none_or(|u| u == 0), "uid_zero"),
            (
                self.cap_eff
                    .as_deref()
                    .is_none_or(|c| c.bytes().any(|b| b != b'0')),
                "capabilities",
            ),
            (self.no_new_privs != Some(true), "no_new_privs_unset"),
            (self.seccomp_mode != Some(2), "seccomp_not_filtering"),
            (
                self.non_loopback_interfaces
                    .as_ref()
                    .is_none_or(|v| !v.is_empty()),
                "network_interfaces",
            ),
            (!self.writable_dirs.is_empty(), "writable_system_dirs"),
            (self.docker_socket_visible, "docker_socket"),
            (self.tcp_reachable == Some(true), "tcp_reachable"),
            (self.sentinel_env_visible == Some(true), "sentinel_env"),
            (self.sentinel_file_visible == Some(true), "sentinel_file"),
            (
                self.undenied_syscalls
                    .as_ref()
                    .is_some_and(|v| !v.is_empty()),
                "syscall_not_denied",
            ),
        ];
        exposed
            .into_iter()
            .filter_map(|(is_exposed, name)| is_exposed.then_some(name))
            .collect()
    }
}

/// Runs every probe the selection asks for. Without `isolation`, only the targeted probes run
/// and the process-wide fields are still collected (they are cheap and read-only, except the
/// write probe, which runs only with `isolation`).
#[must_use]
pub fn collect(sel: &ProbeSelection) -> ProbeReport {
    let status = std::fs::read_to_string("/proc/self/status").ok();
    let field = |name: &str| -> Option<String> {
        status.as_deref()?.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            Some(rest.trim().to_owned())
        })
    };
    let uid = field("Uid").and_then(|v| v.split_whitespace().nth(1)?.parse().ok());
    ProbeReport {
        uid,
        cap_eff: field("CapEff"),
        // gVisor's /proc/self/status has no NoNewPrivs line; the prctl answers under both.
        no_new_privs: field("NoNewPrivs")
            .map(|v| v == "1")
            .or_else(|| rustix::thread::no_new_privs().ok()),
        seccomp_mode: field("Seccomp").and_then(|v| v.parse().ok()),
        non_loopback_interfaces: interfaces(),
        writable_dirs: if sel.isolation {
            writable_dirs()
        } else {
            Vec::new()
        },
        docker_socket_visible: DOCKER_SOCKETS
            .iter()
            .any(|p| std::fs::symlink_metadata(p).is_ok()),
        tcp_reachable: (!sel.tcp.is_empty()).then(|| sel.tcp.iter().any(|a| tcp_reachable(a))),
        sentinel_env_visible: sel.env.as_deref().map(|n| std::env::var_os(n).is_some()),
        sentinel_file_visible: sel
            .file
            .as_deref()
            .map(|p| std::fs::symlink_metadata(p).is_ok()),
        undenied_syscalls: sel.isolation.then(|| {
            syscall_probe::Probe::ALL
                .into_iter()
                .filter(|p| !p.attempt().denied())
                .map(|p| p.name().to_owned())
                .collect()
        }),
    }
}

fn interfaces() -> Option<Vec<String>> {
    // /proc/net/dev shows the interfaces of this process's network namespace.
    let text = std::fs::read_to_string("/proc/net/dev").ok()?;
    Some(
        text.lines()
            .skip(2)
            .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim().to_owned()))
            .filter(|name| name != "lo")
            .collect(),
    )
}

fn writable_dirs() -> Vec<String> {
    let name = format!(".isolation-probe-{}", std::process::id());
    WRITE_PROBE_DIRS
        .iter()
        .filter(|dir| {
            let path = std::path::Path::new(dir).join(&name);
            // Ambient std::fs on purpose: the probe asks what the process can reach at all.
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path);
            match created {
                Ok(mut f) => {
                    let _ = f.write_all(b"probe");
                    let _ = std::fs::remove_file(&path);
                    true
                }
                Err(_) => false,
            }
        })
        .map(|d| (*d).to_owned())
        .collect()
}

fn tcp_reachable(addr: &str) -> bool {
    // An unparseable address cannot be probed; report it as reachable so the turn fails closed.
    match addr.parse::<SocketAddr>() {
        Ok(sa) => TcpStream::connect_timeout(&sa, Duration::from_millis(1500)).is_ok(),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean() -> ProbeReport {
        ProbeReport {
            uid: Some(10001),
            cap_eff: Some("0000000000000000".into()),
            no_new_privs: Some(true),
            seccomp_mode: Some(2),
            non_loopback_interfaces: Some(vec![]),
            writable_dirs: vec![],
            docker_socket_visible: false,
            tcp_reachable: Some(false),
            sentinel_env_visible: Some(false),
            sentinel_file_visible: None,
            undenied_syscalls: Some(vec![]),
        }
    }

    #[test]
    fn each_field_maps_to_one_exposure() {
        assert!(clean().exposures().is_empty());
        assert!(
            ProbeReport {
                undenied_syscalls: None,
                ..clean()
            }
            .exposures()
            .is_empty()
        );
        let cases: Vec<(ProbeReport, &str)> = vec![
            (
                ProbeReport {
                    undenied_syscalls: Some(vec!["io_uring_setup".into()]),
                    ..clean()
                },
                "syscall_not_denied",
            ),
            (
                ProbeReport {
                    uid: Some(0),
                    ..clean()
                },
                "uid_zero",
            ),
            (
                ProbeReport {
                    uid: None,
                    ..clean()
                },
                "uid_zero",
            ),
            (
                ProbeReport {
                    cap_eff: Some("00000000a80425fb".into()),
                    ..clean()
                },
                "capabilities",
            ),
            (
                ProbeReport {
                    no_new_privs: Some(false),
                    ..clean()
                },
                "no_new_privs_unset",
            ),
            (
                ProbeReport {
                    seccomp_mode: Some(0),
                    ..clean()
                },
                "seccomp_not_filtering",
            ),
            (
                ProbeReport {
                    non_loopback_interfaces: Some(vec!["eth0".into()]),
                    ..clean()
                },
                "network_interfaces",
            ),
            (
                ProbeReport {
                    non_loopback_interfaces: None,
                    ..clean()
                },
                "network_interfaces",
            ),
            (
                ProbeReport {
                    writable_dirs: vec!["/etc".into()],
                    ..clean()
                },
                "writable_system_dirs",
            ),
            (
                ProbeReport {
                    docker_socket_visible: true,
                    ..clean()
                },
                "docker_socket",
            ),
            (
                ProbeReport {
                    tcp_reachable: Some(true),
                    ..clean()
                },
                "tcp_reachable",
            ),
            (
                ProbeReport {
                    sentinel_env_visible: Some(true),
                    ..clean()
                },
                "sentinel_env",
            ),
            (
                ProbeReport {
                    sentinel_file_visible: Some(true),
                    ..clean()
                },
                "sentinel_file",
            ),
        ];
        for (report, expected) in cases {
            assert_eq!(report.exposures(), vec![expected]);
        }
    }

    #[test]
    fn targeted_probes_see_real_resources() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let file = tempfile::NamedTempFile::new().unwrap();
        let sel = ProbeSelection {
            isolation: false,
            tcp: vec![
                "127.0.0.1:1".into(),
                listener.local_addr().unwrap().to_string(),
            ],
            env: Some("PATH".into()),
            file: Some(file.path().display().to_string()),
        };
        let report = collect(&sel);
        assert_eq!(report.tcp_reachable, Some(true));
        assert_eq!(report.sentinel_env_visible, Some(true));
        assert_eq!(report.sentinel_file_visible, Some(true));
        drop(listener);
        let sel = ProbeSelection {
            isolation: false,
            tcp: vec!["127.0.0.1:1".into()],
            env: Some("PROOF_WORKER_SURELY_UNSET_NAME".into()),
            file: Some("/nonexistent/sentinel".into()),
        };
        let report = collect(&sel);
        assert_eq!(report.tcp_reachable, Some(false));
        assert_eq!(report.sentinel_env_visible, Some(false));
        assert_eq!(report.sentinel_file_visible, Some(false));
        assert!(report.uid.is_some() && report.cap_eff.is_some());
    }
}
