//! What one partition's part of a Fetch answer means for its copying. Pure, so each rule is
//! unit-tested here.
//!
//! | the answer | means |
//! |---|---|
//! | a diverging epoch | [`Read::Diverged`]: the source's log no longer continues the batch read last before the offset (truncated below it and rewritten: an unclean leader election) |
//! | complete batches | [`Read::Data`]: those batches (a cut-off last batch is fetched again from where they end) |
//! | no batch, offset at the source's end | [`Read::CaughtUp`] |
//! | no batch, the source's end beyond the offset | [`Read::EmptyBelow`]: perhaps a range without batches (compacted away): confirmed by a fetch of the partition alone before it is filled |
//! | bytes, but not one whole batch | [`Read::CutOff`]: a batch larger than the partition's share of the answer; fetched alone, where the broker returns a first batch whole |
//! | `OFFSET_OUT_OF_RANGE` | [`Read::OutOfRange`] |
//! | leader moved or unknown (`NOT_LEADER_OR_FOLLOWER`, …) | [`Read::Moved`]: fetch it from its leader |
//! | topic unknown (`UNKNOWN_TOPIC_ID`, …) | [`Read::Unknown`]: the topic may have been deleted or re-created |
//! | another error | [`Read::Error`]: retried with backoff |
//! | a malformed batch | [`Read::Corrupt`] |

use bytes::Bytes;

use crate::client::{FetchedPartition, IsolationLevel};
use crate::protocol::ErrorCode;
use crate::protocol::batch::{BatchError, RecordBatches};

/// One partition's answer, interpreted.
#[derive(Debug)]
pub(crate) enum Read {
    /// Complete batches, the offset after them, and the leader epoch of the last one (the source's
    /// epoch when it appended it: what the next fetch asks the broker to check its log against).
    Data { records: Bytes, next: i64, last_epoch: i32 },
    /// The broker's log does not continue the last fetched epoch: that epoch (or the largest one
    /// it has below it) ends at `end_offset`, before the fetch offset.
    Diverged { epoch: i32, end_offset: i64 },
    /// At the source's end.
    CaughtUp,
    /// No batch, though the source's end (`bound`) is beyond the offset.
    EmptyBelow { bound: i64 },
    /// Bytes, but not one whole batch.
    CutOff,
    /// The offset is outside the source log.
    OutOfRange,
    /// The broker does not lead the partition (any more).
    Moved(ErrorCode),
    /// The broker does not know the topic (by id or name).
    Unknown(ErrorCode),
    /// Another partition error.
    Error(ErrorCode),
    /// A batch does not frame.
    Corrupt { offset: i64, source: BatchError },
}

/// The source's end for copying: the LSO under read_committed (when the broker says it), else the
/// high watermark.
pub(crate) fn bound(p: &FetchedPartition, isolation: IsolationLevel) -> i64 {
    match isolation {
        IsolationLevel::ReadCommitted if p.last_stable_offset >= 0 => p.last_stable_offset,
        _ => p.high_watermark,
    }
}

/// Interprets `p`, fetched at `offset`.
pub(crate) fn read(p: &FetchedPartition, offset: i64, isolation: IsolationLevel) -> Read {
    match p.error {
        None => {}
        Some(ErrorCode::OffsetOutOfRange) => return Read::OutOfRange,
        Some(
            code @ (ErrorCode::NotLeaderOrFollower
            | ErrorCode::FencedLeaderEpoch
            | ErrorCode::UnknownLeaderEpoch
            | ErrorCode::LeaderNotAvailable
            | ErrorCode::ReplicaNotAvailable
            | ErrorCode::KafkaStorageError),
        ) => return Read::Moved(code),
        Some(code @ (ErrorCode::UnknownTopicId | ErrorCode::UnknownTopicOrPartition | ErrorCode::InconsistentTopicId)) => return Read::Unknown(code),
        Some(code) => return Read::Error(code),
    }
    if let Some((epoch, end_offset)) = p.diverging_epoch {
        return Read::Diverged { epoch, end_offset };
    }
    let mut batches = RecordBatches::new(p.records.clone());
    let mut next = offset;
    let mut last_epoch = -1;
    for batch in batches.by_ref() {
        match batch {
            Ok(b) => {
                next = next.max(b.next_offset());
                last_epoch = b.partition_leader_epoch();
            }
            Err(source) => return Read::Corrupt { offset: next, source },
        }
    }
    let complete = p.records.len() - batches.remaining_partial();
    if next > offset {
        return Read::Data { records: p.records.slice(..complete), next, last_epoch };
    }
    if complete == 0 && !p.records.is_empty() {
        return Read::CutOff;
    }
    let end = bound(p, isolation);
    if end > offset { Read::EmptyBelow { bound: end } } else { Read::CaughtUp }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::{BatchBuilder, Record};

    fn batch(base: i64, n: usize) -> Bytes {
        epoch_batch(base, n, 0)
    }

    fn epoch_batch(base: i64, n: usize, epoch: i32) -> Bytes {
        BatchBuilder::new()
            .with_base_offset(base)
            .with_partition_leader_epoch(epoch)
            .with_records((0..n).map(|_| Record { value: Some("v".into()), ..Record::default() }))
            .build()
            .unwrap()
    }

    fn answer(records: Bytes, hw: i64, lso: i64) -> FetchedPartition {
        FetchedPartition {
            topic: "t".into(),
            partition: 0,
            error: None,
            high_watermark: hw,
            last_stable_offset: lso,
            log_start_offset: 0,
            aborted_transactions: vec![],
            records,
            diverging_epoch: None,
        }
    }

    #[test]
    fn each_answer_means_one_thing() {
        let two: Vec<u8> = [batch(10, 3), batch(13, 2)].concat();
        let cut = Bytes::from([two.clone(), batch(15, 4).slice(..20).to_vec()].concat());
        assert!(
            matches!(read(&answer(cut.clone(), 19, 19), 10, IsolationLevel::ReadCommitted), Read::Data { records, next: 15, .. } if records == cut.slice(..two.len()))
        );
        // A batch starting before the offset (resuming inside it) still moves the offset on.
        assert!(
            matches!(read(&answer(batch(8, 4), 12, 12), 10, IsolationLevel::ReadCommitted), Read::Data { records, next: 12, .. } if records == batch(8, 4))
        );
        assert!(matches!(read(&answer(Bytes::new(), 10, 10), 10, IsolationLevel::ReadCommitted), Read::CaughtUp));
        // The epoch to check the next fetch against is the last batch's.
        let epochs = Bytes::from([epoch_batch(10, 2, 3), epoch_batch(12, 2, 5)].concat());
        assert!(matches!(read(&answer(epochs, 14, 14), 10, IsolationLevel::ReadCommitted), Read::Data { next: 14, last_epoch: 5, .. }));
        // A diverging epoch says the log was rewritten below the offset, whatever else is there.
        let diverged = FetchedPartition { diverging_epoch: Some((4, 7)), ..answer(Bytes::new(), 20, 20) };
        assert!(matches!(read(&diverged, 10, IsolationLevel::ReadCommitted), Read::Diverged { epoch: 4, end_offset: 7 }));
        // read_committed: the end is the LSO, not the high watermark.
        assert!(matches!(read(&answer(Bytes::new(), 20, 10), 10, IsolationLevel::ReadCommitted), Read::CaughtUp));
        assert!(matches!(read(&answer(Bytes::new(), 20, 10), 10, IsolationLevel::ReadUncommitted), Read::EmptyBelow { bound: 20 }));
        assert!(matches!(read(&answer(Bytes::new(), 20, -1), 10, IsolationLevel::ReadCommitted), Read::EmptyBelow { bound: 20 }));
        assert!(matches!(read(&answer(batch(10, 3).slice(..30), 13, 13), 10, IsolationLevel::ReadCommitted), Read::CutOff));
        let mut bad = batch(10, 1).to_vec();
        bad[16] = 1; // magic
        assert!(matches!(read(&answer(Bytes::from(bad), 11, 11), 10, IsolationLevel::ReadCommitted), Read::Corrupt { offset: 10, .. }));
        let error = |code| FetchedPartition { error: Some(code), ..answer(Bytes::new(), -1, -1) };
        assert!(matches!(read(&error(ErrorCode::OffsetOutOfRange), 10, IsolationLevel::ReadCommitted), Read::OutOfRange));
        assert!(matches!(read(&error(ErrorCode::NotLeaderOrFollower), 10, IsolationLevel::ReadCommitted), Read::Moved(ErrorCode::NotLeaderOrFollower)));
        assert!(matches!(read(&error(ErrorCode::UnknownTopicId), 10, IsolationLevel::ReadCommitted), Read::Unknown(ErrorCode::UnknownTopicId)));
        assert!(matches!(
            read(&error(ErrorCode::TopicAuthorizationFailed), 10, IsolationLevel::ReadCommitted),
            Read::Error(ErrorCode::TopicAuthorizationFailed)
        ));
    }
}
