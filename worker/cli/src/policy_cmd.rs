//! `policy CANDIDATE`: the content policy's findings for a candidate file, one line per finding
//! (rule, kind, path, line; never the matched value), and the digested report with `--json`.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use crate::finalize_cmd::read_candidate;
use crate::outcome::{CliError, OUTPUT_CODE, Outcome};
use crate::render;

#[derive(Debug, Args)]
pub(crate) struct PolicyArgs {
    /// A candidate JSON file.
    file: PathBuf,
}

pub(crate) fn run(args: &PolicyArgs) -> Result<Outcome, CliError> {
    let candidate = read_candidate(&args.file)?;
    let report = policy::scan(&candidate)?;
    let (bytes, digest) = report.to_file_bytes()?;
    let mut text = format!(
        "policy {} ({} findings; rules {}; report {digest})\n",
        if report.clean { "clean" } else { "not clean" },
        report.findings_total,
        render::name(&report.rules_version),
    );
    for f in &report.findings {
        let path = f.path.as_deref().map_or_else(
            || format!("changed file #{} (name withheld)", f.file_index),
            render::name,
        );
        let line = f.line.map_or_else(String::new, |l| format!(":{l}"));
        let _ = writeln!(text, "{} {} {path}{line}", f.rule_id, f.kind.as_str());
    }
    if report.truncated {
        let _ = writeln!(
            text,
            "({} more findings counted but not listed)",
            report.findings_total - report.findings.len() as u64
        );
    }
    let json = serde_json::from_slice::<serde_json::Value>(&bytes)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "policy report could not be encoded"))?;
    Ok(Outcome { json, text })
}

#[cfg(test)]
mod tests {
    use finalizer::testkit::create;
    use finalizer::{CandidateFields, RepositoryPatchCandidate};

    use super::*;

    #[test]
    fn findings_are_printed_as_rule_path_line_never_the_value() {
        // A fake token, assembled so no scanner reads this source as carrying one.
        let secret = format!("ghp_{}", "Zq8Xv2Lm4Np6Rt0Bc3Dk7Fh9Jw1Ys5Ga2Ue4Io");
        let fields = CandidateFields {
            baseline_commit_sha: "a".repeat(40),
            approved_plan_digest: "b".repeat(64),
            snapshot_digest: format!("sha256:{}", "c".repeat(64)),
            summary: "Approved repository file operations: 2.".into(),
            rationale: finalizer::CANDIDATE_RATIONALE.into(),
            ..CandidateFields::default()
        };
        let candidate = RepositoryPatchCandidate::new(
            fields,
            vec![
                create(".github/workflows/ci.yml", "on: push\n"),
                create(
                    "app/conf.py",
                    &format!("x = 1\nTOKEN = \"{secret}\"  # gitleaks:allow\n"),
                ),
            ],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.json");
        std::fs::write(&file, candidate.to_json_pretty().unwrap()).unwrap();
        let out = run(&PolicyArgs { file }).unwrap();
        assert!(out.text.starts_with("policy not clean ("), "{}", out.text);
        assert!(
            out.text
                .contains("ci-config ci_config .github/workflows/ci.yml\n")
        );
        assert!(out.text.contains("github-pat secret app/conf.py:2\n"));
        assert_eq!(out.json["clean"], serde_json::json!(false));
        let json = out.json.to_string();
        for piece in [&secret[4..12], &secret[20..28], &secret[32..]] {
            assert!(!out.text.contains(piece) && !json.contains(piece));
        }
    }
}
