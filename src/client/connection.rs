//! One connection to one broker: framing, correlation ids, many requests in flight, timeouts.
//!
//! ```text
//!   callers ──send()──► [bounded mpsc of whole frames] ──► writer task ──► socket
//!      ▲                                                                     │
//!      └──── oneshot per correlation id ◄──── reader task ◄── FrameDecoder ◄─┘
//! ```
//!
//! A caller encodes its request into one frame and hands the whole frame to the writer task, so a
//! cancelled caller can never leave half a frame on the wire. The reader task matches each response to
//! its waiting caller by correlation id. Any framing or socket failure *poisons* the connection: every
//! request in flight, and every later one, fails with the first cause, and the owner (the cluster
//! client) replaces the connection. A caller that gives up (timeout or cancellation) removes its entry;
//! a late response for it is dropped.
//!
//! Opening a connection:
//!
//! ```text
//!   TCP connect ─► TLS handshake (SSL, SASL_SSL; tls.rs) ─► ApiVersions
//!     ─► SaslHandshake v1 + SaslAuthenticate rounds (SASL_*; sasl.rs holds the mechanisms)
//!     ─► ready (session_lifetime_ms noted)
//! ```
//!
//! SASL session lifetime (KIP-368): when the broker announces `session_lifetime_ms` (its
//! `connections.max.reauth.ms`), the connection is *replaced*, not re-authenticated: after
//! [`REAUTH_FRACTION`] of the lifetime, [`BrokerConnection::is_usable`] turns false, the cluster client
//! opens (and authenticates) a new connection for every later request, and requests already in flight
//! finish on the old one, which is dropped with its last user. The broker would close the old
//! connection at the first request after expiry; none is sent there any more.
//!
//! Does not own: choosing the broker, retrying, or reconnecting (see [`super::Client`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tracing::{Instrument, debug, debug_span, trace};

use super::error::{ClientError, ConnectionError};
use super::sasl::SaslSession;
use super::security::{SaslSettings, SecurityConfig};
use super::tls::{MaybeTlsStream, TlsConnector};
use super::versions::{BrokerVersions, VersionPins};
use crate::protocol::{ErrorCode, FrameDecoder, MAX_FRAME_BYTES_DEFAULT};

/// Default time to wait for one response.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time to wait for TCP connect.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default number of requests in flight on one connection.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;
/// The ApiVersions version sent first (flexible, supported by every broker since Kafka 2.4).
const API_VERSIONS_VERSION: i16 = 3;
/// Part of a SASL session's lifetime after which the connection is replaced (KIP-368). The Java
/// client re-authenticates at a random 85–95 %; the rest leaves room for requests in flight.
pub const REAUTH_FRACTION: f64 = 0.85;

/// Settings of one broker connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// `client.id` sent in every request header.
    pub client_id: String,
    /// Largest response frame accepted, in bytes; a larger announced size poisons the connection
    /// before any memory is reserved.
    pub max_frame_bytes: usize,
    /// Time to wait for each response.
    pub request_timeout: Duration,
    /// Time to wait for the TCP connection.
    pub connect_timeout: Duration,
    /// Requests in flight at once; further callers wait. Also the capacity of the writer queue.
    pub max_in_flight: usize,
    /// Pinned API versions.
    pub pins: VersionPins,
    /// TLS and SASL.
    pub security: SecurityConfig,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            client_id: "kafka-mirror-proxy".to_owned(),
            max_frame_bytes: MAX_FRAME_BYTES_DEFAULT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            pins: VersionPins::default(),
            security: SecurityConfig::default(),
        }
    }
}

type Reply = Result<Bytes, Arc<ConnectionError>>;

/// State shared by callers and the two I/O tasks.
#[derive(Debug)]
struct Shared {
    addr: String,
    /// Waiting callers by correlation id, or the error that broke the connection.
    pending: Mutex<Pending>,
    next_correlation_id: AtomicI32,
}

#[derive(Debug, Default)]
struct Pending {
    waiters: HashMap<i32, oneshot::Sender<Reply>>,
    poisoned: Option<Arc<ConnectionError>>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        // A panic while holding this lock cannot leave the map inconsistent (single inserts/removes).
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Breaks the connection: fails every waiter with `error` and remembers it for later callers.
    fn poison(&self, error: ConnectionError) {
        let mut pending = self.lock();
        if pending.poisoned.is_some() {
            return;
        }
        debug!(broker.addr = %self.addr, %error, "connection poisoned");
        let error = Arc::new(error);
        pending.poisoned = Some(error.clone());
        for (_, waiter) in pending.waiters.drain() {
            let _ = waiter.send(Err(error.clone()));
        }
    }

    fn poisoned_error(&self, cause: &Arc<ConnectionError>) -> ConnectionError {
        ConnectionError::Poisoned { addr: self.addr.clone(), source: cause.clone() }
    }
}

/// Removes a waiter when its caller stops waiting (timeout, cancellation, or done).
struct WaiterGuard<'a> {
    shared: &'a Shared,
    correlation_id: i32,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.shared.lock().waiters.remove(&self.correlation_id);
    }
}

/// Aborts the I/O tasks when the connection is dropped.
#[derive(Debug)]
struct Tasks(Vec<JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// An open connection to one broker, after the ApiVersions handshake.
#[derive(Debug)]
pub struct BrokerConnection {
    shared: Arc<Shared>,
    frames: mpsc::Sender<Bytes>,
    in_flight: Semaphore,
    versions: BrokerVersions,
    config: ConnectionConfig,
    /// When the broker ends the SASL session (KIP-368), if it announced a lifetime.
    session_expires_at: Option<Instant>,
    /// When this connection stops taking new requests: [`REAUTH_FRACTION`] of the session lifetime.
    retire_at: Option<Instant>,
    _tasks: Tasks,
}

impl BrokerConnection {
    /// Connects to `addr` (`host:port`), runs the TLS handshake and SASL authentication that
    /// `config.security` asks for, and negotiates API versions.
    ///
    /// # Errors
    /// Connect failures and timeouts; [`ConnectionError::SecurityConfig`] for unusable settings;
    /// [`ConnectionError::Tls`] for a failed handshake; [`ConnectionError::Authentication`] with the
    /// broker's message for refused credentials; a failed ApiVersions handshake.
    pub async fn connect(addr: &str, config: ConnectionConfig) -> Result<Self, ConnectionError> {
        let security = &config.security;
        let sasl = match (security.protocol.uses_sasl(), &security.sasl) {
            (false, _) => None,
            (true, Some(sasl)) => Some(sasl.clone()),
            (true, None) => {
                return Err(ConnectionError::SecurityConfig {
                    key: "sasl.jaas.config".to_owned(),
                    message: format!("required with security.protocol={}", security.protocol.as_str()),
                });
            }
        };
        let tls = if security.protocol.uses_tls() { Some(TlsConnector::new(&security.tls).map_err(security_config_error)?) } else { None };
        let tcp = tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| ConnectionError::ConnectTimeout { addr: addr.to_owned(), timeout: config.connect_timeout })?
            .map_err(|source| ConnectionError::Connect { addr: addr.to_owned(), source })?;
        let _ = tcp.set_nodelay(true);
        let stream = match tls {
            None => MaybeTlsStream::Plain(tcp),
            Some(tls) => MaybeTlsStream::Tls(Box::new(tls.connect(addr, tcp, config.connect_timeout).await?)),
        };
        let mut conn = Self::handshake(addr, stream, config).await?;
        if let Some(sasl) = sasl {
            conn.authenticate(&sasl).await?;
        }
        Ok(conn)
    }

    /// SaslHandshake v1, then SaslAuthenticate until the mechanism completes (KIP-152). Notes the
    /// session lifetime (KIP-368).
    async fn authenticate(&mut self, sasl: &SaslSettings) -> Result<(), ConnectionError> {
        let mechanism = sasl.mechanism.name();
        let addr = self.addr().to_owned();
        let fail = |code: Option<ErrorCode>, message: String| ConnectionError::Authentication { addr: addr.clone(), mechanism, code, message };
        let handshake_version = self.version_for(ApiKey::SaslHandshake, None)?;
        if handshake_version < 1 {
            // v0 sends the SASL tokens as raw frames (Kafka before 1.0); not spoken here.
            return Err(fail(None, "the broker supports only SaslHandshake v0 (Kafka before 1.0)".to_owned()));
        }
        let handshake = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism));
        let response: SaslHandshakeResponse = self.send_version(&handshake, handshake_version).await?;
        if let Some(code) = ErrorCode::try_from_code(response.error_code) {
            let enabled: Vec<String> = response.mechanisms.iter().map(ToString::to_string).collect();
            return Err(fail(Some(code), format!("the broker enables [{}] on this listener", enabled.join(", "))));
        }
        let version = self.version_for(ApiKey::SaslAuthenticate, None)?;
        let (mut session, mut message) = SaslSession::start(sasl);
        let (lifetime_ms, sent_at) = loop {
            let sent_at = Instant::now();
            let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(message));
            let response: SaslAuthenticateResponse = self.send_version(&request, version).await?;
            if let Some(code) = ErrorCode::try_from_code(response.error_code) {
                let message = response.error_message.map_or_else(|| code.to_string(), |m| m.to_string());
                return Err(fail(Some(code), message));
            }
            match session.step(&response.auth_bytes).map_err(|e| fail(None, e.to_string()))? {
                Some(next) => message = next,
                None => break (response.session_lifetime_ms, sent_at),
            }
        };
        debug_assert!(session.is_complete(), "invariant: the loop ends only when the mechanism completes");
        if lifetime_ms > 0 {
            let lifetime = Duration::from_millis(lifetime_ms.unsigned_abs());
            // The lifetime counts from the broker's check, which comes after `sent_at`.
            self.session_expires_at = Some(sent_at + lifetime);
            self.retire_at = Some(sent_at + lifetime.mul_f64(REAUTH_FRACTION));
        }
        debug!(broker.addr = %self.addr(), sasl.mechanism = mechanism, sasl.user = %sasl.username, session_lifetime_ms = lifetime_ms, "authenticated");
        Ok(())
    }

    /// Runs the connection over an already established stream (TLS or not; tests use in-memory
    /// streams), starting with ApiVersions. No SASL.
    ///
    /// # Errors
    /// A failed ApiVersions handshake.
    pub async fn handshake<S>(addr: &str, stream: S, config: ConnectionConfig) -> Result<Self, ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let mut conn = Self::spawn(addr, stream, config);
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("kafka-mirror-proxy"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response: ApiVersionsResponse = conn.send_version(&request, API_VERSIONS_VERSION).await?;
        if let Some(code) = ErrorCode::try_from_code(response.error_code) {
            return Err(ConnectionError::Handshake { addr: addr.to_owned(), code });
        }
        conn.versions = BrokerVersions::from_ranges(response.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)));
        Ok(conn)
    }

    fn spawn<S>(addr: &str, stream: S, config: ConnectionConfig) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let shared = Arc::new(Shared { addr: addr.to_owned(), pending: Mutex::new(Pending::default()), next_correlation_id: AtomicI32::new(0) });
        let (read_half, write_half) = tokio::io::split(stream);
        let capacity = config.max_in_flight.max(1);
        let (frames, rx) = mpsc::channel(capacity);
        let span = debug_span!("broker_connection", broker.addr = %addr);
        let reader = tokio::spawn(read_loop(shared.clone(), FramedRead::new(read_half, FrameDecoder::new(config.max_frame_bytes))).instrument(span.clone()));
        let writer = tokio::spawn(write_loop(shared.clone(), write_half, rx).instrument(span));
        Self {
            shared,
            frames,
            in_flight: Semaphore::new(capacity),
            versions: BrokerVersions::default(),
            config,
            session_expires_at: None,
            retire_at: None,
            _tasks: Tasks(vec![reader, writer]),
        }
    }

    /// The broker address this connection goes to.
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// What the broker supports.
    pub fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    /// True once the connection has failed; it must then be replaced.
    pub fn is_poisoned(&self) -> bool {
        self.shared.lock().poisoned.is_some()
    }

    /// When the broker ends this connection's SASL session (KIP-368 `session_lifetime_ms`), if it set
    /// a lifetime.
    pub fn session_expires_at(&self) -> Option<Instant> {
        self.session_expires_at
    }

    /// True while new requests may go here: not poisoned, and not past [`REAUTH_FRACTION`] of its SASL
    /// session lifetime. Otherwise the owner opens a new connection.
    pub fn is_usable(&self) -> bool {
        !self.is_poisoned() && self.retire_at.is_none_or(|t| Instant::now() < t)
    }

    /// The version that [`BrokerConnection::send`] would use for `api_key` with `wanted`
    /// (a per-call pin) or the configured pin.
    ///
    /// # Errors
    /// [`ConnectionError::UnsupportedVersion`] if there is no usable version.
    pub fn version_for(&self, api_key: ApiKey, wanted: Option<i16>) -> Result<i16, ConnectionError> {
        let pinned = wanted.or_else(|| self.config.pins.get(api_key));
        self.versions.choose(api_key, pinned).ok_or_else(|| ConnectionError::UnsupportedVersion {
            addr: self.shared.addr.clone(),
            api_key,
            broker: self.versions.range(api_key).map_or("none".to_owned(), |r| r.to_string()),
            ours: super::versions::ours(api_key),
            pinned,
        })
    }

    /// Sends `request` at the negotiated (or pinned) version and waits for its response.
    ///
    /// # Errors
    /// See [`ConnectionError`]; [`ConnectionError::is_ambiguous`] tells whether the broker may have
    /// applied the request.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves no partial frame and no waiter behind; if its frame was
    /// already written, the broker may still apply it, and the response is discarded.
    pub async fn send<R>(&self, request: &R, version: Option<i16>) -> Result<R::Response, ConnectionError>
    where
        R: Request + Sync,
        R::Response: Send,
    {
        let api_key = api_key_of::<R>();
        let version = self.version_for(api_key, version)?;
        self.send_version(request, version).await
    }

    async fn send_version<R>(&self, request: &R, version: i16) -> Result<R::Response, ConnectionError>
    where
        R: Request + Sync,
        R::Response: Send,
    {
        let api_key = api_key_of::<R>();
        let client_id = &self.config.client_id;
        let reply = self.exchange(api_key as i16, version, |correlation_id| encode_request(request, api_key, version, correlation_id, client_id)).await?;
        decode_response::<R>(self.addr(), api_key, version, reply)
    }

    /// Sends one request of an API this client has no message types for (the mirror APIs): `encode`
    /// gets the correlation id and returns the whole frame, length prefix included. Returns the
    /// response frame from its correlation id on (header and body undecoded).
    ///
    /// # Errors
    /// As [`BrokerConnection::send`], except decoding, which is the caller's.
    ///
    /// # Cancel safety
    /// As [`BrokerConnection::send`].
    pub async fn send_raw(&self, api_key: i16, api_version: i16, encode: impl FnOnce(i32) -> Bytes) -> Result<Bytes, ConnectionError> {
        self.exchange(api_key, api_version, |correlation_id| Ok(encode(correlation_id))).await
    }

    /// One request/response: a correlation id, the frame from `encode`, the wait for its response.
    async fn exchange(&self, api_key: i16, api_version: i16, encode: impl FnOnce(i32) -> Result<Bytes, ConnectionError>) -> Result<Bytes, ConnectionError> {
        let _permit = self.in_flight.acquire().await.map_err(|_| ConnectionError::Closed { addr: self.addr().to_owned() })?;
        let correlation_id = self.shared.next_correlation_id.fetch_add(1, Ordering::Relaxed) & i32::MAX;
        let frame = encode(correlation_id)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.shared.lock();
            if let Some(cause) = &pending.poisoned {
                return Err(self.shared.poisoned_error(cause));
            }
            pending.waiters.insert(correlation_id, tx);
        }
        let _guard = WaiterGuard { shared: &self.shared, correlation_id };
        trace!(api_key, api_version, correlation_id, "send");
        if self.frames.send(frame).await.is_err() {
            return Err(self.poisoned_or_closed());
        }
        let timeout = self.config.request_timeout;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                let error = || match ApiKey::try_from(api_key) {
                    Ok(api_key) => ConnectionError::Timeout { addr: self.addr().to_owned(), api_key, api_version, correlation_id, timeout },
                    Err(_) => ConnectionError::RawTimeout { addr: self.addr().to_owned(), api_key, api_version, correlation_id, timeout },
                };
                // A broker answers a connection's requests in order: nothing after this one will
                // come sooner, and a peer that is gone without a FIN or RST (a black hole, a
                // half-open link) never answers at all. Like Kafka's NetworkClient, give the
                // connection up; the next call makes a new one.
                self.shared.poison(error());
                Err(error())
            }
            Ok(Err(_)) => Err(self.poisoned_or_closed()),
            Ok(Ok(reply)) => reply.map_err(|cause| self.shared.poisoned_error(&cause)),
        }
    }

    fn poisoned_or_closed(&self) -> ConnectionError {
        match &self.shared.lock().poisoned {
            Some(cause) => self.shared.poisoned_error(cause),
            None => ConnectionError::Closed { addr: self.addr().to_owned() },
        }
    }
}

/// A TLS settings error from the cluster layer's type, as this layer's.
fn security_config_error(error: ClientError) -> ConnectionError {
    match error {
        ClientError::Config { key, message } => ConnectionError::SecurityConfig { key, message },
        other => ConnectionError::SecurityConfig { key: "security.protocol".to_owned(), message: other.to_string() },
    }
}

fn api_key_of<R: Request>() -> ApiKey {
    ApiKey::try_from(R::KEY).expect("invariant: every kafka-protocol Request has a known ApiKey")
}

/// Encodes header and body into one length-prefixed frame. (`kafka-protocol` reports its codec errors as
/// `anyhow::Error`; they are turned into typed errors here and go no further.)
fn encode_request<R: Request>(request: &R, api_key: ApiKey, version: i16, correlation_id: i32, client_id: &str) -> Result<Bytes, ConnectionError> {
    let encode_err = |e: anyhow::Error| ConnectionError::Encode { api_key, api_version: version, message: format!("{e:#}") };
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    header.encode(&mut buf, R::header_version(version)).map_err(encode_err)?;
    request.encode(&mut buf, version).map_err(encode_err)?;
    let len = i32::try_from(buf.len() - 4).map_err(|_| ConnectionError::Encode {
        api_key,
        api_version: version,
        message: format!("request of {} bytes is too large", buf.len()),
    })?;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    Ok(buf.freeze())
}

/// Decodes a response frame (header included) and checks nothing is left over.
fn decode_response<R: Request>(addr: &str, api_key: ApiKey, version: i16, mut frame: Bytes) -> Result<R::Response, ConnectionError> {
    let decode_err = |message: String| ConnectionError::Decode { addr: addr.to_owned(), api_key, api_version: version, message };
    ResponseHeader::decode(&mut frame, <R::Response as HeaderVersion>::header_version(version)).map_err(|e| decode_err(format!("header: {e:#}")))?;
    let response = unpanicked(|| R::Response::decode(&mut frame, version)).map_err(decode_err)?.map_err(|e| decode_err(format!("{e:#}")))?;
    if frame.has_remaining() {
        return Err(decode_err(format!("{} unexpected trailing bytes", frame.remaining())));
    }
    Ok(response)
}

/// `decode()`, with a panic turned into its message. Why: the decodes run in the caller's task (a
/// replicator partition, the sync, the control plane), and `kafka-protocol` decodes bytes a broker
/// sent, possibly one run by someone else. Fuzzing every API and version (`fuzz/fuzz_targets/
/// client_response.rs`) has found no panic, but one would otherwise end the caller's task with no
/// error to report; as a decode error it is reported and retried like any other. (`decode` owns
/// nothing that outlives a panic: the frame is dropped with the error.)
fn unpanicked<T>(decode: impl FnOnce() -> T) -> Result<T, String> {
    crate::report::catch_panic(decode).map_err(|message| format!("the decoder panicked: {message}"))
}

async fn read_loop<R: AsyncRead + Unpin>(shared: Arc<Shared>, mut frames: FramedRead<R, FrameDecoder>) {
    let error = loop {
        match frames.next().await {
            None => break ConnectionError::Closed { addr: shared.addr.clone() },
            Some(Err(source)) => break ConnectionError::Frame { addr: shared.addr.clone(), source },
            Some(Ok(frame)) => {
                let Some(id) = frame.get(..4) else {
                    break ConnectionError::Frame {
                        addr: shared.addr.clone(),
                        source: crate::protocol::FrameError::Truncated { buffered: frame.len(), expected: 4 },
                    };
                };
                let correlation_id = i32::from_be_bytes([id[0], id[1], id[2], id[3]]);
                let waiter = shared.lock().waiters.remove(&correlation_id);
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.send(Ok(frame));
                    }
                    None if correlation_id >= 0 && correlation_id < shared.next_correlation_id.load(Ordering::Relaxed) => {
                        debug!(correlation_id, "response for a request nobody waits for any more");
                    }
                    None => break ConnectionError::UnexpectedCorrelationId { addr: shared.addr.clone(), correlation_id },
                }
            }
        }
    };
    shared.poison(error);
}

async fn write_loop<W: AsyncWrite + Unpin>(shared: Arc<Shared>, mut socket: W, mut frames: mpsc::Receiver<Bytes>) {
    while let Some(frame) = frames.recv().await {
        let mut result = socket.write_all(&frame).await;
        // Write whatever else is queued before flushing once.
        while result.is_ok() {
            match frames.try_recv() {
                Ok(more) => result = socket.write_all(&more).await,
                Err(_) => break,
            }
        }
        if let Err(source) = result.and(socket.flush().await) {
            shared.poison(ConnectionError::Frame { addr: shared.addr.clone(), source: source.into() });
            return;
        }
    }
}

#[cfg(test)]
mod tests;
