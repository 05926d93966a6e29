//! STOPPING's last step (spec §6): abort every mirrored transaction still open on a destination
//! partition, so that the LSO can move past it once clients write to the topic.
//!
//! A transaction is left open on the destination when copying stopped between a transaction's data
//! and its marker (or, with `mirror.isolation.level=read_uncommitted`, when the source had not
//! decided it yet). Nothing on the destination would ever end it: its coordinator knows nothing of
//! mirrored producers. So the mirror writes the ABORT marker itself with WriteTxnMarkers, for each
//! producer that DescribeProducers reports with an open transaction and a mapped producer id
//! (spec §4: `pid | 2^62`). Producers of the destination's own range are never touched.
//!
//! Uses only the client; the replicator must have stopped copying the partition first.

use std::collections::BTreeMap;

use crate::client::{Client, ClientError, ProducerState, TxnMarker};
use crate::replicator::producers::PRODUCER_ID_MAPPING_BIT;

/// Aborts the open mirrored transactions of `topic`-`partition`; returns how many it aborted.
/// Idempotent: a second call finds none open.
///
/// # Errors
/// DescribeProducers or WriteTxnMarkers failures (retriable ones are retried by the client for
/// reads; the caller retries the whole call).
pub async fn abort_open_transactions(destination: &Client, topic: &str, partition: i32) -> Result<usize, ClientError> {
    let mut outcomes = abort_open_transactions_of(destination, topic, &[partition]).await;
    outcomes.remove(&partition).unwrap_or(Ok(0))
}

/// [`abort_open_transactions`] for many partitions of `topic` at once: one DescribeProducers per
/// leader for all of them, then a marker for each open mirrored transaction. Each partition's
/// outcome on its own.
pub async fn abort_open_transactions_of(destination: &Client, topic: &str, partitions: &[i32]) -> BTreeMap<i32, Result<usize, ClientError>> {
    let keys: Vec<(String, i32)> = partitions.iter().map(|p| (topic.to_owned(), *p)).collect();
    let mut out = BTreeMap::new();
    for ((_, partition), producers) in destination.describe_producers_bulk(&keys).await {
        let outcome = match producers {
            Err(e) => Err(e),
            Ok(producers) => abort_open(destination, topic, partition, &producers).await,
        };
        out.insert(partition, outcome);
    }
    out
}

async fn abort_open(destination: &Client, topic: &str, partition: i32, producers: &[ProducerState]) -> Result<usize, ClientError> {
    let mut aborted = 0;
    for p in producers.iter().filter(|p| p.current_txn_start_offset >= 0 && p.producer_id >= PRODUCER_ID_MAPPING_BIT) {
        let marker = TxnMarker {
            producer_id: p.producer_id,
            producer_epoch: i16::try_from(p.producer_epoch).unwrap_or(i16::MAX),
            commit: false,
            // The broker refuses a marker whose coordinator epoch is below the last one it saw for
            // this producer; the producer state carries that epoch (-1 before any marker).
            coordinator_epoch: p.coordinator_epoch.max(0),
            topic: topic.to_owned(),
            partitions: vec![partition],
        };
        destination.write_txn_markers(&marker).await?;
        tracing::info!(topic, partition, producer_id = p.producer_id, first_offset = p.current_txn_start_offset, "aborted an open mirrored transaction");
        aborted += 1;
    }
    Ok(aborted)
}
