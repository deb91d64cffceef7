#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::*;

fn image() -> ImageId {
    format!("sha256:{}", "ab".repeat(32)).parse().unwrap()
}

#[test]
fn init_files_parse_and_digest_stably() {
    for kind in [GateKind::Python, GateKind::Rust] {
        let text = init_definitions(kind, &image());
        let a = GateDefinitions::parse(text.as_bytes()).unwrap();
        let b = GateDefinitions::parse(text.as_bytes()).unwrap();
        assert_eq!(a, b);
        let def = a.iter().next().unwrap();
        assert_eq!(def.image(), &image());
        // Reordering keys does not change the digest; changing a value does.
        let changed = text.replacen("log_tail_bytes = 65536", "log_tail_bytes = 65535", 1);
        let c = GateDefinitions::parse(changed.as_bytes()).unwrap();
        assert_ne!(c.iter().next().unwrap().digest(), def.digest());
    }
    let py =
        GateDefinitions::parse(init_definitions(GateKind::Python, &image()).as_bytes()).unwrap();
    let pytest = py.get("pytest").unwrap();
    assert!(pytest.is_pinned("tests/conftest.py"));
    assert!(pytest.is_pinned(".gate-junit.xml"));
    assert!(!pytest.is_pinned("src/lib.py"));
    let rs = GateDefinitions::parse(init_definitions(GateKind::Rust, &image()).as_bytes()).unwrap();
    let cargo = rs.get("cargo-test").unwrap();
    assert!(cargo.argv().iter().any(|a| a == "--frozen"));
    assert_eq!(
        cargo.env().get("CARGO_TARGET_DIR").map(String::as_str),
        Some("/tmp/target")
    );
}

#[test]
fn strict_parsing_refuses_without_quoting() {
    let base = init_definitions(GateKind::Python, &image());
    let cases = [
        base.replace("version = 1", "version = 2"),
        base.replace("cwd = \".\"", "cwd = \"../x\""),
        base.replace("cwd = \".\"", "cwd = \".\"\nsecret_extra = \"SEKRIT\""),
        base.replace("wall_seconds = 600", "wall_seconds = 0"),
        base.replace("pids = 512", "pids = 4"),
        base.replace(&image().to_string(), "SEKRIT:latest"),
        base.replace("HOME = ", "home = "),
        base.replace("[gates.pytest]", "[gates.Py_Test]"),
        base.replace("\"**/conftest.py\"", "\"../conftest.py\""),
        base.replace("path = \".gate-junit.xml\"", "path = \"/abs.xml\""),
        "version = 1\n".to_owned(),
        "not toml SEKRIT".to_owned(),
    ];
    for text in cases {
        let e = GateDefinitions::parse(text.as_bytes()).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_DEFINITION", "{text}");
        assert!(!e.to_string().contains("SEKRIT"), "{e}");
    }
    let big = vec![b' '; usize::try_from(MAX_GATES_FILE_BYTES).unwrap() + 1];
    assert!(GateDefinitions::parse(&big).is_err());
}

#[test]
fn required_gates_must_be_defined() {
    let defs =
        GateDefinitions::parse(init_definitions(GateKind::Python, &image()).as_bytes()).unwrap();
    check_required_gates(&["pytest"], &defs).unwrap();
    check_required_gates::<&str>(&[], &defs).unwrap();
    let e = check_required_gates(&["pytest", "lint"], &defs).unwrap_err();
    assert_eq!(e.code(), "PATCH_CANDIDATE_GATE_UNKNOWN");
}

/// The python starter runs the image's pytest whatever the tree holds, and pins every file that
/// configures pytest or Python's start-up; the rust starter pins every member's manifest.
#[test]
fn starter_templates_cannot_be_shadowed_and_pin_the_runners_configuration() {
    let py =
        GateDefinitions::parse(init_definitions(GateKind::Python, &image()).as_bytes()).unwrap();
    let pytest = py.get("pytest").unwrap();
    let argv = pytest.argv();
    // No `-m pytest` (it would put the working directory, the tree, first on sys.path).
    assert!(!argv.windows(2).any(|w| w[0] == "-m"), "{argv:?}");
    assert_eq!(&argv[..3], ["python3", "-P", "-s"]);
    let code = &argv[4];
    let import = code.find("pytest;").unwrap();
    let append = code.find("sys.path.append").unwrap();
    assert!(
        import < append,
        "pytest is imported before the tree is appended"
    );
    for (key, value) in [
        ("PYTHONSAFEPATH", "1"),
        ("PYTHONNOUSERSITE", "1"),
        ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"),
    ] {
        assert_eq!(
            pytest.env().get(key).map(String::as_str),
            Some(value),
            "{key}"
        );
    }
    for path in [
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "pyproject.toml",
        "setup.cfg",
        "tox.ini",
        "conftest.py",
        "tests/conftest.py",
        "sitecustomize.py",
        "usercustomize.py",
        "pytest.py",
        "_pytest/__init__.py",
    ] {
        assert!(pytest.is_pinned(path), "{path}");
    }
    let rs = GateDefinitions::parse(init_definitions(GateKind::Rust, &image()).as_bytes()).unwrap();
    let cargo = rs.get("cargo-test").unwrap();
    for path in [
        "Cargo.toml",
        "crates/a/Cargo.toml",
        "crates/a/Cargo.lock",
        "crates/a/build.rs",
        ".cargo/config.toml",
        "crates/a/.cargo/config.toml",
        "rust-toolchain.toml",
    ] {
        assert!(cargo.is_pinned(path), "{path}");
    }
    assert!(!cargo.is_pinned("crates/a/src/lib.rs"));
}

#[test]
fn a_gate_command_is_one_shell_line_from_the_repository_root() {
    let rs = GateDefinitions::parse(init_definitions(GateKind::Rust, &image()).as_bytes()).unwrap();
    assert_eq!(
        rs.get("cargo-test").unwrap().command_hint(),
        "cargo test --offline --frozen --quiet"
    );
    let py =
        GateDefinitions::parse(init_definitions(GateKind::Python, &image()).as_bytes()).unwrap();
    let hint = py.get("pytest").unwrap().command_hint();
    assert!(
        hint.starts_with("python3 -P -s -c 'import os, sys, pytest; "),
        "{hint}"
    );
    // Another working directory, and a quote inside a word.
    let text = init_definitions(GateKind::Rust, &image())
        .replace("cwd = \".\"", "cwd = \"crates/core\"")
        .replace("\"--quiet\"]", "\"--quiet\", \"it's\"]");
    let def = GateDefinitions::parse(text.as_bytes()).unwrap();
    assert_eq!(
        def.get("cargo-test").unwrap().command_hint(),
        "cd crates/core && cargo test --offline --frozen --quiet 'it'\\''s'"
    );
}
