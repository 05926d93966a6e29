//! The primitive types of Kafka's *flexible* message encoding, as the mirror messages use them:
//! fixed-width integers, unsigned varints, compact (nullable) strings and arrays, UUIDs and tagged
//! field sections.
//!
//! Reading never trusts a length: every length is checked against the bytes actually left before
//! anything is allocated, arrays grow as elements are decoded, and every failure is a typed
//! [`DecodeError`] naming what was being read. Unknown tagged fields are skipped (that is what makes
//! the messages extensible without a version bump).
//!
//! # References
//! - Protocol primitive types: <https://kafka.apache.org/protocol.html#protocol_types>
//! - KIP-482 (flexible versions, tagged fields): <https://cwiki.apache.org/confluence/x/OhMyBw>

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

/// A mirror message (or record) that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes ended inside a field.
    #[error("truncated: {needed} more bytes needed for {field}")]
    Truncated { field: &'static str, needed: usize },
    /// A length or count is larger than the bytes left, or negative where that is not allowed.
    #[error("bad length {len} for {field} ({left} bytes left)")]
    BadLength { field: &'static str, len: i64, left: usize },
    /// A varint runs over its maximum width.
    #[error("varint too long in {field}")]
    VarintTooLong { field: &'static str },
    /// A string is not UTF-8.
    #[error("{field} is not UTF-8")]
    NotUtf8 { field: &'static str },
    /// A non-nullable field was null.
    #[error("{field} is null")]
    UnexpectedNull { field: &'static str },
    /// Bytes were left after the message.
    #[error("{left} trailing bytes after the message")]
    TrailingBytes { left: usize },
    /// The api version is not one this build knows.
    #[error("unsupported version {version} of {api}")]
    UnsupportedVersion { api: &'static str, version: i16 },
    /// A value outside its domain (unknown enum code, …).
    #[error("invalid value {value} for {field}")]
    InvalidValue { field: &'static str, value: i64 },
}

/// Reads the primitive types from a byte slice, front to back.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Fails unless every byte was read.
    ///
    /// # Errors
    /// [`DecodeError::TrailingBytes`].
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() { Ok(()) } else { Err(DecodeError::TrailingBytes { left: self.buf.len() }) }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated { field, needed: n - self.buf.len() });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// `int8`.
    ///
    /// # Errors
    /// Truncation.
    pub fn i8(&mut self, field: &'static str) -> Result<i8, DecodeError> {
        Ok(self.take(1, field)?.get_i8())
    }

    /// `int16`.
    ///
    /// # Errors
    /// Truncation.
    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(self.take(2, field)?.get_i16())
    }

    /// `int32`.
    ///
    /// # Errors
    /// Truncation.
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(self.take(4, field)?.get_i32())
    }

    /// `int64`.
    ///
    /// # Errors
    /// Truncation.
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(self.take(8, field)?.get_i64())
    }

    /// `boolean`: any non-zero byte is true, as the Java client reads it.
    ///
    /// # Errors
    /// Truncation.
    pub fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        Ok(self.i8(field)? != 0)
    }

    /// `uuid`.
    ///
    /// # Errors
    /// Truncation.
    pub fn uuid(&mut self, field: &'static str) -> Result<Uuid, DecodeError> {
        let bytes = self.take(16, field)?;
        let mut raw = [0u8; 16];
        raw.copy_from_slice(bytes);
        Ok(Uuid::from_bytes(raw))
    }

    /// `unsigned_varint` (at most 5 bytes, 32 bits).
    ///
    /// # Errors
    /// Truncation or an over-long varint.
    pub fn uvarint(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let byte = self.take(1, field)?[0];
            value |= u32::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintTooLong { field })
    }

    /// A compact length: `N + 1`, 0 meaning null. Returns `None` for null and checks `N` against
    /// the bytes left (each unit takes at least `min_unit` bytes).
    fn compact_len(&mut self, field: &'static str, min_unit: usize) -> Result<Option<usize>, DecodeError> {
        let raw = self.uvarint(field)?;
        let Some(len) = raw.checked_sub(1) else { return Ok(None) };
        let len = len as usize;
        if len.saturating_mul(min_unit) > self.buf.len() {
            return Err(DecodeError::BadLength { field, len: len as i64, left: self.buf.len() });
        }
        Ok(Some(len))
    }

    /// `compact_nullable_string`.
    ///
    /// # Errors
    /// Truncation, bad length, invalid UTF-8.
    pub fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>, DecodeError> {
        let Some(len) = self.compact_len(field, 1)? else { return Ok(None) };
        let bytes = self.take(len, field)?;
        let s = std::str::from_utf8(bytes).map_err(|_| DecodeError::NotUtf8 { field })?;
        Ok(Some(s.to_owned()))
    }

    /// `compact_string` (not nullable).
    ///
    /// # Errors
    /// As [`Reader::nullable_string`], plus [`DecodeError::UnexpectedNull`].
    pub fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        self.nullable_string(field)?.ok_or(DecodeError::UnexpectedNull { field })
    }

    /// `compact_nullable_bytes`.
    ///
    /// # Errors
    /// Truncation, bad length.
    pub fn nullable_bytes(&mut self, field: &'static str) -> Result<Option<Bytes>, DecodeError> {
        let Some(len) = self.compact_len(field, 1)? else { return Ok(None) };
        Ok(Some(Bytes::copy_from_slice(self.take(len, field)?)))
    }

    /// The element count of a `compact_nullable_array`; `None` for null. Each element takes at
    /// least one byte, so the count is bounded by the bytes left.
    ///
    /// # Errors
    /// Truncation, bad length.
    pub fn array_len(&mut self, field: &'static str) -> Result<Option<usize>, DecodeError> {
        self.compact_len(field, 1)
    }

    /// Skips a tagged-field section (count, then tag, size and data of each field).
    ///
    /// # Errors
    /// Truncation, bad length.
    pub fn skip_tagged_fields(&mut self) -> Result<(), DecodeError> {
        self.tagged_fields(|_, _| Ok(()))
    }

    /// Reads a tagged-field section, handing each field's tag and bytes to `known` (which ignores
    /// the tags it does not know).
    ///
    /// # Errors
    /// A malformed section, or whatever `known` returns.
    pub fn tagged_fields(&mut self, mut known: impl FnMut(u32, &[u8]) -> Result<(), DecodeError>) -> Result<(), DecodeError> {
        let count = self.uvarint("tagged fields")?;
        for _ in 0..count {
            let tag = self.uvarint("tag")?;
            let size = self.uvarint("tagged field size")? as usize;
            if size > self.buf.len() {
                return Err(DecodeError::BadLength { field: "tagged field", len: size as i64, left: self.buf.len() });
            }
            let bytes = self.take(size, "tagged field")?;
            known(tag, bytes)?;
        }
        Ok(())
    }
}

/// Writes the primitive types into a growing buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: BytesMut,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes written.
    pub fn into_bytes(self) -> Bytes {
        self.buf.freeze()
    }

    /// `int8`.
    pub fn i8(&mut self, v: i8) {
        self.buf.put_i8(v);
    }

    /// `int16`.
    pub fn i16(&mut self, v: i16) {
        self.buf.put_i16(v);
    }

    /// `int32`.
    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }

    /// `int64`.
    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }

    /// `boolean`.
    pub fn bool(&mut self, v: bool) {
        self.buf.put_i8(i8::from(v));
    }

    /// `uuid`.
    pub fn uuid(&mut self, v: &Uuid) {
        self.buf.put_slice(v.as_bytes());
    }

    /// `unsigned_varint`.
    pub fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8);
    }

    /// A compact length (`N + 1`; 0 for null). Lengths beyond `u32::MAX - 1` cannot be encoded;
    /// messages that large are refused long before by the frame cap, so they saturate here.
    fn compact_len(&mut self, len: Option<usize>) {
        match len {
            None => self.uvarint(0),
            Some(n) => self.uvarint(u32::try_from(n).unwrap_or(u32::MAX - 1).saturating_add(1)),
        }
    }

    /// `compact_nullable_string`.
    pub fn nullable_string(&mut self, v: Option<&str>) {
        self.compact_len(v.map(str::len));
        if let Some(s) = v {
            self.buf.put_slice(s.as_bytes());
        }
    }

    /// `compact_string`.
    pub fn string(&mut self, v: &str) {
        self.nullable_string(Some(v));
    }

    /// `compact_nullable_bytes`.
    pub fn nullable_bytes(&mut self, v: Option<&[u8]>) {
        self.compact_len(v.map(<[u8]>::len));
        if let Some(b) = v {
            self.buf.put_slice(b);
        }
    }

    /// The length of a `compact_nullable_array` (elements follow).
    pub fn array_len(&mut self, len: Option<usize>) {
        self.compact_len(len);
    }

    /// An empty tagged-field section.
    pub fn empty_tagged_fields(&mut self) {
        self.uvarint(0);
    }

    /// A tagged-field section of `fields` (tag, encoded value), in ascending tag order.
    pub fn tagged_fields(&mut self, fields: &[(u32, Bytes)]) {
        debug_assert!(fields.windows(2).all(|w| w[0].0 < w[1].0), "tags out of order");
        self.uvarint(fields.len() as u32);
        for (tag, bytes) in fields {
            self.uvarint(*tag);
            self.uvarint(bytes.len() as u32);
            self.buf.put_slice(bytes);
        }
    }
}

/// One tagged field's value, encoded: for [`Writer::tagged_fields`].
pub fn tagged<T: Field>(tag: u32, value: &T) -> (u32, Bytes) {
    let mut w = Writer::new();
    value.write(&mut w);
    (tag, w.into_bytes())
}

/// Decodes a tagged field's value from its bytes (every byte must be used).
///
/// # Errors
/// Malformed or trailing bytes.
pub fn read_tagged<T: Field>(bytes: &[u8], field: &'static str) -> Result<T, DecodeError> {
    let mut r = Reader::new(bytes);
    let value = T::read(&mut r, field)?;
    r.finish()?;
    Ok(value)
}

/// A value with a flexible-encoding representation: every field of every mirror message.
pub trait Field: Sized {
    /// Appends the encoding of `self`.
    fn write(&self, w: &mut Writer);
    /// Reads one value; `field` names it in errors.
    ///
    /// # Errors
    /// Whatever the bytes do wrong.
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError>;
}

macro_rules! fixed_field {
    ($($ty:ty => $method:ident),* $(,)?) => {$(
        impl Field for $ty {
            fn write(&self, w: &mut Writer) {
                w.$method(*self);
            }
            fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
                r.$method(field)
            }
        }
    )*};
}

fixed_field!(i8 => i8, i16 => i16, i32 => i32, i64 => i64, bool => bool);

impl Field for Uuid {
    fn write(&self, w: &mut Writer) {
        w.uuid(self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        r.uuid(field)
    }
}

impl Field for String {
    fn write(&self, w: &mut Writer) {
        w.string(self);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        r.string(field)
    }
}

impl Field for Option<String> {
    fn write(&self, w: &mut Writer) {
        w.nullable_string(self.as_deref());
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        r.nullable_string(field)
    }
}

impl Field for Option<Bytes> {
    fn write(&self, w: &mut Writer) {
        w.nullable_bytes(self.as_deref());
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        r.nullable_bytes(field)
    }
}

/// Marker for the element types of arrays (strings and structs; `Option<String>` elements are not
/// used by any mirror message).
pub trait Element: Field {}
impl Element for String {}

impl<T: Element> Field for Vec<T> {
    fn write(&self, w: &mut Writer) {
        w.array_len(Some(self.len()));
        for item in self {
            item.write(w);
        }
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let len = r.array_len(field)?.ok_or(DecodeError::UnexpectedNull { field })?;
        read_elements(r, len, field)
    }
}

impl<T: Element> Field for Option<Vec<T>> {
    fn write(&self, w: &mut Writer) {
        match self {
            None => w.array_len(None),
            Some(items) => items.write(w),
        }
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        match r.array_len(field)? {
            None => Ok(None),
            Some(len) => read_elements(r, len, field).map(Some),
        }
    }
}

fn read_elements<T: Element>(r: &mut Reader<'_>, len: usize, field: &'static str) -> Result<Vec<T>, DecodeError> {
    // Grown as elements decode: `len` is bounded by the bytes left, but not trusted for capacity.
    let mut items = Vec::new();
    for _ in 0..len {
        items.push(T::read(r, field)?);
    }
    Ok(items)
}

/// Declares the [`Field`] (and [`Element`]) implementation of a struct from its field list, in
/// wire order, followed by a tagged-field section. All mirror structs are flexible from version 0.
macro_rules! flexible_struct {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl $crate::protocol::mirror::wire::Field for $name {
            fn write(&self, w: &mut $crate::protocol::mirror::wire::Writer) {
                $( $crate::protocol::mirror::wire::Field::write(&self.$field, w); )*
                w.empty_tagged_fields();
            }
            fn read(
                r: &mut $crate::protocol::mirror::wire::Reader<'_>,
                _field: &'static str,
            ) -> Result<Self, $crate::protocol::mirror::wire::DecodeError> {
                let value = Self {
                    $( $field: $crate::protocol::mirror::wire::Field::read(r, concat!(stringify!($name), ".", stringify!($field)))?, )*
                };
                r.skip_tagged_fields()?;
                Ok(value)
            }
        }
        impl $crate::protocol::mirror::wire::Element for $name {}
    };
    // Fields after `tagged` are tagged fields (tag => field = default, ascending tags): written only
    // when they differ from their default, read as the default when absent. Readers that predate
    // a tagged field skip it, so adding one needs no version bump.
    ($name:ident { $($field:ident),* $(,)? } tagged { $($tag:literal => $tfield:ident = $default:expr),* $(,)? }) => {
        impl $crate::protocol::mirror::wire::Field for $name {
            fn write(&self, w: &mut $crate::protocol::mirror::wire::Writer) {
                $( $crate::protocol::mirror::wire::Field::write(&self.$field, w); )*
                let mut tagged = Vec::new();
                $(
                    if self.$tfield != $default {
                        tagged.push($crate::protocol::mirror::wire::tagged($tag, &self.$tfield));
                    }
                )*
                w.tagged_fields(&tagged);
            }
            fn read(
                r: &mut $crate::protocol::mirror::wire::Reader<'_>,
                _field: &'static str,
            ) -> Result<Self, $crate::protocol::mirror::wire::DecodeError> {
                let mut value = Self {
                    $( $field: $crate::protocol::mirror::wire::Field::read(r, concat!(stringify!($name), ".", stringify!($field)))?, )*
                    $( $tfield: $default, )*
                };
                r.tagged_fields(|tag, bytes| {
                    match tag {
                        $( $tag => value.$tfield = $crate::protocol::mirror::wire::read_tagged(bytes, concat!(stringify!($name), ".", stringify!($tfield)))?, )*
                        _ => {}
                    }
                    Ok(())
                })?;
                Ok(value)
            }
        }
        impl $crate::protocol::mirror::wire::Element for $name {}
    };
}
pub(crate) use flexible_struct;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarint_round_trip_and_limits() {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut w = Writer::new();
            w.uvarint(v);
            let bytes = w.into_bytes();
            let mut r = Reader::new(&bytes);
            assert_eq!(r.uvarint("v").unwrap(), v);
            r.finish().unwrap();
        }
        let mut r = Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert_eq!(r.uvarint("v"), Err(DecodeError::VarintTooLong { field: "v" }));
    }

    #[test]
    fn compact_string_bytes_match_kafka() {
        let mut w = Writer::new();
        w.string("ab");
        w.nullable_string(None);
        assert_eq!(w.into_bytes().as_ref(), &[3, b'a', b'b', 0]);
    }

    #[test]
    fn lengths_are_checked_before_allocation() {
        // An array announcing 2^31 elements in a 6-byte message.
        let mut r = Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x08, 0]);
        assert!(matches!(<Vec<String> as Field>::read(&mut r, "a"), Err(DecodeError::BadLength { .. })));
        let mut r = Reader::new(&[10, b'x']);
        assert!(matches!(r.string("s"), Err(DecodeError::BadLength { .. })));
        let mut r = Reader::new(&[0]);
        assert_eq!(r.string("s"), Err(DecodeError::UnexpectedNull { field: "s" }));
    }

    #[test]
    fn unknown_tagged_fields_are_skipped() {
        // Two tagged fields: tag 0 with 2 bytes, tag 5 with 0 bytes.
        let mut r = Reader::new(&[2, 0, 2, 9, 9, 5, 0]);
        r.skip_tagged_fields().unwrap();
        r.finish().unwrap();
        let mut r = Reader::new(&[1, 0, 9]);
        assert!(r.skip_tagged_fields().is_err());
    }
}
