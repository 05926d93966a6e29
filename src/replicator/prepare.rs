//! PREPARING in bulk: what each partition's copier needs before it copies (the destination's end
//! and start offsets and producer state, the source's log start, and a check that the destination's
//! last batch was written by the mirror), asked for every partition preparing at the same time with
//! one request per broker and question, not one round trip per partition.
//!
//! ```text
//!   copiers ─ prepare(partition) ─► Batcher ─► destination: ListOffsets latest + earliest,
//!                                               DescribeProducers          (per leader, all at once)
//!                                              source: ListOffsets earliest
//!                                              tails: Fetch of each destination's last batch, then
//!                                                     of the source's records at those offsets
//! ```
//!
//! A producer the mirror did not map (an id below 2^62), a destination marker of such a producer,
//! or a last batch whose records differ from the source's means someone else wrote to the
//! destination partition: it fails with a divergence naming the offset.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::config::FILLER_KEY;
use super::error::ReplicationError;
use super::plan::PlanError;
use super::producers::PRODUCER_ID_MAPPING_BIT;
use crate::client::{Client, ClientError, IsolationLevel, OffsetSpec, ProducerState, TopicPartition};
use crate::protocol::batch::{RawBatch, RecordBatches};

/// Requests of one bulk round at most.
pub(crate) const MAX_PREPARE_BATCH: usize = 2000;
/// Per-partition cap when reading the partitions' last batches back.
const TAIL_PARTITION_BYTES: i32 = 1 << 20;
/// Cap on one Fetch response when reading tails back.
const TAIL_RESPONSE_BYTES: i32 = 16 << 20;

/// What a partition starts copying from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// The destination's end offset (the next offset to write).
    pub(crate) end: i64,
    /// The destination's log start offset.
    pub(crate) start: i64,
    /// Producer state on the destination partition (all mirror-mapped).
    pub(crate) producers: Vec<ProducerState>,
    /// The source's log start offset.
    pub(crate) source_log_start: i64,
}

fn unavailable(side: &'static str) -> impl Fn(ClientError) -> ReplicationError {
    move |source| ReplicationError::Unavailable { side, source }
}

/// Prepares every partition of `keys` (one outcome each, in order).
pub(crate) async fn prepare_all(source: Arc<Client>, destination: Arc<Client>, keys: Vec<TopicPartition>) -> Vec<Result<Prepared, ReplicationError>> {
    let (mut ends, mut starts, mut producers, mut source_starts) = futures_util::join!(
        destination.list_offsets_bulk(&keys, OffsetSpec::Latest, IsolationLevel::ReadUncommitted),
        destination.list_offsets_bulk(&keys, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted),
        destination.describe_producers_bulk(&keys),
        source.list_offsets_bulk(&keys, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted),
    );
    let mut outcomes: BTreeMap<TopicPartition, Result<Prepared, ReplicationError>> = BTreeMap::new();
    for key in &keys {
        let missing = || ClientError::MissingInResponse { api_key: kafka_protocol::messages::ApiKey::ListOffsets, target: Default::default() };
        let prepared = (|| {
            let end = ends.remove(key).unwrap_or_else(|| Err(missing())).map_err(unavailable("destination"))?;
            let start = starts.remove(key).unwrap_or_else(|| Err(missing())).map_err(unavailable("destination"))?;
            let producers = producers.remove(key).unwrap_or_else(|| Err(missing())).map_err(unavailable("destination"))?;
            let source_log_start = source_starts.remove(key).unwrap_or_else(|| Err(missing())).map_err(unavailable("source"))?;
            if let Some(p) = producers.iter().find(|p| p.producer_id < PRODUCER_ID_MAPPING_BIT) {
                return Err(ReplicationError::Divergence {
                    offset: end,
                    detail: format!("producer {} (not the mirror) wrote to the destination partition", p.producer_id),
                });
            }
            Ok(Prepared { end, start, producers, source_log_start })
        })();
        outcomes.insert(key.clone(), prepared);
    }
    check_tails(&source, &destination, &mut outcomes).await;
    keys.iter().map(|k| outcomes.remove(k).unwrap_or_else(|| Err(ReplicationError::Internal { detail: "partition lost while preparing".to_owned() }))).collect()
}

/// Compares each prepared partition's last destination batch with the source's records at the
/// same offsets; a difference replaces the partition's outcome with a divergence.
async fn check_tails(source: &Client, destination: &Client, outcomes: &mut BTreeMap<TopicPartition, Result<Prepared, ReplicationError>>) {
    let wanted: Vec<(String, i32, i64)> =
        outcomes.iter().filter_map(|(k, o)| o.as_ref().ok().filter(|p| p.end > p.start).map(|p| (k.0.clone(), k.1, p.end - 1))).collect();
    if wanted.is_empty() {
        return;
    }
    let tails = destination.fetch_at_bulk(&wanted, IsolationLevel::ReadUncommitted, TAIL_PARTITION_BYTES, TAIL_RESPONSE_BYTES).await;
    let mut compare: BTreeMap<TopicPartition, Vec<(i64, Comparable)>> = BTreeMap::new();
    for (key, fetched) in tails {
        let verdict = fetched.map_err(unavailable("destination")).and_then(|f| tail_of(f.records));
        match verdict {
            Ok(Tail::Nothing) => {}
            Ok(Tail::Records(records)) => {
                compare.insert(key, records);
            }
            Err(e) => {
                outcomes.insert(key, Err(e));
            }
        }
    }
    if compare.is_empty() {
        return;
    }
    let at: Vec<(String, i32, i64)> = compare.iter().filter_map(|(k, r)| r.first().map(|(o, _)| (k.0.clone(), k.1, *o))).collect();
    let theirs = source.fetch_at_bulk(&at, IsolationLevel::ReadUncommitted, TAIL_PARTITION_BYTES, TAIL_RESPONSE_BYTES).await;
    for (key, fetched) in theirs {
        let Some(mine) = compare.get(&key) else { continue };
        let verdict = match fetched {
            Ok(f) => source_records(&f.records).and_then(|theirs| compare_tail(mine, &theirs)),
            // The source no longer has these offsets (retention): nothing to compare against.
            Err(e) if e.code() == Some(crate::protocol::ErrorCode::OffsetOutOfRange) => Ok(()),
            Err(e) => Err(unavailable("source")(e)),
        };
        if let Err(e) = verdict {
            outcomes.insert(key, Err(e));
        }
    }
}

/// A record as compared: key, value, headers, timestamp.
type Comparable = (Option<Bytes>, Option<Bytes>, Vec<(Bytes, Option<Bytes>)>, i64);

/// What the destination's last batch asks to compare.
#[derive(Debug, PartialEq)]
enum Tail {
    /// Nothing to compare (no batch, or a marker of the mirror).
    Nothing,
    /// These records, by offset.
    Records(Vec<(i64, Comparable)>),
}

fn corrupt(offset: i64) -> impl Fn(crate::protocol::batch::BatchError) -> ReplicationError {
    move |source| ReplicationError::Plan(PlanError::Corrupt { offset, source })
}

/// The last batch of `records` (the destination's tail), and what to compare of it.
fn tail_of(records: Bytes) -> Result<Tail, ReplicationError> {
    let Some(Ok(last)) = RecordBatches::new(records).last() else { return Ok(Tail::Nothing) };
    if last.is_control() || last.records_count() == 0 {
        if last.has_producer_id() && last.producer_id() < PRODUCER_ID_MAPPING_BIT {
            return Err(ReplicationError::Divergence {
                offset: last.base_offset(),
                detail: format!("a transaction marker of producer {} not written by the mirror", last.producer_id()),
            });
        }
        return Ok(Tail::Nothing);
    }
    Ok(Tail::Records(collect_records(&last)?))
}

fn source_records(records: &Bytes) -> Result<Vec<(i64, Comparable)>, ReplicationError> {
    let mut theirs = Vec::new();
    for b in RecordBatches::new(records.clone()) {
        let b = b.map_err(corrupt(-1))?;
        if !b.is_control() {
            theirs.extend(collect_records(&b)?);
        }
    }
    Ok(theirs)
}

/// Every destination record must be the source's at its offset (or a filler record of a leading
/// gap, below the source log start).
fn compare_tail(mine: &[(i64, Comparable)], theirs: &[(i64, Comparable)]) -> Result<(), ReplicationError> {
    for (offset, record) in mine {
        match theirs.iter().find(|(o, _)| o == offset) {
            Some((_, r)) if r == record => {}
            _ if record.0.as_deref() == Some(FILLER_KEY) => {}
            _ => {
                return Err(ReplicationError::Divergence {
                    offset: *offset,
                    detail: "the destination record differs from the source record (written by someone else?)".to_owned(),
                });
            }
        }
    }
    Ok(())
}

fn collect_records(batch: &RawBatch) -> Result<Vec<(i64, Comparable)>, ReplicationError> {
    let mut out = Vec::new();
    for r in batch.records().map_err(corrupt(batch.base_offset()))? {
        let r = r.map_err(corrupt(batch.base_offset()))?;
        out.push((batch.record_offset(&r), (r.key.clone(), r.value.clone(), r.headers.clone(), batch.record_timestamp(&r))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::{BatchBuilder, ControlBatchSpec, ControlType, Record, build_control_batch};

    fn batch(base: i64, values: &[&str], key: Option<&'static [u8]>) -> Bytes {
        BatchBuilder::new()
            .with_base_offset(base)
            .with_base_timestamp(1000)
            .with_records(values.iter().map(|v| Record { key: key.map(Bytes::from_static), value: Some(Bytes::from(v.to_string())), ..Record::default() }))
            .build()
            .unwrap()
    }

    #[test]
    fn the_tail_must_be_the_sources() {
        let two = Bytes::from([batch(0, &["a"], None), batch(1, &["b", "c"], None)].concat());
        let Tail::Records(mine) = tail_of(two.clone()).unwrap() else { panic!("records expected") };
        assert_eq!(mine.iter().map(|(o, _)| *o).collect::<Vec<_>>(), vec![1, 2], "the last batch only");
        let theirs = source_records(&two).unwrap();
        compare_tail(&mine, &theirs).unwrap();
        let other = source_records(&batch(1, &["b", "x"], None)).unwrap();
        assert!(matches!(compare_tail(&mine, &other), Err(ReplicationError::Divergence { offset: 2, .. })));
        // Filler records below the source's log start compare with nothing.
        let Tail::Records(filler) = tail_of(batch(5, &["", ""], Some(FILLER_KEY))).unwrap() else { panic!() };
        compare_tail(&filler, &[]).unwrap();
        assert_eq!(tail_of(Bytes::new()).unwrap(), Tail::Nothing);
    }

    #[test]
    fn a_marker_of_a_foreign_producer_is_a_divergence() {
        let marker = |pid| {
            let bytes =
                build_control_batch(ControlBatchSpec { producer_id: pid, producer_epoch: 0, marker: ControlType::Abort, coordinator_epoch: 0, timestamp: 0 });
            let mut patched = RawBatch::from_bytes(bytes).unwrap().to_mut();
            patched.set_base_offset(9);
            patched.finish()
        };
        assert!(matches!(tail_of(marker(12)), Err(ReplicationError::Divergence { offset: 9, .. })));
        assert_eq!(tail_of(marker(PRODUCER_ID_MAPPING_BIT | 12)).unwrap(), Tail::Nothing);
    }
}
