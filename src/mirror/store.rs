//! The `__mirror_state` topic on the destination: created at start-up, read back in full to load,
//! followed (tailed) for as long as the instance runs, and appended to before every transition takes
//! effect.
//!
//! ```text
//!   StateStore::open ── CreateTopics (1 partition, compacted, RF min(3, brokers)) or reuse
//!                     └─ Fetch from the log start to the high watermark ─► records in log order
//!   StateStore::tail ── long-polling Fetch from there on ─► every record, in log order, to the
//!                        caller (the manager applies them to its model: its own writes and every
//!                        other instance's alike)
//!   StateStore::write ── records in batches (one Produce each, acks=all), writes serialised;
//!                        retried with backoff until the deadline: a record is an upsert of its
//!                        key, so a batch appended twice by a retry after an ambiguous failure
//!                        changes nothing; returns the last offset, so the writer can wait until
//!                        the tail applied it
//! ```
//!
//! One partition: every instance reads the whole state anyway (the write policy needs every mirror
//! topic), and a single log orders all transitions of all instances.
//!
//! # Cancel safety
//! [`StateStore::write`] is not cancel safe: cancelled after the Produce was sent, the record may or
//! may not be in the log. Callers await it to completion before acting on the transition.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::records::StateRecord;
use crate::client::{Backoff, BackoffConfig, Client, ClientError, FetchPartitionSpec, FetchSpec, IsolationLevel, NewTopic, OffsetSpec, ProduceOptions};
use crate::protocol::ErrorCode;
use crate::protocol::batch::{BatchBuilder, Record, RecordBatches};
use crate::protocol::mirror::DecodeError;

/// Default name of the state topic.
pub const DEFAULT_STATE_TOPIC: &str = "__mirror_state";
/// Largest fetch while loading, bytes.
const LOAD_FETCH_BYTES: i32 = 8 * 1024 * 1024;
/// Time the broker waits for replication of a state write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(15);
/// Most records in one state batch (well under the default `max.message.bytes` of 1 MiB: a state
/// record is some hundred bytes, a mirror definition a few kilobytes).
pub const RECORDS_PER_BATCH: usize = 200;
/// How long one tailing Fetch waits at the broker for new records (a new record answers it at once).
const TAIL_WAIT: Duration = Duration::from_millis(500);

/// A state-store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The destination failed (unreachable, refused the topic or the write).
    #[error("`{topic}` on the destination: {action} failed")]
    Destination {
        topic: String,
        action: &'static str,
        #[source]
        source: Box<ClientError>,
    },
    /// A record was written but this instance's tail of the topic did not read it back in time
    /// (the destination is slow, or its leader moved); the transition may still take effect.
    #[error("`{topic}`: the record written at offset {offset} was not read back within {waited:?}")]
    Lagging { topic: String, offset: i64, waited: Duration },
    /// A record in the topic does not decode (written by a newer build, or corrupt).
    #[error("`{topic}` offset {offset}: record does not decode")]
    Corrupt {
        topic: String,
        offset: i64,
        #[source]
        source: DecodeError,
    },
}

/// The state topic of one destination cluster.
#[derive(Debug)]
pub struct StateStore {
    destination: Arc<Client>,
    topic: String,
    /// Serialises writes, so records land in the order transitions were decided.
    write_lock: Mutex<()>,
    backoff: BackoffConfig,
    /// The state partition's high watermark as the tail last saw it (-1 before its first fetch).
    high_watermark: std::sync::atomic::AtomicI64,
}

impl StateStore {
    /// Creates `topic` if missing and reads every record in it, in log order. Returns the offset
    /// after the last record read: where [`StateStore::tail`] goes on.
    ///
    /// # Errors
    /// [`StoreError::Destination`] if the destination cannot be reached or refuses the topic,
    /// [`StoreError::Corrupt`] for a record that does not decode.
    pub async fn open(destination: Arc<Client>, topic: &str, backoff: BackoffConfig) -> Result<(Self, Vec<StateRecord>, i64), StoreError> {
        let store = Self { destination, topic: topic.to_owned(), write_lock: Mutex::new(()), backoff, high_watermark: std::sync::atomic::AtomicI64::new(-1) };
        store.ensure_topic().await?;
        let (records, next) = read_state_topic(&store.destination, &store.topic).await?;
        info!(topic, records = records.len(), next_offset = next, "mirror state loaded");
        Ok((store, records, next))
    }

    /// The state topic's high watermark: every record written before this call is below it.
    ///
    /// # Errors
    /// [`StoreError::Destination`] if ListOffsets fails.
    pub async fn end_offset(&self) -> Result<i64, StoreError> {
        self.destination.list_offset(&self.topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.map_err(self.fail("ListOffsets"))
    }

    /// Follows the topic from `from` until `cancel`, handing every batch of records to `apply` in
    /// log order with the offset after them. Transport and leader errors are retried (with
    /// backoff); a record that does not decode is logged and skipped, since stopping would freeze
    /// this instance's view of every mirror.
    ///
    /// `reader` must be a client of its own: a broker answers the requests of one connection in
    /// order, so the tail's long-polling Fetch would hold up every other request sharing it.
    pub async fn tail(&self, reader: &Client, from: i64, mut apply: impl FnMut(Vec<StateRecord>, i64), cancel: CancellationToken) {
        let mut offset = from;
        let retry = BackoffConfig { deadline: Duration::MAX, ..self.backoff.clone() };
        let mut backoff = Backoff::new(&retry);
        loop {
            let fetched = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                f = self.fetch_wait(reader, offset) => f,
            };
            let fetched = match fetched {
                Ok(f) => {
                    backoff = Backoff::new(&retry);
                    f
                }
                Err(e) => {
                    let delay = backoff.next_delay().unwrap_or(retry.max);
                    if backoff.attempts() > 3 {
                        warn!(topic = %self.topic, offset, error = %crate::report::error_chain(&e), "cannot follow the mirror state; retrying");
                    } else {
                        debug!(topic = %self.topic, offset, error = %e, "following the mirror state failed; retrying");
                    }
                    if e.needs_metadata_refresh() {
                        let _ = reader.refresh_metadata(&[&self.topic]).await;
                    }
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(delay) => {}
                    }
                    continue;
                }
            };
            let mut records = Vec::new();
            let mut next = offset;
            for batch in RecordBatches::new(fetched) {
                let Ok(batch) = batch else { break };
                if batch.next_offset() <= next {
                    continue;
                }
                if !batch.is_control() {
                    match self.decode_batch(&batch, next) {
                        Ok(r) => records.extend(r),
                        Err(e) => error!(topic = %self.topic, error = %crate::report::error_chain(&e), "skipping a mirror state batch that does not decode"),
                    }
                }
                next = batch.next_offset();
            }
            if next > offset {
                offset = next;
                apply(records, offset);
            }
        }
    }

    /// One long-polling Fetch of the state partition from `offset` (raw batches).
    async fn fetch_wait(&self, reader: &Client, offset: i64) -> Result<bytes::Bytes, ClientError> {
        let leader = reader.leader_of(&self.topic, 0).await?;
        let spec = FetchSpec {
            partitions: vec![FetchPartitionSpec {
                topic: self.topic.clone(),
                partition: 0,
                fetch_offset: offset,
                last_fetched_epoch: -1,
                partition_max_bytes: LOAD_FETCH_BYTES,
            }],
            isolation: IsolationLevel::ReadUncommitted,
            max_wait: TAIL_WAIT,
            min_bytes: 1,
            max_bytes: LOAD_FETCH_BYTES,
        };
        let fetched = reader.fetch(leader, &spec, None).await?;
        let target = || crate::client::Target { broker: Some(leader), topic: Some(self.topic.clone()), partition: Some(0) };
        let api_key = kafka_protocol::messages::ApiKey::Fetch;
        let p = fetched
            .into_iter()
            .find(|p| p.topic == self.topic && p.partition == 0)
            .ok_or_else(|| ClientError::MissingInResponse { api_key, target: target() })?;
        if let Some(code) = p.error {
            return Err(ClientError::Broker { api_key, target: target(), code, message: None });
        }
        self.high_watermark.fetch_max(p.high_watermark, std::sync::atomic::Ordering::Relaxed);
        Ok(p.records)
    }

    /// The state partition's high watermark as the tail last saw it (-1 before its first fetch).
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn fail(&self, action: &'static str) -> impl Fn(ClientError) -> StoreError + '_ {
        move |source| StoreError::Destination { topic: self.topic.clone(), action, source: Box::new(source) }
    }

    async fn ensure_topic(&self) -> Result<(), StoreError> {
        let brokers = self.destination.refresh_metadata(&[]).await.map_err(self.fail("metadata"))?.brokers.len();
        let replication_factor = brokers.clamp(1, 3) as i16;
        let min_isr = if replication_factor >= 3 { "2" } else { "1" };
        let topic = NewTopic {
            name: self.topic.clone(),
            num_partitions: 1,
            replication_factor,
            configs: vec![
                ("cleanup.policy".to_owned(), "compact".to_owned()),
                ("min.insync.replicas".to_owned(), min_isr.to_owned()),
                ("unclean.leader.election.enable".to_owned(), "false".to_owned()),
            ],
        };
        let created = self.destination.create_topics(&[topic], Duration::from_secs(30)).await.map_err(self.fail("CreateTopics"))?;
        match created.into_iter().next() {
            Some(Ok(_)) => info!(topic = %self.topic, replication_factor, "created the mirror state topic"),
            Some(Err(e)) if e.code() == Some(ErrorCode::TopicAlreadyExists) => debug!(topic = %self.topic, "mirror state topic exists"),
            Some(Err(e)) => return Err(self.fail("CreateTopics")(e)),
            None => {}
        }
        self.destination.leader_of(&self.topic, 0).await.map_err(self.fail("finding the leader"))?;
        Ok(())
    }

    fn decode_batch(&self, batch: &crate::protocol::batch::RawBatch, from: i64) -> Result<Vec<StateRecord>, StoreError> {
        decode_batch(&self.topic, batch, from)
    }

    /// Appends `records` in order and returns the offset of the last one once the destination has
    /// them (acks=all). Up to [`RECORDS_PER_BATCH`] records go in one batch, so a transition of a
    /// topic and its partitions is appended as a whole, in one round trip.
    ///
    /// # Errors
    /// [`StoreError::Destination`] when a write keeps failing past the backoff deadline (batches
    /// before it are in the log).
    pub async fn write(&self, records: &[StateRecord]) -> Result<Option<i64>, StoreError> {
        let _serialised = self.write_lock.lock().await;
        let mut last = None;
        for chunk in records.chunks(RECORDS_PER_BATCH) {
            let bytes = BatchBuilder::new()
                .with_base_timestamp(now_ms())
                .with_records(chunk.iter().map(|r| Record { key: Some(r.encode_key()), value: r.encode_value(), ..Record::default() }))
                .build()
                .expect("invariant: an uncompressed batch of state records encodes");
            let base = self.produce(bytes).await?;
            last = Some(base + chunk.len() as i64 - 1);
        }
        Ok(last)
    }

    /// Produces one batch, retried until the deadline (an upsert of its keys: appending it twice
    /// after an ambiguous failure changes nothing); returns its base offset.
    async fn produce(&self, bytes: bytes::Bytes) -> Result<i64, StoreError> {
        let options = ProduceOptions { timeout: WRITE_TIMEOUT, ..ProduceOptions::default() };
        let mut backoff = Backoff::new(&self.backoff);
        loop {
            match self.destination.produce(&self.topic, 0, bytes.clone(), &options).await {
                Ok(produced) => return Ok(produced.base_offset),
                Err(e) if e.is_retriable() || e.is_ambiguous() => match backoff.next_delay() {
                    Some(delay) => {
                        debug!(topic = %self.topic, error = %e, ?delay, "state write failed; retrying");
                        tokio::time::sleep(delay).await;
                        let _ = self.destination.refresh_metadata(&[&self.topic]).await;
                    }
                    None => return Err(self.fail("Produce")(e)),
                },
                Err(e) => return Err(self.fail("Produce")(e)),
            }
        }
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }
}

/// Reads every record of the state topic `topic` reachable through `client`, from its log start to
/// its high watermark, in log order; returns them with the offset after the last one. Used to load
/// this instance's state, and to look at another cluster's mirrors (loop detection).
///
/// # Errors
/// [`StoreError::Destination`] if the topic cannot be read (an absent topic is
/// `UNKNOWN_TOPIC_OR_PARTITION`), [`StoreError::Corrupt`] for a record that does not decode.
pub async fn read_state_topic(client: &Client, topic: &str) -> Result<(Vec<StateRecord>, i64), StoreError> {
    let fail = |action: &'static str| move |source| StoreError::Destination { topic: topic.to_owned(), action, source: Box::new(source) };
    let end = client.list_offset(topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.map_err(fail("ListOffsets"))?;
    let mut offset = client.list_offset(topic, 0, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await.map_err(fail("ListOffsets"))?;
    let mut records = Vec::new();
    while offset < end {
        let fetched = client.fetch_partition(topic, 0, offset, IsolationLevel::ReadUncommitted, LOAD_FETCH_BYTES).await.map_err(fail("Fetch"))?;
        let before = offset;
        for batch in RecordBatches::new(fetched.records) {
            let batch = batch.map_err(|_| StoreError::Corrupt {
                topic: topic.to_owned(),
                offset,
                source: DecodeError::InvalidValue { field: "record batch", value: offset },
            })?;
            if batch.next_offset() <= offset {
                continue;
            }
            if !batch.is_control() {
                records.extend(decode_batch(topic, &batch, offset)?);
            }
            offset = batch.next_offset();
        }
        if offset == before {
            // A batch larger than the fetch size cannot be: state records are small.
            warn!(topic, offset, "no progress reading the mirror state; retrying");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    Ok((records, offset.max(end)))
}

/// The state records of `batch` at or after offset `from`.
fn decode_batch(topic: &str, batch: &crate::protocol::batch::RawBatch, from: i64) -> Result<Vec<StateRecord>, StoreError> {
    let corrupt = |offset, source| StoreError::Corrupt { topic: topic.to_owned(), offset, source };
    let mut out = Vec::new();
    let records = batch.records().map_err(|_| corrupt(batch.base_offset(), DecodeError::InvalidValue { field: "records", value: 0 }))?;
    for record in records {
        let record = record.map_err(|_| corrupt(batch.base_offset(), DecodeError::InvalidValue { field: "record", value: 0 }))?;
        let offset = batch.record_offset(&record);
        if offset < from {
            continue;
        }
        let Some(key) = record.key.as_deref() else { continue };
        out.push(StateRecord::decode(key, record.value.as_deref()).map_err(|e| corrupt(offset, e))?);
    }
    Ok(out)
}

/// Decodes the records of a `__mirror_state` log segment file (as found in a broker's data
/// directory): for `kafka-mirrors --dump-state`. Returns `(offset, record or error)` per record and
/// stops at a truncated tail.
pub fn decode_segment(bytes: bytes::Bytes) -> Vec<(i64, Result<StateRecord, DecodeError>)> {
    let mut out = Vec::new();
    for batch in RecordBatches::new(bytes) {
        let Ok(batch) = batch else { break };
        if batch.is_control() {
            continue;
        }
        let Ok(records) = batch.records() else {
            out.push((batch.base_offset(), Err(DecodeError::InvalidValue { field: "records", value: batch.base_offset() })));
            continue;
        };
        for record in records {
            match record {
                Ok(r) => {
                    let offset = batch.record_offset(&r);
                    let decoded = match r.key.as_deref() {
                        Some(key) => StateRecord::decode(key, r.value.as_deref()),
                        None => Err(DecodeError::UnexpectedNull { field: "key" }),
                    };
                    out.push((offset, decoded));
                }
                Err(_) => {
                    out.push((batch.base_offset(), Err(DecodeError::InvalidValue { field: "record", value: batch.base_offset() })));
                    break;
                }
            }
        }
    }
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::PartitionState;
    use crate::mirror::records::PartitionRecord;

    #[test]
    fn segments_decode_record_by_record() {
        let records = [
            StateRecord::Mirror { name: "dr".to_owned(), value: None },
            StateRecord::Partition {
                topic: "orders".to_owned(),
                partition: 3,
                value: Some(PartitionRecord { mirror: "dr".to_owned(), state: PartitionState::Mirroring, retry_attempt: 0, updated_ms: 5 }),
            },
        ];
        let mut segment = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let batch = BatchBuilder::new()
                .with_base_offset(i as i64 * 10)
                .with_record(Record { key: Some(r.encode_key()), value: r.encode_value(), ..Record::default() })
                .build()
                .unwrap();
            segment.extend_from_slice(&batch);
        }
        // A truncated tail (a segment being written) is ignored.
        segment.extend_from_slice(&[0, 0, 0]);
        let decoded = decode_segment(bytes::Bytes::from(segment));
        assert_eq!(decoded.len(), 2);
        assert_eq!(decoded[0], (0, Ok(records[0].clone())));
        assert_eq!(decoded[1], (10, Ok(records[1].clone())));
    }
}
