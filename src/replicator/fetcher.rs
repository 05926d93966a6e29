//! Fetching one source partition ahead of the writes: a task per partition that long-polls the
//! source leader and hands complete batches to the partition's writer through a bounded queue, with
//! the bytes counted against the replicator's shared buffer (fetching waits when it is full).
//!
//! It also watches the source's identity: a changed topic id (topic deleted and re-created) or
//! cluster id ends the partition with a reason.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::debug;
use uuid::Uuid;

use super::config::ReplicatorConfig;
use super::error::ReplicationError;
use crate::client::{Backoff, Client, ClientError, FetchSpec, IsolationLevel, OffsetSpec};
use crate::protocol::ErrorCode;
use crate::protocol::batch::RecordBatches;

/// What the fetcher hands to the partition's writer.
#[derive(Debug)]
pub enum Fetched {
    /// Complete batches starting at or before `offset`.
    Data {
        /// The fetch offset that returned them.
        offset: i64,
        /// Raw complete batches.
        records: Bytes,
        /// Source high watermark.
        high_watermark: i64,
        /// Source last stable offset.
        last_stable_offset: i64,
        /// Source log start offset.
        log_start_offset: i64,
        /// Memory held until the batches are written.
        permit: Option<OwnedSemaphorePermit>,
    },
    /// `[from, to)` holds no batch at the source (compacted away, or below its log start): fill it.
    Gap {
        /// First missing offset.
        from: i64,
        /// Offset after the gap.
        to: i64,
        /// Source high watermark.
        high_watermark: i64,
        /// Source last stable offset.
        last_stable_offset: i64,
        /// Source log start offset.
        log_start_offset: i64,
    },
    /// The partition cannot go on.
    Failed(ReplicationError),
}

/// One partition's fetch state.
#[derive(Debug)]
pub struct Fetcher {
    /// Source client.
    pub source: Arc<Client>,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The source topic id recorded at setup.
    pub topic_id: Uuid,
    /// The source cluster id recorded at setup.
    pub cluster_id: String,
    /// Settings.
    pub config: ReplicatorConfig,
    /// Shared memory budget, in bytes.
    pub budget: Arc<Semaphore>,
}

impl Fetcher {
    /// Fetches from `offset` on until cancelled or the queue closes.
    pub async fn run(self, mut offset: i64, out: mpsc::Sender<Fetched>, cancel: CancellationToken) {
        let mut backoff = Backoff::new(&self.config.backoff);
        let mut empty_at: Option<(i64, i64)> = None;
        loop {
            let step = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                step = self.fetch_once(offset) => step,
            };
            let message = match step {
                Ok(Step::Data { records, next, high_watermark, last_stable_offset, log_start_offset }) => {
                    backoff = Backoff::new(&self.config.backoff);
                    empty_at = None;
                    let permit = self.reserve(records.len(), &cancel).await;
                    let fetched_at = offset;
                    offset = next;
                    Fetched::Data { offset: fetched_at, records, high_watermark, last_stable_offset, log_start_offset, permit }
                }
                Ok(Step::Empty { bound, high_watermark, last_stable_offset, log_start_offset }) => {
                    backoff = Backoff::new(&self.config.backoff);
                    if bound <= offset {
                        empty_at = None;
                        continue;
                    }
                    // Nothing returned below the bound: the range has no batch. Confirm once with a
                    // second fetch before filling, so a race with the source's appends cannot turn
                    // real data into filler.
                    if empty_at != Some((offset, bound)) {
                        empty_at = Some((offset, bound));
                        continue;
                    }
                    empty_at = None;
                    let from = offset;
                    offset = bound;
                    Fetched::Gap { from, to: bound, high_watermark, last_stable_offset, log_start_offset }
                }
                Ok(Step::Jump { to, high_watermark, last_stable_offset, log_start_offset }) => {
                    let from = offset;
                    offset = to;
                    Fetched::Gap { from, to, high_watermark, last_stable_offset, log_start_offset }
                }
                Err(e) if e.is_retriable() => {
                    debug!(topic = %self.topic, partition = self.partition, error = %e.reason(), "source fetch failed; retrying");
                    let delay = backoff.next_delay().unwrap_or(self.config.backoff.max);
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    let _ = self.source.refresh_metadata(&[&self.topic]).await;
                    continue;
                }
                Err(e) => {
                    let _ = out.send(Fetched::Failed(e)).await;
                    return;
                }
            };
            if out.send(message).await.is_err() {
                return;
            }
        }
    }

    async fn reserve(&self, bytes: usize, cancel: &CancellationToken) -> Option<OwnedSemaphorePermit> {
        let want = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, self.config.buffer_bytes.div_ceil(1024).max(1) as u32);
        tokio::select! {
            () = cancel.cancelled() => None,
            permit = self.budget.clone().acquire_many_owned(want) => permit.ok(),
        }
    }

    fn check_identity(&self) -> Result<(), ReplicationError> {
        if let Some(now) = self.source.cached_cluster_id() {
            if !self.cluster_id.is_empty() && now != self.cluster_id {
                return Err(ReplicationError::SourceClusterChanged { recorded: self.cluster_id.clone(), now });
            }
        }
        match self.source.cached_topic_id(&self.topic) {
            Some(id) if id != self.topic_id && !id.is_nil() => Err(ReplicationError::SourceTopicChanged {
                topic: self.topic.clone(),
                detail: format!("was re-created (topic id {} is now {id})", self.topic_id),
            }),
            _ => Ok(()),
        }
    }

    async fn fetch_once(&self, offset: i64) -> Result<Step, ReplicationError> {
        let unavailable = |source: ClientError| ReplicationError::Unavailable { side: "source", source };
        self.check_identity()?;
        let leader = match self.source.leader_of(&self.topic, self.partition).await {
            Ok(l) => l,
            Err(e) => {
                // A topic that vanished from the source's metadata was deleted.
                let md = self.source.refresh_metadata(&[&self.topic]).await.map_err(unavailable)?;
                if !md.topics.contains_key(&self.topic) {
                    return Err(ReplicationError::SourceTopicChanged { topic: self.topic.clone(), detail: "was deleted".to_owned() });
                }
                return Err(unavailable(e));
            }
        };
        let mut spec = FetchSpec::single(&self.topic, self.partition, offset, self.config.isolation, self.config.partition_fetch_bytes);
        spec.max_wait = self.config.fetch_max_wait;
        spec.min_bytes = 1;
        let fetched = self.source.fetch(leader, &spec, None).await.map_err(unavailable)?;
        let p = fetched
            .into_iter()
            .find(|p| p.partition == self.partition)
            .ok_or_else(|| unavailable(ClientError::MissingInResponse { api_key: kafka_protocol::messages::ApiKey::Fetch, target: Default::default() }))?;
        match p.error {
            None => {}
            Some(ErrorCode::OffsetOutOfRange) => return self.out_of_range(offset).await,
            Some(ErrorCode::UnknownTopicId | ErrorCode::UnknownTopicOrPartition | ErrorCode::InconsistentTopicId) => {
                let _ = self.source.refresh_metadata(&[&self.topic]).await;
                self.check_identity()?;
                if self.source.cached_topic_id(&self.topic).is_none() {
                    return Err(ReplicationError::SourceTopicChanged { topic: self.topic.clone(), detail: "was deleted".to_owned() });
                }
                return Err(unavailable(ClientError::Broker {
                    api_key: kafka_protocol::messages::ApiKey::Fetch,
                    target: Default::default(),
                    code: p.error.unwrap_or(ErrorCode::UnknownServerError),
                    message: None,
                }));
            }
            Some(code) => {
                return Err(unavailable(ClientError::Broker {
                    api_key: kafka_protocol::messages::ApiKey::Fetch,
                    target: Default::default(),
                    code,
                    message: None,
                }));
            }
        }
        let bound = match self.config.isolation {
            IsolationLevel::ReadCommitted if p.last_stable_offset >= 0 => p.last_stable_offset,
            _ => p.high_watermark,
        };
        // Keep complete batches only; a cut-off last batch is fetched again next time.
        let mut batches = RecordBatches::new(p.records.clone());
        let mut next = offset;
        for batch in batches.by_ref() {
            match batch {
                Ok(b) => next = next.max(b.next_offset()),
                Err(source) => {
                    return Err(ReplicationError::Plan(super::plan::PlanError::Corrupt { offset: next, source }));
                }
            }
        }
        let complete = p.records.len() - batches.remaining_partial();
        if next > offset {
            return Ok(Step::Data {
                records: p.records.slice(..complete),
                next,
                high_watermark: p.high_watermark,
                last_stable_offset: p.last_stable_offset,
                log_start_offset: p.log_start_offset,
            });
        }
        if complete == 0 && !p.records.is_empty() {
            // One batch larger than the per-partition cap: brokers return the first batch whole from
            // Fetch v3 on, so this only happens for batches over the response cap.
            return Err(ReplicationError::Divergence {
                offset,
                detail: format!("source batch larger than partition_fetch_bytes ({} bytes)", self.config.partition_fetch_bytes),
            });
        }
        Ok(Step::Empty { bound, high_watermark: p.high_watermark, last_stable_offset: p.last_stable_offset, log_start_offset: p.log_start_offset })
    }

    async fn out_of_range(&self, offset: i64) -> Result<Step, ReplicationError> {
        let unavailable = |source: ClientError| ReplicationError::Unavailable { side: "source", source };
        let start = self.source.list_offset(&self.topic, self.partition, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await.map_err(unavailable)?;
        let end = self.source.list_offset(&self.topic, self.partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.map_err(unavailable)?;
        if offset < start {
            // The source's log start moved past us (retention, DeleteRecords): skip to it.
            return Ok(Step::Jump { to: start, high_watermark: end, last_stable_offset: -1, log_start_offset: start });
        }
        Err(ReplicationError::Divergence { offset, detail: format!("the source log ends at {end}, before the destination (source truncated or replaced)") })
    }
}

enum Step {
    Data { records: Bytes, next: i64, high_watermark: i64, last_stable_offset: i64, log_start_offset: i64 },
    Empty { bound: i64, high_watermark: i64, last_stable_offset: i64, log_start_offset: i64 },
    Jump { to: i64, high_watermark: i64, last_stable_offset: i64, log_start_offset: i64 },
}
