//! The container spec of an offline turn (reference §10.4/§10.7, and stricter) and the pre-start
//! inspection that reads every field back from the created container (reference §10.5 plus the
//! extra fields). A mismatch means the daemon did not create what was asked for: the container
//! is removed and never started.

use std::collections::{BTreeSet, HashMap};

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, HostConfig,
    HostConfigLogConfig, ResourcesUlimits,
};

use crate::error::WorkerError;
use crate::ids::{ContainerName, ImageId, RuntimeName, TURN_LABEL_KEY, TURN_LABEL_VALUE};
use crate::owner::TurnLabels;

/// The user every turn runs as.
pub const TURN_USER: &str = "10001:10001";
/// `--pids-limit 64`.
pub const PIDS_LIMIT: i64 = 64;
/// `--memory 768m` (and the same swap limit, i.e. no swap).
pub const MEMORY_BYTES: i64 = 768 * 1024 * 1024;
/// `--cpus 1`.
pub const NANO_CPUS: i64 = 1_000_000_000;
/// `nofile` soft and hard limit.
pub const NOFILE_LIMIT: i64 = 1024;
/// The tmpfs mounts: path and options (sizes bounded; their pages count against the memory limit).
pub const TMPFS: [(&str, &str); 3] = [
    ("/tmp", "rw,nosuid,nodev,size=64m,mode=1777"),
    ("/workspace", "rw,nosuid,nodev,size=64m,mode=1777"),
    ("/home/sandbox", "rw,nosuid,nodev,size=16m,mode=1777"),
];

/// The closed set of environment variable names an image may bake in (reference §10.1).
pub const ALLOWED_IMAGE_ENV_NAMES: [&str; 16] = [
    "PATH",
    "HOME",
    "LANG",
    "NODE_VERSION",
    "YARN_VERSION",
    "GPG_KEY",
    "PYTHON_VERSION",
    "PYTHON_SHA256",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "PYTHONPATH",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "MOZAIKS_WEB_SHELL_PATH",
    "MOZAIKS_CHAT_UI_PATH",
    "MOZAIKS_FACTORY_APP_PATH",
    "LOGS_BASE_DIR",
];

/// Everything the spec depends on.
#[derive(Debug, Clone)]
pub struct SpecInput<'a> {
    pub name: &'a ContainerName,
    pub image_id: &'a ImageId,
    /// The owner labels (host, PID namespace, process, instance, attempt, deadline) the sweeper
    /// decides by.
    pub labels: &'a TurnLabels,
    /// An operator-configured OCI runtime (e.g. `runsc`); `None` uses the daemon default.
    pub runtime: Option<&'a RuntimeName>,
}

/// The create body: no network, read-only root, no mounts but bounded tmpfs, no capabilities,
/// no-new-privileges with the default seccomp profile, pids/memory/CPU limits, init, private IPC,
/// nofile ulimit, log driver `none`, nonroot user, stdin open for one attach, no TTY.
#[must_use]
pub fn container_spec(input: &SpecInput<'_>) -> ContainerCreateBody {
    let mut labels = HashMap::from([(TURN_LABEL_KEY.to_owned(), TURN_LABEL_VALUE.to_owned())]);
    labels.extend(
        input
            .labels
            .pairs()
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    let host_config = HostConfig {
        network_mode: Some("none".to_owned()),
        readonly_rootfs: Some(true),
        tmpfs: Some(
            TMPFS
                .iter()
                .map(|(p, o)| ((*p).to_owned(), (*o).to_owned()))
                .collect(),
        ),
        log_config: Some(HostConfigLogConfig {
            typ: Some("none".to_owned()),
            config: None,
        }),
        cap_drop: Some(vec!["ALL".to_owned()]),
        security_opt: Some(vec!["no-new-privileges".to_owned()]),
        pids_limit: Some(PIDS_LIMIT),
        memory: Some(MEMORY_BYTES),
        memory_swap: Some(MEMORY_BYTES),
        nano_cpus: Some(NANO_CPUS),
        init: Some(true),
        ipc_mode: Some("private".to_owned()),
        privileged: Some(false),
        publish_all_ports: Some(false),
        auto_remove: Some(false),
        ulimits: Some(vec![ResourcesUlimits {
            name: Some("nofile".to_owned()),
            soft: Some(NOFILE_LIMIT),
            hard: Some(NOFILE_LIMIT),
        }]),
        runtime: input.runtime.map(|r| r.as_str().to_owned()),
        ..HostConfig::default()
    };
    ContainerCreateBody {
        image: Some(input.image_id.as_str().to_owned()),
        user: Some(TURN_USER.to_owned()),
        labels: Some(labels),
        env: Some(Vec::new()),
        tty: Some(false),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        network_disabled: Some(true),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    }
}

fn mismatch(field: &'static str) -> WorkerError {
    WorkerError::IsolationMismatch { field }
}

fn require(ok: bool, field: &'static str) -> Result<(), WorkerError> {
    if ok { Ok(()) } else { Err(mismatch(field)) }
}

fn empty_or_none<T>(v: Option<&Vec<T>>) -> bool {
    v.is_none_or(Vec::is_empty)
}

/// Checks an image `Env` list against [`ALLOWED_IMAGE_ENV_NAMES`].
///
/// # Errors
/// `REPOSITORY_DOCKER_ISOLATION_MISMATCH` naming `Config.Env`.
pub fn verify_env(env: &[String]) -> Result<(), WorkerError> {
    for entry in env {
        let (name, _) = entry.split_once('=').ok_or(mismatch("Config.Env"))?;
        require(ALLOWED_IMAGE_ENV_NAMES.contains(&name), "Config.Env")?;
    }
    Ok(())
}

/// The pre-start inspection: every isolation field read back from the created container.
///
/// # Errors
/// `REPOSITORY_DOCKER_INSPECT_FORMAT` when `HostConfig`/`Config` are missing;
/// `REPOSITORY_DOCKER_ISOLATION_MISMATCH` naming the first field that differs.
pub fn verify_container(
    inspect: &ContainerInspectResponse,
    input: &SpecInput<'_>,
) -> Result<(), WorkerError> {
    let host = inspect
        .host_config
        .as_ref()
        .ok_or(WorkerError::InspectFormat)?;
    let config = inspect.config.as_ref().ok_or(WorkerError::InspectFormat)?;

    require(
        inspect.image.as_deref() == Some(input.image_id.as_str()),
        "Image",
    )?;
    let expected_name = format!("/{}", input.name.as_str());
    require(
        inspect.name.as_deref() == Some(expected_name.as_str()),
        "Name",
    )?;
    let state = inspect.state.as_ref().and_then(|s| s.status);
    require(
        state == Some(ContainerStateStatusEnum::CREATED),
        "State.Status",
    )?;

    require(
        host.network_mode.as_deref() == Some("none"),
        "HostConfig.NetworkMode",
    )?;
    require(
        host.readonly_rootfs == Some(true),
        "HostConfig.ReadonlyRootfs",
    )?;
    require(empty_or_none(host.binds.as_ref()), "HostConfig.Binds")?;
    require(empty_or_none(host.mounts.as_ref()), "HostConfig.Mounts")?;
    require(
        empty_or_none(host.volumes_from.as_ref()),
        "HostConfig.VolumesFrom",
    )?;
    let mounts = inspect.mounts.as_ref().ok_or(mismatch("Mounts"))?;
    require(
        mounts.iter().all(|m| m.typ.as_deref() == Some("tmpfs")),
        "Mounts",
    )?;
    require(host.privileged == Some(false), "HostConfig.Privileged")?;
    require(
        host.cap_drop.as_deref() == Some(&["ALL".to_owned()][..]),
        "HostConfig.CapDrop",
    )?;
    require(empty_or_none(host.cap_add.as_ref()), "HostConfig.CapAdd")?;
    // Exactly no-new-privileges: any seccomp/apparmor/label override (e.g. `seccomp=unconfined`)
    // is refused, so the daemon's default seccomp profile applies.
    require(
        host.security_opt.as_deref() == Some(&["no-new-privileges".to_owned()][..]),
        "HostConfig.SecurityOpt",
    )?;
    require(host.pids_limit == Some(PIDS_LIMIT), "HostConfig.PidsLimit")?;
    require(host.memory == Some(MEMORY_BYTES), "HostConfig.Memory")?;
    require(
        host.memory_swap == Some(MEMORY_BYTES),
        "HostConfig.MemorySwap",
    )?;
    require(host.nano_cpus == Some(NANO_CPUS), "HostConfig.NanoCpus")?;
    require(
        host.log_config.as_ref().and_then(|l| l.typ.as_deref()) == Some("none"),
        "HostConfig.LogConfig",
    )?;
    require(host.init == Some(true), "HostConfig.Init")?;
    require(
        host.ipc_mode.as_deref() == Some("private"),
        "HostConfig.IpcMode",
    )?;
    require(
        host.pid_mode.as_deref().is_none_or(str::is_empty),
        "HostConfig.PidMode",
    )?;
    require(
        host.userns_mode.as_deref().is_none_or(str::is_empty),
        "HostConfig.UsernsMode",
    )?;
    require(
        host.uts_mode.as_deref().is_none_or(str::is_empty),
        "HostConfig.UTSMode",
    )?;
    require(empty_or_none(host.devices.as_ref()), "HostConfig.Devices")?;
    require(
        empty_or_none(host.device_requests.as_ref()),
        "HostConfig.DeviceRequests",
    )?;
    require(
        empty_or_none(host.device_cgroup_rules.as_ref()),
        "HostConfig.DeviceCgroupRules",
    )?;
    require(
        host.port_bindings.as_ref().is_none_or(HashMap::is_empty),
        "HostConfig.PortBindings",
    )?;
    require(
        host.publish_all_ports != Some(true),
        "HostConfig.PublishAllPorts",
    )?;
    require(
        empty_or_none(host.extra_hosts.as_ref()),
        "HostConfig.ExtraHosts",
    )?;
    require(empty_or_none(host.links.as_ref()), "HostConfig.Links")?;
    require(
        empty_or_none(host.group_add.as_ref()),
        "HostConfig.GroupAdd",
    )?;
    require(
        host.sysctls.as_ref().is_none_or(HashMap::is_empty),
        "HostConfig.Sysctls",
    )?;
    require(
        host.oom_kill_disable != Some(true),
        "HostConfig.OomKillDisable",
    )?;
    require(host.auto_remove != Some(true), "HostConfig.AutoRemove")?;
    let nofile = ResourcesUlimits {
        name: Some("nofile".to_owned()),
        soft: Some(NOFILE_LIMIT),
        hard: Some(NOFILE_LIMIT),
    };
    require(
        host.ulimits.as_deref() == Some(&[nofile][..]),
        "HostConfig.Ulimits",
    )?;
    if let Some(runtime) = input.runtime {
        require(
            host.runtime.as_deref() == Some(runtime.as_str()),
            "HostConfig.Runtime",
        )?;
    }
    let tmpfs = host.tmpfs.as_ref().ok_or(mismatch("HostConfig.Tmpfs"))?;
    let expected: BTreeSet<(&str, &str)> = TMPFS.iter().copied().collect();
    let actual: BTreeSet<(&str, &str)> = tmpfs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    require(actual == expected, "HostConfig.Tmpfs")?;

    require(config.user.as_deref() == Some(TURN_USER), "Config.User")?;
    require(config.tty != Some(true), "Config.Tty")?;
    require(config.open_stdin == Some(true), "Config.OpenStdin")?;
    require(config.stdin_once == Some(true), "Config.StdinOnce")?;
    require(
        empty_or_none(config.exposed_ports.as_ref()),
        "Config.ExposedPorts",
    )?;
    require(empty_or_none(config.volumes.as_ref()), "Config.Volumes")?;
    let labels = config.labels.clone().unwrap_or_default();
    require(
        labels.get(TURN_LABEL_KEY).map(String::as_str) == Some(TURN_LABEL_VALUE)
            && input
                .labels
                .pairs()
                .all(|(k, v)| labels.get(k).map(String::as_str) == Some(v)),
        "Config.Labels",
    )?;
    verify_env(config.env.as_deref().unwrap_or_default())?;
    Ok(())
}
