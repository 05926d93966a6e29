//! Kafka record batches (magic v2) as raw bytes: split a fetched `records` buffer into batches, read
//! every header field, patch header fields with a fresh CRC-32C.
//!
//! Owns:
//! - [`RecordBatches`]: zero-copy iteration over the batches of a Fetch response's `records` field,
//!   including the partial last batch a broker leaves when `max_bytes` cuts it;
//! - [`RawBatch`]: one complete batch, its header fields and CRC check;
//! - [`BatchMut`]: header patches (base offset, producer id/epoch, base sequence, ...) that keep the
//!   records section untouched and recompute the CRC;
//! - [`BatchError`]: every way a batch can be malformed or unsupported.
//!
//! Records inside a batch (decompression, record iteration, [`BatchBuilder`]) live in `records.rs`,
//! control batches (transaction markers) in `control.rs`; both are re-exported here, so this module is
//! the whole record-batch API. Produce and Fetch message bodies are not decoded here.
//!
//! Batches travel as opaque bytes: nothing here decodes records unless asked to, and the CRC is
//! checked only when [`RawBatch::verify_crc`] is called (style guide rule 24).
//!
//! ```text
//! Fetch response `records` (Bytes)
//!   │  RecordBatches::new            zero-copy split; a cut last batch ends iteration
//!   ▼
//! RawBatch ── header accessors, verify_crc, records(), control_marker()
//!   │  BatchMut::new                 header copied, records section shared
//!   │  set_base_offset(0), set_producer_id(..), set_base_sequence(..)
//!   ▼
//! BatchMut::finish ──▶ Bytes for a Produce request (CRC-32C recomputed)
//! ```
//!
//! # Layout (all integers big-endian)
//!
//! ```text
//! offset  size  field                 in CRC
//!      0     8  baseOffset             no
//!      8     4  batchLength            no   (bytes after this field)
//!     12     4  partitionLeaderEpoch   no
//!     16     1  magic (= 2)            no
//!     17     4  crc (CRC-32C)          no
//!     21     2  attributes             yes
//!     23     4  lastOffsetDelta        yes
//!     27     8  baseTimestamp          yes
//!     35     8  maxTimestamp           yes
//!     43     8  producerId             yes
//!     51     2  producerEpoch          yes
//!     53     4  baseSequence           yes
//!     57     4  recordsCount           yes
//!     61     -  records                yes
//! ```
//!
//! # References
//! - Record batch format: <https://kafka.apache.org/documentation/#recordbatch>
//! - Kafka's `DefaultRecordBatch` (layout, attribute bits, CRC coverage) and
//!   `ByteBufferLogInputStream` (how a partial last batch is handled):
//!   <https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/record/DefaultRecordBatch.java>
//! - KIP-98 (v2 format, producer ids, transactions, control batches):
//!   <https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging>
//! - KIP-110 (zstd): <https://cwiki.apache.org/confluence/display/KAFKA/KIP-110%3A+Add+Codec+for+ZStandard+Compression>
//! - KIP-534 (delete horizon attribute):
//!   <https://cwiki.apache.org/confluence/display/KAFKA/KIP-534%3A+Retain+tombstones+and+transaction+markers+for+approximately+delete.retention.ms+milliseconds>

use std::fmt;
use std::iter::FusedIterator;

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub use super::control::{ControlBatchSpec, ControlRecordPart, ControlType, build_control_batch};
pub use super::records::{BatchBuilder, DEFAULT_MAX_UNCOMPRESSED_BYTES, Record, RecordFault, RecordField, RecordIter};

/// The only record batch format this module reads and writes.
pub const MAGIC_V2: i8 = 2;

/// Size in bytes of the v2 batch header, i.e. of a batch without records (Kafka's
/// `RECORD_BATCH_OVERHEAD`).
pub const RECORD_BATCH_OVERHEAD: usize = 61;

/// `producerId` of a batch without a producer. Any negative id means "no producer" to the broker
/// (`AbstractRecordBatch.hasProducerId`).
pub const NO_PRODUCER_ID: i64 = -1;
/// `producerEpoch` of a batch without a producer.
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// `baseSequence` of a batch without a producer.
pub const NO_SEQUENCE: i32 = -1;
/// `partitionLeaderEpoch` of a batch built by a client; the broker overwrites it on append.
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// baseOffset (8) + batchLength (4): the bytes in front of what `batchLength` counts.
const LOG_OVERHEAD: usize = 12;
/// Position of the magic byte.
const MAGIC_OFFSET: usize = 16;
/// Smallest `batchLength` of a v2 batch: the header after the length field.
const MIN_BATCH_LENGTH_V2: i32 = 49;
/// The magic byte must lie inside the batch before it can be trusted: 16 + 1 - 12.
const MIN_BATCH_LENGTH_ANY: i32 = 5;

// Attribute bits (`DefaultRecordBatch`).
const COMPRESSION_MASK: i16 = 0x07;
pub(crate) const TIMESTAMP_TYPE_FLAG: i16 = 0x08;
pub(crate) const TRANSACTIONAL_FLAG: i16 = 0x10;
pub(crate) const CONTROL_FLAG: i16 = 0x20;
pub(crate) const DELETE_HORIZON_FLAG: i16 = 0x40;

/// Everything that can be wrong with a record batch or the records inside it.
///
/// Who failed: all variants describe the input bytes (the broker or client that sent them), except
/// [`Compress`](Self::Compress) (our codec) and [`NoRecords`](Self::NoRecords) /
/// [`BatchTooLarge`](Self::BatchTooLarge) (the caller of [`BatchBuilder`]). None is retry safe: the
/// same bytes fail the same way again.
///
/// `position` fields are byte positions: in the fetched buffer for framing errors, in the
/// (decompressed) records section for record errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// `batchLength` is negative or smaller than the v2 header.
    #[error("invalid batch length {batch_length} at position {position} (base offset {base_offset})")]
    InvalidBatchLength { position: usize, base_offset: i64, batch_length: i32 },
    /// Magic 0 or 1: a legacy message set (pre-0.11 format), which this project does not copy.
    #[error("legacy message format v{magic} at position {position} (base offset {base_offset}) is not supported")]
    UnsupportedMagic { position: usize, base_offset: i64, magic: i8 },
    /// A magic byte no Kafka version writes.
    #[error("unknown magic {magic} at position {position} (base offset {base_offset})")]
    UnknownMagic { position: usize, base_offset: i64, magic: i8 },
    /// [`RawBatch::from_bytes`] got fewer bytes than the batch needs.
    #[error("batch truncated: {needed} bytes needed, {available} available")]
    Truncated { needed: usize, available: usize },
    /// [`RawBatch::from_bytes`] got more bytes than `batchLength` accounts for.
    #[error("batch at base offset {base_offset} is {batch_size} bytes but {actual} bytes were given")]
    TrailingBytes { base_offset: i64, batch_size: usize, actual: usize },
    /// The stored CRC-32C does not match the bytes from `attributes` to the end.
    #[error("CRC mismatch in batch at base offset {base_offset}: stored {expected:#010x}, computed {computed:#010x}")]
    CrcMismatch { base_offset: i64, expected: u32, computed: u32 },
    /// The compression bits name a codec Kafka does not define (5, 6 or 7).
    #[error("unknown compression codec {codec} in batch at base offset {base_offset}")]
    UnknownCompression { base_offset: i64, codec: u8 },
    /// The records section could not be decompressed.
    #[error("cannot decompress {compression} records of batch at base offset {base_offset}")]
    Decompress {
        base_offset: i64,
        compression: Compression,
        #[source]
        source: std::io::Error,
    },
    /// The records section decompresses to more than the caller's limit.
    #[error("{compression} records of batch at base offset {base_offset} exceed {limit} bytes uncompressed")]
    DecompressedTooLarge { base_offset: i64, compression: Compression, limit: usize },
    /// `recordsCount` is negative.
    #[error("invalid records count {records_count} in batch at base offset {base_offset}")]
    InvalidRecordsCount { base_offset: i64, records_count: i32 },
    /// A record inside the batch is malformed.
    #[error("malformed record {record_index} at position {position} in batch at base offset {base_offset}: {fault}")]
    MalformedRecord { base_offset: i64, record_index: usize, position: usize, fault: RecordFault },
    /// Bytes remain in the records section after `recordsCount` records.
    #[error("{trailing} bytes after the {records_count} records of batch at base offset {base_offset}")]
    TrailingRecordBytes { base_offset: i64, records_count: i32, trailing: usize },
    /// A control marker was asked of a batch without the control attribute.
    #[error("batch at base offset {base_offset} is not a control batch")]
    NotControlBatch { base_offset: i64 },
    /// A control batch holds more than one record (Kafka writes exactly one, or none after cleaning).
    #[error("control batch at base offset {base_offset} holds {records_count} records, expected 0 or 1")]
    InvalidControlBatch { base_offset: i64, records_count: i32 },
    /// A control record's key or value is null or shorter than its schema.
    #[error(
        "control record {part} in batch at base offset {base_offset} has {} bytes, {needed} needed",
        actual.map_or_else(|| "null".to_owned(), |len| len.to_string())
    )]
    MalformedControlRecord {
        base_offset: i64,
        part: ControlRecordPart,
        needed: usize,
        /// `None` when the key or value is null.
        actual: Option<usize>,
    },
    /// A control record's key or value carries a negative schema version.
    #[error("control record {part} in batch at base offset {base_offset} has invalid version {version}")]
    InvalidControlVersion { base_offset: i64, part: ControlRecordPart, version: i16 },
    /// A control record type other than ABORT (0) and COMMIT (1), e.g. a KRaft metadata-log type.
    #[error("unknown control record type {control_type} in batch at base offset {base_offset}")]
    UnknownControlType { base_offset: i64, control_type: i16 },
    /// [`BatchBuilder::build`] was called without records; Kafka rejects empty produced batches.
    #[error("cannot build a batch without records")]
    NoRecords,
    /// [`BatchBuilder::build`] would exceed the `i32` size or count fields of the format.
    #[error("batch too large to encode: {size} (limit {limit})")]
    BatchTooLarge { size: usize, limit: usize },
    /// Our compressor failed while building a batch.
    #[error("cannot compress records with {compression}")]
    Compress {
        compression: Compression,
        #[source]
        source: std::io::Error,
    },
}

/// The codec of a batch's records section: attribute bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    /// Added with KIP-110 (Kafka 2.1); needs Produce v7+.
    Zstd,
    /// Codec ids 5-7, which Kafka does not define.
    Unknown(u8),
}

impl Compression {
    /// Reads the codec from a batch's `attributes`.
    pub fn from_attributes(attributes: i16) -> Self {
        match attributes & COMPRESSION_MASK {
            0 => Self::None,
            1 => Self::Gzip,
            2 => Self::Snappy,
            3 => Self::Lz4,
            4 => Self::Zstd,
            // The mask keeps the value in 5..=7.
            other => Self::Unknown(other.unsigned_abs().to_le_bytes()[0]),
        }
    }

    /// The codec id stored in attribute bits 0-2.
    pub fn id(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
            Self::Unknown(id) => id & 0x07,
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("uncompressed"),
            Self::Gzip => f.write_str("gzip"),
            Self::Snappy => f.write_str("snappy"),
            Self::Lz4 => f.write_str("lz4"),
            Self::Zstd => f.write_str("zstd"),
            Self::Unknown(id) => write!(f, "codec {id}"),
        }
    }
}

/// What record timestamps mean: attribute bit 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimestampType {
    /// Set by the producer; records carry `baseTimestamp + timestampDelta`.
    CreateTime,
    /// Set by the broker on append; every record's timestamp is the batch `maxTimestamp` and the
    /// per-record deltas are meaningless.
    LogAppendTime,
}

/// The v2 header fields, decoded once when a batch is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub(crate) base_offset: i64,
    pub(crate) batch_length: i32,
    pub(crate) partition_leader_epoch: i32,
    pub(crate) magic: i8,
    pub(crate) crc: u32,
    pub(crate) attributes: i16,
    pub(crate) last_offset_delta: i32,
    pub(crate) base_timestamp: i64,
    pub(crate) max_timestamp: i64,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
    pub(crate) records_count: i32,
}

impl BatchHeader {
    /// Reads the header from the start of `buf`; `None` if `buf` is shorter than the header.
    fn decode(mut buf: &[u8]) -> Option<Self> {
        let buf = &mut buf;
        Some(Self {
            base_offset: buf.try_get_i64().ok()?,
            batch_length: buf.try_get_i32().ok()?,
            partition_leader_epoch: buf.try_get_i32().ok()?,
            magic: buf.try_get_i8().ok()?,
            crc: buf.try_get_u32().ok()?,
            attributes: buf.try_get_i16().ok()?,
            last_offset_delta: buf.try_get_i32().ok()?,
            base_timestamp: buf.try_get_i64().ok()?,
            max_timestamp: buf.try_get_i64().ok()?,
            producer_id: buf.try_get_i64().ok()?,
            producer_epoch: buf.try_get_i16().ok()?,
            base_sequence: buf.try_get_i32().ok()?,
            records_count: buf.try_get_i32().ok()?,
        })
    }

    /// The header bytes covered by the CRC: `attributes` through `recordsCount`.
    fn crc_covered_fields(&self) -> [u8; RECORD_BATCH_OVERHEAD - 21] {
        let mut out = [0u8; RECORD_BATCH_OVERHEAD - 21];
        let mut buf = &mut out[..];
        buf.put_i16(self.attributes);
        buf.put_i32(self.last_offset_delta);
        buf.put_i64(self.base_timestamp);
        buf.put_i64(self.max_timestamp);
        buf.put_i64(self.producer_id);
        buf.put_i16(self.producer_epoch);
        buf.put_i32(self.base_sequence);
        buf.put_i32(self.records_count);
        out
    }
}

/// Writes a complete batch: `header` (its `crc` field ignored) followed by `records`, with the
/// CRC-32C computed over `attributes` to the end. `header.batch_length` must already be
/// `49 + records.len()`.
pub(crate) fn encode_batch(header: &BatchHeader, records: &[u8]) -> Bytes {
    let covered = header.crc_covered_fields();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&covered), records);
    let mut out = BytesMut::with_capacity(RECORD_BATCH_OVERHEAD.saturating_add(records.len()));
    out.put_i64(header.base_offset);
    out.put_i32(header.batch_length);
    out.put_i32(header.partition_leader_epoch);
    out.put_i8(header.magic);
    out.put_u32(crc);
    out.put_slice(&covered);
    out.put_slice(records);
    out.freeze()
}

/// Where the next batch of a buffer ends.
enum Frame {
    /// A complete batch of this many bytes starts the buffer.
    Complete(usize),
    /// The buffer ends before the batch does; the batch needs this many bytes (as far as known).
    Partial { needed: usize },
}

/// Frames the batch at the start of `rest`, which sits at `position` in the caller's buffer.
///
/// Checks the length and magic as soon as their bytes are present, so a legacy or corrupt batch is
/// reported even when the buffer cuts it.
fn frame(rest: &[u8], position: usize) -> Result<Frame, BatchError> {
    let mut buf = rest;
    let (Ok(base_offset), Ok(batch_length)) = (buf.try_get_i64(), buf.try_get_i32()) else {
        return Ok(Frame::Partial { needed: LOG_OVERHEAD });
    };
    let invalid_length = || BatchError::InvalidBatchLength { position, base_offset, batch_length };
    if batch_length < MIN_BATCH_LENGTH_ANY {
        return Err(invalid_length());
    }
    let Some(&magic) = rest.get(MAGIC_OFFSET) else {
        return Ok(Frame::Partial { needed: MAGIC_OFFSET + 1 });
    };
    let magic = i8::from_be_bytes([magic]);
    match magic {
        MAGIC_V2 => {}
        0 | 1 => {
            return Err(BatchError::UnsupportedMagic { position, base_offset, magic });
        }
        _ => {
            return Err(BatchError::UnknownMagic { position, base_offset, magic });
        }
    }
    if batch_length < MIN_BATCH_LENGTH_V2 {
        return Err(invalid_length());
    }
    let size = usize::try_from(batch_length).ok().and_then(|len| len.checked_add(LOG_OVERHEAD)).ok_or_else(invalid_length)?;
    if rest.len() < size { Ok(Frame::Partial { needed: size }) } else { Ok(Frame::Complete(size)) }
}

/// The batches of a Fetch response's `records` field (or of any concatenation of v2 batches).
///
/// Yields one [`RawBatch`] per complete batch, each a zero-copy slice of the buffer. Iteration
/// ends normally when the buffer ends, also in the middle of a batch: brokers cut the last batch
/// when a fetch's `max_bytes` runs out, and [`remaining_partial`](Self::remaining_partial) then
/// tells how many bytes were left over. (A partial first batch means the fetch's `max_bytes` was
/// smaller than that batch, or a corrupt length.)
///
/// A framing error (invalid length, legacy or unknown magic) is yielded once, then iteration
/// stops: the position of the next batch is unknown after it. CRCs are not checked here; call
/// [`RawBatch::verify_crc`] where it matters.
#[derive(Clone)]
pub struct RecordBatches {
    rest: Bytes,
    position: usize,
    partial: usize,
    done: bool,
}

impl RecordBatches {
    /// Iterates the batches of `records`.
    pub fn new(records: Bytes) -> Self {
        Self { rest: records, position: 0, partial: 0, done: false }
    }

    /// Bytes of the buffer consumed by the batches yielded so far.
    pub fn position(&self) -> usize {
        self.position
    }

    /// Bytes at the end of the buffer that do not form a complete batch. Zero until the iterator
    /// has returned `None`, and zero if the buffer ended exactly on a batch boundary.
    pub fn remaining_partial(&self) -> usize {
        self.partial
    }
}

impl fmt::Debug for RecordBatches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordBatches")
            .field("position", &self.position)
            .field("remaining", &self.rest.len())
            .field("partial", &self.partial)
            .field("done", &self.done)
            .finish()
    }
}

impl Iterator for RecordBatches {
    type Item = Result<RawBatch, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.rest.is_empty() {
            self.done = true;
            return None;
        }
        match frame(&self.rest, self.position) {
            Ok(Frame::Complete(size)) if size <= self.rest.len() => {
                let bytes = self.rest.split_to(size);
                self.position += size;
                let batch = RawBatch::from_framed(bytes);
                if batch.is_err() {
                    self.done = true;
                }
                Some(batch)
            }
            Ok(Frame::Complete(_) | Frame::Partial { .. }) => {
                self.partial = self.rest.len();
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }
}

impl FusedIterator for RecordBatches {}

/// One complete v2 record batch: its bytes (shared, not copied) and its decoded header.
///
/// Construction checks the framing (length, magic) only; the CRC and the records section are
/// checked when asked for ([`verify_crc`](Self::verify_crc), [`records`](Self::records)).
#[derive(Clone, PartialEq, Eq)]
pub struct RawBatch {
    bytes: Bytes,
    header: BatchHeader,
}

impl RawBatch {
    /// Takes `bytes` as exactly one batch.
    ///
    /// # Errors
    /// The framing errors of [`RecordBatches`], [`BatchError::Truncated`] if `bytes` ends before
    /// the batch does, and [`BatchError::TrailingBytes`] if it continues after it.
    pub fn from_bytes(bytes: Bytes) -> Result<Self, BatchError> {
        match frame(&bytes, 0)? {
            Frame::Complete(size) if size == bytes.len() => Self::from_framed(bytes),
            Frame::Complete(size) => {
                Err(BatchError::TrailingBytes { base_offset: BatchHeader::decode(&bytes).map_or(-1, |h| h.base_offset), batch_size: size, actual: bytes.len() })
            }
            Frame::Partial { needed } => Err(BatchError::Truncated { needed, available: bytes.len() }),
        }
    }

    /// Builds a batch from bytes that [`frame`] found complete.
    fn from_framed(bytes: Bytes) -> Result<Self, BatchError> {
        // `frame` guarantees at least RECORD_BATCH_OVERHEAD bytes; stay checked regardless.
        let header = BatchHeader::decode(&bytes).ok_or(BatchError::Truncated { needed: RECORD_BATCH_OVERHEAD, available: bytes.len() })?;
        Ok(Self { bytes, header })
    }

    /// The whole batch, header included.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The whole batch, header included.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// Size of the whole batch in bytes (`batchLength + 12`).
    pub fn size_in_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The records section: everything after the 61-byte header, still compressed if the batch is.
    pub fn records_section(&self) -> Bytes {
        self.bytes.slice(RECORD_BATCH_OVERHEAD.min(self.bytes.len())..)
    }

    /// Offset of the first record as the log assigned it (the source offset when fetched). Not
    /// covered by the CRC.
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }

    /// Bytes after the `batchLength` field. Not covered by the CRC.
    pub fn batch_length(&self) -> i32 {
        self.header.batch_length
    }

    /// Leader epoch of the broker that appended the batch. Not covered by the CRC; ignored and
    /// overwritten by the broker on client produce.
    pub fn partition_leader_epoch(&self) -> i32 {
        self.header.partition_leader_epoch
    }

    /// Always [`MAGIC_V2`] for a framed batch.
    pub fn magic(&self) -> i8 {
        self.header.magic
    }

    /// The stored CRC-32C of `attributes` to the end.
    pub fn crc(&self) -> u32 {
        self.header.crc
    }

    /// Raw attribute bits; see the typed helpers below.
    pub fn attributes(&self) -> i16 {
        self.header.attributes
    }

    /// Codec of the records section (attribute bits 0-2).
    pub fn compression(&self) -> Compression {
        Compression::from_attributes(self.header.attributes)
    }

    /// Meaning of record timestamps (attribute bit 3).
    pub fn timestamp_type(&self) -> TimestampType {
        if self.header.attributes & TIMESTAMP_TYPE_FLAG == 0 { TimestampType::CreateTime } else { TimestampType::LogAppendTime }
    }

    /// Part of a transaction (attribute bit 4). Added with KIP-98.
    pub fn is_transactional(&self) -> bool {
        self.header.attributes & TRANSACTIONAL_FLAG != 0
    }

    /// Holds a control record such as a transaction marker (attribute bit 5). Added with KIP-98.
    pub fn is_control(&self) -> bool {
        self.header.attributes & CONTROL_FLAG != 0
    }

    /// `baseTimestamp` holds the delete horizon set by the log cleaner (attribute bit 6). Added
    /// with KIP-534.
    pub fn has_delete_horizon(&self) -> bool {
        self.header.attributes & DELETE_HORIZON_FLAG != 0
    }

    /// Offset of the last record relative to `base_offset`. After compaction it can exceed
    /// `records_count - 1` (holes), and empty batches kept by the cleaner keep their old value.
    pub fn last_offset_delta(&self) -> i32 {
        self.header.last_offset_delta
    }

    /// Timestamp of the first record (ms since epoch), or the delete horizon when
    /// [`has_delete_horizon`](Self::has_delete_horizon).
    pub fn base_timestamp(&self) -> i64 {
        self.header.base_timestamp
    }

    /// Largest record timestamp (ms since epoch); the append time for
    /// [`TimestampType::LogAppendTime`].
    pub fn max_timestamp(&self) -> i64 {
        self.header.max_timestamp
    }

    /// Producer id, or negative for "no producer".
    pub fn producer_id(&self) -> i64 {
        self.header.producer_id
    }

    /// Whether the broker treats the batch as produced by an idempotent or transactional producer:
    /// `producer_id() >= 0` (`AbstractRecordBatch.hasProducerId`).
    pub fn has_producer_id(&self) -> bool {
        self.header.producer_id > NO_PRODUCER_ID
    }

    /// Producer epoch, or -1.
    pub fn producer_epoch(&self) -> i16 {
        self.header.producer_epoch
    }

    /// Sequence number of the first record, or -1.
    pub fn base_sequence(&self) -> i32 {
        self.header.base_sequence
    }

    /// Number of records in the batch as the header states it (0 for a cleaned-out batch).
    pub fn records_count(&self) -> i32 {
        self.header.records_count
    }

    /// `base_offset + last_offset_delta`, wrapping like Kafka's Java arithmetic on corrupt input.
    pub fn last_offset(&self) -> i64 {
        self.header.base_offset.wrapping_add(i64::from(self.header.last_offset_delta))
    }

    /// The offset after this batch: `base_offset + last_offset_delta + 1`.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }

    /// Checks the stored CRC-32C against the bytes from `attributes` to the end of the batch.
    ///
    /// # Errors
    /// [`BatchError::CrcMismatch`] when they differ.
    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let covered = self.bytes.get(21..).unwrap_or_default();
        let computed = crc32c::crc32c(covered);
        if computed == self.header.crc {
            Ok(())
        } else {
            Err(BatchError::CrcMismatch { base_offset: self.header.base_offset, expected: self.header.crc, computed })
        }
    }

    /// A patchable copy of this batch's header sharing its records section.
    pub fn to_mut(&self) -> BatchMut {
        BatchMut::new(self)
    }
}

impl fmt::Debug for RawBatch {
    /// Header fields and size only; the bytes themselves are not dumped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawBatch").field("size_in_bytes", &self.bytes.len()).field("header", &self.header).finish()
    }
}

/// A batch whose header fields are being patched. The records section is never touched, so it is
/// shared with the source [`RawBatch`] rather than copied; [`finish`](Self::finish) writes the
/// patched batch into one new buffer with a recomputed CRC-32C.
///
/// The CRC covers `attributes` through the end of the records, so changing the producer id, epoch,
/// base sequence, attributes or timestamps needs the new CRC. `baseOffset`, `batchLength`,
/// `partitionLeaderEpoch` and `magic` lie before it; setting only those leaves the CRC unchanged
/// (the replicator still goes through `finish`, which is correct either way).
#[derive(Clone, PartialEq, Eq)]
pub struct BatchMut {
    header: BatchHeader,
    records: Bytes,
}

impl BatchMut {
    /// Copies the header of `batch`; the records section is shared.
    pub fn new(batch: &RawBatch) -> Self {
        Self { header: batch.header, records: batch.records_section() }
    }

    /// Sets `baseOffset` (outside the CRC). The broker requires 0 on client produce.
    pub fn set_base_offset(&mut self, base_offset: i64) -> &mut Self {
        self.header.base_offset = base_offset;
        self
    }

    /// Sets `partitionLeaderEpoch` (outside the CRC).
    pub fn set_partition_leader_epoch(&mut self, epoch: i32) -> &mut Self {
        self.header.partition_leader_epoch = epoch;
        self
    }

    /// Sets `producerId`.
    pub fn set_producer_id(&mut self, producer_id: i64) -> &mut Self {
        self.header.producer_id = producer_id;
        self
    }

    /// Sets `producerEpoch`.
    pub fn set_producer_epoch(&mut self, producer_epoch: i16) -> &mut Self {
        self.header.producer_epoch = producer_epoch;
        self
    }

    /// Sets `baseSequence`.
    pub fn set_base_sequence(&mut self, base_sequence: i32) -> &mut Self {
        self.header.base_sequence = base_sequence;
        self
    }

    /// Sets the attribute bits, except the compression bits (0-2), which are kept: the records
    /// section is not re-encoded, so its codec cannot change here.
    pub fn set_attributes(&mut self, attributes: i16) -> &mut Self {
        self.header.attributes = (attributes & !COMPRESSION_MASK) | (self.header.attributes & COMPRESSION_MASK);
        self
    }

    /// Sets the timestamp-type bit. Clearing LogAppendTime alone changes what consumers read
    /// (base + delta instead of `maxTimestamp`); rewriting such batches needs [`BatchBuilder`].
    pub fn set_timestamp_type(&mut self, timestamp_type: TimestampType) -> &mut Self {
        match timestamp_type {
            TimestampType::CreateTime => self.header.attributes &= !TIMESTAMP_TYPE_FLAG,
            TimestampType::LogAppendTime => self.header.attributes |= TIMESTAMP_TYPE_FLAG,
        }
        self
    }

    /// Sets or clears the transactional bit.
    pub fn set_transactional(&mut self, transactional: bool) -> &mut Self {
        if transactional {
            self.header.attributes |= TRANSACTIONAL_FLAG;
        } else {
            self.header.attributes &= !TRANSACTIONAL_FLAG;
        }
        self
    }

    /// Sets `baseTimestamp` (ms). Record timestamps are relative to it under CreateTime.
    pub fn set_base_timestamp(&mut self, base_timestamp: i64) -> &mut Self {
        self.header.base_timestamp = base_timestamp;
        self
    }

    /// Sets `maxTimestamp` (ms).
    pub fn set_max_timestamp(&mut self, max_timestamp: i64) -> &mut Self {
        self.header.max_timestamp = max_timestamp;
        self
    }

    /// Writes the patched batch with a fresh CRC-32C over `attributes` to the end.
    pub fn finish(self) -> Bytes {
        encode_batch(&self.header, &self.records)
    }
}

impl From<&RawBatch> for BatchMut {
    fn from(batch: &RawBatch) -> Self {
        Self::new(batch)
    }
}

impl fmt::Debug for BatchMut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchMut").field("header", &self.header).field("records_len", &self.records.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One uncompressed record: value "v", no key, no headers, offset delta `delta`.
    fn record_bytes(delta: u8) -> Vec<u8> {
        // length 7, attributes 0, timestampDelta 0, offsetDelta, key -1, value len 1, "v", 0 headers
        // (varints zigzag-encoded).
        vec![0x0e, 0, 0, delta * 2, 0x01, 0x02, b'v', 0]
    }

    /// A batch written field by field, independently of `encode_batch`.
    fn hand_built(base_offset: i64, attributes: i16, records: &[Vec<u8>]) -> Vec<u8> {
        let section: Vec<u8> = records.concat();
        let count = i32::try_from(records.len()).unwrap();
        let mut tail = Vec::new();
        tail.put_i16(attributes);
        tail.put_i32(count - 1); // lastOffsetDelta
        tail.put_i64(1_700_000_000_000); // baseTimestamp
        tail.put_i64(1_700_000_000_500); // maxTimestamp
        tail.put_i64(4242); // producerId
        tail.put_i16(7); // producerEpoch
        tail.put_i32(100); // baseSequence
        tail.put_i32(count);
        tail.extend_from_slice(&section);
        let mut out = Vec::new();
        out.put_i64(base_offset);
        out.put_i32(i32::try_from(tail.len() + 9).unwrap());
        out.put_i32(3); // partitionLeaderEpoch
        out.put_i8(2);
        out.put_u32(crc32c::crc32c(&tail));
        out.extend_from_slice(&tail);
        out
    }

    fn header_field_mut(bytes: &mut [u8], at: usize) -> &mut u8 {
        bytes.get_mut(at).unwrap()
    }

    #[test]
    fn reads_every_header_field_of_a_hand_built_batch() {
        let bytes = hand_built(1000, 0x10 | 0x08, &[record_bytes(0), record_bytes(1)]);
        let mut batches = RecordBatches::new(Bytes::from(bytes.clone()));
        let batch = batches.next().unwrap().unwrap();
        assert!(batches.next().is_none());
        assert_eq!(batches.remaining_partial(), 0);
        assert_eq!(batches.position(), bytes.len());

        assert_eq!(batch.as_bytes().as_ref(), bytes.as_slice());
        assert_eq!(batch.size_in_bytes(), bytes.len());
        assert_eq!(batch.base_offset(), 1000);
        assert_eq!(batch.batch_length(), i32::try_from(bytes.len() - 12).unwrap());
        assert_eq!(batch.partition_leader_epoch(), 3);
        assert_eq!(batch.magic(), MAGIC_V2);
        assert_eq!(batch.attributes(), 0x18);
        assert_eq!(batch.compression(), Compression::None);
        assert_eq!(batch.timestamp_type(), TimestampType::LogAppendTime);
        assert!(batch.is_transactional());
        assert!(!batch.is_control());
        assert!(!batch.has_delete_horizon());
        assert_eq!(batch.last_offset_delta(), 1);
        assert_eq!(batch.base_timestamp(), 1_700_000_000_000);
        assert_eq!(batch.max_timestamp(), 1_700_000_000_500);
        assert_eq!(batch.producer_id(), 4242);
        assert!(batch.has_producer_id());
        assert_eq!(batch.producer_epoch(), 7);
        assert_eq!(batch.base_sequence(), 100);
        assert_eq!(batch.records_count(), 2);
        assert_eq!(batch.last_offset(), 1001);
        assert_eq!(batch.next_offset(), 1002);
        assert_eq!(batch.records_section().len(), 16);
        batch.verify_crc().unwrap();

        let records: Vec<Record> = batch.records().unwrap().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        assert_eq!(batch.record_offset(&records[1]), 1001);
        assert_eq!(records[1].value.as_deref(), Some(&b"v"[..]));
        // LogAppendTime: every record carries maxTimestamp.
        assert_eq!(batch.record_timestamp(&records[0]), 1_700_000_000_500);
    }

    #[test]
    fn attribute_helpers() {
        for (bits, codec) in [
            (0, Compression::None),
            (1, Compression::Gzip),
            (2, Compression::Snappy),
            (3, Compression::Lz4),
            (4, Compression::Zstd),
            (5, Compression::Unknown(5)),
            (7, Compression::Unknown(7)),
        ] {
            assert_eq!(Compression::from_attributes(bits | 0x70), codec);
            assert_eq!(i16::from(codec.id()), bits);
        }
        let batch = RawBatch::from_bytes(hand_built(0, 0x20 | 0x40, &[record_bytes(0)]).into()).unwrap();
        assert!(batch.is_control());
        assert!(batch.has_delete_horizon());
        assert!(!batch.is_transactional());
        assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
    }

    #[test]
    fn partial_last_batch_ends_iteration_at_every_cut() {
        let first = hand_built(0, 0, &[record_bytes(0)]);
        let second = hand_built(1, 0, &[record_bytes(0), record_bytes(1)]);
        let all = [first.clone(), second.clone()].concat();
        for cut in 0..=all.len() {
            let mut batches = RecordBatches::new(Bytes::copy_from_slice(&all[..cut]));
            let yielded: Vec<RawBatch> = batches.by_ref().map(Result::unwrap).collect();
            let (expected, consumed) = if cut == all.len() {
                (2, all.len())
            } else if cut >= first.len() {
                (1, first.len())
            } else {
                (0, 0)
            };
            assert_eq!(yielded.len(), expected, "cut at {cut}");
            assert_eq!(batches.position(), consumed, "cut at {cut}");
            assert_eq!(batches.remaining_partial(), cut - consumed, "cut at {cut}");
            assert!(batches.next().is_none());
        }
    }

    #[test]
    fn rejects_negative_and_short_lengths() {
        let mut bytes = hand_built(77, 0, &[record_bytes(0)]);
        bytes[8..12].copy_from_slice(&(-1i32).to_be_bytes());
        let mut batches = RecordBatches::new(Bytes::from(bytes.clone()));
        assert!(matches!(batches.next(), Some(Err(BatchError::InvalidBatchLength { position: 0, base_offset: 77, batch_length: -1 }))));
        assert!(batches.next().is_none(), "no resynchronisation after a framing error");

        // Long enough to hold the magic byte, shorter than the v2 header.
        bytes[8..12].copy_from_slice(&48i32.to_be_bytes());
        assert!(matches!(RawBatch::from_bytes(Bytes::from(bytes.clone())), Err(BatchError::InvalidBatchLength { batch_length: 48, .. })));
        bytes[8..12].copy_from_slice(&4i32.to_be_bytes());
        assert!(matches!(RawBatch::from_bytes(Bytes::from(bytes)), Err(BatchError::InvalidBatchLength { batch_length: 4, .. })));
    }

    #[test]
    fn error_position_is_that_of_the_bad_batch() {
        let good = hand_built(0, 0, &[record_bytes(0)]);
        let mut bad = hand_built(1, 0, &[record_bytes(0)]);
        *header_field_mut(&mut bad, 16) = 1;
        let all = [good.clone(), bad].concat();
        let results: Vec<_> = RecordBatches::new(all.into()).collect();
        assert_eq!(results.len(), 2);
        assert!(results[0].is_ok());
        assert!(matches!(
            results[1],
            Err(BatchError::UnsupportedMagic { position, base_offset: 1, magic: 1 })
                if position == good.len()
        ));
    }

    #[test]
    fn reports_legacy_and_unknown_magic() {
        for magic in [0i8, 1] {
            let mut bytes = hand_built(5, 0, &[record_bytes(0)]);
            bytes[16] = magic.to_be_bytes()[0];
            let error = RawBatch::from_bytes(bytes.into()).unwrap_err();
            assert!(matches!(
                error,
                BatchError::UnsupportedMagic { base_offset: 5, magic: m, .. } if m == magic
            ));
            assert!(error.to_string().contains("legacy message format"));
        }
        for magic in [3i8, -1, 127] {
            let mut bytes = hand_built(5, 0, &[record_bytes(0)]);
            bytes[16] = magic.to_be_bytes()[0];
            assert!(matches!(
                RawBatch::from_bytes(bytes.into()),
                Err(BatchError::UnknownMagic { magic: m, .. }) if m == magic
            ));
        }
        // A legacy magic is reported even when the buffer cuts the batch.
        let mut bytes = hand_built(9, 0, &[record_bytes(0)]);
        bytes[16] = 1;
        bytes.truncate(20);
        let mut batches = RecordBatches::new(bytes.into());
        assert!(matches!(batches.next(), Some(Err(BatchError::UnsupportedMagic { base_offset: 9, .. }))));
    }

    #[test]
    fn from_bytes_wants_exactly_one_batch() {
        let bytes = hand_built(3, 0, &[record_bytes(0)]);
        let len = bytes.len();
        assert!(RawBatch::from_bytes(Bytes::from(bytes.clone())).is_ok());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            RawBatch::from_bytes(longer.into()),
            Err(BatchError::TrailingBytes { base_offset: 3, batch_size, actual })
                if batch_size == len && actual == len + 1
        ));
        assert!(matches!(
            RawBatch::from_bytes(Bytes::copy_from_slice(&bytes[..len - 1])),
            Err(BatchError::Truncated { needed, available }) if needed == len && available == len - 1
        ));
        assert!(matches!(RawBatch::from_bytes(Bytes::copy_from_slice(&bytes[..5])), Err(BatchError::Truncated { needed: 12, available: 5 })));
    }

    #[test]
    fn crc_covers_attributes_to_the_end_only() {
        let bytes = hand_built(3, 0, &[record_bytes(0)]);

        // Base offset, leader epoch: outside the CRC.
        let mut outside = bytes.clone();
        outside[0] ^= 0x40;
        outside[12] ^= 0x01;
        RawBatch::from_bytes(outside.into()).unwrap().verify_crc().unwrap();

        for at in [21, 40, 60, bytes.len() - 1] {
            let mut inside = bytes.clone();
            inside[at] ^= 0x01;
            let batch = RawBatch::from_bytes(inside.into()).unwrap();
            match batch.verify_crc() {
                Err(BatchError::CrcMismatch { base_offset: 3, expected, computed }) => {
                    assert_eq!(expected, batch.crc());
                    assert_ne!(expected, computed);
                }
                other => panic!("byte {at}: {other:?}"),
            }
        }
    }

    #[test]
    fn patching_base_offset_leaves_crc_alone() {
        let batch = RawBatch::from_bytes(hand_built(123, 0, &[record_bytes(0)]).into()).unwrap();
        let mut patch = batch.to_mut();
        patch.set_base_offset(0).set_partition_leader_epoch(-1);
        let patched = RawBatch::from_bytes(patch.finish()).unwrap();
        assert_eq!(patched.base_offset(), 0);
        assert_eq!(patched.partition_leader_epoch(), -1);
        assert_eq!(patched.crc(), batch.crc());
        assert_eq!(patched.as_bytes()[12 + 4..], batch.as_bytes()[12 + 4..]);
    }

    #[test]
    fn patching_producer_fields_recomputes_crc() {
        let batch = RawBatch::from_bytes(hand_built(9, 0x10 | 0x03, &[record_bytes(0)]).into()).unwrap();
        let mut patch = BatchMut::from(&batch);
        patch
            .set_base_offset(0)
            .set_producer_id(1 << 62)
            .set_producer_epoch(2)
            .set_base_sequence(17)
            .set_transactional(false)
            .set_timestamp_type(TimestampType::LogAppendTime)
            .set_base_timestamp(10)
            .set_max_timestamp(20);
        let patched = RawBatch::from_bytes(patch.finish()).unwrap();
        patched.verify_crc().unwrap();
        assert_ne!(patched.crc(), batch.crc());
        assert_eq!(patched.producer_id(), 1 << 62);
        assert_eq!(patched.producer_epoch(), 2);
        assert_eq!(patched.base_sequence(), 17);
        assert!(!patched.is_transactional());
        assert_eq!(patched.timestamp_type(), TimestampType::LogAppendTime);
        assert_eq!(patched.compression(), Compression::Lz4);
        assert_eq!(patched.base_timestamp(), 10);
        assert_eq!(patched.max_timestamp(), 20);
        assert_eq!(patched.records_section(), batch.records_section());
        assert_eq!(patched.records_count(), batch.records_count());
        assert_eq!(patched.last_offset_delta(), batch.last_offset_delta());
        assert_eq!(patched.batch_length(), batch.batch_length());
        assert_eq!(patched.partition_leader_epoch(), batch.partition_leader_epoch());
    }

    #[test]
    fn set_attributes_keeps_the_codec_bits() {
        let batch = RawBatch::from_bytes(hand_built(0, 0x04, &[record_bytes(0)]).into()).unwrap();
        let mut patch = batch.to_mut();
        patch.set_attributes(0x10 | 0x01);
        let patched = RawBatch::from_bytes(patch.finish()).unwrap();
        assert_eq!(patched.attributes(), 0x14);
        assert_eq!(patched.compression(), Compression::Zstd);
        patched.verify_crc().unwrap();
    }

    #[test]
    fn offsets_wrap_instead_of_panicking() {
        let batch = RawBatch::from_bytes(hand_built(i64::MAX, 0, &[record_bytes(0), record_bytes(1)]).into()).unwrap();
        assert_eq!(batch.last_offset(), i64::MIN);
        assert_eq!(batch.next_offset(), i64::MIN + 1);
    }

    #[test]
    fn debug_does_not_dump_bytes() {
        let batch = RawBatch::from_bytes(hand_built(0, 0, &[record_bytes(0)]).into()).unwrap();
        let debug = format!("{batch:?}");
        assert!(debug.contains("size_in_bytes"));
        assert!(!debug.contains("bytes: b\""));
    }
}
