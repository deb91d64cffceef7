//! The ADR 0004 tools over the app bundle, each a thin adapter over the upstream core library's
//! behaviour: identity (`app/app.json` + the optional provenance), the layout registry, module
//! discovery, page schema discovery, the fallback validation checks and the validation command
//! plan. Everything reads through the workspace handle; nothing is imported, executed or written.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::envelope::{
    Diagnostic, ExtraFinding, IdentityResult, LayoutMatch, LayoutResult, ModuleInfo, ModuleStatus,
    ModulesResult, PROTOCOL_SCHEMA_VERSION, PageInfo, PagesResult, PlanResult, ProvenanceInfo,
    ResolveResult, Severity, ValidationResult, WorkspaceInfo,
};
use crate::error::McpError;
use crate::fallback;
use crate::layout::{
    self, APP_MANIFEST, APP_ROOT, LAYOUT_SCHEMA_VERSION, MODULES_DIR, MatchFailure, PAGES_DIR,
    PROVENANCE, SECRETS,
};
use crate::module_manifest;
use crate::plan;
use crate::provenance::{self, AppProvenance};
use crate::workspace::{EntryKind, ListedKind, RequestPath, Workspace};

/// Largest manifest read (`app.json`, `provenance.yaml`, `module.yaml`).
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;

const SCOPE: &str = "The upstream deterministic fallback checks over the whole workspace \
(run_app_validation_fallback_checks): package.json, tsconfig.json, composer.json and *.schema.json \
among the first 120 .json files must parse as JSON; the first 600 .py files must compile (parsed, \
never imported or run); the first 220 .yaml/.yml files must load with PyYAML's safe_load (one \
document, safe tags). Upstream's skip list applies to every path part. valid is upstream's verdict; \
it is not an acceptance gate and grants nothing.";

const EXTRA_SCOPE: &str = "Rules of this server, not upstream's fallback checks: the secrets \
contract is names-only, a valid provenance declares mozaiks.mcp.v1, provenance and module \
manifests validate against upstream's models, and no prohibited or legacy layout path is present. \
They never change valid.";

/// The parsed `app/app.json` fields the tools use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppManifest {
    /// `appId` when a string.
    pub app_id: Option<String>,
    /// The resolved name.
    pub app_name: String,
    /// `appName`, `name` or `directory`.
    pub app_name_source: &'static str,
    /// `preset` when a string.
    pub preset: Option<String>,
}

fn invalid(path: &str, reason: &str) -> McpError {
    McpError::InvalidManifest {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Parses `app/app.json`: a JSON object; the name is `appName`, else `name`, else `dir_name`
/// (each used when it is a non-blank string).
///
/// # Errors
/// `invalid_manifest` when the file is not UTF-8 JSON or not an object.
pub fn parse_app_manifest(bytes: &[u8], dir_name: &str) -> Result<AppManifest, McpError> {
    let text = std::str::from_utf8(bytes).map_err(|_| invalid(APP_MANIFEST, "not UTF-8"))?;
    let value: Value =
        serde_json::from_str(text).map_err(|_| invalid(APP_MANIFEST, "JSON does not parse"))?;
    let object = value
        .as_object()
        .ok_or_else(|| invalid(APP_MANIFEST, "not a JSON object"))?;
    let text_field = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned)
    };
    let (app_name, app_name_source) = match (text_field("appName"), text_field("name")) {
        (Some(name), _) => (name, "appName"),
        (None, Some(name)) => (name, "name"),
        (None, None) => (dir_name.to_owned(), "directory"),
    };
    Ok(AppManifest {
        app_id: object
            .get("appId")
            .and_then(Value::as_str)
            .map(str::to_owned),
        app_name,
        app_name_source,
        preset: text_field("preset"),
    })
}

fn provenance_info(result: Result<AppProvenance, Vec<String>>) -> ProvenanceInfo {
    match result {
        Ok(p) => ProvenanceInfo {
            path: PROVENANCE.to_owned(),
            valid: true,
            schema_version: Some(p.schema_version),
            app_kind: Some(p.app_kind),
            created_with_mode: Some(p.created_with_mode),
            contracts: p.contracts.into_iter().collect::<BTreeMap<_, _>>(),
            contracts_defaulted: p.contracts_defaulted,
            problems: Vec::new(),
        },
        Err(problems) => ProvenanceInfo {
            path: PROVENANCE.to_owned(),
            valid: false,
            schema_version: None,
            app_kind: None,
            created_with_mode: None,
            contracts: BTreeMap::new(),
            contracts_defaulted: false,
            problems,
        },
    }
}

fn mcp_declared(info: Option<&ProvenanceInfo>) -> bool {
    info.is_some_and(|p| p.valid && p.contracts.values().any(|r| r == PROTOCOL_SCHEMA_VERSION))
}

impl Workspace {
    /// The optional provenance: `Ok(None)` when absent.
    fn provenance(&self) -> Result<Option<ProvenanceInfo>, McpError> {
        match self.read_str(PROVENANCE, MAX_MANIFEST_BYTES) {
            Ok(bytes) => Ok(Some(provenance_info(provenance::parse(&bytes)))),
            Err(McpError::NotFound { .. }) => Ok(None),
            Err(McpError::NotAFile { .. }) => Ok(Some(provenance_info(Err(vec![
                "provenance.yaml is not a regular file".to_owned(),
            ])))),
            Err(McpError::TooLarge { limit, .. }) => Ok(Some(provenance_info(Err(vec![format!(
                "provenance.yaml exceeds {limit} bytes"
            )])))),
            Err(McpError::PermissionDenied { .. }) => Ok(Some(provenance_info(Err(vec![
                "provenance.yaml could not be read (permission denied)".to_owned(),
            ])))),

            Err(e) => Err(e),
        }
    }

    /// The envelope's `workspace` block; identity problems become diagnostics, never failures.
    pub(crate) fn info(&self, diagnostics: &mut Vec<Diagnostic>) -> WorkspaceInfo {
        let manifest = match self.read_str(APP_MANIFEST, MAX_MANIFEST_BYTES) {
            Ok(bytes) => match parse_app_manifest(&bytes, &self.dir_name()) {
                Ok(m) => Some(m),
                Err(e) => {
                    diagnostics.push(Diagnostic::warning(
                        e.code(),
                        Some(APP_MANIFEST),
                        &e.to_string(),
                    ));
                    None
                }
            },
            Err(_) => None,
        };
        let provenance_schema_version = match self.provenance() {
            Ok(Some(p)) if p.valid => p.schema_version,
            Ok(Some(_)) => {
                diagnostics.push(Diagnostic::warning(
                    "provenance_invalid",
                    Some(PROVENANCE),
                    "app/provenance.yaml does not validate against the upstream provenance model; see get_workspace_identity.",
                ));
                None
            }
            _ => None,
        };
        WorkspaceInfo {
            root: self.root_text().to_owned(),
            app_root: format!("{}/{APP_ROOT}", self.root_text().trim_end_matches('/')),
            app_id: manifest.as_ref().and_then(|m| m.app_id.clone()),
            app_name: manifest.map(|m| m.app_name),
            provenance_schema_version,
        }
    }

    /// Fails closed unless `app/app.json` is a regular file inside the root.
    pub(crate) fn require_app_root(&self) -> Result<(), McpError> {
        match self.kind_str(APP_MANIFEST)? {
            EntryKind::File => Ok(()),
            _ => Err(McpError::AppRootNotFound),
        }
    }

    /// `get_workspace_identity`.
    ///
    /// # Errors
    /// `app_root_not_found`, `invalid_manifest` (app.json not a JSON object), read errors. A
    /// malformed provenance is reported inside the result, never as a failure.
    pub fn workspace_identity(&self) -> Result<(IdentityResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let manifest = parse_app_manifest(
            &self.read_str(APP_MANIFEST, MAX_MANIFEST_BYTES)?,
            &self.dir_name(),
        )?;
        let provenance = self.provenance()?;
        let mut diagnostics = Vec::new();
        if manifest.app_id.is_none() {
            diagnostics.push(Diagnostic::info(
                "app_id_absent",
                Some(APP_MANIFEST),
                "app/app.json has no appId (optional upstream; upstream init writes none).",
            ));
        }
        match &provenance {
            None => diagnostics.push(Diagnostic::info(
                "provenance_absent",
                Some(PROVENANCE),
                "app/provenance.yaml is absent (optional upstream).",
            )),
            Some(p) if !p.valid => diagnostics.push(Diagnostic::warning(
                "provenance_invalid",
                Some(PROVENANCE),
                "app/provenance.yaml does not validate against the upstream provenance model; app.json identity is unaffected.",
            )),
            Some(_) => {}
        }
        Ok((
            IdentityResult {
                app_id: manifest.app_id,
                app_name: manifest.app_name,
                app_name_source: manifest.app_name_source.to_owned(),
                app_manifest_path: APP_MANIFEST.to_owned(),
                preset: manifest.preset,
                mcp_contract_declared: mcp_declared(provenance.as_ref()),
                provenance,
            },
            diagnostics,
        ))
    }

    /// `resolve_artifact_location`: the path against every scope it can belong to.
    ///
    /// # Errors
    /// The path rules, `symlink_escape`, read errors.
    pub fn resolve_artifact(&self, path: &RequestPath) -> Result<ResolveResult, McpError> {
        let kind = self.kind(path)?;
        let text = path.as_str();
        let mut tried: Vec<(&'static str, String)> = Vec::new();
        let segs: Vec<&str> = text.split('/').collect();
        if let (Some(&"app"), Some(&"modules"), Some(_), true) =
            (segs.first(), segs.get(1), segs.get(2), segs.len() > 3)
        {
            tried.push((
                "module_relative",
                segs.get(3..).unwrap_or_default().join("/"),
            ));
        }
        let workflow_at = match (segs.first(), segs.get(1)) {
            (Some(&"workflows"), _) => Some(2),
            (Some(&"app"), Some(&"workflows")) => Some(3),
            _ => None,
        };
        if let Some(start) = workflow_at.filter(|s| segs.len() > *s) {
            tried.push((
                "workflow_relative",
                segs.get(start..).unwrap_or_default().join("/"),
            ));
        }
        if let Some(rest) = text.strip_prefix("app/") {
            tried.push(("app_bundle_root", rest.to_owned()));
        }
        tried.push(("workspace_root", text.to_owned()));
        let mut matches = Vec::new();
        let mut unregistered = Vec::new();
        for (scope, scoped) in tried {
            match layout::match_path(&scoped, scope) {
                Ok(m) => matches.push(LayoutMatch {
                    path_scope: scope.to_owned(),
                    scoped_path: scoped,
                    family: *m.family,
                    values: m.values.into_iter().collect(),
                }),
                Err(MatchFailure::NotRegistered) => {
                    unregistered.push(format!("path is not registered for scope {scope}"));
                }
                Err(MatchFailure::Ambiguous(templates)) => unregistered.push(format!(
                    "path is ambiguous for scope {scope}: {}",
                    templates.join(", ")
                )),
            }
        }
        let prohibited = matches.iter().any(|m| m.family.requirement == "prohibited");
        let primary = matches
            .iter()
            .find(|m| m.family.requirement == "prohibited")
            .or_else(|| matches.first())
            .cloned();
        let registered = !matches.is_empty();
        if registered {
            unregistered.clear();
        }
        Ok(ResolveResult {
            path: text.to_owned(),
            absolute_path: format!("{}/{text}", self.root_text().trim_end_matches('/')),
            registered,
            prohibited,
            primary,
            matches,
            unregistered,
            inside_app_root: text == APP_ROOT || text.starts_with("app/"),
            entry_type: kind.as_str().to_owned(),
            exists: kind != EntryKind::Missing,
        })
    }

    /// `list_modules`: upstream discovery (`app/modules/*/module.yaml`, folder names ordered
    /// case-insensitively), each manifest validated against the upstream module definition.
    ///
    /// # Errors
    /// `app_root_not_found`, `symlink_escape`, read errors.
    pub fn list_modules(&self) -> Result<(ModulesResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let mut diagnostics = Vec::new();
        let listing = self.list_dir_bounded(MODULES_DIR)?;
        if let Some(l) = listing.as_ref().filter(|l| l.omitted() > 0) {
            diagnostics.push(Diagnostic::warning(
                "truncated",
                Some(MODULES_DIR),
                &format!(
                    "app/modules holds {} entries; only the first {} by name were examined.",
                    l.total,
                    l.entries.len()
                ),
            ));
        }
        let mut entries = listing.map(|l| l.entries).unwrap_or_default();
        entries.sort_by_key(|e| e.name.as_ref().map(|n| n.to_lowercase()));
        let mut modules = Vec::new();
        for entry in entries {
            let Some(name) = entry.name.as_deref() else {
                diagnostics.push(Diagnostic::warning(
                    "invalid_path",
                    Some(MODULES_DIR),
                    "A module entry name is not UTF-8; skipped.",
                ));
                continue;
            };
            let path = format!("{MODULES_DIR}/{name}");
            match entry.kind {
                ListedKind::Directory => {}
                ListedKind::Symlink => {
                    diagnostics.push(Diagnostic::warning(
                        "symlink_skipped",
                        Some(&path),
                        "Symbolic links are not followed; skipped.",
                    ));
                    continue;
                }
                ListedKind::File | ListedKind::Other => continue,
            }
            let manifest_path = format!("{path}/module.yaml");
            if self.kind_str(&manifest_path)? == EntryKind::Missing {
                let other = if self.kind_str(&format!("{path}/module.json"))? == EntryKind::File {
                    "Has module.json but no module.yaml; upstream discovers module.yaml only."
                } else {
                    "No module.yaml; upstream does not discover this folder as a module."
                };
                diagnostics.push(Diagnostic::info("not_a_module", Some(&path), other));
                continue;
            }
            modules.push(self.module_info(name, path, manifest_path)?);
        }
        Ok((ModulesResult { modules }, diagnostics))
    }

    fn module_info(
        &self,
        name: &str,
        path: String,
        manifest_path: String,
    ) -> Result<ModuleInfo, McpError> {
        let mut info = ModuleInfo {
            name: name.to_owned(),
            path,
            manifest_path,
            status: ModuleStatus::Ok,
            version: None,
            display_name: None,
            module_type: None,
            handler_path: None,
            handler_exists: None,
            actions: Vec::new(),
            problems: Vec::new(),
        };
        let parsed = match self.read_str(&info.manifest_path, MAX_MANIFEST_BYTES) {
            Ok(bytes) => module_manifest::parse(&bytes, name),
            Err(McpError::TooLarge { limit, .. }) => {
                Err(vec![format!("module.yaml exceeds {limit} bytes")])
            }
            Err(McpError::NotAFile { .. }) => {
                Err(vec!["module.yaml is not a regular file".to_owned()])
            }
            Err(McpError::PermissionDenied { .. }) => Err(vec![
                "module.yaml could not be read (permission denied)".to_owned(),
            ]),
            Err(e) => return Err(e),
        };
        match parsed {
            Ok(def) => {
                let handler = format!("{}/{}", info.path, def.handler_path);
                let exists = self
                    .kind_str(&handler)
                    .map(|k| k == EntryKind::File)
                    .unwrap_or(false);
                if !exists {
                    info.status = ModuleStatus::InvalidManifest;
                    info.problems
                        .push("handler entrypoint file not found".to_owned());
                }
                if self.kind_str(&format!("{}/contracts/subscriptions.yaml", info.path))?
                    != EntryKind::Missing
                {
                    info.status = ModuleStatus::InvalidManifest;
                    info.problems.push(
                        "contracts/subscriptions.yaml is not supported; use contracts/reactions.yaml".to_owned(),
                    );
                }
                info.version = Some(def.version);
                info.display_name = def.display_name;
                info.module_type = Some(def.module_type);
                info.handler_path = Some(handler);
                info.handler_exists = Some(exists);
                info.actions = def.actions;
            }
            Err(problems) => {
                info.status = ModuleStatus::InvalidManifest;
                info.problems = problems;
            }
        }
        Ok(info)
    }

    /// `list_pages`: upstream `discover_page_schema_paths` (`ui/pages/*.yaml|*.yml`, and
    /// `ui/pages/<dir>/page.yaml|page.yml`), sorted by name.
    ///
    /// # Errors
    /// `app_root_not_found`, `symlink_escape`, read errors.
    pub fn list_pages(&self) -> Result<(PagesResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let mut diagnostics = Vec::new();
        let mut entries = self.list_dir(PAGES_DIR)?.unwrap_or_default();
        entries.sort_by_key(|e| e.name.as_ref().map(|n| n.to_lowercase()));
        let mut found: BTreeMap<String, PageInfo> = BTreeMap::new();
        for entry in entries {
            let Some(name) = entry.name.as_deref() else {
                continue;
            };
            let path = format!("{PAGES_DIR}/{name}");
            match entry.kind {
                ListedKind::File => {
                    let suffix = fallback::py_suffix(name);
                    if suffix != ".yaml" && suffix != ".yml" {
                        continue;
                    }
                    let stem = name.get(..name.len() - suffix.len()).unwrap_or_default();
                    let size_bytes = self.metadata_len(&path)?;
                    found.insert(
                        stem.to_owned(),
                        PageInfo {
                            name: stem.to_owned(),
                            path,
                            form: "file".to_owned(),
                            size_bytes,
                        },
                    );
                }
                ListedKind::Directory => {
                    for file in ["page.yaml", "page.yml"] {
                        let candidate = format!("{path}/{file}");
                        if self.kind_str(&candidate)? == EntryKind::File {
                            let size_bytes = self.metadata_len(&candidate)?;
                            found.insert(
                                name.to_owned(),
                                PageInfo {
                                    name: name.to_owned(),
                                    path: candidate,
                                    form: "directory".to_owned(),
                                    size_bytes,
                                },
                            );
                            break;
                        }
                    }
                }
                ListedKind::Symlink => diagnostics.push(Diagnostic::warning(
                    "symlink_skipped",
                    Some(&path),
                    "Symbolic links are not followed; skipped.",
                )),
                ListedKind::Other => {}
            }
        }
        Ok((
            PagesResult {
                pages: found.into_values().collect(),
            },
            diagnostics,
        ))
    }

    /// `validate_app_bundle`: the upstream fallback checks over the whole workspace, plus this
    /// server's own rules as separate extra findings.
    ///
    /// # Errors
    /// `app_root_not_found`, read errors. Budgets never fail the call: they are reported.
    pub fn validate_bundle(&self) -> Result<(ValidationResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let walk = fallback::walk(self)?;
        let checks = fallback::run_checks(self, &walk.files)?;
        let status = fallback::aggregate_status(&checks);
        let extra_findings = self.extra_findings(&walk.files)?;
        let mut diagnostics = Vec::new();
        if !walk.summary.complete {
            diagnostics.push(Diagnostic::warning(
                "walk_incomplete",
                None,
                "A walk budget left part of the workspace unchecked; see result.walk.",
            ));
        }
        Ok((
            ValidationResult {
                valid: status != "failed",
                validation_status: status.to_owned(),
                scope: SCOPE.to_owned(),
                fallback_checks: checks,
                walk: walk.summary,
                extra_scope: EXTRA_SCOPE.to_owned(),
                extra_findings,
            },
            diagnostics,
        ))
    }

    /// This server's own rules; never part of `valid`.
    fn extra_findings(&self, files: &[String]) -> Result<Vec<ExtraFinding>, McpError> {
        let mut out = Vec::new();
        let mut push = |severity: Severity, code: &str, path: &str, message: &str| {
            out.push(ExtraFinding {
                source: "patch-candidate-mcp".to_owned(),
                severity,
                code: code.to_owned(),
                path: path.to_owned(),
                message: message.to_owned(),
            });
        };
        if files.iter().any(|f| f == SECRETS)
            && let Ok(bytes) = self.read_str(SECRETS, MAX_MANIFEST_BYTES)
            && !secrets_names_only(&bytes)
        {
            push(
                Severity::Warning,
                "secrets_not_names_only",
                SECRETS,
                "The secrets contract should list secret names only, never values.",
            );
        }
        match self.provenance()? {
            Some(p) if !p.valid => push(
                Severity::Warning,
                "provenance_invalid",
                PROVENANCE,
                "app/provenance.yaml does not validate against the upstream provenance model.",
            ),
            Some(p) if !mcp_declared(Some(&p)) => push(
                Severity::Info,
                "mcp_contract_not_declared",
                PROVENANCE,
                "No provenance contract references mozaiks.mcp.v1.",
            ),
            _ => {}
        }
        let (modules, _) = self.list_modules()?;
        for m in modules
            .modules
            .iter()
            .filter(|m| m.status != ModuleStatus::Ok)
        {
            push(
                Severity::Warning,
                "module_manifest_invalid",
                &m.manifest_path,
                "module.yaml does not validate against the upstream module definition; see list_modules.",
            );
        }
        for file in files {
            let Some(app_relative) = file.strip_prefix("app/") else {
                continue;
            };
            if layout::match_path(app_relative, "app_bundle_root")
                .is_ok_and(|m| m.family.requirement == "prohibited")
                || layout::is_disallowed_legacy(app_relative)
            {
                push(
                    Severity::Warning,
                    "prohibited_layout_path",
                    file,
                    "The upstream layout registry prohibits this legacy path.",
                );
            } else if !layout::is_canonical_config(app_relative) {
                push(
                    Severity::Info,
                    "noncanonical_config_path",
                    file,
                    "Not one of upstream's canonical app/config files.",
                );
            }
        }
        Ok(out)
    }

    /// `plan_validation_commands`: upstream detection and plan; nothing runs.
    ///
    /// # Errors
    /// `app_root_not_found`, read errors.
    pub fn plan_validation(&self) -> Result<(PlanResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let walk = fallback::walk(self)?;
        let (framework_detection, commands) = plan::plan(self, &walk)?;
        let mut diagnostics = Vec::new();
        if commands.is_empty() {
            diagnostics.push(Diagnostic::info(
                "no_validation_commands_detected",
                None,
                "Framework detection found no validation commands; the plan is empty.",
            ));
        }
        Ok((
            PlanResult {
                executed: false,
                requires_confirmation: commands.iter().any(|c| c.status == "planned"),
                framework_detection,
                commands,
            },
            diagnostics,
        ))
    }
}

/// Keys that carry a secret's value rather than its name.
const VALUE_KEYS: &[&str] = &[
    "value",
    "values",
    "default",
    "secret",
    "secret_value",
    "raw",
    "plaintext",
    "token",
    "password",
    "api_key",
    "apikey",
    "credential",
    "credentials",
    "private_key",
];
/// Top-level keys of the upstream secrets contract (`mozaiks.secrets.v1`).
const SECRETS_TOP_KEYS: &[&str] = &[
    "schema_version",
    "provider",
    "secrets",
    "vault",
    "notes",
    "version",
];

/// Our names-only rule for `app/security/secrets.yaml` in upstream's format: it loads, its
/// top-level keys are the contract's, every `secrets[].name` is an environment-style name, and no
/// mapping anywhere has a key that carries a value (`value`, `default`, `password`, …).
fn secrets_names_only(bytes: &[u8]) -> bool {
    use crate::pyyaml::PyValue;
    let Ok(doc) = crate::pyyaml::safe_load(bytes) else {
        return false;
    };
    let Some(doc) = doc else {
        return true;
    };
    let Some(top) = doc.as_map() else {
        return false;
    };
    if top
        .iter()
        .any(|(k, _)| !k.as_str().is_some_and(|k| SECRETS_TOP_KEYS.contains(&k)))
    {
        return false;
    }
    let env_name = |v: &PyValue| {
        v.as_str().is_some_and(|n| {
            let mut b = n.bytes();
            b.next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
        })
    };
    match doc.get("secrets") {
        None | Some(PyValue::Null) => {}
        Some(PyValue::Seq(items)) => {
            let ok = items.iter().all(|item| match item {
                PyValue::Str(_) => env_name(item),
                PyValue::Map(_) => item.get("name").is_some_and(env_name),
                _ => false,
            });
            if !ok {
                return false;
            }
        }
        Some(_) => return false,
    }
    let mut stack = vec![&doc];
    while let Some(v) = stack.pop() {
        match v {
            PyValue::Map(entries) => {
                for (k, val) in entries {
                    if k.as_str()
                        .is_some_and(|k| VALUE_KEYS.contains(&k.to_ascii_lowercase().as_str()))
                    {
                        return false;
                    }
                    stack.push(val);
                }
            }
            PyValue::Seq(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    true
}

/// `get_canonical_layout` (static; the same registry every other tool matches against).
#[must_use]
pub fn canonical_layout() -> LayoutResult {
    let owned = |items: &[&str]| items.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    LayoutResult {
        layout_schema_version: LAYOUT_SCHEMA_VERSION.to_owned(),
        app_root: APP_ROOT.to_owned(),
        template_syntax: "Segments separated by '/'; {name} is one placeholder matching \
[A-Za-z0-9_-]+ (no '/', no '.'); {helper_id} never matches a reserved backend helper name. Within \
a scope a prohibited family wins, then the template with the fewest placeholders."
            .to_owned(),
        scope_resolution: "A workspace path is matched in module_relative (under \
app/modules/<id>/), workflow_relative (under workflows/<id>/ or app/workflows/<id>/), \
app_bundle_root (under app/) and workspace_root scopes."
            .to_owned(),
        families: layout::sorted_families(),
        canonical_app_root_files: owned(layout::CANONICAL_APP_ROOT_FILES),
        canonical_app_root_dirs: owned(layout::CANONICAL_APP_ROOT_DIRS),
        canonical_app_config_files: owned(layout::CANONICAL_APP_CONFIG_FILES),
        disallowed_legacy_app_paths: owned(layout::DISALLOWED_LEGACY_APP_PATHS),
        disallowed_legacy_app_dir_prefixes: owned(layout::DISALLOWED_LEGACY_APP_DIR_PREFIXES),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_contract_names_only() {
        let upstream = b"schema_version: mozaiks.secrets.v1\nprovider: env\nsecrets:\n  - name: OPENAI_API_KEY\n    backend: env\n    required: true\n    used_by:\n      - kind: workflow\n        id: SupportIntake\n";
        assert!(secrets_names_only(upstream));
        assert!(secrets_names_only(b"secrets:\n  - STRIPE_KEY\n"));
        assert!(!secrets_names_only(
            b"secrets:\n  - name: A\n    value: hunter2\n"
        ));
        assert!(!secrets_names_only(b"API_KEY: hunter2\n"));
        assert!(!secrets_names_only(b"secrets:\n  - name: 'not a name'\n"));
        assert!(!secrets_names_only(b"a: [1\n"));
    }

    #[test]
    fn app_name_fallbacks() {
        let m = parse_app_manifest(br#"{"appName":"Demo","preset":"chat"}"#, "dir").unwrap();
        assert_eq!(
            (m.app_name.as_str(), m.app_name_source, m.app_id),
            ("Demo", "appName", None)
        );
        assert_eq!(m.preset.as_deref(), Some("chat"));
        let m = parse_app_manifest(br#"{"name":"N","appId":"x"}"#, "dir").unwrap();
        assert_eq!((m.app_name.as_str(), m.app_name_source), ("N", "name"));
        assert_eq!(m.app_id.as_deref(), Some("x"));
        let m = parse_app_manifest(br#"{"appName":"  "}"#, "dir").unwrap();
        assert_eq!(
            (m.app_name.as_str(), m.app_name_source),
            ("dir", "directory")
        );
        for bad in [&b"[]"[..], b"{", b"\xff"] {
            assert_eq!(
                parse_app_manifest(bad, "d").map_err(|e| e.code()),
                Err("invalid_manifest")
            );
        }
    }
}
