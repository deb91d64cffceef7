//! The API's bearer tokens: the first-start token file, named tokens, the authentication middleware.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
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
/// is the principal `operator`; any other token is looked up by its SHA-256 among the live
/// named tokens of the job store. The principal rides in the request's extensions.
pub(super) async fn require_token(
    State(sh): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    match authenticate(&sh, request.headers()).await {
        Ok(Some(principal)) => {
            request.extensions_mut().insert(Caller(principal));
            next.run(request).await
        }
        Ok(None) => unauthorized().into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The authenticated principal of a request.
#[derive(Clone, Debug)]
pub(crate) struct Caller(pub(crate) review::Principal);

/// The principal of the request's bearer token, `None` when it has none or an unknown or
/// revoked one.
pub(super) async fn authenticate(
    sh: &Shared,
    headers: &HeaderMap,
) -> Result<Option<review::Principal>, jobs::JobsError> {
    if authorized(headers, &sh.token) {
        return Ok(review::Principal::parse(jobs::OPERATOR_PRINCIPAL).ok());
    }
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return Ok(None);
    };
    named_token_principal(sh, given).await
}

/// The principal of a token given in a request (the bearer token, or the UI's sign-in form):
/// the first-start token is `operator`, any other is looked up by its SHA-256 among the live
/// named tokens.
pub(crate) async fn token_principal(
    sh: &Shared,
    given: &[u8],
) -> Result<Option<review::Principal>, jobs::JobsError> {
    if given.len() == sh.token.len() && bool::from(given.ct_eq(&sh.token)) {
        return Ok(review::Principal::parse(jobs::OPERATOR_PRINCIPAL).ok());
    }
    named_token_principal(sh, given).await
}

pub(super) async fn named_token_principal(
    sh: &Shared,
    given: &[u8],
) -> Result<Option<review::Principal>, jobs::JobsError> {
    if !(32..=256).contains(&given.len()) || !given.iter().all(u8::is_ascii_alphanumeric) {
        return Ok(None);
    }
    // The lookup is by hash: equality of SHA-256 digests reveals nothing usable about a token.
    let hash = jobs::TokenHash::parse(&vocab::sha256_bare_hex(given))?;
    let name = sh.store.token_principal(&hash).await?;
    Ok(name.and_then(|n| review::Principal::parse(&n).ok()))
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
