//! `app/modules/<id>/module.yaml` validated the way the upstream module definition model
//! validates it (`schema_version: mozaiks.module.v1`, a `module: {id, version, handler, …}`
//! identity, `permissions`, `actions`, `capabilities`, extra keys forbidden everywhere, the
//! handler entry point `module.path:ClassName`, unique ids, and `module.id` equal to the folder
//! name). Nothing is imported: the handler file's existence is checked by the caller.

use crate::provenance::{contained_parts, py_strip};
use crate::pyyaml::{self, PyValue};

/// The one accepted module schema version.
pub const MODULE_SCHEMA_VERSION: &str = "mozaiks.module.v1";

const TOP_KEYS: &[&str] = &[
    "schema_version",
    "module",
    "permissions",
    "actions",
    "capabilities",
];
const IDENTITY_KEYS: &[&str] = &[
    "id",
    "display_name",
    "version",
    "type",
    "description",
    "owner",
    "visibility",
    "handler",
];
const MODULE_TYPES: &[&str] = &[
    "standard",
    "messaging",
    "workflow",
    "event_pipeline",
    "transactional",
];
const ACTION_KEYS: &[&str] = &[
    "id",
    "description",
    "handler_method",
    "api_surface",
    "input_schema",
    "output_schema",
    "permissions",
    "emits",
    "entitlement_gate",
];
const CAPABILITY_KEYS: &[&str] = &[
    "capability_id",
    "kind",
    "target",
    "title",
    "permissions",
    "input_schema",
];
const CAPABILITY_KINDS: &[&str] = &["action", "workflow", "page", "transition", "hosted"];

/// A module definition that validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleDefinition {
    /// `module.id`.
    pub id: String,
    /// `module.version` (default `1.0.0`).
    pub version: String,
    /// `module.display_name`.
    pub display_name: Option<String>,
    /// `module.type`.
    pub module_type: String,
    /// The handler file, relative to the module directory (`backend/handler.py`).
    pub handler_path: String,
    /// The handler class name.
    pub handler_class: String,
    /// Action ids in file order.
    pub actions: Vec<String>,
}

/// `str(value or "").strip()`, refused when empty.
fn required_text(value: Option<&PyValue>, field: &str, errors: &mut Vec<String>) -> Option<String> {
    let Some(value) = value else {
        errors.push(format!("{field} is required"));
        return None;
    };
    let text = if value.truthy() {
        value.py_str()
    } else {
        String::new()
    };
    let text = py_strip(&text).to_owned();
    if text.is_empty() {
        errors.push(format!("{field} must be non-empty"));
        return None;
    }
    Some(text)
}

fn optional_text(value: Option<&PyValue>) -> Option<String> {
    match value {
        None | Some(PyValue::Null) => None,
        Some(v) => Some(py_strip(&v.py_str()).to_owned()).filter(|t| !t.is_empty()),
    }
}

/// `module.path:ClassName` → (`module/path.py`, `ClassName`).
fn entrypoint(text: &str) -> Result<(String, String), &'static str> {
    let Some((module_path, class_name)) = text.split_once(':') else {
        return Err("module.handler must use module.path:ClassName syntax");
    };
    let module_path = py_strip(module_path);
    let class_name = py_strip(class_name);
    if module_path.is_empty() || class_name.is_empty() {
        return Err("module.handler must include both module path and class name");
    }
    if module_path.contains("_shared") || module_path.contains('\\') {
        return Err("module.handler must be module-local");
    }
    let rel = format!("{}.py", module_path.replace('.', "/"));
    let Some(parts) = contained_parts(&rel) else {
        return Err("module.handler must be a safe module-local path");
    };
    let stripped: String = class_name.chars().filter(|c| *c != '_').collect();
    if stripped.is_empty() || !stripped.chars().all(char::is_alphanumeric) {
        return Err("module.handler class name must be a valid identifier-like value");
    }
    Ok((parts.join("/"), class_name.to_owned()))
}

fn check_keys(value: &PyValue, allowed: &[&str], what: &str, errors: &mut Vec<String>) {
    if let Some(entries) = value.as_map()
        && entries
            .iter()
            .any(|(k, _)| !k.as_str().is_some_and(|k| allowed.contains(&k)))
    {
        errors.push(format!(
            "{what} has an unknown field (extra fields are forbidden)"
        ));
    }
}

/// One item at `at` of a list of mappings: an error when it is not a mapping (then `false`),
/// one for a key outside `allowed`, and its required text `id_key`, collected into `ids`.
fn mapping_item(
    item: &PyValue,
    at: &str,
    allowed: &[&str],
    id_key: &str,
    ids: &mut Vec<String>,
    errors: &mut Vec<String>,
) -> bool {
    if item.as_map().is_none() {
        errors.push(format!("{at} must be a mapping"));
        return false;
    }
    check_keys(item, allowed, at, errors);
    if let Some(id) = required_text(item.get(id_key), &format!("{at}.{id_key}"), errors) {
        ids.push(id);
    }
    true
}

fn string_list(value: Option<&PyValue>, field: &str, errors: &mut Vec<String>) {
    match value {
        None | Some(PyValue::Null | PyValue::Seq(_)) => {}
        Some(_) => errors.push(format!("{field} must be a list")),
    }
}

/// The list under `field` (absent: empty; anything but a list: an error).
fn list<'a>(doc: &'a PyValue, field: &str, errors: &mut Vec<String>) -> &'a [PyValue] {
    match doc.get(field) {
        None => &[],
        Some(PyValue::Seq(items)) => items,
        Some(_) => {
            errors.push(format!("{field} must be a list"));
            &[]
        }
    }
}

fn unique(ids: &[String], what: &str, errors: &mut Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    if ids.iter().any(|id| !seen.insert(id)) {
        errors.push(format!("{what} must be unique"));
    }
}

/// Loads and validates `module.yaml` bytes for the folder `folder`.
///
/// # Errors
/// Every rule broken, in our words.
pub fn parse(bytes: &[u8], folder: &str) -> Result<ModuleDefinition, Vec<String>> {
    let doc = match pyyaml::safe_load(bytes) {
        Ok(Some(doc)) => doc,
        Ok(None) => PyValue::Map(Vec::new()),
        Err(problem) => return Err(vec![format!("module.yaml: {}", problem.describe())]),
    };
    if doc.as_map().is_none() {
        return Err(vec!["module.yaml must contain a YAML object".to_owned()]);
    }
    let mut errors = Vec::new();
    check_keys(&doc, TOP_KEYS, "module.yaml", &mut errors);
    match doc.get("schema_version") {
        Some(PyValue::Str(s)) if s == MODULE_SCHEMA_VERSION => {}
        Some(_) => errors.push(format!("schema_version must be {MODULE_SCHEMA_VERSION}")),
        None => errors.push("schema_version is required".to_owned()),
    }
    let mut identity = None;
    match doc.get("module") {
        None => errors.push("module is required".to_owned()),
        Some(module) if module.as_map().is_some() => {
            check_keys(module, IDENTITY_KEYS, "module", &mut errors);
            let id = required_text(module.get("id"), "module.id", &mut errors);
            let handler = required_text(module.get("handler"), "module.handler", &mut errors)
                .and_then(|h| match entrypoint(&h) {
                    Ok(parts) => Some(parts),
                    Err(why) => {
                        errors.push(why.to_owned());
                        None
                    }
                });
            let version = match module.get("version") {
                Some(v) if v.truthy() => required_text(Some(v), "module.version", &mut errors),
                _ => Some("1.0.0".to_owned()),
            };
            let module_type = match module.get("type") {
                None => Some("standard".to_owned()),
                Some(PyValue::Str(t)) if MODULE_TYPES.contains(&t.as_str()) => Some(t.clone()),
                Some(_) => {
                    errors.push(format!(
                        "module.type must be one of {}",
                        MODULE_TYPES.join(", ")
                    ));
                    None
                }
            };
            if let (
                Some(id),
                Some((handler_path, handler_class)),
                Some(version),
                Some(module_type),
            ) = (id, handler, version, module_type)
            {
                identity = Some((id, handler_path, handler_class, version, module_type));
            }
        }
        Some(_) => errors.push("module must be a mapping".to_owned()),
    }
    let mut permission_ids = Vec::new();
    for (i, p) in list(&doc, "permissions", &mut errors).iter().enumerate() {
        let at = format!("permissions[{i}]");
        if !mapping_item(
            p,
            &at,
            &["id", "description"],
            "id",
            &mut permission_ids,
            &mut errors,
        ) {
            continue;
        }
        required_text(
            p.get("description"),
            &format!("{at}.description"),
            &mut errors,
        );
    }
    unique(&permission_ids, "module permissions ids", &mut errors);
    let mut action_ids = Vec::new();
    for (i, a) in list(&doc, "actions", &mut errors).iter().enumerate() {
        let at = format!("actions[{i}]");
        if !mapping_item(a, &at, ACTION_KEYS, "id", &mut action_ids, &mut errors) {
            continue;
        }
        required_text(
            a.get("description"),
            &format!("{at}.description"),
            &mut errors,
        );
        required_text(
            a.get("handler_method"),
            &format!("{at}.handler_method"),
            &mut errors,
        );
        for schema in ["input_schema", "output_schema"] {
            if a.get(schema).is_some_and(|s| s.as_map().is_none()) {
                errors.push(format!("{at}.{schema} must be a mapping"));
            }
        }
        string_list(
            a.get("permissions"),
            &format!("{at}.permissions"),
            &mut errors,
        );
        string_list(a.get("emits"), &format!("{at}.emits"), &mut errors);
        match a.get("api_surface") {
            None | Some(PyValue::Null) => {}
            Some(PyValue::Str(s)) if !py_strip(s).is_empty() => {}
            Some(_) => errors.push(format!("{at}.api_surface must be a non-empty string")),
        }
    }
    unique(&action_ids, "module actions ids", &mut errors);
    let mut capability_ids = Vec::new();
    for (i, c) in list(&doc, "capabilities", &mut errors).iter().enumerate() {
        let at = format!("capabilities[{i}]");
        if !mapping_item(
            c,
            &at,
            CAPABILITY_KEYS,
            "capability_id",
            &mut capability_ids,
            &mut errors,
        ) {
            continue;
        }
        let target = required_text(c.get("target"), &format!("{at}.target"), &mut errors);
        required_text(c.get("title"), &format!("{at}.title"), &mut errors);
        match c.get("kind") {
            Some(PyValue::Str(k)) if CAPABILITY_KINDS.contains(&k.as_str()) => {
                if k == "action" && target.as_ref().is_some_and(|t| !action_ids.contains(t)) {
                    errors.push(format!("{at} targets an unknown action"));
                }
            }
            _ => errors.push(format!(
                "{at}.kind must be one of {}",
                CAPABILITY_KINDS.join(", ")
            )),
        }
        string_list(
            c.get("permissions"),
            &format!("{at}.permissions"),
            &mut errors,
        );
        if c.get("input_schema")
            .is_some_and(|s| !matches!(s, PyValue::Null | PyValue::Map(_)))
        {
            errors.push(format!("{at}.input_schema must be a mapping"));
        }
    }
    unique(
        &capability_ids,
        "module capabilities capability_id values",
        &mut errors,
    );
    let Some((id, handler_path, handler_class, version, module_type)) = identity else {
        return Err(errors);
    };
    if id != folder {
        errors.push("module.id must match the module folder name".to_owned());
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(ModuleDefinition {
        id,
        version,
        display_name: doc
            .get("module")
            .and_then(|m| optional_text(m.get("display_name"))),
        module_type,
        handler_path,
        handler_class,
        actions: action_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASKS: &str = "schema_version: mozaiks.module.v1\nmodule:\n  id: tasks\n  display_name: Tasks\n  version: 1.0.0\n  handler: backend.handler:TasksHandler\nactions:\n  - id: list_tasks\n    description: List tasks.\n    handler_method: list_tasks\n    input_schema: { type: object }\n    output_schema: { type: object }\n";

    #[test]
    fn upstream_example_validates() {
        let m = parse(TASKS.as_bytes(), "tasks").unwrap();
        assert_eq!(m.handler_path, "backend/handler.py");
        assert_eq!(m.handler_class, "TasksHandler");
        assert_eq!(m.version, "1.0.0");
        assert_eq!(m.actions, vec!["list_tasks".to_owned()]);
    }

    #[test]
    fn upstream_refusals() {
        assert!(parse(TASKS.as_bytes(), "other").is_err());
        let with_top_id = format!("id: tasks\n{TASKS}");
        assert!(parse(with_top_id.as_bytes(), "tasks").is_err());
        let no_version = TASKS.replace("schema_version: mozaiks.module.v1\n", "");
        assert!(parse(no_version.as_bytes(), "tasks").is_err());
        let bad_handler = TASKS.replace("backend.handler:TasksHandler", "backend/handler.py");
        assert!(parse(bad_handler.as_bytes(), "tasks").is_err());
        let dup =
            format!("{TASKS}  - id: list_tasks\n    description: again\n    handler_method: x\n");
        assert!(parse(dup.as_bytes(), "tasks").is_err());
        assert!(parse(b"", "tasks").is_err());
        assert!(parse(b"- a\n", "tasks").is_err());
    }
}
