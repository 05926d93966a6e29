//! Length-prefixed framing: every Kafka request and response is a big-endian `i32` size followed by
//! that many bytes.
//!
//! The decoder checks the announced size against a configured maximum *before* it reserves memory or
//! waits for the body, so a peer that announces 2 GiB costs nothing. Negative sizes are rejected. It is
//! a [`tokio_util::codec::Decoder`] so connections get partial-frame buffering (and cancel safety of
//! `FramedRead::next`) from tokio-util.
//!
//! # References
//! - <https://kafka.apache.org/protocol.html#protocol_common>

use bytes::{Buf, Bytes, BytesMut};
use tokio_util::codec::Decoder;

/// Default cap on one frame, in bytes (100 MiB, as Kafka's `socket.request.max.bytes`).
pub const MAX_FRAME_BYTES_DEFAULT: usize = 100 * 1024 * 1024;

/// Size of the length prefix.
const LEN_PREFIX: usize = 4;

/// A framing failure. The stream cannot be resynchronised after any of these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix was negative.
    #[error("negative frame length {len}")]
    NegativeLength { len: i32 },
    /// The length prefix announced more than the configured maximum.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes")]
    TooLarge { len: usize, max: usize },
    /// The peer closed the stream in the middle of a frame.
    #[error("connection closed mid-frame ({buffered} of {expected} bytes received)")]
    Truncated { buffered: usize, expected: usize },
    /// The socket failed.
    #[error("i/o error")]
    Io(#[from] std::io::Error),
}

/// Splits a byte stream into frames (without their length prefix).
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_bytes: usize,
}

impl FrameDecoder {
    /// A decoder that refuses frames larger than `max_frame_bytes`.
    pub fn new(max_frame_bytes: usize) -> Self {
        Self { max_frame_bytes }
    }

    /// Reads the announced length at the start of `src`, if four bytes are there, checked against
    /// the maximum.
    ///
    /// # Errors
    /// A negative or oversized length.
    pub(crate) fn announced_len(&self, src: &[u8]) -> Result<Option<usize>, FrameError> {
        let Some(prefix) = src.get(..LEN_PREFIX) else {
            return Ok(None);
        };
        let len = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let len = usize::try_from(len).map_err(|_| FrameError::NegativeLength { len })?;
        if len > self.max_frame_bytes {
            return Err(FrameError::TooLarge { len, max: self.max_frame_bytes });
        }
        Ok(Some(len))
    }
}

impl Decoder for FrameDecoder {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(len) = self.announced_len(src)? else {
            return Ok(None);
        };
        let total = LEN_PREFIX + len;
        if src.len() < total {
            // Reserve only what the (already size-checked) frame still needs.
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(LEN_PREFIX);
        Ok(Some(src.split_to(len).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => {
                let expected = self.announced_len(src)?.map_or(LEN_PREFIX, |len| len + LEN_PREFIX);
                Err(FrameError::Truncated { buffered: src.len(), expected })
            }
        }
    }
}

/// Prepends the length prefix to an encoded message.
///
/// # Errors
/// [`FrameError::TooLarge`] if `body` is longer than `i32::MAX` bytes.
pub fn encode_frame(body: &[u8]) -> Result<Bytes, FrameError> {
    let len = i32::try_from(body.len()).map_err(|_| FrameError::TooLarge { len: body.len(), max: i32::MAX as usize })?;
    let mut out = BytesMut::with_capacity(LEN_PREFIX + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(max: usize, input: &[u8]) -> Result<Vec<Bytes>, FrameError> {
        let mut dec = FrameDecoder::new(max);
        let mut buf = BytesMut::from(input);
        let mut out = Vec::new();
        while let Some(f) = dec.decode(&mut buf)? {
            out.push(f);
        }
        if let Some(f) = dec.decode_eof(&mut buf)? {
            out.push(f);
        }
        Ok(out)
    }

    #[test]
    fn splits_frames() {
        let mut input = Vec::new();
        input.extend_from_slice(&encode_frame(b"abc").unwrap());
        input.extend_from_slice(&encode_frame(b"").unwrap());
        input.extend_from_slice(&encode_frame(b"de").unwrap());
        let frames = decode_all(16, &input).unwrap();
        assert_eq!(frames, vec![Bytes::from_static(b"abc"), Bytes::new(), Bytes::from_static(b"de")]);
    }

    #[test]
    fn rejects_oversized_before_body_arrives() {
        // Only the prefix is present: the decoder must refuse without waiting for 1 GiB.
        let err = decode_all(1024, &(1i32 << 30).to_be_bytes()).unwrap_err();
        assert!(matches!(err, FrameError::TooLarge { len, max: 1024 } if len == 1 << 30));
    }

    #[test]
    fn rejects_negative_length() {
        let err = decode_all(1024, &(-5i32).to_be_bytes()).unwrap_err();
        assert!(matches!(err, FrameError::NegativeLength { len: -5 }));
    }

    #[test]
    fn truncated_at_eof_is_an_error() {
        let mut input = encode_frame(b"hello").unwrap().to_vec();
        input.truncate(6);
        let err = decode_all(1024, &input).unwrap_err();
        assert!(matches!(err, FrameError::Truncated { buffered: 6, expected: 9 }));
        let err = decode_all(1024, &[0, 0]).unwrap_err();
        assert!(matches!(err, FrameError::Truncated { buffered: 2, expected: 4 }));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(input in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = decode_all(32, &input);
        }

        #[test]
        fn round_trip(bodies in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..40), 0..8)) {
            let mut input = Vec::new();
            for b in &bodies { input.extend_from_slice(&encode_frame(b).unwrap()); }
            let frames = decode_all(64, &input).unwrap();
            let frames: Vec<Vec<u8>> = frames.iter().map(|f| f.to_vec()).collect();
            proptest::prop_assert_eq!(frames, bodies);
        }
    }
}
