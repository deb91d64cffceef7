//! `patch-candidate image build`: builds the proof images with `images/build.sh` (which records
//! their immutable IDs in `<state dir>/images.json`) and prints the approved image ID;
//! `image build --live` builds the live image (`images/build.sh --live`, recorded in
//! `<state dir>/live-image.json`).

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Args, Subcommand};
use turn::{ImagesState, LiveImageState};

use super::docker_args::state_dir;
use super::outcome::{IMAGE_BUILD_CODE, IMAGE_SOURCE_CODE, display_path};
use super::paths::require_dir;
use super::render::name;
use super::{CliError, Outcome};

/// `image` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum ImageCommand {
    /// Build the proof (and test-only hostile) images and record their IDs.
    Build(BuildArgs),
}

/// `image build` arguments.
#[derive(Debug, Args)]
pub(crate) struct BuildArgs {
    /// Source checkout holding `images/build.sh` (default: the checkout that contains the current
    /// directory).
    #[arg(long)]
    source: Option<PathBuf>,
    /// Build the live image instead: the runner, codex-acp from the pinned npm tarball (SHA-256
    /// checked), the shared libraries it links and a static busybox.
    #[arg(long)]
    live: bool,
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

/// Runs `images/build.sh --live`; the live image's record is read back strictly.
pub(crate) fn build_live_image(source: &Path, state: &Path) -> Result<LiveImageState, CliError> {
    run_build_script(source, state, &["--live"])?;
    LiveImageState::load(state)?.ok_or_else(|| {
        CliError::environment(
            IMAGE_BUILD_CODE,
            "images/build.sh --live recorded no live-image.json",
        )
    })
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
        ImageCommand::Build(args) if args.live => {
            let state = state_dir()?;
            let source = source_dir(args.source.as_deref())?;
            let live = build_live_image(&source, &state)?;
            let text = format!(
                "live image:   {}\nimage id:     {}\nagent:        {} {} (tarball {})\nrecorded in:  {}\n",
                name(live.image.as_str()),
                name(live.image_id.as_str()),
                name(&live.agent),
                name(&live.agent_version),
                live.agent_tarball_sha256,
                display_path(&state.join("live-image.json"))
            );
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
                display_path(&state.join("images.json"))
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
