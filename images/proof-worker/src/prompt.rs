//! The provider prompt (reference §12.3). The two `Approved … paths:` headings are the only parts
//! the synthetic agent depends on.

use crate::request::TurnRequest;

/// Builds the one prompt of the turn.
#[must_use]
pub fn build_prompt(request: &TurnRequest) -> String {
    let mut lines: Vec<String> = vec![
        "You are making one bounded, pre-approved change to a repository. The workspace holds only \
         the selected editable files and the read-only inspection files listed below."
            .to_owned(),
        String::new(),
        format!("Request: {}", request.raw_user_request),
        String::new(),
        "Editable files:".to_owned(),
    ];
    lines.extend(request.files.keys().map(|p| format!("- {p}")));
    lines.push(String::new());
    lines.push("Read-only inspection files (do not modify):".to_owned());
    if request.read_only_files.is_empty() {
        lines.push("(none)".to_owned());
    } else {
        lines.extend(request.read_only_files.keys().map(|p| format!("- {p}")));
    }
    lines.push(String::new());
    if request.create_paths.is_empty() && request.delete_paths.is_empty() {
        lines.push(
            "Edit the editable files in place. Create and delete nothing, run no commands, and \
             reply with a short summary."
                .to_owned(),
        );
    } else {
        lines.push("Approved creation paths:".to_owned());
        lines.extend(request.create_paths.iter().map(|p| format!("- {p}")));
        lines.push(String::new());
        lines.push("Approved deletion paths:".to_owned());
        lines.extend(request.delete_paths.iter().map(|p| format!("- {p}")));
        lines.push(String::new());
        lines.push(
            "Create or delete only the exact paths listed above. Run no commands, and reply with \
             a short summary."
                .to_owned(),
        );
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_files_and_grants_under_the_reference_headings() {
        let request = TurnRequest::parse(
            br#"{"app_id":"a","build_family":"app_bundle","build_record_id":"b","change_class":"patch","raw_user_request":"fix it","files":{"app/ui/pages/Dashboard.jsx":"x"},"read_only_files":{},"create_paths":["app/ui/pages/New.jsx"],"delete_paths":["app/ui/pages/Dashboard.jsx"]}"#,
        )
        .unwrap();
        let prompt = build_prompt(&request);
        assert!(prompt.contains("Request: fix it\n"));
        assert!(prompt.contains("Approved creation paths:\n- app/ui/pages/New.jsx\n"));
        assert!(prompt.contains("Approved deletion paths:\n- app/ui/pages/Dashboard.jsx\n"));
        assert!(prompt.contains("inspection files (do not modify):\n(none)\n"));
    }
}
