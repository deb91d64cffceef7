//! Environment images end to end: `images/build.sh --gate python --requirements FILE` builds the
//! python gate image plus the wheels of a hash-pinned requirements file, offline, and records it;
//! a real project from PyPI whose code imports a third-party package (isodate 0.6.1, which needs
//! `six`) passes its own suite in that image and not in the bare python image; a second build of
//! the same inputs is a lookup. The requirements reader refuses anything but hash-pinned
//! requirements, and an sdist is never built. `images/build.sh --gate rust --cargo-lock FILE`
//! vendors a Cargo.lock's crates the same way: a real crate whose tests need third-party crates
//! (either 1.13.0, whose dev-dependency is serde_json) builds and tests offline in that image and
//! not in the bare rust image. Docker tests are `docker_*`; they need PyPI and crates.io (package
//! registries) for the first download of the wheels, the sdist and the crates.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gate::{EnvironmentStack, GateImageName, GateImagesState};
use vocab::{GateVerdict, Sha256};

use crate::gates::{
    candidate, candidate_for, definitions, env, fixtures, own_containers, rev, run, run_gate, show,
};
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
    build_stack_environment(state, "python", requirements, name)
}

/// `images/build.sh --gate STACK --requirements|--cargo-lock FILE --name NAME`, as
/// [`build_environment`].
fn build_stack_environment(state: &Path, stack: &str, lockfile: &Path, name: &str) -> Output {
    let flag = if stack == "rust" {
        "--cargo-lock"
    } else {
        "--requirements"
    };
    Command::new("bash")
        .arg(checkout().join("images/build.sh"))
        .arg("--bin-dir")
        .arg(target_dir())
        .args(["--gate", stack, flag])
        .arg(lockfile)
        .args(["--name", name])
        .current_dir(checkout())
        .env("PATCH_CANDIDATE_STATE_DIR", state)
        .env(
            "GATE_IMAGE_TAG",
            format!("patch-candidate-gate-{stack}:scenario-env"),
        )
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
    assert_eq!(environment.packages, 1);
    assert_eq!(&environment.base_image_id, python.image_id());
    assert_eq!(
        environment.lockfile_sha256,
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

fn crates_py(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(checkout().join("images/gate/crates.py"))
        .args(args)
        .output()
        .unwrap()
}

/// The lock either's environment is built from.
fn either_lock() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/gates/either-Cargo.lock")
}

#[test]
fn environment_cargo_locks_are_read_strictly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("Cargo.lock");
    let sum = "a".repeat(64);
    let crates_io = "registry+https://github.com/rust-lang/crates.io-index";
    let package = |name: &str, source: &str, checksum: &str| {
        format!(
            "[[package]]\nname = \"{name}\"\nversion = \"1.0.0\"\nsource = \"{source}\"\nchecksum = \"{checksum}\"\n"
        )
    };
    let refused = [
        (
            package("evil", "git+https://example.invalid/evil#abc", &sum),
            "not crates.io",
        ),
        (
            package("evil", "registry+https://example.invalid/index", &sum),
            "not crates.io",
        ),
        (package("evil", crates_io, "md5"), "no SHA-256"),
        (
            "[[package]]\nname = \"../evil\"\nversion = \"1.0.0\"\n".to_owned(),
            "crate name",
        ),
        (
            format!("version = 9\n{}", package("ok", crates_io, &sum)),
            "format",
        ),
        ("not toml at all [[".to_owned(), "not a TOML file"),
        ("version = 4\n".to_owned(), "names no package"),
    ];
    for (text, named) in refused {
        std::fs::write(&file, &text).unwrap();
        let out = crates_py(&["check", file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(3), "{text}");
        let err = stderr_text(&out);
        assert!(err.contains(named), "{text}: {err}");
        assert!(!err.contains("example.invalid"), "{err}");
    }
    // Both lock formats: either's (format 1, checksums in [metadata]) and a format 4 lock with
    // the repository's own package (no source) skipped.
    let out = crates_py(&["check", either_lock().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert_eq!(
        stdout_text(&out).trim(),
        r#"{"packages": 12, "crates": 11}"#
    );
    std::fs::write(
        &file,
        format!(
            "version = 4\n\n[[package]]\nname = \"mine\"\nversion = \"0.1.0\"\n\n{}",
            package("itoa", crates_io, &sum)
        ),
    )
    .unwrap();
    let out = crates_py(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr_text(&out));
    assert_eq!(stdout_text(&out).trim(), r#"{"packages": 2, "crates": 1}"#);
}

#[test]
fn environment_crates_hostile_archives_are_refused_before_anything_is_vendored() {
    // A cached archive with the lock's checksum but an entry outside its folder: the checksum
    // says it is what the lock names, the unpacking still refuses it.
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    let archive = dir.path().join("evil.crate");
    let made = Command::new("python3")
        .arg("-c")
        .arg(
            "import io, sys, tarfile\n\
             with tarfile.open(sys.argv[1], 'w:gz') as t:\n\
             \x20   for name in ('evil-1.0.0/Cargo.toml', 'evil-1.0.0/../../escape'):\n\
             \x20       data = b'x'\n\
             \x20       info = tarfile.TarInfo(name); info.size = len(data)\n\
             \x20       t.addfile(info, io.BytesIO(data))\n",
        )
        .arg(&archive)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr_text(&made));
    let bytes = std::fs::read(&archive).unwrap();
    let sum = Sha256::of(&bytes).to_string();
    let hex = sum.trim_start_matches("sha256:");
    std::fs::write(cache.join(format!("{hex}.crate")), &bytes).unwrap();
    let lock = dir.path().join("Cargo.lock");
    std::fs::write(
        &lock,
        format!(
            "version = 4\n[[package]]\nname = \"evil\"\nversion = \"1.0.0\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{hex}\"\n"
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("out");
    let out = crates_py(&[
        "prepare",
        lock.to_str().unwrap(),
        cache.to_str().unwrap(),
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr_text(&out));
    assert!(stderr_text(&out).contains("outside evil-1.0.0/"));
    assert!(!dir.path().join("escape").exists());
    // A cached archive whose bytes are not the lock's: refused, never unpacked.
    std::fs::write(cache.join(format!("{hex}.crate")), b"tampered").unwrap();
    let out_dir = dir.path().join("out2");
    let out = crates_py(&[
        "prepare",
        lock.to_str().unwrap(),
        cache.to_str().unwrap(),
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(stderr_text(&out).contains("does not have its SHA-256"));
    assert!(!out_dir.join("vendor").exists());
}

const IS_LEFT_OK: &str = "            Left(_) => true,\n            Right(_) => false,";
const IS_LEFT_BROKEN: &str = "            Left(_) => false,\n            Right(_) => false,";

#[tokio::test]
async fn docker_gate_rust_environment_tests_a_crate_with_dependencies_offline() {
    let _lock = docker_lock().lock().await;
    let Some(docker) = crate::support::docker().await else {
        return;
    };
    let state = tempfile::tempdir().unwrap();
    let first = build_stack_environment(state.path(), "rust", &either_lock(), "either");
    assert!(first.status.success(), "{}", stderr_text(&first));
    let records = GateImagesState::load(state.path()).unwrap().unwrap();
    let rust = records.get(&GateImageName::parse("rust").unwrap()).unwrap();
    let record = records
        .get(&GateImageName::parse("either").unwrap())
        .unwrap()
        .clone();
    let environment = record.environment().unwrap();
    assert_eq!(environment.stack, EnvironmentStack::Rust);
    assert_eq!(environment.packages, 11);
    assert_eq!(&environment.base_image_id, rust.image_id());
    assert_eq!(
        environment.lockfile_sha256,
        Sha256::of(&std::fs::read(either_lock()).unwrap())
    );
    assert_eq!(record.toolchain(), rust.toolchain());
    // A second build of the same inputs is a lookup.
    let second = build_stack_environment(state.path(), "rust", &either_lock(), "either");
    assert!(second.status.success(), "{}", stderr_text(&second));
    assert!(stderr_text(&second).contains("is up to date"));
    assert!(!stderr_text(&second).contains("docker build"));

    // The real crate: `cargo test --offline --frozen` (the definition `gate init rust` prints)
    // passes on the pristine tree and names the broken function after the break; in the bare
    // rust image, serde_json cannot be found offline and the baseline cannot pass.
    let repo = fixtures().join("either");
    let pristine = rev(&repo, "pristine");
    let lib = show(&repo, &pristine, "src/lib.rs");
    assert!(lib.contains(IS_LEFT_OK));
    let breaks = candidate_for(
        "cargo-test",
        &pristine,
        &[(
            "src/lib.rs",
            Some(&lib),
            &lib.replacen(IS_LEFT_OK, IS_LEFT_BROKEN, 1),
        )],
    );
    let evaluate = |image: String| {
        let docker = docker.clone();
        let repo = repo.clone();
        let breaks = breaks.clone();
        async move {
            let image_id: container::ImageId = image.parse().unwrap();
            let defs = gate::GateDefinitions::parse(
                gate::init_definitions(gate::GateKind::Rust, &image_id).as_bytes(),
            )
            .unwrap();
            let env = crate::gates::Env {
                docker,
                image,
                state: tempfile::tempdir().unwrap(),
            };
            run_gate(&env, &defs, "cargo-test", &repo, &breaks).await
        }
    };
    let in_env = evaluate(record.image_id().as_str().to_owned()).await;
    let baseline = gate::parse_evidence(in_env.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_eq!(
        baseline.outcome,
        GateVerdict::Passed,
        "{:?} {}",
        baseline.code,
        baseline.log.tail
    );
    assert_eq!(in_env.evidence.outcome, GateVerdict::Failed);
    assert!(
        in_env.evidence.log.tail.contains("is_left"),
        "{}",
        in_env.evidence.log.tail
    );
    let in_bare = evaluate(rust.image_id().as_str().to_owned()).await;
    let bare_baseline = gate::parse_evidence(in_bare.baseline_file.as_ref().unwrap())
        .unwrap()
        .evidence;
    assert_ne!(bare_baseline.outcome, GateVerdict::Passed);
    assert_eq!(own_containers(&docker).await, 0);
    tally("docker_gate_rust_environment_tests_a_crate_with_dependencies_offline");
}
