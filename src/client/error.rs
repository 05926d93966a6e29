//! Typed errors of the client layer, with the target that failed and whether a retry is safe.
//!
//! Two layers: [`ConnectionError`] for one socket (framing, timeouts, a poisoned stream), and
//! [`ClientError`] for a cluster-level call (which broker, which api, which partition). Broker error
//! codes stay typed ([`ErrorCode`]) and are never classified by their message.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

use crate::protocol::{ErrorCode, FrameError};

/// One broker connection failed, or one request on it did.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// TCP connect failed.
    #[error("cannot connect to {addr}")]
    Connect { addr: String, source: std::io::Error },
    /// TCP connect did not complete in time.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout { addr: String, timeout: Duration },
    /// The byte stream could not be framed (oversized, negative, truncated frame or socket error).
    #[error("framing failed on the connection to {addr}")]
    Frame { addr: String, source: FrameError },
    /// The peer closed the connection.
    #[error("{addr} closed the connection")]
    Closed { addr: String },
    /// No response arrived within the request timeout. The request may or may not have been applied.
    #[error("{api_key:?} v{api_version} (correlation id {correlation_id}) to {addr} timed out after {timeout:?}")]
    Timeout { addr: String, api_key: ApiKey, api_version: i16, correlation_id: i32, timeout: Duration },
    /// No response arrived within the request timeout for a request of an API without a known
    /// [`ApiKey`] (the mirror APIs, sent with `send_raw`).
    #[error("api key {api_key} v{api_version} (correlation id {correlation_id}) to {addr} timed out after {timeout:?}")]
    RawTimeout { addr: String, api_key: i16, api_version: i16, correlation_id: i32, timeout: Duration },
    /// A request could not be encoded (a bug, or a field that does not exist in the chosen version).
    #[error("cannot encode {api_key:?} v{api_version}: {message}")]
    Encode { api_key: ApiKey, api_version: i16, message: String },
    /// A response could not be decoded, or had bytes left over.
    #[error("cannot decode the {api_key:?} v{api_version} response from {addr}: {message}")]
    Decode { addr: String, api_key: ApiKey, api_version: i16, message: String },
    /// A response carried a correlation id that no request is waiting for and that was never issued.
    #[error("{addr} sent a response with unexpected correlation id {correlation_id}")]
    UnexpectedCorrelationId { addr: String, correlation_id: i32 },
    /// Neither side supports a common (or the pinned) version of an API.
    #[error("{api_key:?}: no usable version with {addr} (broker {broker}, ours {ours}, pinned {pinned:?})")]
    UnsupportedVersion { addr: String, api_key: ApiKey, broker: String, ours: VersionRange, pinned: Option<i16> },
    /// The ApiVersions handshake failed with a broker error code.
    #[error("ApiVersions to {addr} failed: {code}")]
    Handshake { addr: String, code: ErrorCode },
    /// The connection failed earlier; every request on it fails with the first cause.
    #[error("connection to {addr} is broken")]
    Poisoned { addr: String, source: Arc<ConnectionError> },
    /// The security settings cannot be used (a PEM file unreadable or without a certificate, SASL
    /// without credentials). Not retriable: the configuration must change.
    #[error("invalid client setting `{key}`: {message}")]
    SecurityConfig { key: String, message: String },
    /// The TLS handshake failed: an untrusted certificate, a host name the certificate does not
    /// name, a peer that does not speak TLS. Retriable only when the socket failed underneath.
    #[error("TLS handshake with {addr} failed")]
    Tls { addr: String, source: std::io::Error },
    /// SASL authentication failed: the broker's error code and message (for bad credentials, e.g.
    /// "Authentication failed during authentication due to invalid credentials with SASL mechanism
    /// SCRAM-SHA-256"), or a server that broke the mechanism. Never retried.
    #[error("SASL {mechanism} authentication to {addr} failed{}: {message}", code.map(|c| format!(" with {c}")).unwrap_or_default())]
    Authentication {
        addr: String,
        mechanism: &'static str,
        /// The broker's error code (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
        /// ILLEGAL_SASL_STATE), `None` if our side refused the server's messages.
        code: Option<ErrorCode>,
        /// The broker's `error_message`, or what was wrong with its messages.
        message: String,
    },
}

impl ConnectionError {
    /// True if a request that failed with this error may have been applied by the broker: it was
    /// (possibly) written to the socket and no response was read.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Self::Timeout { .. } | Self::RawTimeout { .. } | Self::Closed { .. } | Self::Frame { .. } | Self::Decode { .. } => true,
            Self::Poisoned { source, .. } => source.is_ambiguous(),
            _ => false,
        }
    }

    /// True if reconnecting and sending again can succeed (the cause is transport, not our request).
    pub fn is_transport(&self) -> bool {
        match self {
            Self::Frame { source: FrameError::Io(e), .. } if super::tls::is_certificate_refusal(e) => false,
            Self::Connect { .. } | Self::ConnectTimeout { .. } | Self::Frame { .. } | Self::Closed { .. } | Self::Timeout { .. } | Self::RawTimeout { .. } => {
                true
            }
            Self::Tls { source, .. } => !super::tls::is_tls_failure(source),
            Self::Poisoned { source, .. } => source.is_transport(),
            _ => false,
        }
    }

    /// True if the connection was refused for security reasons that retrying cannot fix: bad
    /// credentials, an untrusted or misnamed certificate, unusable security settings. Callers stop
    /// retrying and report it.
    pub fn is_security_failure(&self) -> bool {
        match self {
            Self::Authentication { .. } | Self::SecurityConfig { .. } => true,
            Self::Tls { source, .. } => super::tls::is_tls_failure(source),
            Self::Frame { source: FrameError::Io(e), .. } => super::tls::is_certificate_refusal(e),
            Self::Poisoned { source, .. } => source.is_security_failure(),
            _ => false,
        }
    }
}

/// What a call was about, for error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// The broker the request went to, if it was chosen.
    pub broker: Option<i32>,
    /// Topic of a partition-level error.
    pub topic: Option<String>,
    /// Partition of a partition-level error.
    pub partition: Option<i32>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        if let Some(b) = self.broker {
            write!(f, "broker {b}")?;
            sep = ", ";
        }
        match (&self.topic, self.partition) {
            (Some(t), Some(p)) => write!(f, "{sep}{t}-{p}"),
            (Some(t), None) => write!(f, "{sep}topic {t}"),
            _ => Ok(()),
        }
    }
}

/// A cluster-level call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The transport to a broker failed.
    #[error("{api_key:?} to broker {broker} failed")]
    Connection {
        broker: i32,
        api_key: ApiKey,
        #[source]
        source: ConnectionError,
    },
    /// The broker answered with an error code (top level or for one partition).
    #[error("{api_key:?} ({target}) failed with {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker { api_key: ApiKey, target: Target, code: ErrorCode, message: Option<String> },
    /// None of the bootstrap servers answered.
    #[error("no bootstrap server of [{bootstrap}] answered")]
    Bootstrap {
        bootstrap: String,
        #[source]
        source: ConnectionError,
    },
    /// Metadata names no leader for the partition (or the topic/partition does not exist).
    #[error("no leader known for {topic}-{partition}")]
    NoLeader { topic: String, partition: i32 },
    /// Metadata names a broker id with no known address.
    #[error("broker {broker} is not in the cluster metadata")]
    UnknownBroker { broker: i32 },
    /// A response lacked an entry the request asked for.
    #[error("{api_key:?} response has no entry for {target}")]
    MissingInResponse { api_key: ApiKey, target: Target },
    /// Retries ran out; the last error is the source.
    #[error("gave up after {attempts} attempts over {elapsed:?}")]
    RetriesExhausted {
        attempts: u32,
        elapsed: Duration,
        #[source]
        source: Box<ClientError>,
    },
    /// A configuration value is wrong.
    #[error("invalid client setting `{key}`: {message}")]
    Config { key: String, message: String },
}

impl ClientError {
    /// The security failure behind this error (see [`ConnectionError::is_security_failure`]), if any.
    pub fn security_failure(&self) -> Option<&ConnectionError> {
        match self {
            Self::Connection { source, .. } | Self::Bootstrap { source, .. } if source.is_security_failure() => Some(source),
            Self::RetriesExhausted { source, .. } => source.security_failure(),
            _ => None,
        }
    }

    /// The broker error code, if this is a broker error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Broker { code, .. } => Some(*code),
            Self::RetriesExhausted { source, .. } => source.code(),
            _ => None,
        }
    }

    /// True if a write that failed this way may nevertheless have been applied: the caller must
    /// reconcile (read the destination back) before writing again.
    pub fn is_ambiguous(&self) -> bool {
        match self {
            Self::Connection { source, .. } => source.is_ambiguous(),
            Self::Broker { code, .. } => is_ambiguous_write_code(*code),
            Self::RetriesExhausted { source, .. } => source.is_ambiguous(),
            _ => false,
        }
    }

    /// True if the same request may succeed later (after a metadata refresh or reconnect).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Connection { source, .. } => source.is_transport(),
            Self::Broker { code, .. } => code.is_retriable(),
            Self::Bootstrap { source, .. } => !source.is_security_failure(),
            Self::NoLeader { .. } | Self::UnknownBroker { .. } => true,
            _ => false,
        }
    }

    /// True if the cached metadata is probably stale (leader moved, broker gone).
    pub fn needs_metadata_refresh(&self) -> bool {
        match self {
            Self::Connection { .. } | Self::NoLeader { .. } | Self::UnknownBroker { .. } => true,
            Self::Broker { code, .. } => matches!(
                code,
                ErrorCode::NotLeaderOrFollower
                    | ErrorCode::LeaderNotAvailable
                    | ErrorCode::UnknownTopicOrPartition
                    | ErrorCode::FencedLeaderEpoch
                    | ErrorCode::UnknownLeaderEpoch
                    | ErrorCode::ReplicaNotAvailable
                    | ErrorCode::NotController
                    | ErrorCode::UnknownTopicId
                    | ErrorCode::InconsistentTopicId
            ),
            Self::RetriesExhausted { source, .. } => source.needs_metadata_refresh(),
            _ => false,
        }
    }
}

/// Error codes after which a Produce or WriteTxnMarkers with acks=all may have been appended on the
/// leader (and may survive on a new leader): the write timed out or lost leadership while waiting for
/// replication. Every other code is returned before the append.
fn is_ambiguous_write_code(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::RequestTimedOut
            | ErrorCode::NotLeaderOrFollower
            | ErrorCode::NotEnoughReplicasAfterAppend
            | ErrorCode::NetworkException
            | ErrorCode::UnknownServerError
    )
}
