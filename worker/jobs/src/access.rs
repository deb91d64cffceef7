//! Who may do what, and what they did (schema version 7): the roles a named token carries, and
//! the audit trail of privileged acts.
//!
//! Roles are a closed set ([`Role`]), parsed strictly (lowercase names, nothing trimmed, a
//! repeated role refused). A token's roles are stored as their canonical list (`submit,review`)
//! and read back through the same strict parser: anything else is a corrupt database. Tokens that
//! existed before version 7 were migrated to every role and carry `roles_migrated` until their
//! roles are set again.
//!
//! The audit trail is append-only (triggers refuse `UPDATE` and `DELETE` on both backends). The
//! store writes each entry in the transaction of the act itself: a review decision, a
//! publication, a token created, revoked or given roles. An entry holds the principal, the act
//! (a closed set, [`AuditAct`]), its subject (a job id or a token name) and a short detail
//! (digests, roles, a branch): never a token, its hash or any other secret.

use serde::Serialize;

use crate::error::{JobsError, Result};

/// One role a principal may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Role {
    /// Submit jobs, cancel them, queue a failed or cancelled job again.
    Submit,
    /// Record review decisions (accept, reject, retry).
    Review,
    /// Publish an accepted candidate.
    Publish,
    /// Forced accepts (unless `serve` names another role for them), the audit trail.
    Admin,
}

impl Role {
    /// Every role, in the canonical order.
    pub const ALL: [Self; 4] = [Self::Submit, Self::Review, Self::Publish, Self::Admin];

    /// The role's name on the wire and in the store.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Review => "review",
            Self::Publish => "publish",
            Self::Admin => "admin",
        }
    }

    const fn bit(self) -> u8 {
        match self {
            Self::Submit => 1,
            Self::Review => 2,
            Self::Publish => 4,
            Self::Admin => 8,
        }
    }

    /// Parses a role name exactly (`submit`, `review`, `publish`, `admin`).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for anything else (another case, spaces, an unknown name).
    pub fn parse(text: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == text)
            .ok_or_else(|| JobsError::input("role", "must be submit, review, publish or admin"))
    }
}

impl std::str::FromStr for Role {
    type Err = JobsError;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Role {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A set of roles (possibly empty: a principal that may only read).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Roles(u8);

impl Roles {
    /// No role: reads only.
    pub const NONE: Self = Self(0);
    /// Every role (the first-start `operator` token; tokens migrated from before roles).
    pub const ALL: Self = Self(15);

    /// The set of `roles`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` when a role is named twice.
    pub fn from_list(roles: &[Role]) -> Result<Self> {
        let mut set = Self::NONE;
        for r in roles {
            if set.contains(*r) {
                return Err(JobsError::input("role", "a role is named twice"));
            }
            set.0 |= r.bit();
        }
        Ok(set)
    }

    /// Parses a comma-separated list of role names (`submit,review`; empty: no role), strictly.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_JOBS_INPUT` for an unknown or repeated role, or an empty item.
    pub fn parse_list(text: &str) -> Result<Self> {
        if text.is_empty() {
            return Ok(Self::NONE);
        }
        let roles = text
            .split(',')
            .map(Role::parse)
            .collect::<Result<Vec<_>>>()?;
        Self::from_list(&roles)
    }

    /// Whether the set holds `role`.
    #[must_use]
    pub const fn contains(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    /// The roles of the set, in the canonical order.
    pub fn iter(self) -> impl Iterator<Item = Role> {
        Role::ALL.into_iter().filter(move |r| self.contains(*r))
    }

    /// The canonical list (`submit,review`; empty for no role): what the store keeps.
    #[must_use]
    pub fn to_list(self) -> String {
        self.iter().map(Role::as_str).collect::<Vec<_>>().join(",")
    }

    /// A stored list, read back: exactly the canonical form, else `PATCH_CANDIDATE_JOBS_CORRUPT`.
    pub(crate) fn stored(text: &str) -> Result<Self> {
        let corrupt = || JobsError::Corrupt {
            field: "api_tokens.roles",
        };
        let roles = Self::parse_list(text).map_err(|_| corrupt())?;
        if roles.to_list() != text {
            return Err(corrupt());
        }
        Ok(roles)
    }
}

impl std::fmt::Display for Roles {
    /// The canonical list, or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 == 0 {
            f.write_str("none")
        } else {
            f.write_str(&self.to_list())
        }
    }
}

impl Serialize for Roles {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// What a live named token may do: its principal and roles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenAccess {
    /// The token's name (its principal).
    pub name: String,
    pub roles: Roles,
}

/// One kind of privileged act the audit trail records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuditAct {
    /// A named token was created (detail: its roles).
    TokenCreated,
    /// A named token was revoked.
    TokenRevoked,
    /// A named token's roles were set (detail: the new and the previous roles).
    TokenRoles,
    /// A review decision: accept (detail: the candidate digest and the decision's number).
    Accept,
    /// A review decision: reject.
    Reject,
    /// A review decision: retry.
    Retry,
    /// An accept forced past unmet gates or an unclean policy.
    ForcedAccept,
    /// A publication was recorded (detail: the candidate digest and the branch).
    Published,
    /// A host loaded the operator's repository policy, at start-up or on SIGHUP (subject: its
    /// digest; principal: the host).
    PolicyLoaded,
}

impl AuditAct {
    /// Every act, as the database's `CHECK` lists them.
    pub const ALL: [Self; 9] = [
        Self::TokenCreated,
        Self::TokenRevoked,
        Self::TokenRoles,
        Self::Accept,
        Self::Reject,
        Self::Retry,
        Self::ForcedAccept,
        Self::Published,
        Self::PolicyLoaded,
    ];

    /// The act's name on the wire and in the store.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::TokenCreated => "token_created",
            Self::TokenRevoked => "token_revoked",
            Self::TokenRoles => "token_roles",
            Self::Accept => "review_accept",
            Self::Reject => "review_reject",
            Self::Retry => "review_retry",
            Self::ForcedAccept => "review_forced_accept",
            Self::Published => "published",
            Self::PolicyLoaded => "policy_loaded",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == text)
    }

    /// The act of a review decision (`accept`, `reject`, `retry`; a forced accept is its own).
    pub(crate) fn of_decision(decision: &str, forced: bool) -> Result<Self> {
        match (decision, forced) {
            ("accept", true) => Ok(Self::ForcedAccept),
            ("accept", false) => Ok(Self::Accept),
            ("reject", false) => Ok(Self::Reject),
            ("retry", false) => Ok(Self::Retry),
            _ => Err(JobsError::input("decision", "no audited act")),
        }
    }
}

impl Serialize for AuditAct {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// The longest detail of an audit entry, in bytes.
pub const MAX_AUDIT_DETAIL_BYTES: usize = 512;
/// The most audit entries one read returns.
pub const MAX_AUDIT_LIST: usize = 1000;

/// An act to append: checked principal, subject and detail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NewAuditEntry {
    pub principal: String,
    pub act: AuditAct,
    pub subject: String,
    pub detail: String,
}

impl NewAuditEntry {
    pub(crate) fn new(
        principal: &str,
        act: AuditAct,
        subject: &str,
        detail: String,
    ) -> Result<Self> {
        check_principal("principal", principal)?;
        if subject.is_empty()
            || subject.len() > 128
            || !subject.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(JobsError::input(
                "audit subject",
                "must be 1-128 printable ASCII characters",
            ));
        }
        if detail.len() > MAX_AUDIT_DETAIL_BYTES || detail.chars().any(char::is_control) {
            return Err(JobsError::input(
                "audit detail",
                "must be at most 512 bytes without control characters",
            ));
        }
        Ok(Self {
            principal: principal.to_owned(),
            act,
            subject: subject.to_owned(),
            detail,
        })
    }
}

/// One entry of the audit trail, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AuditEntry {
    /// Its place in the trail (increasing; gaps are possible on PostgreSQL).
    pub seq: i64,
    /// Milliseconds since the epoch (the database clock on PostgreSQL).
    pub at_ms: i64,
    pub principal: String,
    pub act: AuditAct,
    /// A job id or a token name.
    pub subject: String,
    pub detail: String,
}

impl AuditEntry {
    /// A stored row, checked; any failure is `PATCH_CANDIDATE_JOBS_CORRUPT`.
    pub(crate) fn from_row(
        seq: i64,
        at_ms: i64,
        principal: String,
        act: &str,
        subject: String,
        detail: String,
    ) -> Result<Self> {
        let act = AuditAct::parse(act).ok_or(JobsError::Corrupt { field: "audit.act" })?;
        let checked = NewAuditEntry::new(&principal, act, &subject, detail)
            .map_err(|_| JobsError::Corrupt { field: "audit" })?;
        Ok(Self {
            seq,
            at_ms,
            principal: checked.principal,
            act,
            subject: checked.subject,
            detail: checked.detail,
        })
    }
}

/// The longest token (principal) name.
const MAX_TOKEN_NAME_CHARS: usize = 64;

/// Whether `text` is a principal name: 1-64 of `A-Z a-z 0-9 . _ @ -`, starting with a letter
/// or digit.
pub(crate) fn is_principal(text: &str) -> bool {
    let mut chars = text.chars();
    text.len() <= MAX_TOKEN_NAME_CHARS
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'))
}

/// A principal name: 1-64 of `A-Z a-z 0-9 . _ @ -`, starting with a letter or digit.
pub(crate) fn check_principal(field: &'static str, text: &str) -> Result<()> {
    if is_principal(text) {
        Ok(())
    } else {
        Err(JobsError::input(
            field,
            "must be 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit",
        ))
    }
}

/// Bounds an audit read: `limit` between 1 and [`MAX_AUDIT_LIST`].
pub(crate) fn audit_limit(limit: usize) -> i64 {
    i64::try_from(limit.clamp(1, MAX_AUDIT_LIST)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_strictly_and_round_trip_their_canonical_list() {
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()).unwrap(), r);
        }
        for bad in ["", "Submit", " submit", "submit ", "owner", "admin,"] {
            assert_eq!(
                Role::parse(bad).unwrap_err().code(),
                "PATCH_CANDIDATE_JOBS_INPUT",
                "{bad:?}"
            );
        }
        assert_eq!(Roles::parse_list("").unwrap(), Roles::NONE);
        let two = Roles::parse_list("review,submit").unwrap();
        assert_eq!(two.to_list(), "submit,review");
        assert_eq!(Roles::ALL.to_list(), "submit,review,publish,admin");
        assert_eq!(Roles::NONE.to_string(), "none");
        for bad in ["submit,submit", "submit,", ",", "submit, review"] {
            assert!(Roles::parse_list(bad).is_err(), "{bad:?}");
        }
        // The store reads back only the canonical form.
        assert_eq!(Roles::stored("submit,review").unwrap(), two);
        for bad in ["review,submit", "x", "submit,submit"] {
            assert_eq!(
                Roles::stored(bad).unwrap_err().code(),
                "PATCH_CANDIDATE_JOBS_CORRUPT"
            );
        }
        assert_eq!(
            serde_json::to_value(two).unwrap(),
            serde_json::json!(["submit", "review"])
        );
    }

    #[test]
    fn audit_entries_are_checked_before_storage() {
        let ok = NewAuditEntry::new("alice", AuditAct::Accept, "job_x", "d".to_owned());
        assert!(ok.is_ok());
        for (principal, subject, detail) in [
            ("a b", "job_x", String::new()),
            ("alice", "", String::new()),
            ("alice", "job x", String::new()),
            ("alice", "job_x", "a\nb".to_owned()),
            ("alice", "job_x", "d".repeat(513)),
        ] {
            assert!(
                NewAuditEntry::new(principal, AuditAct::Accept, subject, detail).is_err(),
                "{principal:?} {subject:?}"
            );
        }
        assert_eq!(
            AuditAct::of_decision("accept", true).unwrap(),
            AuditAct::ForcedAccept
        );
        assert!(AuditAct::of_decision("reject", true).is_err());
        for a in AuditAct::ALL {
            assert_eq!(AuditAct::parse(a.as_str()), Some(a));
        }
    }
}
