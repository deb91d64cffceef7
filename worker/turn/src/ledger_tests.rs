#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use super::*;
use crate::acp_usage::parse_isolated_acp_usage;

fn identity(user: &str) -> UsageIdentity {
    UsageIdentity {
        app_id: "app-1".into(),
        user_id: user.into(),
        tenant_id: "tenant-1".into(),
        workspace_id: "acme/support".into(),
        chat_id: None,
        workflow_name: None,
        build_id: Some("build-1".into()),
    }
}

fn usage() -> IsolatedAcpUsage {
    let v = serde_json::json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120});
    parse_isolated_acp_usage(Some(&v)).unwrap()
}

/// Records [`usage`] for `user`'s `attempt` in `ledger`.
fn record(
    ledger: &UsageLedger,
    user: &str,
    attempt: &str,
    model: Option<&str>,
) -> Result<bool, TurnError> {
    record_isolated_acp_usage(
        Some(ledger),
        Some(&usage()),
        &identity(user),
        attempt,
        model,
    )
}

#[test]
fn receipts_are_idempotent_per_attempt_and_use_host_identity() {
    let ledger = UsageLedger::in_memory().unwrap();
    // The same attempt twice.
    for _ in 0..2 {
        assert!(record(&ledger, "u1", "attempt-0001", Some("proof-model")).unwrap());
    }
    assert_eq!(ledger.count().unwrap(), 1);
    record(&ledger, "u1", "attempt-0002", None).unwrap();
    record(&ledger, "u2", "attempt-0001", None).unwrap();
    let rows = ledger.list().unwrap();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert!(row.event_id.starts_with("acp:"));
        assert_eq!(row.event_id.len(), 4 + 64);
        assert!(!serde_json::to_string(row).unwrap().contains("attempt-000"));
        assert_eq!(row.agent_name, "RepositoryACPCodingAgent");
        assert_eq!(row.execution_kind, "auxiliary");
        assert_eq!(row.total_tokens, 120);
    }
}

#[test]
fn event_id_matches_an_independent_canonical_json() {
    // sha256 of the compact sorted-key JSON, computed by Python's json.dumps(sort_keys=True,
    // separators=(",", ":"), ensure_ascii=False) for the same identity.
    let expected_doc = r#"{"app_id":"app-1","attempt_id":"attempt-0001","tenant_id":"tenant-1","user_id":"u1","workspace_id":"acme/support"}"#;
    assert_eq!(
        usage_event_id(&identity("u1"), "attempt-0001"),
        format!("acp:{}", vocab::sha256_bare_hex(expected_doc.as_bytes()))
    );
}

#[test]
fn missing_usage_records_nothing_and_outage_does_not_fail() {
    let ledger = UsageLedger::in_memory().unwrap();
    assert!(
        !record_isolated_acp_usage(Some(&ledger), None, &identity("u1"), "attempt-0001", None)
            .unwrap()
    );
    assert!(
        !record_isolated_acp_usage(None, Some(&usage()), &identity("u1"), "attempt-0001", None)
            .unwrap()
    );
    assert_eq!(ledger.count().unwrap(), 0);
    // A ledger whose table is gone (an outage) returns false instead of failing the turn.
    ledger
        .connection()
        .unwrap()
        .execute_batch("DROP TABLE usage_events")
        .unwrap();
    assert!(!record(&ledger, "u1", "attempt-0001", None).unwrap());
}

#[test]
fn untrusted_attempt_and_model_are_rejected() {
    let ledger = UsageLedger::in_memory().unwrap();
    for bad in ["short", "-attempt-0001", "attempt 0001", &"a".repeat(129)] {
        let err = record(&ledger, "u", bad, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "REPOSITORY_USAGE_IDENTITY: attempt_id is invalid"
        );
    }
    for bad in ["", "model name", "-m", &"m".repeat(129)] {
        let err = record(&ledger, "u", "attempt-0001", Some(bad)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "REPOSITORY_USAGE_IDENTITY: model_name is invalid"
        );
    }
}

#[test]
fn file_ledger_persists_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("usage.sqlite3");
    {
        let ledger = UsageLedger::open(&path).unwrap();
        record(&ledger, "u", "attempt-0001", None).unwrap();
    }
    assert_eq!(UsageLedger::open(&path).unwrap().count().unwrap(), 1);
}
