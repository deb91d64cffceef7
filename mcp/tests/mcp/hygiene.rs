//! Structural guarantees: the dependency tree has no Docker client and no `worker` crate, the
//! server source spawns no process and calls no writing filesystem API, and the fixture bundle
//! holds no transport configuration.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn dependency_tree_has_no_worker_and_no_bollard() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "mcp",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--locked",
            "--manifest-path",
        ])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).unwrap();
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"mcp") && crates.contains(&"rmcp") && crates.contains(&"finalizer"));
    for banned in ["worker", "bollard", "hyper", "reqwest"] {
        assert!(
            !crates.contains(&banned),
            "{banned} is in the mcp dependency tree"
        );
    }
}

#[test]
fn server_source_spawns_nothing_and_writes_nothing() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() >= 8);
    let banned = [
        "Command::new",
        "process::Command",
        "tokio::process",
        "std::process::Child",
        "process::Stdio",
        "fork(",
        "exec(",
        "fs::write",
        "create_dir",
        "remove_file",
        "remove_dir",
        "fs::rename",
        ".rename(",
        "set_permissions",
        ".write(true",
        ".append(true",
        ".truncate(true",
        ".create(true",
        "create_new",
        "hard_link",
        "fs::symlink(",
        "unix::fs::symlink",
        "File::create",
        "set_times",
        ".write_all(",
    ];
    // `OpenOptions` appears in exactly one audited helper (`workspace::open_regular`, read-only
    // with O_NONBLOCK); the write, append, truncate and create setters are banned everywhere.
    let mut open_options = 0;
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            if line.contains("OpenOptions") {
                assert!(
                    file.ends_with("workspace.rs"),
                    "{}:{} uses OpenOptions",
                    file.display(),
                    n + 1
                );
                open_options += 1;
            }
            for word in banned {
                assert!(
                    !line.contains(word),
                    "{}:{} uses {word}",
                    file.display(),
                    n + 1
                );
            }
            if line.contains("process::") {
                assert!(
                    line.contains("process::ExitCode"),
                    "{}:{} touches std::process",
                    file.display(),
                    n + 1
                );
            }
        }
    }
    assert!(
        open_options > 0 && open_options <= 3,
        "{open_options} OpenOptions lines"
    );
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
        provenance.lines().any(|l| l.trim() == "- mozaiks.mcp.v1"),
        "contracts: declares mozaiks.mcp.v1"
    );
}
