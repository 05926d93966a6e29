//! A minimal Kafka-protocol server that serves only ApiVersions and the mirror APIs through an
//! [`AdminHandler`]: for running the control plane without the proxy's listener (tests, or a
//! dedicated admin port). Requests of other APIs close the connection, as a broker does for keys it
//! does not know.
//!
//! ```text
//!   AdminServer::bind ── accept loop task ──► one task per connection:
//!        read frame ─► ApiVersions (answered here) | mirror api (AdminHandler::handle) ─► write frame
//! ```
//!
//! Requests of one connection are answered one at a time, in order. Every task is tracked and ends
//! on [`AdminServer::shutdown`].

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::protocol::Encodable;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::handler::{AdminHandler, api_versions};
use crate::protocol::mirror::{decode_request_header, encode_response};
use crate::protocol::{FrameDecoder, encode_frame};

/// Largest request accepted, bytes (mirror requests are small).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;
/// The principal of clients of this server (it does not authenticate).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

const API_VERSIONS_KEY: i16 = 18;
/// Highest ApiVersions version answered (KIP-511 v3 and v4 share the layout of v3).
const API_VERSIONS_MAX: i16 = 4;

/// A running admin server.
#[derive(Debug)]
pub struct AdminServer {
    local_addr: SocketAddr,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl AdminServer {
    /// Listens on `addr` (e.g. `127.0.0.1:0`) and serves `handler`.
    ///
    /// # Errors
    /// The bind failure.
    pub async fn bind(addr: &str, handler: AdminHandler) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let (accept_cancel, accept_tasks) = (cancel.clone(), tasks.clone());
        tasks.spawn(async move {
            loop {
                let accepted = tokio::select! {
                    biased;
                    () = accept_cancel.cancelled() => return,
                    a = listener.accept() => a,
                };
                match accepted {
                    Ok((stream, peer)) => {
                        let (handler, cancel) = (handler.clone(), accept_cancel.clone());
                        accept_tasks.spawn(async move {
                            tokio::select! {
                                biased;
                                () = cancel.cancelled() => {}
                                r = serve(stream, &handler) => {
                                    if let Err(e) = r {
                                        debug!(client.addr = %peer, error = %e, "admin connection closed");
                                    }
                                }
                            }
                        });
                    }
                    Err(e) => {
                        debug!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                }
            }
        });
        Ok(Self { local_addr, cancel, tasks })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops accepting, closes every connection and waits for the tasks.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn serve(stream: TcpStream, handler: &AdminHandler) -> Result<(), crate::protocol::FrameError> {
    let (read, mut write) = stream.into_split();
    let mut frames = FramedRead::new(read, FrameDecoder::new(MAX_REQUEST_BYTES));
    while let Some(frame) = frames.next().await {
        let frame = frame?;
        let Some(response) = respond(&frame, handler).await else { return Ok(()) };
        write.write_all(&encode_frame(&response)?).await?;
    }
    Ok(())
}

/// The response frame body for one request frame; `None` closes the connection.
async fn respond(frame: &Bytes, handler: &AdminHandler) -> Option<Bytes> {
    let head: [u8; 8] = frame.get(..8)?.try_into().ok()?;
    let api_key = i16::from_be_bytes([head[0], head[1]]);
    let api_version = i16::from_be_bytes([head[2], head[3]]);
    let correlation_id = i32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    if api_key == API_VERSIONS_KEY {
        return Some(api_versions_response(correlation_id, api_version));
    }
    let (header, body) = decode_request_header(frame).ok()?;
    let response = handler.handle(header.api_key, header.api_version, body, ANONYMOUS).await?;
    Some(encode_response(correlation_id, &response))
}

/// ApiVersions: this server's apis; response header v0 whatever the version (KIP-511). An
/// unsupported version gets a v0 response with UNSUPPORTED_VERSION, as brokers answer.
fn api_versions_response(correlation_id: i32, requested: i16) -> Bytes {
    let (version, error_code) = if (0..=API_VERSIONS_MAX).contains(&requested) { (requested, 0) } else { (0, 35) };
    let mut keys = vec![ApiVersion::default().with_api_key(API_VERSIONS_KEY).with_min_version(0).with_max_version(API_VERSIONS_MAX)];
    keys.extend(api_versions().into_iter().map(|(k, min, max)| ApiVersion::default().with_api_key(k).with_min_version(min).with_max_version(max)));
    let response = ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(keys);
    let mut out = BytesMut::new();
    out.put_i32(correlation_id);
    response.encode(&mut out, version).expect("invariant: ApiVersionsResponse encodes at versions 0-4");
    out.freeze()
}
