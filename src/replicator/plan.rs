//! Turning one fetched source batch into the writes that reproduce it on the destination at the same
//! offsets (spec §3). Pure: no I/O, so every rule is unit-tested here and proven against brokers in
//! the integration tests.
//!
//! | source batch | destination writes |
//! |---|---|
//! | data, offsets contiguous, CreateTime | the raw bytes, header patched: base offset 0, producer id mapped, base sequence renumbered, CRC |
//! | control with a marker | the marker, replayed with WriteTxnMarkers (mapped producer id, same epoch and coordinator epoch) |
//! | control without a record (cleaned) | one filler ABORT marker per offset |
//! | data with no records (cleaned) | one filler ABORT marker per offset |
//! | data with holes (compacted), or starting before the resume point | its runs of consecutive records, each a batch with offset deltas 0..n-1 and the same producer fields, holes filled with filler markers |
//! | LogAppendTime data | records rewritten: base timestamp = the batch's max timestamp, deltas 0, CreateTime |
//! | a gap before the batch | filler markers |
//!
//! A filler marker is an ABORT of [`FILLER_PRODUCER_ID`], which never has an open transaction: it
//! takes one offset and is invisible at both isolation levels.

use bytes::Bytes;

use super::producers::{EpochRegression, FILLER_PRODUCER_ID, ProducerSequences};
use crate::protocol::batch::{BatchBuilder, BatchError, ControlType, RawBatch, Record, TimestampType};

/// One transaction marker to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// Destination (mapped) producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// COMMIT (true) or ABORT.
    pub commit: bool,
    /// Coordinator epoch.
    pub coordinator_epoch: i32,
}

impl Marker {
    /// An invisible one-offset filler.
    pub const FILLER: Marker = Marker { producer_id: FILLER_PRODUCER_ID, producer_epoch: 0, commit: false, coordinator_epoch: 0 };
}

/// One write to the destination partition, with the offset it must land at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// A record batch for Produce (one per partition per request).
    Batch {
        /// Offset its first record must get.
        offset: i64,
        /// Offsets it takes (its record count).
        records: i64,
        /// The batch, ready to send.
        bytes: Bytes,
        /// Transactional: Produce v11 with the mirror's transactional id.
        transactional: bool,
    },
    /// Consecutive markers (one WriteTxnMarkers request), each taking one offset.
    Markers {
        /// Offset of the first.
        offset: i64,
        /// The markers, in order.
        markers: Vec<Marker>,
    },
}

impl Write {
    /// The first offset this write takes.
    pub fn offset(&self) -> i64 {
        match self {
            Self::Batch { offset, .. } | Self::Markers { offset, .. } => *offset,
        }
    }

    /// The offset after it.
    pub fn end_offset(&self) -> i64 {
        match self {
            Self::Batch { offset, records, .. } => offset + records,
            Self::Markers { offset, markers } => offset + markers.len() as i64,
        }
    }
}

/// Why a batch cannot be reproduced; the partition goes FAILED with this as its reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The batch is malformed (or a CRC mismatch).
    #[error("corrupt source batch at offset {offset}")]
    Corrupt {
        offset: i64,
        #[source]
        source: BatchError,
    },
    /// A producer epoch went backwards (see [`EpochRegression`]).
    #[error("source batch at offset {offset}: {source}")]
    EpochRegression {
        offset: i64,
        #[source]
        source: EpochRegression,
    },
}

/// Appends filler markers for `[from, to)` to `writes`, merging with a preceding marker write.
pub fn fill_gap(writes: &mut Vec<Write>, from: i64, to: i64) {
    if to <= from {
        return;
    }
    let n = usize::try_from(to - from).unwrap_or(usize::MAX);
    if let Some(Write::Markers { offset, markers }) = writes.last_mut() {
        if *offset + markers.len() as i64 == from {
            markers.extend(std::iter::repeat_n(Marker::FILLER, n));
            return;
        }
    }
    writes.push(Write::Markers { offset: from, markers: vec![Marker::FILLER; n] });
}

/// Plans the writes for `batch`, given that the destination's next offset is `next_offset`.
/// Returns the writes (possibly none, if the batch was copied already) in order; the offset after
/// them is `max(next_offset, batch.next_offset())`.
///
/// # Errors
/// [`PlanError`] for a corrupt batch or an epoch regression.
pub fn plan_batch(batch: &RawBatch, next_offset: i64, sequences: &mut ProducerSequences) -> Result<Vec<Write>, PlanError> {
    let mut writes = Vec::new();
    let end = batch.next_offset();
    if end <= next_offset {
        return Ok(writes);
    }
    let corrupt = |source| PlanError::Corrupt { offset: batch.base_offset(), source };
    batch.verify_crc().map_err(corrupt)?;
    fill_gap(&mut writes, next_offset, batch.base_offset());
    let start = next_offset.max(batch.base_offset());

    if batch.is_control() {
        match batch.control_marker().map_err(corrupt)? {
            Some((marker, coordinator_epoch)) if start == batch.base_offset() => {
                let producer_id = sequences
                    .marker(batch.producer_id(), batch.producer_epoch())
                    .map_err(|source| PlanError::EpochRegression { offset: batch.base_offset(), source })?;
                push_marker(
                    &mut writes,
                    start,
                    Marker { producer_id, producer_epoch: batch.producer_epoch(), commit: marker == ControlType::Commit, coordinator_epoch },
                );
                fill_gap(&mut writes, start + 1, end);
            }
            _ => fill_gap(&mut writes, start, end),
        }
        return Ok(writes);
    }

    let contiguous = i64::from(batch.records_count()) == end - batch.base_offset();
    let whole = start == batch.base_offset() && contiguous && batch.records_count() > 0;
    if whole && batch.timestamp_type() == TimestampType::CreateTime {
        let mut patched = batch.to_mut();
        patched.set_base_offset(0);
        if batch.has_producer_id() {
            let (pid, seq) = sequences
                .assign(batch.producer_id(), batch.producer_epoch(), batch.records_count())
                .map_err(|source| PlanError::EpochRegression { offset: batch.base_offset(), source })?;
            patched.set_producer_id(pid).set_base_sequence(seq);
        }
        writes.push(Write::Batch {
            offset: start,
            records: i64::from(batch.records_count()),
            bytes: patched.finish(),
            transactional: batch.is_transactional(),
        });
        return Ok(writes);
    }

    // Rebuild from records: holes, a partial batch, or LogAppendTime timestamps.
    let mut records: Vec<(i64, Record)> = Vec::new();
    for record in batch.records().map_err(corrupt)? {
        let record = record.map_err(corrupt)?;
        let offset = batch.record_offset(&record);
        if offset >= start && offset < end {
            records.push((offset, record));
        }
    }
    let mut cursor = start;
    let mut run: Vec<Record> = Vec::new();
    for (offset, record) in records {
        if offset < cursor {
            // Offsets inside a batch only grow; a repeat is corrupt input.
            return Err(corrupt(BatchError::InvalidRecordsCount { base_offset: batch.base_offset(), records_count: batch.records_count() }));
        }
        if offset > cursor {
            flush_run(&mut writes, batch, &mut run, cursor, sequences)?;
            fill_gap(&mut writes, cursor, offset);
        }
        run.push(record);
        cursor = offset + 1;
    }
    flush_run(&mut writes, batch, &mut run, cursor, sequences)?;
    fill_gap(&mut writes, cursor, end);
    Ok(writes)
}

fn push_marker(writes: &mut Vec<Write>, offset: i64, marker: Marker) {
    if let Some(Write::Markers { offset: first, markers }) = writes.last_mut() {
        if *first + markers.len() as i64 == offset {
            markers.push(marker);
            return;
        }
    }
    writes.push(Write::Markers { offset, markers: vec![marker] });
}

/// Writes the records of `run` (which end just before `cursor`) as one batch.
fn flush_run(writes: &mut Vec<Write>, batch: &RawBatch, run: &mut Vec<Record>, cursor: i64, sequences: &mut ProducerSequences) -> Result<(), PlanError> {
    if run.is_empty() {
        return Ok(());
    }
    let count = run.len() as i32;
    let mut builder = BatchBuilder::from_batch(batch).with_base_offset(0);
    if batch.timestamp_type() == TimestampType::LogAppendTime {
        // Consumers of the source saw the append time (the batch's max timestamp) on every record.
        for r in run.iter_mut() {
            r.timestamp_delta = 0;
        }
        builder = builder.with_timestamp_type(TimestampType::CreateTime).with_base_timestamp(batch.max_timestamp()).with_max_timestamp(batch.max_timestamp());
    }
    if batch.has_producer_id() {
        let (pid, seq) = sequences
            .assign(batch.producer_id(), batch.producer_epoch(), count)
            .map_err(|source| PlanError::EpochRegression { offset: batch.base_offset(), source })?;
        builder = builder.with_producer_id(pid).with_base_sequence(seq);
    }
    let bytes = builder.with_records(run.drain(..)).build().map_err(|source| PlanError::Corrupt { offset: batch.base_offset(), source })?;
    writes.push(Write::Batch { offset: cursor - i64::from(count), records: i64::from(count), bytes, transactional: batch.is_transactional() });
    Ok(())
}

#[cfg(test)]
mod tests;
