//! The layering the README promises, checked on the resolved dependency graph (`cargo tree`, as
//! `cargo build -p <crate>` resolves it): the Docker seam (`container`) holds no job store and no
//! database driver, and the vocabulary (`vocab`) depends on no other crate of the project.

use std::path::Path;
use std::process::Command;

use crate::support::run_ok;

/// `cargo tree -p <package>` over normal and build edges: one `name version [(path)]` per package.
fn tree(package: &str) -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let output = run_ok(
        Command::new(env!("CARGO"))
            .args([
                "tree",
                "-p",
                package,
                "--edges",
                "normal,build",
                "--prefix",
                "none",
                "--format",
                "{p}",
                "--locked",
                "--manifest-path",
            ])
            .arg(&manifest),
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim_end_matches(" (*)").to_owned())
        .collect()
}

fn name(line: &str) -> &str {
    line.split_whitespace().next().unwrap()
}

#[test]
fn the_docker_seam_holds_no_job_store_or_database() {
    let packages = tree("container");
    assert!(packages.iter().any(|p| name(p) == "bollard"));
    for banned in [
        "jobs",
        "rusqlite",
        "libsqlite3-sys",
        "tokio-postgres",
        "deadpool-postgres",
    ] {
        assert!(
            packages.iter().all(|p| name(p) != banned),
            "container depends on {banned}"
        );
    }
}

#[test]
fn the_vocabulary_is_a_leaf() {
    // The workspace's own crates are the ones `cargo tree` shows with their (absolute) path.
    // Its only own dependency is its derive (`#[derive(vocab::Coded)]`), itself a leaf.
    let own = |krate: &str| -> Vec<String> {
        tree(krate)
            .iter()
            .filter(|p| p.contains(" (/"))
            .map(|p| name(p).to_owned())
            .collect()
    };
    assert_eq!(own("vocab"), ["vocab", "vocab-derive"]);
    assert_eq!(own("vocab-derive"), ["vocab-derive"]);
}
