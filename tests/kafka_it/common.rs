//! Helpers shared by the integration tests.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_mirror_proxy::client::{BackoffConfig, Client, ClientConfig, IsolationLevel, OffsetSpec, ProduceOptions, TxnMarker};
use kafka_mirror_proxy::protocol::batch::{ControlType, RawBatch, RecordBatches};

/// The mapping of source producer ids into the destination (spec §4).
pub const PID_MAPPING_BIT: i64 = 1 << 62;

/// A 1-node cluster of its own with an authorizer (StandardAuthorizer), for the ACL tests: the shared
/// clusters run none. Plaintext connections (brokers, controllers, proxies and the tests) are
/// `User:ANONYMOUS`, a super user.
pub fn authorizing_cluster(name: &str) -> kafka_harness::Cluster {
    kafka_harness::Cluster::start(
        kafka_harness::ClusterSpec::new(name)
            .prop("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
            .prop("super.users", "User:ANONYMOUS"),
    )
    .unwrap()
}

/// A client for `bootstrap` with a short retry deadline, so a failing test fails quickly.
pub async fn client(bootstrap: &str) -> Client {
    let mut config = ClientConfig::new(bootstrap);
    config.backoff = BackoffConfig { deadline: Duration::from_secs(20), ..BackoffConfig::default() };
    Client::connect(config).await.expect("client connects")
}

/// Every batch of `topic`-`partition` from offset 0 to the high watermark, read_uncommitted.
pub async fn fetch_all_batches(client: &Client, topic: &str, partition: i32) -> Vec<RawBatch> {
    let end = client.list_offset(topic, partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let mut offset = client.list_offset(topic, partition, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await.unwrap();
    let mut batches = Vec::new();
    while offset < end {
        let fetched = client.fetch_partition(topic, partition, offset, IsolationLevel::ReadUncommitted, 1 << 20).await.unwrap();
        let mut any = false;
        for batch in RecordBatches::new(fetched.records) {
            let batch = batch.expect("well-formed batch");
            batch.verify_crc().expect("valid CRC");
            if batch.next_offset() <= offset {
                continue;
            }
            offset = batch.next_offset();
            batches.push(batch);
            any = true;
        }
        assert!(any, "no progress fetching {topic}-{partition} at {offset} (end {end})");
    }
    batches
}

/// Copies `batches` (all of one source partition, in order) into `dst`'s `topic`-`partition`:
/// data batches patched (base offset 0, producer id mapped, sequences renumbered from 0 per mapped
/// producer id and epoch) and produced, transactional ones in Produce v11 with `transactional_id`;
/// control batches replayed with WriteTxnMarkers. Asserts every batch lands at its source offset.
///
/// This is test glue for the client issue, not the replicator.
pub async fn copy_batches(dst: &Client, topic: &str, partition: i32, batches: &[RawBatch], transactional_id: &str) {
    let mut next_sequence: HashMap<(i64, i16), i32> = HashMap::new();
    for batch in batches {
        let mapped = if batch.has_producer_id() { batch.producer_id() | PID_MAPPING_BIT } else { batch.producer_id() };
        if batch.is_control() {
            let (marker, coordinator_epoch) = batch.control_marker().unwrap().expect("control batch with a marker");
            dst.write_txn_markers(&TxnMarker {
                producer_id: mapped,
                producer_epoch: batch.producer_epoch(),
                commit: marker == ControlType::Commit,
                coordinator_epoch,
                topic: topic.to_owned(),
                partitions: vec![partition],
            })
            .await
            .expect("marker written");
            let end = dst.list_offset(topic, partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
            assert_eq!(end, batch.next_offset(), "marker of source offset {} landed elsewhere", batch.base_offset());
            continue;
        }
        let mut patched = batch.to_mut();
        patched.set_base_offset(0);
        if batch.has_producer_id() {
            let seq = next_sequence.entry((mapped, batch.producer_epoch())).or_insert(0);
            patched.set_producer_id(mapped).set_base_sequence(*seq);
            *seq += batch.records_count();
        }
        let options = if batch.is_transactional() {
            ProduceOptions { transactional_id: Some(transactional_id.to_owned()), version: Some(11), ..ProduceOptions::default() }
        } else {
            ProduceOptions::default()
        };
        let produced = dst.produce(topic, partition, patched.finish(), &options).await.expect("batch produced");
        assert_eq!(produced.base_offset, batch.base_offset(), "batch landed at another offset than at the source");
    }
}

/// The records section bytes of each batch, to compare batches across clusters byte for byte.
pub fn payloads(batches: &[RawBatch]) -> Vec<(i64, i32, bool, Bytes)> {
    batches.iter().map(|b| (b.base_offset(), b.records_count(), b.is_control(), b.records_section())).collect()
}

/// Waits until the leader of a new topic's `partition` answers for it (a ListOffsets), so that a
/// Produce, which our client never retries, does not meet NOT_LEADER_OR_FOLLOWER while the
/// controller's news is still on its way. Returns the partition's end offset.
pub async fn partition_ready(client: &Client, topic: &str, partition: i32) -> i64 {
    poll_until(Duration::from_secs(30), || async { client.list_offset(topic, partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.ok() })
        .await
        .unwrap_or_else(|| panic!("{topic}-{partition} has no leader after 30 s"))
}

/// Calls `check` every 100 ms until it returns `Some`, or returns `None` after `deadline`.
pub async fn poll_until<T, F, Fut>(deadline: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if start.elapsed() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With `KMP_TEST_LOG` set (an `EnvFilter` such as `kafka_mirror_proxy::replicator=debug`), the
/// library's logs of this test process go to stderr (run with `--nocapture`). Only the first
/// subscriber of a process is installed.
pub fn log_if_asked() {
    if let Ok(filter) = std::env::var("KMP_TEST_LOG") {
        let subscriber = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::new(filter)).with_writer(std::io::stderr).finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    }
}
