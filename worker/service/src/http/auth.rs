//! The API's bearer tokens: the first-start token file, named tokens, the authentication middleware.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq as _;

use super::*;

/// The API token of this state directory: read, or generated (256 random bits, hex, 0600,
/// exclusively created) on first start.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_STATE` when the file cannot be read or created, is not 0600, or is
/// malformed.
pub fn load_or_create_token(state: &Path) -> Result<Vec<u8>, ServiceError> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    let path = state::API_TOKEN.path_in(state);
    let bad = |detail: &'static str| ServiceError::State { detail };
    match std::fs::File::open(&path) {
        Ok(f) => {
            let meta = f.metadata().map_err(|_| bad("cannot read the API token"))?;
            if meta.mode() & 0o077 != 0 {
                return Err(bad("the API token file is readable by others (want 0600)"));
            }
            let mut text = String::new();
            f.take(256)
                .read_to_string(&mut text)
                .map_err(|_| bad("cannot read the API token"))?;
            let token = text.trim_end_matches('\n');
            if token.len() < 32 || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Err(bad("the API token file is malformed"));
            }
            Ok(token.as_bytes().to_vec())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            crate::create_private_dir(state)?;
            let mut raw = [0_u8; 32];
            getrandom::fill(&mut raw).map_err(|_| bad("no randomness for the API token"))?;
            let token = hex::encode(raw);
            let written = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| f.write_all(format!("{token}\n").as_bytes()));
            match written {
                Ok(()) => Ok(token.into_bytes()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    load_or_create_token(state)
                }
                Err(_) => Err(bad("cannot write the API token")),
            }
        }
        Err(_) => Err(bad("cannot read the API token")),
    }
}

/// Requires `Authorization: Bearer <token>`: the first-start token (compared in constant time)
/// is the principal `operator` with every role; any other token is looked up by its SHA-256
/// among the live named tokens of the job store, with its roles. The caller rides in the
/// request's extensions; a caller without the role the route needs ([`required_role`]) is
/// refused with 403 `PATCH_CANDIDATE_SERVICE_FORBIDDEN` before the handler runs.
pub(super) async fn require_token(
    State(sh): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    match authenticate(&sh, request.headers()).await {
        Ok(Some(caller)) => {
            if let Some(role) = required_role(request.method(), request.uri().path())
                && let Err(e) = caller.require(role)
            {
                return ApiError::from(e).into_response();
            }
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Ok(None) => unauthorized().into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The role a call of the API needs, by method and path (the route table of docs/SERVICE.md,
/// "Roles"); `None`: any authenticated principal (the reads). A path this table does not know
/// needs `admin`, so a route added without an entry is closed rather than open.
pub(super) fn required_role(method: &Method, path: &str) -> Option<jobs::Role> {
    use jobs::Role;
    let segments: Vec<&str> = path.split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET" | "HEAD", ["", "metrics"] | ["", "v1", "jobs"] | ["", "v1", "jobs", _])
        | (
            "GET" | "HEAD",
            ["", "v1", "jobs", _, "candidate" | "review"]
            | ["", "v1", "jobs", _, "review", "attempt-diff"],
        ) => None,
        ("POST", ["", "v1", "jobs"] | ["", "v1", "jobs", _, "cancel" | "retry"]) => {
            Some(Role::Submit)
        }
        ("POST", ["", "v1", "jobs", _, "review"]) => Some(Role::Review),
        ("POST", ["", "v1", "jobs", _, "publish"]) => Some(Role::Publish),
        ("GET" | "HEAD", ["", "v1", "audit"]) => Some(Role::Admin),
        // The usage report: every caller, limited to its own principal without `admin`.
        ("GET" | "HEAD", ["", "v1", "usage"]) => None,
        _ => Some(Role::Admin),
    }
}

/// The authenticated caller of a request: its principal and roles.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) principal: review::Principal,
    pub(crate) roles: jobs::Roles,
}

impl Caller {
    /// The first-start token's caller: `operator`, every role.
    fn operator() -> Option<Self> {
        Some(Self {
            principal: review::Principal::parse(jobs::OPERATOR_PRINCIPAL).ok()?,
            roles: jobs::Roles::ALL,
        })
    }

    /// `Ok` when the caller holds `role`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_SERVICE_FORBIDDEN` naming the role.
    pub(crate) fn require(&self, role: jobs::Role) -> Result<(), ServiceError> {
        if self.roles.contains(role) {
            Ok(())
        } else {
            Err(ServiceError::Forbidden { role })
        }
    }
}

/// The caller of the request's bearer token, `None` when it has none or an unknown or revoked
/// one.
pub(super) async fn authenticate(
    sh: &Shared,
    headers: &HeaderMap,
) -> Result<Option<Caller>, jobs::JobsError> {
    if authorized(headers, &sh.token) {
        return Ok(Caller::operator());
    }
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return Ok(None);
    };
    named_token_caller(sh, given).await
}

/// The caller of a token given in a request (the bearer token, or the UI's sign-in form): the
/// first-start token is `operator` with every role, any other is looked up by its SHA-256
/// among the live named tokens.
pub(crate) async fn token_caller(
    sh: &Shared,
    given: &[u8],
) -> Result<Option<Caller>, jobs::JobsError> {
    if given.len() == sh.token.len() && bool::from(given.ct_eq(&sh.token)) {
        return Ok(Caller::operator());
    }
    named_token_caller(sh, given).await
}

pub(super) async fn named_token_caller(
    sh: &Shared,
    given: &[u8],
) -> Result<Option<Caller>, jobs::JobsError> {
    if !(32..=256).contains(&given.len()) || !given.iter().all(u8::is_ascii_alphanumeric) {
        return Ok(None);
    }
    // The lookup is by hash: equality of SHA-256 digests reveals nothing usable about a token.
    let hash = jobs::TokenHash::parse(&vocab::sha256_bare_hex(given))?;
    named_hash_caller(sh, &hash).await
}

/// The caller of the live named token with SHA-256 `hash` (a UI session keeps the hash).
pub(crate) async fn named_hash_caller(
    sh: &Shared,
    hash: &jobs::TokenHash,
) -> Result<Option<Caller>, jobs::JobsError> {
    let access = sh.store.token_access(hash).await?;
    Ok(access.and_then(|a| {
        Some(Caller {
            principal: review::Principal::parse(&a.name).ok()?,
            roles: a.roles,
        })
    }))
}

/// The caller of the first-start token (a UI session signed in with it).
pub(crate) fn operator_caller() -> Option<Caller> {
    Caller::operator()
}

/// A new named token: 256 random bits as 64 hex digits (shown once), and the hash the store
/// keeps. SHA-256 rather than a password hash (argon2): the token is high-entropy random, so a
/// slow hash adds nothing against guessing while costing every request.
///
/// # Errors
/// `PATCH_CANDIDATE_SERVICE_STATE` when no randomness is available.
pub fn mint_token() -> Result<(String, jobs::TokenHash), ServiceError> {
    let mut raw = [0_u8; 32];
    getrandom::fill(&mut raw).map_err(|_| ServiceError::State {
        detail: "no randomness for a token",
    })?;
    let token = hex::encode(raw);
    let hash = jobs::TokenHash::parse(&vocab::sha256_bare_hex(token.as_bytes())).map_err(|_| {
        ServiceError::State {
            detail: "a token hash failed its check",
        }
    })?;
    Ok((token, hash))
}

pub(super) fn authorized(headers: &HeaderMap, token: &[u8]) -> bool {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return false;
    };
    let Some(given) = value.as_bytes().strip_prefix(b"Bearer ") else {
        return false;
    };
    // Lengths are not secret (the token's length is fixed); the bytes are compared in constant
    // time.
    given.len() == token.len() && bool::from(given.ct_eq(token))
}
