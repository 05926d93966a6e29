//! Large Fetch responses, and large Produce requests the write policy lets through whole, forwarded
//! as their bytes arrive (cut-through) instead of whole.
//!
//! Why: a bulk consumer's Fetch responses run to megabytes (`fetch.max.bytes` is 50 MiB by default).
//! Held whole, every connection may hold one of them; streamed, a connection holds at most [`CHUNK`]
//! bytes of it. And the record sets, nearly all of the bytes, need not pass through user space at
//! all: they are spliced socket to socket when both sides are plain TCP ([`super::splice`]), which
//! measured 15% less proxy CPU per consumed megabyte (BENCHMARKS.md).
//!
//! What it must keep: every byte of the broker's response, in order, under the length prefix the
//! broker announced (sent first, before the rest has arrived). The one field the proxy rewrites in a
//! Fetch response, the KIP-951 `node_endpoints` (v16+, a tagged field at the very end), is therefore
//! rewritten within the same number of bytes: the rewritten endpoints plus, if they are shorter, a
//! padding tagged field (tag [`PAD_TAG`], zero bytes; unknown tags are skipped by every client,
//! KIP-482). If the proxy's endpoints are longer than the broker's, or shorter by only 1 or 2 bytes
//! (the smallest padding field is 3), they cannot fit and the field is replaced by padding alone: the
//! client then refreshes its metadata to find the new leader, as it does with Fetch v15 and older
//! (counted in `kafka_mirror_proxy_streamed_endpoints_dropped_total`). Only responses of
//! [`STREAM_FROM_BYTES`] (64 KiB) or more are streamed; error responses that carry endpoints are
//! small and take the whole-frame path ([`super::rewrite`]), which rewrites them without that limit.
//!
//! Fetch v0–v15 cannot carry endpoints and are forwarded without being read (after the correlation
//! id). v16+ bodies are walked as they pass: only the fixed-size fields and lengths are read.
//!
//! Produce requests: [`peek_large`] reads the head of a large request (its header and first topic,
//! at most [`super::session`]'s 16 KiB), the session decides with the write policy, and
//! [`forward_frame`] forwards the request unchanged, the rest of it spliced from the client's socket
//! to the broker's. On this VM the kernel's copy on sending a request was 89.5% of a proxy's CPU on
//! the producer path (BENCHMARKS.md).
//!
//! Must not touch: record bytes (never parsed here), any API other than Fetch and Produce, a
//! Produce request the session has not decided to stream.

use std::collections::HashMap;
use std::future::Future;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use futures_util::StreamExt as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_util::codec::{Decoder as _, FramedRead};

use super::error::ProxyError;
use super::rewrite::node_endpoints::{self, NodeEndpoint};
use super::rewrite::{BrokerEndpoint, Endpoint};
use super::splice::{AsTcp, Pipe, SpliceError, splice_exact};
use super::wire::{Reader, WireError, put_uvarint};
use crate::protocol::frame::{FrameDecoder, FrameError};

/// Fetch responses at least this long (body, without the length prefix) are streamed. Smaller ones
/// (a consumer keeping up with a producer fetches a few KiB at a time) go whole. It was 1 MiB while
/// the latency tool spun on a core and streamed mid-size responses seemed to add p99 outliers; with
/// the tool fixed, 64 KiB gave the same latency (4 trials each at 33,000 records/s) and 5% less
/// proxy CPU on bulk reads, and it caps what a connection holds of a response at 64 KiB plus one
/// [`CHUNK`] (BENCHMARKS.md, "Streaming Fetch responses from 64 KiB").
pub(crate) const STREAM_FROM_BYTES: usize = 64 * 1024;
/// Record sets with at least this many bytes still to come are spliced (plain TCP on both sides).
const SPLICE_FROM_BYTES: usize = 64 * 1024;
/// The most bytes read from the broker before they are written to the client.
const CHUNK: usize = 128 * 1024;
/// The tag of the padding field that keeps a rewritten tail at the broker's length. A 2-byte varint,
/// far above the tags Kafka assigns (0, 1, 2 …) so that no client reads it as a field it knows.
pub(crate) const PAD_TAG: u32 = 16_383;
/// First Fetch version with `node_endpoints` (KIP-951).
const FIRST_VERSION_WITH_ENDPOINTS: i16 = 16;

/// What went wrong while a response was streamed. The client has received part of it, so the
/// session ends.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// Reading the frame failed or its sender closed mid-frame (the broker for a response, the client
    /// for a request).
    #[error("reading the frame failed")]
    Read(#[source] FrameError),
    /// Forwarding the frame failed: writing to the client for a response, to the broker for a request.
    #[error("forwarding the frame failed")]
    Write(#[source] std::io::Error),
    /// The response did not match the Fetch schema of its version.
    #[error("Fetch v{api_version} response does not match its schema")]
    Malformed {
        api_version: i16,
        #[source]
        source: WireError,
    },
    /// The response answered another request.
    #[error("response to correlation id {got}, expected {expected}")]
    CorrelationMismatch { expected: i32, got: i32 },
    /// A leader endpoint could not be mapped to a proxy listener.
    #[error("mapping leader endpoints failed")]
    Endpoint(#[source] ProxyError),
}

/// How a streamed response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Streamed {
    /// Bytes written to the client, length prefix included.
    pub(crate) bytes: usize,
    /// The leader endpoints were rewritten (or dropped, see [`Streamed::endpoints_dropped`]).
    pub(crate) rewritten: bool,
    /// The proxy's endpoints did not fit in the broker's bytes and were left out.
    pub(crate) endpoints_dropped: bool,
    /// Bytes moved socket to socket without being copied (see [`super::splice`]).
    pub(crate) spliced: usize,
}

/// The announced length of the next frame in `rx`, reading from the broker until its four bytes are
/// there. `None` when the broker closed first or announced a length `rx`'s decoder refuses: the
/// frame path ([`next_frame`]) then reports it. The bytes stay in `rx`'s buffer either way, so the
/// next frame must be taken with [`next_frame`], not `rx.next()` (which reads the socket before
/// decoding what a read of its own did not put there).
///
/// # Errors
/// The broker's socket failed.
pub(crate) async fn peek_frame_len<R: AsyncRead + Unpin>(rx: &mut FramedRead<R, FrameDecoder>) -> std::io::Result<Option<usize>> {
    loop {
        match rx.decoder().announced_len(rx.read_buffer()) {
            Ok(Some(len)) => return Ok(Some(len)),
            Err(_) => return Ok(None),
            Ok(None) => {}
        }
        if read_some(rx, CHUNK).await? == 0 {
            return Ok(None);
        }
    }
}

/// The length of the next frame in `rx` if it is `large_from` bytes or longer (length prefix
/// included), once its first `head` bytes (or all of it, if shorter) are in `rx`'s buffer; `None`
/// for a shorter frame, a closed stream or a length the decoder refuses (take it with
/// [`next_frame`], which reports the last two). Reads at most `head` bytes at a time, so the body
/// of a large frame stays in the socket for [`forward_frame`] to splice.
///
/// # Cancel safety
/// Cancel safe: what was read stays in `rx`'s buffer.
///
/// # Errors
/// The socket failed.
pub(crate) async fn peek_large<R: AsyncRead + Unpin>(rx: &mut FramedRead<R, FrameDecoder>, large_from: usize, head: usize) -> std::io::Result<Option<usize>> {
    loop {
        let buffered = rx.read_buffer().len();
        match rx.decoder().announced_len(rx.read_buffer()) {
            Err(_) => return Ok(None),
            Ok(Some(len)) if len + 4 < large_from => return Ok(None),
            Ok(Some(len)) if buffered >= (len + 4).min(head) => return Ok(Some(len)),
            Ok(_) => {}
        }
        if read_some(rx, head.saturating_sub(buffered).max(1)).await? == 0 {
            return Ok(None);
        }
    }
}

/// Reads at most `max` bytes from `rx`'s stream into its buffer; 0 at the end of the stream.
///
/// # Cancel safety
/// Cancel safe: the buffer is taken out of `rx` for the read and put back also when the read is
/// dropped (and a dropped `read_buf` has read nothing).
async fn read_some<R: AsyncRead + Unpin>(rx: &mut FramedRead<R, FrameDecoder>, max: usize) -> std::io::Result<usize> {
    struct Restore<'a, R> {
        rx: &'a mut FramedRead<R, FrameDecoder>,
        buf: BytesMut,
    }
    impl<R> Drop for Restore<'_, R> {
        fn drop(&mut self) {
            *self.rx.read_buffer_mut() = std::mem::take(&mut self.buf);
        }
    }
    let buf = std::mem::take(rx.read_buffer_mut());
    let mut restore = Restore { rx, buf };
    let Restore { rx, buf } = &mut restore;
    buf.reserve(max);
    rx.get_mut().read_buf(&mut (&mut *buf).limit(max)).await
}

/// The next whole frame from `rx`: one already in its buffer first (see [`peek_frame_len`]), else
/// read by `rx` itself.
pub(crate) async fn next_frame<R: AsyncRead + Unpin>(rx: &mut FramedRead<R, FrameDecoder>) -> Option<Result<Bytes, FrameError>> {
    let mut decoder = rx.decoder().clone();
    match decoder.decode(rx.read_buffer_mut()) {
        Ok(Some(frame)) => Some(Ok(frame)),
        Err(e) => Some(Err(e)),
        Ok(None) => rx.next().await,
    }
}

/// Forwards the frame of `len` bytes (after its length prefix) at the head of `rx` to `to` as it is:
/// what `rx` has buffered of it first, then the rest as it arrives, spliced socket to socket in
/// pieces of [`SPLICE_FROM_BYTES`] or more when `pipe` is given and both are plain TCP sockets.
/// Nothing past the frame is read. Returns the bytes spliced. `api_version` only names the frame in
/// errors.
///
/// # Errors
/// [`StreamError::Read`] or [`StreamError::Write`]; part of the frame may have been written.
pub(crate) async fn forward_frame<R, W>(
    rx: &mut FramedRead<R, FrameDecoder>,
    len: usize,
    api_version: i16,
    to: &mut W,
    pipe: Option<&Pipe>,
) -> Result<usize, StreamError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
{
    let total = 4 + len;
    let mut walk = Walk { src: Source { rx, left: total, total }, buf: BytesMut::new(), pos: 0, client: to, api_version, pipe, spliced: 0 };
    walk.advance(total).await?;
    walk.flush().await?;
    Ok(walk.spliced)
}

/// Forwards the Fetch response of `len` bytes at the head of `rx` to `client` as it arrives (see the
/// module doc), checking its correlation id, and rewriting its leader endpoints with `map_endpoints`.
/// Record sets go through `pipe` when both sides are plain TCP sockets.
///
/// # Errors
/// [`StreamError`]; part of the response may have been written.
pub(crate) async fn forward_fetch<R, W, F, Fut>(
    rx: &mut FramedRead<R, FrameDecoder>,
    len: usize,
    api_version: i16,
    correlation_id: i32,
    client: &mut W,
    pipe: Option<&Pipe>,
    map_endpoints: F,
) -> Result<Streamed, StreamError>
where
    R: AsyncRead + Unpin + AsTcp,
    W: AsyncWrite + Unpin + AsTcp,
    F: FnOnce(Vec<BrokerEndpoint>) -> Fut,
    Fut: Future<Output = Result<HashMap<i32, Endpoint>, ProxyError>>,
{
    let total = 4 + len;
    let mut walk = Walk { src: Source { rx, left: total, total }, buf: BytesMut::with_capacity(CHUNK), pos: 0, client, api_version, pipe, spliced: 0 };
    walk.need(8).await?;
    walk.pos = 4;
    let got = walk.i32();
    if got != correlation_id {
        return Err(StreamError::CorrelationMismatch { expected: correlation_id, got });
    }
    let mut outcome = Streamed { bytes: total, rewritten: false, endpoints_dropped: false, spliced: 0 };
    if api_version < FIRST_VERSION_WITH_ENDPOINTS {
        let rest = walk.src.left + walk.buf.len() - walk.pos;
        walk.advance(rest).await?;
    } else {
        walk.skip_tagged_fields().await?; // response header v1
        walk.body().await?;
        let tail_len = walk.src.left + walk.buf.len() - walk.pos;
        walk.need(tail_len).await?;
        let tail = &walk.buf[walk.pos..];
        if let Some(nodes) = node_endpoints(tail).map_err(|source| StreamError::Malformed { api_version, source })? {
            let endpoints: Vec<BrokerEndpoint> = nodes.iter().map(NodeEndpoint::broker_endpoint).collect();
            let map = map_endpoints(endpoints).await.map_err(StreamError::Endpoint)?;
            let (new_tail, dropped) = rewrite_tail(tail, &map).map_err(|source| StreamError::Malformed { api_version, source })?;
            let pos = walk.pos;
            walk.buf.truncate(pos);
            walk.buf.extend_from_slice(&new_tail);
            outcome.rewritten = true;
            outcome.endpoints_dropped = dropped;
        }
        walk.pos = walk.buf.len();
    }
    walk.flush().await?;
    outcome.spliced = walk.spliced;
    Ok(outcome)
}

/// The bytes of one frame, taken from the broker connection's read buffer first, then from its socket
/// (never past the frame, so the next response stays for the frame reader).
struct Source<'a, R> {
    rx: &'a mut FramedRead<R, FrameDecoder>,
    /// Bytes of the frame not taken yet.
    left: usize,
    total: usize,
}

impl<R: AsyncRead + Unpin> Source<'_, R> {
    /// Appends at least one and at most `max` more bytes of the frame to `into` (none once the frame
    /// is all taken).
    async fn pull(&mut self, into: &mut BytesMut, max: usize) -> Result<usize, StreamError> {
        let max = max.min(self.left);
        if max == 0 {
            return Ok(0);
        }
        let buffered = self.rx.read_buffer_mut();
        let n = if buffered.is_empty() {
            into.reserve(max);
            let n = self.rx.get_mut().read_buf(&mut (&mut *into).limit(max)).await.map_err(|e| StreamError::Read(FrameError::Io(e)))?;
            if n == 0 {
                return Err(StreamError::Read(FrameError::Truncated { buffered: self.total - self.left, expected: self.total }));
            }
            n
        } else {
            let n = max.min(buffered.len());
            into.extend_from_slice(&buffered[..n]);
            buffered.advance(n);
            n
        };
        self.left -= n;
        Ok(n)
    }
}

/// A walk over one response: `buf[..pos]` is walked and not yet written, `buf[pos..]` taken from the
/// broker and not yet walked.
struct Walk<'a, R, W> {
    src: Source<'a, R>,
    buf: BytesMut,
    pos: usize,
    client: &'a mut W,
    api_version: i16,
    pipe: Option<&'a Pipe>,
    spliced: usize,
}

impl<R: AsyncRead + Unpin + AsTcp, W: AsyncWrite + Unpin + AsTcp> Walk<'_, R, W> {
    fn truncated(&self, needed: usize, what: &'static str) -> StreamError {
        let offset = self.src.total - self.src.left - (self.buf.len() - self.pos);
        let remaining = self.buf.len() - self.pos;
        StreamError::Malformed { api_version: self.api_version, source: WireError::Truncated { what, offset, needed, remaining } }
    }

    /// Makes `n` unwalked bytes available in `buf`.
    async fn need(&mut self, n: usize) -> Result<(), StreamError> {
        while self.buf.len() - self.pos < n {
            let want = (n - (self.buf.len() - self.pos)).max(CHUNK);
            if self.src.pull(&mut self.buf, want).await? == 0 {
                return Err(self.truncated(n, "field"));
            }
        }
        Ok(())
    }

    /// Walks past `n` bytes: in place if they are here, else written out as they arrive.
    async fn advance(&mut self, n: usize) -> Result<(), StreamError> {
        let here = self.buf.len() - self.pos;
        if n <= here {
            self.pos += n;
            return Ok(());
        }
        if n - here > self.src.left {
            return Err(self.truncated(n, "record set"));
        }
        self.pos = self.buf.len();
        self.flush().await?;
        let mut rest = n - here;
        while rest > 0 {
            if rest >= SPLICE_FROM_BYTES && self.src.rx.read_buffer().is_empty() {
                if let (Some(pipe), Some(from), Some(to)) = (self.pipe, self.src.rx.get_ref().tcp(), self.client.tcp()) {
                    splice_exact(from, to, pipe, rest).await.map_err(|e| match e {
                        SpliceError::Read(e) => StreamError::Read(FrameError::Io(e)),
                        SpliceError::Closed { left } => {
                            StreamError::Read(FrameError::Truncated { buffered: self.src.total - self.src.left + rest - left, expected: self.src.total })
                        }
                        SpliceError::Write(e) => StreamError::Write(e),
                    })?;
                    self.src.left -= rest;
                    self.spliced += rest;
                    return Ok(());
                }
            }
            let got = self.src.pull(&mut self.buf, rest.min(CHUNK)).await?;
            self.client.write_all(&self.buf).await.map_err(StreamError::Write)?;
            self.buf.clear();
            rest -= got;
        }
        Ok(())
    }

    /// Writes the walked bytes to the client.
    async fn flush(&mut self) -> Result<(), StreamError> {
        if self.pos > 0 {
            self.client.write_all(&self.buf[..self.pos]).await.map_err(StreamError::Write)?;
            self.buf.advance(self.pos);
            self.pos = 0;
        }
        if self.src.left == 0 && self.buf.is_empty() {
            self.client.flush().await.map_err(StreamError::Write)?;
        }
        Ok(())
    }

    fn i32(&mut self) -> i32 {
        let b = &self.buf[self.pos..self.pos + 4];
        self.pos += 4;
        i32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// An unsigned varint, read by [`Reader::uvarint`] once its (at most 5) bytes are here.
    async fn uvarint(&mut self) -> Result<u32, StreamError> {
        let unwalked = self.src.left + self.buf.len() - self.pos;
        self.need(unwalked.min(5)).await?;
        let mut r = Reader::at(&self.buf, self.pos);
        let value = r.uvarint().map_err(|_| {
            let offset = self.src.total - self.src.left - (self.buf.len() - self.pos);
            StreamError::Malformed { api_version: self.api_version, source: WireError::BadVarint { offset } }
        })?;
        self.pos = r.pos();
        Ok(value)
    }

    /// A compact length (N+1, 0 = null): `None` for null.
    async fn compact_len(&mut self) -> Result<Option<usize>, StreamError> {
        Ok((self.uvarint().await? as usize).checked_sub(1))
    }

    async fn skip_tagged_fields(&mut self) -> Result<(), StreamError> {
        for _ in 0..self.uvarint().await? {
            let _tag = self.uvarint().await?;
            let size = self.uvarint().await? as usize;
            self.advance(size).await?;
        }
        Ok(())
    }

    /// Walks a flexible Fetch response body (v16+) up to its top-level tagged fields.
    async fn body(&mut self) -> Result<(), StreamError> {
        self.need(10).await?;
        self.pos += 10; // throttle_time_ms, error_code, session_id
        for _ in 0..self.compact_len().await?.unwrap_or(0) {
            self.advance(16).await?; // topic_id (v13+)
            for _ in 0..self.compact_len().await?.unwrap_or(0) {
                // partition_index, error_code, high_watermark, last_stable_offset, log_start_offset
                self.advance(4 + 2 + 8 + 8 + 8).await?;
                for _ in 0..self.compact_len().await?.unwrap_or(0) {
                    self.advance(16).await?; // producer_id, first_offset
                    self.skip_tagged_fields().await?;
                }
                self.advance(4).await?; // preferred_read_replica
                if let Some(records) = self.compact_len().await? {
                    self.advance(records).await?;
                }
                self.skip_tagged_fields().await?;
            }
            self.skip_tagged_fields().await?;
        }
        Ok(())
    }
}

/// The tagged fields of a tail: `(tag, data)`, checked to end exactly at the tail's end.
fn tagged_fields(tail: &[u8]) -> Result<Vec<(u32, &[u8])>, WireError> {
    let mut r = Reader::new(tail);
    let count = r.uvarint()?;
    let mut out = Vec::new();
    for _ in 0..count {
        let tag = r.uvarint()?;
        let size = r.uvarint()? as usize;
        let start = r.pos();
        r.skip(size, "tagged field")?;
        out.push((tag, &tail[start..r.pos()]));
    }
    r.finish()?;
    Ok(out)
}

/// The leader endpoints in a Fetch response's top-level tagged fields (`None`: none there).
pub(crate) fn node_endpoints(tail: &[u8]) -> Result<Option<Vec<NodeEndpoint>>, WireError> {
    let Some(&(_, data)) = tagged_fields(tail)?.iter().find(|(tag, _)| *tag == 0) else {
        return Ok(None);
    };
    let mut r = Reader::new(data);
    let nodes = node_endpoints::read(&mut r)?;
    r.finish()?;
    Ok((!nodes.is_empty()).then_some(nodes))
}

/// The tail with its `node_endpoints` mapped through `map`, in exactly the tail's length (padded);
/// `true` if the mapped endpoints did not fit and were left out.
pub(crate) fn rewrite_tail(tail: &[u8], map: &HashMap<i32, Endpoint>) -> Result<(Vec<u8>, bool), WireError> {
    let fields = tagged_fields(tail)?;
    let mut nodes = node_endpoints(tail)?.unwrap_or_default();
    node_endpoints::apply(&mut nodes, map);
    let mut endpoints = Vec::new();
    node_endpoints::write(&mut endpoints, &nodes);
    let others = || fields.iter().filter(|(tag, _)| *tag != 0 && *tag < PAD_TAG).copied();
    let with: Vec<(u32, &[u8])> = std::iter::once((0, endpoints.as_slice())).chain(others()).collect();
    if let Some(out) = fit(with, tail.len()) {
        return Ok((out, false));
    }
    let without: Vec<(u32, &[u8])> = others().collect();
    fit(without, tail.len()).map(|out| (out, true)).ok_or(WireError::BadLength { what: "node_endpoints", offset: 0, len: tail.len() as i64 })
}

/// A tagged-field section with `fields` (ascending tags) and padding, exactly `len` bytes long; `None`
/// if it cannot be.
fn fit(mut fields: Vec<(u32, &[u8])>, len: usize) -> Option<Vec<u8>> {
    fields.sort_by_key(|(tag, _)| *tag);
    let encode = |pads: &[usize]| {
        let mut out = Vec::with_capacity(len);
        put_uvarint(&mut out, u32::try_from(fields.len() + pads.len()).ok()?);
        for (tag, data) in &fields {
            put_uvarint(&mut out, *tag);
            put_uvarint(&mut out, u32::try_from(data.len()).ok()?);
            out.extend_from_slice(data);
        }
        for (i, &size) in pads.iter().enumerate() {
            put_uvarint(&mut out, PAD_TAG + i as u32);
            put_uvarint(&mut out, u32::try_from(size).ok()?);
            out.resize(out.len() + size, 0);
        }
        Some(out)
    };
    let exact = |out: Vec<u8>| (out.len() == len).then_some(out);
    if let Some(out) = encode(&[]).and_then(exact) {
        return Some(out);
    }
    // One padding field, or two where a varint boundary skips the one length needed. A first
    // padding field of `size` bytes takes `size` + the length of its size varint more than one of
    // 0 bytes (whose size varint is 1 byte); so `size` + that varint's length must make up the
    // difference, and at most five sizes can (one per varint length), each tried once.
    let sized = |pads: &[usize]| -> Option<Vec<u8>> {
        let short = encode(pads)?.len();
        let room = (len + 1).checked_sub(short)?;
        let mut with = pads.to_vec();
        (1..=5).filter_map(|k| room.checked_sub(k)).filter(|&size| uvarint_len(size) == room - size).find_map(|size| {
            with[0] = size;
            encode(&with).and_then(exact)
        })
    };
    sized(&[0]).or_else(|| sized(&[0, 0]))
}

/// The length of `v` as an unsigned varint.
fn uvarint_len(v: usize) -> usize {
    let bits = usize::BITS - v.leading_zeros();
    bits.div_ceil(7).max(1) as usize
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchResponse, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint as KNodeEndpoint, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, ResponseHeader, TopicName};
    use kafka_protocol::protocol::{Decodable as _, Encodable as _, StrBytes};
    use tokio::io::AsyncRead;

    use super::*;

    /// A reader that returns at most `step` bytes per read.
    struct Trickle {
        data: Bytes,
        step: usize,
    }

    impl AsTcp for Trickle {}

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.step.min(self.data.len()).min(buf.remaining());
            let chunk = self.data.split_to(n);
            buf.put_slice(&chunk);
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// Fetch responses from v12 have header v1 (tagged fields).
    fn header_version(version: i16) -> i16 {
        if version >= 12 { 1 } else { 0 }
    }

    fn response(version: i16, endpoints: &[(i32, &str, i32)], records: usize) -> FetchResponse {
        let partition = |i: i32, error: i16, bytes: usize| {
            PartitionData::default()
                .with_partition_index(i)
                .with_error_code(error)
                .with_high_watermark(1000 + i64::from(i))
                .with_aborted_transactions(Some(vec![
                    AbortedTransaction::default().with_producer_id(kafka_protocol::messages::ProducerId(7)).with_first_offset(3),
                ]))
                .with_records((bytes > 0).then(|| Bytes::from((0..bytes).map(|b| (b % 251) as u8).collect::<Vec<_>>())))
                .with_current_leader(if version >= 12 {
                    LeaderIdAndEpoch::default().with_leader_id(BrokerId(2)).with_leader_epoch(5)
                } else {
                    LeaderIdAndEpoch::default()
                })
        };
        let topic = FetchableTopicResponse::default().with_partitions(vec![partition(0, 0, records), partition(1, 6, 0), partition(2, 0, records / 3)]);
        let topic =
            if version >= 13 { topic.with_topic_id(uuid::Uuid::from_u128(42)) } else { topic.with_topic(TopicName(StrBytes::from_static_str("large-topic"))) };
        let mut r = FetchResponse::default().with_session_id(if version >= 7 { 9 } else { 0 }).with_responses(vec![topic.clone(), topic]);
        if version >= 16 {
            r = r.with_node_endpoints(
                endpoints
                    .iter()
                    .map(|&(id, host, port)| {
                        KNodeEndpoint::default().with_node_id(BrokerId(id)).with_host(StrBytes::from_string(host.to_owned())).with_port(port)
                    })
                    .collect(),
            );
        }
        r
    }

    /// The response as a broker sends it: length prefix, header v1 (tags), body.
    fn frame(version: i16, correlation_id: i32, r: &FetchResponse) -> Bytes {
        let mut body = BytesMut::new();
        ResponseHeader::default().with_correlation_id(correlation_id).encode(&mut body, header_version(version)).expect("header");
        r.encode(&mut body, version).expect("body");
        let mut out = BytesMut::new();
        out.put_i32(i32::try_from(body.len()).expect("len"));
        out.extend_from_slice(&body);
        out.freeze()
    }

    fn decode(version: i16, out: &[u8]) -> FetchResponse {
        let mut b = Bytes::copy_from_slice(&out[4..]);
        let header = ResponseHeader::decode(&mut b, header_version(version)).expect("header");
        assert_eq!(header.correlation_id, 77);
        let r = FetchResponse::decode(&mut b, version).expect("body decodes");
        assert!(b.is_empty(), "{} bytes left over", b.len());
        r
    }

    fn proxy_map(host: &str) -> HashMap<i32, Endpoint> {
        [(1, Endpoint { host: host.to_owned(), port: 19_001 }), (2, Endpoint { host: host.to_owned(), port: 19_002 })].into()
    }

    /// Streams `input` (a frame, then `after`) through [`forward_fetch`], `step` bytes per read.
    async fn stream(input: &Bytes, after: &[u8], version: i16, step: usize, map: HashMap<i32, Endpoint>) -> (Vec<u8>, Streamed, Bytes) {
        let mut data = BytesMut::from(&input[..]);
        data.extend_from_slice(after);
        let mut rx = FramedRead::new(Trickle { data: data.freeze(), step }, FrameDecoder::new(64 << 20));
        let len = peek_frame_len(&mut rx).await.expect("peek").expect("a frame");
        let mut out = Vec::new();
        let done = forward_fetch(&mut rx, len, version, 77, &mut out, None, |_| async move { Ok(map) }).await.expect("streamed");
        // The next frame is left for the frame reader.
        let next = next_frame(&mut rx).await.map(|f| f.expect("next frame")).unwrap_or_default();
        (out, done, next)
    }

    #[tokio::test]
    async fn responses_without_endpoints_pass_byte_for_byte() {
        for version in [5, 11, 12, 13, 15, 16, 17] {
            let input = frame(version, 77, &response(version, &[], 200_000));
            for step in [1 << 20, 7, 4096] {
                if step == 7 && version != 17 {
                    continue; // byte-sized reads are slow; one version is enough
                }
                let (out, done, next) = stream(&input, &[0, 0, 0, 2, 1, 2], version, step, HashMap::new()).await;
                assert_eq!(out, input.to_vec(), "v{version} step {step}");
                assert_eq!(done, Streamed { bytes: input.len(), rewritten: false, endpoints_dropped: false, spliced: 0 });
                assert_eq!(next.as_ref(), &[1, 2]);
            }
        }
    }

    #[tokio::test]
    async fn leader_endpoints_are_rewritten_within_the_same_length() {
        let broker = response(17, &[(1, "broker-one.example", 9092), (2, "broker-two.example", 9092)], 150_000);
        let input = frame(17, 77, &broker);
        for (host, dropped) in [("proxy.example", false), ("broker-one.example", false), ("a-much-longer-proxy-host.example.org", true)] {
            let (out, done, _) = stream(&input, &[], 17, 5000, proxy_map(host)).await;
            assert_eq!(out.len(), input.len(), "{host}");
            assert_eq!(out[..4], input[..4]);
            assert_eq!(done, Streamed { bytes: input.len(), rewritten: true, endpoints_dropped: dropped, spliced: 0 });
            let got = decode(17, &out);
            let mut want = broker.clone();
            if dropped {
                want.node_endpoints.clear();
            } else {
                for n in &mut want.node_endpoints {
                    n.host = StrBytes::from_string(host.to_owned());
                    n.port = 19_000 + n.node_id.0;
                }
            }
            // Everything but the endpoints (and the padding, an unknown tag) is the broker's.
            let padded = got.unknown_tagged_fields.keys().all(|&t| t >= i32::try_from(PAD_TAG).expect("tag"));
            assert!(padded, "{:?}", got.unknown_tagged_fields.keys());
            let mut got = got;
            got.unknown_tagged_fields.clear();
            assert_eq!(got, want, "{host}");
        }
    }

    #[tokio::test]
    async fn the_mapper_sees_the_brokers_endpoints() {
        let input = frame(16, 77, &response(16, &[(2, "b2", 9094)], 70_000));
        let mut rx = FramedRead::new(Trickle { data: input.clone(), step: 1 << 16 }, FrameDecoder::new(1 << 20));
        let len = peek_frame_len(&mut rx).await.expect("peek").expect("frame");
        let mut out = Vec::new();
        let mut seen = Vec::new();
        forward_fetch(&mut rx, len, 16, 77, &mut out, None, |e| {
            seen = e;
            async { Ok(proxy_map("p")) }
        })
        .await
        .expect("streamed");
        assert_eq!(seen, vec![(2, "b2".to_owned(), 9094)]);
    }

    #[tokio::test]
    async fn wrong_correlation_id_truncation_and_garbage_are_errors() {
        let input = frame(17, 5, &response(17, &[], 100_000));
        let mut rx = FramedRead::new(Trickle { data: input.clone(), step: 1 << 16 }, FrameDecoder::new(1 << 20));
        let len = peek_frame_len(&mut rx).await.expect("peek").expect("frame");
        let e = forward_fetch(&mut rx, len, 17, 77, &mut Vec::new(), None, |_| async { Ok(HashMap::new()) }).await.expect_err("wrong id");
        assert!(matches!(e, StreamError::CorrelationMismatch { expected: 77, got: 5 }), "{e:?}");

        let input = frame(17, 77, &response(17, &[], 100_000));
        let cut = input.slice(..input.len() - 10);
        let mut rx = FramedRead::new(Trickle { data: cut, step: 1 << 16 }, FrameDecoder::new(1 << 20));
        let e = forward_fetch(&mut rx, len, 17, 77, &mut Vec::new(), None, |_| async { Ok(HashMap::new()) }).await.expect_err("cut");
        assert!(matches!(e, StreamError::Read(FrameError::Truncated { .. })), "{e:?}");

        // A record set announced longer than the frame.
        let mut bad = BytesMut::new();
        bad.put_i32(70_000);
        bad.put_i32(77);
        bad.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]); // tags, throttle, error, session, 1 topic
        bad.resize(70_004, 0xff);
        let mut rx = FramedRead::new(Trickle { data: bad.freeze(), step: 1 << 16 }, FrameDecoder::new(1 << 20));
        let e = forward_fetch(&mut rx, 70_000, 17, 77, &mut Vec::new(), None, |_| async { Ok(HashMap::new()) }).await.expect_err("garbage");
        assert!(matches!(e, StreamError::Malformed { api_version: 17, .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_large_frame_is_peeked_by_its_head_and_forwarded_exactly() {
        let big: Vec<u8> = (0..200 * 1024).map(|i| (i % 251) as u8).collect();
        let mut input = (big.len() as i32).to_be_bytes().to_vec();
        input.extend_from_slice(&big);
        input.extend_from_slice(&3i32.to_be_bytes());
        input.extend_from_slice(b"abc");
        for step in [7, 4096, 1 << 20] {
            let mut rx = FramedRead::new(Trickle { data: Bytes::from(input.clone()), step }, FrameDecoder::new(1 << 20));
            assert_eq!(peek_large(&mut rx, 64 * 1024, 1000).await.unwrap(), Some(big.len()), "step {step}");
            assert_eq!(rx.read_buffer().len(), 1000, "step {step}: the head and no more");
            let mut out = Vec::new();
            assert_eq!(forward_frame(&mut rx, big.len(), 9, &mut out, None).await.unwrap(), 0, "nothing spliced without a pipe");
            assert_eq!(out, input[..4 + big.len()], "step {step}");
            assert_eq!(peek_large(&mut rx, 64 * 1024, 1000).await.unwrap(), None, "step {step}: a small frame");
            assert_eq!(next_frame(&mut rx).await.unwrap().unwrap(), Bytes::from_static(b"abc"), "step {step}");
            assert_eq!(peek_large(&mut rx, 64 * 1024, 1000).await.unwrap(), None, "step {step}: the end");
        }
        // Cut short: the sender closed mid-frame.
        let mut rx = FramedRead::new(Trickle { data: Bytes::from(input[..100_000].to_vec()), step: 4096 }, FrameDecoder::new(1 << 20));
        let len = peek_large(&mut rx, 64 * 1024, 1000).await.unwrap().unwrap();
        let e = forward_frame(&mut rx, len, 9, &mut Vec::new(), None).await.unwrap_err();
        assert!(matches!(e, StreamError::Read(FrameError::Truncated { .. })), "{e:?}");
    }

    #[test]
    fn fit_reaches_every_length() {
        let data = [1_u8; 5];
        // The field alone is 8 bytes; the smallest padding field is 3 (a 2-byte tag, size 0).
        for len in 9..11 {
            assert!(fit(vec![(0, &data[..])], len).is_none(), "{len}");
        }
        for len in (8..9).chain(11..400) {
            let out = fit(vec![(0, &data[..])], len).unwrap_or_else(|| panic!("no fit for {len}"));
            assert_eq!(out.len(), len);
            let fields = tagged_fields(&out).expect("walks");
            assert_eq!(fields[0], (0, &data[..]));
            assert!(fields[1..].iter().all(|(t, d)| *t >= PAD_TAG && d.iter().all(|&b| b == 0)));
        }
        assert!(fit(vec![(0, &data[..])], 7).is_none(), "shorter than the field itself");
        // Around the varint boundaries of the padding's size, up to tails of megabytes (each
        // length is found in a few encodes, not one per candidate size).
        for boundary in [1 << 7, 1 << 14, 1 << 21] {
            for len in boundary - 3..boundary + 8 {
                let out = fit(vec![(0, &data[..])], len).unwrap_or_else(|| panic!("no fit for {len}"));
                assert_eq!(out.len(), len);
                let fields = tagged_fields(&out).expect("walks");
                assert_eq!(fields[0], (0, &data[..]));
            }
        }
        for v in [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, u32::MAX as usize] {
            let mut out = Vec::new();
            put_uvarint(&mut out, u32::try_from(v).expect("u32"));
            assert_eq!(uvarint_len(v), out.len(), "{v}");
        }
    }

    /// `parse_response`, the proxy_response fuzz target's entry, on the tail of a real Fetch v16
    /// response with two endpoints: rewritten in its own length for proxy hosts from empty to far
    /// longer than the brokers' (whose endpoints are then left out).
    #[test]
    fn parse_response_rewrites_a_real_tail_in_its_length() {
        let node = |id: i32, host: &str| KNodeEndpoint::default().with_node_id(BrokerId(id)).with_host(StrBytes::from_string(host.to_owned())).with_port(9092);
        let r = FetchResponse::default().with_node_endpoints(vec![node(1, "broker-1.example"), node(2, "broker-2.example")]);
        let mut body = BytesMut::new();
        r.encode(&mut body, 16).expect("body");
        // throttle_time_ms, error_code, session_id, an empty `responses`: the tail follows.
        let tail = &body[11..];
        assert_eq!(node_endpoints(tail).expect("walks").map(|n| n.len()), Some(2));
        for host_len in 0..64 {
            crate::proxy::parse_response(1, 16, tail, host_len).unwrap_or_else(|e| panic!("host of {host_len} bytes: {e}"));
        }
    }

    proptest::proptest! {
        #[test]
        fn the_tail_walk_never_panics(tail in proptest::collection::vec(proptest::num::u8::ANY, 0..80), host_len in 0usize..40) {
            // The fuzz target's checks: a rewritten tail keeps its length and reads back as the
            // mapped endpoints (or as none, when they had to be left out).
            let parsed = crate::proxy::parse_response(1, 16, &tail, host_len);
            proptest::prop_assert!(!matches!(parsed, Err(crate::proxy::ParseError::Inconsistent(_))), "{:?}", parsed);
        }
    }
}
