//! The canonical app bundle layout (see docs/APP-BUNDLE-LAYOUT.md) and the one matcher over it.
//! Patterns use a fixed vocabulary, matched segment by segment: a literal, `<id>` (one module or
//! page identifier), `*.ext` (one file name with that extension) and a final `**` (one or more
//! segments). Hand-written because a general glob engine would accept more than the layout means.

use schemars::JsonSchema;
use serde::Serialize;

/// The app root marker, relative to the workspace root.
pub const APP_ROOT: &str = "app";
/// App identity manifest.
pub const APP_MANIFEST: &str = "app/app.json";
/// App provenance (declares supported contracts).
pub const PROVENANCE: &str = "app/provenance.yaml";
/// Module directories live here.
pub const MODULES_DIR: &str = "app/modules";
/// Page schemas live here.
pub const PAGES_DIR: &str = "app/ui/pages";
/// Config manifests live here.
pub const CONFIG_DIR: &str = "app/config";

/// One registered location in the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LayoutEntry {
    /// Stable identifier of the artifact kind.
    pub id: &'static str,
    /// Pattern in the layout vocabulary (`<id>`, `*.ext`, trailing `**`).
    pub pattern: &'static str,
    /// `file` or `directory`.
    pub kind: &'static str,
    /// `json`, `yaml`, `python`, `any` or `none` (directories).
    pub format: &'static str,
    /// Whether a valid bundle must contain it.
    pub required: bool,
    /// One line of meaning.
    pub description: &'static str,
}

/// The registry, most specific first (the first match wins).
pub const LAYOUT: &[LayoutEntry] = &[
    LayoutEntry {
        id: "app_root",
        pattern: "app",
        kind: "directory",
        format: "none",
        required: true,
        description: "The app root; its presence with app/app.json marks the workspace as an app bundle.",
    },
    LayoutEntry {
        id: "app_manifest",
        pattern: "app/app.json",
        kind: "file",
        format: "json",
        required: true,
        description: "App identity: appId and appName.",
    },
    LayoutEntry {
        id: "provenance",
        pattern: "app/provenance.yaml",
        kind: "file",
        format: "yaml",
        required: true,
        description: "Provenance metadata; contracts: lists the supported contracts, including mozaiks.mcp.v1.",
    },
    LayoutEntry {
        id: "config_dir",
        pattern: "app/config",
        kind: "directory",
        format: "none",
        required: false,
        description: "Configuration manifests.",
    },
    LayoutEntry {
        id: "config_manifest",
        pattern: "app/config/*.json",
        kind: "file",
        format: "json",
        required: false,
        description: "One JSON configuration manifest.",
    },
    LayoutEntry {
        id: "modules_dir",
        pattern: "app/modules",
        kind: "directory",
        format: "none",
        required: false,
        description: "One directory per module.",
    },
    LayoutEntry {
        id: "module_dir",
        pattern: "app/modules/<id>",
        kind: "directory",
        format: "none",
        required: false,
        description: "A module; its directory name is the module id.",
    },
    LayoutEntry {
        id: "module_manifest_yaml",
        pattern: "app/modules/<id>/module.yaml",
        kind: "file",
        format: "yaml",
        required: false,
        description: "Module manifest (YAML form); exactly one of module.yaml or module.json.",
    },
    LayoutEntry {
        id: "module_manifest_json",
        pattern: "app/modules/<id>/module.json",
        kind: "file",
        format: "json",
        required: false,
        description: "Module manifest (JSON form); exactly one of module.yaml or module.json.",
    },
    LayoutEntry {
        id: "module_source",
        pattern: "app/modules/<id>/**",
        kind: "file",
        format: "any",
        required: false,
        description: "A module source or data file (Python sources are syntax-checked, never imported).",
    },
    LayoutEntry {
        id: "pages_dir",
        pattern: "app/ui/pages",
        kind: "directory",
        format: "none",
        required: false,
        description: "Page schemas.",
    },
    LayoutEntry {
        id: "page_schema_json",
        pattern: "app/ui/pages/*.json",
        kind: "file",
        format: "json",
        required: false,
        description: "A page schema (JSON); the file stem is the page name.",
    },
    LayoutEntry {
        id: "page_schema_yaml",
        pattern: "app/ui/pages/*.yaml",
        kind: "file",
        format: "yaml",
        required: false,
        description: "A page schema (YAML); the file stem is the page name.",
    },
    LayoutEntry {
        id: "secrets_contract",
        pattern: "app/security/secrets.yaml",
        kind: "file",
        format: "yaml",
        required: false,
        description: "Names-only secrets contract: secret names, never values.",
    },
    LayoutEntry {
        id: "app_file",
        pattern: "app/**",
        kind: "file",
        format: "any",
        required: false,
        description: "Any other file inside the app root (validated by extension: .json, .yaml/.yml, .py).",
    },
];

/// Whether `name` is a module or page identifier: 1–64 of `[a-z0-9_-]`, starting alphanumeric.
#[must_use]
pub fn is_identifier(name: &str) -> bool {
    let bytes = name.as_bytes();
    matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.len() <= 64
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_' || *b == b'-')
}

/// The first registry entry whose pattern matches the portable path `path`.
#[must_use]
pub fn match_path(path: &str) -> Option<&'static LayoutEntry> {
    LAYOUT
        .iter()
        .find(|entry| pattern_matches(entry.pattern, path))
}

fn pattern_matches(pattern: &str, path: &str) -> bool {
    let mut pat = pattern.split('/');
    let mut segs = path.split('/');
    loop {
        match (pat.next(), segs.next()) {
            (None, None) => return true,
            (Some("**"), Some(_)) => return true,
            (Some(p), Some(s)) => {
                if !segment_matches(p, s) {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

fn segment_matches(pattern: &str, segment: &str) -> bool {
    if pattern == "<id>" {
        return is_identifier(segment);
    }
    if let Some(ext) = pattern.strip_prefix('*') {
        return segment.len() > ext.len() && segment.ends_with(ext);
    }
    pattern == segment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_matches() {
        let id = |p: &str| match_path(p).map(|e| e.id);
        assert_eq!(id("app"), Some("app_root"));
        assert_eq!(id("app/app.json"), Some("app_manifest"));
        assert_eq!(id("app/config/db.json"), Some("config_manifest"));
        assert_eq!(id("app/config/db.yaml"), Some("app_file"));
        assert_eq!(id("app/modules/billing"), Some("module_dir"));
        assert_eq!(id("app/modules/Billing"), Some("app_file"));
        assert_eq!(
            id("app/modules/billing/module.yaml"),
            Some("module_manifest_yaml")
        );
        assert_eq!(id("app/modules/billing/src/x.py"), Some("module_source"));
        assert_eq!(id("app/ui/pages/home.json"), Some("page_schema_json"));
        assert_eq!(id("app/ui/pages/.json"), Some("app_file"));
        assert_eq!(id("app/security/secrets.yaml"), Some("secrets_contract"));
        assert_eq!(id("README.md"), None);
        assert_eq!(id("application/x"), None);
    }
}
