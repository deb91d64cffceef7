//! Structural guarantees: the server's dependency graph (as `cargo build -p mcp` resolves it, which
//! is how the shipped binary is built) holds no Docker client, no `worker`, no database, and none
//! of the code that writes files or spawns processes (the lower crates without their `effects`
//! feature, tokio without `process` and `fs`); the server's own code is kept from the writing and
//! spawning APIs of std and cap-std by mcp/clippy.toml; and the fixture bundle holds no transport
//! configuration.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

/// `cargo tree -p <package>` over normal and build edges: every package with its enabled features.
fn tree(package: &str) -> BTreeMap<String, BTreeSet<String>> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let mut command = Command::new(env!("CARGO"));
    command
        .args([
            "tree",
            "-p",
            package,
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}|{f}",
            "--locked",
            "--manifest-path",
        ])
        .arg(&manifest);
    let stdout = crate::support::stdout_of(&mut command);
    let mut packages: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8(stdout).unwrap().lines() {
        let (package, features) = line.split_once('|').unwrap();
        let name = package.split_whitespace().next().unwrap().to_owned();
        let features = features.trim_end_matches(" (*)");
        packages.entry(name).or_default().extend(
            features
                .split(',')
                .filter(|f| !f.is_empty())
                .map(str::to_owned),
        );
    }
    packages
}

/// Crates that talk to Docker, hold the job store, run turns or exist to create files.
const BANNED_CRATES: &[&str] = &[
    "container",
    "turn",
    "service",
    "patch-candidate",
    "turn-runner",
    "gate-runner",
    "scenario-tests",
    "bollard",
    "hyper",
    "reqwest",
    "rusqlite",
    "libsqlite3-sys",
    "agent-client-protocol",
    "tempfile",
];
/// Our crates whose side-effecting code sits behind `effects`.
const LOWER_CRATES: &[&str] = &["snapshot", "archive", "finalizer"];
/// tokio features whose code spawns processes or writes files.
const BANNED_TOKIO_FEATURES: &[&str] = &["process", "fs"];

#[test]
fn dependency_graph_cannot_write_files_or_spawn_processes() {
    let packages = tree("mcp");
    for needed in ["mcp", "rmcp", "tokio", "cap-std"]
        .iter()
        .chain(LOWER_CRATES)
    {
        assert!(
            packages.contains_key(*needed),
            "{needed} missing: {packages:?}"
        );
    }
    for banned in BANNED_CRATES {
        assert!(
            !packages.contains_key(*banned),
            "{banned} is in the mcp dependency graph"
        );
    }
    for lower in LOWER_CRATES {
        assert_eq!(
            packages[*lower],
            BTreeSet::new(),
            "{lower} is built with features for mcp"
        );
    }
    let tokio = &packages["tokio"];
    for feature in BANNED_TOKIO_FEATURES {
        assert!(
            !tokio.contains(*feature),
            "tokio has `{feature}`: {tokio:?}"
        );
    }
}

/// The same query sees what it bans where it is present: the command line's graph has the lower crates
/// with `effects`, tokio with `process` and `fs`, and the Docker client and job store.
#[test]
fn dependency_graph_check_sees_effects_where_they_are() {
    let packages = tree("patch-candidate");
    for lower in LOWER_CRATES {
        assert!(
            packages[*lower].contains("effects"),
            "{lower}: {:?}",
            packages[*lower]
        );
    }
    for feature in BANNED_TOKIO_FEATURES {
        assert!(
            packages["tokio"].contains(*feature),
            "tokio lacks {feature}"
        );
    }
    for crate_name in ["bollard", "rusqlite", "tempfile"] {
        assert!(packages.contains_key(crate_name), "{crate_name} missing");
    }
}

/// mcp/clippy.toml keeps the writing and spawning APIs of std and cap-std out of the server's
/// own code (clippy runs with `-D warnings` in CI).
#[test]
fn clippy_disallows_writing_and_spawning_apis() {
    let config =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("clippy.toml")).unwrap();
    let listed: BTreeSet<&str> = config
        .lines()
        .filter_map(|l| l.trim().strip_prefix("{ path = \""))
        .filter_map(|l| l.split('"').next())
        .collect();
    for required in [
        "std::fs::write",
        "std::fs::File::create",
        "std::fs::OpenOptions::write",
        "std::fs::OpenOptions::create",
        "std::fs::OpenOptions::append",
        "std::fs::OpenOptions::truncate",
        "std::fs::remove_file",
        "std::fs::rename",
        "std::fs::create_dir_all",
        "std::os::unix::fs::symlink",
        "std::process::Command::new",
        "std::process::Command::spawn",
        "std::os::unix::process::CommandExt::exec",
        "cap_std::fs::Dir::write",
        "cap_std::fs::Dir::create",
        "cap_std::fs::Dir::create_dir",
        "cap_std::fs::Dir::remove_file",
        "cap_std::fs::Dir::rename",
        "cap_std::fs::Dir::hard_link",
        "cap_std::fs::Dir::symlink",
        "cap_std::fs::OpenOptions::write",
        "cap_std::fs::OpenOptions::create",
        "cap_std::fs::OpenOptions::append",
        "cap_std::fs::OpenOptions::truncate",
    ] {
        assert!(
            listed.contains(required),
            "mcp/clippy.toml lacks {required}"
        );
    }
}

#[test]
fn fixture_bundle_has_no_transport_configuration() {
    let root = crate::support::fixture_dir();
    let mut stack = vec![root.join("app")];
    let mut seen = 0;
    let banned = [
        "mcpServers",
        "mcp_servers",
        "\"command\"",
        "stdio",
        "localhost",
        "127.0.0.1",
        "0.0.0.0",
        "http://",
        "https://",
        "Bearer ",
        "access_token",
        "auth_token",
        "token:",
        "token=",
        "password",
        "api_key=",
        "/home/",
        "/root/",
        "/tmp/",
        "/Users/",
        "C:\\",
        "patch-candidate-mcp",
        "--workspace-root",
    ];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            seen += 1;
            let text = fs::read_to_string(&path).unwrap().to_lowercase();
            for word in banned {
                assert!(
                    !text.contains(&word.to_lowercase()),
                    "{} contains {word}",
                    path.display()
                );
            }
            // No port numbers in host:port form.
            assert!(
                !text
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .any(|w| w.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty()
                        && p.len() >= 2
                        && p.chars().all(|c| c.is_ascii_digit()))),
                "{} has a host:port",
                path.display()
            );
        }
    }
    assert!(seen >= 10);
    let provenance = fs::read_to_string(root.join("app/provenance.yaml")).unwrap();
    assert!(
        provenance
            .lines()
            .any(|l| l.trim() == "mcp: mozaiks.mcp.v1"),
        "contracts: declares mozaiks.mcp.v1"
    );
}
