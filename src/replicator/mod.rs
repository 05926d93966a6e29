//! The replicator: copies source partitions into an unmodified destination at the same offsets
//! (spec §3–5).
//!
//! Owns: fetching from source leaders ([`fetcher`]), turning source batches into destination writes
//! ([`plan`]), producer id mapping and sequence renumbering ([`producers`]), creating destination
//! topics ([`topic`]), writing with offset checks and reconciliation ([`partition`]), and the
//! per-partition status. Does not own: the mirror's persistent state or its API (`mirror`, `admin`),
//! nor client connections of the proxy.
//!
//! ```text
//!   Replicator::start(topics)
//!     ├─ INITIALIZING: describe source topic, create/check destination topic   (topic.rs)
//!     └─ per partition: PartitionCopier task                                    (partition.rs)
//!          ├─ PREPARING: destination end offset, producer state, tail check
//!          ├─ Fetcher task: source leader ──► bounded queue + byte budget      (fetcher.rs)
//!          └─ MIRRORING: plan_batch ──► Produce (coalesced per broker, writer.rs) /
//!                        WriteTxnMarkers, every offset checked
//! ```

pub mod config;
pub mod error;
pub mod fetcher;
pub mod partition;
pub mod plan;
pub mod producers;
pub mod topic;
pub mod writer;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use config::{RateLimiter, ReplicatorConfig};
pub use error::ReplicationError;

use crate::client::{Client, IsolationLevel};
use crate::mirror::{PartitionState, PartitionStatus};
use partition::{PartitionCopier, Shared};

type StatusMap = BTreeMap<(String, i32), Arc<Mutex<PartitionStatus>>>;

/// The topics being copied, as set up: what was recorded about the source, and how many partitions
/// have a copier.
type TopicMap = BTreeMap<String, topic::SourceTopic>;

/// A running replicator for a set of topics.
#[derive(Debug)]
pub struct Replicator {
    statuses: Arc<Mutex<StatusMap>>,
    topics: Mutex<TopicMap>,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

impl Replicator {
    /// Starts mirroring `topics` from `source` into `destination`. Topic setup failures show as
    /// FAILED partitions (or, for a topic that cannot even be described, one FAILED partition 0).
    pub async fn start(source: Arc<Client>, destination: Arc<Client>, topics: &[String], config: ReplicatorConfig) -> Self {
        let budget = Arc::new(Semaphore::new(config.buffer_bytes.div_ceil(1024).max(1)));
        let cancel = CancellationToken::new();
        let writers = writer::Writers::new(destination.clone(), config.clone(), cancel.clone());
        let shared = Arc::new(Shared { source, destination, config, budget, writers });
        let replicator =
            Self { statuses: Arc::new(Mutex::new(BTreeMap::new())), topics: Mutex::new(BTreeMap::new()), shared, cancel, tasks: TaskTracker::new() };
        for topic in topics {
            replicator.add_topic(topic).await;
        }
        replicator
    }

    fn status_entry(&self, topic: &str, partition: i32, state: PartitionState) -> Arc<Mutex<PartitionStatus>> {
        let mut map = self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = map.entry((topic.to_owned(), partition)).or_insert_with(|| {
            Arc::new(Mutex::new(PartitionStatus {
                topic: topic.to_owned(),
                partition,
                state: state.clone(),
                source_high_watermark: -1,
                source_last_stable_offset: -1,
                destination_offset: 0,
                retry_attempt: 0,
            }))
        });
        entry.lock().unwrap_or_else(std::sync::PoisonError::into_inner).state = state;
        entry.clone()
    }

    /// Sets up `topic` (INITIALIZING) and starts its partitions.
    pub async fn add_topic(&self, topic: &str) {
        let (source, destination, config) = (&self.shared.source, &self.shared.destination, &self.shared.config);
        self.status_entry(topic, 0, PartitionState::Initializing);
        let setup = async {
            let described = topic::describe_source(source, topic).await?;
            topic::ensure_destination(source, destination, &described, config).await?;
            Ok::<_, ReplicationError>(described)
        };
        let described = match setup.await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(topic, reason = %e.reason(), "topic setup failed");
                self.status_entry(topic, 0, PartitionState::Failed { reason: e.reason() });
                return;
            }
        };
        self.spawn_partitions(&described, 0);
        self.lock_topics().insert(topic.to_owned(), described);
    }

    fn lock_topics(&self) -> std::sync::MutexGuard<'_, TopicMap> {
        self.topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn spawn_partitions(&self, described: &topic::SourceTopic, from: i32) {
        for p in from..described.partitions {
            let status = self.status_entry(&described.name, p, PartitionState::Preparing);
            let copier = PartitionCopier::new(self.shared.clone(), described.clone(), p, status);
            self.tasks.spawn(partition::run_guarded(copier, self.cancel.child_token()));
        }
    }

    /// The topics being copied.
    pub fn topics(&self) -> Vec<String> {
        self.lock_topics().keys().cloned().collect()
    }

    /// Follows a partition increase of `topic` at the source: creates the new partitions on the
    /// destination and starts copying them. Returns the partition count now copied.
    ///
    /// # Errors
    /// The source cannot be read, the topic was re-created (its id changed), or the destination
    /// refuses the new partitions.
    pub async fn sync_partitions(&self, topic: &str) -> Result<i32, ReplicationError> {
        let Some(recorded) = self.lock_topics().get(topic).cloned() else {
            return Err(ReplicationError::SourceTopicChanged { topic: topic.to_owned(), detail: "is not mirrored here".to_owned() });
        };
        let now = topic::describe_source(&self.shared.source, topic).await?;
        if now.topic_id != recorded.topic_id {
            return Err(ReplicationError::SourceTopicChanged {
                topic: topic.to_owned(),
                detail: format!("was re-created (topic id {} is now {})", recorded.topic_id, now.topic_id),
            });
        }
        if now.partitions <= recorded.partitions {
            return Ok(recorded.partitions);
        }
        self.shared
            .destination
            .create_partitions(topic, now.partitions, self.shared.config.write_timeout)
            .await
            .map_err(|e| ReplicationError::DestinationTopic { topic: topic.to_owned(), detail: format!("cannot add partitions: {e}") })?;
        for p in recorded.partitions..now.partitions {
            self.shared.destination.leader_of(topic, p).await.map_err(|source| ReplicationError::Unavailable { side: "destination", source })?;
        }
        let updated = topic::SourceTopic { partitions: now.partitions, ..recorded.clone() };
        self.spawn_partitions(&updated, recorded.partitions);
        self.lock_topics().insert(topic.to_owned(), updated);
        tracing::info!(topic, from = recorded.partitions, to = now.partitions, "mirroring new partitions");
        Ok(now.partitions)
    }

    /// Every partition's status, sorted by topic and partition.
    pub fn status(&self) -> Vec<PartitionStatus> {
        let map = self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.values().map(|s| s.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()).collect()
    }

    /// True if lag is computed against the LSO (read_committed copying).
    pub fn reads_committed(&self) -> bool {
        self.shared.config.isolation == IsolationLevel::ReadCommitted
    }

    /// Stops copying and returns when every partition task has ended. A write in flight may still
    /// land at the destination; the next start reconciles (PREPARING reads the destination back).
    pub async fn shutdown(self) {
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for Replicator {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
