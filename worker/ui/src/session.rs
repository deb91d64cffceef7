//! Sessions of the review UI and their CSRF tokens.
//!
//! A sign-in exchanges the service token for a random session id (256 bits, hex) kept in a
//! cookie; the server keeps, per session, only the principal and the expiry, under the SHA-256
//! of the id (a lookup's timing says nothing about an id). Sessions are bounded in lifetime and
//! in number (the oldest is evicted). A form's CSRF token is
//! HMAC-SHA256(process secret, "patch_candidate.ui_csrf.v1" ‖ session id ‖ candidate digest):
//! bound to the session and to the digest the page showed, compared in constant time. Failed
//! sign-ins are counted in a sliding window; past the limit every sign-in is refused until the
//! window moves on.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::UiError;

/// How long a session lives after sign-in.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// Sessions kept at once (the oldest is evicted past it).
pub const MAX_SESSIONS: usize = 1024;
/// Failed sign-ins allowed per [`FAILURE_WINDOW`].
pub const MAX_FAILED_SIGN_INS: usize = 10;
/// The window failed sign-ins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
const CSRF_DOMAIN: &[u8] = b"patch_candidate.ui_csrf.v1\0";

/// A signed-in session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The session id (the cookie's value).
    pub id: String,
    /// Who signed in (the principal decisions record).
    pub principal: String,
    /// The SHA-256 (bare hex) of the token signed in with, so a revoked token ends its
    /// sessions.
    pub credential: String,
}

#[derive(Debug)]
struct Entry {
    principal: String,
    credential: String,
    created: Instant,
    expires: Instant,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<[u8; 32], Entry>,
    failures: VecDeque<Instant>,
}

/// The session table and the CSRF secret of one process.
pub struct Sessions {
    secret: [u8; 32],
    lifetime: Duration,
    max: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// HMAC-SHA256 (RFC 2104) of `parts` concatenated.
fn hmac(secret: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    let mut ipad = [0x36_u8; 64];
    let mut opad = [0x5c_u8; 64];
    for (i, b) in secret.iter().enumerate() {
        if let (Some(x), Some(y)) = (ipad.get_mut(i), opad.get_mut(i)) {
            *x ^= b;
            *y ^= b;
        }
    }
    let mut inner = Sha256::new();
    inner.update(ipad);
    for p in parts {
        inner.update(p);
    }
    let mut outer = Sha256::new();
    outer.update(opad);
    outer.update(inner.finalize());
    outer.finalize().into()
}

impl Sessions {
    /// A fresh table with a random secret.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_RANDOM` when no randomness is available.
    pub fn new() -> Result<Self, UiError> {
        Self::with_limits(SESSION_LIFETIME, MAX_SESSIONS)
    }

    /// [`Self::new`] with another lifetime and size (tests).
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_RANDOM` when no randomness is available.
    pub fn with_limits(lifetime: Duration, max: usize) -> Result<Self, UiError> {
        let mut secret = [0_u8; 32];
        getrandom::fill(&mut secret).map_err(|_| UiError::Random)?;
        Ok(Self {
            secret,
            lifetime,
            max: max.max(1),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent map (every update is one call).
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Refuses a sign-in attempt while the failure window is full.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_SIGN_IN_LIMIT` with the seconds until the oldest failure leaves it.
    pub fn sign_in_allowed(&self) -> Result<(), UiError> {
        let now = Instant::now();
        let mut inner = self.lock();
        while inner
            .failures
            .front()
            .is_some_and(|t| now.duration_since(*t) >= FAILURE_WINDOW)
        {
            inner.failures.pop_front();
        }
        if inner.failures.len() >= MAX_FAILED_SIGN_INS {
            let oldest = inner.failures.front().copied().unwrap_or(now);
            let wait = FAILURE_WINDOW.saturating_sub(now.duration_since(oldest));
            return Err(UiError::SignInLimit {
                retry_after_s: wait.as_secs().max(1),
            });
        }
        Ok(())
    }

    /// Counts one failed sign-in.
    pub fn sign_in_failed(&self) {
        let mut inner = self.lock();
        inner.failures.push_back(Instant::now());
        while inner.failures.len() > MAX_FAILED_SIGN_INS {
            inner.failures.pop_front();
        }
    }

    /// A new session for `principal`, signed in with the token whose hash is `credential`.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_RANDOM` when no randomness is available.
    pub fn create(&self, principal: &str, credential: &str) -> Result<Session, UiError> {
        let mut raw = [0_u8; 32];
        getrandom::fill(&mut raw).map_err(|_| UiError::Random)?;
        let id = hex::encode(raw);
        let now = Instant::now();
        let mut inner = self.lock();
        inner.sessions.retain(|_, e| e.expires > now);
        while inner.sessions.len() >= self.max {
            let oldest = inner
                .sessions
                .iter()
                .min_by_key(|(_, e)| e.created)
                .map(|(k, _)| *k);
            match oldest {
                Some(k) => inner.sessions.remove(&k),
                None => break,
            };
        }
        inner.sessions.insert(
            key(&id),
            Entry {
                principal: principal.to_owned(),
                credential: credential.to_owned(),
                created: now,
                expires: now + self.lifetime,
            },
        );
        Ok(Session {
            id,
            principal: principal.to_owned(),
            credential: credential.to_owned(),
        })
    }

    /// The live session of a cookie value, if any.
    #[must_use]
    pub fn get(&self, id: &str) -> Option<Session> {
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let now = Instant::now();
        let mut inner = self.lock();
        let k = key(id);
        match inner.sessions.get(&k) {
            Some(e) if e.expires > now => Some(Session {
                id: id.to_owned(),
                principal: e.principal.clone(),
                credential: e.credential.clone(),
            }),
            Some(_) => {
                inner.sessions.remove(&k);
                None
            }
            None => None,
        }
    }

    /// Ends a session (sign-out).
    pub fn remove(&self, id: &str) {
        self.lock().sessions.remove(&key(id));
    }

    /// Ends every session of `principal` (a revoked token's sessions).
    pub fn remove_principal(&self, principal: &str) {
        self.lock().sessions.retain(|_, e| e.principal != principal);
    }

    /// The CSRF token of forms about `digest` in `session`.
    #[must_use]
    pub fn csrf_token(&self, session: &Session, digest: &str) -> String {
        hex::encode(hmac(
            &self.secret,
            &[CSRF_DOMAIN, session.id.as_bytes(), b"\0", digest.as_bytes()],
        ))
    }

    /// Checks a form's CSRF token against `session` and `digest`, in constant time.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_CSRF` when it does not match.
    pub fn check_csrf(&self, session: &Session, digest: &str, given: &str) -> Result<(), UiError> {
        let want = self.csrf_token(session, digest);
        if given.len() == want.len() && bool::from(given.as_bytes().ct_eq(want.as_bytes())) {
            Ok(())
        } else {
            Err(UiError::Csrf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_an_independent_implementation() {
        // HMAC-SHA256(k = 32 × 0x0b, m = "Hi There"), as Python's hmac module computes it.
        let key = [0x0b_u8; 32];
        assert_eq!(
            hex::encode(hmac(&key, &[b"Hi ", b"There"])),
            "198a607eb44bfbc69903a0f1cf2bbdc5ba0aa3f3d9ae3c1c7a3b1696a0b68cf7"
        );
    }

    #[test]
    fn csrf_tokens_bind_session_and_digest() {
        let s = Sessions::new().unwrap();
        let a = s.create("alice", "h").unwrap();
        let b = s.create("bob", "h").unwrap();
        let t = s.csrf_token(&a, "sha256:aa");
        assert!(s.check_csrf(&a, "sha256:aa", &t).is_ok());
        assert!(s.check_csrf(&b, "sha256:aa", &t).is_err());
        assert!(s.check_csrf(&a, "sha256:bb", &t).is_err());
        assert!(s.check_csrf(&a, "sha256:aa", "").is_err());
        assert_eq!(s.get(&a.id), Some(a.clone()));
        s.remove(&a.id);
        assert_eq!(s.get(&a.id), None);
        assert_eq!(s.get("../x"), None);
    }

    #[test]
    fn sessions_are_bounded_in_number_and_time() {
        let s = Sessions::with_limits(Duration::from_secs(3600), 2).unwrap();
        let first = s.create("a", "h").unwrap();
        let _ = s.create("b", "h").unwrap();
        let third = s.create("c", "h").unwrap();
        assert_eq!(s.get(&first.id), None);
        assert!(s.get(&third.id).is_some());
        let short = Sessions::with_limits(Duration::ZERO, 2).unwrap();
        let gone = short.create("a", "h").unwrap();
        assert_eq!(short.get(&gone.id), None);
    }

    #[test]
    fn failed_sign_ins_are_bounded() {
        let s = Sessions::new().unwrap();
        for _ in 0..MAX_FAILED_SIGN_INS {
            assert!(s.sign_in_allowed().is_ok());
            s.sign_in_failed();
        }
        assert_eq!(
            s.sign_in_allowed().unwrap_err().code(),
            "PATCH_CANDIDATE_UI_SIGN_IN_LIMIT"
        );
    }
}
