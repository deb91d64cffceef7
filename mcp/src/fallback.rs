//! The upstream deterministic fallback checks (`run_app_validation_fallback_checks`) over the
//! whole workspace: `json_manifest_parse` (`package.json`, `tsconfig.json`, `composer.json`,
//! `*.schema.json` among the first 120 `.json` files), `python_syntax` (the first 600 `.py`
//! files must compile) and `yaml_manifest_parse` (the first 220 `.yaml`/`.yml` files must
//! `safe_load`), with upstream's skip list (any path part, case-insensitively: `.git`,
//! `node_modules`, `build`, `dist`, `venv`, `logs`, …) and its path order.
//!
//! The walk prunes skipped directories before descending (so `node_modules` costs one entry),
//! never follows a symbolic link (upstream skips linked files and does not descend linked
//! directories either), and stops at a budget of directory entries; whatever a budget left out is
//! reported, never silently dropped.

use serde::de::IgnoredAny;

use crate::envelope::{CheckFailure, FallbackCheck, NotChecked, WalkSummary};
use crate::error::McpError;
use crate::layout::is_skipped_dir;
use crate::pyyaml;
use crate::workspace::{ListedKind, Workspace};

/// Upstream's per-check file limits.
pub const JSON_LIMIT: usize = 120;
/// Upstream's per-check file limits.
pub const PYTHON_LIMIT: usize = 600;
/// Upstream's per-check file limits.
pub const YAML_LIMIT: usize = 220;
/// Upstream's cap on listed artifacts for the Python and YAML checks.
const ARTIFACTS_SHOWN: usize = 80;
/// Most directory entries one walk visits (after pruning the skip list).
pub const MAX_WALK_ENTRIES: u64 = 50_000;
/// Deepest directory the walk descends into.
pub const MAX_WALK_DEPTH: u64 = 64;
/// Largest single file a check parses; larger files are reported as not checked.
pub const MAX_CHECK_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// Most bytes one validation reads; files past it are reported as not checked.
pub const MAX_CHECK_BYTES: u64 = 64 * 1024 * 1024;
/// How many skipped directories are listed by name (all are counted).
const SKIPPED_SHOWN: usize = 50;

/// Python's `PurePath.suffix`, lower-cased.
#[must_use]
pub fn py_suffix(name: &str) -> String {
    match name.rfind('.') {
        Some(i) if i > 0 && i + 1 < name.len() => name.get(i..).unwrap_or_default().to_lowercase(),
        _ => String::new(),
    }
}

/// The files of the workspace outside the skip list, in upstream's order (path parts compared
/// one by one), with what the walk left out.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// Regular files (never links), sorted by path parts.
    pub files: Vec<String>,
    /// The summary reported to the caller.
    pub summary: WalkSummary,
}

/// Walks the workspace from its root.
///
/// # Errors
/// `symlink_escape` / `io_error` from the handle.
pub fn walk(ws: &Workspace) -> Result<Walk, McpError> {
    let mut out = Walk::default();
    out.summary.complete = true;
    out.summary.max_entries = MAX_WALK_ENTRIES;
    out.summary.max_depth = MAX_WALK_DEPTH;
    let mut stack: Vec<(String, u64)> = vec![(String::new(), 0)];
    'walk: while let Some((dir, depth)) = stack.pop() {
        let listing = if dir.is_empty() {
            Some(ws.list_root_bounded()?)
        } else {
            ws.list_dir_bounded(&dir)?
        };
        let Some(listing) = listing else {
            continue;
        };
        if listing.omitted() > 0 {
            out.summary.complete = false;
            out.summary.budget_exhausted = Some(format!(
                "a directory holds more than {} entries; only the first by name were walked",
                crate::workspace::MAX_DIR_ENTRIES
            ));
        }
        for entry in listing.entries {
            out.summary.entries_visited += 1;
            if out.summary.entries_visited > MAX_WALK_ENTRIES {
                out.summary.complete = false;
                out.summary.budget_exhausted = Some(format!(
                    "the walk stopped after {MAX_WALK_ENTRIES} directory entries; later files were not checked"
                ));
                break 'walk;
            }
            let Some(name) = entry.name else {
                out.summary.non_utf8_names += 1;
                continue;
            };
            let path = if dir.is_empty() {
                name.clone()
            } else {
                format!("{dir}/{name}")
            };
            match entry.kind {
                ListedKind::Directory => {
                    if is_skipped_dir(&name) {
                        out.summary.skipped_dir_count += 1;
                        if out.summary.skipped_dirs.len() < SKIPPED_SHOWN {
                            out.summary.skipped_dirs.push(path);
                        }
                    } else if depth + 1 > MAX_WALK_DEPTH {
                        out.summary.complete = false;
                        out.summary.too_deep.push(path);
                    } else {
                        stack.push((path, depth + 1));
                    }
                }
                ListedKind::File => {
                    if !is_skipped_dir(&name) {
                        out.files.push(path);
                    }
                }
                ListedKind::Symlink => {
                    out.summary.symlinks_not_followed += 1;
                    if out.summary.symlinks.len() < SKIPPED_SHOWN {
                        out.summary.symlinks.push(path);
                    }
                }
                ListedKind::Other => {}
            }
        }
    }
    out.files.sort_by(|a, b| a.split('/').cmp(b.split('/')));
    out.summary.files_seen = u64::try_from(out.files.len()).unwrap_or(u64::MAX);
    Ok(out)
}

/// Reads for the checks, against the per-file and total budgets.
struct Budget {
    read: u64,
}

enum Read {
    Bytes(Vec<u8>),
    Skipped(&'static str),
}

impl Budget {
    fn read(&mut self, ws: &Workspace, path: &str) -> Result<Read, McpError> {
        let len = ws.metadata_len(path)?;
        if len > MAX_CHECK_FILE_BYTES {
            return Ok(Read::Skipped("larger than the per-file parse budget"));
        }
        if self.read.saturating_add(len) > MAX_CHECK_BYTES {
            return Ok(Read::Skipped("the total read budget was used up"));
        }
        match ws.read_str(path, MAX_CHECK_FILE_BYTES) {
            Ok(bytes) => {
                self.read = self
                    .read
                    .saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
                Ok(Read::Bytes(bytes))
            }
            Err(McpError::TooLarge { .. }) => {
                Ok(Read::Skipped("larger than the per-file parse budget"))
            }
            Err(McpError::NotFound { .. }) => Ok(Read::Skipped("disappeared during the walk")),
            Err(e) => Err(e),
        }
    }
}

fn candidates<'a>(files: &'a [String], suffixes: &[&str], limit: usize) -> (Vec<&'a String>, u64) {
    let matching: Vec<&String> = files
        .iter()
        .filter(|p| {
            let name = p.rsplit('/').next().unwrap_or_default();
            suffixes.contains(&py_suffix(name).as_str())
        })
        .collect();
    let beyond = matching.len().saturating_sub(limit);
    (
        matching.into_iter().take(limit).collect(),
        u64::try_from(beyond).unwrap_or(u64::MAX),
    )
}

fn failure(path: &str, message: &str, at: Option<(u64, u64)>) -> CheckFailure {
    CheckFailure {
        path: path.to_owned(),
        message: message.to_owned(),
        line: at.map(|(l, _)| l),
        column: at.map(|(_, c)| c),
    }
}

fn finish(
    spec: &CheckSpec,
    artifacts: Vec<String>,
    failures: Vec<CheckFailure>,
    not_checked: Vec<NotChecked>,
    beyond_limit: u64,
) -> FallbackCheck {
    let status = if !failures.is_empty() {
        "failed"
    } else if !artifacts.is_empty() {
        "passed"
    } else {
        "skipped"
    };
    let reason = match status {
        "failed" => format!("{} failed in {} file(s).", spec.label, failures.len()),
        "passed" => spec.passed_reason.to_owned(),
        _ => spec.skipped_reason.to_owned(),
    };
    FallbackCheck {
        name: spec.name.to_owned(),
        status: status.to_owned(),
        reason,
        artifacts,
        failures,
        not_checked,
        beyond_upstream_limit: beyond_limit,
    }
}

/// The three upstream checks over the walked files, in upstream's order.
///
/// # Errors
/// Read failures other than a file disappearing or exceeding a budget.
pub fn run_checks(ws: &Workspace, files: &[String]) -> Result<Vec<FallbackCheck>, McpError> {
    let mut budget = Budget { read: 0 };
    CHECKS
        .iter()
        .map(|spec| run_check(ws, files, &mut budget, spec))
        .collect()
}

/// One upstream check: its names and messages, which files it takes and how many.
struct CheckSpec {
    name: &'static str,
    label: &'static str,
    passed_reason: &'static str,
    skipped_reason: &'static str,
    suffixes: &'static [&'static str],
    limit: usize,
    /// Whether upstream caps the listed artifacts at [`ARTIFACTS_SHOWN`].
    cap_artifacts: bool,
    /// Which of those file names it looks at.
    wanted: fn(&str) -> bool,
    /// Its ruling on the bytes of one file (with its path).
    judge: fn(&str, &[u8]) -> Verdict,
}

/// The three upstream checks, in upstream's order.
const CHECKS: [CheckSpec; 3] = [
    CheckSpec {
        name: "json_manifest_parse",
        label: "JSON manifest parse",
        passed_reason: "JSON manifests parse successfully.",
        skipped_reason: "No JSON manifests were found.",
        suffixes: &[".json"],
        limit: JSON_LIMIT,
        cap_artifacts: false,
        wanted: |name| {
            matches!(name, "package.json" | "tsconfig.json" | "composer.json")
                || name.ends_with(".schema.json")
        },
        judge: json_verdict,
    },
    CheckSpec {
        name: "python_syntax",
        label: "Python syntax check",
        passed_reason: "Python source files compile successfully.",
        skipped_reason: "No Python files were found.",
        suffixes: &[".py"],
        limit: PYTHON_LIMIT,
        cap_artifacts: true,
        wanted: |_| true,
        judge: |path, bytes| match python_problem(path, bytes) {
            Ok(Some(f)) => Verdict::Failed(f),
            Ok(None) => Verdict::Passed,
            Err(why) => Verdict::NotChecked(why),
        },
    },
    CheckSpec {
        name: "yaml_manifest_parse",
        label: "YAML manifest parse",
        passed_reason: "YAML manifests parse successfully.",
        skipped_reason: "No YAML manifests were found.",
        suffixes: &[".yaml", ".yml"],
        limit: YAML_LIMIT,
        cap_artifacts: true,
        wanted: |_| true,
        judge: |path, bytes| match pyyaml::safe_load(bytes) {
            Ok(_) => Verdict::Passed,
            Err(problem) => Verdict::Failed(CheckFailure {
                path: path.to_owned(),
                message: problem.describe(),
                line: problem.line(),
                column: problem.column(),
            }),
        },
    },
];

/// What a check makes of one file it read.
enum Verdict {
    Passed,
    Failed(CheckFailure),
    NotChecked(&'static str),
}

/// Runs one check over the first `spec.limit` files with its suffixes: of the file names it
/// wants, each one the budget lets it read is judged.
fn run_check(
    ws: &Workspace,
    files: &[String],
    budget: &mut Budget,
    spec: &CheckSpec,
) -> Result<FallbackCheck, McpError> {
    let (picked, beyond) = candidates(files, spec.suffixes, spec.limit);
    let mut artifacts = Vec::new();
    let mut failures = Vec::new();
    let mut not_checked = Vec::new();
    for path in picked {
        if !(spec.wanted)(path.rsplit('/').next().unwrap_or_default()) {
            continue;
        }
        artifacts.push(path.clone());
        let reason = match budget.read(ws, path)? {
            Read::Skipped(why) => why,
            Read::Bytes(bytes) => match (spec.judge)(path, &bytes) {
                Verdict::Passed => continue,
                Verdict::Failed(f) => {
                    failures.push(f);
                    continue;
                }
                Verdict::NotChecked(why) => why,
            },
        };
        not_checked.push(NotChecked {
            path: path.clone(),
            reason: reason.to_owned(),
        });
    }
    if spec.cap_artifacts {
        artifacts.truncate(ARTIFACTS_SHOWN);
    }
    Ok(finish(spec, artifacts, failures, not_checked, beyond))
}

/// The JSON check's ruling: within the parse budget, then `json_problem`.
fn json_verdict(path: &str, bytes: &[u8]) -> Verdict {
    if crate::bounded::check_json(bytes).is_err() {
        Verdict::NotChecked("nests deeper or holds more values than the JSON parse budget")
    } else {
        json_problem(path, bytes).map_or(Verdict::Passed, Verdict::Failed)
    }
}

/// `json.loads(path.read_text("utf-8"))`: UTF-8, one JSON value (duplicate keys allowed).
fn json_problem(path: &str, bytes: &[u8]) -> Option<CheckFailure> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Some(failure(path, "File is not UTF-8.", None));
    };
    match serde_json::from_str::<IgnoredAny>(text) {
        Ok(_) => None,
        Err(e) => Some(failure(
            path,
            "JSON does not parse.",
            Some((
                u64::try_from(e.line()).unwrap_or(u64::MAX),
                u64::try_from(e.column()).unwrap_or(u64::MAX),
            )),
        )),
    }
}

/// `compile(text, path, "exec")`: parse, then the compiler's own target and placement rules.
///
/// `Ok(None)` when it compiles, `Ok(Some(failure))` when it does not, `Err(reason)` when it was
/// not checked (its syntax tree would need more than the whole work budget).
pub(crate) fn python_problem(
    path: &str,
    bytes: &[u8],
) -> Result<Option<CheckFailure>, &'static str> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(Some(failure(path, "File is not UTF-8.", None)));
    };
    if text.contains('\0') {
        return Ok(Some(failure(
            path,
            "Python source contains a NUL byte.",
            None,
        )));
    }
    if text.starts_with('\u{feff}') {
        // `read_text("utf-8")` keeps the BOM and `compile()` refuses U+FEFF in a str.
        return Ok(Some(failure(
            path,
            "Python source starts with a byte-order mark.",
            Some((1, 1)),
        )));
    }
    if crate::bounded::check_python_nesting(text).is_err() {
        // CPython refuses it too ("too many nested parentheses").
        return Ok(Some(failure(
            path,
            crate::pydepth::Deep::Brackets.message(),
            None,
        )));
    }
    // CPython's other nesting limits, on the token stream: no tree is built for a source CPython
    // refuses, and the scan says what the tree will cost.
    let scan = match crate::pydepth::scan(text) {
        Ok(scan) => scan,
        Err(deep) => return Ok(Some(failure(path, deep.message(), None))),
    };
    let Some(_work) = crate::budget::reserve_within(scan.parse_bytes) else {
        return Err("its syntax tree needs more memory than the whole work budget");
    };
    let (path, text) = (path.to_owned(), text.to_owned());
    // Parsed, checked and dropped on the one parser thread (see `parser_thread`).
    crate::parser_thread::run(move || compile_problem(&path, &text))
        .ok_or("the parser stopped on this file")
}

/// Parse and placement checks of a source within CPython's limits.
fn compile_problem(path: &str, text: &str) -> Option<CheckFailure> {
    match rustpython_parser::parse(text, rustpython_parser::Mode::Module, path) {
        Ok(rustpython_parser::ast::Mod::Module(module)) => {
            crate::pytargets::first_compile_error(&module.body).map(|(offset, message)| {
                let offset = usize::try_from(offset).unwrap_or(usize::MAX);
                failure(path, message, Some(line_col(text, offset)))
            })
        }
        Ok(_) => None,
        Err(e) => {
            let offset = usize::try_from(u32::from(e.offset)).unwrap_or(usize::MAX);
            Some(failure(
                path,
                "Python source has a syntax error.",
                Some(line_col(text, offset)),
            ))
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (u64, u64) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = text.get(..end).unwrap_or_default();
    let line = head.matches('\n').count() + 1;
    let column = head.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (
        u64::try_from(line).unwrap_or(u64::MAX),
        u64::try_from(column).unwrap_or(u64::MAX),
    )
}

/// Upstream's `_aggregate_status` over the checks.
#[must_use]
pub fn aggregate_status(checks: &[FallbackCheck]) -> &'static str {
    if checks.iter().any(|c| c.status == "failed") {
        "failed"
    } else if checks.iter().any(|c| c.status == "passed") {
        "passed"
    } else {
        "skipped"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_and_skip_rules() {
        assert_eq!(py_suffix("a.YAML"), ".yaml");
        assert_eq!(py_suffix(".yaml"), "");
        assert_eq!(py_suffix("a."), "");
        assert_eq!(py_suffix("a.b.json"), ".json");
        assert!(is_skipped_dir("Node_Modules"));
        assert!(is_skipped_dir("LOGS"));
        assert!(!is_skipped_dir("modules"));
    }

    #[test]
    fn line_col_counts_chars() {
        assert_eq!(line_col("ab\ncdé\nx", 7), (2, 4));
        assert_eq!(line_col("ab\ncdé\nx", 8), (3, 1));
        assert_eq!(line_col("abc", 0), (1, 1));
    }

    #[test]
    fn json_like_python() {
        assert!(json_problem("a.json", b"{\"a\": 1, \"a\": 2}").is_none());
        assert!(json_problem("a.json", b"{\"a\": }").is_some());
        assert!(json_problem("a.json", b"{} {}").is_some());
        // tsconfig.json with a comment: Python's json module refuses it too.
        assert!(json_problem("tsconfig.json", b"{ // c\n}").is_some());
    }

    #[test]
    fn python_compile_rules() {
        let bad = |src: &str| {
            python_problem("x.py", src.as_bytes())
                .unwrap()
                .map(|f| f.line)
        };
        assert_eq!(bad("def f(:\n  pass\n"), Some(Some(1)));
        assert!(bad("return 1\n").is_some());
        assert!(bad("\u{feff}x = 1\n").is_some());
        assert!(bad("x = 1\nbreak\n").is_some());
        assert!(bad("def f(a, a):\n  pass\n").is_some());
        assert!(bad("def f():\n  from os import *\n").is_some());
        assert!(bad("import os\nmatch x:\n  case 1: pass\n").is_none());
        assert!(bad("def f():\n  for x in y:\n    if x: break\n  return 1\n").is_none());
    }

    #[test]
    fn deep_nesting_does_not_overflow_on_the_tool_stack() {
        let deep_py = format!("x = {}1{}\n", "(".repeat(5_000), ")".repeat(5_000));
        let deep_yaml = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
        let chain = format!("x = {}1\n", "1+".repeat(200_000));
        crate::server::on_tool_stack(move || {
            let _ = python_problem("a.py", deep_py.as_bytes());
            let _ = pyyaml::safe_load(deep_yaml.as_bytes());
            let _ = python_problem("b.py", chain.as_bytes());
        })
        .unwrap();
    }
}
