//! The replicator: copies source partitions into an unmodified destination at the same offsets
//! (spec §3–5).
//!
//! Owns: fetching from source leaders, per broker ([`fetch`]), turning source batches into
//! destination writes ([`plan`]), producer id mapping and sequence renumbering ([`producers`]),
//! creating destination topics ([`topic`]), preparing partitions ([`prepare`]), writing with offset
//! checks and reconciliation ([`partition`], [`writer`]), and the per-partition status it reports
//! ([`status`]). Does not own: the mirror's persistent state or its API (`mirror`, `admin`), nor
//! client connections of the proxy. It is driven by the mirror (which topics to copy, when to stop)
//! and reports through [`TopicStatuses`]; it calls nothing above it.
//!
//! One replicator copies any number of topics from one source cluster (the mirror's), so that every
//! partition it copies shares one fetch session per source broker and one writer per destination
//! broker:
//!
//! ```text
//!   Replicator::setup_topic ── INITIALIZING, in bulk with the topics set up at the same time: describe
//!        │                    the source topics, create/check the destination topics    (topic.rs)
//!   Replicator::start_topic ── per partition: PartitionCopier task                      (partition.rs)
//!          ├─ PREPARING: destination end offset, producer state, tail check, in bulk   (prepare.rs)
//!          ├─ SourceFetcher: one fetch loop per source broker ──► bounded inbox + budget (fetch/)
//!          └─ MIRRORING: plan_batch ──► Produce (coalesced per destination broker, writer.rs) /
//!                        WriteTxnMarkers, every offset checked
//! ```

pub(crate) mod batcher;
pub mod config;
pub mod error;
pub(crate) mod fetch;
pub mod partition;
pub mod plan;
pub(crate) mod prepare;
pub mod producers;
pub mod stats;
pub mod status;
pub mod throttle;
pub mod topic;
pub mod writer;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

pub use config::ReplicatorConfig;
pub use error::ReplicationError;
pub use status::{CopyState, PartitionStatus, TopicStatuses};

use crate::client::{Client, IsolationLevel};
use batcher::Batcher;
use fetch::{Key, SourceFetcher};
use partition::PartitionCopier;
use prepare::Prepared;
use topic::SourceTopic;
pub use topic::TopicSetup;

/// What the partition copiers of one replicator share.
#[derive(Debug)]
pub(crate) struct Inner {
    /// Source client (metadata, offsets, setup).
    pub(crate) source: Arc<Client>,
    /// Destination client.
    pub(crate) destination: Arc<Client>,
    /// Settings.
    pub(crate) config: ReplicatorConfig,
    /// Fetching, per source broker.
    pub(crate) fetcher: SourceFetcher,
    /// Produce coalescing per destination broker.
    pub(crate) writers: writer::Writers,
    /// PREPARING in bulk.
    pub(crate) preparer: Batcher<Key, Result<Prepared, ReplicationError>>,
    /// INITIALIZING in bulk.
    setup: Batcher<TopicSetup, Result<SourceTopic, ReplicationError>>,
}

/// A topic being copied.
#[derive(Debug)]
struct CopiedTopic {
    described: SourceTopic,
    statuses: Arc<TopicStatuses>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// A running replicator for a set of topics of one source cluster.
#[derive(Debug)]
pub struct Replicator {
    inner: Arc<Inner>,
    topics: Mutex<BTreeMap<String, CopiedTopic>>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Replicator {
    /// A replicator from `source` into `destination` copying nothing yet.
    pub fn new(source: Arc<Client>, destination: Arc<Client>, config: ReplicatorConfig) -> Self {
        let cancel = CancellationToken::new();
        let tasks = TaskTracker::new();
        let budget = Arc::new(Semaphore::new(config.buffer_bytes.div_ceil(1024).max(1)));
        let fetcher = SourceFetcher::new(source.clone(), config.clone(), budget, tasks.clone(), cancel.clone());
        let writers = writer::Writers::new(destination.clone(), config.clone(), cancel.clone());
        let preparer = {
            let (source, destination) = (source.clone(), destination.clone());
            Batcher::spawn(&tasks, cancel.clone(), prepare::MAX_PREPARE_BATCH, move |keys| prepare::prepare_all(source.clone(), destination.clone(), keys))
        };
        let setup = {
            let (source, destination) = (source.clone(), destination.clone());
            Batcher::spawn(&tasks, cancel.clone(), topic::MAX_SETUP_BATCH, move |requests: Vec<TopicSetup>| {
                let (source, destination) = (source.clone(), destination.clone());
                async move { topic::setup_topics(&source, &destination, &requests).await }
            })
        };
        let inner = Arc::new(Inner { source, destination, config, fetcher, writers, preparer, setup });
        Self { inner, topics: Mutex::new(BTreeMap::new()), cancel, tasks }
    }

    /// Starts mirroring `topics` from `source` into `destination`. Topic setup failures show as
    /// FAILED partitions (for a topic that cannot even be described, one FAILED partition 0).
    pub async fn start(source: Arc<Client>, destination: Arc<Client>, topics: &[String], config: ReplicatorConfig) -> Self {
        let replicator = Self::new(source, destination, config);
        futures_util::future::join_all(topics.iter().map(|t| replicator.add_topic(t))).await;
        replicator
    }

    /// INITIALIZING of a topic: describes the source topic (checking its id against the one
    /// expected, if given) and creates the destination topic (with the replication factor asked
    /// for) or checks the one there. Topics set up at the same time share the requests.
    ///
    /// # Errors
    /// The source topic does not exist or was re-created, the destination refuses the topic, or a
    /// cluster cannot be reached ([`ReplicationError::is_retriable`]).
    pub async fn setup_topic(&self, setup: TopicSetup) -> Result<SourceTopic, ReplicationError> {
        self.inner.setup.call(setup).await.unwrap_or_else(|| Err(ReplicationError::Internal { detail: "the replicator stopped".to_owned() }))
    }

    /// Starts copying every partition of `described` (set up by [`Replicator::setup_topic`]);
    /// returns its statuses. A topic copied already keeps going as it is.
    pub fn start_topic(&self, described: SourceTopic) -> Arc<TopicStatuses> {
        let mut topics = lock(&self.topics);
        if let Some(t) = topics.get(&described.name) {
            return t.statuses.clone();
        }
        let copied = CopiedTopic {
            statuses: TopicStatuses::new(&described.name),
            cancel: self.cancel.child_token(),
            tasks: TaskTracker::new(),
            described: described.clone(),
        };
        self.spawn_partitions(&copied, 0, described.partitions);
        let statuses = copied.statuses.clone();
        topics.insert(described.name.clone(), copied);
        statuses
    }

    fn spawn_partitions(&self, topic: &CopiedTopic, from: i32, to: i32) {
        for p in from..to {
            let status = topic.statuses.partition(p, CopyState::Preparing);
            let copier = PartitionCopier::new(self.inner.clone(), topic.described.clone(), p, status);
            topic.tasks.spawn(partition::run_guarded(copier, topic.cancel.clone()));
        }
    }

    /// Sets up `topic` and starts its partitions; a setup failure shows as a FAILED partition 0.
    pub async fn add_topic(&self, topic: &str) {
        match self.setup_topic(TopicSetup::new(topic)).await {
            Ok(described) => {
                self.start_topic(described);
            }
            Err(e) => {
                tracing::error!(topic, reason = %e.reason(), "topic setup failed");
                let statuses = TopicStatuses::new(topic);
                let retry = if e.is_retriable() { 1 } else { -1 };
                statuses.partition(0, CopyState::Initializing).set_state(CopyState::Failed { reason: e.reason() }, retry);
                let described =
                    SourceTopic { name: topic.to_owned(), topic_id: Uuid::nil(), cluster_id: String::new(), partitions: 0, cleanup_policy: String::new() };
                lock(&self.topics).insert(topic.to_owned(), CopiedTopic { described, statuses, cancel: self.cancel.child_token(), tasks: TaskTracker::new() });
            }
        }
    }

    /// Stops copying `topic` and returns once its copiers have ended (a write in flight may still
    /// land at the destination; whoever copies it next reconciles).
    pub async fn stop_topic(&self, topic: &str) {
        let Some(copied) = lock(&self.topics).remove(topic) else { return };
        copied.cancel.cancel();
        copied.tasks.close();
        copied.tasks.wait().await;
    }

    /// The topics being copied.
    pub fn topics(&self) -> Vec<String> {
        lock(&self.topics).keys().cloned().collect()
    }

    /// The statuses of `topic`'s partitions, if it is copied.
    pub fn topic_statuses(&self, topic: &str) -> Option<Arc<TopicStatuses>> {
        lock(&self.topics).get(topic).map(|t| t.statuses.clone())
    }

    /// Follows a partition increase of `topic` at the source: creates the new partitions on the
    /// destination and starts copying them. Returns the partition count now copied.
    ///
    /// # Errors
    /// The source cannot be read, the topic was re-created (its id changed), or the destination
    /// refuses the new partitions.
    pub async fn sync_partitions(&self, topic: &str) -> Result<i32, ReplicationError> {
        let Some(recorded) = lock(&self.topics).get(topic).map(|t| t.described.clone()) else {
            return Err(ReplicationError::SourceTopicChanged { topic: topic.to_owned(), detail: "is not mirrored here".to_owned() });
        };
        let now = topic::describe_source(&self.inner.source, topic).await?;
        if now.topic_id != recorded.topic_id {
            return Err(ReplicationError::SourceTopicChanged {
                topic: topic.to_owned(),
                detail: format!("was re-created (topic id {} is now {})", recorded.topic_id, now.topic_id),
            });
        }
        if now.partitions <= recorded.partitions {
            return Ok(recorded.partitions);
        }
        let destination = &self.inner.destination;
        destination
            .create_partitions(topic, now.partitions, self.inner.config.write_timeout)
            .await
            .map_err(|e| ReplicationError::DestinationTopic { topic: topic.to_owned(), detail: format!("cannot add partitions: {e}") })?;
        if let Some((_, partition)) = destination.wait_for_leaders(&[(topic.to_owned(), now.partitions)]).await.into_iter().next() {
            return Err(ReplicationError::Unavailable {
                side: "destination",
                source: crate::client::ClientError::NoLeader { topic: topic.to_owned(), partition },
            });
        }
        let mut topics = lock(&self.topics);
        let Some(copied) = topics.get_mut(topic) else { return Ok(recorded.partitions) };
        let from = copied.described.partitions;
        copied.described.partitions = now.partitions;
        self.spawn_partitions(copied, from, now.partitions);
        tracing::info!(topic, from, to = now.partitions, "mirroring new partitions");
        Ok(now.partitions)
    }

    /// Every partition's status, sorted by topic and partition.
    pub fn status(&self) -> Vec<PartitionStatus> {
        let statuses: Vec<Arc<TopicStatuses>> = lock(&self.topics).values().map(|t| t.statuses.clone()).collect();
        statuses.iter().flat_map(|s| s.snapshot()).collect()
    }

    /// How long ago the source last answered for the partition copied here that has waited
    /// longest (`None` while nothing is copied): the lag figures are as old as this.
    pub fn source_staleness(&self) -> Option<std::time::Duration> {
        self.inner.fetcher.staleness()
    }

    /// True if lag is computed against the LSO (read_committed copying).
    pub fn reads_committed(&self) -> bool {
        self.inner.config.isolation == IsolationLevel::ReadCommitted
    }

    /// Partitions registered with the fetch side, and how many of them a fetch loop owns.
    pub fn fetching(&self) -> (usize, usize) {
        self.inner.fetcher.counts()
    }

    /// Stops copying and returns when every partition task has ended. A write in flight may still
    /// land at the destination; the next start reconciles (PREPARING reads the destination back).
    pub async fn shutdown(self) {
        let topics: Vec<String> = self.topics();
        futures_util::future::join_all(topics.iter().map(|t| self.stop_topic(t))).await;
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
