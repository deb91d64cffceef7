//! Sessions of the review UI and their CSRF tokens.
//!
//! A sign-in exchanges the service token for a random session id (256 bits, hex) kept in a
//! cookie; the server keeps, per session, only the principal and the expiry, under the SHA-256
//! of the id (a lookup's timing says nothing about an id). Sessions are bounded in lifetime and
//! in number (the oldest is evicted). A form's CSRF token is
//! HMAC-SHA256(process secret, "patch_candidate.ui_csrf.v1" ‖ session id ‖ candidate digest):
//! bound to the session and to the digest the page showed, compared in constant time. Sign-out's
//! token is the HMAC of the session id under its own domain.
//!
//! Sign-in has no session yet, so its form is bound to a pre-session cookie (double submit): the
//! sign-in page sets a random 256-bit value in a `SameSite=Strict` cookie and puts
//! HMAC-SHA256(secret, "patch_candidate.ui_sign_in.v1" ‖ value) in the form; a sign-in is
//! verified only when both arrive and match. Another site's page can neither send the cookie
//! (`SameSite=Strict`) nor read the token, so it cannot sign anyone in, or fail sign-ins in
//! their name.
//!
//! Failed sign-ins are counted per client address (an IPv6 address by its /64) and over all
//! addresses, in a sliding window. Past either limit a wrong token is answered
//! `PATCH_CANDIDATE_UI_SIGN_IN_LIMIT`, but a token is still verified: the right one always signs
//! in. The limit is not what protects the tokens (they carry at least 128 bits, beyond any
//! online guessing); it changes only the answer (429 with `Retry-After` instead of 401), so a
//! client sees plainly that a flood is under way, without it ever becoming a lockout. Every
//! attempt is still verified and logged. Behind a reverse proxy every client has the proxy's
//! address, so the per-address window acts as the global one.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

use crate::UiError;

/// How long a session lives after sign-in.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// Sessions kept at once (the oldest is evicted past it).
pub const MAX_SESSIONS: usize = 1024;
/// Failed sign-ins allowed from one client address per [`FAILURE_WINDOW`].
pub const MAX_FAILED_SIGN_INS: usize = 10;
/// Failed sign-ins allowed from all addresses together per [`FAILURE_WINDOW`].
pub const MAX_FAILED_SIGN_INS_GLOBAL: usize = 100;
/// Client addresses whose failures are remembered at once (past it, the one whose last failure
/// is oldest is forgotten; the global count still holds every failure).
pub const MAX_TRACKED_ADDRESSES: usize = 4096;
/// The window failed sign-ins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
const CSRF_DOMAIN: &[u8] = b"patch_candidate.ui_csrf.v1\0";
const SIGN_IN_DOMAIN: &[u8] = b"patch_candidate.ui_sign_in.v1\0";
const SIGN_OUT_DOMAIN: &[u8] = b"patch_candidate.ui_sign_out.v1\0";

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
    /// The CSRF token of this session's sign-out form.
    pub sign_out_csrf: String,
}

/// The sign-in form's pair: the pre-session cookie's value and the form's token bound to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignInForm {
    /// The pre-session cookie's value (64 hex digits).
    pub cookie: String,
    /// The form's `csrf` field.
    pub csrf: String,
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
    /// Failed sign-ins per client (oldest first, at most [`MAX_FAILED_SIGN_INS`] each).
    failures: HashMap<IpAddr, VecDeque<Instant>>,
    /// Failed sign-ins of every client (at most [`MAX_FAILED_SIGN_INS_GLOBAL`]).
    global_failures: VecDeque<Instant>,
}

/// The address failures are counted under: IPv4 as is (an IPv4-mapped IPv6 address too), IPv6
/// by its /64 (what one subscriber usually holds).
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !u128::from(u64::MAX),
            )),
        },
    }
}

/// Drops the failures that left the window.
fn expire(failures: &mut VecDeque<Instant>, now: Instant) {
    while failures
        .front()
        .is_some_and(|t| now.duration_since(*t) >= FAILURE_WINDOW)
    {
        failures.pop_front();
    }
}

/// Seconds until the oldest of `failures` leaves the window (at least 1).
fn retry_after(failures: &VecDeque<Instant>, now: Instant) -> u64 {
    let oldest = failures.front().copied().unwrap_or(now);
    FAILURE_WINDOW
        .saturating_sub(now.duration_since(oldest))
        .as_secs()
        .max(1)
}

fn is_hex_id(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
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

    /// Whether wrong tokens from `client` are throttled now: its own failures or everyone's
    /// fill their window. A throttled client's token is still verified (see the module
    /// documentation): this only decides how a wrong one is answered.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_SIGN_IN_LIMIT` with the seconds until a failure leaves the full
    /// window.
    pub fn sign_in_throttled(&self, client: IpAddr) -> Result<(), UiError> {
        let now = Instant::now();
        let key = client_key(client);
        let mut inner = self.lock();
        expire(&mut inner.global_failures, now);
        let mut wait = None;
        if let Some(own) = inner.failures.get_mut(&key) {
            expire(own, now);
            if own.len() >= MAX_FAILED_SIGN_INS {
                wait = Some(retry_after(own, now));
            } else if own.is_empty() {
                inner.failures.remove(&key);
            }
        }
        if wait.is_none() && inner.global_failures.len() >= MAX_FAILED_SIGN_INS_GLOBAL {
            wait = Some(retry_after(&inner.global_failures, now));
        }
        match wait {
            Some(retry_after_s) => Err(UiError::SignInLimit { retry_after_s }),
            None => Ok(()),
        }
    }

    /// Counts one failed sign-in from `client`.
    pub fn sign_in_failed(&self, client: IpAddr) {
        let now = Instant::now();
        let key = client_key(client);
        let mut inner = self.lock();
        inner.global_failures.push_back(now);
        while inner.global_failures.len() > MAX_FAILED_SIGN_INS_GLOBAL {
            inner.global_failures.pop_front();
        }
        if !inner.failures.contains_key(&key) && inner.failures.len() >= MAX_TRACKED_ADDRESSES {
            inner.failures.retain(|_, f| {
                expire(f, now);
                !f.is_empty()
            });
            if inner.failures.len() >= MAX_TRACKED_ADDRESSES {
                let stalest = inner
                    .failures
                    .iter()
                    .min_by_key(|(_, f)| f.back().copied())
                    .map(|(k, _)| *k);
                if let Some(k) = stalest {
                    inner.failures.remove(&k);
                }
            }
        }
        let own = inner.failures.entry(key).or_default();
        own.push_back(now);
        while own.len() > MAX_FAILED_SIGN_INS {
            own.pop_front();
        }
    }

    /// The sign-in form's cookie and token: the pre-session cookie a browser already holds
    /// (when it is well-formed), else a fresh random one.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_RANDOM` when no randomness is available.
    pub fn sign_in_form(&self, cookie: Option<&str>) -> Result<SignInForm, UiError> {
        let cookie = match cookie.filter(|c| is_hex_id(c)) {
            Some(c) => c.to_ascii_lowercase(),
            None => {
                let mut raw = [0_u8; 32];
                getrandom::fill(&mut raw).map_err(|_| UiError::Random)?;
                hex::encode(raw)
            }
        };
        let csrf = hex::encode(hmac(&self.secret, &[SIGN_IN_DOMAIN, cookie.as_bytes()]));
        Ok(SignInForm { cookie, csrf })
    }

    /// Checks a sign-in form's token against its pre-session cookie, in constant time.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_CSRF` when the cookie is missing or malformed or the token does not
    /// match it.
    pub fn check_sign_in_form(&self, cookie: Option<&str>, given: &str) -> Result<(), UiError> {
        let Some(cookie) = cookie.filter(|c| is_hex_id(c)) else {
            return Err(UiError::Csrf);
        };
        let want = hex::encode(hmac(
            &self.secret,
            &[SIGN_IN_DOMAIN, cookie.to_ascii_lowercase().as_bytes()],
        ));
        constant_time_match(&want, given)
    }

    /// Checks a sign-out form's token against `session`, in constant time.
    ///
    /// # Errors
    /// `PATCH_CANDIDATE_UI_CSRF` when it does not match.
    pub fn check_sign_out(&self, session: &Session, given: &str) -> Result<(), UiError> {
        constant_time_match(&self.sign_out_token(&session.id), given)
    }

    fn sign_out_token(&self, id: &str) -> String {
        hex::encode(hmac(&self.secret, &[SIGN_OUT_DOMAIN, id.as_bytes()]))
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
            sign_out_csrf: self.sign_out_token(&id),
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
                sign_out_csrf: self.sign_out_token(id),
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
        constant_time_match(&self.csrf_token(session, digest), given)
    }
}

/// `given == want` in time independent of where they differ (lengths are not secret: every
/// token is 64 hex digits).
fn constant_time_match(want: &str, given: &str) -> Result<(), UiError> {
    if given.len() == want.len() && bool::from(given.as_bytes().ct_eq(want.as_bytes())) {
        Ok(())
    } else {
        Err(UiError::Csrf)
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

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));

    #[test]
    fn failed_sign_ins_throttle_their_own_address_only() {
        let s = Sessions::new().unwrap();
        for _ in 0..MAX_FAILED_SIGN_INS {
            assert!(s.sign_in_throttled(A).is_ok());
            s.sign_in_failed(A);
        }
        let e = s.sign_in_throttled(A).unwrap_err();
        assert_eq!(e.code(), "PATCH_CANDIDATE_UI_SIGN_IN_LIMIT");
        assert!(
            matches!(e, UiError::SignInLimit { retry_after_s } if (1..=60).contains(&retry_after_s))
        );
        assert!(
            s.sign_in_throttled(B).is_ok(),
            "another address is not throttled"
        );
        // An IPv6 client is counted by its /64, and an IPv4-mapped one as IPv4.
        let v6 =
            |last: u16| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 0, 0, 0, last));
        for i in 0..MAX_FAILED_SIGN_INS {
            s.sign_in_failed(v6(u16::try_from(i).unwrap()));
        }
        assert!(s.sign_in_throttled(v6(999)).is_err());
        let mapped = IpAddr::V6(std::net::Ipv4Addr::new(127, 0, 0, 2).to_ipv6_mapped());
        assert!(s.sign_in_throttled(mapped).is_err());
    }

    #[test]
    fn the_global_ceiling_holds_across_addresses() {
        let s = Sessions::new().unwrap();
        for i in 0..MAX_FAILED_SIGN_INS_GLOBAL {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(
                0x0a00_0000_u32 + u32::try_from(i).unwrap(),
            ));
            assert!(s.sign_in_throttled(ip).is_ok(), "{i}");
            s.sign_in_failed(ip);
        }
        assert!(
            s.sign_in_throttled(B).is_err(),
            "every address past the ceiling"
        );
    }

    #[test]
    fn tracked_addresses_are_bounded() {
        let s = Sessions::new().unwrap();
        for i in 0..(MAX_TRACKED_ADDRESSES + 10) {
            s.sign_in_failed(IpAddr::V4(std::net::Ipv4Addr::from(
                0x0b00_0000_u32 + u32::try_from(i).unwrap(),
            )));
        }
        assert!(s.lock().failures.len() <= MAX_TRACKED_ADDRESSES);
    }

    #[test]
    fn sign_in_forms_bind_their_cookie() {
        let s = Sessions::new().unwrap();
        let a = s.sign_in_form(None).unwrap();
        let b = s.sign_in_form(None).unwrap();
        assert_ne!(a.cookie, b.cookie);
        assert!(s.check_sign_in_form(Some(&a.cookie), &a.csrf).is_ok());
        assert!(s.check_sign_in_form(Some(&a.cookie), &b.csrf).is_err());
        assert!(s.check_sign_in_form(None, &a.csrf).is_err());
        assert!(s.check_sign_in_form(Some(&a.cookie), "").is_err());
        assert!(s.check_sign_in_form(Some("../x"), &a.csrf).is_err());
        // A browser that already holds a cookie keeps it (two open sign-in tabs both work).
        assert_eq!(s.sign_in_form(Some(&a.cookie)).unwrap(), a);
        // Another process (another secret) does not accept this one's forms.
        let other = Sessions::new().unwrap();
        assert!(other.check_sign_in_form(Some(&a.cookie), &a.csrf).is_err());
    }

    #[test]
    fn sign_out_tokens_bind_their_session() {
        let s = Sessions::new().unwrap();
        let a = s.create("alice", "h").unwrap();
        let b = s.create("bob", "h").unwrap();
        assert!(s.check_sign_out(&a, &a.sign_out_csrf).is_ok());
        assert!(s.check_sign_out(&a, &b.sign_out_csrf).is_err());
        assert!(s.check_sign_out(&a, "").is_err());
        assert_eq!(s.get(&a.id).unwrap().sign_out_csrf, a.sign_out_csrf);
        // Not interchangeable with a candidate form's token.
        assert!(s.check_sign_out(&a, &s.csrf_token(&a, "")).is_err());
    }
}
