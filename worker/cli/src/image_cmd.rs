//! `patch-candidate image build`: builds the proof images with `images/build.sh` (which records
//! their immutable IDs in `<state dir>/images.json`) and prints the approved image ID;
//! `image build --live` builds the live image (`images/build.sh --live`, recorded in
//! `<state dir>/live-image.json`); `image build --gate python|rust` a gate image
//! (`images/build.sh --gate`, recorded in `<state dir>/gate-images.json`); `image approve --gate
//! NAME --id sha256:…` records an operator's own prebuilt gate image after checking that the
//! daemon has an image with exactly that ID.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Args, Subcommand, ValueEnum};
use container::{ContainerRuntime as _, ImageId, ImageReference};
use gate::{EnvironmentStack, GateImageName, GateImageOrigin, GateImageRecord, GateImagesState};
use turn::{ImagesState, LiveImageState};

use super::docker_args::{DockerArgs, state_dir, tokio_runtime};
use super::outcome::{
    IMAGE_APPROVE_CODE, IMAGE_BUILD_CODE, IMAGE_SOURCE_CODE, STATE_CODE, display_path,
};
use super::paths::require_dir;
use super::render::name;
use super::{CliError, Outcome};

/// `image` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ImageCommand {
    /// Build the proof (and test-only hostile) images and record their IDs.
    Build(BuildArgs),
    /// Approve an operator's own prebuilt gate image by its immutable ID.
    Approve(ApproveArgs),
}

/// The gate images this checkout builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum GateStack {
    /// python3 and pytest from Debian's packages.
    Python,
    /// rustc and cargo (the pinned host toolchain) with Debian's gcc as the linker.
    Rust,
}

impl GateStack {
    fn as_str(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::Rust => "rust",
        }
    }
}

/// `image approve` arguments.
#[derive(Debug, Args)]
pub(crate) struct ApproveArgs {
    /// The gate image name gate definitions refer to (`[a-z][a-z0-9_-]{0,63}`).
    #[arg(long, value_name = "NAME")]
    gate: String,
    /// The image's immutable ID (`sha256:` + 64 lowercase hex), present on the daemon.
    #[arg(long, value_name = "ID")]
    id: String,
    #[command(flatten)]
    docker: DockerArgs,
}

/// `image build` arguments.
#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// Source checkout holding `images/build.sh` (default: the checkout that contains the current
    /// directory).
    #[arg(long)]
    source: Option<PathBuf>,
    /// Build the live image instead: the runner, codex-acp and the native codex from the locked
    /// npm tree (every package integrity checked), this host's Node and a static busybox.
    #[arg(long, conflicts_with = "gate")]
    live: bool,
    /// The agent of the live image: codex (default), claude (claude-agent-acp and the native
    /// claude from the locked npm tree, every package integrity checked, on this host's Node;
    /// proprietary, never push the image) or gemini (Gemini CLI from its pinned npm tarball,
    /// SHA-512 integrity checked, on this host's Node); each is recorded in its own file
    /// (live-image.json, live-image-claude.json, live-image-gemini.json).
    #[arg(long, value_name = "NAME", requires = "live")]
    agent: Option<String>,
    /// With `--live`: layer the runner and the agent onto this environment, a gate image recorded
    /// in gate-images.json (python, rust, or one built with `--requirements` or `--cargo-lock`), so
    /// the agent's commands find the repository's toolchain and packages; the record names it.
    #[arg(long = "env", value_name = "NAME", requires = "live")]
    environment: Option<String>,
    /// With `--env`: the build /tmp its turns get, in MiB (1 to 4096, mounted exec, counted in
    /// the turn's memory), instead of the stack's default (512 for rust, none otherwise), e.g.
    /// for an operator's own environment approved by ID that compiles in the turn.
    #[arg(
        long,
        value_name = "MIB",
        requires = "environment",
        value_parser = clap::value_parser!(u16).range(1..=4096)
    )]
    build_tmp_mib: Option<u16>,
    /// Build a gate image instead: the static gate runner on a root file system made of pinned
    /// Debian packages (SHA-256 checked), imported locally; nothing is pulled.
    #[arg(long, value_enum, value_name = "STACK")]
    gate: Option<GateStack>,
    /// With `--gate python`: build an environment image instead, the python gate image plus the
    /// packages of this hash-pinned requirements file (every line `name==version
    /// --hash=sha256:…`, as `pip-compile --generate-hashes` writes it; wheels only, downloaded
    /// once on this host and cached by SHA-256, installed with the build's network off). A second
    /// build of the same inputs is a lookup.
    #[arg(
        long,
        value_name = "FILE",
        requires = "gate",
        conflicts_with = "cargo_lock"
    )]
    requirements: Option<PathBuf>,
    /// With `--gate rust`: build an environment image instead, the rust gate image plus the
    /// crates of this `Cargo.lock` (crates.io packages with checksums only; each `.crate`
    /// downloaded once on this host, checked against the lock and cached by SHA-256, vendored as
    /// `cargo vendor` does), so `cargo test --offline --frozen` builds the repository's
    /// dependencies with the network off. A second build of the same inputs is a lookup.
    #[arg(long, value_name = "FILE", requires = "gate")]
    cargo_lock: Option<PathBuf>,
    /// The environment image's name in gate-images.json, which gate definitions refer to through
    /// its ID (`[a-z][a-z0-9_-]{0,63}`, not python or rust; default python-env or rust-env).
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
}

/// What `image build --gate` builds: a stack's gate image, or an environment on top of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateBuild<'a> {
    /// The stack.
    pub stack: GateStack,
    /// The lockfile (a requirements file for python, `Cargo.lock` for rust) and the
    /// environment's name, for an environment image.
    pub environment: Option<(&'a Path, &'a str)>,
}

/// The build script, relative to a source checkout.
const BUILD_SCRIPT: &str = "images/build.sh";

/// The source checkout to build images from, resolved at run time (never a path recorded when this
/// binary was compiled): `--source` when given, else the nearest directory at or above the current
/// directory that holds `images/build.sh`.
pub(crate) fn source_dir(explicit: Option<&Path>) -> Result<PathBuf, CliError> {
    if let Some(dir) = explicit {
        require_dir("--source", dir)?;
        if !dir.join(BUILD_SCRIPT).is_file() {
            return Err(CliError::usage(
                IMAGE_SOURCE_CODE,
                format!("--source {} holds no {BUILD_SCRIPT}", display_path(dir)),
            ));
        }
        return Ok(dir.to_owned());
    }
    let cwd = std::env::current_dir().map_err(|_| {
        CliError::environment(IMAGE_SOURCE_CODE, "cannot read the current directory")
    })?;
    find_source_from(&cwd).ok_or_else(|| {
        CliError::usage(
            IMAGE_SOURCE_CODE,
            format!(
                "no source checkout holding {BUILD_SCRIPT} at or above the current directory; \
                 run from the checkout or pass --source DIR"
            ),
        )
    })
}

/// The nearest of `start` and its ancestors that holds `images/build.sh`.
fn find_source_from(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| dir.join(BUILD_SCRIPT).is_file())
        .map(Path::to_path_buf)
}

/// Runs `images/build.sh` with the state directory exported; build output goes to stderr.
pub(crate) fn build_images(source: &Path, state: &Path) -> Result<ImagesState, CliError> {
    run_build_script(source, state, &[])?;
    ImagesState::load(state)?.ok_or_else(|| {
        CliError::environment(IMAGE_BUILD_CODE, "images/build.sh recorded no images.json")
    })
}

/// Runs `images/build.sh --live --agent A`; that agent's live image record is read back
/// strictly.
pub(crate) fn build_live_image(
    source: &Path,
    state: &Path,
    agent: turn::Agent,
    environment: Option<&str>,
    build_tmp_mib: Option<u16>,
) -> Result<LiveImageState, CliError> {
    let build_tmp = build_tmp_mib.map(|m| m.to_string());
    let mut args = vec!["--live", "--agent", agent.name()];
    if let Some(mib) = &build_tmp {
        args.extend(["--build-tmp-mib", mib.as_str()]);
    }
    if let Some(env) = environment {
        let known = GateImagesState::load(state)?
            .zip(GateImageName::parse(env))
            .is_some_and(|(s, n)| s.get(&n).is_some());
        if !known {
            return Err(CliError::usage(
                IMAGE_BUILD_CODE,
                "--env names no gate image in gate-images.json (build one with image build --gate)",
            ));
        }
        args.extend(["--env", env]);
    }
    run_build_script(source, state, &args)?;
    LiveImageState::load_for(state, agent)?.ok_or_else(|| {
        CliError::environment(
            IMAGE_BUILD_CODE,
            "images/build.sh --live recorded no live image record",
        )
    })
}

/// Runs `images/build.sh --gate STACK [--requirements FILE | --cargo-lock FILE] [--name NAME]`; the
/// gate image's record
/// is read back strictly.
pub(crate) fn build_gate_image(
    source: &Path,
    state: &Path,
    build: GateBuild<'_>,
) -> Result<(GateImageName, GateImageRecord), CliError> {
    let stack = build.stack.as_str();
    let mut record_name = stack;
    match build.environment {
        None => run_build_script(source, state, &["--gate", stack])?,
        Some((lockfile, env_name)) => {
            let flag = match build.stack {
                GateStack::Python => "--requirements",
                GateStack::Rust => "--cargo-lock",
            };
            if GateImageName::parse(env_name).is_none()
                || env_name == "python"
                || env_name == "rust"
            {
                return Err(CliError::usage(
                    IMAGE_BUILD_CODE,
                    "--name must be [a-z][a-z0-9_-]{0,63}, other than python and rust",
                ));
            }
            if !lockfile.is_file() {
                return Err(CliError::usage(
                    IMAGE_BUILD_CODE,
                    format!("{flag} {} is not a file", display_path(lockfile)),
                ));
            }
            // The script runs in the source checkout: a relative path is the caller's.
            let lockfile = std::path::absolute(lockfile).map_err(|_| {
                CliError::environment(IMAGE_BUILD_CODE, format!("cannot resolve {flag}"))
            })?;
            let lockfile = lockfile.to_str().ok_or_else(|| {
                CliError::usage(IMAGE_BUILD_CODE, format!("{flag} must be a UTF-8 path"))
            })?;
            run_build_script(
                source,
                state,
                &["--gate", stack, flag, lockfile, "--name", env_name],
            )?;
            record_name = env_name;
        }
    }
    let missing = || {
        CliError::environment(
            IMAGE_BUILD_CODE,
            "images/build.sh --gate recorded no gate image",
        )
    };
    let name = GateImageName::parse(record_name).ok_or_else(missing)?;
    let record = GateImagesState::load(state)?
        .and_then(|s| s.get(&name).cloned())
        .ok_or_else(missing)?;
    Ok((name, record))
}

/// Checks that the daemon holds an image with exactly `id`, then records it as gate image `name`
/// (replacing an earlier record of that name, keeping the others).
fn approve_gate_image(
    args: &ApproveArgs,
    state: &Path,
) -> Result<(GateImageName, GateImageRecord), CliError> {
    let name = GateImageName::parse(&args.gate).ok_or_else(|| {
        CliError::usage(IMAGE_APPROVE_CODE, "--gate must be [a-z][a-z0-9_-]{0,63}")
    })?;
    let id: ImageId = args.id.parse().map_err(|_| {
        CliError::usage(
            IMAGE_APPROVE_CODE,
            "--id must be sha256: and 64 lowercase hex",
        )
    })?;
    let reference: ImageReference = id.as_str().parse().map_err(|_| {
        CliError::usage(
            IMAGE_APPROVE_CODE,
            "--id must be sha256: and 64 lowercase hex",
        )
    })?;
    let rt = tokio_runtime()?;
    let present = rt.block_on(async {
        let docker = args.docker.connect().await?;
        Ok::<_, CliError>(
            docker
                .inspect_image(&reference)
                .await
                .is_ok_and(|facts| facts.id == id.as_str()),
        )
    })?;
    if !present {
        return Err(CliError::rejected(
            IMAGE_APPROVE_CODE,
            "the daemon has no image with this ID",
        ));
    }
    let mut gates = GateImagesState::load(state)?.unwrap_or_default();
    let record = GateImageRecord::approved(id);
    gates.insert(name.clone(), record.clone());
    // Atomically, 0600, the state folder 0700, as images/build.sh's record_state does.
    gates.save(state).map_err(|_| {
        CliError::environment(
            STATE_CODE,
            format!("cannot write {}", state::GATE_IMAGES.name),
        )
    })?;
    Ok((name, record))
}

fn gate_text(gate: &GateImageName, record: &GateImageRecord, state: &Path) -> String {
    let mut text = format!(
        "gate image:   {}\nimage id:     {}\norigin:       {}\n",
        name(gate.as_str()),
        name(record.image_id().as_str()),
        match record.origin() {
            GateImageOrigin::Built => "built",
            GateImageOrigin::Approved => "approved",
        }
    );
    if let Some(tag) = record.image() {
        text.push_str(&format!("tag:          {}\n", name(tag.as_str())));
    }
    if let (Some(pins), Some(count)) = (record.pins_sha256(), record.packages()) {
        text.push_str(&format!("pins:         {count} packages ({pins})\n"));
    }
    if let Some(env) = record.environment() {
        text.push_str(&format!(
            "environment:  {} {} (lockfile {}), on {}\ninputs:       {}\n",
            env.packages,
            match env.stack {
                EnvironmentStack::Python => "wheels",
                EnvironmentStack::Rust => "crates",
            },
            env.lockfile_sha256,
            name(env.base_image_id.as_str()),
            env.inputs_sha256
        ));
    }
    if let Some(t) = record.toolchain() {
        text.push_str(&format!(
            "toolchain:    {} ({})\n",
            name(&t.rustc),
            t.manifest_sha256
        ));
    }
    text.push_str(&format!(
        "recorded in:  {}\n",
        display_path(&state::GATE_IMAGES.path_in(state))
    ));
    text
}

fn run_build_script(source: &Path, state: &Path, args: &[&str]) -> Result<(), CliError> {
    let script = source.join(BUILD_SCRIPT);
    tracing::info!("image: building with {}", display_path(&script));
    let status = Command::new("bash")
        .arg(&script)
        .args(args)
        .current_dir(source)
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .map_err(|_| CliError::environment(IMAGE_BUILD_CODE, "cannot run bash"))?;
    if !status.success() {
        return Err(CliError::environment(
            IMAGE_BUILD_CODE,
            "images/build.sh failed",
        ));
    }
    Ok(())
}

pub(crate) fn run(command: &ImageCommand) -> Result<Outcome, CliError> {
    match command {
        ImageCommand::Approve(args) => {
            let state = state_dir()?;
            let (gate, record) = approve_gate_image(args, &state)?;
            let text = gate_text(&gate, &record, &state);
            let json = serde_json::json!({ "gate": gate, "record": record });
            Ok(Outcome { json, text })
        }
        ImageCommand::Build(BuildArgs {
            gate: Some(stack),
            source,
            requirements,
            cargo_lock,
            name: env_name,
            ..
        }) => {
            let lockfile = match (stack, requirements, cargo_lock) {
                (GateStack::Python, Some(r), None) => Some(r.as_path()),
                (GateStack::Rust, None, Some(l)) => Some(l.as_path()),
                (_, None, None) if env_name.is_none() => None,
                (_, None, None) => {
                    return Err(CliError::usage(
                        IMAGE_BUILD_CODE,
                        "--name needs --requirements or --cargo-lock",
                    ));
                }
                (GateStack::Python, ..) => {
                    return Err(CliError::usage(
                        IMAGE_BUILD_CODE,
                        "--cargo-lock needs --gate rust",
                    ));
                }
                (GateStack::Rust, ..) => {
                    return Err(CliError::usage(
                        IMAGE_BUILD_CODE,
                        "--requirements needs --gate python",
                    ));
                }
            };
            let state = state_dir()?;
            let source = source_dir(source.as_deref())?;
            let default_name = format!("{}-env", stack.as_str());
            let build = GateBuild {
                stack: *stack,
                environment: lockfile
                    .map(|l| (l, env_name.as_deref().unwrap_or(default_name.as_str()))),
            };
            let (gate, record) = build_gate_image(&source, &state, build)?;
            let text = gate_text(&gate, &record, &state);
            let json = serde_json::json!({ "gate": gate, "record": record });
            Ok(Outcome { json, text })
        }
        ImageCommand::Build(args) if args.live => {
            let state = state_dir()?;
            let agent = super::live_args::parse_agent(args.agent.as_deref())?;
            let source = source_dir(args.source.as_deref())?;
            let live = build_live_image(
                &source,
                &state,
                agent,
                args.environment.as_deref(),
                args.build_tmp_mib,
            )?;
            let mut text = format!(
                "live image:   {}\nimage id:     {}\nagent:        {} {} (tarball {})\n",
                name(live.image.as_str()),
                name(live.image_id.as_str()),
                name(&live.agent),
                name(&live.agent_version),
                live.agent_tarball_sha256,
            );
            if let Some(env) = &live.environment {
                text.push_str(&format!(
                    "environment:  {} ({})\n",
                    name(&env.name),
                    name(env.image_id.as_str())
                ));
                if let Some(mib) = env.build_tmp_mib {
                    text.push_str(&format!("build /tmp:   {mib} MiB (exec)\n"));
                }
            }
            text.push_str(&format!(
                "recorded in:  {}\n",
                display_path(&agent.image_record_entry().path_in(&state))
            ));
            let json = serde_json::to_value(&live).unwrap_or_default();
            Ok(Outcome { json, text })
        }
        ImageCommand::Build(args) => {
            let state = state_dir()?;
            let source = source_dir(args.source.as_deref())?;
            let images = build_images(&source, &state)?;
            let text = format!(
                "image:        {}\nimage id:     {}\nhostile:      {} ({})\nrecorded in:  {}\n",
                name(images.image.as_str()),
                name(images.image_id.as_str()),
                name(images.hostile_image.as_str()),
                name(images.hostile_image_id.as_str()),
                display_path(&state::IMAGES.path_in(&state))
            );
            let json = serde_json::to_value(&images).unwrap_or_default();
            Ok(Outcome { json, text })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approve_refuses_malformed_names_and_ids_before_any_docker_call() {
        let state = tempfile::tempdir().unwrap();
        let id = format!("sha256:{}", "a".repeat(64));
        for (gate, id) in [
            ("Bad", id.as_str()),
            ("", id.as_str()),
            ("ok", "sha256:12"),
            ("ok", "a".repeat(64).as_str()),
        ] {
            let args = ApproveArgs {
                gate: gate.to_owned(),
                id: id.to_owned(),
                // No daemon behind it: a Docker call would fail with another code.
                docker: DockerArgs {
                    docker_socket: state.path().join("no.sock"),
                },
            };
            let e = approve_gate_image(&args, state.path()).unwrap_err();
            assert_eq!(e.code, IMAGE_APPROVE_CODE);
        }
        assert!(!state::GATE_IMAGES.path_in(state.path()).exists());
    }

    #[test]
    fn the_source_checkout_is_found_at_run_time() {
        let dir = tempfile::tempdir().unwrap();
        let checkout = dir.path().join("checkout");
        let nested = checkout.join("worker/src");
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(&nested)
            .unwrap();
        std::fs::DirBuilder::new()
            .create(checkout.join("images"))
            .unwrap();
        assert_eq!(find_source_from(&nested), None);
        std::fs::write(checkout.join(BUILD_SCRIPT), "exit 0\n").unwrap();
        assert_eq!(find_source_from(&nested), Some(checkout.clone()));
        assert_eq!(source_dir(Some(&checkout)).unwrap(), checkout);
        let e = source_dir(Some(&nested)).unwrap_err();
        assert_eq!(e.code, IMAGE_SOURCE_CODE);
        let e = source_dir(Some(&dir.path().join("missing"))).unwrap_err();
        assert_eq!(e.code, "PATCH_CANDIDATE_PATH_MISSING");
    }
}
