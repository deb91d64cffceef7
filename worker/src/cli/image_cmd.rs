//! `patch-candidate image build`: builds the proof images with `images/build.sh` (which records
//! their immutable IDs in `<state dir>/images.json`) and prints the approved image ID.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Args, Subcommand};
use worker::ImagesState;

use super::docker_args::state_dir;
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
    /// Source checkout holding `images/build.sh` (default: the checkout this binary was built from).
    #[arg(long)]
    source: Option<PathBuf>,
}

/// The source checkout this binary was built from.
pub(crate) fn default_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs `images/build.sh` with the state directory exported; build output goes to stderr.
pub(crate) fn build_images(source: &Path, state: &Path) -> Result<ImagesState, CliError> {
    let script = source.join("images/build.sh");
    if !script.is_file() {
        return Err(CliError::environment(
            "PATCH_CANDIDATE_IMAGE_BUILD",
            format!("{} not found (pass --source)", script.display()),
        ));
    }
    tracing::info!("image: building with {}", script.display());
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(source)
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .map_err(|_| CliError::environment("PATCH_CANDIDATE_IMAGE_BUILD", "cannot run bash"))?;
    if !status.success() {
        return Err(CliError::environment(
            "PATCH_CANDIDATE_IMAGE_BUILD",
            "images/build.sh failed",
        ));
    }
    ImagesState::load(state)?.ok_or_else(|| {
        CliError::environment(
            "PATCH_CANDIDATE_IMAGE_BUILD",
            "images/build.sh recorded no images.json",
        )
    })
}

pub(crate) fn run(command: &ImageCommand) -> Result<Outcome, CliError> {
    match command {
        ImageCommand::Build(args) => {
            let state = state_dir()?;
            let source = args.source.clone().unwrap_or_else(default_source);
            let images = build_images(&source, &state)?;
            let text = format!(
                "image:        {}\nimage id:     {}\nhostile:      {} ({})\nrecorded in:  {}\n",
                images.image,
                images.image_id,
                images.hostile_image,
                images.hostile_image_id,
                state.join("images.json").display()
            );
            let json = serde_json::to_value(&images).unwrap_or_default();
            Ok(Outcome { json, text })
        }
    }
}
