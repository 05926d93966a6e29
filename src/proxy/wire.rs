//! Reading Kafka's primitive types out of untrusted client bytes, without trusting any count.
//!
//! The `kafka-protocol` crate decodes arrays with `Vec::with_capacity(count)` taken from the wire,
//! so a 30-byte request announcing 2^31 elements would make it reserve gigabytes. Client requests
//! the proxy must inspect are therefore walked with this [`Reader`]: every length is checked against
//! the bytes actually left before it is used, nothing is preallocated, and every read is bounds
//! checked. (Responses come from our own destination brokers and are decoded with `kafka-protocol`,
//! or walked with this reader where they need only a few fields or the crate lacks their version:
//! Produce and Fetch endpoint checks, ShareFetch and ShareAcknowledge.)
//!
//! Also: the request header prefix ([`RequestHead`]) every request starts with, and the writers for
//! array lengths used when a request is rebuilt without some of its entries.
//!
//! # References
//! - Primitive types: <https://kafka.apache.org/protocol.html#protocol_types>
//! - Request header v1/v2: <https://kafka.apache.org/protocol.html#protocol_messages>
//! - Tagged fields: KIP-482

use std::ops::Range;

use bytes::BufMut;

/// A client request could not be read. Carries where reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes ended before a field.
    #[error("truncated: {what} at byte {offset} needs {needed} bytes, {remaining} left")]
    Truncated { what: &'static str, offset: usize, needed: usize, remaining: usize },
    /// A length or count was negative (other than the -1 null marker) or longer than the bytes left.
    #[error("invalid length {len} of {what} at byte {offset}")]
    BadLength { what: &'static str, offset: usize, len: i64 },
    /// A varint ran past 5 bytes.
    #[error("malformed varint at byte {offset}")]
    BadVarint { offset: usize },
    /// Bytes were left after the message.
    #[error("{extra} trailing bytes after the message")]
    Trailing { extra: usize },
    /// A non-nullable field was null.
    #[error("{what} at byte {offset} is null")]
    UnexpectedNull { what: &'static str, offset: usize },
}

/// A cursor over untrusted bytes.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// A reader positioned at `pos`.
    pub(crate) fn at(buf: &'a [u8], pos: usize) -> Self {
        Self { buf, pos: pos.min(buf.len()) }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated { what, offset: self.pos, needed: n, remaining: self.remaining() });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Skips `n` bytes.
    pub(crate) fn skip(&mut self, n: usize, what: &'static str) -> Result<(), WireError> {
        self.take(n, what).map(drop)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub(crate) fn i8(&mut self, what: &'static str) -> Result<i8, WireError> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }

    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, WireError> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    pub(crate) fn uuid(&mut self, what: &'static str) -> Result<uuid::Uuid, WireError> {
        Ok(uuid::Uuid::from_bytes(self.array(what)?))
    }

    /// An unsigned varint of at most 5 bytes (32 bits).
    pub(crate) fn uvarint(&mut self) -> Result<u32, WireError> {
        let start = self.pos;
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1, "varint").map_err(|_| WireError::BadVarint { offset: start })?[0];
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(WireError::BadVarint { offset: start })
    }

    /// A length: compact (uvarint, N+1, 0 = null) when `flexible`, else `i16`/`i32` per `wide`.
    /// `None` is null. The length is checked against the bytes left times `min_elem_size`.
    fn length(&mut self, flexible: bool, wide: bool, min_elem_size: usize, what: &'static str) -> Result<Option<usize>, WireError> {
        let offset = self.pos;
        let len: i64 = if flexible {
            i64::from(self.uvarint()?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        if len == -1 {
            return Ok(None);
        }
        let ok = usize::try_from(len).ok().filter(|n| n.saturating_mul(min_elem_size.max(1)) <= self.remaining());
        ok.map(Some).ok_or(WireError::BadLength { what, offset, len })
    }

    /// A nullable string's bytes (not checked for UTF-8).
    pub(crate) fn nullable_string(&mut self, flexible: bool, what: &'static str) -> Result<Option<&'a [u8]>, WireError> {
        match self.length(flexible, false, 1, what)? {
            None => Ok(None),
            Some(n) => self.take(n, what).map(Some),
        }
    }

    /// A non-null string as text (invalid UTF-8 is replaced; names are compared, never trusted).
    pub(crate) fn string(&mut self, flexible: bool, what: &'static str) -> Result<String, WireError> {
        let offset = self.pos;
        let bytes = self.nullable_string(flexible, what)?.ok_or(WireError::UnexpectedNull { what, offset })?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Nullable bytes (records), skipped; returns their range.
    pub(crate) fn skip_bytes(&mut self, flexible: bool, what: &'static str) -> Result<Option<Range<usize>>, WireError> {
        match self.length(flexible, true, 1, what)? {
            None => Ok(None),
            Some(n) => {
                let start = self.pos;
                self.take(n, what)?;
                Ok(Some(start..self.pos))
            }
        }
    }

    /// An array's element count (`None`: null). Each element is at least `min_elem_size` bytes, so a
    /// count larger than the bytes left allow is an error before anything is read.
    pub(crate) fn array_len(&mut self, flexible: bool, min_elem_size: usize, what: &'static str) -> Result<Option<usize>, WireError> {
        self.length(flexible, true, min_elem_size, what)
    }

    /// Skips a tagged-field section (flexible versions only).
    pub(crate) fn skip_tagged_fields(&mut self) -> Result<(), WireError> {
        let offset = self.pos;
        let count = self.uvarint()?;
        if count as usize > self.remaining() {
            return Err(WireError::BadLength { what: "tagged fields", offset, len: i64::from(count) });
        }
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size, "tagged field")?;
        }
        Ok(())
    }

    /// Runs `read` and returns the bytes it consumed (to keep a field as it was).
    pub(crate) fn raw(&mut self, read: impl FnOnce(&mut Self) -> Result<(), WireError>) -> Result<&'a [u8], WireError> {
        let start = self.pos;
        read(self)?;
        Ok(&self.buf[start..self.pos])
    }

    /// Checks that every byte was read.
    pub(crate) fn finish(&self) -> Result<(), WireError> {
        match self.remaining() {
            0 => Ok(()),
            extra => Err(WireError::Trailing { extra }),
        }
    }
}

/// The first fields of every request header (all header versions): enough to route, correlate and
/// forward a request without decoding its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    /// `request_api_key`.
    pub api_key: i16,
    /// `request_api_version`.
    pub api_version: i16,
    /// `correlation_id`.
    pub correlation_id: i32,
}

/// Size of the fixed part of a request header.
pub(crate) const REQUEST_HEAD_LEN: usize = 8;

impl RequestHead {
    /// Reads the fixed head of a request frame.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if the frame is shorter than 8 bytes.
    pub fn parse(frame: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(frame);
        Ok(Self { api_key: r.i16("request_api_key")?, api_version: r.i16("request_api_version")?, correlation_id: r.i32("correlation_id")? })
    }
}

/// Where the body of a request starts, given whether its header is v2 (flexible, with tagged
/// fields) or v1, and the `client_id` bytes (a classic, non-compact, nullable string in both; not
/// checked for UTF-8, not copied: this is on every inspected request's path).
///
/// # Errors
/// A truncated or malformed header.
pub(crate) fn request_body_offset(frame: &[u8], flexible_header: bool) -> Result<(usize, Option<&[u8]>), WireError> {
    let mut r = Reader::at(frame, REQUEST_HEAD_LEN);
    if frame.len() < REQUEST_HEAD_LEN {
        return Err(WireError::Truncated { what: "request header", offset: 0, needed: REQUEST_HEAD_LEN, remaining: frame.len() });
    }
    let client_id = r.nullable_string(false, "client_id")?;
    if flexible_header {
        r.skip_tagged_fields()?;
    }
    Ok((r.pos(), client_id))
}

/// Appends an array length: compact (N+1 as uvarint) when `flexible`, else `i32`.
pub(crate) fn put_array_len(out: &mut Vec<u8>, flexible: bool, n: usize) {
    if flexible {
        put_uvarint(out, u32::try_from(n + 1).unwrap_or(u32::MAX));
    } else {
        out.put_i32(i32::try_from(n).unwrap_or(i32::MAX));
    }
}

/// Appends an unsigned varint.
pub(crate) fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_counts_fail_before_reading() {
        // An array announcing 2^31-1 elements in a 4-byte buffer.
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(matches!(r.array_len(false, 1, "topics"), Err(WireError::BadLength { .. })));
        // Compact array: uvarint 0xffffffff.
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(r.array_len(true, 1, "topics"), Err(WireError::BadLength { .. })));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(matches!(r.uvarint(), Err(WireError::BadVarint { .. })));
    }

    #[test]
    fn null_and_lengths() {
        let mut r = Reader::new(&[0xff, 0xff, 0, 2, b'h', b'i', 0, 3, b'a', b'b']);
        assert_eq!(r.nullable_string(false, "s").unwrap(), None);
        assert_eq!(r.string(false, "s").unwrap(), "hi");
        assert!(r.string(false, "s").is_err());
        let mut r = Reader::new(&[0, 3, b'a', b'b', b'c']);
        assert_eq!(r.string(true, "s"), Err(WireError::UnexpectedNull { what: "s", offset: 0 }));
    }

    #[test]
    fn varint_round_trip() {
        for v in [0u32, 1, 127, 128, 300, 16_384, u32::MAX] {
            let mut out = Vec::new();
            put_uvarint(&mut out, v);
            assert_eq!(Reader::new(&out).uvarint().unwrap(), v);
        }
    }

    #[test]
    fn head_and_body_offset() {
        let mut frame = vec![0, 0, 0, 9, 0, 0, 0, 42, 0, 3, b'c', b'l', b'i', 0, 7];
        let head = RequestHead::parse(&frame).unwrap();
        assert_eq!(head, RequestHead { api_key: 0, api_version: 9, correlation_id: 42 });
        assert_eq!(request_body_offset(&frame, true).unwrap(), (14, Some(&b"cli"[..])));
        assert_eq!(request_body_offset(&frame, false).unwrap().0, 13);
        frame.truncate(12);
        assert!(request_body_offset(&frame, false).is_err());
        assert!(RequestHead::parse(&[0, 1, 2]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(input in proptest::collection::vec(proptest::num::u8::ANY, 0..64), flexible: bool) {
            let mut r = Reader::new(&input);
            let _ = r.array_len(flexible, 1, "a");
            let _ = r.nullable_string(flexible, "s");
            let _ = r.skip_bytes(flexible, "b");
            let _ = r.skip_tagged_fields();
            let _ = r.uuid("u");
            let _ = request_body_offset(&input, flexible);
        }
    }
}
