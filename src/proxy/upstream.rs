//! Connections from the proxy to destination brokers: one per client connection.
//!
//! A broker listener's sessions connect to that broker's current address (from the registry); a
//! bootstrap session connects to any broker, trying the known brokers from a rotating start and then
//! the configured bootstrap servers. Each attempt is bounded by `destination.connect_timeout_ms`.
//!
//! With `destination.tls`, the proxy runs the TLS handshake itself after the TCP connect (the
//! certificate is checked against `destination.tls.ca_file` and, unless `verify_hostname` is false,
//! against the broker's host), whether or not the client used TLS to the proxy. No SASL happens here:
//! the client's own SaslHandshake and SaslAuthenticate pass through to the broker on this connection.

use std::sync::Arc;

use tokio::net::TcpStream;

use crate::client::MaybeTlsStream;

use super::error::SessionError;
use super::listener::Target;
use super::metrics::inc;
use super::server::Shared;

/// Connects to the broker behind `target`; returns the stream (TLS with `destination.tls`) and the
/// address used.
///
/// # Errors
/// [`SessionError::UpstreamConnect`] with the last failure if no candidate answered;
/// [`SessionError::UpstreamTls`] at once if a TLS handshake fails (the certificates are the same for
/// every broker, so trying the next one would not help).
pub(crate) async fn connect(shared: &Arc<Shared>, target: Target) -> Result<(MaybeTlsStream, String), SessionError> {
    let candidates = match target {
        Target::Broker(id) => shared.registry.upstream_of(id).into_iter().collect(),
        Target::Bootstrap => {
            let mut c = shared.registry.bootstrap_candidates();
            c.extend(shared.settings.bootstrap_servers.iter().cloned());
            c
        }
    };
    let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "the broker is not in the cluster metadata");
    for addr in &candidates {
        match tokio::time::timeout(shared.settings.connect_timeout, TcpStream::connect(addr.as_str())).await {
            Ok(Ok(stream)) => {
                super::sockopt::tune(&stream, shared.settings.tcp_congestion_control.as_deref());
                let Some(tls) = &shared.upstream_tls else {
                    return Ok((MaybeTlsStream::Plain(stream), addr.clone()));
                };
                match tls.connect(addr, stream, shared.settings.connect_timeout).await {
                    Ok(stream) => return Ok((MaybeTlsStream::Tls(Box::new(stream)), addr.clone())),
                    Err(source) => {
                        inc(&shared.metrics.upstream_connect_failures);
                        return Err(SessionError::UpstreamTls { addr: addr.clone(), source });
                    }
                }
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        }
        inc(&shared.metrics.upstream_connect_failures);
    }
    Err(SessionError::UpstreamConnect { target: target.to_string(), addrs: candidates.join(","), source: last })
}
