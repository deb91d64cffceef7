//! The worker's one outbound HTTPS client, used by the model gateway (its upstream) and by
//! publish (a forge's REST API): hyper's pooled HTTP/1.1 client over rustls with the ring
//! provider, the safe default protocol versions and the webpki root set, no client
//! authentication. The connector also speaks plain http: each caller accepts an `http://` URL for
//! a loopback host only, and checks that itself before a request is built.
//!
//! A leaf crate so that publish shares the TLS set-up without depending on the credential-holding
//! gateway, and neither pulls in the other's dependencies.
//!
//! The one failure, a TLS configuration rustls refuses, comes back as [`rustls::Error`]: each
//! caller maps it into its own error and code, so this crate adds no code of its own.
#![forbid(unsafe_code)]

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The client: request bodies are whole buffers.
pub type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// How the client's TCP connections are set up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientOptions {
    /// `TCP_NODELAY` on every connection (off by default, as in hyper's connector).
    pub tcp_nodelay: bool,
}

impl ClientOptions {
    /// The options with `TCP_NODELAY` set as given.
    #[must_use]
    pub fn with_tcp_nodelay(mut self, on: bool) -> Self {
        self.tcp_nodelay = on;
        self
    }
}

/// Builds the pooled HTTP/1.1 client: https through rustls (ring, webpki roots), plain http for
/// the callers' loopback URLs.
///
/// # Errors
/// The [`rustls::Error`] of a protocol set-up the ring provider cannot serve.
///
/// # Security
/// Server certificates are checked against the webpki root set only (no system store, no
/// client certificate); the callers refuse plain http to any host but a loopback one.
pub fn client(options: ClientOptions) -> Result<HttpsClient, rustls::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(options.tcp_nodelay);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}
