//! One client connection: its own connection to one destination broker, requests forwarded in order,
//! responses rewritten where needed.
//!
//! ```text
//!   client ──frames──► requests half ──(write policy, scan)──► broker
//!                          │ Pending (bounded: max_in_flight_per_connection)
//!                          ▼
//!   client ◄──frames── responses half ◄──(rewrite endpoints, merge refusals)── broker
//! ```
//!
//! Each client connection gets exactly one broker connection (the broker its listener fronts; any
//! broker for the bootstrap listener), so correlation ids pass through unchanged and Kafka's
//! in-order responses per connection keep the two sides aligned: the responses half takes the
//! oldest [`Pending`] entry and, unless it is a local answer, reads the broker's next frame, which
//! must carry that entry's correlation id. Requests the proxy answers itself (all partitions refused,
//! an ApiVersions version it cannot decode) become local entries in the same queue, so the client
//! sees responses in request order. Produce with `acks=0` gets no entry: the broker sends no response.
//!
//! Mirror API requests (spec §8) are answered by the proxy too, but a call may take long
//! (RemoveTopicsFromMirror waits up to 30 s for the partitions to stop), so each runs in its own task
//! (on the proxy's task tracker) and its entry in the queue is that task's handle: the requests half
//! goes on reading and forwarding the connection's other requests, and the responses half waits for
//! the call when its entry is the oldest, so its answer still goes out in request order. Every entry,
//! a running call included, holds one of the `max_in_flight_per_connection` slots, reserved before
//! the request is handled.
//!
//! ```text
//!   requests:   [mirror call c1] [Produce c2] [Fetch c3]        c2, c3 forwarded at once
//!   responses:  wait c1's task ─► c1 ─► broker's c2 ─► broker's c3   (buffered by the socket meanwhile)
//! ```
//!
//! Fetch responses of 64 KiB and more are not read whole: the responses half forwards them as their
//! bytes arrive ([`super::stream`]), so a connection never holds a whole large response. Likewise a
//! Produce request of 64 KiB and more that writes to one topic the write policy allows whole: the
//! requests half reads its head, decides, and forwards the rest as it arrives (spliced on plain TCP).
//! Every other request, a large Produce to a mirror topic or to several topics included, is read
//! whole and goes through the write policy as before.
//!
//! The two halves run as two futures in the session's task (not two tasks), so they cannot deadlock
//! on each other: a broker that blocks on writing a large response is still read while the requests
//! half waits to write a large request.
//!
//! Close paths:
//! 1. client EOF or reset: the session ends at once (responses in flight are dropped, as a broker
//!    would drop them);
//! 2. a malformed request, oversized frame or unreadable version: logged once (warn), connection closed;
//! 3. broker closed or failed: the client connection is closed; the client reconnects and refreshes
//!    metadata, as after a broker failure;
//! 4. shutdown: the requests half stops reading, the responses half answers everything in flight,
//!    then the connection closes (all under the proxy's grace period).
//!
//! A mirror API call outlives its connection if the client goes away (the call is not cancel safe,
//! see [`super::mirror_apis::MirrorApiHandler::handle`]); it ends at the latest at the end of the
//! grace period.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use bytes::{Buf as _, Bytes};
use kafka_protocol::messages::ApiKey;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, trace, warn};

use super::cancel::Cancelled;
use super::error::SessionError;
use super::listener::Target;
use super::metrics::{add, inc};
use super::mirror_apis::MirrorApiHandler;
use super::policy::Refusals;
use super::requests::{ScannedRequest, TopicRef, produce_prefix, rebuild, scan_request};
use super::rewrite::{Decoded, carries_no_endpoints, needs_decode, split_response, unsupported_api_versions};
use super::server::Shared;
use super::splice::{AsTcp, Pipe};
use super::stream::{self, STREAM_FROM_BYTES, StreamError};
use super::versions::is_supported;
use super::wire::{Reader, RequestHead, request_body_offset};
use crate::protocol::FrameDecoder;
use crate::protocol::frame::FrameError;

/// Longest a client's TLS handshake may take.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What the responses half must do for one request, in request order.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A response the proxy made itself (frame body without the length prefix).
    Local(Bytes),
    /// The broker answers this request.
    Upstream(Expected),
    /// A mirror API call running in its own task.
    Mirror(MirrorCall),
}

/// A mirror API call in flight: its task yields the response body (`None`: not a mirror API, or
/// dropped at the end of the grace period).
#[derive(Debug)]
pub(crate) struct MirrorCall {
    correlation_id: i32,
    task: JoinHandle<Option<Bytes>>,
}

/// A request sent to the broker, waiting for its response.
#[derive(Debug)]
pub(crate) struct Expected {
    correlation_id: i32,
    /// `None`: an API the proxy does not know; forwarded as is.
    api_key: Option<ApiKey>,
    api_version: i16,
    /// Refused entries to merge into the broker's response.
    refusals: Option<Refusals>,
    /// The user a successful SaslAuthenticate authenticates.
    sasl_user: Option<String>,
    /// When the request was forwarded (`kafka_mirror_proxy_request_duration_seconds`).
    forwarded_at: Instant,
}

/// How the requests half ended.
#[derive(Debug)]
enum RequestsEnd {
    /// The client closed its connection.
    ClientClosed,
    /// Shutdown: finish what is in flight.
    Drain,
}

/// State both halves see.
#[derive(Debug, Default)]
struct SessionState {
    /// SASL mechanism from SaslHandshake.
    mechanism: Mutex<Option<String>>,
    /// The authenticated principal (`User:name`), once SaslAuthenticate succeeded.
    principal: Mutex<Option<String>>,
}

/// Serves one client connection until it closes, fails, or the proxy shuts down.
pub(crate) async fn run_session(shared: Arc<Shared>, socket: TcpStream, peer: SocketAddr, target: Target, shutdown: CancellationToken) {
    super::sockopt::tune(&socket, shared.settings.tcp_congestion_control.as_deref());
    shared.metrics.connections_active.fetch_add(1, Ordering::Relaxed);
    inc(&shared.metrics.connections_total);
    let result = unpanicked(serve(&shared, socket, target, &shutdown)).await;
    shared.metrics.connections_active.fetch_sub(1, Ordering::Relaxed);
    match result {
        Ok(()) => debug!("session closed"),
        Err(error @ SessionError::Panicked { .. }) => error!(client.addr = %peer, error = %error, "session failed"),
        Err(error) if error.is_normal_close() => debug!(error = %error, "session closed"),
        Err(error) if error.is_client_fault() => warn!(client.addr = %peer, error = ?error, "closing client connection"),
        Err(error) => warn!(client.addr = %peer, error = ?error, "session failed"),
    }
}

/// `serve`, with a panic turned into [`SessionError::Panicked`]. Without it, a panic would still
/// close only this connection (its task ends, its sockets are dropped), but the active-connections
/// gauge would never come down, and the log would lack the client's address.
async fn unpanicked(serve: impl Future<Output = Result<(), SessionError>>) -> Result<(), SessionError> {
    crate::report::catch_panic_async(serve).await.unwrap_or_else(|message| Err(SessionError::Panicked { message }))
}

async fn serve(shared: &Arc<Shared>, socket: TcpStream, target: Target, shutdown: &CancellationToken) -> Result<(), SessionError> {
    match &shared.tls {
        None => {
            let (client_read, client_write) = socket.into_split();
            serve_split(shared, client_read, client_write, target, shutdown).await
        }
        Some(acceptor) => {
            let tls = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.0.accept(socket))
                .await
                .map_err(|_| SessionError::TlsHandshake(std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out")))?
                .map_err(SessionError::TlsHandshake)?;
            let (client_read, client_write) = tokio::io::split(tls);
            serve_split(shared, client_read, client_write, target, shutdown).await
        }
    }
}

async fn serve_split<R, W>(shared: &Arc<Shared>, client_read: R, client_write: W, target: Target, shutdown: &CancellationToken) -> Result<(), SessionError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
{
    let (upstream, upstream_addr) = super::upstream::connect(shared, target).await?;
    debug!(broker.addr = %upstream_addr, "connected upstream");
    // A plain TCP stream splits into owned halves; a TLS stream, whose two directions share one
    // state, only through `tokio::io::split`, which locks on every read and write.
    match upstream {
        crate::client::MaybeTlsStream::Plain(tcp) => {
            let halves = tcp.into_split();
            serve_streams(shared, (client_read, client_write), halves, &upstream_addr, shutdown).await
        }
        tls @ crate::client::MaybeTlsStream::Tls(_) => {
            serve_streams(shared, (client_read, client_write), tokio::io::split(tls), &upstream_addr, shutdown).await
        }
    }
}

/// Serves one client connection over an established broker connection (both as read and write halves).
async fn serve_streams<R, W, UR, UW>(
    shared: &Arc<Shared>,
    (client_read, client_tx): (R, W),
    (upstream_read, upstream_tx): (UR, UW),
    upstream_addr: &str,
    shutdown: &CancellationToken,
) -> Result<(), SessionError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
    UR: AsyncRead + Unpin + AsTcp,
    UW: AsyncWrite + Unpin + AsTcp,
{
    let client_rx = FramedRead::new(client_read, FrameDecoder::new(shared.settings.max_frame_bytes));
    let upstream_rx = FramedRead::new(upstream_read, FrameDecoder::new(shared.settings.max_response_bytes));
    let (pending_tx, pending_rx) = mpsc::channel(shared.settings.max_in_flight_per_connection);
    let state = SessionState::default();

    let requests = requests_half(shared, &state, client_rx, upstream_tx, upstream_addr, pending_tx, shutdown);
    let responses = responses_half(shared, &state, upstream_rx, client_tx, upstream_addr, pending_rx);
    tokio::pin!(requests, responses);
    tokio::select! {
        // Biased: both halves are polled on every wake-up anyway, and a fixed order saves the random
        // pick on the per-request path.
        biased;
        end = &mut requests => match end? {
            RequestsEnd::ClientClosed => Ok(()),
            // The pending sender is dropped with the requests half, so the responses half ends once
            // everything in flight is answered.
            RequestsEnd::Drain => responses.await,
        },
        r = &mut responses => r,
    }
}

/// Writes one frame (length prefix + body) and flushes. Prefix and body go out in one vectored write
/// (one `writev` on TCP, one record with TLS), without copying the body into a buffer first.
///
/// # Cancel safety
/// Not cancel safe (a partial frame may be written); it is never used inside `select!`.
async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, body: Bytes) -> std::io::Result<()> {
    let len = i32::try_from(body.len()).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "frame over 2 GiB"))?;
    let prefix = len.to_be_bytes();
    let mut frame = prefix.as_slice().chain(body);
    w.write_all_buf(&mut frame).await?;
    w.flush().await
}

/// Requests this long or longer (length prefix included) are looked at before they are read whole:
/// a Produce request to one topic that the write policy allows whole is then forwarded as its bytes
/// arrive, its records spliced socket to socket ([`stream::forward_frame`]), instead of being read
/// into memory and written out again. Producers with batches of 64 KiB and more send such requests
/// (BENCHMARKS.md: the copy on sending them was most of the proxy's CPU on the producer path).
const STREAM_REQUESTS_FROM: usize = 64 * 1024;
/// How much of a large request is read before deciding: its header and first topic fit in it.
const REQUEST_HEAD_BYTES: usize = 16 * 1024;

/// The next request of a client: the length of a large one whose head is buffered, or a whole frame.
enum Incoming {
    Large(usize),
    Frame(Option<Result<Bytes, FrameError>>),
}

/// Reads the next request (see [`STREAM_REQUESTS_FROM`]).
///
/// # Cancel safety
/// Cancel safe: what was read stays in the frame reader's buffer.
async fn next_request<R: AsyncRead + Unpin>(rx: &mut FramedRead<R, FrameDecoder>) -> Incoming {
    match stream::peek_large(rx, STREAM_REQUESTS_FROM, REQUEST_HEAD_BYTES).await {
        Ok(Some(len)) => Incoming::Large(len),
        Ok(None) => Incoming::Frame(stream::next_frame(rx).await),
        Err(e) => Incoming::Frame(Some(Err(FrameError::Io(e)))),
    }
}

#[allow(clippy::too_many_arguments, reason = "the two halves of one session; grouped in a struct they would borrow each other")]
async fn requests_half<R, W>(
    shared: &Arc<Shared>,
    state: &SessionState,
    mut client_rx: FramedRead<R, FrameDecoder>,
    mut upstream_tx: W,
    upstream_addr: &str,
    pending: mpsc::Sender<Pending>,
    shutdown: &CancellationToken,
) -> Result<RequestsEnd, SessionError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
{
    // One registration for the whole session, cheap to poll on every wake-up (see `super::cancel`).
    let mut shutdown_signal = Cancelled::new(shutdown.clone());
    // Made at the first large request when both sides are plain TCP (see `super::splice`); `Err`
    // once making it failed, then requests are copied.
    let mut pipe: Option<std::io::Result<Pipe>> = None;
    let both_tcp = client_rx.get_ref().tcp().is_some() && upstream_tx.tcp().is_some();
    loop {
        let next = tokio::select! {
            biased;
            // Cancel safe and reusable: it completes once the token is cancelled.
            () = &mut shutdown_signal => return Ok(RequestsEnd::Drain),
            next = next_request(&mut client_rx) => next,
        };
        let next = match next {
            Incoming::Frame(next) => next,
            Incoming::Large(len) => {
                let pipe = both_tcp.then(|| pipe.get_or_insert_with(Pipe::new).as_ref().ok()).flatten();
                match stream_produce(shared, &mut client_rx, len, &mut upstream_tx, upstream_addr, &pending, pipe).await? {
                    Streaming::Forwarded => continue,
                    Streaming::ResponsesEnded => return Ok(RequestsEnd::ClientClosed),
                    // The rest of it, read whole (not under the select: the client is sending it).
                    Streaming::NotStreamable => stream::next_frame(&mut client_rx).await,
                }
            }
        };
        let frame = match next {
            None => return Ok(RequestsEnd::ClientClosed),
            Some(Err(e)) => return Err(SessionError::ClientFrame(e)),
            Some(Ok(frame)) => frame,
        };
        // Waits while max_in_flight_per_connection requests are outstanding: backpressure. Reserved
        // before the request is handled, so a mirror API call starts only once it has a slot.
        let Ok(slot) = pending.reserve().await else {
            // The responses half ended; its error ends the session.
            return Ok(RequestsEnd::ClientClosed);
        };
        let step = handle_request(shared, state, frame).await.inspect_err(|e| {
            if matches!(e, SessionError::UnsupportedVersion { .. }) {
                inc(&shared.metrics.unsupported_versions);
            } else if e.is_client_fault() {
                inc(&shared.metrics.malformed_requests);
            }
        })?;
        if let Some(p) = step.pending {
            slot.send(p);
        }
        if let Some(frame) = step.forward {
            write_frame(&mut upstream_tx, frame).await.map_err(|source| SessionError::UpstreamWrite { addr: upstream_addr.to_owned(), source })?;
        }
    }
}

/// What became of a large request.
enum Streaming {
    /// Forwarded as it arrived.
    Forwarded,
    /// Left in the frame reader for the whole-frame path (which also reports a malformed request).
    NotStreamable,
    /// The responses half has ended (its error ends the session).
    ResponsesEnded,
}

/// A large Produce request (see [`STREAM_REQUESTS_FROM`]) whose head is in `rx`'s buffer: if it writes
/// to one topic and the write policy allows every partition of it, the request is counted, its
/// response expected, and it is forwarded as it arrives without being read. Anything else (another
/// API, several topics, a mirror topic, a topic id the proxy has yet to learn) is
/// [`Streaming::NotStreamable`].
async fn stream_produce<R, W>(
    shared: &Arc<Shared>,
    rx: &mut FramedRead<R, FrameDecoder>,
    len: usize,
    upstream_tx: &mut W,
    upstream_addr: &str,
    pending: &mpsc::Sender<Pending>,
    pipe: Option<&Pipe>,
) -> Result<Streaming, SessionError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
{
    let Some(buffered) = rx.read_buffer().get(4..) else { return Ok(Streaming::NotStreamable) };
    let Ok(head) = RequestHead::parse(buffered) else { return Ok(Streaming::NotStreamable) };
    if head.api_key != ApiKey::Produce as i16 {
        return Ok(Streaming::NotStreamable);
    }
    let Ok(prefix) = produce_prefix(buffered, head.api_version) else { return Ok(Streaming::NotStreamable) };
    let (1, Some(topic)) = (prefix.topics, &prefix.first_topic) else { return Ok(Streaming::NotStreamable) };
    if !shared.policy.allows_whole_topic(topic, |id| shared.registry.topic_name(id)) {
        return Ok(Streaming::NotStreamable);
    }
    shared.metrics.count_request(head.api_key, len + 4);
    trace!(api_key = head.api_key, api_version = head.api_version, correlation_id = head.correlation_id, "request, streamed");
    let Ok(slot) = pending.reserve().await else { return Ok(Streaming::ResponsesEnded) };
    if prefix.acks != 0 {
        slot.send(expect_response(&head, Some(ApiKey::Produce), None, None));
    }
    let spliced = stream::forward_frame(rx, len, head.api_version, upstream_tx, pipe).await.map_err(|e| match e {
        StreamError::Write(source) => SessionError::UpstreamWrite { addr: upstream_addr.to_owned(), source },
        StreamError::Read(e) => SessionError::ClientFrame(e),
        other => SessionError::ClientFrame(FrameError::Io(std::io::Error::other(other))),
    })?;
    inc(&shared.metrics.streamed_requests);
    add(&shared.metrics.spliced_bytes, spliced);
    Ok(Streaming::Forwarded)
}

/// What to do with one request.
#[derive(Debug, Default)]
struct Step {
    pending: Option<Pending>,
    forward: Option<Bytes>,
}

async fn handle_request(shared: &Arc<Shared>, state: &SessionState, frame: Bytes) -> Result<Step, SessionError> {
    let head = RequestHead::parse(&frame).map_err(SessionError::MalformedHeader)?;
    shared.metrics.count_request(head.api_key, frame.len() + 4);
    trace!(api_key = head.api_key, api_version = head.api_version, correlation_id = head.correlation_id, "request");
    if let Some(admin) = &shared.admin {
        if crate::protocol::mirror::MirrorApiKey::from_key(head.api_key).is_some() {
            return handle_mirror_api(shared, admin, state, &frame, &head);
        }
    }
    let Ok(api_key) = ApiKey::try_from(head.api_key) else {
        // An API this build does not know: forwarded without reading, the broker decides.
        return Ok(forward(frame, &head, None, None, None));
    };
    if !is_supported(api_key, head.api_version) {
        if api_key == ApiKey::ApiVersions {
            let answer = unsupported_api_versions(head.correlation_id).map_err(|source| SessionError::Rewrite { addr: "proxy".to_owned(), source })?;
            return Ok(Step { pending: Some(Pending::Local(answer)), forward: None });
        }
        return Err(SessionError::UnsupportedVersion { api_key, api_version: head.api_version, correlation_id: head.correlation_id });
    }
    match api_key {
        ApiKey::Produce | ApiKey::DeleteRecords | ApiKey::CreatePartitions | ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs => {
            handle_write(shared, frame, &head, api_key).await
        }
        ApiKey::SaslHandshake => {
            let mechanism = read_sasl_mechanism(&frame, api_key, head.api_version);
            *state.mechanism.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = mechanism;
            Ok(forward(frame, &head, Some(api_key), None, None))
        }
        ApiKey::SaslAuthenticate => {
            let mechanism = state.mechanism.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            let user = read_sasl_user(&frame, head.api_version, mechanism.as_deref());
            Ok(forward(frame, &head, Some(api_key), None, user))
        }
        _ => Ok(forward(frame, &head, Some(api_key), None, None)),
    }
}

/// A mirror API request (spec §8): answered by the proxy itself, for the connection's principal, in
/// a task of its own (see the module doc); the responses half waits for it in request order.
fn handle_mirror_api(
    shared: &Arc<Shared>,
    admin: &Arc<dyn MirrorApiHandler>,
    state: &SessionState,
    frame: &Bytes,
    head: &RequestHead,
) -> Result<Step, SessionError> {
    let (_, body) = crate::protocol::mirror::decode_request_header(frame)
        .map_err(|e| SessionError::MirrorApi { correlation_id: head.correlation_id, message: e.to_string() })?;
    let principal = state.principal.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_else(|| "User:ANONYMOUS".to_owned());
    let (admin, hard_stop) = (admin.clone(), shared.hard_stop.clone());
    let (api_key, api_version) = (head.api_key, head.api_version);
    // Owned by the tracker: shutdown waits for it, and the end of the grace period drops it.
    let task = shared.tracker.spawn(
        async move {
            tokio::select! {
                biased;
                () = hard_stop.cancelled() => None,
                response = admin.handle(api_key, api_version, body, &principal) => response,
            }
        }
        .in_current_span(),
    );
    Ok(Step { pending: Some(Pending::Mirror(MirrorCall { correlation_id: head.correlation_id, task })), forward: None })
}

fn forward(frame: Bytes, head: &RequestHead, api_key: Option<ApiKey>, refusals: Option<Refusals>, sasl_user: Option<String>) -> Step {
    Step { pending: Some(expect_response(head, api_key, refusals, sasl_user)), forward: Some(frame) }
}

/// The broker's response to the forwarded request `head`, as the responses half will expect it.
fn expect_response(head: &RequestHead, api_key: Option<ApiKey>, refusals: Option<Refusals>, sasl_user: Option<String>) -> Pending {
    Pending::Upstream(Expected {
        correlation_id: head.correlation_id,
        api_key,
        api_version: head.api_version,
        refusals,
        sasl_user,
        forwarded_at: Instant::now(),
    })
}

/// Produce, DeleteRecords, CreatePartitions, AlterConfigs, IncrementalAlterConfigs: the write policy.
async fn handle_write(shared: &Arc<Shared>, frame: Bytes, head: &RequestHead, api_key: ApiKey) -> Result<Step, SessionError> {
    let scanned = scan_request(&frame, api_key, head.api_version).map_err(|source| SessionError::Malformed { correlation_id: head.correlation_id, source })?;
    maybe_learn_topic_ids(shared, &scanned).await;
    decide_write(shared, frame, head, api_key, &scanned)
}

/// Produce v13+ names topics by id: if the registry does not know one of them, one metadata refresh
/// (boxed: the rare wait must not enlarge the future every request builds and moves). An id still
/// unknown after it is left to the broker (it answers UNKNOWN_TOPIC_ID: a topic the destination does
/// not know cannot be a mirror topic there).
async fn maybe_learn_topic_ids(shared: &Arc<Shared>, scanned: &ScannedRequest) {
    let unknown = scanned.entries.iter().any(|e| matches!(&e.topic, TopicRef::Id(id) if !shared.registry.knows_topic(id)));
    if unknown {
        Box::pin(shared.refresh_metadata()).await;
    }
}

/// The write policy's verdict on a scanned request, as what to answer and what to forward.
fn decide_write(shared: &Arc<Shared>, frame: Bytes, head: &RequestHead, api_key: ApiKey, scanned: &ScannedRequest) -> Result<Step, SessionError> {
    let acks_zero = scanned.acks == Some(0);
    let Some(refusals) = shared.policy.check(scanned, |id| shared.registry.topic_name(id)) else {
        if acks_zero {
            return Ok(Step { pending: None, forward: Some(frame) });
        }
        return Ok(forward(frame, head, Some(api_key), None, None));
    };
    let partitions: usize = refusals.entries.iter().map(|e| e.partitions.len()).sum();
    add(&shared.metrics.refused_partitions, partitions);
    add(&shared.metrics.refused_resources, refusals.entries.len());
    for e in &refusals.entries {
        debug!(?api_key, correlation_id = head.correlation_id, topic = %e.topic, partitions = ?e.partitions, "write refused");
    }
    if refusals.nothing_left {
        if acks_zero {
            return Ok(Step::default());
        }
        let answer = Decoded::from_refusals(&refusals)
            .ok_or(SessionError::UnsupportedVersion { api_key, api_version: head.api_version, correlation_id: head.correlation_id })?
            .encode(api_key, head.api_version, head.correlation_id)
            .map_err(|source| SessionError::Rewrite { addr: "proxy".to_owned(), source })?;
        return Ok(Step { pending: Some(Pending::Local(answer)), forward: None });
    }
    let reduced = Bytes::from(rebuild(&frame, scanned, &refusals.keep));
    if acks_zero {
        return Ok(Step { pending: None, forward: Some(reduced) });
    }
    Ok(forward(reduced, head, Some(api_key), Some(refusals), None))
}

fn read_sasl_mechanism(frame: &[u8], api_key: ApiKey, api_version: i16) -> Option<String> {
    let flexible = api_key.request_header_version(api_version) >= 2;
    let (body, _) = request_body_offset(frame, flexible).ok()?;
    let mut r = Reader::at(frame, body);
    r.string(flexible, "mechanism").ok()
}

/// The user name a SaslAuthenticate request authenticates, for PLAIN and SCRAM (client-first message).
fn read_sasl_user(frame: &[u8], api_version: i16, mechanism: Option<&str>) -> Option<String> {
    let flexible = ApiKey::SaslAuthenticate.request_header_version(api_version) >= 2;
    let (body, _) = request_body_offset(frame, flexible).ok()?;
    let mut r = Reader::at(frame, body);
    let range = r.skip_bytes(flexible, "auth_bytes").ok()??;
    sasl_user(mechanism?, frame.get(range)?)
}

/// The authentication identity in a SASL PLAIN message (RFC 4616: `authzid NUL authcid NUL passwd`)
/// or a SCRAM client-first message (RFC 5802: `gs2-header n=user,r=nonce`, with `=2C`/`=3D` escapes).
pub(crate) fn sasl_user(mechanism: &str, auth: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(auth).ok()?;
    if mechanism.eq_ignore_ascii_case("PLAIN") {
        let mut parts = text.split('\0');
        let (authzid, authcid) = (parts.next()?, parts.next()?);
        parts.next()?;
        return Some(if authzid.is_empty() { authcid } else { authzid }.to_owned());
    }
    if mechanism.to_ascii_uppercase().starts_with("SCRAM-") {
        // Only the client-first message has a gs2 header ("n,," or "y,," or "p=…,").
        let bare = text.strip_prefix("n,").or_else(|| text.strip_prefix("y,")).or_else(|| text.strip_prefix("p="))?;
        let (_, bare) = bare.split_once(',')?;
        let user = bare.split(',').find_map(|a| a.strip_prefix("n="))?;
        return Some(user.replace("=2C", ",").replace("=3D", "="));
    }
    None
}

async fn responses_half<R, W>(
    shared: &Arc<Shared>,
    state: &SessionState,
    mut upstream_rx: FramedRead<R, FrameDecoder>,
    mut client_tx: W,
    upstream_addr: &str,
    mut pending: mpsc::Receiver<Pending>,
) -> Result<(), SessionError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
{
    // Made at the first large Fetch response when both sides are plain TCP (see `super::splice`);
    // `Err` once making it failed, then record sets are copied.
    let mut pipe: Option<std::io::Result<Pipe>> = None;
    let both_tcp = upstream_rx.get_ref().tcp().is_some() && client_tx.tcp().is_some();
    while let Some(p) = pending.recv().await {
        // Requests forwarded to a broker: (API, when forwarded), for their duration.
        let mut timed = None;
        let out = match p {
            Pending::Local(frame) => frame,
            Pending::Mirror(MirrorCall { correlation_id, task }) => {
                let failed = |message: String| SessionError::MirrorCall { correlation_id, message };
                match task.await {
                    Ok(Some(body)) => crate::protocol::mirror::encode_response(correlation_id, &body),
                    Ok(None) => return Err(failed("not a mirror API to its handler, or cut off by shutdown".to_owned())),
                    Err(e) => return Err(failed(format!("its task failed: {e}"))),
                }
            }
            Pending::Upstream(expected) => {
                timed = Some((expected.api_key, expected.forwarded_at));
                if streamable(&expected) {
                    let addr = || upstream_addr.to_owned();
                    let len =
                        stream::peek_frame_len(&mut upstream_rx).await.map_err(|e| SessionError::UpstreamFrame { addr: addr(), source: FrameError::Io(e) })?;
                    if let Some(len) = len.filter(|&l| l >= STREAM_FROM_BYTES) {
                        let pipe = both_tcp.then(|| pipe.get_or_insert_with(Pipe::new).as_ref().ok()).flatten();
                        let done =
                            stream::forward_fetch(&mut upstream_rx, len, expected.api_version, expected.correlation_id, &mut client_tx, pipe, |e| async move {
                                shared.endpoints_for(&e).await
                            })
                            .await
                            .map_err(|e| stream_error(e, upstream_addr))?;
                        add(&shared.metrics.response_bytes, done.bytes);
                        add(&shared.metrics.spliced_bytes, done.spliced);
                        inc(&shared.metrics.streamed_responses);
                        if done.rewritten {
                            inc(&shared.metrics.rewritten_responses);
                        }
                        if done.endpoints_dropped {
                            inc(&shared.metrics.streamed_endpoints_dropped);
                            debug!(
                                correlation_id = expected.correlation_id,
                                "leader endpoints left out of a streamed Fetch response: they did not fit in the broker's bytes"
                            );
                        }
                        shared.metrics.observe_duration(expected.api_key, expected.forwarded_at.elapsed());
                        continue;
                    }
                }
                let frame = match stream::next_frame(&mut upstream_rx).await {
                    None => return Err(SessionError::UpstreamClosed { addr: upstream_addr.to_owned() }),
                    Some(Err(source)) => return Err(SessionError::UpstreamFrame { addr: upstream_addr.to_owned(), source }),
                    Some(Ok(frame)) => frame,
                };
                let got = frame.get(..4).map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                if got != expected.correlation_id {
                    return Err(SessionError::CorrelationMismatch { addr: upstream_addr.to_owned(), expected: expected.correlation_id, got });
                }
                match expected.api_key {
                    // The hot path of every producer and consumer: Produce and Fetch responses without
                    // leader endpoints go out as the broker's bytes. Checked here, not in the async
                    // `process_response`, whose future is large (it holds a decoded response).
                    Some(api_key) if expected.refusals.is_none() && carries_no_endpoints(api_key, expected.api_version, &frame) => frame,
                    Some(api_key) if expected.refusals.is_some() || needs_decode(api_key, expected.api_version) => {
                        process_response(shared, state, api_key, expected, frame).await.map_err(|e| match e {
                            ProcessError::Rewrite(source) => SessionError::Rewrite { addr: upstream_addr.to_owned(), source },
                            ProcessError::Endpoint(e) => SessionError::Endpoint(e),
                        })?
                    }
                    _ => frame,
                }
            }
        };
        add(&shared.metrics.response_bytes, out.len() + 4);
        write_frame(&mut client_tx, out).await.map_err(SessionError::ClientWrite)?;
        if let Some((api_key, at)) = timed {
            shared.metrics.observe_duration(api_key, at.elapsed());
        }
    }
    Ok(())
}

/// A response the proxy forwards as it arrives when it is large: Fetch (see [`super::stream`]).
fn streamable(expected: &Expected) -> bool {
    expected.api_key == Some(ApiKey::Fetch) && expected.refusals.is_none()
}

/// A streaming failure as the session's error, with the broker's address.
fn stream_error(e: StreamError, upstream_addr: &str) -> SessionError {
    let addr = upstream_addr.to_owned();
    match e {
        StreamError::Read(source) => SessionError::UpstreamFrame { addr, source },
        StreamError::Write(e) => SessionError::ClientWrite(e),
        StreamError::Malformed { api_version, source } => {
            SessionError::Rewrite { addr, source: super::rewrite::RewriteError::Decode { api_key: ApiKey::Fetch, api_version, message: source.to_string() } }
        }
        StreamError::CorrelationMismatch { expected, got } => SessionError::CorrelationMismatch { addr, expected, got },
        StreamError::Endpoint(e) => SessionError::Endpoint(e),
    }
}

#[derive(Debug)]
enum ProcessError {
    Rewrite(super::rewrite::RewriteError),
    Endpoint(super::error::ProxyError),
}

async fn process_response(shared: &Arc<Shared>, state: &SessionState, api_key: ApiKey, expected: Expected, frame: Bytes) -> Result<Bytes, ProcessError> {
    let version = expected.api_version;
    let (correlation_id, body) = split_response(frame.clone(), api_key, version).map_err(ProcessError::Rewrite)?;
    let (mut decoded, version) = match Decoded::decode(api_key, version, body) {
        Ok(d) => (d, version),
        Err(e) if api_key == ApiKey::ApiVersions => {
            // A broker that does not support the requested ApiVersions version answers in v0 (KIP-511).
            let (_, body) = split_response(frame.clone(), api_key, 0).map_err(|_| ProcessError::Rewrite(e))?;
            (Decoded::decode(api_key, 0, body).map_err(ProcessError::Rewrite)?, 0)
        }
        Err(e) => return Err(ProcessError::Rewrite(e)),
    };
    shared.registry.add_topic_ids(decoded.topic_ids());
    if decoded.is_successful_authentication() {
        if let Some(user) = expected.sasl_user {
            let principal = format!("User:{user}");
            let mut current = state.principal.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if current.is_some() {
                // KIP-368: the client renewed its session before the broker's lifetime ran out. The
                // broker refuses a different principal, so this is the same one.
                inc(&shared.metrics.client_reauthentications);
                debug!(client.principal = %principal, "client re-authenticated");
            } else {
                info!(client.principal = %principal, "client authenticated");
            }
            *current = Some(principal);
        }
    }
    let endpoints = decoded.broker_endpoints();
    let changes = !endpoints.is_empty() || expected.refusals.is_some() || api_key == ApiKey::ApiVersions;
    if !changes {
        // Fetch and Produce without leader endpoints, SaslAuthenticate: the broker's bytes as they are.
        return Ok(frame);
    }
    if !endpoints.is_empty() {
        let map = shared.endpoints_for(&endpoints).await.map_err(ProcessError::Endpoint)?;
        decoded.apply_endpoints(&map);
    }
    decoded.cap_versions(&shared.served_api_versions);
    if let Some(refusals) = &expected.refusals {
        decoded = decoded.merge_refusals(refusals);
    }
    inc(&shared.metrics.rewritten_responses);
    decoded.encode(api_key, version, correlation_id).map_err(ProcessError::Rewrite)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use tokio::io::{AsyncWriteExt as _, DuplexStream};
    use tokio::time::Instant;

    use super::*;
    use crate::protocol::mirror::{MirrorApiKey, RequestHeader, encode_request};
    use crate::proxy::ProxySettings;
    use crate::proxy::mirror_apis::MirrorApiFuture;
    use futures_util::StreamExt as _;

    /// How long the fake mirror API call takes.
    const SLOW_CALL: Duration = Duration::from_secs(30);

    /// A mirror API handler that takes [`SLOW_CALL`] to answer, like RemoveTopicsFromMirror waiting
    /// for its partitions to stop.
    #[derive(Debug, Default)]
    struct SlowMirrorApis {
        finished: AtomicBool,
    }

    impl MirrorApiHandler for SlowMirrorApis {
        fn handle<'a>(&'a self, api_key: i16, _api_version: i16, body: Bytes, principal: &'a str) -> MirrorApiFuture<'a> {
            Box::pin(async move {
                tokio::time::sleep(SLOW_CALL).await;
                self.finished.store(true, Ordering::SeqCst);
                Some(Bytes::from(format!("{api_key} {principal} {body:?}")))
            })
        }
    }

    /// A mirror API handler that gives no answer (as when its call is cut off by the end of the grace
    /// period).
    #[derive(Debug)]
    struct SilentMirrorApis;

    impl MirrorApiHandler for SilentMirrorApis {
        fn handle<'a>(&'a self, _: i16, _: i16, _: Bytes, _: &'a str) -> MirrorApiFuture<'a> {
            Box::pin(async { None })
        }
    }

    /// A mirror call without an answer ends the session as the proxy's fault (not the client's).
    #[tokio::test]
    async fn a_mirror_call_without_an_answer_closes_the_session_as_a_proxy_failure() {
        let shared = Shared::for_tests(ProxySettings::for_bootstrap("127.0.0.1:1"), Some(Arc::new(SilentMirrorApis)));
        let (mut client, proxy_client) = tokio::io::duplex(1 << 16);
        let (proxy_upstream, _broker) = tokio::io::duplex(1 << 16);
        client.write_all(&mirror_request(9)).await.expect("send");
        let result =
            serve_streams(&shared, tokio::io::split(proxy_client), tokio::io::split(proxy_upstream), "fake-broker:9092", &CancellationToken::new()).await;
        match result {
            Err(e @ SessionError::MirrorCall { correlation_id: 9, .. }) => assert!(!e.is_client_fault() && !e.is_normal_close(), "{e}"),
            other => panic!("expected a MirrorCall error, got {other:?}"),
        }
    }

    /// A request frame (length prefix included) of an API the proxy forwards without reading
    /// (ListGroups v4, header v2).
    fn forwarded_request(correlation_id: i32) -> Vec<u8> {
        let mut body = vec![0, 16, 0, 4];
        body.extend_from_slice(&correlation_id.to_be_bytes());
        body.extend_from_slice(&[0, 1, b't', 0, 1, 0]);
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    fn mirror_request(correlation_id: i32) -> Vec<u8> {
        let header = RequestHeader { api_key: MirrorApiKey::ListMirrors.key(), api_version: 0, correlation_id, client_id: None };
        let body = encode_request(&header, &[0, 0]);
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    /// The fake broker: answers every request at once (correlation id + empty tagged fields), and
    /// records when each arrived and whether the mirror call had finished by then.
    async fn broker(stream: DuplexStream, calls: Arc<SlowMirrorApis>, expect: usize, start: Instant) -> Vec<(i32, Duration, bool)> {
        let (read, mut write) = tokio::io::split(stream);
        let mut frames = FramedRead::new(read, FrameDecoder::new(1 << 20));
        let mut seen = Vec::new();
        while seen.len() < expect {
            let frame = frames.next().await.expect("a request").expect("a frame");
            let head = RequestHead::parse(&frame).expect("a request head");
            seen.push((head.correlation_id, start.elapsed(), calls.finished.load(Ordering::SeqCst)));
            let mut response = 5i32.to_be_bytes().to_vec();
            response.extend_from_slice(&head.correlation_id.to_be_bytes());
            response.push(0);
            write.write_all(&response).await.expect("respond");
        }
        seen
    }

    /// Reads `n` response frames: (correlation id, body after it, when it arrived).
    async fn responses(stream: &mut FramedRead<tokio::io::ReadHalf<DuplexStream>, FrameDecoder>, n: usize, start: Instant) -> Vec<(i32, Bytes, Duration)> {
        let mut out = Vec::new();
        for _ in 0..n {
            let frame = stream.next().await.expect("a response").expect("a frame");
            let cid = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            out.push((cid, frame.slice(4..), start.elapsed()));
        }
        out
    }

    /// A mirror API call that takes 30 s (paused time) does not hold up the requests behind it on
    /// the same connection: they reach the broker at once, while the call runs; the responses still
    /// come back in request order, the mirror answer first. With `max_in_flight_per_connection` = 2,
    /// the running call holds a slot: two more requests go through, the third waits for the call.
    #[tokio::test(start_paused = true)]
    async fn a_slow_mirror_call_does_not_hold_up_other_requests_and_responses_stay_in_order() {
        let calls = Arc::new(SlowMirrorApis::default());
        let mut settings = ProxySettings::for_bootstrap("127.0.0.1:1");
        settings.max_in_flight_per_connection = 2;
        let shared = Shared::for_tests(settings, Some(calls.clone() as Arc<dyn MirrorApiHandler>));
        let (client, proxy_client) = tokio::io::duplex(1 << 16);
        let (proxy_upstream, broker_side) = tokio::io::duplex(1 << 16);
        let shutdown = CancellationToken::new();
        let start = Instant::now();
        let session = {
            let (shared, shutdown) = (shared.clone(), shutdown.clone());
            tokio::spawn(async move {
                let client_halves = tokio::io::split(proxy_client);
                let upstream_halves = tokio::io::split(proxy_upstream);
                serve_streams(&shared, client_halves, upstream_halves, "fake-broker:9092", &shutdown).await
            })
        };
        let broker = tokio::spawn(broker(broker_side, calls.clone(), 3, start));
        let (client_read, mut client_write) = tokio::io::split(client);
        let mut client_rx = FramedRead::new(client_read, FrameDecoder::new(1 << 20));
        for frame in [mirror_request(1), forwarded_request(2), forwarded_request(3), forwarded_request(4)] {
            client_write.write_all(&frame).await.expect("send");
        }
        let got = responses(&mut client_rx, 4, start).await;
        let seen = broker.await.expect("broker");

        // The broker saw requests 2 and 3 at once, before the call finished; request 4 only when the
        // call's slot was free again.
        assert_eq!(seen.iter().map(|(c, _, _)| *c).collect::<Vec<_>>(), vec![2, 3, 4]);
        for (cid, at, finished) in &seen[..2] {
            assert!(*at < Duration::from_secs(1) && !finished, "request {cid} forwarded at {at:?} (call finished: {finished})");
        }
        assert!(seen[2].1 >= SLOW_CALL && seen[2].2, "request 4 must wait for a slot: {:?}", seen[2]);
        // Responses in request order; the mirror answer is the handler's, for the anonymous principal.
        assert_eq!(got.iter().map(|(c, _, _)| *c).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        let expected = format!("{} User:ANONYMOUS {:?}", MirrorApiKey::ListMirrors.key(), Bytes::from_static(&[0, 0]));
        assert_eq!(got[0].1, Bytes::from([&[0u8][..], expected.as_bytes()].concat()), "tagged fields, then the body");
        assert!(got[0].2 >= SLOW_CALL);

        // The client closes: the session ends cleanly.
        drop(client_write);
        drop(client_rx);
        session.await.expect("session task").expect("a clean close");
    }

    /// A broker's Metadata response that claims 4 billion brokers in nine bytes fails to decode:
    /// the session that got it ends with that error (its client's connection closes, as for any
    /// undecodable response) and the process lives on. `kafka-protocol` reserves the claimed count
    /// before reading an entry, which the system allocator refuses with an abort of the whole
    /// proxy; the crate's allocator (src/lib.rs) does not.
    #[tokio::test]
    async fn a_broker_response_with_an_impossible_array_count_ends_its_session_not_the_process() {
        let shared = Shared::for_tests(ProxySettings::for_bootstrap("127.0.0.1:1"), None);
        let (client, proxy_client) = tokio::io::duplex(1 << 16);
        let (proxy_upstream, broker_side) = tokio::io::duplex(1 << 16);
        let session = {
            let shared = shared.clone();
            tokio::spawn(async move {
                serve_streams(&shared, tokio::io::split(proxy_client), tokio::io::split(proxy_upstream), "fake-broker:9092", &CancellationToken::new()).await
            })
        };
        let broker = tokio::spawn(async move {
            let (read, mut write) = tokio::io::split(broker_side);
            let mut frames = FramedRead::new(read, FrameDecoder::new(1 << 20));
            let frame = frames.next().await.expect("a request").expect("a frame");
            let head = RequestHead::parse(&frame).expect("a request head");
            assert_eq!((head.api_key, head.api_version), (ApiKey::Metadata as i16, 12));
            let mut response = 14i32.to_be_bytes().to_vec();
            response.extend_from_slice(&head.correlation_id.to_be_bytes());
            response.push(0); // header tagged fields
            response.extend_from_slice(&[0, 0, 0, 0]); // throttle_time_ms
            response.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // brokers: u32::MAX - 1, none sent
            write.write_all(&response).await.expect("respond");
            (frames, write)
        });
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let header = kafka_protocol::messages::RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(12)
            .with_correlation_id(5);
        let mut request = bytes::BytesMut::new();
        kafka_protocol::protocol::Encodable::encode(&header, &mut request, 2).expect("header");
        kafka_protocol::protocol::Encodable::encode(&kafka_protocol::messages::MetadataRequest::default(), &mut request, 12).expect("body");
        client_write.write_all(&(request.len() as i32).to_be_bytes()).await.expect("send");
        client_write.write_all(&request).await.expect("send");

        match session.await.expect("session task") {
            Err(SessionError::Rewrite { source: super::super::rewrite::RewriteError::Decode { api_key: ApiKey::Metadata, api_version: 12, .. }, .. }) => {}
            other => panic!("expected a decode error of the Metadata v12 response, got {other:?}"),
        }
        // The client got no response, only the close.
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut client_read, &mut rest).await.expect("read to the close");
        assert!(rest.is_empty(), "{rest:?}");
        drop(broker.await.expect("broker"));
    }

    #[test]
    fn sasl_users() {
        assert_eq!(sasl_user("PLAIN", b"\0alice\0secret").as_deref(), Some("alice"));
        assert_eq!(sasl_user("PLAIN", b"admin\0alice\0secret").as_deref(), Some("admin"));
        assert_eq!(sasl_user("PLAIN", b"alice"), None);
        assert_eq!(sasl_user("SCRAM-SHA-256", b"n,,n=bob=2Cx,r=abc").as_deref(), Some("bob,x"));
        assert_eq!(sasl_user("SCRAM-SHA-512", b"n,a=z,n=carol,r=abc").as_deref(), Some("carol"));
        // A SCRAM client-final message has no user.
        assert_eq!(sasl_user("SCRAM-SHA-512", b"c=biws,r=abc,p=xyz"), None);
        assert_eq!(sasl_user("GSSAPI", b"whatever"), None);
    }

    /// A panic in a session becomes its error (the proxy's fault, logged as an error), and a session
    /// that ends is passed through.
    #[tokio::test]
    async fn a_panicking_session_is_a_session_error() {
        async fn panics() -> Result<(), SessionError> {
            panic!("slice index starts at 9 but ends at 4")
        }
        let err = unpanicked(panics()).await.unwrap_err();
        assert!(matches!(&err, SessionError::Panicked { message } if message == "slice index starts at 9 but ends at 4"), "{err:?}");
        assert!(!err.is_client_fault() && !err.is_normal_close());
        assert!(unpanicked(async { Ok(()) }).await.is_ok());
    }
}
