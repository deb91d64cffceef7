//! The workspace's built binaries (next to this test binary) and what they print.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The directory holding the workspace's built binaries (this test runs from its `deps/`).
pub fn target_dir() -> PathBuf {
    // .../target/<triple>/release/deps/scenario-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_path_buf()
}

/// A binary of another workspace crate, built next to this test binary.
pub fn workspace_bin(name: &str) -> PathBuf {
    let bin = target_dir().join(name);
    assert!(
        bin.is_file(),
        "{} missing: build with `cargo build --release --locked --workspace --bins`",
        bin.display()
    );
    bin
}

/// The `patch-candidate` binary, with none of the caller's Docker host, colour or fault settings.
pub fn bin() -> Command {
    let mut cmd = Command::new(workspace_bin("patch-candidate"));
    cmd.env_remove("DOCKER_HOST")
        .env_remove("NO_COLOR")
        .env_remove("PATCH_CANDIDATE_FAULT");
    cmd
}

/// A command's stdout as text (lossy).
pub fn stdout_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A command's stderr as text (lossy).
pub fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command's stdout as JSON; panics with both streams when it is not.
pub fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "stdout is not JSON: {}\nstderr: {}",
            stdout_text(out),
            stderr_text(out)
        )
    })
}

/// Asserts that `text` contains each of `needles` (the missing one and `text` in the message).
pub fn assert_contains_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
}

/// Asserts that a finished command succeeded (its stderr in the message).
pub fn assert_ok(out: &Output) {
    assert!(out.status.success(), "{}", stderr_text(out));
}

/// Runs `cmd` to the end and asserts that it succeeded (its stderr in the message); returns its
/// output.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", stderr_text(&out));
    out
}

/// `patch-candidate verify --digest DIGEST --repo REPO CANDIDATE`, which must succeed.
pub fn verify_ok(candidate: &Path, digest: &str, repo: &Path) -> Output {
    run_ok(
        bin()
            .args(["verify", "--digest", digest, "--repo"])
            .arg(repo)
            .arg(candidate),
    )
}

/// Runs `cmd` to the end on a blocking thread (the async runtime goes on meanwhile); its output.
pub async fn output_blocking(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}
