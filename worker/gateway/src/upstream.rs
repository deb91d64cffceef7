//! The upstream client: hyper's pooled HTTP/1.1 client over rustls (ring provider, webpki roots).
//! Plain http is accepted only for loopback upstreams (test and benchmark servers).
//!
//! # Name resolution
//! Host names are resolved by hyper-util's resolver, i.e. `getaddrinfo` on a blocking thread. The
//! worker binary links glibc statically, where `getaddrinfo` for a name may need NSS modules of
//! the running system's glibc version; an IP literal (or a loopback address) needs none. Operators
//! running the static binary point `--upstream` at an address, or at a name the host resolves
//! through `/etc/hosts`.

use std::net::IpAddr;

use https_client::ClientOptions;

use crate::error::GatewaySetupError;

/// The client type.
pub(crate) type HttpClient = https_client::HttpsClient;

/// A validated upstream base URL, e.g. `https://api.openai.com/v1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamUrl {
    base: String,
}

impl UpstreamUrl {
    /// The URL for `path` below the base.
    #[must_use]
    pub fn join(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    /// The base, as given less any final slash.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.base
    }
}

impl std::str::FromStr for UpstreamUrl {
    type Err = GatewaySetupError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |reason| GatewaySetupError::UpstreamUrl { reason };
        let uri: http::Uri = s
            .parse()
            .map_err(|_| bad("the upstream is not a valid URL"))?;
        let authority = uri.authority().ok_or(bad("the upstream URL has no host"))?;
        if authority.as_str().contains('@') {
            return Err(bad("the upstream URL may not carry credentials"));
        }
        if uri.query().is_some() || s.contains('#') {
            return Err(bad("the upstream URL may not carry a query or fragment"));
        }
        match uri.scheme_str() {
            Some("https") => {}
            Some("http") => {
                let host = authority
                    .host()
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let loopback =
                    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
                if !loopback {
                    return Err(bad("plain http is accepted for loopback upstreams only"));
                }
            }
            _ => return Err(bad("the upstream URL must be http or https")),
        }
        let base = s.trim_end_matches('/').to_owned();
        Ok(Self { base })
    }
}

/// Builds the pooled client (`TCP_NODELAY` on: a streamed answer's small frames go out at once).
pub(crate) fn client() -> Result<HttpClient, GatewaySetupError> {
    https_client::client(ClientOptions::default().with_tcp_nodelay(true))
        .map_err(|_| GatewaySetupError::Tls)
}
