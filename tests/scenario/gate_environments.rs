//! Environment images end to end: `images/build.sh --gate python --requirements FILE` builds the
//! python gate image plus the wheels of a hash-pinned requirements file, offline, and records it;
//! a real project from PyPI whose code imports a third-party package (isodate 0.6.1, which needs
//! `six`) passes its own suite in that image and not in the bare python image; a second build of
//! the same inputs is a lookup. The requirements reader refuses anything but hash-pinned
//! requirements, and an sdist is never built. Docker tests are `docker_*`; they need PyPI (a
//! package registry) for the first download of the wheels and the sdist.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gate::{EnvironmentStack, GateImageName, GateImagesState};
use vocab::{GateVerdict, Sha256};

use crate::gates::{candidate, definitions, env, fixtures, own_containers, rev, run, show};
use crate::support::{docker_lock, stderr_text, stdout_text, tally, target_dir};

/// The requirements of isodate's environment (`six`, hash-pinned).
fn requirements() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gates/isodate-requirements.txt")
}

fn checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn wheels_py(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(checkout().join("images/gate/wheels.py"))
        .args(args)
        .output()
        .unwrap()
}

/// `images/build.sh --gate python --requirements FILE --name NAME` with this test's own tags and
/// state directory, from the binaries under test (no cargo run).
fn build_environment(state: &Path, requirements: &Path, name: &str) -> Output {
    Command::new("bash")
        .arg(checkout().join("images/build.sh"))
        .arg("--bin-dir")
        .arg(target_dir())
        .args(["--gate", "python", "--requirements"])
        .arg(requirements)
        .args(["--name", name])
        .current_dir(checkout())
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .env("GATE_IMAGE_TAG", "patch-candidate-gate-python:scenario-env")
        .env(
            "ENV_IMAGE_TAG",
            format!("patch-candidate-env-{name}:scenario"),
        )
        .output()
        .unwrap()
}

#[test]
fn environment_requirements_are_read_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requirements.txt");
    let hash = format!("--hash=sha256:{}", "a".repeat(64));
    let secret = "s3cr3t-in-a-requirement";
    let refused = [
        (format!("six==1.16.0\n{secret}>=1 {hash}\n"), "line 1"),
        (format!("# c\nsix>=1.16.0 {hash}\n"), "line 2"),
        (format!("-e ./{secret} {hash}\n"), "line 1"),
        (
            format!("--index-url https://{secret}.invalid/ {hash}\n"),
            "line 1",
        ),
        (
            format!("six @ https://{secret}.invalid/six.whl {hash}\n"),
            "line 1",
        ),
        (format!("six==1.* {hash}\n"), "line 1"),
        (
            format!("six==1.16.0 --hash=md5:{}\n", "a".repeat(32)),
            "line 1",
        ),
        (
            format!("six==1.16.0 {hash}\nSix==1.16.0 {hash}\n"),
            "line 2",
        ),
        ("# nothing\n".to_owned(), "names no requirement"),
    ];
    for (text, named) in refused {
        std::fs::write(&file, &text).unwrap();
        let out = wheels_py(&["check", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(3), "{text}");
        let err = stderr_text(&out);
        assert!(err.contains(named), "{text}: {err}");
        assert!(!err.contains(secret) && !err.contains("1.16.0"), "{err}");
    }
    // pip-compile --generate-hashes output as it stands: continuation lines, comments, extras,
    // markers, several hashes.
    let compiled = format!(
        "# via pip-compile\nsix==1.16.0 \\\n    {hash} \\\n    --hash=sha256:{}\n    # via isodate\n\
         requests[socks]==2.32.3 ; python_version >= \"3.8\" \\\n    {hash}\n",
        "b".repeat(64)
    );
    std::fs::write(&file, compiled).unwrap();
    let out = wheels_py(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert_eq!(stdout_text(&out).trim(), r#"{"requirements": 2}"#);
}

#[test]
fn environment_wheels_only_an_sdist_is_never_built() {
    // docopt 0.6.2 is published as an sdist only: building it would run its setup.py on the host.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requirements.txt");
    std::fs::write(
        &file,
        "docopt==0.6.2 --hash=sha256:49b3a825280bd66b3aa83585ef59c4a8c82f2c8a522dbe754a8bc8d08c85c491\n",
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let out_dir = dir.path().join("out");
    let pip_pin = checkout().join("images/gate/pip.pin");
    let out = wheels_py(&[
        "prepare",
        file.to_str().unwrap(),
        pip_pin.to_str().unwrap(),
        cache.to_str().unwrap(),
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_text(&out));
    assert!(stderr_text(&out).contains("sdists are refused"));
    assert!(!out_dir.join("wheels").exists());
    // Nothing but checked wheels is ever filed in the cache.
    for entry in walk(&cache) {
        let name = entry.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            !name.ends_with(".tar.gz") && !name.ends_with(".zip"),
            "{name}"
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

const NEG_OK: &str = "negduration = Duration(years=-self.years, months=-self.months)";
const NEG_BROKEN: &str = "negduration = Duration(years=self.years, months=-self.months)";
const DURATION: &str = "src/isodate/duration.py";

#[tokio::test]
async fn docker_gate_environment_image_runs_a_project_with_dependencies() {
    let _lock = docker_lock().lock().await;
    let Some(bare) = env().await else { return };
    let state = tempfile::tempdir().unwrap();

    // The build: the environment recorded with what it was built from.
    let first = build_environment(state.path(), &requirements(), "isodate");
    assert!(first.status.success(), "{}", stderr_text(&first));
    let records = GateImagesState::load(state.path()).unwrap().unwrap();
    let python = records
        .get(&GateImageName::parse("python").unwrap())
        .unwrap();
    let record = records
        .get(&GateImageName::parse("isodate").unwrap())
        .unwrap()
        .clone();
    let environment = record.environment().unwrap();
    assert_eq!(environment.stack, EnvironmentStack::Python);
    assert_eq!(environment.wheels, 1);
    assert_eq!(&environment.base_image_id, python.image_id());
    assert_eq!(
        environment.requirements_sha256,
        Sha256::of(&std::fs::read(requirements()).unwrap())
    );
    assert!(python.environment().is_none());
    let image = record.image_id().as_str().to_owned();
    assert!(stdout_text(&first).contains(&image));

    // A second build of the same inputs is a lookup: the same ID, no docker build.
    let second = build_environment(state.path(), &requirements(), "isodate");
    assert!(second.status.success(), "{}", stderr_text(&second));
    assert!(
        stderr_text(&second).contains("is up to date"),
        "{}",
        stderr_text(&second)
    );
    assert!(!stderr_text(&second).contains("docker build"));
    let again = GateImagesState::load(state.path()).unwrap().unwrap();
    assert_eq!(
        again.get(&GateImageName::parse("isodate").unwrap()),
        Some(&record)
    );

    // The real project: its suite passes in the environment, and cannot even be collected in
    // the bare python image (its code imports six).
    let repo = fixtures().join("isodate");
    let pristine = rev(&repo, "pristine");
    let duration = show(&repo, &pristine, DURATION);
    assert!(duration.contains(NEG_OK));
    let breaks = candidate(
        &pristine,
        &[(
            DURATION,
            Some(&duration),
            &duration.replace(NEG_OK, NEG_BROKEN),
        )],
    );
    let in_env = run(&bare, &definitions(&image, 300, ""), &repo, &breaks).await;
    let baseline = gate::parse_evidence(in_env.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_eq!(baseline.outcome, GateVerdict::Passed, "{:?}", baseline.code);
    let tests = baseline.tests.unwrap();
    assert!(tests.passed >= 15 && tests.failed == 0, "{tests:?}");
    assert_eq!(in_env.evidence.outcome, GateVerdict::Failed);
    let c = in_env.evidence.comparison.clone().unwrap();
    assert!(c.regression, "{c:?}");
    assert!(
        c.new_failures.ids.iter().any(|id| id.contains("test_neg")),
        "{:?}",
        c.new_failures.ids
    );

    let bare_state = tempfile::tempdir().unwrap();
    let bare_env = crate::gates::Env {
        docker: bare.docker.clone(),
        image: bare.image.clone(),
        state: bare_state,
    };
    let in_bare = run(
        &bare_env,
        &definitions(&bare.image, 300, ""),
        &repo,
        &breaks,
    )
    .await;
    let bare_baseline = gate::parse_evidence(in_bare.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_ne!(bare_baseline.outcome, GateVerdict::Passed);
    assert_eq!(own_containers(&bare.docker).await, 0);
    tally("docker_gate_environment_image_runs_a_project_with_dependencies");
}
