//! What keeps hostile clients from starving the service: the listener's own accept loop (hyper's
//! HTTP/1.1 connection with a header-read timeout, the client's address in every request), one
//! pool of slots per route class (probes, the unauthenticated UI routes, the rest), and a
//! deadline on reading each request's body.
//!
//! - **Header-read timeout** ([`HEADER_READ_TIMEOUT`]): a connection whose request head is not
//!   complete that long after the server starts waiting for it (a fresh connection, or a
//!   keep-alive one after its last answer) is closed. No slot is held meanwhile.
//! - **Route classes** ([`RouteClass`]): `/healthz` and `/readyz` (probes), the routes anyone may
//!   call without a credential and whose handlers read a body or serve a file before knowing who
//!   calls (`/ui/sign-in`, `/ui/sign-out`, `/ui/csp-report`, `/ui/static/…`, unknown paths), and
//!   everything else (the bearer-token API and the signed-in UI pages, whose handlers check the
//!   credential before reading a body). Each class has its own slots and queue wait, so a flood
//!   of one class cannot take the slots of another.
//! - **Body-read deadline** ([`RouteClass::body_timeout`]): from the moment a request gets its
//!   slot, its whole body must arrive within the class's deadline; past it the body read fails,
//!   the request is answered 408 `PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT` and the connection is
//!   closed.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::ApiError;
use crate::Shared;

/// How long a connection may take to send a complete request head.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Which pool of slots a request takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RouteClass {
    /// `/healthz`, `/readyz`: answered from memory.
    Probe,
    /// Callable without a credential, reading a body or serving a file before knowing who calls:
    /// sign-in, sign-out, CSP reports, the stylesheet, unknown paths.
    Public,
    /// The bearer-token API and the signed-in UI pages: the credential is checked before any
    /// body is read, so a caller without one holds a slot only for that check.
    Api,
}

impl RouteClass {
    /// The class of a request path.
    pub(crate) fn of(path: &str) -> Self {
        match path {
            "/healthz" | "/readyz" => Self::Probe,
            "/metrics" | "/v1/jobs" | "/ui" | "/ui/" | "/ui/jobs" | "/ui/csp-reports" => Self::Api,
            _ if path.starts_with("/v1/jobs/") || path.starts_with("/ui/jobs/") => Self::Api,
            _ => Self::Public,
        }
    }

    /// Requests of the class served at once.
    pub(crate) const fn slots(self) -> usize {
        match self {
            Self::Probe => 16,
            Self::Public => 16,
            Self::Api => 64,
        }
    }

    /// How long a request waits for a slot before `503 PATCH_CANDIDATE_SERVICE_BUSY`.
    pub(crate) const fn queue_wait(self) -> Duration {
        match self {
            Self::Probe | Self::Public => Duration::from_secs(1),
            Self::Api => Duration::from_secs(30),
        }
    }

    /// How long a request of the class may take to send its whole body once it has a slot.
    pub(crate) const fn body_timeout(self) -> Duration {
        match self {
            Self::Probe | Self::Public => Duration::from_secs(10),
            // 5 MiB in 30 s: 170 kB/s, far below any link a client submits from.
            Self::Api => Duration::from_secs(30),
        }
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Probe => "probe",
            Self::Public => "public",
            Self::Api => "api",
        }
    }
}

/// The slots of each class.
pub(crate) struct Slots {
    probe: Semaphore,
    public: Semaphore,
    api: Semaphore,
}

impl Slots {
    pub(crate) fn new() -> Self {
        Self {
            probe: Semaphore::new(RouteClass::Probe.slots()),
            public: Semaphore::new(RouteClass::Public.slots()),
            api: Semaphore::new(RouteClass::Api.slots()),
        }
    }

    fn of(&self, class: RouteClass) -> &Semaphore {
        match class {
            RouteClass::Probe => &self.probe,
            RouteClass::Public => &self.public,
            RouteClass::Api => &self.api,
        }
    }
}

fn busy() -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "PATCH_CANDIDATE_SERVICE_BUSY",
        "PATCH_CANDIDATE_SERVICE_BUSY: too many requests in flight",
    )
    .into_response()
}

fn body_timed_out(class: RouteClass) -> Response {
    let mut response = ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT",
        format!(
            "PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT: the request body did not arrive within {} s",
            class.body_timeout().as_secs()
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Bounded concurrency per route class (waiting up to the class's queue wait), the body-read
/// deadline, and request counting.
pub(crate) async fn limit_and_count(
    State((sh, slots)): State<(Arc<Shared>, Arc<Slots>)>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    let route = super::routing::route_name(path);
    let class = RouteClass::of(path);
    let response = match tokio::time::timeout(class.queue_wait(), slots.of(class).acquire()).await {
        Ok(Ok(_permit)) => {
            let expired = Arc::new(AtomicBool::new(false));
            let request = request.map(|body| {
                Body::new(DeadlineBody {
                    inner: body,
                    deadline: Box::pin(tokio::time::sleep(class.body_timeout())),
                    expired: Arc::clone(&expired),
                })
            });
            let response = next.run(request).await;
            if expired.load(Ordering::SeqCst) {
                tracing::warn!(
                    code = "PATCH_CANDIDATE_SERVICE_BODY_TIMEOUT",
                    route,
                    class = class.name(),
                    "a request body did not arrive in time"
                );
                body_timed_out(class)
            } else {
                response
            }
        }
        _ => busy(),
    };
    sh.metrics.http(route, response.status().as_u16());
    response
}

/// A request body that fails once its deadline passes (and says so in `expired`).
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: Arc<AtomicBool>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::SeqCst);
            return Poll::Ready(Some(Err(axum::Error::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request body did not arrive in time",
            )))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `router` on `listener` until `stop` completes (then stops accepting and asks each open
/// connection to close after the request it is serving). Every connection is HTTP/1.1 with the
/// header-read timeout; every request carries the client's address ([`ConnectInfo`]).
pub(crate) async fn serve_on(
    listener: Arc<TcpListener>,
    router: Router,
    stop: impl Future<Output = ()> + Send,
) {
    let (closing, closing_rx) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            pair = accept(&listener) => pair,
            () = &mut stop => break,
        };
        let router = router.clone();
        let mut closing_rx = closing_rx.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                let mut router = router.clone();
                tower_service::Service::call(&mut router, request)
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = closing_rx.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    let _ = closing.send(true);
}

/// The next connection: a client gone before it was accepted is skipped; out of file
/// descriptors and the like waits a second for some to close.
async fn accept(listener: &TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(pair) => return pair,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => {
                tracing::error!(code = "PATCH_CANDIDATE_SERVICE_LISTEN", kind = ?e.kind(), "accept failed: retrying in 1 s");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_body_routes_are_public_and_probes_their_own() {
        for path in ["/healthz", "/readyz"] {
            assert_eq!(RouteClass::of(path), RouteClass::Probe, "{path}");
        }
        for path in [
            "/ui/sign-in",
            "/ui/sign-out",
            "/ui/csp-report",
            "/ui/static/ui.css",
            "/nowhere",
            "/v1/jobsx",
            "/healthz/",
        ] {
            assert_eq!(RouteClass::of(path), RouteClass::Public, "{path}");
        }
        for path in [
            "/metrics",
            "/v1/jobs",
            "/v1/jobs/job_0/review",
            "/ui/jobs",
            "/ui/jobs/job_0/candidate",
            "/ui/",
            "/ui/csp-reports",
        ] {
            assert_eq!(RouteClass::of(path), RouteClass::Api, "{path}");
        }
    }

    /// A body that never sends anything and never ends.
    struct Stalled;

    impl http_body::Body for Stalled {
        type Data = Bytes;
        type Error = axum::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
            Poll::Pending
        }
    }

    fn deadline(inner: Body, after: Duration) -> (Body, Arc<AtomicBool>) {
        let expired = Arc::new(AtomicBool::new(false));
        let body = Body::new(DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(after)),
            expired: Arc::clone(&expired),
        });
        (body, expired)
    }

    #[tokio::test]
    async fn a_body_past_its_deadline_fails_and_says_so() {
        let (body, expired) = deadline(Body::new(Stalled), Duration::from_millis(200));
        let started = std::time::Instant::now();
        assert!(axum::body::to_bytes(body, 1024).await.is_err());
        assert!(expired.load(Ordering::SeqCst));
        assert!(started.elapsed() < Duration::from_secs(5));
        // A body that is all there is read whole, even with its deadline long gone.
        let (body, expired) = deadline(Body::from("token=x"), Duration::ZERO);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            axum::body::to_bytes(body, 1024).await.unwrap(),
            Bytes::from("token=x")
        );
        assert!(!expired.load(Ordering::SeqCst));
    }
}
