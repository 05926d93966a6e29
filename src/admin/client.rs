//! The client side of the mirror APIs, for `kafka-mirrors`: one connection to a proxy (or an
//! [`super::AdminServer`]), checked with ApiVersions to serve the mirror APIs, then one request at a
//! time.
//!
//! Plaintext only, as the rest of our client today (see `client::security`).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::FramedRead;

use crate::protocol::mirror::{
    DecodeError, MirrorApiKey, MirrorRequest, RequestHeader, decode_body, decode_response_header, encode_body, encode_request,
};
use crate::protocol::{FrameDecoder, FrameError, encode_frame};

/// Largest response accepted, bytes (a describe of many partitions stays far below).
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
const API_VERSIONS_VERSION: i16 = 3;

/// A mirror admin call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminClientError {
    /// No bootstrap server could be connected to.
    #[error("cannot connect to {addr}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    /// The server does not serve the mirror APIs (a broker rather than a kafka-mirror-proxy?).
    #[error("{addr} does not serve the mirror APIs (is it a kafka-mirror-proxy? a Kafka broker does not serve them)")]
    NotAMirrorServer { addr: String },
    /// The server does not serve this version of an api.
    #[error("{addr} does not serve {api} v{version}")]
    UnsupportedVersion { addr: String, api: MirrorApiKey, version: i16 },
    /// The connection failed.
    #[error("connection to {addr} failed")]
    Frame {
        addr: String,
        #[source]
        source: FrameError,
    },
    /// The server closed the connection.
    #[error("{addr} closed the connection")]
    Closed { addr: String },
    /// No response in time.
    #[error("{api} to {addr}: no response within {timeout:?}")]
    Timeout { addr: String, api: String, timeout: Duration },
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
    addr: String,
    reader: FramedRead<OwnedReadHalf, FrameDecoder>,
    writer: OwnedWriteHalf,
    next_correlation_id: i32,
    timeout: Duration,
    versions: Vec<(i16, i16, i16)>,
}

impl MirrorAdminClient {
    /// Connects to the first server of `bootstrap` (comma-separated `host:port`) that answers, and
    /// checks that it serves the mirror APIs. `timeout` bounds each connect and each call.
    ///
    /// # Errors
    /// [`AdminClientError::Connect`] if none answers, [`AdminClientError::NotAMirrorServer`].
    pub async fn connect(bootstrap: &str, timeout: Duration) -> Result<Self, AdminClientError> {
        let mut last = None;
        for addr in bootstrap.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let connected = tokio::time::timeout(timeout, TcpStream::connect(addr)).await;
            let stream = match connected {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    last = Some(AdminClientError::Connect { addr: addr.to_owned(), source: e });
                    continue;
                }
                Err(_) => {
                    last = Some(AdminClientError::Connect {
                        addr: addr.to_owned(),
                        source: std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no connection within {timeout:?}")),
                    });
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (read, write) = stream.into_split();
            let mut client = Self {
                addr: addr.to_owned(),
                reader: FramedRead::new(read, FrameDecoder::new(MAX_RESPONSE_BYTES)),
                writer: write,
                next_correlation_id: 0,
                timeout,
                versions: Vec::new(),
            };
            client.api_versions().await?;
            if !MirrorApiKey::ALL.iter().all(|k| client.versions.iter().any(|(key, _, _)| *key == k.key())) {
                return Err(AdminClientError::NotAMirrorServer { addr: addr.to_owned() });
            }
            return Ok(client);
        }
        Err(last.unwrap_or_else(|| AdminClientError::Connect {
            addr: bootstrap.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no host:port given"),
        }))
    }

    async fn round_trip(&mut self, api: &str, frame: Bytes) -> Result<Bytes, AdminClientError> {
        let addr = self.addr.clone();
        let framed = encode_frame(&frame).map_err(|source| AdminClientError::Frame { addr: addr.clone(), source })?;
        let exchange = async {
            self.writer.write_all(&framed).await.map_err(|e| AdminClientError::Frame { addr: addr.clone(), source: FrameError::Io(e) })?;
            match self.reader.next().await {
                Some(Ok(f)) => Ok(f),
                Some(Err(source)) => Err(AdminClientError::Frame { addr: addr.clone(), source }),
                None => Err(AdminClientError::Closed { addr: addr.clone() }),
            }
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(AdminClientError::Timeout { addr, api: api.to_owned(), timeout: self.timeout }),
        }
    }

    fn correlation_id(&mut self) -> i32 {
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.next_correlation_id
    }

    async fn api_versions(&mut self) -> Result<(), AdminClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kafka-mirrors"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut body = BytesMut::new();
        request.encode(&mut body, API_VERSIONS_VERSION).expect("invariant: ApiVersionsRequest v3 encodes");
        let correlation_id = self.correlation_id();
        let header = RequestHeader { api_key: 18, api_version: API_VERSIONS_VERSION, correlation_id, client_id: Some("kafka-mirrors".to_owned()) };
        let frame = encode_request(&header, &body);
        let mut response = match self.round_trip("ApiVersions", frame).await {
            Ok(r) => r,
            // A server that does not know the client closes; that is not a mirror server.
            Err(AdminClientError::Closed { addr }) => return Err(AdminClientError::NotAMirrorServer { addr }),
            Err(e) => return Err(e),
        };
        // Response header v0: the correlation id only.
        if response.len() < 4 {
            return Err(AdminClientError::NotAMirrorServer { addr: self.addr.clone() });
        }
        let _ = bytes::Buf::get_i32(&mut response);
        let decoded = ApiVersionsResponse::decode(&mut response, API_VERSIONS_VERSION)
            .map_err(|_| AdminClientError::NotAMirrorServer { addr: self.addr.clone() })?;
        self.versions = decoded.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
        Ok(())
    }

    /// Sends `request` at the highest version both sides serve and returns the response.
    ///
    /// # Errors
    /// Transport failures, timeouts, undecodable responses, unsupported versions.
    pub async fn send<R: MirrorRequest>(&mut self, request: &R) -> Result<R::Response, AdminClientError> {
        let api = R::API_KEY;
        let (_, ours) = api.versions();
        let theirs = self.versions.iter().find(|(k, _, _)| *k == api.key()).map(|(_, min, max)| (*min, *max));
        let version = match theirs {
            Some((min, max)) if min <= ours => ours.min(max),
            _ => return Err(AdminClientError::UnsupportedVersion { addr: self.addr.clone(), api, version: ours }),
        };
        let body = encode_body(api, version, request).map_err(|source| AdminClientError::Decode {
            addr: self.addr.clone(),
            api: api.name().to_owned(),
            source,
        })?;
        let correlation_id = self.correlation_id();
        let header = RequestHeader { api_key: api.key(), api_version: version, correlation_id, client_id: Some("kafka-mirrors".to_owned()) };
        let response = self.round_trip(api.name(), encode_request(&header, &body)).await?;
        let decode_error = |source| AdminClientError::Decode { addr: self.addr.clone(), api: api.name().to_owned(), source };
        let (got, body) = decode_response_header(&response).map_err(decode_error)?;
        if got != correlation_id {
            return Err(decode_error(DecodeError::InvalidValue { field: "correlation_id", value: i64::from(got) }));
        }
        decode_body(api, version, &body).map_err(decode_error)
    }
}
