//! The optional `app/provenance.yaml`, validated the way the upstream `AppProvenance` model
//! validates it: `schema_version` (default `mozaiks.provenance.v1`), `app_kind`, a required
//! `created_with` run reference, optional `last_refined_with` / `last_validated_with`,
//! `contracts` (a key → ref mapping; defaults to the upstream contract set when absent),
//! `overlays`, `artifact_refs`, `notes`, and no other keys anywhere.
//!
//! Problems are collected (every rule broken, like a model validation error) and described in
//! our own words: field names and rules, never file content.

use crate::pyyaml::{self, PyValue};

/// The one accepted provenance schema version.
pub const PROVENANCE_SCHEMA_VERSION: &str = "mozaiks.provenance.v1";

/// The contract set upstream assumes when `contracts` is absent.
pub const DEFAULT_APP_CONTRACTS: &[(&str, &str)] = &[
    ("app", "mozaiks.app.v1"),
    ("asset_manifest", "mozaiks.asset_manifest.v1"),
    ("auth", "mozaiks.auth.v1"),
    ("dashboard", "mozaiks.dashboard.v1"),
    ("data", "mozaiks.data_contract.v1"),
    ("module", "mozaiks.module.v1"),
    ("provenance", PROVENANCE_SCHEMA_VERSION),
    ("refinement_harness", "mozaiks.refinement_harness.v1"),
    ("security", "mozaiks.secrets.v1"),
    ("subscriptions", "mozaiks.subscriptions.v1"),
    ("workflow", "mozaiks.workflow.v1"),
];

const TOP_KEYS: &[&str] = &[
    "schema_version",
    "app_kind",
    "created_with",
    "last_refined_with",
    "last_validated_with",
    "contracts",
    "overlays",
    "artifact_refs",
    "notes",
];
const RUN_KEYS: &[&str] = &[
    "mode",
    "mozaiks_ref",
    "workflow",
    "workflow_sequence",
    "build_id",
    "artifact_version_id",
    "app_context_version_id",
    "timestamp",
    "notes",
];
const APP_KINDS: &[&str] = &["generated", "imported", "hand_authored", "app_zero"];
const MODES: &[&str] = &["factory", "cli", "import", "manual", "refinement"];
const ARTIFACT_REF_KEYS: &[&str] = &[
    "generated_artifact_ids",
    "accepted_artifact_version_ids",
    "app_context_version_ids",
];

/// A provenance file that validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppProvenance {
    /// `schema_version` (always [`PROVENANCE_SCHEMA_VERSION`]).
    pub schema_version: String,
    /// `app_kind`.
    pub app_kind: String,
    /// `created_with.mode`.
    pub created_with_mode: String,
    /// `contracts` after key normalisation, in file order (defaults when absent).
    pub contracts: Vec<(String, String)>,
    /// Whether `contracts` was absent and the defaults apply.
    pub contracts_defaulted: bool,
}

/// Loads and validates provenance bytes; `Err` lists every rule broken.
///
/// # Errors
/// The problems, in our words (field paths and rules only).
pub fn parse(bytes: &[u8]) -> Result<AppProvenance, Vec<String>> {
    let raw = match pyyaml::safe_load(bytes) {
        Ok(Some(value)) => value,
        Ok(None) => return Err(vec!["provenance.yaml must be a YAML object".to_owned()]),
        Err(problem) => return Err(vec![format!("provenance.yaml: {}", problem.describe())]),
    };
    let Some(entries) = raw.as_map() else {
        return Err(vec!["provenance.yaml must be a YAML object".to_owned()]);
    };
    let mut errors = Vec::new();
    for (key, _) in entries {
        match key.as_str() {
            Some(k) if TOP_KEYS.contains(&k) => {}
            _ => errors.push(
                "an unknown top-level field is present (extra fields are forbidden)".to_owned(),
            ),
        }
    }
    let schema_version = match raw.get("schema_version") {
        None => PROVENANCE_SCHEMA_VERSION.to_owned(),
        Some(PyValue::Str(s)) if s == PROVENANCE_SCHEMA_VERSION => s.clone(),
        Some(_) => {
            errors.push(format!(
                "schema_version must be {PROVENANCE_SCHEMA_VERSION}"
            ));
            String::new()
        }
    };
    let app_kind = match raw.get("app_kind") {
        None => "hand_authored".to_owned(),
        Some(PyValue::Str(s)) if APP_KINDS.contains(&s.as_str()) => s.clone(),
        Some(_) => {
            errors.push(format!("app_kind must be one of {}", APP_KINDS.join(", ")));
            String::new()
        }
    };
    let created_with_mode = match raw.get("created_with") {
        None => {
            errors.push("created_with is required".to_owned());
            String::new()
        }
        Some(run) => run_ref("created_with", run, &mut errors),
    };
    for field in ["last_refined_with", "last_validated_with"] {
        match raw.get(field) {
            None | Some(PyValue::Null) => {}
            Some(run) => {
                run_ref(field, run, &mut errors);
            }
        }
    }
    let (contracts, contracts_defaulted) = match raw.get("contracts") {
        None => (
            DEFAULT_APP_CONTRACTS
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            true,
        ),
        Some(PyValue::Null) => (Vec::new(), false),
        Some(PyValue::Map(map)) => {
            let mut out: Vec<(String, String)> = Vec::new();
            for (k, v) in map {
                let key = match clean_key(k) {
                    Ok(key) => key,
                    Err(why) => {
                        errors.push(format!("contract key {why}"));
                        continue;
                    }
                };
                match clean_ref(v) {
                    Ok(reference) => {
                        if let Some(slot) = out.iter_mut().find(|(existing, _)| *existing == key) {
                            slot.1 = reference;
                        } else {
                            out.push((key, reference));
                        }
                    }
                    Err(why) => errors.push(format!("contracts.{key} {why}")),
                }
            }
            (out, false)
        }
        Some(_) => {
            errors.push(
                "contracts must be a mapping of contract key to contract reference".to_owned(),
            );
            (Vec::new(), false)
        }
    };
    match raw.get("overlays") {
        None | Some(PyValue::Null) => {}
        Some(PyValue::Map(map)) => {
            for (k, v) in map {
                match clean_key(k) {
                    Ok(key) => {
                        if let Err(why) = clean_relative_path(v) {
                            errors.push(format!("overlays.{key} {why}"));
                        }
                    }
                    Err(why) => errors.push(format!("overlay key {why}")),
                }
            }
        }
        Some(_) => errors.push("overlays must be a mapping".to_owned()),
    }
    match raw.get("artifact_refs") {
        None => {}
        Some(PyValue::Map(map)) => {
            for (k, v) in map {
                let Some(field) = k.as_str().filter(|f| ARTIFACT_REF_KEYS.contains(f)) else {
                    errors.push(
                        "artifact_refs has an unknown field (extra fields are forbidden)"
                            .to_owned(),
                    );
                    continue;
                };
                match v {
                    PyValue::Null => {}
                    PyValue::Seq(items) => {
                        for (i, item) in items.iter().enumerate() {
                            if let Err(why) = clean_ref(item) {
                                errors.push(format!("artifact_refs.{field}[{i}] {why}"));
                            }
                        }
                    }
                    _ => errors.push(format!("artifact_refs.{field} must be a list")),
                }
            }
        }
        Some(_) => errors.push("artifact_refs must be a mapping".to_owned()),
    }
    match raw.get("notes") {
        None | Some(PyValue::Null) => {}
        Some(PyValue::Seq(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item {
                    PyValue::Str(s) if !s.trim().is_empty() => {}
                    _ => errors.push(format!("notes[{i}] must be a non-empty string")),
                }
            }
        }
        Some(_) => errors.push("notes must be a list".to_owned()),
    }
    if errors.is_empty() {
        Ok(AppProvenance {
            schema_version,
            app_kind,
            created_with_mode,
            contracts,
            contracts_defaulted,
        })
    } else {
        Err(errors)
    }
}

/// One run reference; returns its mode (empty when invalid).
fn run_ref(field: &str, value: &PyValue, errors: &mut Vec<String>) -> String {
    let Some(entries) = value.as_map() else {
        errors.push(format!("{field} must be a mapping"));
        return String::new();
    };
    for (key, v) in entries {
        match key.as_str() {
            Some("mode") => {}
            Some(k) if RUN_KEYS.contains(&k) => {
                if !matches!(v, PyValue::Null | PyValue::Str(_)) {
                    errors.push(format!("{field}.{k} must be a string"));
                }
            }
            _ => errors.push(format!(
                "{field} has an unknown field (extra fields are forbidden)"
            )),
        }
    }
    match value.get("mode") {
        Some(PyValue::Str(mode)) if MODES.contains(&mode.as_str()) => mode.clone(),
        None => {
            errors.push(format!("{field}.mode is required"));
            String::new()
        }
        Some(_) => {
            errors.push(format!("{field}.mode must be one of {}", MODES.join(", ")));
            String::new()
        }
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9_.:/@+-]*$` after stripping.
fn clean_ref(value: &PyValue) -> Result<String, &'static str> {
    let PyValue::Str(text) = value else {
        return Err("must be a string");
    };
    let text = py_strip(text);
    let mut bytes = text.bytes();
    match bytes.next() {
        None => return Err("must be non-empty"),
        Some(b) if b.is_ascii_alphanumeric() => {}
        Some(_) => return Err("contains unsupported characters"),
    }
    if !bytes.all(|b| {
        b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'/' | b'@' | b'+' | b'-')
    }) {
        return Err("contains unsupported characters");
    }
    Ok(text.to_owned())
}

/// A reference, lower-cased, matching `^[a-z][a-z0-9_.-]*$`.
fn clean_key(value: &PyValue) -> Result<String, &'static str> {
    let key = clean_ref(value)?.to_lowercase();
    let mut bytes = key.bytes();
    let ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        });
    if ok {
        Ok(key)
    } else {
        Err(
            "must start with a lowercase letter and contain only lowercase letters, numbers, underscores, dots, or hyphens",
        )
    }
}

fn clean_relative_path(value: &PyValue) -> Result<(), &'static str> {
    let PyValue::Str(text) = value else {
        return Err("must be a string path");
    };
    let replaced = text.replace('\\', "/");
    let raw = py_strip(&replaced);
    if raw.is_empty() {
        return Err("must be a non-empty relative path");
    }
    if raw.starts_with('/') {
        return Err("must be relative, not absolute");
    }
    if raw.contains("://") {
        return Err("must be an app-bundle path, not a URL");
    }
    let raw = raw.strip_prefix("./").unwrap_or(raw);
    let Some(parts) = contained_parts(raw) else {
        return Err("must not escape the app bundle");
    };
    if parts.first().is_some_and(|p| p.contains(':')) {
        return Err("must not include a drive or scheme");
    }
    Ok(())
}

/// The parts of a `/`-separated path with empty and `.` parts dropped (as Python's
/// `PurePosixPath` parts them); `None` when it is absolute or has a `..` part.
pub(crate) fn contained_parts(path: &str) -> Option<Vec<&str>> {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if path.starts_with('/') || parts.contains(&"..") {
        None
    } else {
        Some(parts)
    }
}

/// Python's `str.strip()` (Unicode whitespace).
pub(crate) fn py_strip(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLI: &str = "schema_version: mozaiks.provenance.v1\napp_kind: hand_authored\ncreated_with:\n  mode: cli\n  mozaiks_ref: package:0.4.0\n  timestamp: '2026-01-01T00:00:00+00:00'\ncontracts:\n  app: mozaiks.app.v1\n  mcp: mozaiks.mcp.v1\n";

    #[test]
    fn upstream_shape_is_accepted() {
        let p = parse(CLI.as_bytes()).unwrap();
        assert_eq!(p.schema_version, PROVENANCE_SCHEMA_VERSION);
        assert_eq!(p.created_with_mode, "cli");
        assert_eq!(
            p.contracts,
            vec![
                ("app".to_owned(), "mozaiks.app.v1".to_owned()),
                ("mcp".to_owned(), "mozaiks.mcp.v1".to_owned())
            ]
        );
        // Minimal: only created_with; the default contracts apply.
        let p = parse(b"created_with: {mode: factory}\n").unwrap();
        assert!(p.contracts_defaulted);
        assert_eq!(p.contracts.len(), DEFAULT_APP_CONTRACTS.len());
        // Keys are lower-cased.
        let p = parse(b"created_with: {mode: cli}\ncontracts: {App: mozaiks.app.v1}\n").unwrap();
        assert_eq!(
            p.contracts,
            vec![("app".to_owned(), "mozaiks.app.v1".to_owned())]
        );
    }

    #[test]
    fn upstream_refusals() {
        let bad: &[&str] = &[
            "contracts:\n  - mozaiks.mcp.v1\ncreated_with: {mode: cli}\n",
            "schema_version: v1\ncreated_with: {mode: cli}\n",
            "contracts: {app: mozaiks.app.v1}\n",
            "created_with: {mode: robot}\n",
            "created_with: {mode: cli, extra: 1}\n",
            "created_with: {mode: cli}\nunknown: 1\n",
            "created_with: {mode: cli, timestamp: 2026-01-01T00:00:00Z}\n",
            "created_with: {mode: cli}\ncontracts: {1app: x}\n",
            "created_with: {mode: cli}\ncontracts: {app: 'bad ref'}\n",
            "created_with: {mode: cli}\noverlays: {dash: /etc/passwd}\n",
            "created_with: {mode: cli}\nartifact_refs: null\n",
            "created_with: {mode: cli}\nnotes: ['']\n",
            "- a\n",
            "",
            "created_with: {mode: cli}\n---\ncreated_with: {mode: cli}\n",
        ];
        for text in bad {
            assert!(parse(text.as_bytes()).is_err(), "{text:?} was accepted");
        }
        let errors = parse(b"contracts: [x]\n").unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
