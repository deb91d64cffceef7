//! Every secret rule on a real-looking (fake) secret: detected in an added line, in a created
//! file's name where the rule applies to names, behind every inline allow comment and next to
//! every repository allow-list file; and the value never appears in any output.

use policy::{FindingKind, PolicyReport, scan};

use crate::support::{Fake, assert_absent, candidate, corpus, create, key_blocks, update};

/// Every string the policy produces about `report`: the report file, its `Debug`, and the
/// rule + path + line lines a view prints.
fn outputs(report: &PolicyReport) -> String {
    let (bytes, digest) = report.to_file_bytes().unwrap();
    let mut all = String::from_utf8(bytes).unwrap();
    all.push_str(&format!("{report:?}{digest}"));
    for f in &report.findings {
        all.push_str(&format!(
            "{} {} {:?} {:?} {:?}\n",
            f.rule_id,
            f.kind.as_str(),
            f.path,
            f.line,
            f
        ));
    }
    // Errors about the report (a tampered copy) must not carry it either.
    let mut tampered = report.clone();
    tampered.clean = !tampered.clean;
    let (bad, _) = tampered.to_file_bytes().unwrap();
    let err = policy::parse_report(&bad).unwrap_err();
    all.push_str(&format!("{err} {err:?}"));
    all
}

fn rules_at(report: &PolicyReport, line: Option<u64>) -> Vec<&str> {
    report
        .findings
        .iter()
        .filter(|f| f.line == line && f.kind == FindingKind::Secret)
        .map(|f| f.rule_id.as_str())
        .collect()
}

const ALLOW_COMMENTS: [&str; 6] = [
    "",
    "  # gitleaks:allow",
    "  # nosec",
    "  # pragma: allowlist secret",
    "  // NOSONAR nosec gitleaks:allow",
    "  # noqa: S105",
];

#[test]
fn every_rule_detects_its_secret_in_an_added_line_behind_any_allow_comment() {
    for fake in corpus() {
        for comment in ALLOW_COMMENTS {
            let text = format!("import os\n\n{}{comment}\nprint(1)\n", fake.line);
            let report = scan(&candidate(vec![create("app/settings.py", &text)])).unwrap();
            assert!(
                rules_at(&report, Some(3)).contains(&fake.rule),
                "{} not detected with comment {comment:?}: {:?}",
                fake.rule,
                rules_at(&report, Some(3))
            );
            assert!(!report.clean);
            assert_absent(&outputs(&report), &fake.random, fake.rule);
        }
    }
}

/// The repository's own allow-lists, written by the agent in the same candidate (or already in
/// the baseline, which the scan never reads): none is honoured.
#[test]
fn repository_allow_list_files_are_not_honoured() {
    for fake in corpus() {
        let gitleaks_toml = format!(
            "[allowlist]\ndescription = \"all\"\npaths = ['''.*''']\nregexes = ['''{}''']\n",
            regex_escape(&fake.token)
        );
        let report = scan(&candidate(vec![
            create("app/settings.py", &format!("{}\n", fake.line)),
            create(".gitleaksignore", "app/settings.py:generic-api-key:1\n*\n"),
            create(".gitleaks.toml", &gitleaks_toml),
            create(".secretsignore", "app/settings.py\n*\n"),
            create(".secrets.baseline", "{\"results\": {}}\n"),
        ]))
        .unwrap();
        let settings = report
            .findings
            .iter()
            .filter(|f| f.path.as_deref() == Some("app/settings.py") && f.line == Some(1))
            .map(|f| f.rule_id.as_str())
            .collect::<Vec<_>>();
        assert!(settings.contains(&fake.rule), "{}: {settings:?}", fake.rule);
        // The allow-list that quotes the token is itself a new line carrying the token's shape
        // only as an escaped regex; whatever it produces, no output carries the value.
        assert_absent(&outputs(&report), &fake.random, fake.rule);
    }
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// Rules that apply to names fire on a created file's path, and that file's path is withheld
/// from every one of its findings.
#[test]
fn secrets_in_new_file_names_are_detected_and_the_path_withheld() {
    let name_rules = [
        "aws-access-token",
        "gcp-api-key",
        "github-pat",
        "github-fine-grained-pat",
        "github-oauth",
        "github-app-token",
        "github-refresh-token",
        "gitlab-pat",
        "gitlab-ptt",
        "gitlab-runner-authentication-token",
        "gitlab-deploy-token",
        "digitalocean-pat",
        "stripe-access-token",
        "twilio-api-key",
        "npm-access-token",
        "slack-bot-token",
    ];
    let fakes: Vec<Fake> = corpus()
        .into_iter()
        .filter(|f| name_rules.contains(&f.rule))
        .collect();
    assert_eq!(fakes.len(), name_rules.len());
    for fake in fakes {
        let path = format!("notes/{}.txt", fake.token);
        let report = scan(&candidate(vec![
            create(&path, "zero\u{200B}width\n"),
            create("app/ok.py", "x = 1\n"),
        ]))
        .unwrap();
        let on_name: Vec<_> = report
            .findings
            .iter()
            .filter(|f| f.line.is_none() && f.kind == FindingKind::Secret)
            .collect();
        assert!(
            on_name.iter().any(|f| f.rule_id == fake.rule),
            "{}: {on_name:?}",
            fake.rule
        );
        // Every finding of that file (the hidden-text one too) withholds the path.
        let file_index = on_name[0].file_index;
        assert!(
            report
                .findings
                .iter()
                .filter(|f| f.file_index == file_index)
                .all(|f| f.path.is_none())
        );
        assert!(report.findings.iter().any(|f| f.file_index == file_index
            && f.rule_id == "zero-width-character"
            && f.line == Some(1)));
        assert_absent(&outputs(&report), &fake.random, fake.rule);
    }
}

#[test]
fn secret_bearing_file_names_are_findings() {
    for (path, rule) in [
        ("deploy/id_rsa", "ssh-private-key-file"),
        ("deploy/id_ed25519", "ssh-private-key-file"),
        ("certs/server.p12", "pkcs12-file"),
        ("certs/server.PFX", "pkcs12-file"),
        ("android/release.keystore", "java-keystore-file"),
    ] {
        let report = scan(&candidate(vec![create(path, "binary-ish\n")])).unwrap();
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.rule_id == rule && f.path.as_deref() == Some(path) && f.line.is_none()),
            "{path}: {:?}",
            report.findings
        );
    }
}

/// A private key block spans lines: its armour header line is flagged, and no line of its body
/// appears in any output. Other secrets split across lines are out of scope (docs/REVIEW.md).
#[test]
fn private_key_blocks_across_lines_are_detected_by_their_header() {
    for (block, body) in key_blocks() {
        let text = format!("# fixture\n{block}");
        let report = scan(&candidate(vec![create("keys/deploy.txt", &text)])).unwrap();
        assert_eq!(rules_at(&report, Some(2)), vec!["private-key"], "{block}");
        assert_absent(&outputs(&report), &body, "private key");
    }
}

#[test]
fn only_added_lines_of_an_update_are_scanned() {
    let fakes = corpus();
    let old_secret = &fakes[2]; // already in the baseline: not this candidate's doing
    let new_secret = &fakes[0];
    let before = format!(
        "a = 1\n{}\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\n",
        old_secret.line
    );
    let after = before.replace("e = 5\n", &format!("e = 5\n{}\n", new_secret.line));
    let report = scan(&candidate(vec![update("app/conf.py", &before, &after)])).unwrap();
    let secrets: Vec<_> = report
        .findings
        .iter()
        .map(|f| (f.rule_id.as_str(), f.line))
        .collect();
    assert_eq!(secrets, vec![(new_secret.rule, Some(7))]);
    assert_eq!(report.added_lines_scanned, 1);
}

/// A diff that lies about its post-image (claims a secret line is unchanged context that the
/// post-image does not have there) cannot hide it: the whole post-image is scanned.
#[test]
fn an_inconsistent_diff_makes_the_whole_post_image_scanned() {
    let fake = &corpus()[2];
    let before = "a = 1\nb = 2\n";
    let after = format!("a = 1\n{}\n", fake.line);
    let lying = "--- a/app/conf.py\n+++ b/app/conf.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n";
    let report = scan(&candidate(vec![crate::support::update_with_diff(
        "app/conf.py",
        before,
        &after,
        lying,
    )]))
    .unwrap();
    assert_eq!(rules_at(&report, Some(2)), vec![fake.rule]);
    assert_eq!(report.added_lines_scanned, 2);
}

#[test]
fn low_entropy_placeholders_are_not_findings() {
    let text = "password = \"changeme\"\napi_key = \"xxxxxxxxxxxxxxxxxxxx\"\n\
                token = get_token_from_env()\nAKIAAAAAAAAAAAAAAAAA = 1\nkey = value\n";
    let report = scan(&candidate(vec![create("app/plain.py", text)])).unwrap();
    assert!(report.clean, "{:?}", report.findings);
}

/// r_allow_list_alternation_exempts_any_false: gitleaks' global `(?i)^true|false|null$` reads
/// as `^true` or `false` or `null$`; ported as is, a word an agent adds to a value (`…false`,
/// `true…`, `…null`) would exempt it. Only the whole words are allowed.
#[test]
fn the_true_false_null_allow_list_takes_whole_values_only() {
    let pw = crate::support::Gen::new(5).of(crate::support::ALNUM, 24);
    for value in [
        format!("{pw}false"),
        format!("{pw}_FALSE"),
        format!("true{pw}"),
        format!("{pw}null"),
    ] {
        let line = format!("db_password = \"{value}\"\n");
        let report = scan(&candidate(vec![create("app/s.py", &line)])).unwrap();
        assert_eq!(
            rules_at(&report, Some(1)),
            vec!["generic-api-key"],
            "{value}"
        );
    }
    for value in ["true", "False", "null"] {
        let line = format!("db_password = \"{value}\"\n");
        let report = scan(&candidate(vec![create("app/s.py", &line)])).unwrap();
        assert!(report.clean, "{value}: {:?}", report.findings);
    }
}

/// gitleaks' allow-lists that look at the whole line (`generic-api-key`'s Docker
/// `--mount=type=secret,` and `import { … } from '…'`) are not ported: the agent writes the rest
/// of the line. Its value allow-lists are: a reference, a placeholder or AWS's documented example
/// key is not a finding.
#[test]
fn line_allow_lists_are_not_honoured_but_value_allow_lists_are() {
    let pw = crate::support::Gen::new(3).of(crate::support::ALNUM, 24);
    for line in [
        format!("db_password = \"{pw}\"  # --mount=type=secret,id=x"),
        format!("db_password = \"{pw}\"; import {{ a, b }} from 'c'"),
    ] {
        let report = scan(&candidate(vec![create("app/s.py", &format!("{line}\n"))])).unwrap();
        assert_eq!(
            rules_at(&report, Some(1)),
            vec!["generic-api-key"],
            "{line}"
        );
    }
    for line in [
        "db_password = \"${DB_PASSWORD}\"",
        "api_token = \"{{ .Values.apiToken }}\"",
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "const key = process.env.STRIPE_SECRET_KEY;",
    ] {
        let report = scan(&candidate(vec![create("app/s.py", &format!("{line}\n"))])).unwrap();
        assert!(report.clean, "{line}: {:?}", report.findings);
    }
}
