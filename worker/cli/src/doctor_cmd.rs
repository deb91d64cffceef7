//! `patch-candidate doctor`: what the local daemon offers for turns — API version, cgroup
//! version, seccomp and AppArmor, the registered runtimes (each checked against its profile) —
//! and whether gVisor (`runsc`) passes a smoke turn: the demo fixture run under `runsc` with the
//! recorded proof image, its candidate checked by `git apply --check`, the fixture removed after.
//!
//! Everything the daemon says is untrusted text and reaches the terminal only through
//! [`render::name`].

use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use clap::Args;
use container::{DaemonFacts, RUNSC, RUNSC_ARGS, RUNSC_PATH, RuntimeProfile};
use serde_json::{Value, json};

use super::demo_cmd::{demo_in, recorded_images_present};
use super::docker_args::{DockerArgs, state_dir, tokio_runtime};
use super::outcome::DOCTOR_RUNSC_CODE;
use super::{CliError, Outcome, render};

/// `doctor` arguments.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// Do not run the smoke turn under runsc (only read the daemon's configuration).
    #[arg(long)]
    no_smoke: bool,
    /// Fail (exit 1) unless runsc is registered as expected and passes the smoke turn.
    #[arg(long)]
    require_runsc: bool,
    #[command(flatten)]
    docker: DockerArgs,
}

/// The smoke turn's result.
#[derive(Debug)]
enum Smoke {
    Skipped(&'static str),
    Passed { digest: String, millis: u128 },
    Failed { code: &'static str, millis: u128 },
}

impl Smoke {
    fn json(&self) -> Value {
        match self {
            Self::Skipped(reason) => json!({"ran": false, "ok": false, "reason": reason}),
            Self::Passed { digest, millis } => {
                json!({"ran": true, "ok": true, "digest": digest, "millis": millis})
            }
            Self::Failed { code, millis } => {
                json!({"ran": true, "ok": false, "code": code, "millis": millis})
            }
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Skipped(reason) => format!("not run ({reason})"),
            Self::Passed { digest, millis } => {
                format!("passed in {millis} ms, candidate {}", render::name(digest))
            }
            Self::Failed { code, millis } => format!("FAILED after {millis} ms: {code}"),
        }
    }
}

fn has_option(facts: &DaemonFacts, name: &str) -> bool {
    let prefix = format!("name={name}");
    facts
        .security_options
        .iter()
        .any(|o| o == &prefix || o.starts_with(&format!("{prefix},")))
}

fn smoke(args: &DoctorArgs, registration_ok: bool) -> Result<Smoke, CliError> {
    if args.no_smoke {
        return Ok(Smoke::Skipped("--no-smoke"));
    }
    if !registration_ok {
        return Ok(Smoke::Skipped("runsc is not registered as expected"));
    }
    let state = state_dir()?;
    let Some(images) = recorded_images_present(&args.docker, &state)? else {
        return Ok(Smoke::Skipped(
            "no recorded proof image: run `patch-candidate image build`",
        ));
    };
    let dir = std::env::temp_dir().join(format!(
        "patch-candidate-doctor-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let started = Instant::now();
    let result = demo_in(&dir, &images, &args.docker, Some(RUNSC.to_owned()));
    let millis = started.elapsed().as_millis();
    remove_fixture(&dir);
    Ok(match result {
        Ok((outcome, _, _)) => Smoke::Passed {
            digest: outcome.digest.to_string(),
            millis,
        },
        Err(e) => Smoke::Failed {
            code: e.code,
            millis,
        },
    })
}

/// The smoke fixture is this command's own fresh directory under the temp dir: removed through
/// a handle on its parent, by its generated name.
fn remove_fixture(dir: &Path) {
    let removed = match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) => {
            cap_std::fs::Dir::open_ambient_dir(parent, cap_std::ambient_authority())
                .and_then(|p| p.remove_dir_all(name))
                .is_ok()
        }
        _ => false,
    };
    if !removed {
        tracing::warn!("doctor: could not remove the smoke fixture directory");
    }
}

pub(crate) fn run(args: &DoctorArgs) -> Result<Outcome, CliError> {
    let rt = tokio_runtime()?;
    let (api_version, facts) = rt.block_on(async {
        let docker = args.docker.connect().await?;
        let facts = docker.daemon_facts().await?;
        Ok::<_, CliError>((docker.api_version(), facts))
    })?;
    drop(rt);
    let registration = RuntimeProfile::Runsc.verify_registration(&facts.runtimes);
    let smoke = smoke(args, registration.is_ok())?;

    let seccomp = has_option(&facts, "seccomp");
    let apparmor = has_option(&facts, "apparmor");
    let mut names: Vec<&String> = facts.runtimes.keys().collect();
    names.sort();
    let runtimes: Vec<Value> = names
        .iter()
        .filter_map(|name| {
            let r = facts.runtimes.get(*name)?;
            Some(json!({"name": name, "path": r.path, "args": r.args}))
        })
        .collect();
    let json = json!({
        "api_version": api_version,
        "server_version": facts.server_version,
        "kernel_version": facts.kernel_version,
        "cgroup_version": facts.cgroup_version,
        "cgroup_driver": facts.cgroup_driver,
        "seccomp": seccomp,
        "apparmor": apparmor,
        "security_options": facts.security_options,
        "default_runtime": facts.default_runtime,
        "runtimes": runtimes,
        "runsc": {
            "expected": {"path": RUNSC_PATH, "args": RUNSC_ARGS},
            "registration": match &registration {
                Ok(()) => json!({"ok": true}),
                Err(e) => json!({"ok": false, "code": e.code(), "message": e.to_string()}),
            },
            "pids_limit": RuntimeProfile::Runsc.pids_limit(),
            "smoke": smoke.json(),
        },
    });

    let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "?".to_owned(), render::name);
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut text = String::new();
    let _ = writeln!(text, "Docker API:       {}", render::name(&api_version));
    let _ = writeln!(text, "server version:   {}", opt(&facts.server_version));
    let _ = writeln!(text, "kernel:           {}", opt(&facts.kernel_version));
    let _ = writeln!(
        text,
        "cgroup:           v{} ({})",
        opt(&facts.cgroup_version),
        opt(&facts.cgroup_driver)
    );
    let _ = writeln!(text, "seccomp:          {}", yes_no(seccomp));
    let _ = writeln!(text, "AppArmor:         {}", yes_no(apparmor));
    let _ = writeln!(text, "default runtime:  {}", opt(&facts.default_runtime));
    let _ = writeln!(text, "runtimes:");
    for name in &names {
        if let Some(r) = facts.runtimes.get(*name) {
            let args: Vec<String> = r.args.iter().map(|a| render::name(a)).collect();
            let _ = writeln!(
                text,
                "  {:<24} {} {}",
                render::name(name),
                opt(&r.path),
                args.join(" ")
            );
        }
    }
    let _ = writeln!(
        text,
        "runsc expected:   {} {}",
        RUNSC_PATH,
        RUNSC_ARGS.join(" ")
    );
    let _ = writeln!(
        text,
        "runsc registered: {}",
        match &registration {
            Ok(()) => "as expected".to_owned(),
            Err(e) => e.to_string(),
        }
    );
    let _ = writeln!(text, "runsc smoke turn: {}", smoke.text());

    if args.require_runsc {
        if let Err(e) = registration {
            return Err(CliError::rejected(DOCTOR_RUNSC_CODE, e.to_string()));
        }
        match smoke {
            Smoke::Passed { .. } => {}
            Smoke::Failed { code, .. } => {
                return Err(CliError::rejected(
                    DOCTOR_RUNSC_CODE,
                    format!("the runsc smoke turn failed with {code}"),
                ));
            }
            Smoke::Skipped(reason) => {
                return Err(CliError::rejected(
                    DOCTOR_RUNSC_CODE,
                    format!("the runsc smoke turn did not run: {reason}"),
                ));
            }
        }
    }
    Ok(Outcome { json, text })
}
