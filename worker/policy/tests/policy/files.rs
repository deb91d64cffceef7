//! Hidden text in lines and names, executables and binaries, CI and build configuration paths.

use policy::{FindingKind, PolicyReport, Severity, scan};

use crate::support::{candidate, create, delete, update};

type Expected = &'static [(&'static str, FindingKind, Option<u64>)];

fn found(report: &PolicyReport) -> Vec<(&str, FindingKind, Option<&str>, Option<u64>)> {
    report
        .findings
        .iter()
        .map(|f| (f.rule_id.as_str(), f.kind, f.path.as_deref(), f.line))
        .collect()
}

#[test]
fn bidi_controls_in_added_lines_and_names() {
    for c in [
        '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
        '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
    ] {
        let text = format!("ok = 1\nif access_level != \"user{c} \": # admin\n");
        let report = scan(&candidate(vec![create("app/auth.py", &text)])).unwrap();
        assert_eq!(
            found(&report),
            vec![(
                "bidi-control",
                FindingKind::HiddenText,
                Some("app/auth.py"),
                Some(2)
            )],
            "U+{:04X}",
            c as u32
        );
        assert_eq!(report.findings[0].severity, Severity::High);
        let name = format!("app/evil{c}txt.py");
        let report = scan(&candidate(vec![create(&name, "x = 1\n")])).unwrap();
        assert_eq!(
            found(&report),
            vec![(
                "bidi-control",
                FindingKind::HiddenText,
                Some(name.as_str()),
                None
            )]
        );
    }
}

#[test]
fn zero_width_characters_in_lines_and_names_and_the_bom_rule() {
    for c in ['\u{200B}', '\u{200C}', '\u{200D}', '\u{2060}', '\u{FEFF}'] {
        let text = format!("a = 1\nb = 2\nad{c}min = True\n");
        let report = scan(&candidate(vec![create("app/z.py", &text)])).unwrap();
        assert_eq!(
            found(&report),
            vec![(
                "zero-width-character",
                FindingKind::HiddenText,
                Some("app/z.py"),
                Some(3)
            )]
        );
        let name = format!("app/a{c}b.py");
        let report = scan(&candidate(vec![create(&name, "x = 1\n")])).unwrap();
        assert_eq!(
            found(&report),
            vec![(
                "zero-width-character",
                FindingKind::HiddenText,
                Some(name.as_str()),
                None
            )]
        );
    }
    // A byte order mark at offset 0 is not hidden text; on a later line it is.
    let report = scan(&candidate(vec![create("app/bom.py", "\u{FEFF}x = 1\n")])).unwrap();
    assert!(report.clean, "{:?}", report.findings);
    let report = scan(&candidate(vec![create(
        "app/bom.py",
        "x = 1\n\u{FEFF}y = 2\n",
    )]))
    .unwrap();
    assert_eq!(found(&report)[0].3, Some(2));
}

#[test]
fn terminal_escapes_and_nul_bytes_in_added_lines() {
    let report = scan(&candidate(vec![create(
        "app/t.py",
        "print('\u{1b}[2J\u{1b}]0;title\u{7}')\nz = '\u{0}'\n",
    )]))
    .unwrap();
    assert_eq!(
        found(&report),
        vec![
            (
                "terminal-escape",
                FindingKind::HiddenText,
                Some("app/t.py"),
                Some(1)
            ),
            ("nul-byte", FindingKind::Binary, Some("app/t.py"), Some(2)),
        ]
    );
}

#[test]
fn hidden_text_in_unchanged_lines_of_an_update_is_not_this_candidates() {
    let before = "a\u{202E}b\nline2\nline3\nline4\nline5\n";
    let after = "a\u{202E}b\nline2\nline3\nline4\nline5 changed\u{200B}\n";
    let report = scan(&candidate(vec![update("app/u.txt", before, after)])).unwrap();
    assert_eq!(
        found(&report),
        vec![(
            "zero-width-character",
            FindingKind::HiddenText,
            Some("app/u.txt"),
            Some(5)
        )]
    );
}

#[test]
fn new_executables_and_binaries() {
    let cases: [(&str, &str, Expected); 7] = [
        (
            "tools/run.sh",
            "#!/bin/sh\necho hi\n",
            &[("script-shebang", FindingKind::Executable, Some(1))],
        ),
        (
            "tools/run",
            "#!/usr/bin/env python3\n",
            &[("script-shebang", FindingKind::Executable, Some(1))],
        ),
        (
            "bin/tool.exe",
            "MZ\n",
            &[("executable-name", FindingKind::Executable, None)],
        ),
        (
            "lib/libx.so.1",
            "x\n",
            &[("executable-name", FindingKind::Executable, None)],
        ),
        (
            "vendor/a.jar",
            "PK\n",
            &[("binary-name", FindingKind::Binary, None)],
        ),
        (
            "bin/elf",
            "\u{7f}ELF\u{2}\u{1}\u{1}\n",
            &[("elf-binary", FindingKind::Executable, Some(1))],
        ),
        (
            "data/blob.dat",
            "ab\u{0}\u{0}cd\n",
            &[("nul-byte", FindingKind::Binary, Some(1))],
        ),
    ];
    for (path, content, expected) in cases {
        let report = scan(&candidate(vec![create(path, content)])).unwrap();
        let got: Vec<_> = report
            .findings
            .iter()
            .map(|f| (f.rule_id.as_str(), f.kind, f.line))
            .collect();
        assert_eq!(got, expected.to_vec(), "{path}");
        assert!(
            report
                .findings
                .iter()
                .all(|f| f.severity == Severity::Medium)
        );
    }
    // A shebang already in the baseline is not a new script.
    let report = scan(&candidate(vec![update(
        "tools/run.sh",
        "#!/bin/sh\necho a\n",
        "#!/bin/sh\necho b\n",
    )]))
    .unwrap();
    assert!(report.clean, "{:?}", report.findings);
}

#[test]
fn ci_and_build_configuration_changes_on_every_operation() {
    let flagged = [
        ".github/workflows/ci.yml",
        ".github/workflows/nested/release.yaml",
        ".github/actions/setup/action.yml",
        ".gitlab-ci.yml",
        ".circleci/config.yml",
        "Jenkinsfile",
        "ci/Jenkinsfile",
        ".travis.yml",
        "azure-pipelines.yml",
        ".buildkite/pipeline.yml",
        "Makefile",
        "src/native/Makefile",
        "build.rs",
        "crates/sys/build.rs",
        ".cargo/config.toml",
        ".cargo/config",
        "package.json",
        "web/package.json",
        "setup.py",
        "pyproject.toml",
        "Dockerfile",
        "images/Dockerfile.dev",
        ".pre-commit-config.yaml",
        ".gitattributes",
        ".gitmodules",
    ];
    for path in flagged {
        for file in [
            create(path, "x\n"),
            update(path, "x\n", "y\n"),
            delete(path, "x\n"),
        ] {
            let op = file.op();
            let report = scan(&candidate(vec![file])).unwrap();
            assert!(
                found(&report).contains(&("ci-config", FindingKind::CiConfig, Some(path), None)),
                "{path} {op:?}: {:?}",
                report.findings
            );
        }
    }
    for path in [
        "docs/github/workflows/ci.yml",
        "src/Makefile.rs",
        "src/build.rs.txt",
        "app/dockerfile_notes.md",
        "package.json.md",
        "app/.github/notes.md",
    ] {
        let report = scan(&candidate(vec![create(path, "x\n")])).unwrap();
        assert!(report.clean, "{path}: {:?}", report.findings);
    }
}

/// The class (rule id) every default-ignorable code point is reported under.
fn hidden_rule(cp: u32) -> &'static str {
    match cp {
        0x202A..=0x202E | 0x2066..=0x2069 | 0x200E | 0x200F | 0x061C => "bidi-control",
        0x200B..=0x200D | 0x2060 | 0xFEFF => "zero-width-character",
        0xE0000..=0xE007F => "tag-character",
        0xFE00..=0xFE0F | 0xE0100..=0xE01EF | 0x180B..=0x180D | 0x180F => "variation-selector",
        _ => "invisible-character",
    }
}

/// Every `Default_Ignorable_Code_Point` (Unicode 15.1), the Hangul fillers among them, in an
/// added line (an invisible identifier) and in a new name, is a hidden-text finding of its class.
#[test]
fn every_default_ignorable_code_point_is_flagged_in_lines_and_names() {
    let ranges: [(u32, u32); 17] = [
        (0xAD, 0xAD),
        (0x34F, 0x34F),
        (0x61C, 0x61C),
        (0x115F, 0x1160),
        (0x17B4, 0x17B5),
        (0x180B, 0x180F),
        (0x200B, 0x200F),
        (0x202A, 0x202E),
        (0x2060, 0x206F),
        (0x3164, 0x3164),
        (0xFE00, 0xFE0F),
        (0xFEFF, 0xFEFF),
        (0xFFA0, 0xFFA0),
        (0xFFF0, 0xFFF8),
        (0x1BCA0, 0x1BCA3),
        (0x1D173, 0x1D17A),
        (0xE0000, 0xE0FFF),
    ];
    let mut checked = 0;
    for (lo, hi) in ranges {
        for cp in lo..=hi {
            let c = char::from_u32(cp).unwrap();
            let rule = hidden_rule(cp);
            let text = format!("ok = 1\nx{c} = 1\n");
            let report = scan(&candidate(vec![create("app/h.py", &text)])).unwrap();
            assert_eq!(
                found(&report),
                vec![(rule, FindingKind::HiddenText, Some("app/h.py"), Some(2))],
                "U+{cp:04X}"
            );
            let name = format!("app/x{c}.py");
            let report = scan(&candidate(vec![create(&name, "x = 1\n")])).unwrap();
            assert_eq!(
                found(&report),
                vec![(rule, FindingKind::HiddenText, Some(name.as_str()), None)],
                "U+{cp:04X} in a name"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4174);
}

/// An emoji's presentation selector is how ordinary text spells `❤️` or `1️⃣`; a selector after
/// ASCII or in a run is hidden text.
#[test]
fn emoji_presentation_selectors_are_not_findings_but_other_selectors_are() {
    let report = scan(&candidate(vec![create(
        "docs/notes.md",
        "Thanks \u{2764}\u{FE0F} and 1\u{FE0F}\u{20E3} and \u{263A}\u{FE0E}\n",
    )]))
    .unwrap();
    assert!(report.clean, "{:?}", report.findings);
    for text in [
        "a\u{FE0F}b\n",
        "\u{2764}\u{FE0F}\u{FE0F}\n",
        "1\u{FE0F}x\n",
        "\u{2764}\u{FE01}\n",
    ] {
        let report = scan(&candidate(vec![create("docs/n.md", text)])).unwrap();
        assert_eq!(
            found(&report),
            vec![(
                "variation-selector",
                FindingKind::HiddenText,
                Some("docs/n.md"),
                Some(1)
            )],
            "{text:?}"
        );
    }
}
