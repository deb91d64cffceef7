//! `plan_validation_commands`: the upstream framework detection (`mozaiks.framework_detection.v1`:
//! Node package manifests and their scripts, Python manifests, Laravel) over the workspace files
//! outside the skip list, then the upstream command plan over its candidates (default kinds
//! `lint`, `typecheck`, `test`, `build`; install commands need an explicit opt-in; `dev`/`start`
//! are never selected; shell metacharacters refused; at most four planned). Nothing is run: the
//! plan is data, and an empty plan means nothing was detected.

use crate::envelope::{DetectedFramework, FrameworkDetection, PlanItem};
use crate::error::McpError;
use crate::fallback::Walk;
use crate::workspace::Workspace;

/// Largest manifest read for detection (`package.json`, `composer.json`, `pyproject.toml`, …).
const MAX_MANIFEST_BYTES: u64 = 1024 * 1024;
/// Most Python sources read for framework evidence.
const MAX_PY_SOURCES: usize = 600;
/// Most validation commands detection keeps (upstream's cap).
const MAX_DETECTED_COMMANDS: usize = 24;
/// Most commands a plan marks `planned` (upstream's default `max_commands`).
const MAX_PLANNED: usize = 4;

#[derive(Debug, Clone)]
struct Candidate {
    kind: &'static str,
    command: String,
    working_directory: String,
    confidence: f64,
}

fn kind_order(kind: &str) -> u32 {
    match kind {
        "install" => 0,
        "lint" => 1,
        "typecheck" => 2,
        "test" => 3,
        "build" => 4,
        "dev" => 90,
        "start" => 91,
        _ => 999,
    }
}

fn dirname(path: &str) -> String {
    match path.rsplit_once('/') {
        Some((parent, _)) if !parent.is_empty() => parent.to_owned(),
        _ => ".".to_owned(),
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn has_under(files: &[String], workdir: &str, name_prefix: &str) -> bool {
    let prefix = if workdir == "." {
        String::new()
    } else {
        format!("{workdir}/")
    };
    files
        .iter()
        .any(|p| p.starts_with(&prefix) && basename(p).starts_with(name_prefix))
}

fn dependencies(data: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    let mut deps = Vec::new();
    for key in [
        "dependencies",
        "devDependencies",
        "peerDependencies",
        "optionalDependencies",
        "require",
        "require-dev",
    ] {
        if let Some(serde_json::Value::Object(section)) = data.get(key) {
            deps.extend(section.keys().map(|k| k.to_lowercase()));
        }
    }
    deps
}

struct Detection {
    evidence: Vec<(String, Vec<&'static str>)>,
    package_managers: Vec<String>,
    commands: Vec<Candidate>,
}

impl Detection {
    fn evidence(&mut self, framework: &str, kind: &'static str) {
        if let Some((_, items)) = self.evidence.iter_mut().find(|(f, _)| f == framework) {
            items.push(kind);
        } else {
            self.evidence.push((framework.to_owned(), vec![kind]));
        }
    }
    fn manager(&mut self, name: &str) {
        if !self.package_managers.iter().any(|m| m == name) {
            self.package_managers.push(name.to_owned());
        }
    }
}

fn read_json_object(
    ws: &Workspace,
    path: &str,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let bytes = ws.read_str(path, MAX_MANIFEST_BYTES).ok()?;
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// Upstream `detect_frameworks_from_file_map` over the walked files.
fn detect(ws: &Workspace, files: &[String]) -> Detection {
    let mut d = Detection {
        evidence: Vec::new(),
        package_managers: Vec::new(),
        commands: Vec::new(),
    };
    // Mozaiks.
    if files.iter().any(|p| p == "app/app.json") {
        d.evidence("mozaiks_app", "manifest");
    }
    for path in files {
        let parts: Vec<&str> = path.split('/').collect();
        if parts.len() == 4
            && parts.first() == Some(&"app")
            && parts.get(1) == Some(&"modules")
            && matches!(parts.get(3), Some(&"module.yaml" | &"module.yml"))
        {
            d.evidence("mozaiks_app", "manifest");
        }
        if path == "workflows/AppGenerator/orchestrator.yaml"
            || path.starts_with("factory_app/workflows/")
        {
            d.evidence("mozaiks_factory", "path");
        }
    }
    // Node.
    let mut packages: Vec<&String> = files
        .iter()
        .filter(|p| p.ends_with("package.json"))
        .collect();
    if !packages.is_empty() {
        let pm = if files.iter().any(|p| p.ends_with("pnpm-lock.yaml")) {
            "pnpm"
        } else if files.iter().any(|p| p.ends_with("yarn.lock")) {
            "yarn"
        } else {
            "npm"
        };
        d.manager(pm);
        packages.sort();
        for path in packages {
            let Some(data) = read_json_object(ws, path) else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            let workdir = dirname(path);
            let scripts: Vec<String> = match data.get("scripts") {
                Some(serde_json::Value::Object(s)) => s.keys().cloned().collect(),
                _ => Vec::new(),
            };
            let deps = dependencies(&data);
            d.evidence("node", "manifest");
            for script in ["lint", "test", "build", "typecheck", "dev", "start"] {
                if scripts.iter().any(|s| s == script) {
                    d.commands.push(Candidate {
                        kind: script_kind(script),
                        command: format!("{pm} run {script}"),
                        working_directory: workdir.clone(),
                        confidence: 0.9,
                    });
                }
            }
            d.commands.push(Candidate {
                kind: "install",
                command: format!("{pm} install"),
                working_directory: workdir.clone(),
                confidence: 0.7,
            });
            let has = |name: &str| deps.iter().any(|dep| dep == name);
            if has("next") {
                d.evidence("nextjs", "dependency");
            }
            if has("react") {
                d.evidence("react", "dependency");
            }
            if has("vite") || has_under(files, &workdir, "vite.config.") {
                d.evidence("vite", "dependency");
            }
            if has("vue") {
                d.evidence("vue", "dependency");
            }
            if has("express") {
                d.evidence("express", "dependency");
            }
        }
    }
    // Python.
    let py_manifests: Vec<&String> = files
        .iter()
        .filter(|p| p.ends_with("pyproject.toml"))
        .chain(files.iter().filter(|p| p.ends_with("requirements.txt")))
        .collect();
    if !py_manifests.is_empty() || files.iter().any(|p| p.ends_with(".py")) {
        d.manager("python");
        let mut sorted = py_manifests;
        sorted.sort();
        for path in sorted {
            d.evidence("python", "manifest");
            let workdir = dirname(path);
            d.commands.push(Candidate {
                kind: "test",
                command: "python -m pytest".to_owned(),
                working_directory: workdir.clone(),
                confidence: 0.65,
            });
            d.commands.push(Candidate {
                kind: "lint",
                command: "ruff check .".to_owned(),
                working_directory: workdir,
                confidence: 0.55,
            });
            let text = ws
                .read_str(path, MAX_MANIFEST_BYTES)
                .map(|b| String::from_utf8_lossy(&b).to_lowercase())
                .unwrap_or_default();
            for dep in ["fastapi", "django", "flask"] {
                if text.contains(dep) {
                    d.evidence(dep, "dependency");
                }
            }
        }
        for path in files
            .iter()
            .filter(|p| p.ends_with(".py"))
            .take(MAX_PY_SOURCES)
        {
            let Ok(bytes) = ws.read_str(path, MAX_MANIFEST_BYTES) else {
                continue;
            };
            let lowered = String::from_utf8_lossy(&bytes).to_lowercase();
            if lowered.contains("fastapi(")
                || lowered.contains("from fastapi")
                || lowered.contains("import fastapi")
            {
                d.evidence("fastapi", "source");
            }
            if lowered.contains("django")
                && (lowered.contains("urlpatterns")
                    || basename(path).to_lowercase().contains("settings"))
            {
                d.evidence("django", "source");
            }
            if lowered.contains("flask(") || lowered.contains("from flask") {
                d.evidence("flask", "source");
            }
        }
    }
    // Laravel.
    let mut composers: Vec<&String> = files
        .iter()
        .filter(|p| p.ends_with("composer.json"))
        .collect();
    composers.sort();
    for path in composers {
        let deps = read_json_object(ws, path)
            .map(|d| dependencies(&d))
            .unwrap_or_default();
        let workdir = dirname(path);
        if !deps.iter().any(|dep| dep == "laravel/framework")
            && !has_under(files, &workdir, "artisan")
        {
            continue;
        }
        d.manager("composer");
        d.evidence("laravel", "dependency");
        d.commands.push(Candidate {
            kind: "test",
            command: "php artisan test".to_owned(),
            working_directory: workdir,
            confidence: 0.75,
        });
    }
    // Dedupe (kind, command, workdir), keep the first, cap.
    let mut seen: Vec<(&'static str, String, String)> = Vec::new();
    d.commands.retain(|c| {
        let key = (c.kind, c.command.clone(), c.working_directory.clone());
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
    d.commands.truncate(MAX_DETECTED_COMMANDS);
    d
}

fn script_kind(script: &str) -> &'static str {
    match script {
        "lint" => "lint",
        "test" => "test",
        "build" => "build",
        "typecheck" => "typecheck",
        "dev" => "dev",
        _ => "start",
    }
}

fn label(framework: &str) -> (&'static str, &'static str) {
    match framework {
        "mozaiks_app" => ("Mozaiks App", "mozaiks"),
        "mozaiks_factory" => ("Mozaiks Factory", "mozaiks"),
        "node" => ("Node.js", "app_runtime"),
        "nextjs" => ("Next.js", "fullstack"),
        "react" => ("React", "frontend"),
        "vite" => ("Vite", "build_tool"),
        "vue" => ("Vue", "frontend"),
        "express" => ("Express", "backend"),
        "python" => ("Python", "app_runtime"),
        "fastapi" => ("FastAPI", "backend"),
        "django" => ("Django", "backend"),
        "flask" => ("Flask", "backend"),
        "laravel" => ("Laravel", "fullstack"),
        _ => ("", "app_runtime"),
    }
}

fn weight(kind: &str) -> f64 {
    match kind {
        "manifest" => 0.22,
        "dependency" => 0.25,
        "script" => 0.12,
        "source" => 0.18,
        _ => 0.14,
    }
}

const PRIMARY_ORDER: &[&str] = &[
    "mozaiks_app",
    "nextjs",
    "laravel",
    "fastapi",
    "django",
    "react",
    "vue",
    "express",
    "flask",
    "node",
    "python",
];

/// `^[^;|&`$><\r\n]*$` and no NUL.
fn safe_command(command: &str) -> bool {
    !command.is_empty()
        && !command.chars().any(|c| {
            matches!(
                c,
                ';' | '|' | '&' | '`' | '$' | '>' | '<' | '\r' | '\n' | '\0'
            )
        })
}

/// The plan and the detection summary.
///
/// # Errors
/// Read failures of the walk.
pub fn plan(ws: &Workspace, walk: &Walk) -> Result<(FrameworkDetection, Vec<PlanItem>), McpError> {
    let d = detect(ws, &walk.files);
    let mut frameworks: Vec<DetectedFramework> = d
        .evidence
        .iter()
        .map(|(id, kinds)| {
            let signal: f64 = kinds.iter().map(|k| weight(k)).sum();
            let (label, category) = label(id);
            DetectedFramework {
                framework_id: id.clone(),
                label: label.to_owned(),
                category: category.to_owned(),
                confidence: (0.35 + signal).min(0.98),
            }
        })
        .collect();
    frameworks.sort_by(|a, b| {
        b.confidence
            .total_cmp(&a.confidence)
            .then_with(|| a.framework_id.cmp(&b.framework_id))
    });
    let primary = frameworks
        .iter()
        .min_by(|a, b| {
            let rank = |f: &DetectedFramework| {
                PRIMARY_ORDER
                    .iter()
                    .position(|p| *p == f.framework_id)
                    .unwrap_or(999)
            };
            rank(a)
                .cmp(&rank(b))
                .then_with(|| b.confidence.total_cmp(&a.confidence))
        })
        .cloned();
    let mut package_managers = d.package_managers.clone();
    package_managers.sort();
    let mut candidates = d.commands.clone();
    candidates.sort_by(|a, b| {
        kind_order(a.kind)
            .cmp(&kind_order(b.kind))
            .then_with(|| b.confidence.total_cmp(&a.confidence))
            .then_with(|| a.working_directory.cmp(&b.working_directory))
            .then_with(|| a.command.cmp(&b.command))
    });
    let selected = ["lint", "typecheck", "test", "build"];
    let mut items = Vec::new();
    let mut planned = 0usize;
    for c in candidates {
        let mut skip_reason = if !selected.contains(&c.kind) {
            Some(if c.kind == "install" {
                "install_commands_require_include_install"
            } else {
                "command_kind_not_selected"
            })
        } else if !safe_command(&c.command) {
            Some("unsafe_command_rejected")
        } else {
            None
        };
        if skip_reason.is_none() {
            planned += 1;
            if planned > MAX_PLANNED {
                skip_reason = Some("max_command_count_reached");
            }
        }
        items.push(PlanItem {
            kind: c.kind.to_owned(),
            command: c.command,
            working_directory: c.working_directory,
            confidence: c.confidence,
            status: if skip_reason.is_some() {
                "skipped"
            } else {
                "planned"
            }
            .to_owned(),
            skip_reason: skip_reason.map(str::to_owned),
        });
    }
    Ok((
        FrameworkDetection {
            schema_version: "mozaiks.framework_detection.v1".to_owned(),
            primary_framework_id: primary.as_ref().map(|p| p.framework_id.clone()),
            primary_framework_label: primary.map(|p| p.label),
            package_managers,
            frameworks,
            validation_command_count: u64::try_from(d.commands.len()).unwrap_or(u64::MAX),
        },
        items,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_safety_and_order() {
        assert!(safe_command("npm run lint"));
        assert!(!safe_command("npm run lint && rm -rf /"));
        assert!(!safe_command("echo $HOME"));
        assert!(kind_order("install") < kind_order("lint"));
        assert!(kind_order("build") < kind_order("dev"));
        assert_eq!(dirname("package.json"), ".");
        assert_eq!(dirname("app/package.json"), "app");
    }
}
