//! One mirrored partition: PREPARING (resume point, producer state, tail check), then MIRRORING
//! (plan and write each fetched batch at its source offset), FAILED with a reason when the
//! destination diverges or the source changes identity, or when a task of the partition panics (a
//! bug: the partition then shows the panic's message instead of its last state with nothing running).
//!
//! ```text
//!   Fetcher task ──Fetched (bounded queue, shared byte budget)──► PartitionCopier
//!                                                                 │ plan_batch (plan.rs)
//!                                                                 ▼
//!                                       Produce / WriteTxnMarkers to the destination leader,
//!                                       one write at a time, each checked against its offset
//! ```
//!
//! Writes of a partition are strictly serialised. After any ambiguous outcome (timeout, lost
//! connection, leader change) the copier waits until a write still queued at the broker must have
//! completed, then reads the destination's end offset back and resumes from what is really there;
//! it never retries blindly (spec §3).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::config::{FILLER_RECORDS_PER_BATCH, ReplicatorConfig};
use super::error::ReplicationError;
use super::fetcher::{Fetched, Fetcher};
use super::plan::{Marker, Write, fill_gap, plan_batch};
use super::producers::{PRODUCER_ID_MAPPING_BIT, ProducerSequences};
use super::topic::SourceTopic;
use crate::client::{Backoff, Client, ClientError, IsolationLevel, OffsetSpec, ProducePartition, TxnMarker};
use crate::mirror::{PartitionState, PartitionStatus};
use crate::protocol::batch::{BatchBuilder, Record, RecordBatches};

/// Capacity of the queue between a partition's fetcher and its copier, in fetch responses.
const FETCH_QUEUE: usize = 4;

/// Everything a partition task needs, shared by all partitions of a replicator.
#[derive(Debug)]
pub struct Shared {
    /// Source client.
    pub source: Arc<Client>,
    /// Destination client.
    pub destination: Arc<Client>,
    /// Settings.
    pub config: ReplicatorConfig,
    /// Bytes of fetched data not yet written (permits are KiB).
    pub budget: Arc<Semaphore>,
    /// Produce coalescing per destination broker.
    pub writers: super::writer::Writers,
}

/// The copier of one partition.
#[derive(Debug)]
pub struct PartitionCopier {
    shared: Arc<Shared>,
    source_topic: SourceTopic,
    partition: i32,
    status: Arc<Mutex<PartitionStatus>>,
    sequences: ProducerSequences,
    next_offset: i64,
    destination_log_start: i64,
}

fn unavailable(side: &'static str) -> impl Fn(ClientError) -> ReplicationError {
    move |source| ReplicationError::Unavailable { side, source }
}

impl PartitionCopier {
    /// A copier for `partition` of `source_topic` reporting into `status`.
    pub fn new(shared: Arc<Shared>, source_topic: SourceTopic, partition: i32, status: Arc<Mutex<PartitionStatus>>) -> Self {
        Self { shared, source_topic, partition, status, sequences: ProducerSequences::new(), next_offset: 0, destination_log_start: 0 }
    }

    fn topic(&self) -> &str {
        &self.source_topic.name
    }

    fn set_failed(&self, reason: String, retry_attempt: i16) {
        self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner).retry_attempt = retry_attempt;
        self.set_state(PartitionState::Failed { reason });
    }

    fn set_state(&self, state: PartitionState) {
        let mut status = self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if status.state != state {
            info!(topic = %self.source_topic.name, partition = self.partition, from = %status.state, to = %state, "partition state");
            status.state = state;
        }
    }

    fn update_status(&self, high_watermark: i64, last_stable_offset: i64) {
        let mut status = self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if high_watermark >= 0 {
            status.source_high_watermark = high_watermark;
        }
        if last_stable_offset >= 0 {
            status.source_last_stable_offset = last_stable_offset;
        }
        status.destination_offset = self.next_offset;
    }

    /// Runs the partition until cancelled or FAILED. Retriable failures are retried with backoff
    /// (the partition shows FAILED with the reason meanwhile, then PREPARING again).
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut backoff = Backoff::new(&self.shared.config.backoff);
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
                    warn!(topic = %self.topic(), partition = self.partition, %reason, "partition failed; retrying");
                    let delay = backoff.next_delay().unwrap_or(self.shared.config.backoff.max);
                    self.set_failed(reason, i16::try_from(backoff.attempts()).unwrap_or(i16::MAX));
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Err(e) => {
                    let reason = e.reason();
                    tracing::error!(topic = %self.topic(), partition = self.partition, %reason, "partition FAILED");
                    self.set_failed(reason, -1);
                    return;
                }
            }
        }
    }

    async fn copy(&mut self, cancel: &CancellationToken) -> Result<(), ReplicationError> {
        self.set_state(PartitionState::Preparing);
        self.prepare().await?;
        let source_start = self
            .shared
            .source
            .list_offset(self.topic(), self.partition, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted)
            .await
            .map_err(unavailable("source"))?;
        let fetch_from = self.next_offset.max(source_start);
        let (tx, mut rx) = mpsc::channel(FETCH_QUEUE);
        let fetcher = Fetcher {
            source: self.shared.source.clone(),
            topic: self.topic().to_owned(),
            partition: self.partition,
            topic_id: self.source_topic.topic_id,
            cluster_id: self.source_topic.cluster_id.clone(),
            config: self.shared.config.clone(),
            budget: self.shared.budget.clone(),
        };
        let fetch_cancel = cancel.child_token();
        let _stop_fetcher = fetch_cancel.clone().drop_guard();
        let mut fetch_task = AbortOnDrop(tokio::spawn(fetcher.run(fetch_from, tx, fetch_cancel)));
        if fetch_from > self.next_offset {
            self.fill(self.next_offset, fetch_from, true).await?;
            self.align_log_start(source_start).await?;
        }
        self.set_state(PartitionState::Mirroring);
        while let Some(fetched) = rx.recv().await {
            match fetched {
                Fetched::Failed(e) => return Err(e),
                Fetched::Gap { from, to, high_watermark, last_stable_offset, log_start_offset } => {
                    self.update_status(high_watermark, last_stable_offset);
                    if to > self.next_offset {
                        debug!(topic = %self.topic(), partition = self.partition, from, to, "filling a source gap");
                        self.fill(self.next_offset.max(from), to, log_start_offset >= to).await?;
                    }
                    self.align_log_start(log_start_offset).await?;
                }
                Fetched::Data { records, high_watermark, last_stable_offset, log_start_offset, permit, .. } => {
                    self.update_status(high_watermark, last_stable_offset);
                    for batch in RecordBatches::new(records) {
                        let batch = batch.map_err(|source| super::plan::PlanError::Corrupt { offset: self.next_offset, source })?;
                        let writes = plan_batch(&batch, self.next_offset, &mut self.sequences)?;
                        for write in writes {
                            self.execute(write).await?;
                        }
                        self.next_offset = self.next_offset.max(batch.next_offset());
                        self.update_status(-1, -1);
                    }
                    drop(permit);
                    self.align_log_start(log_start_offset).await?;
                }
            }
        }
        // The fetcher ends on its own only when cancelled (so is this copy, which `run` then drops
        // before it gets here) or after sending `Failed`; anything else is a bug to report.
        if cancel.is_cancelled() {
            return Ok(());
        }
        Err(ReplicationError::Internal { detail: fetcher_ended(&mut fetch_task.0).await })
    }

    /// Resume point: the destination's end offset, its producer state, and a check that its tail
    /// was written by the mirror.
    async fn prepare(&mut self) -> Result<(), ReplicationError> {
        let dest = &self.shared.destination;
        let (topic, partition) = (self.source_topic.name.clone(), self.partition);
        let end = dest.list_offset(&topic, partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.map_err(unavailable("destination"))?;
        let start = dest.list_offset(&topic, partition, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await.map_err(unavailable("destination"))?;
        let producers = dest.describe_producers(&topic, partition).await.map_err(unavailable("destination"))?;
        let mut sequences = ProducerSequences::new();
        for p in &producers {
            if p.producer_id < PRODUCER_ID_MAPPING_BIT {
                return Err(ReplicationError::Divergence {
                    offset: end,
                    detail: format!("producer {} (not the mirror) wrote to the destination partition", p.producer_id),
                });
            }
            sequences.seed(p.producer_id, i16::try_from(p.producer_epoch).unwrap_or(i16::MAX), p.last_sequence);
        }
        if end > start {
            self.check_tail(end).await?;
        }
        self.sequences = sequences;
        self.next_offset = end;
        self.destination_log_start = start;
        self.update_status(-1, -1);
        Ok(())
    }

    /// Compares the last destination batch with the source records at the same offsets.
    async fn check_tail(&self, end: i64) -> Result<(), ReplicationError> {
        let dest = &self.shared.destination;
        let fetched =
            dest.fetch_partition(self.topic(), self.partition, end - 1, IsolationLevel::ReadUncommitted, 1 << 20).await.map_err(unavailable("destination"))?;
        let Some(Ok(last)) = RecordBatches::new(fetched.records).last() else {
            return Ok(());
        };
        if last.is_control() || last.records_count() == 0 {
            if last.has_producer_id() && last.producer_id() < PRODUCER_ID_MAPPING_BIT {
                return Err(ReplicationError::Divergence {
                    offset: last.base_offset(),
                    detail: format!("a transaction marker of producer {} not written by the mirror", last.producer_id()),
                });
            }
            return Ok(());
        }
        let mine = collect_records(&last)?;
        let Some(&(first_offset, _)) = mine.first() else { return Ok(()) };
        let src = self.shared.source.fetch_partition(self.topic(), self.partition, first_offset, IsolationLevel::ReadUncommitted, 1 << 20).await;
        let src = match src {
            Ok(s) => s,
            // The source no longer has these offsets (retention); nothing to compare against.
            Err(e) if e.code() == Some(crate::protocol::ErrorCode::OffsetOutOfRange) => return Ok(()),
            Err(e) => return Err(unavailable("source")(e)),
        };
        let mut theirs = Vec::new();
        for b in RecordBatches::new(src.records) {
            let b = b.map_err(|source| super::plan::PlanError::Corrupt { offset: first_offset, source })?;
            if !b.is_control() {
                theirs.extend(collect_records(&b)?);
            }
        }
        for (offset, record) in &mine {
            match theirs.iter().find(|(o, _)| o == offset) {
                Some((_, r)) if r == record => {}
                // A filler record of a leading gap, below the source log start.
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

    /// Fills `[from, to)`: markers, or, for a long gap below the source log start on a topic that
    /// allows DeleteRecords, filler records cut away afterwards.
    async fn fill(&mut self, from: i64, to: i64, below_log_start: bool) -> Result<(), ReplicationError> {
        if to <= from {
            return Ok(());
        }
        let records_allowed = below_log_start && self.source_topic.allows_delete_records();
        if records_allowed && to - from > self.shared.config.marker_gap_limit {
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
        self.update_status(-1, -1);
        Ok(())
    }

    /// Moves the destination log start up to the source's, where the topic allows it.
    async fn align_log_start(&mut self, source_log_start: i64) -> Result<(), ReplicationError> {
        if source_log_start <= self.destination_log_start || source_log_start > self.next_offset || !self.source_topic.allows_delete_records() {
            return Ok(());
        }
        let low = self
            .shared
            .destination
            .delete_records(self.topic(), self.partition, source_log_start, self.shared.config.write_timeout)
            .await
            .map_err(unavailable("destination"))?;
        self.destination_log_start = low;
        Ok(())
    }

    /// Writes one planned write at its offset, reconciling after ambiguous outcomes.
    async fn execute(&mut self, write: Write) -> Result<(), ReplicationError> {
        if let (Some(limiter), Write::Batch { bytes, .. }) = (&self.shared.config.rate_limiter, &write) {
            limiter.acquire(&self.source_topic.name, self.partition, bytes.len()).await;
        }
        let mut pending = write;
        let mut backoff = Backoff::new(&self.shared.config.backoff);
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
            debug!(topic = %self.topic(), partition = self.partition, offset = pending.offset(), error = %error, "ambiguous write; reconciling");
            // A write still queued at the broker completes within its timeout; then read back.
            let settle = if matches!(error, ClientError::Connection { .. }) { self.shared.config.write_timeout } else { Duration::ZERO };
            let delay = backoff.next_delay().unwrap_or(self.shared.config.backoff.max).max(settle);
            tokio::time::sleep(delay).await;
            let _ = self.shared.destination.refresh_metadata(&[self.topic()]).await;
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
        let dest = &self.shared.destination;
        let mut last = None;
        loop {
            let end = dest
                .list_offset(self.topic(), self.partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted)
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
        let dest = &self.shared.destination;
        match write {
            Write::Batch { bytes, transactional, .. } => {
                let leader = dest.leader_of(self.topic(), self.partition).await?;
                let producer = if *transactional {
                    let header = crate::protocol::batch::RawBatch::from_bytes(bytes.clone())
                        .map_err(|_| ClientError::Config { key: "batch".into(), message: "invariant: planned batches parse".into() })?;
                    Some((header.producer_id(), header.producer_epoch()))
                } else {
                    None
                };
                let batch = ProducePartition { topic: self.topic().to_owned(), partition: self.partition, records: bytes.clone() };
                let produced = self.shared.writers.produce(leader, batch, producer).await?;
                Ok(Some(produced.base_offset))
            }
            Write::Markers { markers, .. } => {
                let leader = dest.leader_of(self.topic(), self.partition).await?;
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
            partitions: vec![self.partition],
        }
    }
}

/// Markers sent in one WriteTxnMarkers request (each is one append on the broker).
const MARKERS_PER_REQUEST: usize = 500;

/// The key of filler records (below the source log start, cut away with DeleteRecords).
const FILLER_KEY: &[u8] = b"__kafka_mirror_proxy_filler";

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

type Comparable = (Option<bytes::Bytes>, Option<bytes::Bytes>, Vec<(bytes::Bytes, Option<bytes::Bytes>)>, i64);

fn collect_records(batch: &crate::protocol::batch::RawBatch) -> Result<Vec<(i64, Comparable)>, ReplicationError> {
    let corrupt = |source| ReplicationError::Plan(super::plan::PlanError::Corrupt { offset: batch.base_offset(), source });
    let mut out = Vec::new();
    for r in batch.records().map_err(corrupt)? {
        let r = r.map_err(corrupt)?;
        out.push((batch.record_offset(&r), (r.key.clone(), r.value.clone(), r.headers.clone(), batch.record_timestamp(&r))));
    }
    Ok(out)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Why a partition's fetcher task ended by itself: its panic's message, or that it stopped.
async fn fetcher_ended(task: &mut tokio::task::JoinHandle<()>) -> String {
    match task.await {
        Err(e) if e.is_panic() => format!("the source fetcher panicked: {}", crate::report::panic_message(&*e.into_panic())),
        Err(_) => "the source fetcher was cancelled".to_owned(),
        Ok(()) => "the source fetcher stopped".to_owned(),
    }
}

/// Runs `copier` to its end; if it panics, its partition goes FAILED with the panic's message
/// (instead of showing its last state forever with nothing running). Other partitions are separate
/// tasks and keep going.
pub(super) async fn run_guarded(copier: PartitionCopier, cancel: CancellationToken) {
    let status = copier.status.clone();
    fail_on_panic(&status, copier.run(cancel)).await;
}

/// Runs `copy`; if it panics, the partition of `status` goes FAILED (not retried) with the message.
async fn fail_on_panic(status: &Mutex<PartitionStatus>, copy: impl Future<Output = ()>) {
    if let Err(message) = crate::report::catch_panic_async(copy).await {
        let reason = ReplicationError::Internal { detail: format!("the partition's copier panicked: {message}") }.reason();
        let mut status = status.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tracing::error!(topic = %status.topic, partition = status.partition, %reason, "partition FAILED");
        status.retry_attempt = -1;
        status.state = PartitionState::Failed { reason };
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

    fn status() -> Mutex<PartitionStatus> {
        Mutex::new(PartitionStatus {
            topic: "t".to_owned(),
            partition: 3,
            state: PartitionState::Mirroring,
            source_high_watermark: 10,
            source_last_stable_offset: 10,
            destination_offset: 7,
            retry_attempt: 0,
        })
    }

    async fn panics(message: &'static str) {
        panic!("{message}")
    }

    /// A copier that panics leaves its partition FAILED with the message, not retried; one that
    /// returns leaves the state it set.
    #[tokio::test]
    async fn a_panicking_copier_fails_its_partition() {
        let panicked = status();
        fail_on_panic(&panicked, panics("offset arithmetic overflowed")).await;
        let panicked = panicked.into_inner().unwrap();
        assert_eq!(
            panicked.state,
            PartitionState::Failed { reason: "internal error: the partition's copier panicked: offset arithmetic overflowed".to_owned() }
        );
        assert_eq!((panicked.retry_attempt, panicked.destination_offset), (-1, 7));

        let returned = status();
        fail_on_panic(&returned, async {}).await;
        assert_eq!(returned.into_inner().unwrap().state, PartitionState::Mirroring);
    }

    /// Why a fetcher task ended: its panic's message, or that it stopped or was aborted.
    #[tokio::test]
    async fn why_a_fetcher_ended() {
        let mut panicked = tokio::spawn(panics("no leader"));
        assert_eq!(fetcher_ended(&mut panicked).await, "the source fetcher panicked: no leader");
        let mut stopped = tokio::spawn(async {});
        assert_eq!(fetcher_ended(&mut stopped).await, "the source fetcher stopped");
        let mut aborted = tokio::spawn(std::future::pending::<()>());
        aborted.abort();
        assert_eq!(fetcher_ended(&mut aborted).await, "the source fetcher was cancelled");
    }
}
