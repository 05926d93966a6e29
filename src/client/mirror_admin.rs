//! The client side of the mirror APIs, for `kafka-mirrors`: one connection to a proxy (or an
//! [`super::AdminServer`]), checked with ApiVersions to serve the mirror APIs, then one request at a
//! time.
//!
//! The connection is the cluster client's [`BrokerConnection`], so TLS and SASL work as for every
//! other connection of ours (`--command-config` with the Java client's property names): through a
//! proxy, the SASL exchange passes to a destination broker, and the proxy answers the mirror APIs for
//! the principal that authenticated.
//!
//! ```text
//!   MirrorAdminClient::connect ─► BrokerConnection::connect (TCP ─► TLS ─► ApiVersions ─► SASL)
//!       └── mirror keys in ApiVersions? ─ no ─► NotAMirrorServer
//!   send(request) ─► send_raw (header v2 + body) ─► response header v1 + body ─► decode
//! ```

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};

use super::{BrokerConnection, ConnectionConfig, ConnectionError, SecurityConfig};
use crate::protocol::mirror::{DecodeError, MirrorApiKey, MirrorRequest, RequestHeader, decode_body, decode_response_header, encode_body, encode_request};

/// Largest response accepted, bytes (a describe of many partitions stays far below).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// The `client.id` of the tool's requests.
const CLIENT_ID: &str = "kafka-mirrors";

/// A mirror admin call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminClientError {
    /// The connection could not be opened (connect, TLS, SASL authentication) or failed later
    /// (closed, timed out). The source says which.
    #[error("connection to {addr} failed")]
    Connection {
        addr: String,
        #[source]
        source: ConnectionError,
    },
    /// No bootstrap server was given.
    #[error("no host:port given in `{bootstrap}`")]
    NoBootstrap { bootstrap: String },
    /// The server does not serve the mirror APIs (a broker rather than a kafka-mirror-proxy?).
    #[error("{addr} does not serve the mirror APIs (is it a kafka-mirror-proxy? a Kafka broker does not serve them)")]
    NotAMirrorServer { addr: String },
    /// The server does not serve this version of an api.
    #[error("{addr} does not serve {api} v{version}")]
    UnsupportedVersion { addr: String, api: MirrorApiKey, version: i16 },
    /// The response does not decode.
    #[error("{api} response from {addr} does not decode")]
    Decode {
        addr: String,
        api: String,
        #[source]
        source: DecodeError,
    },
}

/// A connection to a server of the mirror APIs.
#[derive(Debug)]
pub struct MirrorAdminClient {
    conn: BrokerConnection,
}

impl MirrorAdminClient {
    /// Connects in plaintext; see [`MirrorAdminClient::connect_with`].
    ///
    /// # Errors
    /// As [`MirrorAdminClient::connect_with`].
    pub async fn connect(bootstrap: &str, timeout: Duration) -> Result<Self, AdminClientError> {
        Self::connect_with(bootstrap, timeout, SecurityConfig::default()).await
    }

    /// Connects to the first server of `bootstrap` (comma-separated `host:port`) that answers, with
    /// `security` (TLS and SASL as the Java client's properties say), and checks that it serves the
    /// mirror APIs. `timeout` bounds each connect and each call.
    ///
    /// # Errors
    /// [`AdminClientError::Connection`] if none answers (the last failure), at once for a TLS or
    /// authentication failure; [`AdminClientError::NotAMirrorServer`].
    pub async fn connect_with(bootstrap: &str, timeout: Duration, security: SecurityConfig) -> Result<Self, AdminClientError> {
        let config = ConnectionConfig {
            client_id: CLIENT_ID.to_owned(),
            max_frame_bytes: MAX_RESPONSE_BYTES,
            request_timeout: timeout,
            connect_timeout: timeout,
            max_in_flight: 1,
            security,
            ..ConnectionConfig::default()
        };
        let mut last = None;
        for addr in bootstrap.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let conn = match BrokerConnection::connect(addr, config.clone()).await {
                Ok(conn) => conn,
                Err(source) if source.is_security_failure() => return Err(AdminClientError::Connection { addr: addr.to_owned(), source }),
                // A server that does not speak ApiVersions v3 closes or answers with an error: not a mirror server.
                Err(ConnectionError::Handshake { .. } | ConnectionError::Decode { .. }) => {
                    return Err(AdminClientError::NotAMirrorServer { addr: addr.to_owned() });
                }
                Err(ConnectionError::Poisoned { ref source, .. }) if matches!(**source, ConnectionError::Closed { .. }) => {
                    return Err(AdminClientError::NotAMirrorServer { addr: addr.to_owned() });
                }
                Err(source) => {
                    last = Some(AdminClientError::Connection { addr: addr.to_owned(), source });
                    continue;
                }
            };
            if !MirrorApiKey::ALL.iter().all(|k| conn.versions().range_of(k.key()).is_some()) {
                return Err(AdminClientError::NotAMirrorServer { addr: addr.to_owned() });
            }
            return Ok(Self { conn });
        }
        Err(last.unwrap_or_else(|| AdminClientError::NoBootstrap { bootstrap: bootstrap.to_owned() }))
    }

    /// The server this client is connected to.
    pub fn addr(&self) -> &str {
        self.conn.addr()
    }

    /// Sends `request` at the highest version both sides serve and returns the response.
    ///
    /// # Errors
    /// Transport failures, timeouts, undecodable responses, unsupported versions.
    pub async fn send<R: MirrorRequest>(&mut self, request: &R) -> Result<R::Response, AdminClientError> {
        let api = R::API_KEY;
        let addr = self.conn.addr().to_owned();
        let (_, ours) = api.versions();
        let version = match self.conn.versions().range_of(api.key()) {
            Some(theirs) if theirs.min <= ours => ours.min(theirs.max),
            _ => return Err(AdminClientError::UnsupportedVersion { addr, api, version: ours }),
        };
        let decode_error = |source| AdminClientError::Decode { addr: addr.clone(), api: api.name().to_owned(), source };
        let body = encode_body(api, version, request).map_err(decode_error)?;
        let mut sent_id = 0;
        let response = self
            .conn
            .send_raw(api.key(), version, |correlation_id| {
                sent_id = correlation_id;
                let header = RequestHeader { api_key: api.key(), api_version: version, correlation_id, client_id: Some(CLIENT_ID.to_owned()) };
                length_prefixed(&encode_request(&header, &body))
            })
            .await
            .map_err(|source| AdminClientError::Connection { addr: addr.clone(), source })?;
        let (got, body) = decode_response_header(&response).map_err(decode_error)?;
        if got != sent_id {
            return Err(decode_error(DecodeError::InvalidValue { field: "correlation_id", value: i64::from(got) }));
        }
        decode_body(api, version, &body).map_err(decode_error)
    }
}

/// `frame` with its i32 length in front. Mirror requests are far below 2 GiB (a few names and settings).
fn length_prefixed(frame: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(frame.len() + 4);
    out.put_i32(i32::try_from(frame.len()).expect("invariant: a mirror request is far smaller than 2 GiB"));
    out.put_slice(frame);
    out.freeze()
}
