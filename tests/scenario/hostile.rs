//! Every hostile image mode and every hostile agent mode is rejected with its code, and no
//! container is left behind.

use std::process::Command;

use crate::proof::{DASHBOARD, Run, pipeline_under, proof_turn_under};
use crate::support::*;

/// Tags `FROM <hostile image>` with `CMD [mode]`; returns (tag, id).
pub fn hostile_mode_image(base: &str, mode: &str) -> (String, String) {
    let tag = format!("patch-candidate-hostile-{mode}:test");
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM {base}\nCMD [\"{mode}\"]\n"),
    )
    .unwrap();
    run_ok(
        Command::new("docker")
            .args(["build", "-q", "-t", &tag])
            .arg(ctx.path()),
    );
    let id = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", &tag])
        .output()
        .unwrap();
    (tag, String::from_utf8(id.stdout).unwrap().trim().to_owned())
}

/// The dashboard task on the hostile image in `mode` (its own output contract broken), under
/// `runtime` (`None`: the daemon default), with the wall budget `wall` seconds.
pub async fn hostile_image_turn(
    runtime: Option<&str>,
    docker: &container::BollardRuntime,
    mode: &str,
    wall: u64,
) -> Run {
    let images = proof_images();
    let (tag, id) = hostile_mode_image(images.hostile_image.as_str(), mode);
    pipeline_under(
        runtime,
        docker,
        &tag,
        &id,
        "Update the dashboard.",
        &[],
        &[],
        Some(&[DASHBOARD]),
        wall,
    )
    .await
}

async fn image_mode(mode: &str, expected: &str, wall: u64) {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let run = hostile_image_turn(None, &docker, mode, wall).await;
    match (expected, run.outcome) {
        ("ok", Ok(outcome)) => assert_eq!(outcome.candidate.changed_files().len(), 1),
        (code, Err(err)) => {
            assert_eq!(err.code(), code, "mode {mode}");
            assert!(
                !err.to_string().contains("export default"),
                "mode {mode} quoted source"
            );
        }
        (code, Ok(_)) => panic!("mode {mode} was accepted, expected {code}"),
    }
    assert_clean_and_tally(
        &docker,
        &format!("docker_hostile_image_{}", mode.replace('-', "_")),
    )
    .await;
}

macro_rules! image_modes {
    ($($name:ident => ($mode:literal, $code:literal, $wall:literal);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() { image_mode($mode, $code, $wall).await; }
    )*};
}

image_modes! {
    docker_hostile_image_valid => ("valid", "ok", 60);
    docker_hostile_image_malformed_json => ("malformed-json", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_duplicate_keys => ("duplicate-keys", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_extra_key => ("extra-key", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_invalid_base64 => ("invalid-base64", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_non_canonical_archive => ("non-canonical-archive", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_wrong_entry_set => ("wrong-entry-set", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_oversized_output => ("oversized-output", "REPOSITORY_DOCKER_OUTPUT_LIMIT", 60);
    docker_hostile_image_exit_nonzero => ("exit-nonzero", "REPOSITORY_DOCKER_WORKER_FAILED", 60);
    docker_hostile_image_print_nothing => ("print-nothing", "REPOSITORY_DOCKER_INVALID_OUTPUT", 60);
    docker_hostile_image_sleep_forever => ("sleep-forever", "REPOSITORY_DOCKER_TIMEOUT", 2);
    docker_hostile_image_flood_stderr => ("flood-stderr", "REPOSITORY_DOCKER_OUTPUT_LIMIT", 60);
}

async fn agent_mode(mode: &str, expected: &str) {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let task = format!("Update the dashboard.\nmode: {mode}");
    let run = proof_turn_under(None, &docker, &task, &[], &[], Some(&[DASHBOARD])).await;
    let err = match run.outcome {
        Ok(outcome) => panic!(
            "agent mode {mode} produced a candidate: {:?}",
            outcome.digest
        ),
        Err(err) => err,
    };
    assert_eq!(err.code(), expected, "agent mode {mode}: {err}");
    assert_clean_and_tally(
        &docker,
        &format!("docker_hostile_agent_{}", mode.replace('-', "_")),
    )
    .await;
}

macro_rules! agent_modes {
    ($($name:ident => ($mode:literal, $code:literal);)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() { agent_mode($mode, $code).await; }
    )*};
}

agent_modes! {
    docker_hostile_agent_edit_read_only => ("edit-read-only", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_delete_read_only => ("delete-read-only", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_create_ungranted => ("create-ungranted", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_delete_ungranted => ("delete-ungranted", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_symlink => ("symlink", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_invalid_utf8 => ("invalid-utf8", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_escape_acp => ("escape-acp", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_escape_fs => ("escape-fs", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_terminal => ("terminal", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_permission => ("permission", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_fork_bomb => ("fork-bomb", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    // The cgroup OOM killer ends the agent; any OOM kill in the container fails the turn closed.
    docker_hostile_agent_memory_bomb => ("memory-bomb", "REPOSITORY_DOCKER_OOM");
    docker_hostile_agent_fill_tmpfs => ("fill-tmpfs", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_flood => ("flood", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_giant_message => ("giant-message", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_hijack_stdout => ("hijack-stdout", "REPOSITORY_PATCH_PROPOSAL_STATUS");
    docker_hostile_agent_exit => ("exit", "REPOSITORY_PATCH_PROPOSAL_STATUS");
}
