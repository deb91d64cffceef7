//! The upstream app layout registry (`mozaiks.app_layout.v2`): every registered artifact family (123)
//! with its owner, requirement, condition, multiplicity, scope and path template, the prohibited
//! legacy paths, and the one matcher over it (`match_path` semantics: the families of one scope
//! whose template matches; a prohibited match wins; otherwise the template with the fewest
//! placeholders; a remaining tie is an ambiguity). Also the canonical root entries and legacy
//! prefixes of the upstream `paths` module, and the skip list of upstream's fallback checks (which
//! directories a workspace walk never enters). Data only: no filesystem access here.
//!
//! Placeholders match `[A-Za-z0-9_-]+` (one segment, no dots); `{helper_id}` never matches a
//! reserved backend helper name.

use schemars::JsonSchema;
use serde::Serialize;

/// The app root, relative to the workspace root.
pub const APP_ROOT: &str = "app";
/// App identity manifest.
pub const APP_MANIFEST: &str = "app/app.json";
/// Optional app provenance.
pub const PROVENANCE: &str = "app/provenance.yaml";
/// Module directories live here.
pub const MODULES_DIR: &str = "app/modules";
/// Page schemas live here.
pub const PAGES_DIR: &str = "app/ui/pages";
/// The secret references (names only).
pub const SECRETS: &str = "app/security/secrets.yaml";
/// Layout registry version.
pub const LAYOUT_SCHEMA_VERSION: &str = "mozaiks.app_layout.v2";

/// Where a template is anchored.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "upstream's table; the tests check every family against it"
    )
)]
pub const SCOPES: &[&str] = &[
    "app_bundle_root",
    "deployment_derived",
    "generated_staging",
    "module_relative",
    "workflow_relative",
    "workspace_root",
];

/// One registered artifact family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ArtifactFamily {
    /// Artifact kind (`app_manifest`, `module_manifest`, `prohibited_legacy`, …).
    pub kind: &'static str,
    /// Who owns it (`platform`, `app_workspace`, `module`, `workflow`, `factory`, …).
    pub owner: &'static str,
    /// `required`, `conditional`, `optional`, `generated` or `prohibited`.
    pub requirement: &'static str,
    /// `single` or `many`.
    pub multiplicity: &'static str,
    /// When it applies (`always`, `when_module_declared`, …, `never` for prohibited paths).
    pub condition: &'static str,
    /// What the template is relative to (see [`SCOPES`]).
    pub path_scope: &'static str,
    /// The path template (`modules/{module_id}/module.yaml`).
    pub path_template: &'static str,
    /// Which upstream validator owns it.
    pub validator: &'static str,
    /// Security class (`internal_contract`, `executable_stub`, `secret_reference_names`, …).
    pub security_class: &'static str,
}

const APP: &str = "app_bundle_root";
const WS: &str = "workspace_root";
const MODULE: &str = "module_relative";
const WORKFLOW: &str = "workflow_relative";
const GENERATED: &str = "generated_staging";
const DEPLOY: &str = "deployment_derived";

const IC: &str = "internal_contract";
const EXE: &str = "executable_stub";
const GAV: &str = "generated_app_validator";
const ML: &str = "module_loader";
const WM: &str = "workflow_manager";

#[allow(clippy::too_many_arguments)]
const fn fam(
    kind: &'static str,
    owner: &'static str,
    requirement: &'static str,
    path_scope: &'static str,
    path_template: &'static str,
    validator: &'static str,
    condition: &'static str,
    multiplicity: &'static str,
    security_class: &'static str,
) -> ArtifactFamily {
    ArtifactFamily {
        kind,
        owner,
        requirement,
        multiplicity,
        condition,
        path_scope,
        path_template,
        validator,
        security_class,
    }
}

const fn prohibited(
    path_scope: &'static str,
    path_template: &'static str,
    many: bool,
) -> ArtifactFamily {
    fam(
        "prohibited_legacy",
        "prohibited",
        "prohibited",
        path_scope,
        path_template,
        "app_paths",
        "never",
        if many { "many" } else { "single" },
        "prohibited",
    )
}

const S: &str = "single";
const M: &str = "many";
const WAD: &str = "when_app_declared";
const WMD: &str = "when_module_declared";
const WWD: &str = "when_workflow_declared";

/// The registry rows, in upstream's own order (the layout tool sorts them like upstream does).
#[rustfmt::skip]
pub const FAMILIES: &[ArtifactFamily] = &[
    fam("app_manifest", "platform", "required", APP, "app.json", "app_loader", "always", S, IC),
    fam("app_config", "platform", "optional", APP, "config/ai.json", "app_paths", WAD, S, IC),
    fam("app_auth_config", "platform", "conditional", APP, "config/auth.yaml", "app_paths", "when_auth_enabled", S, IC),
    fam("app_config", "platform", "optional", APP, "config/asset_manifest.json", "app_paths", "when_assets_selected", S, IC),
    fam("app_integrations_config", "app_workspace", "conditional", APP, "config/integrations.yaml", "app_paths", "when_integrations_selected", S, IC),
    fam("app_refinement_policy", "app_workspace", "conditional", APP, "config/refinement_policy.yaml", "app_paths", "when_refinement_harness_required", S, IC),
    fam("app_shell_config", "platform", "optional", APP, "config/shell.json", "app_paths", "when_shell_selected", S, IC),
    fam("app_subscription_config", "app_workspace", "conditional", APP, "config/subscriptions.yaml", "subscriptions_loader", "when_subscriptions_required", S, IC),
    fam("app_targets_config", "app_workspace", "optional", APP, "config/targets.json", "app_paths", WAD, S, IC),
    fam("app_data_contract", "app_workspace", "conditional", APP, "data/contract.json", "data_contract_loader", "when_data_contract_required", S, IC),
    fam("app_data_migration", "app_workspace", "conditional", APP, "data/migrations/{migration_id}.json", "data_contract_loader", "when_migration_declared", M, IC),
    fam("app_secret_references", "app_workspace", "conditional", APP, "security/secrets.yaml", GAV, WAD, S, "secret_reference_names"),
    fam("app_provenance", "factory", "optional", APP, "provenance.yaml", "provenance_loader", WAD, S, IC),
    fam("app_brand_theme", "app_workspace", "optional", APP, "brand/theme_config.json", GAV, "when_theme_selected", S, IC),
    fam("app_dashboard", "platform", "optional", APP, "dashboard/dashboard.yaml", GAV, WAD, S, IC),
    fam("app_ui_route_manifest", "platform", "optional", APP, "ui/route_manifest.json", GAV, WAD, S, IC),
    fam("app_ui_page_schema", "app_workspace", "conditional", APP, "ui/pages/{page_id}.yaml", GAV, "when_page_declared", M, IC),
    fam("app_ui_custom_route", "app_workspace", "conditional", APP, "ui/pages/custom/{page_id}.jsx", GAV, "when_custom_route_declared", M, EXE),
    fam("app_ui_auth_adapter", "app_workspace", "conditional", APP, "ui/auth/authAdapter.js", GAV, "when_auth_enabled", S, EXE),
    fam("app_ui_extension_barrel", "app_workspace", "conditional", APP, "ui/index.js", GAV, "when_custom_route_declared", S, EXE),
    fam("app_ui_module_api", "platform", "conditional", APP, "ui/lib/moduleApi.js", GAV, "when_custom_route_declared", S, EXE),
    fam("app_admin_registry", "platform", "optional", APP, "admin/admin_registry.yaml", GAV, WAD, S, IC),
    fam("app_framework_metadata", "factory", "optional", APP, ".mozaiks/pack_provenance.json", "provenance_loader", WAD, S, IC),
    fam("app_backend_support", "app_workspace", "optional", APP, "backend/admin_config.py", GAV, WAD, S, EXE),
    fam("app_refinement_harness", "app_workspace", "conditional", APP, "refinement_harness/config/harness.yaml", GAV, "when_refinement_harness_required", S, IC),
    fam("app_refinement_harness", "app_workspace", "conditional", APP, "refinement_harness/config/tools.yaml", GAV, "when_refinement_harness_required", S, IC),
    fam("app_refinement_harness", "app_workspace", "conditional", APP, "refinement_harness/config/policies.yaml", GAV, "when_refinement_harness_required", S, IC),
    fam("app_refinement_harness", "app_workspace", "conditional", APP, "refinement_harness/prompts/{pack_id}.yaml", GAV, "when_refinement_harness_required", M, IC),
    fam("module_manifest", "module", "conditional", APP, "modules/{module_id}/module.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/events.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/reactions.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/notifications.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/policy_hooks.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/settings.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/admin.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/profile.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/relationships.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/service.yaml", ML, WMD, M, IC),
    fam("module_contract", "module", "conditional", APP, "modules/{module_id}/contracts/commercial.yaml", ML, WMD, M, IC),
    fam("module_runtime_extensions", "module", "conditional", APP, "modules/{module_id}/runtime_extensions.yaml", ML, WMD, M, IC),
    fam("module_backend_handler", "module", "conditional", APP, "modules/{module_id}/backend/handler.py", ML, WMD, M, EXE),
    fam("module_backend_api", "module", "optional", APP, "modules/{module_id}/backend/api.py", ML, WAD, M, EXE),
    fam("module_backend_base_handler", "module", "optional", APP, "modules/{module_id}/backend/base_handler.py", ML, WAD, M, EXE),
    fam("module_backend_service", "module", "conditional", APP, "modules/{module_id}/backend/service.py", ML, WMD, M, EXE),
    fam("module_backend_repo", "module", "conditional", APP, "modules/{module_id}/backend/repo.py", ML, WMD, M, EXE),
    fam("module_backend_policy", "module", "conditional", APP, "modules/{module_id}/backend/policy.py", ML, WMD, M, EXE),
    fam("module_backend_schemas", "module", "conditional", APP, "modules/{module_id}/backend/schemas.py", ML, WMD, M, EXE),
    fam("module_backend_helper", "module", "conditional", APP, "modules/{module_id}/backend/{helper_id}.py", ML, "when_module_helper_declared", M, EXE),
    fam("module_admin_ui", "module", "optional", APP, "modules/{module_id}/ui/admin/{page_id}.jsx", GAV, "when_module_admin_page_declared", M, EXE),
    fam("module_ui_extension_barrel", "module", "optional", APP, "modules/{module_id}/ui/index.js", GAV, WAD, M, EXE),
    fam("app_service_support", "app_workspace", "optional", APP, "services/config.py", GAV, WAD, S, EXE),
    fam("app_service_integration_client", "app_workspace", "conditional", APP, "services/integrations/{pack_id}_client.py", GAV, "when_managed_capability_selected", M, EXE),
    fam("app_service_route", "app_workspace", "optional", APP, "services/routes/{pack_id}.py", GAV, "when_app_route_extension_declared", M, EXE),
    fam("app_service_adapter", "app_workspace", "optional", APP, "services/adapters/{adapter_area}/{pack_id}.py", GAV, "when_app_owned_integration_selected", M, EXE),
    fam("app_root_support", "app_workspace", "optional", APP, "__init__.py", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "index.html", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "package-lock.json", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "package.json", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "pnpm-lock.yaml", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "pyproject.toml", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "requirements.txt", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "tsconfig.json", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "vite.config.js", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "vite.config.ts", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_root_support", "app_workspace", "optional", APP, "yarn.lock", "app_paths", "when_runtime_support_selected", S, IC),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, "Dockerfile", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, "docker-compose.yml", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, ".env.example", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, ".env.staging.example", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, ".env.production.example", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, "deployment.manifest.json", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, ".github/workflows/deploy.yml", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_deployment_artifact", "download_renderer", "generated", DEPLOY, ".github/workflows/readiness.yml", GAV, "when_deployment_export_requested", S, "deployment_metadata"),
    fam("app_manifest", "platform", "required", WS, "app/app.json", "app_loader", "always", S, IC),
    fam("workflow_manifest", "workflow", "conditional", WS, "workflows/{workflow_id}/orchestrator.yaml", WM, WWD, M, IC),
    fam("workflow_manifest", "workflow", "conditional", WORKFLOW, "orchestrator.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "agents.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "context_variables.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "structured_outputs.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "transition_graph.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "tools.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "ui_config.yaml", WM, WWD, S, IC),
    fam("workflow_config", "workflow", "optional", WORKFLOW, "middleware.yaml", WM, WWD, S, IC),
    fam("workflow_task_batch", "workflow", "optional", WORKFLOW, "extended_orchestration/task_batches.yaml", WM, WAD, S, IC),
    fam("workflow_tool", "workflow", "optional", WORKFLOW, "tools/{tool_id}.py", WM, "when_workflow_tool_declared", M, EXE),
    fam("workflow_ui", "workflow", "optional", WORKFLOW, "ui/{workflow_id}/{component_id}.jsx", GAV, "when_workflow_component_declared", M, EXE),
    fam("module_manifest", "module", "required", MODULE, "module.yaml", ML, WMD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/events.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/reactions.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/notifications.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/policy_hooks.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/settings.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/admin.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/profile.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/relationships.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/service.yaml", ML, WAD, S, IC),
    fam("module_contract", "module", "optional", MODULE, "contracts/commercial.yaml", ML, WAD, S, IC),
    prohibited(MODULE, "contracts/subscriptions.yaml", false),
    fam("module_runtime_extensions", "module", "optional", MODULE, "runtime_extensions.yaml", "platform_host_loader", WAD, S, IC),
    fam("module_backend_handler", "module", "required", MODULE, "backend/handler.py", ML, WMD, S, EXE),
    fam("module_backend_api", "module", "optional", MODULE, "backend/api.py", ML, WMD, S, EXE),
    fam("module_backend_service", "module", "optional", MODULE, "backend/service.py", ML, WMD, S, EXE),
    fam("module_backend_repo", "module", "optional", MODULE, "backend/repo.py", ML, WMD, S, EXE),
    fam("module_backend_policy", "module", "optional", MODULE, "backend/policy.py", ML, WMD, S, EXE),
    fam("module_backend_schemas", "module", "optional", MODULE, "backend/schemas.py", ML, WMD, S, EXE),
    fam("module_backend_helper", "module", "optional", MODULE, "backend/{helper_id}.py", ML, "when_module_helper_declared", M, EXE),
    fam("module_admin_ui", "module", "optional", MODULE, "ui/admin/{page_id}.jsx", GAV, "when_module_admin_page_declared", M, EXE),
    fam("module_ui_extension_barrel", "module", "optional", MODULE, "ui/index.js", GAV, "when_module_admin_page_declared", M, EXE),
    fam("generated_app_staging", "factory", "generated", GENERATED, "generated/apps/{app_id}/{build_id}/app/app.json", GAV, "when_generated_staging_selected", S, "generated_staging"),
    fam("generated_app_staging", "factory", "generated", GENERATED, "generated/apps/{app_id}/{build_id}/app/modules/{module_id}/module.yaml", GAV, "when_generated_staging_selected", S, "generated_staging"),
    fam("generated_workflow_staging", "factory", "generated", GENERATED, "generated/workflows/{app_id}/{build_id}/{workflow_id}/orchestrator.yaml", GAV, "when_generated_staging_selected", S, "generated_staging"),
    prohibited(APP, "config/data.json", false),
    prohibited(APP, "config/llm.yaml", false),
    prohibited(APP, "config/secrets.yaml", false),
    prohibited(APP, "config/data_migrations/{migration_id}.json", true),
    prohibited(APP, "control_plane/{extension_id}.yaml", true),
    prohibited(APP, "services/data/{extension_id}.py", true),
    prohibited(APP, "services/security/{extension_id}.py", true),
    prohibited(APP, "modules/{module_id}/contracts/subscriptions.yaml", true),
    prohibited(APP, "modules/{module_id}/backend/models.py", true),
    prohibited(APP, "modules/{module_id}/backend/models/{extension_id}.py", true),
    prohibited(APP, "modules/{module_id}/backend/database/schema.json", true),
    prohibited(APP, "modules/{module_id}/backend/database/seed.json", true),
];

/// Backend helper names `{helper_id}` never matches (they have their own families).
const RESERVED_HELPERS: &[&str] = &[
    "api",
    "base_handler",
    "handler",
    "models",
    "policy",
    "repo",
    "schemas",
    "service",
];

/// Files allowed directly under the app root (upstream `paths`).
pub const CANONICAL_APP_ROOT_FILES: &[&str] = &[
    ".env.example",
    ".env.production.example",
    ".env.staging.example",
    "Dockerfile",
    "__init__.py",
    "app.json",
    "deployment.manifest.json",
    "docker-compose.yml",
    "index.html",
    "package-lock.json",
    "package.json",
    "pnpm-lock.yaml",
    "provenance.yaml",
    "pyproject.toml",
    "requirements.txt",
    "tsconfig.json",
    "vite.config.js",
    "vite.config.ts",
    "yarn.lock",
];
/// Directories allowed directly under the app root (upstream `paths`).
pub const CANONICAL_APP_ROOT_DIRS: &[&str] = &[
    ".github",
    ".mozaiks",
    "admin",
    "backend",
    "brand",
    "config",
    "dashboard",
    "data",
    "modules",
    "refinement_harness",
    "security",
    "services",
    "ui",
];
/// The canonical `config/` files (plus `config/integrations/*.{json,yaml,yml}`).
pub const CANONICAL_APP_CONFIG_FILES: &[&str] = &[
    "config/ai.json",
    "config/asset_manifest.json",
    "config/auth.yaml",
    "config/integrations.yaml",
    "config/refinement_policy.yaml",
    "config/shell.json",
    "config/subscriptions.yaml",
    "config/targets.json",
];
/// Legacy app paths upstream refuses.
pub const DISALLOWED_LEGACY_APP_PATHS: &[&str] =
    &["config/data.json", "config/llm.yaml", "config/secrets.yaml"];
/// Legacy app directory prefixes upstream refuses.
pub const DISALLOWED_LEGACY_APP_DIR_PREFIXES: &[&str] = &[
    "config/data_migrations/",
    "control_plane/",
    "services/data/",
    "services/security/",
];

/// One successful match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactMatch {
    /// The family.
    pub family: &'static ArtifactFamily,
    /// Placeholder values in template order.
    pub values: Vec<(String, String)>,
}

/// Why a path has no family in a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchFailure {
    /// No template of the scope matches.
    NotRegistered,
    /// Several equally specific templates match.
    Ambiguous(Vec<&'static str>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Lit(&'a str),
    Hole(&'a str),
}

fn tokens(template: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest.get(open..).and_then(|r| r.find('}')).map(|c| c + open) else {
            break;
        };
        if open > 0 {
            out.push(Token::Lit(rest.get(..open).unwrap_or_default()));
        }
        out.push(Token::Hole(rest.get(open + 1..close).unwrap_or_default()));
        rest = rest.get(close + 1..).unwrap_or_default();
    }
    if !rest.is_empty() {
        out.push(Token::Lit(rest));
    }
    out
}

fn hole_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Backtracking full match of `path` against the token list.
fn match_tokens(toks: &[Token<'_>], path: &str, values: &mut Vec<(String, String)>) -> bool {
    let Some((first, rest)) = toks.split_first() else {
        return path.is_empty();
    };
    match first {
        Token::Lit(lit) => path
            .strip_prefix(lit)
            .is_some_and(|tail| match_tokens(rest, tail, values)),
        Token::Hole(name) => {
            let run = path.bytes().take_while(|b| hole_char(*b)).count();
            // Greedy first, then shorter (regex backtracking order).
            for len in (1..=run).rev() {
                let (Some(value), Some(tail)) = (path.get(..len), path.get(len..)) else {
                    continue;
                };
                if *name == "helper_id"
                    && RESERVED_HELPERS
                        .iter()
                        .any(|r| path.strip_prefix(r).is_some_and(|t| t.starts_with(".py")))
                {
                    return false;
                }
                values.push(((*name).to_owned(), value.to_owned()));
                if match_tokens(rest, tail, values) {
                    return true;
                }
                values.pop();
            }
            false
        }
    }
}

fn match_family(family: &'static ArtifactFamily, path: &str) -> Option<ArtifactMatch> {
    let mut values = Vec::new();
    match_tokens(&tokens(family.path_template), path, &mut values)
        .then_some(ArtifactMatch { family, values })
}

/// Upstream `match_path(path, scope)` over the default registry.
///
/// # Errors
/// [`MatchFailure`] when nothing (or more than one equally specific template) matches.
pub fn match_path(path: &str, scope: &str) -> Result<ArtifactMatch, MatchFailure> {
    let mut matches: Vec<ArtifactMatch> = FAMILIES
        .iter()
        .filter(|f| f.path_scope == scope)
        .filter_map(|f| match_family(f, path))
        .collect();
    if matches.is_empty() {
        return Err(MatchFailure::NotRegistered);
    }
    let mut prohibited: Vec<ArtifactMatch> = matches
        .iter()
        .filter(|m| m.family.requirement == "prohibited")
        .cloned()
        .collect();
    if !prohibited.is_empty() {
        prohibited.sort_by(|a, b| {
            (a.values.len(), a.family.path_template).cmp(&(b.values.len(), b.family.path_template))
        });
        return prohibited
            .into_iter()
            .next()
            .ok_or(MatchFailure::NotRegistered);
    }
    let best = matches.iter().map(|m| m.values.len()).min().unwrap_or(0);
    matches.retain(|m| m.values.len() == best);
    if matches.len() > 1 {
        let mut templates: Vec<&'static str> =
            matches.iter().map(|m| m.family.path_template).collect();
        templates.sort_unstable();
        return Err(MatchFailure::Ambiguous(templates));
    }
    matches.pop().ok_or(MatchFailure::NotRegistered)
}

/// The registry sorted the way upstream builds it: by (scope, template, kind).
#[must_use]
pub fn sorted_families() -> Vec<ArtifactFamily> {
    let mut families = FAMILIES.to_vec();
    families.sort_by(|a, b| {
        (a.path_scope, a.path_template, a.kind).cmp(&(b.path_scope, b.path_template, b.kind))
    });
    families
}

/// Upstream `is_disallowed_legacy_app_path` (app-relative path).
#[must_use]
pub fn is_disallowed_legacy(app_relative: &str) -> bool {
    DISALLOWED_LEGACY_APP_PATHS.contains(&app_relative)
        || DISALLOWED_LEGACY_APP_DIR_PREFIXES
            .iter()
            .any(|p| app_relative.starts_with(p))
}

/// Upstream `is_sensitive_app_config_path`: a `config/` path with a secret-like token.
#[must_use]
pub fn is_sensitive_config(app_relative: &str) -> bool {
    if !app_relative.starts_with("config/") {
        return false;
    }
    let lower = app_relative.to_ascii_lowercase();
    let tokens = [
        "apikeys",
        "apikey",
        "api_keys",
        "api_key",
        "api-keys",
        "api-key",
        "credentials",
        "credential",
        "passwords",
        "password",
        "secrets",
        "secret",
        "tokens",
        "token",
    ];
    let boundary = |b: Option<u8>| b.is_none_or(|b| matches!(b, b'.' | b'_' | b'/' | b'-'));
    tokens.iter().any(|t| {
        lower.match_indices(t).any(|(i, _)| {
            let before = i
                .checked_sub(1)
                .and_then(|j| lower.as_bytes().get(j).copied());
            let after = lower.as_bytes().get(i + t.len()).copied();
            boundary(before) && boundary(after)
        })
    })
}

/// Upstream `is_canonical_app_config_path` (app-relative path).
#[must_use]
pub fn is_canonical_config(app_relative: &str) -> bool {
    if !app_relative.starts_with("config/") {
        return true;
    }
    if is_sensitive_config(app_relative) {
        return false;
    }
    CANONICAL_APP_CONFIG_FILES.contains(&app_relative)
        || (app_relative.starts_with("config/integrations/")
            && [".json", ".yaml", ".yml"]
                .iter()
                .any(|s| app_relative.ends_with(s)))
}

/// Upstream `noncanonical_app_root_paths` for one app-relative path.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "upstream's rule, kept with its tables and tested; no tool reports it yet"
    )
)]
#[must_use]
pub fn is_noncanonical_root(app_relative: &str) -> bool {
    let root = app_relative.split('/').next().unwrap_or_default();
    !CANONICAL_APP_ROOT_DIRS.contains(&root) && !CANONICAL_APP_ROOT_FILES.contains(&app_relative)
}

/// Directory (and file) names upstream's fallback checks skip, compared lower-cased.
pub(crate) const SKIPPED_PARTS: &[&str] = &[
    ".cache",
    ".git",
    ".hg",
    ".mypy_cache",
    ".next",
    ".pytest_cache",
    ".ruff_cache",
    ".svn",
    ".tox",
    ".turbo",
    ".venv",
    "__pycache__",
    "build",
    "coverage",
    "dist",
    "generated",
    "logs",
    "node_modules",
    "venv",
];
/// Whether a directory name is on upstream's skip list.
#[must_use]
pub(crate) fn is_skipped_dir(name: &str) -> bool {
    let lower = name.to_lowercase();
    SKIPPED_PARTS.contains(&lower.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(path: &str, scope: &str) -> Result<&'static str, MatchFailure> {
        match_path(path, scope).map(|m| m.family.kind)
    }

    #[test]
    fn upstream_matches() {
        assert_eq!(kind("app.json", APP), Ok("app_manifest"));
        assert_eq!(kind("app/app.json", WS), Ok("app_manifest"));
        assert_eq!(
            kind("modules/tasks/module.yaml", APP),
            Ok("module_manifest")
        );
        assert_eq!(kind("module.yaml", MODULE), Ok("module_manifest"));
        assert_eq!(kind("ui/pages/tasks.yaml", APP), Ok("app_ui_page_schema"));
        assert_eq!(kind("data/contract.json", APP), Ok("app_data_contract"));
        assert_eq!(
            kind("data/migrations/001_x.json", APP),
            Ok("app_data_migration")
        );
        assert_eq!(kind("config/auth.yaml", APP), Ok("app_auth_config"));
        assert_eq!(
            kind("workflows/Research/orchestrator.yaml", WS),
            Ok("workflow_manifest")
        );
        assert_eq!(kind("tools/summarize.py", WORKFLOW), Ok("workflow_tool"));
        assert_eq!(
            kind("services/integrations/stripe_pay_client.py", APP),
            Ok("app_service_integration_client")
        );
        // Helpers: reserved names have their own rows; other names are helpers.
        assert_eq!(
            kind("modules/t/backend/handler.py", APP),
            Ok("module_backend_handler")
        );
        assert_eq!(
            kind("modules/t/backend/utils.py", APP),
            Ok("module_backend_helper")
        );
        assert_eq!(
            kind("backend/base_handler.py", MODULE),
            Err(MatchFailure::NotRegistered)
        );
        // Prohibited paths win.
        assert_eq!(kind("config/secrets.yaml", APP), Ok("prohibited_legacy"));
        assert_eq!(
            kind("modules/t/backend/models.py", APP),
            Ok("prohibited_legacy")
        );
        assert_eq!(
            kind("modules/t/contracts/subscriptions.yaml", APP),
            Ok("prohibited_legacy")
        );
        // Unregistered.
        assert_eq!(
            kind("ui/pages/tasks.json", APP),
            Err(MatchFailure::NotRegistered)
        );
        assert_eq!(
            kind("modules/t/module.json", APP),
            Err(MatchFailure::NotRegistered)
        );
        assert_eq!(
            kind("ui/pages/a.b.yaml", APP),
            Err(MatchFailure::NotRegistered)
        );
        assert_eq!(kind("README.md", WS), Err(MatchFailure::NotRegistered));
    }

    #[test]
    fn registry_is_well_formed() {
        let families = sorted_families();
        for pair in families.windows(2) {
            assert!(
                (pair[0].path_scope, pair[0].path_template)
                    != (pair[1].path_scope, pair[1].path_template),
                "duplicate template {}",
                pair[0].path_template
            );
        }
        for f in FAMILIES {
            assert!(SCOPES.contains(&f.path_scope));
            assert_eq!(
                f.requirement == "prohibited",
                f.condition == "never",
                "{}",
                f.path_template
            );
        }
        assert_eq!(FAMILIES.len(), 123);
    }

    #[test]
    fn paths_module_rules() {
        assert!(is_disallowed_legacy("config/llm.yaml"));
        assert!(is_disallowed_legacy("services/data/x.py"));
        assert!(!is_disallowed_legacy("services/config.py"));
        assert!(is_sensitive_config("config/api-key.json"));
        assert!(is_sensitive_config(
            "config/integrations/stripe_secret.yaml"
        ));
        assert!(!is_sensitive_config("config/tokenizer.json"));
        assert!(is_canonical_config("config/ai.json"));
        assert!(!is_canonical_config("config/settings.json"));
        assert!(is_noncanonical_root("workflows/x/orchestrator.yaml"));
        assert!(!is_noncanonical_root("modules/x/module.yaml"));
    }
}
