//! `hostile-entry` as a host process: each mode breaks exactly its rule.

use std::time::Duration;

use crate::common::{HOSTILE, run_with, standard};

#[test]
fn hostile_modes_as_processes() {
    let input = standard("x");
    let run =
        |mode: &str, secs: u64| run_with(HOSTILE, &[mode], &[], &input, Duration::from_secs(secs));

    let valid = run("valid", 20);
    assert_eq!(valid.code, Some(0));
    assert!(vocab::from_slice_strict::<turn_runner::TurnOutput>(&valid.stdout, 1 << 20).is_ok());

    for mode in ["malformed-json", "duplicate-keys", "extra-key"] {
        let r = run(mode, 20);
        assert_eq!(r.code, Some(0), "{mode}");
        assert!(
            vocab::from_slice_strict::<turn_runner::TurnOutput>(&r.stdout, 1 << 20).is_err(),
            "{mode}"
        );
    }
    assert!(run("oversized-output", 20).stdout.len() > 40_000_000);
    let flood = run("flood-stderr", 20);
    assert!(flood.stderr.len() > 40_000_000 && !flood.stdout.is_empty());
    assert_eq!(run("exit-nonzero", 20).code, Some(3));
    let nothing = run("print-nothing", 20);
    assert_eq!((nothing.code, nothing.stdout.len()), (Some(0), 0));
    let hang = run("sleep-forever", 1);
    assert_eq!(hang.code, None, "killed by the test deadline");
    assert_eq!(run("no-such-mode", 20).code, Some(2));

    // The independent Python check accepts the valid mode and rejects the wrong entry set.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/runner/check_output.py");
    let expected = "app/app.json,app/ui/pages/Dashboard.jsx";
    let check = |stdout: &[u8]| {
        run_with(
            "python3",
            &[script, expected],
            &[],
            stdout,
            Duration::from_secs(30),
        )
    };
    assert_eq!(check(&valid.stdout).code, Some(0));
    let wrong = check(&run("wrong-entry-set", 20).stdout);
    assert_eq!(wrong.code, Some(1));
    assert!(String::from_utf8_lossy(&wrong.stdout).contains("unapproved/extra.txt"));
}
