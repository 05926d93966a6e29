//! Request and response headers around mirror message bodies (without the length prefix, which is
//! [`crate::protocol::encode_frame`]'s).
//!
//! Mirror requests are flexible, so they use request header v2 (`api_key`, `api_version`,
//! `correlation_id`, a *non-compact* nullable `client_id`, tagged fields) and response header v1
//! (`correlation_id`, tagged fields).
//!
//! # References
//! - <https://kafka.apache.org/protocol.html#protocol_messages> (Request Header v2, Response Header v1)

use bytes::{BufMut, Bytes, BytesMut};

use super::wire::{DecodeError, Reader};

/// A request header v2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// The api key.
    pub api_key: i16,
    /// The api version.
    pub api_version: i16,
    /// Echoed in the response.
    pub correlation_id: i32,
    /// The client's id, for logs and quotas.
    pub client_id: Option<String>,
}

/// Writes a request header v2 followed by `body`.
pub fn encode_request(header: &RequestHeader, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(16 + body.len());
    out.put_i16(header.api_key);
    out.put_i16(header.api_version);
    out.put_i32(header.correlation_id);
    match &header.client_id {
        None => out.put_i16(-1),
        Some(id) => {
            let len = i16::try_from(id.len()).unwrap_or(i16::MAX);
            out.put_i16(len);
            out.put_slice(&id.as_bytes()[..len as usize]);
        }
    }
    out.put_u8(0); // no tagged fields
    out.put_slice(body);
    out.freeze()
}

/// Reads a request header v2 from the start of `frame`; returns it and the body.
///
/// # Errors
/// A header that does not decode.
pub fn decode_request_header(frame: &Bytes) -> Result<(RequestHeader, Bytes), DecodeError> {
    let mut r = Reader::new(frame);
    let api_key = r.i16("api_key")?;
    let api_version = r.i16("api_version")?;
    let correlation_id = r.i32("correlation_id")?;
    let client_id_len = r.i16("client_id")?;
    let client_id = if client_id_len < 0 {
        None
    } else {
        let len = client_id_len as usize;
        if len > r.remaining() {
            return Err(DecodeError::BadLength { field: "client_id", len: i64::from(client_id_len), left: r.remaining() });
        }
        let start = frame.len() - r.remaining();
        let id = std::str::from_utf8(&frame[start..start + len]).map_err(|_| DecodeError::NotUtf8 { field: "client_id" })?;
        let id = id.to_owned();
        r = Reader::new(&frame[start + len..]);
        Some(id)
    };
    r.skip_tagged_fields()?;
    let body = frame.slice(frame.len() - r.remaining()..);
    Ok((RequestHeader { api_key, api_version, correlation_id, client_id }, body))
}

/// Writes a response header v1 followed by `body`.
pub fn encode_response(correlation_id: i32, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + body.len());
    out.put_i32(correlation_id);
    out.put_u8(0);
    out.put_slice(body);
    out.freeze()
}

/// Reads a response header v1; returns the correlation id and the body.
///
/// # Errors
/// A header that does not decode.
pub fn decode_response_header(frame: &Bytes) -> Result<(i32, Bytes), DecodeError> {
    let mut r = Reader::new(frame);
    let correlation_id = r.i32("correlation_id")?;
    r.skip_tagged_fields()?;
    Ok((correlation_id, frame.slice(frame.len() - r.remaining()..)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_header_round_trip() {
        for client_id in [None, Some(String::new()), Some("kafka-mirrors".to_owned())] {
            let header = RequestHeader { api_key: 99, api_version: 0, correlation_id: 7, client_id };
            let frame = encode_request(&header, b"body");
            let (back, body) = decode_request_header(&frame).unwrap();
            assert_eq!(back, header);
            assert_eq!(body.as_ref(), b"body");
        }
        let frame = encode_response(42, b"x");
        assert_eq!(decode_response_header(&frame).unwrap(), (42, Bytes::from_static(b"x")));
    }

    #[test]
    fn truncated_headers_are_errors() {
        let header = RequestHeader { api_key: 99, api_version: 0, correlation_id: 7, client_id: Some("abc".to_owned()) };
        let frame = encode_request(&header, b"");
        for cut in 0..frame.len() {
            assert!(decode_request_header(&frame.slice(..cut)).is_err(), "cut {cut}");
        }
    }
}
