//! Records inside a v2 batch: decompress the records section, iterate the records, and encode
//! records back into a batch ([`BatchBuilder`]).
//!
//! Owns the record layout, the zigzag varints it uses, and the four codecs (gzip, snappy in
//! Kafka's xerial framing, lz4 frames, zstd). Does not own the batch header or framing
//! (`batch.rs`) or the meaning of control records (`control.rs`).
//!
//! The replicator copies batches as raw bytes and comes here only when it must change what a batch
//! holds: splitting a compacted batch with offset holes into runs of consecutive records, and
//! rewriting LogAppendTime batches as CreateTime (spec section 3, broker constraints 2.4-2.5).
//!
//! ```text
//! RawBatch ── records_with_limit ──▶ decompress (capped) ──▶ RecordIter ──▶ Record ...
//!                                                                               │ edit
//! Bytes ◀── build ── BatchBuilder::from_batch(..).with_records(..) ◀────────────┘
//! ```
//!
//! Untrusted input: every length is checked against the bytes actually present before slicing,
//! nothing is preallocated from a count or a claimed size, and decompression stops at a
//! caller-given limit, so a small compressed section cannot expand without bound.
//!
//! # Record layout
//!
//! ```text
//! length: varint            bytes after this field
//! attributes: int8          unused, 0
//! timestampDelta: varlong   ms relative to the batch baseTimestamp
//! offsetDelta: varint       relative to the batch baseOffset
//! keyLength: varint         negative = null key
//! key: byte[keyLength]
//! valueLength: varint       negative = null value
//! value: byte[valueLength]
//! headerCount: varint
//! headers: [headerKeyLength: varint (>= 0), headerKey: utf8,
//!           headerValueLength: varint (negative = null), headerValue: byte[]]
//! ```
//!
//! # References
//! - Record format: <https://kafka.apache.org/documentation/#record>
//! - Record headers, added with KIP-82:
//!   <https://cwiki.apache.org/confluence/display/KAFKA/KIP-82+-+Add+Record+Headers>
//! - Kafka's `DefaultRecord.readFrom` (which negative lengths mean null, size check) and
//!   `ByteUtils.readVarint`/`readVarlong` (5- and 10-byte limits):
//!   <https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/record/DefaultRecord.java>
//! - Snappy framing as written by Kafka's Java client (xerial snappy-java `SnappyOutputStream`):
//!   <https://github.com/xerial/snappy-java#compatibility-notes>
//! - Kafka's LZ4 framing (`Lz4BlockOutputStream`: LZ4 frame format, independent 64 KiB blocks).

use std::fmt;
use std::io::{self, Read, Write};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::batch::{
    BatchError, BatchHeader, CONTROL_FLAG, Compression, DELETE_HORIZON_FLAG, MAGIC_V2, NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
    NO_SEQUENCE, RawBatch, TIMESTAMP_TYPE_FLAG, TRANSACTIONAL_FLAG, TimestampType, encode_batch,
};

/// Default cap on a decompressed records section, in bytes (64 MiB). Kafka's own limit is on the
/// compressed size (`max.message.bytes`, 1 MiB by default), so real batches stay far below this;
/// it exists to bound memory on corrupt or hostile input.
pub const DEFAULT_MAX_UNCOMPRESSED_BYTES: usize = 64 * 1024 * 1024;

/// Most bytes a varint (i32) may take.
const MAX_VARINT_BYTES: u32 = 5;
/// Most bytes a varlong (i64) may take.
const MAX_VARLONG_BYTES: u32 = 10;

/// Largest `batchLength`-counted section: `i32::MAX` minus the header after the length field.
const MAX_RECORDS_SECTION: usize = i32::MAX as usize - 49;

/// Magic, version and compatible version that open a xerial snappy stream.
const SNAPPY_XERIAL_HEADER: [u8; 16] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];
/// The 8 bytes that identify a xerial snappy stream; without them the section is raw snappy.
const SNAPPY_XERIAL_MAGIC_LEN: usize = 8;
/// Uncompressed block size of xerial snappy streams (snappy-java's default, 32 KiB).
const SNAPPY_XERIAL_BLOCK: usize = 32 * 1024;
/// zstd level the Java producer uses by default (`compression.zstd.level`).
const ZSTD_LEVEL: i32 = 3;

/// One record of a batch, with its fields as stored (deltas relative to the batch header).
///
/// Keys and values are zero-copy slices of the records section (or of its decompressed copy).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Record attributes; unused by Kafka and always 0 in practice.
    pub attributes: i8,
    /// Milliseconds after the batch `baseTimestamp`; meaningless under LogAppendTime.
    pub timestamp_delta: i64,
    /// Offset relative to the batch `baseOffset`. [`BatchBuilder`] ignores it and numbers records
    /// 0..n-1.
    pub offset_delta: i32,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys (UTF-8 bytes as sent, not validated) and nullable values, in record order.
    pub headers: Vec<(Bytes, Option<Bytes>)>,
}

/// A field of the record layout, named in [`RecordFault`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordField {
    /// The record's leading length varint.
    Length,
    /// The record body that the length announces.
    Body,
    Attributes,
    TimestampDelta,
    OffsetDelta,
    KeyLength,
    Key,
    ValueLength,
    Value,
    HeaderCount,
    HeaderKeyLength,
    HeaderKey,
    HeaderValueLength,
    HeaderValue,
}

impl fmt::Display for RecordField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Length => "length",
            Self::Body => "body",
            Self::Attributes => "attributes",
            Self::TimestampDelta => "timestamp delta",
            Self::OffsetDelta => "offset delta",
            Self::KeyLength => "key length",
            Self::Key => "key",
            Self::ValueLength => "value length",
            Self::Value => "value",
            Self::HeaderCount => "header count",
            Self::HeaderKeyLength => "header key length",
            Self::HeaderKey => "header key",
            Self::HeaderValueLength => "header value length",
            Self::HeaderValue => "header value",
        })
    }
}

/// What is wrong with a malformed record ([`BatchError::MalformedRecord`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordFault {
    /// The bytes end inside `field`: it needs `needed` bytes, `available` are left.
    Truncated { field: RecordField, needed: usize, available: usize },
    /// A varint runs past 5 bytes or a varlong past 10.
    VarintTooLong { field: RecordField },
    /// A negative length where null is not allowed (record length, header count, header key).
    NegativeLength { field: RecordField, length: i32 },
    /// The fields of the record end before its length prefix says they should.
    SizeMismatch { declared: usize, consumed: usize },
}

impl fmt::Display for RecordFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { field, needed, available } => write!(f, "{field} truncated: {needed} bytes needed, {available} available"),
            Self::VarintTooLong { field } => write!(f, "{field} varint too long"),
            Self::NegativeLength { field, length } => {
                write!(f, "negative {field} {length}")
            }
            Self::SizeMismatch { declared, consumed } => write!(f, "record length says {declared} bytes but its fields take {consumed}"),
        }
    }
}

/// The records of one batch, in order. Yields exactly `recordsCount` records, then reports any
/// bytes left over as [`BatchError::TrailingRecordBytes`]. After the first error it yields nothing.
#[derive(Clone)]
pub struct RecordIter {
    rest: Bytes,
    section_len: usize,
    base_offset: i64,
    records_count: i32,
    index: usize,
    done: bool,
}

impl RecordIter {
    fn new(section: Bytes, base_offset: i64, records_count: i32) -> Self {
        Self { section_len: section.len(), rest: section, base_offset, records_count, index: 0, done: false }
    }

    fn expected(&self) -> usize {
        usize::try_from(self.records_count).unwrap_or(0)
    }
}

impl fmt::Debug for RecordIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordIter")
            .field("base_offset", &self.base_offset)
            .field("records_count", &self.records_count)
            .field("index", &self.index)
            .field("remaining_bytes", &self.rest.len())
            .finish()
    }
}

impl Iterator for RecordIter {
    type Item = Result<Record, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.index >= self.expected() {
            self.done = true;
            if self.rest.is_empty() {
                return None;
            }
            return Some(Err(BatchError::TrailingRecordBytes { base_offset: self.base_offset, records_count: self.records_count, trailing: self.rest.len() }));
        }
        let position = self.section_len.saturating_sub(self.rest.len());
        match decode_record(&mut self.rest) {
            Ok(record) => {
                self.index += 1;
                Some(Ok(record))
            }
            Err(fault) => {
                self.done = true;
                Some(Err(BatchError::MalformedRecord { base_offset: self.base_offset, record_index: self.index, position, fault }))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            (0, Some(0))
        } else {
            // One more for a possible trailing-bytes error.
            (0, self.expected().saturating_sub(self.index).checked_add(1))
        }
    }
}

impl std::iter::FusedIterator for RecordIter {}

impl RawBatch {
    /// The records of this batch, decompressing with the default cap
    /// ([`DEFAULT_MAX_UNCOMPRESSED_BYTES`]).
    ///
    /// # Errors
    /// As [`records_with_limit`](Self::records_with_limit).
    pub fn records(&self) -> Result<RecordIter, BatchError> {
        self.records_with_limit(DEFAULT_MAX_UNCOMPRESSED_BYTES)
    }

    /// The records of this batch. A compressed section is decompressed here, in full, into one
    /// buffer of at most `max_uncompressed_bytes`; an uncompressed one is iterated in place (the
    /// limit does not apply, nothing is copied). An empty section yields no records whatever the
    /// codec bits say (the cleaner writes empty batches without a compressed stream).
    ///
    /// The CRC is not checked; call [`verify_crc`](Self::verify_crc) first where it matters.
    ///
    /// # Errors
    /// [`BatchError::InvalidRecordsCount`], [`BatchError::UnknownCompression`],
    /// [`BatchError::Decompress`], [`BatchError::DecompressedTooLarge`]. Malformed records are
    /// reported by the iterator.
    pub fn records_with_limit(&self, max_uncompressed_bytes: usize) -> Result<RecordIter, BatchError> {
        let base_offset = self.base_offset();
        let records_count = self.records_count();
        if records_count < 0 {
            return Err(BatchError::InvalidRecordsCount { base_offset, records_count });
        }
        let section = self.records_section();
        let compression = self.compression();
        let data = if section.is_empty() || compression == Compression::None {
            section
        } else {
            decompress(compression, &section, max_uncompressed_bytes).map_err(|failure| failure.into_error(base_offset, compression))?.into()
        };
        Ok(RecordIter::new(data, base_offset, records_count))
    }

    /// The offset of `record` in the log: `base_offset + offset_delta` (wrapping like Kafka's Java
    /// arithmetic on corrupt input).
    pub fn record_offset(&self, record: &Record) -> i64 {
        self.base_offset().wrapping_add(i64::from(record.offset_delta))
    }

    /// The timestamp consumers see for `record` (ms): `max_timestamp` for LogAppendTime batches,
    /// `base_timestamp + timestamp_delta` otherwise (Kafka's `DefaultRecordBatch.RecordIterator`).
    pub fn record_timestamp(&self, record: &Record) -> i64 {
        match self.timestamp_type() {
            TimestampType::LogAppendTime => self.max_timestamp(),
            TimestampType::CreateTime => self.base_timestamp().wrapping_add(record.timestamp_delta),
        }
    }
}

/// Reads a zigzag varint of at most 5 bytes; bits past 32 in the fifth byte are dropped, as
/// Kafka's `ByteUtils.readVarint` does.
fn read_varint(buf: &mut Bytes, field: RecordField) -> Result<i32, RecordFault> {
    let raw = read_unsigned_varint(buf, field, MAX_VARINT_BYTES)?;
    // Truncation to 32 bits is the point: it mirrors the Java reader.
    let raw = raw as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Reads a zigzag varlong of at most 10 bytes.
fn read_varlong(buf: &mut Bytes, field: RecordField) -> Result<i64, RecordFault> {
    let raw = read_unsigned_varint(buf, field, MAX_VARLONG_BYTES)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

fn read_unsigned_varint(buf: &mut Bytes, field: RecordField, max_bytes: u32) -> Result<u64, RecordFault> {
    let mut value: u64 = 0;
    for index in 0..max_bytes {
        let byte = buf.try_get_u8().map_err(|_| RecordFault::Truncated { field, needed: 1, available: 0 })?;
        // index <= 9, so the shift stays below 64; high bits of the last byte fall off.
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(RecordFault::VarintTooLong { field })
}

/// Splits `len` bytes off the front of `buf`, if present.
fn take(buf: &mut Bytes, len: usize, field: RecordField) -> Result<Bytes, RecordFault> {
    if len > buf.len() {
        return Err(RecordFault::Truncated { field, needed: len, available: buf.len() });
    }
    Ok(buf.split_to(len))
}

/// Reads a length-prefixed byte field where any negative length means null.
fn read_nullable(buf: &mut Bytes, length_field: RecordField, field: RecordField) -> Result<Option<Bytes>, RecordFault> {
    let length = read_varint(buf, length_field)?;
    match usize::try_from(length) {
        Ok(len) => take(buf, len, field).map(Some),
        Err(_) => Ok(None),
    }
}

/// Reads a length that must not be negative.
fn read_length(buf: &mut Bytes, field: RecordField) -> Result<usize, RecordFault> {
    let length = read_varint(buf, field)?;
    usize::try_from(length).map_err(|_| RecordFault::NegativeLength { field, length })
}

fn decode_record(rest: &mut Bytes) -> Result<Record, RecordFault> {
    let declared = read_length(rest, RecordField::Length)?;
    let mut body = take(rest, declared, RecordField::Body)?;
    let body_buf = &mut body;
    let attributes = body_buf.try_get_i8().map_err(|_| RecordFault::Truncated { field: RecordField::Attributes, needed: 1, available: 0 })?;
    let timestamp_delta = read_varlong(body_buf, RecordField::TimestampDelta)?;
    let offset_delta = read_varint(body_buf, RecordField::OffsetDelta)?;
    let key = read_nullable(body_buf, RecordField::KeyLength, RecordField::Key)?;
    let value = read_nullable(body_buf, RecordField::ValueLength, RecordField::Value)?;
    let header_count = read_length(body_buf, RecordField::HeaderCount)?;
    // Grows per parsed header only; each header takes at least two bytes, so a huge count runs out
    // of body long before it costs memory.
    let mut headers = Vec::new();
    for _ in 0..header_count {
        let key_len = read_length(body_buf, RecordField::HeaderKeyLength)?;
        let header_key = take(body_buf, key_len, RecordField::HeaderKey)?;
        let header_value = read_nullable(body_buf, RecordField::HeaderValueLength, RecordField::HeaderValue)?;
        headers.push((header_key, header_value));
    }
    if !body.is_empty() {
        return Err(RecordFault::SizeMismatch { declared, consumed: declared.saturating_sub(body.len()) });
    }
    Ok(Record { attributes, timestamp_delta, offset_delta, key, value, headers })
}

/// Why decompression failed, before the batch context is attached.
enum DecodeFailure {
    Codec(io::Error),
    TooLarge { limit: usize },
    Unknown(u8),
}

impl DecodeFailure {
    fn into_error(self, base_offset: i64, compression: Compression) -> BatchError {
        match self {
            Self::Codec(source) => BatchError::Decompress { base_offset, compression, source },
            Self::TooLarge { limit } => BatchError::DecompressedTooLarge { base_offset, compression, limit },
            Self::Unknown(codec) => BatchError::UnknownCompression { base_offset, codec },
        }
    }
}

impl From<io::Error> for DecodeFailure {
    fn from(error: io::Error) -> Self {
        Self::Codec(error)
    }
}

fn invalid_data(message: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn decompress(compression: Compression, input: &[u8], limit: usize) -> Result<Vec<u8>, DecodeFailure> {
    match compression {
        Compression::None => read_capped(input, limit),
        // Java's GZIPInputStream reads concatenated members too.
        Compression::Gzip => read_capped(flate2::read::MultiGzDecoder::new(input), limit),
        Compression::Snappy => snappy_decompress(input, limit),
        Compression::Lz4 => read_capped(lz4::Decoder::new(input)?, limit),
        // The default window limit (2^27 bytes) is the one Kafka's zstd-jni reader applies.
        Compression::Zstd => read_capped(zstd::stream::read::Decoder::with_buffer(input)?, limit),
        Compression::Unknown(codec) => Err(DecodeFailure::Unknown(codec)),
    }
}

/// Reads `reader` to its end, failing once it yields more than `limit` bytes. The output grows
/// with what is actually decoded.
fn read_capped(reader: impl Read, limit: usize) -> Result<Vec<u8>, DecodeFailure> {
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::new();
    reader.take(cap).read_to_end(&mut out)?;
    if out.len() > limit {
        return Err(DecodeFailure::TooLarge { limit });
    }
    Ok(out)
}

/// Snappy as Kafka writes it: a xerial stream (16-byte header, then blocks of a big-endian `u32`
/// length and a raw snappy block), or, like snappy-java, raw snappy when the magic is absent.
fn snappy_decompress(input: &[u8], limit: usize) -> Result<Vec<u8>, DecodeFailure> {
    let mut out = Vec::new();
    let is_xerial = input.get(..SNAPPY_XERIAL_MAGIC_LEN) == SNAPPY_XERIAL_HEADER.get(..SNAPPY_XERIAL_MAGIC_LEN);
    if !is_xerial {
        snappy_block(input, &mut out, limit)?;
        return Ok(out);
    }
    let mut rest = input.get(SNAPPY_XERIAL_HEADER.len()..).ok_or_else(|| invalid_data("snappy stream header truncated"))?;
    while !rest.is_empty() {
        let len = rest.try_get_u32().map_err(|_| invalid_data("snappy block length truncated"))?;
        let len = usize::try_from(len).map_err(|_| invalid_data("snappy block too long"))?;
        let (block, tail) = rest.split_at_checked(len).ok_or_else(|| invalid_data("snappy block truncated"))?;
        snappy_block(block, &mut out, limit)?;
        rest = tail;
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`. The block states its uncompressed length up front; it
/// is checked against what `limit` leaves before any memory is reserved for it.
fn snappy_block(block: &[u8], out: &mut Vec<u8>, limit: usize) -> Result<(), DecodeFailure> {
    let claimed = snap::raw::decompress_len(block).map_err(io::Error::from)?;
    let start = out.len();
    let end = start.checked_add(claimed).filter(|&end| end <= limit).ok_or(DecodeFailure::TooLarge { limit })?;
    out.resize(end, 0);
    let target = out.get_mut(start..).ok_or_else(|| invalid_data("snappy output buffer"))?;
    let written = snap::raw::Decoder::new().decompress(block, target).map_err(io::Error::from)?;
    out.truncate(start.saturating_add(written));
    Ok(())
}

fn compress(compression: Compression, input: &[u8]) -> Result<Vec<u8>, io::Error> {
    match compression {
        Compression::None => Ok(input.to_vec()),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(input)?;
            encoder.finish()
        }
        Compression::Snappy => {
            let mut out = SNAPPY_XERIAL_HEADER.to_vec();
            let mut encoder = snap::raw::Encoder::new();
            for chunk in input.chunks(SNAPPY_XERIAL_BLOCK) {
                let block = encoder.compress_vec(chunk).map_err(io::Error::from)?;
                let len = u32::try_from(block.len()).map_err(|_| invalid_data("snappy block too long"))?;
                out.put_u32(len);
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
        Compression::Lz4 => {
            // What Kafka's Lz4BlockOutputStream writes: independent 64 KiB blocks, no checksums.
            let mut encoder = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .block_mode(lz4::BlockMode::Independent)
                .checksum(lz4::ContentChecksum::NoChecksum)
                .build(Vec::new())?;
            encoder.write_all(input)?;
            let (out, result) = encoder.finish();
            result.map(|()| out)
        }
        Compression::Zstd => zstd::stream::encode_all(input, ZSTD_LEVEL),
        Compression::Unknown(_) => Err(invalid_data("unknown codec")),
    }
}

fn put_unsigned_varint(out: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}

fn put_varint(out: &mut impl BufMut, value: i32) {
    put_unsigned_varint(out, u64::from(((value << 1) ^ (value >> 31)) as u32));
}

fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_unsigned_varint(out, ((value << 1) ^ (value >> 63)) as u64);
}

/// A length as the i32 the format stores.
fn encoded_len(len: usize) -> Result<i32, BatchError> {
    i32::try_from(len).map_err(|_| BatchError::BatchTooLarge { size: len, limit: i32::MAX as usize })
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&Bytes>) -> Result<(), BatchError> {
    match bytes {
        None => put_varint(out, -1),
        Some(bytes) => {
            put_varint(out, encoded_len(bytes.len())?);
            out.extend_from_slice(bytes);
        }
    }
    Ok(())
}

/// Appends `record` to `out` with the given offset delta; `body` is scratch space.
fn encode_record(record: &Record, offset_delta: i32, body: &mut Vec<u8>, out: &mut BytesMut) -> Result<(), BatchError> {
    body.clear();
    body.put_i8(record.attributes);
    put_varlong(body, record.timestamp_delta);
    put_varint(body, offset_delta);
    put_nullable(body, record.key.as_ref())?;
    put_nullable(body, record.value.as_ref())?;
    put_varint(body, encoded_len(record.headers.len())?);
    for (key, value) in &record.headers {
        put_varint(body, encoded_len(key.len())?);
        body.extend_from_slice(key);
        put_nullable(body, value.as_ref())?;
    }
    put_varint(out, encoded_len(body.len())?);
    out.extend_from_slice(body);
    Ok(())
}

/// Encodes records into a new v2 batch, uncompressed or with any of Kafka's codecs.
///
/// Used to split a compacted batch with offset holes into runs (each run a batch with offset deltas
/// 0..n-1 and the source batch's producer fields) and to rewrite LogAppendTime batches as
/// CreateTime. Records are numbered 0..n-1 whatever their `offset_delta`; their `timestamp_delta`
/// is kept, relative to [`with_base_timestamp`](Self::with_base_timestamp).
///
/// ```text
/// BatchBuilder::from_batch(&source)       header fields of the source, no records
///     .with_base_offset(run_start)
///     .with_base_sequence(next_sequence)
///     .with_records(run)
///     .build()?                           -> Bytes, CRC-32C set
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct BatchBuilder {
    base_offset: i64,
    partition_leader_epoch: i32,
    compression: Compression,
    timestamp_type: TimestampType,
    transactional: bool,
    control: bool,
    delete_horizon: bool,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    base_timestamp: i64,
    max_timestamp: Option<i64>,
    records: Vec<Record>,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    /// An uncompressed, CreateTime, non-transactional batch at base offset 0 with no producer id,
    /// no leader epoch, base timestamp 0 and no records yet.
    pub fn new() -> Self {
        Self {
            base_offset: 0,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            compression: Compression::None,
            timestamp_type: TimestampType::CreateTime,
            transactional: false,
            control: false,
            delete_horizon: false,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            base_timestamp: 0,
            max_timestamp: None,
            records: Vec::new(),
        }
    }

    /// The header fields of `batch` (codec, flags, producer fields, offsets, timestamps), without
    /// its records. `maxTimestamp` is kept for LogAppendTime batches and recomputed from the
    /// records otherwise.
    pub fn from_batch(batch: &RawBatch) -> Self {
        Self {
            base_offset: batch.base_offset(),
            partition_leader_epoch: batch.partition_leader_epoch(),
            compression: batch.compression(),
            timestamp_type: batch.timestamp_type(),
            transactional: batch.is_transactional(),
            control: batch.is_control(),
            delete_horizon: batch.has_delete_horizon(),
            producer_id: batch.producer_id(),
            producer_epoch: batch.producer_epoch(),
            base_sequence: batch.base_sequence(),
            base_timestamp: batch.base_timestamp(),
            max_timestamp: match batch.timestamp_type() {
                TimestampType::LogAppendTime => Some(batch.max_timestamp()),
                TimestampType::CreateTime => None,
            },
            records: Vec::new(),
        }
    }

    pub fn with_base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    pub fn with_partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Codec of the records section. [`Compression::Unknown`] makes [`build`](Self::build) fail.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    pub fn with_timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }

    pub fn with_transactional(mut self, transactional: bool) -> Self {
        self.transactional = transactional;
        self
    }

    /// Marks the batch as a control batch. Brokers refuse control batches in Produce requests.
    pub fn with_control(mut self, control: bool) -> Self {
        self.control = control;
        self
    }

    /// Marks `baseTimestamp` as the cleaner's delete horizon (KIP-534).
    pub fn with_delete_horizon(mut self, delete_horizon: bool) -> Self {
        self.delete_horizon = delete_horizon;
        self
    }

    pub fn with_producer_id(mut self, producer_id: i64) -> Self {
        self.producer_id = producer_id;
        self
    }

    pub fn with_producer_epoch(mut self, producer_epoch: i16) -> Self {
        self.producer_epoch = producer_epoch;
        self
    }

    pub fn with_base_sequence(mut self, base_sequence: i32) -> Self {
        self.base_sequence = base_sequence;
        self
    }

    /// Base of the records' `timestamp_delta`, in ms.
    pub fn with_base_timestamp(mut self, base_timestamp: i64) -> Self {
        self.base_timestamp = base_timestamp;
        self
    }

    /// `maxTimestamp` in ms. Without it, [`build`](Self::build) uses the largest
    /// `base_timestamp + timestamp_delta` of the records.
    pub fn with_max_timestamp(mut self, max_timestamp: i64) -> Self {
        self.max_timestamp = Some(max_timestamp);
        self
    }

    pub fn with_record(mut self, record: Record) -> Self {
        self.records.push(record);
        self
    }

    pub fn with_records(mut self, records: impl IntoIterator<Item = Record>) -> Self {
        self.records.extend(records);
        self
    }

    fn attributes(&self) -> i16 {
        let mut attributes = i16::from(self.compression.id());
        if self.timestamp_type == TimestampType::LogAppendTime {
            attributes |= TIMESTAMP_TYPE_FLAG;
        }
        if self.transactional {
            attributes |= TRANSACTIONAL_FLAG;
        }
        if self.control {
            attributes |= CONTROL_FLAG;
        }
        if self.delete_horizon {
            attributes |= DELETE_HORIZON_FLAG;
        }
        attributes
    }

    /// Encodes the batch: records numbered 0..n-1, compressed with the chosen codec, CRC-32C set.
    ///
    /// # Errors
    /// [`BatchError::NoRecords`] without records (brokers reject empty batches),
    /// [`BatchError::UnknownCompression`] for [`Compression::Unknown`],
    /// [`BatchError::BatchTooLarge`] past the format's `i32` limits, [`BatchError::Compress`] if
    /// the codec fails.
    pub fn build(&self) -> Result<Bytes, BatchError> {
        if self.records.is_empty() {
            return Err(BatchError::NoRecords);
        }
        if let Compression::Unknown(codec) = self.compression {
            return Err(BatchError::UnknownCompression { base_offset: self.base_offset, codec });
        }
        let records_count = encoded_len(self.records.len())?;
        let mut plain = BytesMut::new();
        let mut body = Vec::new();
        for (offset_delta, record) in (0..records_count).zip(&self.records) {
            encode_record(record, offset_delta, &mut body, &mut plain)?;
        }
        let section = match self.compression {
            Compression::None => plain.freeze(),
            compression => compress(compression, &plain).map_err(|source| BatchError::Compress { compression, source })?.into(),
        };
        if section.len() > MAX_RECORDS_SECTION {
            return Err(BatchError::BatchTooLarge { size: section.len(), limit: MAX_RECORDS_SECTION });
        }
        let batch_length = encoded_len(section.len() + 49)?;
        let max_timestamp = self
            .max_timestamp
            .unwrap_or_else(|| self.records.iter().map(|record| self.base_timestamp.wrapping_add(record.timestamp_delta)).max().unwrap_or(self.base_timestamp));
        let header = BatchHeader {
            base_offset: self.base_offset,
            batch_length,
            partition_leader_epoch: self.partition_leader_epoch,
            magic: MAGIC_V2,
            crc: 0,
            attributes: self.attributes(),
            last_offset_delta: records_count - 1,
            base_timestamp: self.base_timestamp,
            max_timestamp,
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records_count,
        };
        Ok(encode_batch(&header, &section))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records as kp;
    use proptest::collection::vec;
    use proptest::option;
    use proptest::prelude::*;

    use super::*;
    use crate::protocol::batch::RecordBatches;

    const ALL_CODECS: [Compression; 5] = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

    /// A batch with a valid CRC around an arbitrary records section.
    fn batch_with_section(attributes: i16, records_count: i32, section: &[u8]) -> RawBatch {
        let header = BatchHeader {
            base_offset: 500,
            batch_length: i32::try_from(section.len() + 49).unwrap(),
            partition_leader_epoch: 0,
            magic: MAGIC_V2,
            crc: 0,
            attributes,
            last_offset_delta: records_count.saturating_sub(1),
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records_count,
        };
        RawBatch::from_bytes(encode_batch(&header, section)).unwrap()
    }

    fn first_error(batch: &RawBatch) -> BatchError {
        batch.records().unwrap().find_map(Result::err).expect("an error")
    }

    fn value_record(value: &[u8]) -> Record {
        Record { value: Some(Bytes::copy_from_slice(value)), ..Record::default() }
    }

    #[test]
    fn varints_match_kafka_encoding() {
        let cases: [(i32, &[u8]); 8] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i32::MAX, &[0xfe, 0xff, 0xff, 0xff, 0x0f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (value, encoded) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(out, encoded, "{value}");
            let mut buf = Bytes::copy_from_slice(encoded);
            assert_eq!(read_varint(&mut buf, RecordField::Length), Ok(value));
            assert!(buf.is_empty());
        }
        for value in [0i64, -1, i64::MAX, i64::MIN, 1 << 40] {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            let mut buf = Bytes::from(out);
            assert_eq!(read_varlong(&mut buf, RecordField::TimestampDelta), Ok(value));
        }
        let mut too_long = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]);
        assert_eq!(read_varint(&mut too_long, RecordField::OffsetDelta), Err(RecordFault::VarintTooLong { field: RecordField::OffsetDelta }));
        let mut cut = Bytes::from_static(&[0x80]);
        assert!(matches!(read_varlong(&mut cut, RecordField::TimestampDelta), Err(RecordFault::Truncated { .. })));
    }

    fn kp_records() -> Vec<kp::Record> {
        (0..40i64)
            .map(|i| kp::Record {
                transactional: true,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 5,
                producer_id: 77,
                producer_epoch: 3,
                timestamp_type: kp::TimestampType::Creation,
                offset: 100 + i,
                sequence: 10 + i32::try_from(i).unwrap(),
                timestamp: 1_000 + (i * 7) % 13,
                key: (i % 3 != 0).then(|| Bytes::from(format!("key-{i}"))),
                // Large, compressible values: several lz4 (64 KiB) and snappy (32 KiB) blocks.
                value: (i % 5 != 0).then(|| Bytes::from(vec![b'a' + (i % 26) as u8; 4_000])),
                headers: (0..i % 3).map(|h| (StrBytes::from(format!("h{h}")), (h != 1).then(|| Bytes::from(format!("v{h}"))))).collect::<IndexMap<_, _>>(),
            })
            .collect()
    }

    fn kp_compression(compression: Compression) -> kp::Compression {
        match compression {
            Compression::None => kp::Compression::None,
            Compression::Gzip => kp::Compression::Gzip,
            Compression::Snappy => kp::Compression::Snappy,
            Compression::Lz4 => kp::Compression::Lz4,
            Compression::Zstd => kp::Compression::Zstd,
            Compression::Unknown(_) => unreachable!(),
        }
    }

    #[test]
    fn decodes_batches_encoded_by_kafka_protocol_with_every_codec() {
        let expected = kp_records();
        for codec in ALL_CODECS {
            let mut buf = BytesMut::new();
            kp::RecordBatchEncoder::encode(&mut buf, expected.iter(), &kp::RecordEncodeOptions { version: 2, compression: kp_compression(codec) }).unwrap();
            let mut batches = RecordBatches::new(buf.freeze());
            let batch = batches.next().unwrap().unwrap();
            assert!(batches.next().is_none());
            assert_eq!(batches.remaining_partial(), 0);

            batch.verify_crc().unwrap();
            assert_eq!(batch.compression(), codec);
            assert_eq!(batch.base_offset(), 100);
            assert_eq!(batch.last_offset_delta(), 39);
            assert_eq!(batch.records_count(), 40);
            assert_eq!(batch.producer_id(), 77);
            assert_eq!(batch.producer_epoch(), 3);
            assert_eq!(batch.base_sequence(), 10);
            assert_eq!(batch.partition_leader_epoch(), 5);
            assert!(batch.is_transactional());

            let records: Vec<Record> = batch.records().unwrap().map(Result::unwrap).collect();
            assert_eq!(records.len(), expected.len(), "{codec}");
            for (record, want) in records.iter().zip(&expected) {
                assert_eq!(batch.record_offset(record), want.offset);
                assert_eq!(batch.record_timestamp(record), want.timestamp);
                assert_eq!(record.key, want.key);
                assert_eq!(record.value, want.value);
                let headers: Vec<(Bytes, Option<Bytes>)> = want.headers.iter().map(|(k, v)| (Bytes::copy_from_slice(k.as_bytes()), v.clone())).collect();
                assert_eq!(record.headers, headers);
            }
        }
    }

    #[test]
    fn kafka_protocol_decodes_batches_we_build_with_every_codec() {
        let source = kp_records();
        let records: Vec<Record> = source
            .iter()
            .map(|r| Record {
                attributes: 0,
                timestamp_delta: r.timestamp - 1_000,
                offset_delta: 0,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.iter().map(|(k, v)| (Bytes::copy_from_slice(k.as_bytes()), v.clone())).collect(),
            })
            .collect();
        for codec in ALL_CODECS {
            let bytes = BatchBuilder::new()
                .with_base_offset(100)
                .with_compression(codec)
                .with_transactional(true)
                .with_producer_id(77)
                .with_producer_epoch(3)
                .with_base_sequence(10)
                .with_partition_leader_epoch(5)
                .with_base_timestamp(1_000)
                .with_records(records.clone())
                .build()
                .unwrap();
            let mut buf = bytes.clone();
            let decoded = kp::RecordBatchDecoder::decode(&mut buf).unwrap();
            assert!(buf.is_empty());
            assert_eq!(kp_compression(codec), decoded.compression, "{codec}");
            assert_eq!(decoded.records, source, "{codec}");

            // And we read back what we wrote.
            let batch = RawBatch::from_bytes(bytes).unwrap();
            batch.verify_crc().unwrap();
            assert_eq!(batch.max_timestamp(), 1_012);
            let again: Vec<Record> = batch.records().unwrap().map(Result::unwrap).collect();
            assert_eq!(again.len(), records.len());
            for (index, (got, want)) in again.iter().zip(&records).enumerate() {
                assert_eq!(got.offset_delta, i32::try_from(index).unwrap());
                assert_eq!(got.key, want.key);
                assert_eq!(got.value, want.value);
                assert_eq!(got.headers, want.headers);
                assert_eq!(got.timestamp_delta, want.timestamp_delta);
            }
        }
    }

    #[test]
    fn builder_renumbers_offsets_and_copies_header_fields() {
        let source = RawBatch::from_bytes(
            BatchBuilder::new()
                .with_base_offset(1_000)
                .with_compression(Compression::Gzip)
                .with_timestamp_type(TimestampType::LogAppendTime)
                .with_transactional(true)
                .with_producer_id(9)
                .with_producer_epoch(1)
                .with_base_sequence(30)
                .with_base_timestamp(50)
                .with_max_timestamp(99)
                .with_records((0..3).map(|_| value_record(b"x")))
                .build()
                .unwrap(),
        )
        .unwrap();
        let run: Vec<Record> = source
            .records()
            .unwrap()
            .map(Result::unwrap)
            .skip(1)
            .map(|mut r| {
                r.offset_delta = 42;
                r
            })
            .collect();
        let rebuilt =
            RawBatch::from_bytes(BatchBuilder::from_batch(&source).with_base_offset(1_001).with_base_sequence(31).with_records(run).build().unwrap()).unwrap();
        rebuilt.verify_crc().unwrap();
        assert_eq!(rebuilt.base_offset(), 1_001);
        assert_eq!(rebuilt.base_sequence(), 31);
        assert_eq!(rebuilt.records_count(), 2);
        assert_eq!(rebuilt.last_offset_delta(), 1);
        assert_eq!(rebuilt.compression(), Compression::Gzip);
        assert_eq!(rebuilt.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(rebuilt.max_timestamp(), 99);
        assert!(rebuilt.is_transactional());
        assert_eq!((rebuilt.producer_id(), rebuilt.producer_epoch()), (9, 1));
        let deltas: Vec<i32> = rebuilt.records().unwrap().map(|r| r.unwrap().offset_delta).collect();
        assert_eq!(deltas, [0, 1]);
    }

    #[test]
    fn builder_rejects_empty_and_unknown_codec() {
        assert!(matches!(BatchBuilder::new().build(), Err(BatchError::NoRecords)));
        assert!(matches!(
            BatchBuilder::new().with_compression(Compression::Unknown(6)).with_record(Record::default()).build(),
            Err(BatchError::UnknownCompression { codec: 6, .. })
        ));
    }

    #[test]
    fn malformed_records_are_typed_errors() {
        let fault = |section: &[u8], count: i32| match first_error(&batch_with_section(0, count, section)) {
            BatchError::MalformedRecord { fault, base_offset: 500, .. } => fault,
            other => panic!("{other:?}"),
        };
        assert_eq!(fault(&[0x01], 1), RecordFault::NegativeLength { field: RecordField::Length, length: -1 });
        assert_eq!(fault(&[0x14, 0, 0], 1), RecordFault::Truncated { field: RecordField::Body, needed: 10, available: 2 });
        // Length 8 for a 7-byte record plus one stray byte.
        assert_eq!(fault(&[0x10, 0, 0, 0, 0x01, 0x02, b'v', 0, 0xaa], 1), RecordFault::SizeMismatch { declared: 8, consumed: 7 });
        // One header whose key length is -1.
        assert_eq!(
            fault(&[0x0e, 0, 0, 0, 0x01, 0x01, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0], 1),
            RecordFault::NegativeLength { field: RecordField::HeaderKeyLength, length: -1 }
        );
        // A 63-byte key in a 5-byte record.
        assert_eq!(fault(&[0x0a, 0, 0, 0, 0x7e, 0], 1), RecordFault::Truncated { field: RecordField::Key, needed: 63, available: 1 });
        assert_eq!(fault(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 1), RecordFault::VarintTooLong { field: RecordField::Length });
        // A header count of 2^30 with three bytes left ends without reserving for the count.
        assert!(matches!(
            fault(&[0x10, 0, 0, 0, 0x01, 0x01, 0x80, 0x80, 0x80, 0x80, 0x08], 1),
            RecordFault::Truncated { .. } | RecordFault::VarintTooLong { .. }
        ));
    }

    #[test]
    fn record_count_and_section_must_agree() {
        let one = [0x0e, 0, 0, 0, 0x01, 0x02, b'v', 0];
        match first_error(&batch_with_section(0, 2, &one)) {
            BatchError::MalformedRecord { record_index: 1, position: 8, fault: RecordFault::Truncated { field: RecordField::Length, .. }, .. } => {}
            other => panic!("{other:?}"),
        }
        let with_trailing = [&one[..], &[0x00]].concat();
        assert!(matches!(first_error(&batch_with_section(0, 1, &with_trailing)), BatchError::TrailingRecordBytes { records_count: 1, trailing: 1, .. }));
        assert!(matches!(batch_with_section(0, -3, &one).records(), Err(BatchError::InvalidRecordsCount { records_count: -3, .. })));
    }

    #[test]
    fn any_negative_key_or_value_length_is_null_like_kafka() {
        // key length -3, value length -1.
        let batch = batch_with_section(0, 1, &[0x0c, 0, 0, 0, 0x05, 0x01, 0]);
        let record = batch.records().unwrap().next().unwrap().unwrap();
        assert_eq!(record.key, None);
        assert_eq!(record.value, None);
    }

    #[test]
    fn empty_section_yields_no_records_whatever_the_codec() {
        let batch = batch_with_section(1, 0, &[]);
        assert_eq!(batch.records().unwrap().count(), 0);
    }

    #[test]
    fn unknown_codec_and_corrupt_streams_are_typed_errors() {
        assert!(matches!(batch_with_section(5, 1, &[1, 2, 3]).records(), Err(BatchError::UnknownCompression { base_offset: 500, codec: 5 })));
        for codec in &ALL_CODECS[1..] {
            let garbage = batch_with_section(i16::from(codec.id()), 1, &[0x42; 40]);
            match garbage.records() {
                Err(BatchError::Decompress { compression, .. }) => assert_eq!(compression, *codec),
                // Raw snappy reads the garbage as a (wrong) length header.
                Err(BatchError::DecompressedTooLarge { .. }) => {}
                other => panic!("{codec}: {other:?}"),
            }
        }
    }

    #[test]
    fn decompression_stops_at_the_limit() {
        for codec in &ALL_CODECS[1..] {
            let batch = RawBatch::from_bytes(BatchBuilder::new().with_compression(*codec).with_record(value_record(&[0u8; 200_000])).build().unwrap()).unwrap();
            assert!(batch.size_in_bytes() < 20_000, "{codec}: {}", batch.size_in_bytes());
            assert!(matches!(
                batch.records_with_limit(100_000),
                Err(BatchError::DecompressedTooLarge { limit: 100_000, compression, .. })
                    if compression == *codec
            ));
            assert_eq!(batch.records_with_limit(300_000).unwrap().count(), 1);
        }
        // A raw snappy block that claims 100 MiB is refused before anything is reserved.
        let mut claim = Vec::new();
        put_unsigned_varint(&mut claim, 100 << 20);
        claim.push(0);
        assert!(matches!(batch_with_section(2, 1, &claim).records(), Err(BatchError::DecompressedTooLarge { .. })));
    }

    #[test]
    fn reads_raw_snappy_without_xerial_framing() {
        let plain = [0x0e, 0, 0, 0, 0x01, 0x02, b'v', 0];
        let raw = snap::raw::Encoder::new().compress_vec(&plain).unwrap();
        let batch = batch_with_section(2, 1, &raw);
        let record = batch.records().unwrap().next().unwrap().unwrap();
        assert_eq!(record.value.as_deref(), Some(&b"v"[..]));
    }

    fn bytes_up_to(max: usize) -> impl Strategy<Value = Bytes> {
        vec(any::<u8>(), 0..max).prop_map(Bytes::from)
    }

    fn record_strategy() -> impl Strategy<Value = Record> {
        (any::<i8>(), any::<i64>(), option::of(bytes_up_to(40)), option::of(bytes_up_to(200)), vec((bytes_up_to(12), option::of(bytes_up_to(20))), 0..4))
            .prop_map(|(attributes, timestamp_delta, key, value, headers)| Record { attributes, timestamp_delta, offset_delta: 0, key, value, headers })
    }

    fn codec_strategy() -> impl Strategy<Value = Compression> {
        prop::sample::select(ALL_CODECS.to_vec())
    }

    prop_compose! {
        fn builder_strategy()(
            codec in codec_strategy(),
            log_append in any::<bool>(),
            flags in any::<(bool, bool, bool)>(),
            base_offset in any::<i64>(),
            partition_leader_epoch in any::<i32>(),
            producer in any::<(i64, i16, i32)>(),
            base_timestamp in any::<i64>(),
            records in vec(record_strategy(), 1..8),
        ) -> (BatchBuilder, Vec<Record>) {
            let (transactional, control, delete_horizon) = flags;
            let (producer_id, producer_epoch, base_sequence) = producer;
            let builder = BatchBuilder::new()
                .with_compression(codec)
                .with_timestamp_type(if log_append {
                    TimestampType::LogAppendTime
                } else {
                    TimestampType::CreateTime
                })
                .with_transactional(transactional)
                .with_control(control)
                .with_delete_horizon(delete_horizon)
                .with_base_offset(base_offset)
                .with_partition_leader_epoch(partition_leader_epoch)
                .with_producer_id(producer_id)
                .with_producer_epoch(producer_epoch)
                .with_base_sequence(base_sequence)
                .with_base_timestamp(base_timestamp)
                .with_records(records.clone());
            (builder, records)
        }
    }

    /// Runs every reader over `bytes`; only checks that nothing panics or loops.
    fn exercise(bytes: Bytes) {
        let mut batches = RecordBatches::new(bytes.clone());
        for batch in batches.by_ref() {
            let Ok(batch) = batch else { break };
            let _ = batch.verify_crc();
            let _ = (batch.next_offset(), batch.compression(), batch.timestamp_type());
            if let Ok(records) = batch.records_with_limit(1 << 20) {
                for record in records {
                    let Ok(record) = record else { break };
                    let _ = (batch.record_offset(&record), batch.record_timestamp(&record));
                }
            }
            let _ = batch.control_marker();
            RawBatch::from_bytes(batch.to_mut().finish()).unwrap().verify_crc().unwrap();
        }
        let _ = batches.remaining_partial();
        let _ = RawBatch::from_bytes(bytes);
    }

    proptest! {
        #[test]
        fn build_then_parse_round_trips((builder, records) in builder_strategy()) {
            let bytes = builder.build().unwrap();
            let mut batches = RecordBatches::new(bytes.clone());
            let batch = batches.next().unwrap().unwrap();
            prop_assert!(batches.next().is_none());
            prop_assert_eq!(batches.remaining_partial(), 0);
            batch.verify_crc().unwrap();

            let expected = RawBatch::from_bytes(
                BatchBuilder::from_batch(&batch).with_records(records.clone()).build().unwrap(),
            )
            .unwrap();
            prop_assert_eq!(expected.as_bytes(), batch.as_bytes());

            let count = i32::try_from(records.len()).unwrap();
            prop_assert_eq!(batch.records_count(), count);
            prop_assert_eq!(batch.last_offset_delta(), count - 1);
            if batch.timestamp_type() == TimestampType::CreateTime {
                let max = records
                    .iter()
                    .map(|r| batch.base_timestamp().wrapping_add(r.timestamp_delta))
                    .max()
                    .unwrap();
                prop_assert_eq!(batch.max_timestamp(), max);
            }
            let parsed: Vec<Record> = batch.records().unwrap().map(Result::unwrap).collect();
            prop_assert_eq!(parsed.len(), records.len());
            for (index, (got, want)) in parsed.into_iter().zip(records).enumerate() {
                let offset_delta = i32::try_from(index).unwrap();
                prop_assert_eq!(got, Record { offset_delta, ..want });
            }
        }

        #[test]
        fn patching_keeps_crc_valid_and_other_fields((builder, _records) in builder_strategy(),
            base_offset in option::of(any::<i64>()),
            leader_epoch in option::of(any::<i32>()),
            producer_id in option::of(any::<i64>()),
            producer_epoch in option::of(any::<i16>()),
            base_sequence in option::of(any::<i32>()),
            transactional in option::of(any::<bool>()),
        ) {
            let original = RawBatch::from_bytes(builder.build().unwrap()).unwrap();
            let mut patch = original.to_mut();
            if let Some(v) = base_offset { patch.set_base_offset(v); }
            if let Some(v) = leader_epoch { patch.set_partition_leader_epoch(v); }
            if let Some(v) = producer_id { patch.set_producer_id(v); }
            if let Some(v) = producer_epoch { patch.set_producer_epoch(v); }
            if let Some(v) = base_sequence { patch.set_base_sequence(v); }
            if let Some(v) = transactional { patch.set_transactional(v); }
            let patched = RawBatch::from_bytes(patch.finish()).unwrap();
            patched.verify_crc().unwrap();

            prop_assert_eq!(patched.base_offset(), base_offset.unwrap_or(original.base_offset()));
            prop_assert_eq!(
                patched.partition_leader_epoch(),
                leader_epoch.unwrap_or(original.partition_leader_epoch())
            );
            prop_assert_eq!(patched.producer_id(), producer_id.unwrap_or(original.producer_id()));
            prop_assert_eq!(
                patched.producer_epoch(),
                producer_epoch.unwrap_or(original.producer_epoch())
            );
            prop_assert_eq!(
                patched.base_sequence(),
                base_sequence.unwrap_or(original.base_sequence())
            );
            prop_assert_eq!(
                patched.is_transactional(),
                transactional.unwrap_or(original.is_transactional())
            );
            prop_assert_eq!(patched.batch_length(), original.batch_length());
            prop_assert_eq!(patched.compression(), original.compression());
            prop_assert_eq!(patched.timestamp_type(), original.timestamp_type());
            prop_assert_eq!(patched.is_control(), original.is_control());
            prop_assert_eq!(patched.has_delete_horizon(), original.has_delete_horizon());
            prop_assert_eq!(patched.last_offset_delta(), original.last_offset_delta());
            prop_assert_eq!(patched.base_timestamp(), original.base_timestamp());
            prop_assert_eq!(patched.max_timestamp(), original.max_timestamp());
            prop_assert_eq!(patched.records_count(), original.records_count());
            prop_assert_eq!(patched.records_section(), original.records_section());
        }

        #[test]
        fn garbage_never_panics(bytes in vec(any::<u8>(), 0..600)) {
            exercise(Bytes::from(bytes));
        }

        #[test]
        fn corrupted_batches_never_panic(
            (builder, _records) in builder_strategy(),
            flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = builder.build().unwrap().to_vec();
            for (at, value) in flips {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            let cut = cut.index(bytes.len() + 1);
            let second = bytes.clone();
            bytes.extend_from_slice(&second[..cut]);
            exercise(Bytes::from(bytes));
        }
    }
}
