//! The `mozaiks.mcp.v1` envelope carried in `structuredContent` of every tool response, and the
//! per-tool result payloads. These serde types are the contract: the output schemas advertised in
//! `tools/list` are generated from them.

use schemars::JsonSchema;
use serde::Serialize;

use crate::error::McpError;
use crate::layout::LayoutEntry;

/// The envelope version string.
pub const PROTOCOL_SCHEMA_VERSION: &str = "mozaiks.mcp.v1";

/// The one accepted value of `protocol_schema_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum ProtocolSchemaVersion {
    /// `mozaiks.mcp.v1`
    #[serde(rename = "mozaiks.mcp.v1")]
    V1,
}

/// The bound workspace, as every success reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceInfo {
    /// Absolute resolved workspace root.
    pub root: String,
    /// Absolute app root (`<root>/app`).
    pub app_root: String,
    /// `appId` from `app/app.json`, when it is present and valid.
    pub app_id: Option<String>,
    /// `schema_version` from `app/provenance.yaml`, when present and valid.
    pub provenance_schema_version: Option<String>,
}

/// Severity of a diagnostic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Informational.
    Info,
    /// Something was skipped or looks wrong but the tool still answered.
    Warning,
}

/// A note about how the answer was produced (skipped entries, unreadable identity, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Diagnostic {
    /// Severity.
    pub severity: Severity,
    /// Stable code.
    pub code: String,
    /// Workspace-relative path concerned, if any.
    pub path: Option<String>,
    /// Human sentence (never file content).
    pub message: String,
}

impl Diagnostic {
    pub(crate) fn warning(code: &str, path: Option<&str>, message: &str) -> Self {
        Self {
            severity: Severity::Warning,
            code: code.to_owned(),
            path: path.map(display_path),
            message: message.to_owned(),
        }
    }
}

/// A workspace path as diagnostics and findings show it: unchanged when every character is
/// printable, otherwise the escaped, quoted rendering of `snapshot::Untrusted` (control, bidi,
/// line-separator and other invisible characters made visible, length capped).
pub(crate) fn display_path(path: &str) -> String {
    if path.chars().all(snapshot::is_printable)
        && path.chars().count() <= snapshot::DEFAULT_QUOTED_CHARS
    {
        path.to_owned()
    } else {
        snapshot::Untrusted::quoted(path).to_string()
    }
}

/// `error {code, message}` of a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// Stable error code (see docs/MCP.md).
    pub code: String,
    /// Human sentence (never file content).
    pub message: String,
}

impl From<&McpError> for ErrorBody {
    fn from(e: &McpError) -> Self {
        Self {
            code: e.code().to_owned(),
            message: e.to_string(),
        }
    }
}

/// A successful response.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuccessEnvelope<R> {
    /// Always `mozaiks.mcp.v1`.
    pub protocol_schema_version: ProtocolSchemaVersion,
    /// The tool that answered.
    pub tool: String,
    /// The bound workspace.
    pub workspace: WorkspaceInfo,
    /// The tool-specific payload.
    pub result: R,
    /// Notes about the answer.
    pub diagnostics: Vec<Diagnostic>,
}

/// A failed response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailureEnvelope {
    /// Always `mozaiks.mcp.v1`.
    pub protocol_schema_version: ProtocolSchemaVersion,
    /// The tool that failed.
    pub tool: String,
    /// Stable code and message.
    pub error: ErrorBody,
    /// Notes about the failure.
    pub diagnostics: Vec<Diagnostic>,
}

/// What `structuredContent` holds: a success or a failure envelope.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Envelope<R> {
    /// `isError: false`.
    Success(SuccessEnvelope<R>),
    /// `isError: true`.
    Failure(FailureEnvelope),
}

// ---------------------------------------------------------------------------------------------
// Per-tool results.

/// `get_workspace_identity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdentityResult {
    /// `appId` from `app/app.json`.
    pub app_id: String,
    /// `appName` from `app/app.json`.
    pub app_name: String,
    /// Always `app/app.json`.
    pub app_manifest_path: String,
    /// `app/provenance.yaml` when present.
    pub provenance_path: Option<String>,
    /// `schema_version` of the provenance file.
    pub provenance_schema_version: Option<String>,
    /// Contracts declared under `contracts:` (in file order).
    pub contracts: Vec<String>,
    /// Whether `contracts:` lists `mozaiks.mcp.v1`.
    pub mcp_contract_declared: bool,
}

/// `get_canonical_layout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LayoutResult {
    /// Layout document version.
    pub layout_schema_version: String,
    /// The app root, workspace-relative (`app`).
    pub app_root: String,
    /// The pattern vocabulary in one sentence.
    pub pattern_syntax: String,
    /// Registered locations, most specific first (the first match wins).
    pub entries: Vec<LayoutEntry>,
}

/// `resolve_artifact_location`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveResult {
    /// The checked workspace-relative path.
    pub path: String,
    /// Absolute location inside the bound root.
    pub absolute_path: String,
    /// Whether a layout entry matches.
    pub registered: bool,
    /// The matching layout entry id.
    pub artifact: Option<String>,
    /// Its pattern.
    pub pattern: Option<String>,
    /// Its expected kind (`file` / `directory`).
    pub expected_kind: Option<String>,
    /// Its format.
    pub format: Option<String>,
    /// Whether the path lies under `app/`.
    pub inside_app_root: bool,
    /// What is there now: `file`, `directory`, `other` or `missing`.
    pub entry_type: String,
    /// `entry_type != missing`.
    pub exists: bool,
}

/// Status of one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModuleStatus {
    /// Manifest present and valid.
    Ok,
    /// Neither `module.yaml` nor `module.json`.
    MissingManifest,
    /// Both manifests present.
    AmbiguousManifest,
    /// The manifest does not parse or has the wrong shape.
    InvalidManifest,
}

/// One module directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModuleInfo {
    /// Directory name = module id.
    pub id: String,
    /// `app/modules/<id>`.
    pub path: String,
    /// Status.
    pub status: ModuleStatus,
    /// The manifest used.
    pub manifest_path: Option<String>,
    /// `yaml` or `json`.
    pub manifest_format: Option<String>,
    /// `name` from the manifest.
    pub name: Option<String>,
    /// `version` from the manifest.
    pub version: Option<String>,
    /// Why the manifest was refused (our vocabulary; never file content).
    pub problem: Option<String>,
}

/// `list_modules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModulesResult {
    /// Modules sorted by id.
    pub modules: Vec<ModuleInfo>,
}

/// One page schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageInfo {
    /// File stem.
    pub name: String,
    /// Workspace-relative path.
    pub path: String,
    /// `json` or `yaml`.
    pub format: String,
    /// Size in bytes.
    pub size_bytes: u64,
}

/// `list_pages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PagesResult {
    /// Page schemas sorted by path.
    pub pages: Vec<PageInfo>,
}

/// One validation finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// Stable code (`invalid_json`, `invalid_yaml`, `invalid_python`, …).
    pub code: String,
    /// Workspace-relative path.
    pub path: String,
    /// Human sentence (never file content).
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<u64>,
    /// 1-based column, when known.
    pub column: Option<u64>,
}

/// Files checked per kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckCounts {
    /// `.json` files parsed.
    pub json: u64,
    /// `.yaml`/`.yml` files parsed.
    pub yaml: u64,
    /// `.py` files syntax-checked.
    pub python: u64,
    /// Other files (counted, not parsed).
    pub other: u64,
}

/// Bounds applied by `validate_app_bundle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidationLimits {
    /// Most files walked.
    pub max_files: u64,
    /// Most bytes read.
    pub max_bytes: u64,
    /// Largest single parsed file.
    pub max_file_bytes: u64,
    /// Deepest directory nesting under `app/`.
    pub max_depth: u64,
}

/// `validate_app_bundle`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidationResult {
    /// No findings.
    pub valid: bool,
    /// What this validation is (and is not).
    pub scope: String,
    /// Files walked.
    pub files_checked: u64,
    /// Bytes read.
    pub bytes_checked: u64,
    /// Per-kind counts.
    pub counts: CheckCounts,
    /// Findings sorted by path then code.
    pub findings: Vec<Finding>,
    /// Bounds applied.
    pub limits: ValidationLimits,
}

/// One planned command (never executed by this server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlannedCommand {
    /// Stable id.
    pub id: String,
    /// What it checks.
    pub description: String,
    /// argv, first element the program; paths are workspace-relative.
    pub argv: Vec<String>,
    /// Working directory, workspace-relative (`.`).
    pub cwd: String,
}

/// `plan_validation_commands`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanResult {
    /// Always false: this server never runs commands.
    pub executed: bool,
    /// Always true: running them is the developer's decision.
    pub requires_confirmation: bool,
    /// Planned commands in a stable order.
    pub commands: Vec<PlannedCommand>,
}

#[cfg(test)]
mod display_tests {
    use super::display_path;

    #[test]
    fn hostile_names_are_escaped_in_diagnostics() {
        assert_eq!(display_path("app/modules/notes"), "app/modules/notes");
        for hostile in [
            "app/a\u{2028}b",
            "app/a\u{85}b",
            "app/\u{1b}[31m",
            "app/\u{202e}txt.py",
        ] {
            let shown = display_path(hostile);
            assert!(shown.starts_with('\''), "{shown}");
            assert!(shown.chars().all(snapshot::is_printable), "{shown}");
        }
        assert!(display_path(&"a".repeat(500)).len() < 300);
    }
}
