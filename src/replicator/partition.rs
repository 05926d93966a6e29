//! One mirrored partition: PREPARING (resume point, producer state, tail check; asked in bulk
//! with the other partitions preparing, `prepare.rs`), then MIRRORING (plan and write each fetched
//! batch at its source offset), FAILED with a reason when the destination diverges, the source's
//! log stops continuing what was copied (truncated below the copy and rewritten, as an unclean
//! leader election does: every fetch names the leader epoch of the batch copied last, and the
//! broker answers with a diverging epoch), or the source changes identity, or when the copier panics (a bug: the partition then shows the panic's message
//! instead of its last state with nothing running).
//!
//! ```text
//!   SourceFetcher (fetch/, per source broker) ──Fetched (bounded inbox, held memory)──► PartitionCopier
//!                                                                                      │ plan_batch (plan.rs)
//!                                                                                      ▼
//!                                       Produce (coalesced per broker, writer.rs) / WriteTxnMarkers to
//!                                       the destination leader, one write at a time, each checked
//! ```
//!
//! Writes of a partition are strictly serialised. After any ambiguous outcome (timeout, lost
//! connection, leader change) the copier waits until a write still queued at the broker must have
//! completed, then reads the destination's end offset back and resumes from what is really there;
//! it never retries blindly (spec §3).
//!
//! An idle partition costs a parked task and its registration in its broker's fetch session:
//! nothing wakes it until its source partition has data.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::Inner;
use super::config::{FILLER_KEY, FILLER_RECORDS_PER_BATCH};
use super::error::ReplicationError;
use super::fetch::{Fetched, Identity, Key};
use super::plan::{Marker, Write, fill_gap, plan_batch};
use super::producers::ProducerSequences;
use super::status::{CopyState, StatusHandle};
use super::topic::SourceTopic;
use crate::client::{Backoff, ClientError, IsolationLevel, OffsetSpec, ProducePartition, TxnMarker};
use crate::protocol::batch::{BatchBuilder, Record, RecordBatches};

/// The copier of one partition.
#[derive(Debug)]
pub(crate) struct PartitionCopier {
    inner: Arc<Inner>,
    source_topic: SourceTopic,
    key: Key,
    status: StatusHandle,
    sequences: ProducerSequences,
    next_offset: i64,
    destination_log_start: i64,
}

fn unavailable(side: &'static str) -> impl Fn(ClientError) -> ReplicationError {
    move |source| ReplicationError::Unavailable { side, source }
}

impl PartitionCopier {
    /// A copier for `partition` of `source_topic` reporting into `status`.
    pub(crate) fn new(inner: Arc<Inner>, source_topic: SourceTopic, partition: i32, status: StatusHandle) -> Self {
        let key = (source_topic.name.clone(), partition);
        Self { inner, source_topic, key, status, sequences: ProducerSequences::new(), next_offset: 0, destination_log_start: 0 }
    }

    fn topic(&self) -> &str {
        &self.source_topic.name
    }

    fn partition(&self) -> i32 {
        self.key.1
    }

    fn set_state(&self, state: CopyState, retry_attempt: i16) {
        let name = state.name();
        let before = self.status.set_state(state, retry_attempt);
        if before.name() != name {
            debug!(topic = %self.topic(), partition = self.partition(), from = %before.name(), to = name, "partition state");
        }
    }

    fn update_status(&self) {
        self.status.set_destination(self.next_offset);
    }

    /// Runs the partition until cancelled or FAILED. Retriable failures are retried with backoff
    /// (the partition shows FAILED with the reason meanwhile, then PREPARING again).
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let mut backoff = Backoff::new(&self.inner.config.backoff);
        loop {
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                r = self.copy(&cancel) => r,
            };
            match result {
                Ok(()) => return,
                Err(e) if e.is_retriable() => {
                    let reason = e.reason();
                    warn!(topic = %self.topic(), partition = self.partition(), %reason, "partition failed; retrying");
                    let delay = backoff.next_delay().unwrap_or(self.inner.config.backoff.max);
                    self.set_state(CopyState::Failed { reason }, i16::try_from(backoff.attempts()).unwrap_or(i16::MAX));
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(e) => {
                    let reason = e.reason();
                    tracing::error!(topic = %self.topic(), partition = self.partition(), %reason, "partition FAILED");
                    self.set_state(CopyState::Failed { reason }, -1);
                    return;
                }
            }
        }
    }

    async fn copy(&mut self, cancel: &CancellationToken) -> Result<(), ReplicationError> {
        self.set_state(CopyState::Preparing, 0);
        let prepared =
            self.inner.preparer.call(self.key.clone()).await.ok_or_else(|| ReplicationError::Internal { detail: "the replicator stopped".to_owned() })??;
        let mut sequences = ProducerSequences::new();
        for p in &prepared.producers {
            sequences.seed(p.producer_id, i16::try_from(p.producer_epoch).unwrap_or(i16::MAX), p.last_sequence);
        }
        self.sequences = sequences;
        self.next_offset = prepared.end;
        self.destination_log_start = prepared.start;
        self.update_status();
        let mut fetch_from = self.next_offset.max(prepared.source_log_start);
        if fetch_from > self.next_offset {
            self.fill(self.next_offset, fetch_from, true).await?;
            self.align_log_start(prepared.source_log_start).await?;
        }
        self.set_state(CopyState::Mirroring, 0);
        let identity = Identity { topic_id: self.source_topic.topic_id, cluster_id: self.source_topic.cluster_id.clone() };
        loop {
            let mut inbox = self.inner.fetcher.register(&self.key, identity.clone(), fetch_from, self.status.clone());
            // Where the next message must start: each one continues where the last ended.
            let mut expected = fetch_from;
            fetch_from = loop {
                let Some(fetched) = inbox.recv().await else {
                    // The fetch side ends only when the replicator stops (and so does this copy);
                    // anything else is a bug to report.
                    if cancel.is_cancelled() {
                        return Ok(());
                    }
                    return Err(ReplicationError::Internal { detail: "the source fetcher stopped".to_owned() });
                };
                match fetched {
                    Fetched::Failed(e) => return Err(e),
                    Fetched::OutOfRange { offset } => break self.out_of_range(offset).await?,
                    Fetched::Gap { from, to, log_start_offset, held } => {
                        continues(expected, from)?;
                        expected = to;
                        if to > self.next_offset {
                            debug!(topic = %self.topic(), partition = self.partition(), from, to, "filling a source gap");
                            self.fill(self.next_offset.max(from), to, log_start_offset >= to).await?;
                        }
                        self.align_log_start(log_start_offset).await?;
                        drop(held);
                    }
                    Fetched::Data { offset, records, next, log_start_offset, held } => {
                        continues(expected, offset)?;
                        expected = next;
                        for batch in RecordBatches::new(records) {
                            let batch = batch.map_err(|source| super::plan::PlanError::Corrupt { offset: self.next_offset, source })?;
                            let writes = plan_batch(&batch, self.next_offset, &mut self.sequences)?;
                            for write in writes {
                                self.execute(write).await?;
                            }
                            self.next_offset = self.next_offset.max(batch.next_offset());
                            if !batch.is_control() {
                                self.inner.config.stats.copied(i64::from(batch.records_count()), batch.size_in_bytes());
                                self.status.set_written_timestamp(batch.max_timestamp());
                            }
                            self.update_status();
                        }
                        drop(held);
                        self.align_log_start(log_start_offset).await?;
                    }
                }
            };
        }
    }

    /// The fetch offset fell outside the source log: below its start (retention, DeleteRecords),
    /// the gap up to the start is filled and fetching resumes there; beyond its end, the source was
    /// truncated or replaced.
    async fn out_of_range(&mut self, offset: i64) -> Result<i64, ReplicationError> {
        let source = &self.inner.source;
        let (topic, partition) = (self.topic().to_owned(), self.partition());
        let start = source.list_offset(&topic, partition, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await.map_err(unavailable("source"))?;
        let end = source.list_offset(&topic, partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.map_err(unavailable("source"))?;
        if offset < start {
            if start > self.next_offset {
                self.fill(self.next_offset.max(offset), start, true).await?;
            }
            self.align_log_start(start).await?;
            return Ok(start.max(self.next_offset));
        }
        if offset <= end {
            // The log moved while we asked (a new leader, say): fetch again from there.
            return Ok(offset);
        }
        Err(ReplicationError::Divergence { offset, detail: format!("the source log ends at {end}, before the destination (source truncated or replaced)") })
    }

    /// Fills `[from, to)`: markers, or, for a long gap below the source log start on a topic that
    /// allows DeleteRecords, filler records cut away afterwards.
    async fn fill(&mut self, from: i64, to: i64, below_log_start: bool) -> Result<(), ReplicationError> {
        if to <= from {
            return Ok(());
        }
        let records_allowed = below_log_start && self.source_topic.allows_delete_records();
        if records_allowed && to - from > self.inner.config.marker_gap_limit {
            let mut offset = from;
            while offset < to {
                let n = usize::try_from(to - offset).unwrap_or(usize::MAX).min(FILLER_RECORDS_PER_BATCH);
                let record = Record { key: Some(bytes::Bytes::from_static(FILLER_KEY)), ..Record::default() };
                let bytes = BatchBuilder::new()
                    .with_base_timestamp(now_ms())
                    .with_records(std::iter::repeat_n(record, n))
                    .build()
                    .map_err(|source| super::plan::PlanError::Corrupt { offset, source })?;
                self.execute(Write::Batch { offset, records: n as i64, bytes, transactional: false }).await?;
                offset += n as i64;
            }
        } else {
            let mut writes = Vec::new();
            fill_gap(&mut writes, from, to);
            for w in writes {
                self.execute(w).await?;
            }
        }
        self.next_offset = to;
        self.update_status();
        Ok(())
    }

    /// Moves the destination log start up to the source's, where the topic allows it.
    async fn align_log_start(&mut self, source_log_start: i64) -> Result<(), ReplicationError> {
        if source_log_start <= self.destination_log_start || source_log_start > self.next_offset || !self.source_topic.allows_delete_records() {
            return Ok(());
        }
        let low = self
            .inner
            .destination
            .delete_records(self.topic(), self.partition(), source_log_start, self.inner.config.write_timeout)
            .await
            .map_err(unavailable("destination"))?;
        self.destination_log_start = low;
        Ok(())
    }

    /// Writes one planned write at its offset, reconciling after ambiguous outcomes.
    async fn execute(&mut self, write: Write) -> Result<(), ReplicationError> {
        if let Write::Batch { bytes, .. } = &write {
            self.inner.config.throttle.acquire(&self.source_topic.name, self.partition(), bytes.len()).await;
        }
        let mut pending = write;
        let mut backoff = Backoff::new(&self.inner.config.backoff);
        loop {
            let outcome = self.send(&pending).await;
            let error = match outcome {
                Ok(Some(base_offset)) if base_offset != pending.offset() => {
                    return Err(ReplicationError::Divergence {
                        offset: pending.offset(),
                        detail: format!("the destination put the source batch at offset {base_offset} (someone else wrote to it)"),
                    });
                }
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            if !error.is_ambiguous() && !error.is_retriable() {
                return Err(ReplicationError::Refused { offset: pending.offset(), source: error });
            }
            debug!(topic = %self.topic(), partition = self.partition(), offset = pending.offset(), error = %error, "ambiguous write; reconciling");
            // A write still queued at the broker completes within its timeout; then read back.
            let settle = if matches!(error, ClientError::Connection { .. }) { self.inner.config.write_timeout } else { Duration::ZERO };
            let delay = backoff.next_delay().unwrap_or(self.inner.config.backoff.max).max(settle);
            tokio::time::sleep(delay).await;
            let _ = self.inner.destination.refresh_metadata(&[self.topic()]).await;
            let end = self.stable_end().await?;
            match reconcile(&pending, end) {
                Reconciled::Landed => return Ok(()),
                Reconciled::Retry(rest) => pending = rest,
                Reconciled::Diverged => {
                    return Err(ReplicationError::Divergence {
                        offset: pending.offset(),
                        detail: format!("after a failed write the destination ends at {end}, expected {} or {}", pending.offset(), pending.end_offset()),
                    });
                }
            }
        }
    }

    /// The destination's end offset once two reads agree (a new leader's high watermark can still
    /// move right after an election).
    async fn stable_end(&self) -> Result<i64, ReplicationError> {
        let dest = &self.inner.destination;
        let mut last = None;
        loop {
            let end = dest
                .list_offset(self.topic(), self.partition(), OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
                .await
                .map_err(unavailable("destination"))?;
            if last == Some(end) {
                return Ok(end);
            }
            last = Some(end);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Sends `write`; for a batch returns the base offset the destination gave it.
    async fn send(&self, write: &Write) -> Result<Option<i64>, ClientError> {
        let dest = &self.inner.destination;
        match write {
            Write::Batch { bytes, transactional, .. } => {
                let leader = dest.leader_of(self.topic(), self.partition()).await?;
                let producer = if *transactional {
                    let header = crate::protocol::batch::RawBatch::from_bytes(bytes.clone())
                        .map_err(|_| ClientError::Config { key: "batch".into(), message: "invariant: planned batches parse".into() })?;
                    Some((header.producer_id(), header.producer_epoch()))
                } else {
                    None
                };
                let batch = ProducePartition { topic: self.topic().to_owned(), partition: self.partition(), records: bytes.clone() };
                let produced = self.inner.writers.produce(leader, batch, producer).await?;
                Ok(Some(produced.base_offset))
            }
            Write::Markers { markers, .. } => {
                let leader = dest.leader_of(self.topic(), self.partition()).await?;
                let list: Vec<TxnMarker> = markers.iter().map(|m| self.txn_marker(m)).collect();
                for chunk in list.chunks(MARKERS_PER_REQUEST) {
                    let results = dest.write_txn_markers_to(leader, chunk).await?;
                    if let Some((_, _, _, Err(e))) = results.into_iter().find(|(_, _, _, r)| r.is_err()) {
                        return Err(e);
                    }
                }
                Ok(None)
            }
        }
    }

    fn txn_marker(&self, m: &Marker) -> TxnMarker {
        TxnMarker {
            producer_id: m.producer_id,
            producer_epoch: m.producer_epoch,
            commit: m.commit,
            coordinator_epoch: m.coordinator_epoch,
            topic: self.source_topic.name.clone(),
            partitions: vec![self.partition()],
        }
    }
}

/// Fetched messages must follow each other exactly (the fetch side's promise); a message starting
/// elsewhere would make the copier fill or skip offsets, so it is a bug to report, not to copy.
fn continues(expected: i64, offset: i64) -> Result<(), ReplicationError> {
    if offset == expected {
        return Ok(());
    }
    Err(ReplicationError::Internal { detail: format!("fetched data starts at offset {offset}, the previous fetch ended at {expected}") })
}

/// Markers sent in one WriteTxnMarkers request (each is one append on the broker).
const MARKERS_PER_REQUEST: usize = 500;

enum Reconciled {
    Landed,
    Retry(Write),
    Diverged,
}

/// What to do after an ambiguous outcome, given the destination's end offset.
fn reconcile(write: &Write, end: i64) -> Reconciled {
    if end == write.end_offset() {
        return Reconciled::Landed;
    }
    if end == write.offset() {
        return Reconciled::Retry(write.clone());
    }
    match write {
        // Markers are appended one by one: some of them may have landed.
        Write::Markers { offset, markers } if end > *offset && end < write.end_offset() => {
            let done = usize::try_from(end - offset).unwrap_or(0);
            Reconciled::Retry(Write::Markers { offset: end, markers: markers[done..].to_vec() })
        }
        _ => Reconciled::Diverged,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Runs `copier` to its end; if it panics, its partition goes FAILED (not retried) with the
/// panic's message, instead of showing its last state forever with nothing running. Other
/// partitions are separate tasks and keep going.
pub(crate) async fn run_guarded(copier: PartitionCopier, cancel: CancellationToken) {
    let status = copier.status.clone();
    fail_on_panic(&status, copier.run(cancel)).await;
}

/// Runs `copy`; if it panics, the partition of `status` goes FAILED (not retried) with the message.
async fn fail_on_panic(status: &StatusHandle, copy: impl Future<Output = ()>) {
    if let Err(message) = crate::report::catch_panic_async(copy).await {
        let reason = ReplicationError::Internal { detail: format!("the partition's copier panicked: {message}") }.reason();
        let s = status.get();
        tracing::error!(topic = %s.topic, partition = s.partition, %reason, "partition FAILED");
        status.set_state(CopyState::Failed { reason }, -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_after_ambiguous_writes() {
        let batch = Write::Batch { offset: 10, records: 5, bytes: bytes::Bytes::new(), transactional: false };
        assert!(matches!(reconcile(&batch, 15), Reconciled::Landed));
        assert!(matches!(reconcile(&batch, 10), Reconciled::Retry(Write::Batch { offset: 10, .. })));
        assert!(matches!(reconcile(&batch, 12), Reconciled::Diverged));
        assert!(matches!(reconcile(&batch, 16), Reconciled::Diverged));
        let markers = Write::Markers { offset: 20, markers: vec![Marker::FILLER; 4] };
        match reconcile(&markers, 22) {
            Reconciled::Retry(Write::Markers { offset, markers }) => assert_eq!((offset, markers.len()), (22, 2)),
            _ => panic!("expected a retry of the rest"),
        }
    }

    async fn panics(message: &'static str) {
        panic!("{message}")
    }

    /// A copier that panics leaves its partition FAILED with the message, not retried; one that
    /// returns leaves the state it set.
    #[tokio::test]
    async fn a_panicking_copier_fails_its_partition() {
        let panicked = StatusHandle::detached("t", 3);
        panicked.set_state(CopyState::Mirroring, 0);
        panicked.set_destination(7);
        fail_on_panic(&panicked, panics("offset arithmetic overflowed")).await;
        let s = panicked.get();
        assert_eq!(s.state, CopyState::Failed { reason: "internal error: the partition's copier panicked: offset arithmetic overflowed".to_owned() });
        assert_eq!((s.retry_attempt, s.destination_offset), (-1, 7));

        let returned = StatusHandle::detached("t", 4);
        returned.set_state(CopyState::Mirroring, 0);
        fail_on_panic(&returned, async {}).await;
        assert_eq!(returned.get().state, CopyState::Mirroring);
    }
}
