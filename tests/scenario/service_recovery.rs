//! `patch-candidate serve` when a host cannot run a job now, or must never run it: a repository
//! that went away, an approved image the daemon does not have, or a tag that names another image
//! snooze the job without spending an attempt (and it completes once the host has what it needs);
//! a stored job whose approval no longer matches the repository's snapshot at the pinned commit
//! fails at once (the dead letter), with no candidate.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

/// Waits until job `id` has an event with `code`.
fn wait_event(state: &Path, database: Option<&str>, id: &str, code: &str, limit: Duration) {
    let started = Instant::now();
    while !event_codes(state, database, id).iter().any(|c| c == code) {
        assert!(
            started.elapsed() < limit,
            "job {id} has no {code} event after {limit:?}: {:?}",
            event_codes(state, database, id)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_snoozes_while_the_repository_is_unreachable() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let db = state.path().join("shared-jobs.sqlite3");
    let db = db.to_str().unwrap();
    let f = Fixture::new();
    let job = submit(state.path(), Some(db), &f, "Update the dashboard.");
    let id = job_id(&job);

    // The repository goes away before a host with no mirror of it yet (its own state directory)
    // claims the job: the job is snoozed. (The submitting host's mirror would still have it.)
    let moved = f.repo.path().with_extension("away");
    std::fs::rename(f.repo.path(), &moved).unwrap();
    let host = state_with_images();
    let service = Service::start(
        host.path(),
        &ServeOpts {
            database: Some(db),
            ..ServeOpts::default()
        },
    );
    service.wait_logged(
        "PATCH_CANDIDATE_SERVICE_REPOSITORY_UNREACHABLE",
        Duration::from_secs(60),
    );
    wait_event(
        state.path(),
        Some(db),
        &id,
        "PATCH_CANDIDATE_JOB_SNOOZED",
        Duration::from_secs(30),
    );
    let waiting = show(state.path(), Some(db), &id);
    assert_ne!(waiting["state"], "failed", "{waiting}");
    assert_eq!(waiting["attempts"], 0, "a snooze spends no attempt");

    // It comes back: the same job completes, once, on its first spent attempt.
    std::fs::rename(&moved, f.repo.path()).unwrap();
    let done = wait_finished(state.path(), Some(db), &id, Duration::from_secs(120));
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["attempts"], 1);
    let store = open_store(state.path(), Some(db)).await;
    let job_id = vocab::JobId::parse(&id).unwrap();
    assert!(store.candidate(&job_id).await.unwrap().is_some());
    assert_eq!(store.usage(&job_id).await.unwrap().len(), 1);
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(host.path()).is_empty());
    tally("docker_service_snoozes_while_the_repository_is_unreachable");
}

/// Builds a variant of the proof image with a label of its own (so a distinct image ID the
/// other tests never use), tagged `tag`; returns its ID.
fn distinct_proof_image(tag: &str, label: &str) -> String {
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!(
            "FROM {}\nLABEL patch-candidate.test.variant=\"{label}\"\n",
            proof_images().image
        ),
    )
    .unwrap();
    docker_cli(
        &["build", "-q", "-t", tag, ctx.path().to_str().unwrap()],
        None,
    );
    docker_cli(&["image", "inspect", "--format", "{{.Id}}", tag], None)
}

/// Waits until job `id` has at least `n` events with `code` (each followed by its snooze), then
/// checks that the job is still waiting with no attempt spent.
fn wait_snoozed_for(state: &Path, db: &str, id: &str, code: &str, n: usize, limit: Duration) {
    let started = Instant::now();
    loop {
        let out = jobs(state, Some(db), &["logs", id]);
        assert!(out.status.success());
        let events = json_of(&out)["events"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let seen = events.iter().filter(|e| e["code"] == code).count();
        if seen >= n {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "job {id}: {seen} {code} events after {limit:?}: {events:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let waiting = show(state, Some(db), id);
    assert_ne!(waiting["state"], "failed", "{waiting}");
    assert_eq!(
        waiting["attempts"], 0,
        "a snooze spends no attempt: {waiting}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_snoozes_while_the_approved_image_is_missing() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let unique = format!("{}-{nanos}", crate::support::process_tag());
    let tag = format!(
        "patch-candidate-proof-snooze:t{}",
        crate::support::process_tag()
    );
    let approved = distinct_proof_image(&tag, &unique);
    let saved = tempfile::tempdir().unwrap();
    let tar = saved.path().join("approved.tar");
    docker_cli(&["save", "-o", tar.to_str().unwrap(), &tag], None);

    let state = state_with_images();
    let db = state.path().join("jobs-image.sqlite3");
    let db = db.to_str().unwrap();
    let f = Fixture::new();
    let out = submit_raw(
        state.path(),
        Some(db),
        f.repo.path().to_str().unwrap(),
        &f.approval("Update the dashboard."),
        &["--image", &tag, "--image-id", &approved],
    );
    assert_ok(&out);
    let id = json_of(&out)["job"]["id"].as_str().unwrap().to_owned();

    // 1. The daemon does not have the approved image at all.
    docker_cli(&["rmi", &tag], None);
    let service = Service::start(
        state.path(),
        &ServeOpts {
            database: Some(db),
            ..ServeOpts::default()
        },
    );
    wait_snoozed_for(
        state.path(),
        db,
        &id,
        "REPOSITORY_DOCKER_IMAGE_MISSING",
        2,
        Duration::from_secs(60),
    );

    // 2. The tag names another image (a host not yet updated): still snoozed, never run.
    let other = distinct_proof_image(&tag, "another build");
    assert_ne!(other, approved);
    wait_snoozed_for(
        state.path(),
        db,
        &id,
        "REPOSITORY_DOCKER_IMAGE_ID_MISMATCH",
        2,
        Duration::from_secs(60),
    );

    // 3. The approved image comes back (the same ID, loaded from its saved copy): one result.
    docker_cli(&["load", "-q", "-i", tar.to_str().unwrap()], None);
    let done = wait_finished(state.path(), Some(db), &id, Duration::from_secs(120));
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["attempts"], 1, "{done}");
    let store = open_store(state.path(), Some(db)).await;
    let job_id = vocab::JobId::parse(&id).unwrap();
    assert!(store.candidate(&job_id).await.unwrap().is_some());
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    let _ = Command::new("docker")
        .args(["rmi", "-f", &tag, &other])
        .output();
    tally("docker_service_snoozes_while_the_approved_image_is_missing");
}

/// Rewrites the stored approval of job `id` so that it names another snapshot digest, keeping
/// every binding of the row consistent (approval digest, snapshot digest): only the repository
/// itself can now tell that the approval does not match it.
fn rebind_to_other_snapshot(db: &str, id: &str) {
    let script = r#"
import hashlib, json, sqlite3, sys
db, job = sys.argv[1], sys.argv[2]
con = sqlite3.connect(db)
spec_json, approval = con.execute("SELECT spec_json, approval_json FROM jobs WHERE id = ?", (job,)).fetchone()
context = json.loads(approval)
old = context["snapshot_digest"]
prefix = old[: len(old) - 64]
context["snapshot_digest"] = prefix + ("1" if old[-1] != "1" else "2") * 64
raw = json.dumps(context, sort_keys=True).encode()
spec = json.loads(spec_json)
spec["approval_digest"] = "sha256:" + hashlib.sha256(raw).hexdigest()
spec["snapshot_digest"] = context["snapshot_digest"]
con.execute("UPDATE jobs SET spec_json = ?, approval_json = ? WHERE id = ?", (json.dumps(spec), raw, job))
con.commit()
"#;
    let status = Command::new("python3")
        .args(["-c", script, db, id])
        .status()
        .unwrap();
    assert!(status.success(), "rewriting the stored approval failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_service_fails_an_approval_whose_snapshot_no_longer_matches() {
    let Some((docker, _guard)) = locked_docker().await else {
        return;
    };
    let state = state_with_images();
    let db = state.path().join("jobs-mismatch.sqlite3");
    let db = db.to_str().unwrap();
    let f = Fixture::new();
    let job = submit(state.path(), Some(db), &f, "Update the dashboard.");
    let id = job_id(&job);
    let max_attempts = job["job"]["max_attempts"].as_u64().unwrap();
    assert!(max_attempts > 1, "the test needs a job that could retry");
    rebind_to_other_snapshot(db, &id);

    let service = Service::start(
        state.path(),
        &ServeOpts {
            database: Some(db),
            ..ServeOpts::default()
        },
    );
    let failed = wait_finished(state.path(), Some(db), &id, Duration::from_secs(120));
    assert_eq!(failed["state"], "failed", "{failed}");
    // Straight to the dead letter: one attempt, a repository rejection code, no candidate.
    assert_eq!(failed["attempts"], 1, "{failed}");
    let code = failed["last_error"]["code"].as_str().unwrap_or_default();
    assert!(code.starts_with("REPOSITORY_"), "{failed}");
    assert!(failed["candidate_digest"].is_null(), "{failed}");
    let store = open_store(state.path(), Some(db)).await;
    let job_id = vocab::JobId::parse(&id).unwrap();
    assert!(store.candidate(&job_id).await.unwrap().is_none());
    // It stays failed: no further claim of a dead letter.
    std::thread::sleep(Duration::from_secs(2));
    let later = show(state.path(), Some(db), &id);
    assert_eq!(later["state"], "failed");
    assert_eq!(later["attempts"], 1);
    assert_eq!(service.stop().code(), Some(0));
    assert_no_turn_containers(&docker).await;
    assert!(staging_left(state.path()).is_empty());
    tally("docker_service_fails_an_approval_whose_snapshot_no_longer_matches");
}
