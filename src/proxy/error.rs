//! Typed errors of the proxy: [`ProxyError`] stops the proxy (startup, a listener that cannot be
//! bound), [`SessionError`] ends one client connection and nothing else.

use std::net::SocketAddr;

use kafka_protocol::messages::ApiKey;

use super::requests::ScanError;
use super::rewrite::RewriteError;
use super::wire::WireError;
use crate::client::ClientError;
use crate::protocol::FrameError;

/// The proxy cannot start or keep running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// A configured listener address cannot be bound.
    #[error("{key}: cannot listen on {addr}")]
    Bind {
        /// The configuration key of the address.
        key: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// No destination broker answered at startup.
    #[error("destination.bootstrap_servers: the destination cluster at {bootstrap} is unreachable")]
    DestinationUnreachable { bootstrap: String, source: ClientError },
    /// The destination refused the proxy's own connection: its credentials (`destination.sasl`) or
    /// the TLS handshake (`destination.tls`).
    #[error("{key}: the destination cluster at {bootstrap} refused the proxy's connection")]
    DestinationRefused {
        /// `destination.sasl` or `destination.tls`.
        key: &'static str,
        bootstrap: String,
        source: Box<ClientError>,
    },
    /// The TLS certificate or key cannot be used.
    #[error("{key}: {reason}")]
    Tls {
        /// `proxy.tls.cert_file`, `proxy.tls.key_file`, or a `destination.tls.*` key.
        key: &'static str,
        reason: String,
    },
    /// The listener of one broker cannot be created (port taken, or out of range).
    #[error("proxy.broker_port_base: no listener for broker {node_id} ({reason})")]
    BrokerListener { node_id: i32, reason: String },
    /// The threads serving client connections cannot be started (`proxy.worker_threads` of them).
    #[error("proxy.worker_threads: cannot start {count} session threads")]
    SessionThreads { count: usize, source: std::io::Error },
}

impl ProxyError {
    /// The configuration key the error is about.
    pub fn key(&self) -> &'static str {
        match self {
            Self::Bind { key, .. } => key,
            Self::DestinationUnreachable { .. } => "destination.bootstrap_servers",
            Self::DestinationRefused { key, .. } => key,
            Self::BrokerListener { .. } => "proxy.broker_port_base",
            Self::Tls { key, .. } => key,
            Self::SessionThreads { .. } => "proxy.worker_threads",
        }
    }
}

/// One client connection failed; only it is closed.
///
/// Who failed: the client ([`SessionError::ClientFrame`], [`SessionError::Malformed`],
/// [`SessionError::UnsupportedVersion`], [`SessionError::ClientWrite`]), the broker
/// ([`SessionError::Upstream*`](SessionError::UpstreamConnect), [`SessionError::CorrelationMismatch`],
/// [`SessionError::Rewrite`] on decode), or the proxy ([`SessionError::Endpoint`],
/// [`SessionError::MirrorCall`]). None is retried by
/// the proxy: the client reconnects, as it would after a broker closed its connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The client's TLS handshake failed or timed out.
    #[error("TLS handshake with the client failed")]
    TlsHandshake(#[source] std::io::Error),
    /// A mirror API request whose header could not be read.
    #[error("malformed mirror API request (correlation id {correlation_id}): {message}")]
    MirrorApi { correlation_id: i32, message: String },
    /// A mirror API call gave no answer: its task failed, or it was cut off at the end of the
    /// shutdown grace period. The proxy's fault, not the client's.
    #[error("mirror API call (correlation id {correlation_id}) gave no answer: {message}")]
    MirrorCall { correlation_id: i32, message: String },
    /// The client's byte stream could not be framed (oversized, negative length, truncated, reset).
    #[error("client framing failed")]
    ClientFrame(#[source] FrameError),
    /// A request's header was unreadable.
    #[error("malformed request header")]
    MalformedHeader(#[source] WireError),
    /// A request the write policy must read did not match its schema.
    #[error("malformed request (correlation id {correlation_id})")]
    Malformed {
        correlation_id: i32,
        #[source]
        source: ScanError,
    },
    /// The client used a version of an API that the proxy must read but cannot.
    #[error("{api_key:?} v{api_version} (correlation id {correlation_id}) is not supported by the proxy")]
    UnsupportedVersion { api_key: ApiKey, api_version: i16, correlation_id: i32 },
    /// No destination broker could be reached for this connection.
    #[error("cannot connect to broker {target} at [{addrs}]")]
    UpstreamConnect {
        target: String,
        addrs: String,
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake with a destination broker failed (`destination.tls`).
    #[error("TLS to broker {addr} failed")]
    UpstreamTls {
        addr: String,
        #[source]
        source: crate::client::ConnectionError,
    },
    /// The broker closed its connection.
    #[error("broker {addr} closed the connection")]
    UpstreamClosed { addr: String },
    /// The broker's byte stream could not be framed.
    #[error("framing of broker {addr}'s responses failed")]
    UpstreamFrame {
        addr: String,
        #[source]
        source: FrameError,
    },
    /// Writing to the broker failed.
    #[error("writing to broker {addr} failed")]
    UpstreamWrite {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// A response did not carry the correlation id of the oldest request in flight.
    #[error("broker {addr} answered correlation id {got}, expected {expected}")]
    CorrelationMismatch { addr: String, expected: i32, got: i32 },
    /// A response could not be rewritten.
    #[error("rewriting a response from {addr} failed")]
    Rewrite {
        addr: String,
        #[source]
        source: RewriteError,
    },
    /// A response names a broker the proxy cannot give a listener.
    #[error("no proxy endpoint for a broker named in a response")]
    Endpoint(#[source] ProxyError),
    /// Writing to the client failed.
    #[error("writing to the client failed")]
    ClientWrite(#[source] std::io::Error),
    /// The session panicked: a bug in the proxy, never the client's fault. Only this connection
    /// closes.
    #[error("the session panicked: {message}")]
    Panicked { message: String },
}

impl SessionError {
    /// True for ordinary closes (peer reset, broken pipe, EOF): logged at debug, not as errors.
    pub fn is_normal_close(&self) -> bool {
        let io_normal = |e: &std::io::Error| {
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
            )
        };
        match self {
            Self::ClientFrame(FrameError::Io(e)) | Self::ClientWrite(e) => io_normal(e),
            Self::UpstreamFrame { source: FrameError::Io(e), .. } | Self::UpstreamWrite { source: e, .. } => io_normal(e),
            Self::UpstreamClosed { .. } => true,
            _ => false,
        }
    }

    /// True if the client sent something the proxy refuses to read.
    pub fn is_client_fault(&self) -> bool {
        matches!(
            self,
            Self::ClientFrame(_)
                | Self::TlsHandshake(_)
                | Self::MalformedHeader(_)
                | Self::Malformed { .. }
                | Self::UnsupportedVersion { .. }
                | Self::MirrorApi { .. }
        )
    }
}
