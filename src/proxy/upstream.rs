//! Connections from the proxy to destination brokers: one per client connection.
//!
//! A broker listener's sessions connect to that broker's current address (from the registry); a
//! bootstrap session connects to any broker, trying the known brokers from a rotating start and then
//! the configured bootstrap servers. Each attempt is bounded by `destination.connect_timeout_ms`.

use std::sync::Arc;

use tokio::net::TcpStream;

use super::error::SessionError;
use super::listener::Target;
use super::metrics::inc;
use super::server::Shared;

/// Connects to the broker behind `target`; returns the stream and the address used.
///
/// # Errors
/// [`SessionError::UpstreamConnect`] with the last failure if no candidate answered.
pub(crate) async fn connect(shared: &Arc<Shared>, target: Target) -> Result<(TcpStream, String), SessionError> {
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
                let _ = stream.set_nodelay(true);
                return Ok((stream, addr.clone()));
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        }
        inc(&shared.metrics.upstream_connect_failures);
    }
    Err(SessionError::UpstreamConnect { target: target.to_string(), addrs: candidates.join(","), source: last })
}
