//! Control batches: the transaction markers (COMMIT, ABORT) that end a transaction in a partition.
//!
//! Owns building a marker batch ([`build_control_batch`]) and reading the marker of a fetched
//! control batch ([`RawBatch::control_marker`]). Does not own sending markers: clients cannot
//! produce control batches, so the replicator replays them with WriteTxnMarkers and the broker
//! builds the batch itself; the builder here serves tests and fake brokers.
//!
//! A control batch has the transactional and control attributes and one record:
//!
//! ```text
//! key:   version: int16 (0)  type: int16 (0 = ABORT, 1 = COMMIT)
//! value: version: int16 (0)  coordinatorEpoch: int32
//! ```
//!
//! The log cleaner can leave a control batch with no records ("the entire transaction has been
//! cleaned"); it still takes its offsets.
//!
//! # References
//! - Control batches: <https://kafka.apache.org/documentation/#controlbatch>
//! - KIP-98, transaction markers:
//!   <https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging>
//! - Kafka's `ControlRecordType` (key parsing) and `EndTransactionMarker` (value parsing; newer value
//!   versions are read as version 0):
//!   <https://github.com/apache/kafka/blob/trunk/clients/src/main/java/org/apache/kafka/common/record/EndTransactionMarker.java>

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::batch::{BatchError, NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE, RawBatch};
use super::records::{BatchBuilder, Record};

/// Bytes of a control record key: version and type.
const KEY_LEN: usize = 4;
/// Bytes of an end-transaction marker value: version and coordinator epoch.
const VALUE_LEN: usize = 6;
/// Schema version of the key and value we write.
const MARKER_VERSION: i16 = 0;
/// Cap on a control batch's decompressed records section, in bytes. A marker record is about 20
/// bytes; Kafka writes control batches uncompressed.
const CONTROL_MAX_UNCOMPRESSED_BYTES: usize = 64 * 1024;

/// The kind of transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlType {
    /// The transaction's records are discarded by read_committed consumers.
    Abort,
    /// The transaction's records become visible to read_committed consumers.
    Commit,
}

impl ControlType {
    /// The type id stored in the control record key.
    pub fn id(self) -> i16 {
        match self {
            Self::Abort => 0,
            Self::Commit => 1,
        }
    }

    /// The marker type of a control record type id; `None` for the other control types (KRaft
    /// metadata-log records such as LEADER_CHANGE) and unknown ids.
    pub fn from_id(id: i16) -> Option<Self> {
        match id {
            0 => Some(Self::Abort),
            1 => Some(Self::Commit),
            _ => None,
        }
    }
}

/// Which part of a control record an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlRecordPart {
    Key,
    Value,
}

impl fmt::Display for ControlRecordPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Key => "key",
            Self::Value => "value",
        })
    }
}

/// What goes into a transaction-marker batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlBatchSpec {
    /// Producer whose transaction the marker ends.
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub marker: ControlType,
    /// Epoch of the transaction coordinator that wrote the marker; brokers fence smaller ones.
    pub coordinator_epoch: i32,
    /// Record and batch timestamp, ms since epoch.
    pub timestamp: i64,
}

/// Builds a valid v2 control batch holding one marker record: base offset 0, no leader epoch, no
/// sequence, transactional and control attributes, uncompressed, CreateTime, as Kafka's
/// `MemoryRecords.withEndTransactionMarker` does.
///
/// # Panics
/// Never: one small uncompressed record cannot exceed the format's limits (the `expect` below states
/// that invariant).
pub fn build_control_batch(spec: ControlBatchSpec) -> Bytes {
    let mut key = BytesMut::with_capacity(KEY_LEN);
    key.put_i16(MARKER_VERSION);
    key.put_i16(spec.marker.id());
    let mut value = BytesMut::with_capacity(VALUE_LEN);
    value.put_i16(MARKER_VERSION);
    value.put_i32(spec.coordinator_epoch);
    BatchBuilder::new()
        .with_partition_leader_epoch(NO_PARTITION_LEADER_EPOCH)
        .with_transactional(true)
        .with_control(true)
        .with_producer_id(spec.producer_id)
        .with_producer_epoch(spec.producer_epoch)
        .with_base_sequence(NO_SEQUENCE)
        .with_base_timestamp(spec.timestamp)
        .with_max_timestamp(spec.timestamp)
        .with_record(Record { key: Some(key.freeze()), value: Some(value.freeze()), ..Record::default() })
        .build()
        .expect("invariant: one small uncompressed record always encodes")
}

impl RawBatch {
    /// The transaction marker of a control batch and its coordinator epoch, or `None` for an empty
    /// control batch left by the log cleaner.
    ///
    /// Newer key or value versions are read with the version-0 layout and extra bytes ignored,
    /// as Kafka does.
    ///
    /// # Errors
    /// [`BatchError::NotControlBatch`] for a data batch, [`BatchError::InvalidControlBatch`] for
    /// more than one record, [`BatchError::UnknownControlType`] for control types other than the
    /// markers, [`BatchError::MalformedControlRecord`] / [`BatchError::InvalidControlVersion`] for
    /// a short, null or negative-version key or value, and any record error of
    /// [`records`](Self::records).
    pub fn control_marker(&self) -> Result<Option<(ControlType, i32)>, BatchError> {
        let base_offset = self.base_offset();
        if !self.is_control() {
            return Err(BatchError::NotControlBatch { base_offset });
        }
        let mut records = self.records_with_limit(CONTROL_MAX_UNCOMPRESSED_BYTES)?;
        if self.records_count() > 1 {
            return Err(BatchError::InvalidControlBatch { base_offset, records_count: self.records_count() });
        }
        let Some(record) = records.next().transpose()? else {
            return Ok(None);
        };
        // recordsCount is 1 here: this only reports bytes after the record.
        if let Some(Err(error)) = records.next() {
            return Err(error);
        }

        let mut key = versioned(base_offset, ControlRecordPart::Key, record.key, KEY_LEN)?;
        let type_id = key.try_get_i16().map_err(|_| short(base_offset, ControlRecordPart::Key, KEY_LEN, key.len()))?;
        let marker = ControlType::from_id(type_id).ok_or(BatchError::UnknownControlType { base_offset, control_type: type_id })?;

        let mut value = versioned(base_offset, ControlRecordPart::Value, record.value, VALUE_LEN)?;
        let coordinator_epoch = value.try_get_i32().map_err(|_| short(base_offset, ControlRecordPart::Value, VALUE_LEN, value.len()))?;
        Ok(Some((marker, coordinator_epoch)))
    }
}

fn short(base_offset: i64, part: ControlRecordPart, needed: usize, len: usize) -> BatchError {
    BatchError::MalformedControlRecord { base_offset, part, needed, actual: Some(len) }
}

/// Checks that a control record part is present, at least `needed` bytes long and has a
/// non-negative version; returns the bytes after the version.
fn versioned(base_offset: i64, part: ControlRecordPart, bytes: Option<Bytes>, needed: usize) -> Result<Bytes, BatchError> {
    let mut bytes = bytes.ok_or(BatchError::MalformedControlRecord { base_offset, part, needed, actual: None })?;
    let len = bytes.len();
    if len < needed {
        return Err(short(base_offset, part, needed, len));
    }
    let version = bytes.try_get_i16().map_err(|_| short(base_offset, part, needed, len))?;
    if version < 0 {
        return Err(BatchError::InvalidControlVersion { base_offset, part, version });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::records as kp;

    use super::*;
    use crate::protocol::batch::{BatchHeader, Compression, TimestampType, encode_batch};

    fn spec(marker: ControlType) -> ControlBatchSpec {
        ControlBatchSpec { producer_id: 4000, producer_epoch: 12, marker, coordinator_epoch: 33, timestamp: 1_700_000_000_123 }
    }

    /// A control batch holding one record with the given key and value.
    fn control_with(key: Option<&[u8]>, value: Option<&[u8]>) -> RawBatch {
        RawBatch::from_bytes(
            BatchBuilder::new()
                .with_transactional(true)
                .with_control(true)
                .with_base_offset(8)
                .with_record(Record { key: key.map(Bytes::copy_from_slice), value: value.map(Bytes::copy_from_slice), ..Record::default() })
                .build()
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn builds_a_marker_batch_and_reads_it_back() {
        for marker in [ControlType::Abort, ControlType::Commit] {
            let bytes = build_control_batch(spec(marker));
            let batch = RawBatch::from_bytes(bytes.clone()).unwrap();
            batch.verify_crc().unwrap();
            assert!(batch.is_control());
            assert!(batch.is_transactional());
            assert_eq!(batch.compression(), Compression::None);
            assert_eq!(batch.timestamp_type(), TimestampType::CreateTime);
            assert_eq!(batch.base_offset(), 0);
            assert_eq!(batch.partition_leader_epoch(), -1);
            assert_eq!(batch.producer_id(), 4000);
            assert_eq!(batch.producer_epoch(), 12);
            assert_eq!(batch.base_sequence(), -1);
            assert_eq!(batch.records_count(), 1);
            assert_eq!(batch.last_offset_delta(), 0);
            assert_eq!(batch.base_timestamp(), 1_700_000_000_123);
            assert_eq!(batch.max_timestamp(), 1_700_000_000_123);
            assert_eq!(batch.control_marker().unwrap(), Some((marker, 33)));

            // kafka-protocol reads the same record.
            let mut buf = bytes;
            let decoded = kp::RecordBatchDecoder::decode(&mut buf).unwrap();
            let record = decoded.records.first().unwrap();
            assert!(record.control && record.transactional);
            let type_id = marker.id().to_be_bytes();
            assert_eq!(record.key.as_deref(), Some(&[0, 0, type_id[0], type_id[1]][..]));
            assert_eq!(record.value.as_deref(), Some(&[0, 0, 0, 0, 0, 33][..]));
        }
    }

    #[test]
    fn cleaned_control_batch_has_no_marker() {
        // What the log cleaner leaves (`DefaultRecordBatch.writeEmptyHeader`): header only.
        let header = BatchHeader {
            base_offset: 70,
            batch_length: 49,
            partition_leader_epoch: 2,
            magic: 2,
            crc: 0,
            attributes: 0x30,
            last_offset_delta: 0,
            base_timestamp: 5,
            max_timestamp: 5,
            producer_id: 4000,
            producer_epoch: 12,
            base_sequence: -1,
            records_count: 0,
        };
        let empty = RawBatch::from_bytes(encode_batch(&header, &[])).unwrap();
        empty.verify_crc().unwrap();
        assert_eq!(empty.control_marker().unwrap(), None);
    }

    #[test]
    fn data_batches_have_no_marker() {
        let data = RawBatch::from_bytes(BatchBuilder::new().with_record(Record::default()).build().unwrap()).unwrap();
        assert!(matches!(data.control_marker(), Err(BatchError::NotControlBatch { base_offset: 0 })));
    }

    #[test]
    fn newer_value_versions_read_as_version_zero() {
        let batch = control_with(Some(&[0, 0, 0, 1]), Some(&[0, 1, 0, 0, 0, 7, 0xaa, 0xbb]));
        assert_eq!(batch.control_marker().unwrap(), Some((ControlType::Commit, 7)));
    }

    #[test]
    fn malformed_control_records_are_typed_errors() {
        assert!(matches!(
            control_with(None, Some(&[0, 0, 0, 0, 0, 1])).control_marker(),
            Err(BatchError::MalformedControlRecord { base_offset: 8, part: ControlRecordPart::Key, needed: 4, actual: None })
        ));
        assert!(matches!(
            control_with(Some(&[0, 0, 0]), Some(&[0, 0, 0, 0, 0, 1])).control_marker(),
            Err(BatchError::MalformedControlRecord { part: ControlRecordPart::Key, actual: Some(3), .. })
        ));
        assert!(matches!(
            control_with(Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 1])).control_marker(),
            Err(BatchError::MalformedControlRecord { part: ControlRecordPart::Value, needed: 6, actual: Some(5), .. })
        ));
        assert!(matches!(
            control_with(Some(&[0xff, 0xff, 0, 1]), Some(&[0, 0, 0, 0, 0, 1])).control_marker(),
            Err(BatchError::InvalidControlVersion { part: ControlRecordPart::Key, version: -1, .. })
        ));
        assert!(matches!(
            control_with(Some(&[0, 0, 0, 2]), Some(&[0, 0, 0, 0, 0, 1])).control_marker(),
            Err(BatchError::UnknownControlType { control_type: 2, .. })
        ));
        let two = RawBatch::from_bytes(BatchBuilder::new().with_control(true).with_records([Record::default(), Record::default()]).build().unwrap()).unwrap();
        assert!(matches!(two.control_marker(), Err(BatchError::InvalidControlBatch { records_count: 2, .. })));
    }
}
