//! Unit tests of the write plan, on batches built here (real brokers are in tests/kafka_it).

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::records as kp;

use super::*;
use crate::protocol::batch::{ControlBatchSpec, RecordBatches, build_control_batch};
use crate::replicator::producers::map_producer_id;

fn only_batch(bytes: Bytes) -> RawBatch {
    RecordBatches::new(bytes).next().unwrap().unwrap()
}

fn records(n: usize) -> Vec<Record> {
    (0..n).map(|i| Record { timestamp_delta: i as i64, key: Some(format!("k{i}").into()), value: Some("v".into()), ..Record::default() }).collect()
}

/// A batch at `base` with `n` records of producer 5, epoch 1.
fn data_batch(base: i64, n: usize) -> RawBatch {
    only_batch(
        BatchBuilder::new()
            .with_base_offset(base)
            .with_producer_id(5)
            .with_producer_epoch(1)
            .with_base_sequence(1000)
            .with_base_timestamp(1_700_000_000_000)
            .with_records(records(n))
            .build()
            .unwrap(),
    )
}

/// A batch holding only the given offsets (a compacted batch), through kafka-protocol's encoder.
fn holey_batch(offsets: &[i64], timestamp_type: kp::TimestampType) -> RawBatch {
    let recs: Vec<kp::Record> = offsets
        .iter()
        .map(|&o| kp::Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            producer_id: 9,
            producer_epoch: 0,
            timestamp_type,
            offset: o,
            sequence: o as i32,
            timestamp: 1_000 + o,
            key: Some(Bytes::from(format!("k{o}"))),
            value: Some(Bytes::from_static(b"v")),
            headers: IndexMap::new(),
            delete_horizon: false,
        })
        .collect();
    let mut buf = BytesMut::new();
    kp::RecordBatchEncoder::encode(&mut buf, recs.iter(), &kp::RecordEncodeOptions { version: 2, compression: kp::Compression::Lz4 }).unwrap();
    only_batch(buf.freeze())
}

fn decoded(write: &Write) -> RawBatch {
    match write {
        Write::Batch { bytes, .. } => only_batch(bytes.clone()),
        other => panic!("not a batch: {other:?}"),
    }
}

#[test]
fn contiguous_batch_is_patched_in_place() {
    let src = data_batch(100, 4);
    let mut seq = ProducerSequences::new();
    let writes = plan_batch(&src, 100, &mut seq).unwrap();
    assert_eq!(writes.len(), 1);
    let out = decoded(&writes[0]);
    out.verify_crc().unwrap();
    assert_eq!((out.base_offset(), out.producer_id(), out.producer_epoch(), out.base_sequence()), (0, map_producer_id(5), 1, 0));
    assert_eq!(out.records_section(), src.records_section(), "record bytes untouched");
    assert_eq!((writes[0].offset(), writes[0].end_offset()), (100, 104));
    // The next batch of the same producer continues the renumbered sequence.
    let next = plan_batch(&data_batch(104, 2), 104, &mut seq).unwrap();
    assert_eq!(decoded(&next[0]).base_sequence(), 4);
}

#[test]
fn already_copied_batch_is_skipped_and_gap_is_filled() {
    let mut seq = ProducerSequences::new();
    assert!(plan_batch(&data_batch(100, 4), 104, &mut seq).unwrap().is_empty());
    let writes = plan_batch(&data_batch(110, 2), 104, &mut seq).unwrap();
    assert_eq!(writes[0], Write::Markers { offset: 104, markers: vec![Marker::FILLER; 6] });
    assert_eq!((writes[1].offset(), writes[1].end_offset()), (110, 112));
}

#[test]
fn markers_are_replayed_with_mapped_producer() {
    let marker = only_batch(build_control_batch(ControlBatchSpec {
        producer_id: 5,
        producer_epoch: 2,
        marker: ControlType::Commit,
        coordinator_epoch: 7,
        timestamp: 1,
    }));
    let mut seq = ProducerSequences::new();
    let writes = plan_batch(&marker, 0, &mut seq).unwrap();
    assert_eq!(
        writes,
        vec![Write::Markers { offset: 0, markers: vec![Marker { producer_id: map_producer_id(5), producer_epoch: 2, commit: true, coordinator_epoch: 7 }] }]
    );
}

#[test]
fn compacted_batch_with_holes_is_split_into_runs() {
    let src = holey_batch(&[10, 11, 13, 14, 15, 18], kp::TimestampType::Creation);
    assert_eq!((src.base_offset(), src.records_count(), src.next_offset()), (10, 6, 19));
    let mut seq = ProducerSequences::new();
    let writes = plan_batch(&src, 10, &mut seq).unwrap();
    let shape: Vec<(i64, i64, bool)> = writes.iter().map(|w| (w.offset(), w.end_offset(), matches!(w, Write::Markers { .. }))).collect();
    assert_eq!(shape, vec![(10, 12, false), (12, 13, true), (13, 16, false), (16, 18, true), (18, 19, false)]);
    let runs: Vec<RawBatch> = writes.iter().filter(|w| matches!(w, Write::Batch { .. })).map(decoded).collect();
    let seqs: Vec<i32> = runs.iter().map(RawBatch::base_sequence).collect();
    assert_eq!(seqs, vec![0, 2, 5], "renumbered across runs");
    for run in &runs {
        assert_eq!(run.producer_id(), map_producer_id(9));
        assert_eq!(i64::from(run.records_count()), i64::from(run.last_offset_delta()) + 1, "deltas 0..n-1");
        assert_eq!(run.compression(), src.compression());
    }
    // Keys and timestamps survive.
    let r = &runs[1];
    let got: Vec<(Option<Bytes>, i64)> = r.records().unwrap().map(|x| x.unwrap()).map(|x| (x.key.clone(), r.record_timestamp(&x))).collect();
    assert_eq!(got, vec![(Some("k13".into()), 1013), (Some("k14".into()), 1014), (Some("k15".into()), 1015)]);
}

#[test]
fn resuming_inside_a_batch_copies_only_the_rest() {
    let src = data_batch(100, 5);
    let mut seq = ProducerSequences::new();
    let writes = plan_batch(&src, 103, &mut seq).unwrap();
    assert_eq!(writes.len(), 1);
    assert_eq!((writes[0].offset(), writes[0].end_offset()), (103, 105));
    let keys: Vec<Option<Bytes>> = decoded(&writes[0]).records().unwrap().map(|r| r.unwrap().key).collect();
    assert_eq!(keys, vec![Some("k3".into()), Some("k4".into())]);
}

#[test]
fn log_append_time_becomes_create_time_with_the_append_time() {
    let src = only_batch(
        BatchBuilder::new()
            .with_timestamp_type(TimestampType::LogAppendTime)
            .with_base_timestamp(1_000)
            .with_max_timestamp(9_999)
            .with_records(records(3))
            .build()
            .unwrap(),
    );
    assert_eq!(src.timestamp_type(), TimestampType::LogAppendTime);
    let seen: Vec<i64> = src.records().unwrap().map(|r| src.record_timestamp(&r.unwrap())).collect();
    let writes = plan_batch(&src, 0, &mut ProducerSequences::new()).unwrap();
    let out = decoded(&writes[0]);
    assert_eq!(out.timestamp_type(), TimestampType::CreateTime);
    let copied: Vec<i64> = out.records().unwrap().map(|r| out.record_timestamp(&r.unwrap())).collect();
    assert_eq!(copied, seen);
    assert_eq!(seen, vec![9_999; 3]);
}

#[test]
fn empty_batches_become_fillers() {
    let cleaned = BatchBuilder::new().with_base_offset(50).with_control(true).with_transactional(true).with_records(records(1)).build().unwrap();
    // A control batch whose marker record is not a valid marker is corrupt, not silently skipped.
    assert!(plan_batch(&only_batch(cleaned), 50, &mut ProducerSequences::new()).is_err());
    let mut writes = Vec::new();
    fill_gap(&mut writes, 5, 8);
    fill_gap(&mut writes, 8, 9);
    assert_eq!(writes, vec![Write::Markers { offset: 5, markers: vec![Marker::FILLER; 4] }]);
}

#[test]
fn corrupt_batch_is_an_error_naming_the_offset() {
    let src = data_batch(42, 3);
    let mut bytes = src.as_bytes().to_vec();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let corrupt = only_batch(Bytes::from(bytes));
    let err = plan_batch(&corrupt, 42, &mut ProducerSequences::new()).unwrap_err();
    assert!(matches!(err, PlanError::Corrupt { offset: 42, source: BatchError::CrcMismatch { .. } }), "{err}");
}
