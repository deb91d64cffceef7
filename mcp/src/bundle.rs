//! The ADR 0004 tools over the app bundle: identity, layout, modules, pages, local validation and
//! the validation plan. Everything here reads through the workspace handle; nothing is imported,
//! executed or written.

use serde_json::Value;

use crate::bounded::{self, Format, ParseError, SingleDocError, YamlLimits, YamlNode};
use crate::envelope::{
    CheckCounts, Diagnostic, Finding, IdentityResult, LayoutResult, ModuleInfo, ModuleStatus,
    ModulesResult, PROTOCOL_SCHEMA_VERSION, PageInfo, PagesResult, PlanResult, PlannedCommand,
    ResolveResult, ValidationLimits, ValidationResult, WorkspaceInfo,
};
use crate::error::McpError;
use crate::layout::{
    self, APP_MANIFEST, APP_ROOT, LAYOUT, MODULES_DIR, PAGES_DIR, PROVENANCE, is_identifier,
};
use crate::workspace::{EntryKind, ListedKind, RequestPath, Workspace};

/// Largest manifest (`app.json`, `provenance.yaml`, module manifests).
pub const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;
/// Most files `validate_app_bundle` walks.
pub const MAX_BUNDLE_FILES: u64 = 2_000;
/// Most bytes `validate_app_bundle` reads.
pub const MAX_BUNDLE_BYTES: u64 = 32 * 1024 * 1024;
/// Largest single file `validate_app_bundle` parses.
pub const MAX_PARSED_FILE_BYTES: u64 = 1024 * 1024;
/// Most directory entries (files, directories, others) `validate_app_bundle` and
/// `plan_validation_commands` walk.
pub const MAX_BUNDLE_ENTRIES: u64 = 20_000;
/// Most findings one `validate_app_bundle` answer lists; a `truncated` diagnostic counts the rest.
pub const MAX_FINDINGS: usize = 1_000;
/// Deepest directory nesting under `app/`.
pub const MAX_BUNDLE_DEPTH: u64 = 24;
/// Layout document version.
pub const LAYOUT_SCHEMA_VERSION: &str = "mozaiks.app_layout.v1";

const SCOPE: &str = "Local deterministic fallback validation only: JSON and YAML manifests parse, \
Python sources are syntactically valid (parsed, never compiled or imported), the secrets contract \
is names-only, and the identity and provenance manifests have their required fields. It is not an \
acceptance gate and grants nothing.";

/// `app/app.json` identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppIdentity {
    /// `appId`.
    pub app_id: String,
    /// `appName`.
    pub app_name: String,
}

/// `app/provenance.yaml` fields used here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// `schema_version`.
    pub schema_version: String,
    /// `contracts:` entries.
    pub contracts: Vec<String>,
}

fn is_app_id(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 128
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn invalid(path: &str, reason: &str) -> McpError {
    McpError::InvalidManifest {
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Parses `app/app.json`: a JSON object (strict: no duplicate keys) with string `appId`
/// (`[A-Za-z0-9._-]{1,128}`) and non-empty string `appName` (≤ 256 chars).
///
/// # Errors
/// `invalid_manifest` naming the rule broken.
pub fn parse_app_manifest(bytes: &[u8]) -> Result<AppIdentity, McpError> {
    let value: Value = bounded::parse_json(
        bytes,
        usize::try_from(MAX_MANIFEST_BYTES).unwrap_or(usize::MAX),
    )
    .map_err(|e| {
        if e.is_limit() {
            McpError::ParseLimit {
                path: APP_MANIFEST.to_owned(),
                code: e.code(Format::Json),
                reason: e.to_string(),
            }
        } else {
            invalid(APP_MANIFEST, &e.to_string())
        }
    })?;
    let object = value
        .as_object()
        .ok_or_else(|| invalid(APP_MANIFEST, "not a JSON object"))?;
    let app_id = object
        .get("appId")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(APP_MANIFEST, "appId missing or not a string"))?;
    if !is_app_id(app_id) {
        return Err(invalid(
            APP_MANIFEST,
            "appId must be 1-128 of [A-Za-z0-9._-]",
        ));
    }
    let app_name = object
        .get("appName")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(APP_MANIFEST, "appName missing or not a string"))?;
    if app_name.trim().is_empty() || app_name.chars().count() > 256 {
        return Err(invalid(APP_MANIFEST, "appName must be 1-256 characters"));
    }
    Ok(AppIdentity {
        app_id: app_id.to_owned(),
        app_name: app_name.to_owned(),
    })
}

fn load_yaml_single(path: &str, bytes: &[u8]) -> Result<YamlNode, McpError> {
    bounded::load_yaml_single(bytes, &YamlLimits::default()).map_err(|e| match e {
        SingleDocError::Count => invalid(path, "expected exactly one YAML document"),
        SingleDocError::Parse(e) if e.is_limit() => McpError::ParseLimit {
            path: path.to_owned(),
            code: e.code(Format::Yaml),
            reason: e.to_string(),
        },
        SingleDocError::Parse(ParseError::NotUtf8) => invalid(path, "not UTF-8"),
        SingleDocError::Parse(_) => invalid(path, "YAML does not parse"),
    })
}

fn yaml_str<'a>(doc: &'a YamlNode, key: &str) -> Option<&'a str> {
    doc.as_mapping_get(key).and_then(YamlNode::as_str)
}

/// Parses `app/provenance.yaml`: one mapping with a string `schema_version` and a `contracts`
/// list of strings.
///
/// # Errors
/// `invalid_manifest` naming the rule broken.
pub fn parse_provenance(bytes: &[u8]) -> Result<Provenance, McpError> {
    let doc = load_yaml_single(PROVENANCE, bytes)?;
    if doc.as_mapping().is_none() {
        return Err(invalid(PROVENANCE, "not a mapping"));
    }
    let schema_version = yaml_str(&doc, "schema_version")
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .ok_or_else(|| invalid(PROVENANCE, "schema_version missing or not a string"))?
        .to_owned();
    let contracts = match doc.as_mapping_get("contracts") {
        None => Vec::new(),
        Some(node) => node
            .as_vec()
            .ok_or_else(|| invalid(PROVENANCE, "contracts must be a list"))?
            .iter()
            .map(|item| {
                item.as_str()
                    .filter(|s| !s.is_empty() && s.len() <= 128)
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(PROVENANCE, "contracts entries must be strings"))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    Ok(Provenance {
        schema_version,
        contracts,
    })
}

impl Workspace {
    /// The envelope's `workspace` block; identity problems become diagnostics, never failures.
    pub(crate) fn info(&self, diagnostics: &mut Vec<Diagnostic>) -> WorkspaceInfo {
        let app_id = match self.read_str(APP_MANIFEST, MAX_MANIFEST_BYTES) {
            Ok(bytes) => match parse_app_manifest(&bytes) {
                Ok(identity) => Some(identity.app_id),
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
        let provenance_schema_version = match self.read_str(PROVENANCE, MAX_MANIFEST_BYTES) {
            Ok(bytes) => match parse_provenance(&bytes) {
                Ok(p) => Some(p.schema_version),
                Err(e) => {
                    diagnostics.push(Diagnostic::warning(
                        e.code(),
                        Some(PROVENANCE),
                        &e.to_string(),
                    ));
                    None
                }
            },
            Err(_) => None,
        };
        WorkspaceInfo {
            root: self.root_text().to_owned(),
            app_root: format!("{}/{APP_ROOT}", self.root_text().trim_end_matches('/')),
            app_id,
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
    /// `app_root_not_found`, `invalid_manifest`, read errors.
    pub fn workspace_identity(&self) -> Result<(IdentityResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let identity = parse_app_manifest(&self.read_str(APP_MANIFEST, MAX_MANIFEST_BYTES)?)?;
        let mut diagnostics = Vec::new();
        let provenance = match self.read_str(PROVENANCE, MAX_MANIFEST_BYTES) {
            Ok(bytes) => Some(parse_provenance(&bytes)?),
            Err(McpError::NotFound { .. }) => {
                diagnostics.push(Diagnostic::warning(
                    "provenance_missing",
                    Some(PROVENANCE),
                    "app/provenance.yaml is missing; no contracts are declared.",
                ));
                None
            }
            Err(e) => return Err(e),
        };
        let contracts = provenance
            .as_ref()
            .map(|p| p.contracts.clone())
            .unwrap_or_default();
        let mcp_contract_declared = contracts.iter().any(|c| c == PROTOCOL_SCHEMA_VERSION);
        Ok((
            IdentityResult {
                app_id: identity.app_id,
                app_name: identity.app_name,
                app_manifest_path: APP_MANIFEST.to_owned(),
                provenance_path: provenance.as_ref().map(|_| PROVENANCE.to_owned()),
                provenance_schema_version: provenance.map(|p| p.schema_version),
                contracts,
                mcp_contract_declared,
            },
            diagnostics,
        ))
    }

    /// `resolve_artifact_location`.
    ///
    /// # Errors
    /// The path rules, `symlink_escape`, read errors.
    pub fn resolve_artifact(&self, path: &RequestPath) -> Result<ResolveResult, McpError> {
        let kind = self.kind(path)?;
        let entry = layout::match_path(path.as_str());
        let text = path.as_str();
        Ok(ResolveResult {
            path: text.to_owned(),
            absolute_path: format!("{}/{text}", self.root_text().trim_end_matches('/')),
            registered: entry.is_some(),
            artifact: entry.map(|e| e.id.to_owned()),
            pattern: entry.map(|e| e.pattern.to_owned()),
            expected_kind: entry.map(|e| e.kind.to_owned()),
            format: entry.map(|e| e.format.to_owned()),
            inside_app_root: text == APP_ROOT || text.starts_with("app/"),
            entry_type: kind.as_str().to_owned(),
            exists: kind != EntryKind::Missing,
        })
    }

    /// `list_modules`: enumerates `app/modules/*` and parses manifests; imports nothing.
    ///
    /// # Errors
    /// `app_root_not_found`, `symlink_escape`, read errors.
    pub fn list_modules(&self) -> Result<(ModulesResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let mut diagnostics = Vec::new();
        let mut modules = Vec::new();
        let listing = self.list_dir_bounded(MODULES_DIR)?;
        note_truncated(&mut diagnostics, MODULES_DIR, listing.as_ref());
        let mut manifest_bytes = 0u64;
        for entry in listing.map(|l| l.entries).unwrap_or_default() {
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
                ListedKind::File | ListedKind::Other => {
                    diagnostics.push(Diagnostic::warning(
                        "not_a_module",
                        Some(&path),
                        "Not a directory; skipped.",
                    ));
                    continue;
                }
            }
            if !is_identifier(name) {
                diagnostics.push(Diagnostic::warning(
                    "invalid_module_id",
                    Some(&path),
                    "Module directory name is not an identifier ([a-z0-9_-], 1-64); skipped.",
                ));
                continue;
            }
            if manifest_bytes > MAX_BUNDLE_BYTES {
                diagnostics.push(Diagnostic::warning(
                    "truncated",
                    Some(MODULES_DIR),
                    &format!(
                        "Module manifests read exceed {MAX_BUNDLE_BYTES} bytes; the modules after this one are not listed."
                    ),
                ));
                break;
            }
            let info = self.module_info(name, path, &mut manifest_bytes)?;
            modules.push(info);
        }
        Ok((ModulesResult { modules }, diagnostics))
    }

    fn module_info(
        &self,
        id: &str,
        path: String,
        bytes_read: &mut u64,
    ) -> Result<ModuleInfo, McpError> {
        let yaml_path = format!("{path}/module.yaml");
        let json_path = format!("{path}/module.json");
        let has_yaml = self.kind_str(&yaml_path)? == EntryKind::File;
        let has_json = self.kind_str(&json_path)? == EntryKind::File;
        let mut info = ModuleInfo {
            id: id.to_owned(),
            path,
            status: ModuleStatus::Ok,
            manifest_path: None,
            manifest_format: None,
            name: None,
            version: None,
            problem: None,
        };
        let (manifest, format) = match (has_yaml, has_json) {
            (false, false) => {
                info.status = ModuleStatus::MissingManifest;
                info.problem = Some("neither module.yaml nor module.json exists".into());
                return Ok(info);
            }
            (true, true) => {
                info.status = ModuleStatus::AmbiguousManifest;
                info.problem = Some("both module.yaml and module.json exist".into());
                return Ok(info);
            }
            (true, false) => (yaml_path, "yaml"),
            (false, true) => (json_path, "json"),
        };
        info.manifest_path = Some(manifest.clone());
        info.manifest_format = Some(format.to_owned());
        let bytes = match self.read_str(&manifest, MAX_MANIFEST_BYTES) {
            Ok(bytes) => bytes,
            // One unreadable or special manifest makes that module invalid, not the whole list.
            Err(
                e @ (McpError::PermissionDenied { .. }
                | McpError::NotAFile { .. }
                | McpError::NotFound { .. }
                | McpError::TooLarge { .. }
                | McpError::Io { .. }),
            ) => {
                info.status = ModuleStatus::InvalidManifest;
                info.problem = Some(format!("manifest could not be read ({})", e.code()));
                return Ok(info);
            }
            Err(e) => return Err(e),
        };
        *bytes_read = bytes_read.saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
        match parse_module_manifest(&manifest, format, &bytes, id) {
            Ok((name, version)) => {
                info.name = name;
                info.version = version;
            }
            Err(e) => {
                info.status = ModuleStatus::InvalidManifest;
                info.problem = Some(match e {
                    McpError::InvalidManifest { reason, .. } => reason,
                    other => other.to_string(),
                });
            }
        }
        Ok(info)
    }

    /// `list_pages`: the page schema files directly under `app/ui/pages`.
    ///
    /// # Errors
    /// `app_root_not_found`, `symlink_escape`, read errors.
    pub fn list_pages(&self) -> Result<(PagesResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let mut diagnostics = Vec::new();
        let mut pages = Vec::new();
        let listing = self.list_dir_bounded(PAGES_DIR)?;
        note_truncated(&mut diagnostics, PAGES_DIR, listing.as_ref());
        for entry in listing.map(|l| l.entries).unwrap_or_default() {
            let Some(name) = entry.name.as_deref() else {
                diagnostics.push(Diagnostic::warning(
                    "invalid_path",
                    Some(PAGES_DIR),
                    "A page entry name is not UTF-8; skipped.",
                ));
                continue;
            };
            let path = format!("{PAGES_DIR}/{name}");
            if entry.kind != ListedKind::File {
                diagnostics.push(Diagnostic::warning(
                    "not_a_page",
                    Some(&path),
                    "Not a regular file (links are not followed); skipped.",
                ));
                continue;
            }
            let (stem, format) = if let Some(stem) = name.strip_suffix(".json") {
                (stem, "json")
            } else if let Some(stem) = name.strip_suffix(".yaml") {
                (stem, "yaml")
            } else {
                diagnostics.push(Diagnostic::warning(
                    "not_a_page",
                    Some(&path),
                    "Not a .json or .yaml page schema; skipped.",
                ));
                continue;
            };
            if !is_identifier(stem) {
                diagnostics.push(Diagnostic::warning(
                    "invalid_page_name",
                    Some(&path),
                    "Page name is not an identifier ([a-z0-9_-], 1-64); skipped.",
                ));
                continue;
            }
            let size_bytes = self.file_len(&path)?;
            pages.push(PageInfo {
                name: stem.to_owned(),
                path,
                format: format.to_owned(),
                size_bytes,
            });
        }
        Ok((PagesResult { pages }, diagnostics))
    }

    /// `validate_app_bundle`.
    ///
    /// # Errors
    /// `app_root_not_found`, `too_large` when the bundle exceeds its bounds, read errors.
    pub fn validate_bundle(&self) -> Result<(ValidationResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let files = self.walk_app()?;
        let mut findings = files.findings;
        let mut counts = CheckCounts::default();
        let mut bytes_checked = 0u64;
        for path in &files.files {
            let check = FileCheck::for_path(path);
            if check == FileCheck::Other {
                counts.other += 1;
                continue;
            }
            let bytes = match self.read_str(path, MAX_PARSED_FILE_BYTES) {
                Ok(bytes) => bytes,
                Err(McpError::TooLarge { .. }) => {
                    findings.push(finding(
                        "too_large",
                        path,
                        "File exceeds the parse limit.",
                        None,
                    ));
                    continue;
                }
                // One unreadable file (EACCES, swapped for a special file, vanished) is a
                // finding of its own; the rest of the bundle is still checked.
                Err(
                    e @ (McpError::PermissionDenied { .. }
                    | McpError::NotAFile { .. }
                    | McpError::NotFound { .. }
                    | McpError::Io { .. }),
                ) => {
                    findings.push(finding(e.code(), path, "File could not be read.", None));
                    continue;
                }
                Err(e) => return Err(e),
            };
            bytes_checked =
                bytes_checked.saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
            if bytes_checked > MAX_BUNDLE_BYTES {
                return Err(McpError::TooLarge {
                    what: "bundle bytes".into(),
                    limit: MAX_BUNDLE_BYTES,
                });
            }
            match check {
                FileCheck::Json => counts.json += 1,
                FileCheck::Yaml => counts.yaml += 1,
                FileCheck::Python => counts.python += 1,
                FileCheck::Other => {}
            }
            if let Some(f) = check_file(path, check, &bytes) {
                findings.push(f);
            }
        }
        findings.extend(self.manifest_findings(&files.files)?);
        findings.sort_by(|a, b| (&a.path, &a.code, a.line).cmp(&(&b.path, &b.code, b.line)));
        findings.dedup();
        let mut diagnostics = files.diagnostics;
        if findings.len() > MAX_FINDINGS {
            let omitted = findings.len() - MAX_FINDINGS;
            findings.truncate(MAX_FINDINGS);
            diagnostics.push(Diagnostic::warning(
                "truncated",
                None,
                &format!(
                    "{omitted} more findings were left out; the first {MAX_FINDINGS} by path are listed."
                ),
            ));
        }
        Ok((
            ValidationResult {
                valid: findings.is_empty(),
                scope: SCOPE.to_owned(),
                files_checked: u64::try_from(files.files.len()).unwrap_or(u64::MAX),
                bytes_checked,
                counts,
                findings,
                limits: ValidationLimits {
                    max_files: MAX_BUNDLE_FILES,
                    max_bytes: MAX_BUNDLE_BYTES,
                    max_file_bytes: MAX_PARSED_FILE_BYTES,
                    max_depth: MAX_BUNDLE_DEPTH,
                },
            },
            diagnostics,
        ))
    }

    /// Identity, provenance, required layout entries and module manifests.
    fn manifest_findings(&self, files: &[String]) -> Result<Vec<Finding>, McpError> {
        let mut out = Vec::new();
        if let Err(e) = self
            .read_str(APP_MANIFEST, MAX_MANIFEST_BYTES)
            .and_then(|b| parse_app_manifest(&b))
        {
            out.push(finding(e.code(), APP_MANIFEST, &e.to_string(), None));
        }
        for entry in LAYOUT.iter().filter(|e| e.required && e.kind == "file") {
            if !files.iter().any(|f| f == entry.pattern) {
                out.push(finding(
                    "missing_required_file",
                    entry.pattern,
                    "A required layout file is missing.",
                    None,
                ));
            }
        }
        if files.iter().any(|f| f == PROVENANCE) {
            match self
                .read_str(PROVENANCE, MAX_MANIFEST_BYTES)
                .and_then(|b| parse_provenance(&b))
            {
                Ok(p) if p.contracts.iter().any(|c| c == PROTOCOL_SCHEMA_VERSION) => {}
                Ok(_) => out.push(finding(
                    "mcp_contract_not_declared",
                    PROVENANCE,
                    "contracts: does not list mozaiks.mcp.v1.",
                    None,
                )),
                Err(e) => out.push(finding(e.code(), PROVENANCE, &e.to_string(), None)),
            }
        }
        let (modules, _) = self.list_modules()?;
        for module in modules.modules {
            if module.status != ModuleStatus::Ok {
                let path = module.manifest_path.unwrap_or(module.path);
                out.push(finding(
                    "invalid_module",
                    &path,
                    module
                        .problem
                        .as_deref()
                        .unwrap_or("module manifest rejected"),
                    None,
                ));
            }
        }
        Ok(out)
    }

    /// `plan_validation_commands`: argv lists for the developer to run; nothing runs here.
    ///
    /// # Errors
    /// `app_root_not_found`, `too_large`, read errors.
    pub fn plan_validation(&self) -> Result<(PlanResult, Vec<Diagnostic>), McpError> {
        self.require_app_root()?;
        let files = self.walk_app()?;
        let pick = |check: FileCheck| -> Vec<String> {
            files
                .files
                .iter()
                .filter(|p| FileCheck::for_path(p) == check)
                .cloned()
                .collect()
        };
        let mut commands = Vec::new();
        let python = pick(FileCheck::Python);
        if !python.is_empty() {
            let mut argv = vec![
                "python3".to_owned(),
                "-m".to_owned(),
                "py_compile".to_owned(),
            ];
            argv.extend(python);
            commands.push(PlannedCommand {
                id: "python_syntax".into(),
                description: "Byte-compile every Python source under app/ (syntax check).".into(),
                argv,
                cwd: ".".into(),
            });
        }
        for json in pick(FileCheck::Json) {
            commands.push(PlannedCommand {
                id: format!("json_parse:{json}"),
                description: "Parse one JSON manifest.".into(),
                argv: vec![
                    "python3".into(),
                    "-m".into(),
                    "json.tool".into(),
                    json,
                    "/dev/null".into(),
                ],
                cwd: ".".into(),
            });
        }
        let tests_dir = "app/tests";
        if self.kind_str(tests_dir)? == EntryKind::Directory {
            commands.push(PlannedCommand {
                id: "pytest".into(),
                description: "Run the app's own tests (imports and executes app code: review before running).".into(),
                argv: vec!["python3".into(), "-m".into(), "pytest".into(), "-q".into(), tests_dir.into()],
                cwd: ".".into(),
            });
        }
        let mut diagnostics: Vec<Diagnostic> = files
            .findings
            .iter()
            .take(MAX_FINDINGS)
            .map(|f| Diagnostic::warning(&f.code, Some(&f.path), &f.message))
            .collect();
        diagnostics.extend(files.diagnostics.iter().cloned());
        Ok((
            PlanResult {
                executed: false,
                requires_confirmation: true,
                commands,
            },
            diagnostics,
        ))
    }

    fn file_len(&self, path: &str) -> Result<u64, McpError> {
        self.metadata_len(path)
    }

    /// Walks `app/` depth-first in name order without following links, bounded in count and depth.
    fn walk_app(&self) -> Result<Walk, McpError> {
        let mut walk = Walk {
            files: Vec::new(),
            findings: Vec::new(),
            diagnostics: Vec::new(),
        };
        let mut seen = 0u64;
        let mut stack = vec![(APP_ROOT.to_owned(), 0u64)];
        while let Some((dir, depth)) = stack.pop() {
            let listing = match self.list_dir_bounded(&dir) {
                Ok(Some(listing)) => listing,
                Ok(None) => continue,
                // An unreadable directory is a finding; the rest of the bundle is still walked.
                Err(e @ (McpError::PermissionDenied { .. } | McpError::Io { .. })) => {
                    walk.findings.push(finding(
                        e.code(),
                        &dir,
                        "Directory could not be read.",
                        None,
                    ));
                    continue;
                }
                Err(e) => return Err(e),
            };
            note_truncated(&mut walk.diagnostics, &dir, Some(&listing));
            seen = seen.saturating_add(listing.total);
            if seen > MAX_BUNDLE_ENTRIES {
                return Err(McpError::TooLarge {
                    what: "bundle entries".into(),
                    limit: MAX_BUNDLE_ENTRIES,
                });
            }
            let mut subdirs = Vec::new();
            for entry in listing.entries {
                let Some(name) = entry.name else {
                    walk.findings.push(finding(
                        "invalid_path",
                        &dir,
                        "An entry name is not UTF-8.",
                        None,
                    ));
                    continue;
                };
                let path = format!("{dir}/{name}");
                if snapshot::RepoPath::parse(&path).is_err() {
                    walk.findings.push(finding(
                        "invalid_path",
                        &dir,
                        "An entry name is not a portable path segment.",
                        None,
                    ));
                    continue;
                }
                match entry.kind {
                    ListedKind::Symlink => walk.findings.push(finding(
                        "symlink_in_bundle",
                        &path,
                        "Symbolic links are not followed inside the bundle.",
                        None,
                    )),
                    ListedKind::Other => walk.findings.push(finding(
                        "special_file",
                        &path,
                        "Not a regular file or directory.",
                        None,
                    )),
                    ListedKind::Directory => {
                        if depth + 1 > MAX_BUNDLE_DEPTH {
                            return Err(McpError::TooLarge {
                                what: "bundle depth".into(),
                                limit: MAX_BUNDLE_DEPTH,
                            });
                        }
                        subdirs.push((path, depth + 1));
                    }
                    ListedKind::File => {
                        walk.files.push(path);
                        if u64::try_from(walk.files.len()).unwrap_or(u64::MAX) > MAX_BUNDLE_FILES {
                            return Err(McpError::TooLarge {
                                what: "bundle files".into(),
                                limit: MAX_BUNDLE_FILES,
                            });
                        }
                    }
                }
            }
            stack.extend(subdirs.into_iter().rev());
        }
        walk.files.sort();
        Ok(walk)
    }
}

struct Walk {
    files: Vec<String>,
    findings: Vec<Finding>,
    diagnostics: Vec<Diagnostic>,
}

/// The `truncated` diagnostic of a directory listing that left entries out.
fn note_truncated(
    diagnostics: &mut Vec<Diagnostic>,
    dir: &str,
    listing: Option<&crate::workspace::DirListing>,
) {
    let Some(listing) = listing else { return };
    let omitted = listing.omitted();
    if omitted > 0 {
        diagnostics.push(Diagnostic::warning(
            "truncated",
            Some(dir),
            &format!(
                "The directory holds {} entries; the first {} by name are used and {omitted} were left out.",
                listing.total,
                listing.entries.len()
            ),
        ));
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileCheck {
    Json,
    Yaml,
    Python,
    Other,
}

impl FileCheck {
    fn for_path(path: &str) -> Self {
        if path.ends_with(".json") {
            Self::Json
        } else if path.ends_with(".yaml") || path.ends_with(".yml") {
            Self::Yaml
        } else if path.ends_with(".py") {
            Self::Python
        } else {
            Self::Other
        }
    }
}

fn finding(code: &str, path: &str, message: &str, at: Option<(u64, u64)>) -> Finding {
    Finding {
        code: code.to_owned(),
        path: crate::envelope::display_path(path),
        message: message.to_owned(),
        line: at.map(|(l, _)| l),
        column: at.map(|(_, c)| c),
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_col(text: &str, offset: usize) -> (u64, u64) {
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

/// The finding for a bounded parser's refusal: limits keep their own code.
fn parse_finding(path: &str, format: Format, e: &ParseError) -> Finding {
    let message = match (e, format) {
        (ParseError::Syntax { .. }, Format::Json) => "JSON does not parse.".to_owned(),
        (ParseError::Syntax { .. }, Format::Yaml) => "YAML does not parse.".to_owned(),
        (ParseError::NotUtf8, _) => "File is not UTF-8.".to_owned(),
        (ParseError::Json { reason }, _) => format!("JSON rejected: {reason}."),
        (_, Format::Yaml) => format!("YAML rejected: {e}."),
        (_, Format::Json) => format!("JSON rejected: {e}."),
        (_, Format::Python) => format!("Python source rejected: {e}."),
    };
    finding(e.code(format), path, &message, e.position())
}

/// Checks one file's syntax; the finding never quotes the file.
fn check_file(path: &str, check: FileCheck, bytes: &[u8]) -> Option<Finding> {
    if check == FileCheck::Json {
        return match bounded::parse_json::<Value>(bytes, usize::MAX) {
            Ok(_) => None,
            Err(e) => Some(parse_finding(path, Format::Json, &e)),
        };
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Some(finding("not_utf8", path, "File is not UTF-8.", None));
    };
    match check {
        FileCheck::Yaml => {
            if let Err(e) = bounded::load_yaml(text, &YamlLimits::default()) {
                return Some(parse_finding(path, Format::Yaml, &e));
            }
            if snapshot::is_secret_contract_path(path)
                && snapshot::validate_secret_contract_text(path, text).is_err()
            {
                return Some(finding(
                    "secrets_not_names_only",
                    path,
                    "The secrets contract must list secret names only, never values.",
                    None,
                ));
            }
            None
        }
        FileCheck::Python => {
            if let Err(e) = bounded::check_python_nesting(text) {
                return Some(parse_finding(path, Format::Python, &e));
            }
            let _budget = crate::budget::reserve(
                crate::budget::Work::Python,
                u64::try_from(text.len()).unwrap_or(u64::MAX),
            );
            match rustpython_parser::parse(text, rustpython_parser::Mode::Module, path) {
                Ok(rustpython_parser::ast::Mod::Module(module)) => {
                    crate::pytargets::first_invalid_target(&module.body).map(|offset| {
                        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
                        finding(
                            "invalid_python",
                            path,
                            "Python source has an invalid assignment or deletion target.",
                            Some(line_col(text, offset)),
                        )
                    })
                }
                Ok(_) => None,
                Err(e) => {
                    let offset = usize::try_from(u32::from(e.offset)).unwrap_or(usize::MAX);
                    Some(finding(
                        "invalid_python",
                        path,
                        "Python source has a syntax error.",
                        Some(line_col(text, offset)),
                    ))
                }
            }
        }
        FileCheck::Json | FileCheck::Other => None,
    }
}

fn parse_module_manifest(
    path: &str,
    format: &str,
    bytes: &[u8],
    dir_id: &str,
) -> Result<(Option<String>, Option<String>), McpError> {
    let field = |name: &str,
                 get: &dyn Fn(&str) -> Option<Option<String>>|
     -> Result<Option<String>, McpError> {
        get(name).ok_or_else(|| invalid(path, &format!("{name} must be a string")))
    };
    let (id, name, version) = if format == "json" {
        let value: Value = bounded::parse_json(bytes, usize::MAX).map_err(|e| {
            if e.is_limit() {
                McpError::ParseLimit {
                    path: path.to_owned(),
                    code: e.code(Format::Json),
                    reason: e.to_string(),
                }
            } else {
                invalid(path, &e.to_string())
            }
        })?;
        let object = value
            .as_object()
            .ok_or_else(|| invalid(path, "not a JSON object"))?;
        let get = |key: &str| match object.get(key) {
            None => Some(None),
            Some(v) => v.as_str().map(|s| Some(s.to_owned())),
        };
        (
            field("id", &get)?,
            field("name", &get)?,
            field("version", &get)?,
        )
    } else {
        let doc = load_yaml_single(path, bytes)?;
        if doc.as_mapping().is_none() {
            return Err(invalid(path, "not a mapping"));
        }
        let get = |key: &str| match doc.as_mapping_get(key) {
            None => Some(None),
            Some(v) => v.as_str().map(|s| Some(s.to_owned())),
        };
        (
            field("id", &get)?,
            field("name", &get)?,
            field("version", &get)?,
        )
    };
    match id {
        Some(id) if id == dir_id => Ok((name, version)),
        Some(_) => Err(invalid(path, "id differs from the module directory name")),
        None => Err(invalid(path, "id missing")),
    }
}

/// `get_canonical_layout` (static; the same registry every other tool matches against).
#[must_use]
pub fn canonical_layout() -> LayoutResult {
    LayoutResult {
        layout_schema_version: LAYOUT_SCHEMA_VERSION.to_owned(),
        app_root: APP_ROOT.to_owned(),
        pattern_syntax:
            "Segments separated by '/': a literal, <id> (one identifier of [a-z0-9_-], \
1-64, starting alphanumeric), *.ext (one file name with that extension), or a final ** (one or \
more segments). The first matching entry wins."
                .to_owned(),
        entries: LAYOUT.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_chars() {
        assert_eq!(line_col("ab\ncdé\nx", 7), (2, 4));
        assert_eq!(line_col("ab\ncdé\nx", 8), (3, 1));
        assert_eq!(line_col("ab\ncdé\nx", 6), (2, 3));
        assert_eq!(line_col("abc", 0), (1, 1));
    }

    #[test]
    fn app_manifest_rules() {
        assert!(parse_app_manifest(br#"{"appId":"demo-app","appName":"Demo"}"#).is_ok());
        for bad in [
            &br#"{"appId":"demo","appId":"x","appName":"Demo"}"#[..],
            br#"{"appId":"de mo","appName":"Demo"}"#,
            br#"{"appName":"Demo"}"#,
            br#"{"appId":"demo","appName":""}"#,
            br#"[]"#,
        ] {
            assert_eq!(
                parse_app_manifest(bad).map_err(|e| e.code()),
                Err("invalid_manifest")
            );
        }
    }

    #[test]
    fn provenance_rules() {
        let ok = parse_provenance(b"schema_version: v1\ncontracts:\n  - mozaiks.mcp.v1\n").unwrap();
        assert_eq!(ok.contracts, vec!["mozaiks.mcp.v1".to_owned()]);
        assert!(parse_provenance(b"contracts: []\n").is_err());
        assert!(parse_provenance(b"schema_version: v1\ncontracts: mozaiks.mcp.v1\n").is_err());
        assert!(parse_provenance(b"schema_version: v1\n---\nschema_version: v2\n").is_err());
    }

    #[test]
    fn syntax_checks_report_position_without_content() {
        let f = check_file("app/x.py", FileCheck::Python, b"def f(:\n  pass\n").unwrap();
        assert_eq!((f.code.as_str(), f.line), ("invalid_python", Some(1)));
        assert!(!f.message.contains("def"));
        assert!(
            check_file(
                "app/x.py",
                FileCheck::Python,
                b"import os\nmatch x:\n  case 1: pass\n"
            )
            .is_none()
        );
        // PEP 695 parses; PEP 701 f-strings (reused quotes) do not: documented in docs/MCP.md.
        assert!(check_file("app/x.py", FileCheck::Python, b"type Alias = int\n").is_none());
        let pep701 = check_file("app/x.py", FileCheck::Python, b"x = f\"{d[\"k\"]}\"\n");
        assert_eq!(pep701.map(|f| f.code), Some("invalid_python".to_owned()));
        let f = check_file("app/x.yaml", FileCheck::Yaml, b"a: [1, 2\n").unwrap();
        assert_eq!(f.code, "invalid_yaml");
        let f = check_file("app/x.json", FileCheck::Json, b"{\"a\": }").unwrap();
        assert_eq!((f.code.as_str(), f.line), ("invalid_json", Some(1)));
        let f = check_file(
            "app/security/secrets.yaml",
            FileCheck::Yaml,
            b"secrets:\n  - name: API_KEY\nAPI_KEY: hunter2\n",
        )
        .unwrap();
        assert_eq!(f.code, "secrets_not_names_only");
        assert!(!f.message.contains("hunter2"));
    }

    #[test]
    fn deep_nesting_does_not_overflow_on_the_tool_stack() {
        let deep_py = format!("x = {}1{}\n", "(".repeat(5_000), ")".repeat(5_000));
        let deep_yaml = format!("{}{}", "[".repeat(50_000), "]".repeat(50_000));
        let chain = format!("x = {}1\n", "1+".repeat(200_000));
        crate::server::on_tool_stack(move || {
            let _ = check_file("a.py", FileCheck::Python, deep_py.as_bytes());
            let _ = check_file("a.yaml", FileCheck::Yaml, deep_yaml.as_bytes());
            let _ = check_file("b.py", FileCheck::Python, chain.as_bytes());
        })
        .unwrap();
    }
}
