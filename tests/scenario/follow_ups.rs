//! Iterating to green through the binary (`run --gates --max-follow-ups`), on the real daemon:
//! the proof agent's turn, the pytest gate in its sealed container, and follow-ups that continue
//! the judged candidate with the failing test ids in their prompt. The repository's own test
//! decides what "green" means:
//!
//! * `answers`: the last edit of `NOTES.md` must answer a review that continued the earlier
//!   attempt and named this very test. The baseline passes (no edit), the first attempt fails
//!   (a plain edit, a new failure), the follow-up passes only if it started from the first
//!   attempt's tree and its prompt carried the failing id.
//! * `never`: any edit fails, so the chain stops at its cap.
//! * `edit-once`: the agent edits only on the first attempt, so the follow-up changes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use crate::gates::{CALC, TESTS, env};
use crate::support::{approve_with_pytest, docker_lock, git_repo, run_ok, tally, verify_ok};

/// The repository's tests of `NOTES.md` for each scenario.
const ANSWERS: &str = r#"
def edits():
    return [l for l in open("NOTES.md").read().splitlines() if "fake-agent: edited" in l]


def test_last_edit_answers_the_review():
    e = edits()
    assert not e or (
        "after review (continued;" in e[-1]
        and "test_notes::test_last_edit_answers_the_review" in e[-1]
    )
"#;
const NEVER: &str = r#"
def test_notes_stay_as_they_are():
    assert "fake-agent" not in open("NOTES.md").read()
"#;

struct Chain {
    json: serde_json::Value,
    text: String,
    repo: tempfile::TempDir,
}

/// `run --gates --max-follow-ups 2` on a repository whose `test_notes.py` is `notes_test`, with
/// `task` (the approval's request), as JSON and as text.
fn chain(env: &crate::gates::Env, notes_test: &str, task: &str) -> Chain {
    let bin = || {
        let mut c = crate::support::bin();
        c.env("PATCH_CANDIDATE_STATE_DIR", env.state.path());
        c
    };
    std::fs::write(
        env.state.path().join("images.json"),
        serde_json::to_vec(&crate::support::proof_images()).unwrap(),
    )
    .unwrap();
    let (repo, _) = git_repo(&BTreeMap::from([
        ("calc.py", CALC.to_owned()),
        ("test_calc.py", TESTS.to_owned()),
        ("test_notes.py", notes_test.to_owned()),
        ("NOTES.md", "notes\n".to_owned()),
    ]));
    let work = tempfile::tempdir().unwrap();
    let (gates, approval) = approve_with_pytest(
        env.state.path(),
        work.path(),
        &env.image,
        repo.path(),
        "NOTES.md",
        task,
    );
    // One store per form (the work directory goes with its guard).
    let args = |json: bool| {
        let store = work
            .path()
            .join(if json { "store-json" } else { "store-text" });
        let mut c = bin();
        if json {
            c.arg("--json");
        }
        c.args(["run", "--repo"])
            .arg(repo.path())
            .arg("--approval")
            .arg(&approval)
            .arg("--store")
            .arg(&store)
            .arg("--gates")
            .arg(&gates)
            .args(["--max-follow-ups", "2"]);
        c
    };
    let out = run_ok(&mut args(true));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The text form of the same chain, into a second store: the same steps.
    let text = String::from_utf8(run_ok(&mut args(false)).stdout).unwrap();
    Chain { json, text, repo }
}

fn attempts(json: &serde_json::Value) -> Vec<(Option<String>, String)> {
    json["chain"]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let verdict = a["gates"][0]["outcome"].as_str().map(str::to_owned);
            (verdict, a["digest"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// The final candidate's `NOTES.md` post-image, checked against the repository at its baseline:
/// one diff against the pinned commit that `git apply` accepts.
fn final_notes(chain: &Chain, work: &Path) -> String {
    let candidate = &chain.json["candidate"];
    let file = work.join("candidate.json");
    std::fs::write(&file, serde_json::to_vec(candidate).unwrap()).unwrap();
    verify_ok(
        &file,
        chain.json["digest"].as_str().unwrap(),
        chain.repo.path(),
    );
    let files = candidate["changed_files"].as_array().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0]["path"], "NOTES.md");
    assert_eq!(files[0]["op"], "update");
    files[0]["content"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_follow_up_continues_the_judged_candidate_until_the_gate_is_green() {
    let _lock = docker_lock().lock().await;
    let Some(env) = env().await else { return };
    let work = tempfile::tempdir().unwrap();

    let green = chain(&env, ANSWERS, "Tidy the notes");
    assert_eq!(green.json["chain"]["end"], "green", "{}", green.json);
    assert_eq!(green.json["chain"]["follow_ups"], 1);
    let steps = attempts(&green.json);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].0.as_deref(), Some("failed"));
    assert_eq!(steps[1].0.as_deref(), Some("passed"));
    assert_ne!(steps[0].1, steps[1].1);
    assert_eq!(green.json["digest"].as_str(), Some(steps[1].1.as_str()));
    assert_eq!(green.json["gates"][0]["outcome"], "passed");
    // The follow-up started from the first attempt's tree (its edit is still there) and its
    // prompt carried the verdict and the failing id; the diff is against the baseline.
    let notes = final_notes(&green, work.path());
    let edits: Vec<&str> = notes
        .lines()
        .filter(|l| l.contains("fake-agent: edited"))
        .collect();
    assert_eq!(edits.len(), 2, "{notes}");
    assert_eq!(edits[0], "// fake-agent: edited NOTES.md");
    assert!(
        edits[1].starts_with(
            "// fake-agent: edited NOTES.md after review (continued; gates: pytest: failed; \
             new failures: test_notes::test_last_edit_answers_the_review; note: (none))"
        ),
        "{}",
        edits[1]
    );
    assert!(notes.starts_with("notes\n"));
    assert!(green.text.contains("gate pytest: failed"), "{}", green.text);
    assert!(green.text.contains("follow-up 1 of 2: continuing sha256:"));
    assert!(
        green
            .text
            .contains("chain: green after 1 follow-up(s); last candidate sha256:")
    );

    // A gate that never goes green: the first attempt and two follow-ups, then the cap.
    let capped = chain(&env, NEVER, "Tidy the notes");
    assert_eq!(
        capped.json["chain"]["end"], "follow_up_cap",
        "{}",
        capped.json
    );
    let steps = attempts(&capped.json);
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|s| s.0.as_deref() == Some("failed")));
    let notes = final_notes(&capped, work.path());
    assert_eq!(notes.matches("fake-agent: edited").count(), 3, "{notes}");
    assert!(
        capped
            .text
            .contains("chain: stopped at the follow-up cap after 2 follow-up(s)")
    );

    // A follow-up that changes nothing ends the chain without another gate run.
    let still = chain(&env, NEVER, "Tidy the notes\nmode: edit-once");
    assert_eq!(still.json["chain"]["end"], "no_change", "{}", still.json);
    let steps = attempts(&still.json);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].0.as_deref(), Some("failed"));
    assert_eq!(steps[1].0, None);
    assert_eq!(
        final_notes(&still, work.path())
            .matches("fake-agent")
            .count(),
        1
    );

    crate::support::assert_no_turn_containers(&env.docker).await;
    tally("docker_follow_up_continues_the_judged_candidate_until_the_gate_is_green");
}
