//! The [`MirrorManager`]: owns the mirrors of one destination cluster, validates and applies the
//! admin operations, keeps `__mirror_state`, and runs the work this instance owns.
//!
//! Every operation follows the same order (spec §6, "every transition is recorded before it takes
//! effect"):
//!
//! ```text
//!   admin request ─► ops lock ─► catch up: the model has read the state topic to its end
//!                              ─► validate against the model ─► write records to __mirror_state
//!                              ─► wait until the tail applied them to the model (the write
//!                                 policy of every instance sees them once its tail has) ─► unlock
//!                    (RemoveTopicsFromMirror then waits, unlocked, up to stop_wait for STOPPED)
//!
//!   tail task ──── every record of __mirror_state, any instance's ──► Model::apply ──► `applied`
//!   membership ─── the instance group (ownership.rs) ──► Ownership ──┐
//!   supervisor ─── on every `applied` or ownership change: one TopicRunner per owned topic not
//!                  STOPPED (runner.rs), one sync task per owned mirror (sync.rs); revokes all
//!                  before the instance rejoins the group
//! ```
//!
//! Operators act on any instance; the instance owning a topic sees the change in the log and its
//! runner follows the topic's goal. On start the whole topic is read back into the model, and every
//! topic whose goal is not STOPPED gets a runner on the instance that owns it: MIRROR resumes
//! copying (the replicator reconciles with what the destination holds), PAUSE waits, STOP finishes
//! stopping. So an instance killed at any moment is replaced by the others (or by itself on
//! restart), resuming where the log says it was.
//!
//! Concurrent operations on *different* instances are ordered by the log, but each is validated
//! against its own instance's model: two instances adding the same topic to two mirrors in the
//! same few milliseconds would both succeed, the later record winning. Operators acting on one
//! mirror through one bootstrap address never see this.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use uuid::Uuid;

use super::error::MirrorError;
use super::model::{Model, TopicEntry};
use super::ownership::{MembershipConfig, Ownership, run_membership};
use super::recorder::Recorder;
use super::records::{MirrorDefinition, PartitionRecord, PatternReplication, StateRecord, TopicFilter, TopicGoal, TopicRecord};
use super::settings::{MirrorSettings, SecretKey, SettingError, setting_kind, validate_mirror_name};
use super::store::{DEFAULT_STATE_TOPIC, StateStore, StoreError};
use super::supervisor::Supervisor;
use super::{MirrorLookup, PartitionState, now_ms};
use crate::client::{BackoffConfig, Client, IsolationLevel, OffsetSpec};
use crate::replicator::stats::CopyStats;
use crate::replicator::throttle::{Bucket, Throttle, ThrottledReplicas};
use crate::replicator::{ReplicationError, Replicator, ReplicatorConfig};
use crate::sync::{SyncKind, SyncStatus};

/// Default time to reach a source when validating settings or listing its topics.
pub const DEFAULT_SOURCE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time describe waits for offsets from either cluster before showing `-`.
pub const DEFAULT_DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time RemoveTopicsFromMirror waits for its topics to be STOPPED before answering.
pub const DEFAULT_STOP_WAIT: Duration = Duration::from_secs(30);
/// Default memory for fetched, unwritten data per mirror copied here (bytes).
pub const DEFAULT_MIRROR_BUFFER_BYTES: usize = crate::replicator::config::DEFAULT_BUFFER_BYTES;

/// Settings of the manager.
#[derive(Debug, Clone)]
pub struct MirrorManagerConfig {
    /// The state topic on the destination (default `__mirror_state`).
    pub state_topic: String,
    /// Seals mirror secrets in the state topic; without it, secret settings are refused. Every
    /// instance sharing the state topic needs the same key.
    pub secret_key: Option<SecretKey>,
    /// Time to reach a source for validation and topic listing.
    pub source_connect_timeout: Duration,
    /// Time describe waits for offsets.
    pub describe_timeout: Duration,
    /// Time RemoveTopicsFromMirror waits for STOPPED.
    pub stop_wait: Duration,
    /// Backoff of FAILED topics whose cause can pass, and of stop retries.
    pub retry_backoff: BackoffConfig,
    /// Backoff of `__mirror_state` writes (their deadline bounds how long an operation waits).
    pub store_backoff: BackoffConfig,
    /// Memory for fetched, unwritten data per mirror copied here, bytes.
    pub buffer_bytes: usize,
    /// Default fetch wait at the source (`fetch.wait.max.ms` of a mirror overrides it).
    pub fetch_max_wait: Duration,
    /// Fetch sessions (connections) per source broker per mirror (`mirror.num.replica.fetchers`).
    pub fetchers_per_broker: usize,
    /// Ceiling on the record data written for all mirrors copied here, bytes/s (`None`: none).
    pub replication_throttled_rate: Option<u64>,
    /// What this instance calls itself in the client ids of its source fetch connections
    /// (`<client id>-<instance>-fetcher-<n>`; characters other than letters, digits, `.`, `_` and
    /// `-` become `_`). Empty: the ids name no instance.
    pub instance_id: String,
    /// The instance group sharing the work; `group_id` empty: `kafka-mirror-proxy.<state_topic>`.
    pub membership: MembershipConfig,
}

impl Default for MirrorManagerConfig {
    fn default() -> Self {
        Self {
            state_topic: DEFAULT_STATE_TOPIC.to_owned(),
            secret_key: None,
            source_connect_timeout: DEFAULT_SOURCE_CONNECT_TIMEOUT,
            describe_timeout: DEFAULT_DESCRIBE_TIMEOUT,
            stop_wait: DEFAULT_STOP_WAIT,
            retry_backoff: BackoffConfig {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(30),
                deadline: Duration::from_secs(3600 * 24 * 365),
                ..BackoffConfig::default()
            },
            store_backoff: BackoffConfig { deadline: Duration::from_secs(30), ..BackoffConfig::default() },
            buffer_bytes: DEFAULT_MIRROR_BUFFER_BYTES,
            fetch_max_wait: crate::replicator::config::DEFAULT_FETCH_MAX_WAIT,
            fetchers_per_broker: crate::replicator::config::DEFAULT_FETCHERS_PER_BROKER,
            replication_throttled_rate: None,
            instance_id: String::new(),
            membership: MembershipConfig { group_id: String::new(), ..MembershipConfig::for_state_topic(DEFAULT_STATE_TOPIC) },
        }
    }
}

/// A mirror as ListMirrors shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorListing {
    /// Name.
    pub name: String,
    /// The source's `bootstrap.servers`.
    pub source_bootstrap: String,
    /// The source cluster id.
    pub source_cluster_id: String,
    /// Topics of the mirror (any state), by name.
    pub topics: Vec<String>,
}

/// One partition as DescribeMirrors shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDescription {
    /// Index.
    pub partition: i32,
    /// State.
    pub state: PartitionState,
    /// Retries in FAILED (-1: not retried).
    pub retry_attempt: i16,
    /// The source end copying is bounded by (LSO under read_committed, else high watermark); -1
    /// if unknown.
    pub source_offset: i64,
    /// The destination's end offset; -1 if unknown.
    pub destination_offset: i64,
}

impl PartitionDescription {
    /// `source - destination` (at least 0), -1 if either is unknown.
    pub fn lag(&self) -> i64 {
        if self.source_offset < 0 || self.destination_offset < 0 { -1 } else { (self.source_offset - self.destination_offset).max(0) }
    }
}

/// One topic as DescribeMirrors shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Name.
    pub name: String,
    /// Source topic id.
    pub source_topic_id: Uuid,
    /// Partitions.
    pub partitions: Vec<PartitionDescription>,
}

/// One mirror as DescribeMirrors shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorDescription {
    /// Name.
    pub name: String,
    /// The source's `bootstrap.servers`.
    pub source_bootstrap: String,
    /// The source cluster id.
    pub source_cluster_id: String,
    /// Topics.
    pub topics: Vec<TopicDescription>,
}

/// One change of AlterMirrorConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigChange {
    /// Set a setting.
    Set(String, String),
    /// Remove a setting.
    Delete(String),
}

/// A mirror setting as DescribeMirrorConfigs shows it (secret values are `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedSetting {
    /// Name.
    pub name: String,
    /// Value, `None` for secrets.
    pub value: Option<String>,
    /// Secret.
    pub is_sensitive: bool,
}

/// A partition copied here, for metrics: its mirror, the replicator's status, and whether lag
/// counts to the source LSO (read_committed).
/// The replicator of one mirror on this instance, shared by the runners of its topics; alive
/// while one of them holds it.
#[derive(Debug, Default)]
struct ReplicatorSlot {
    /// The settings it was made with (a change makes a new one).
    settings: Option<MirrorSettings>,
    replicator: std::sync::Weak<Replicator>,
    /// The last failure to make one, and when: callers within `CONNECT_FAILURE_HOLD` get it at once
    /// instead of each trying to reach an unreachable source again.
    failed: Option<(tokio::time::Instant, String)>,
    /// The throttle of the mirror's writes here, kept across its replicators (settings changes)
    /// so that a rate holds, and the time waited adds up, from one to the next.
    throttle: Option<Arc<Throttle>>,
    /// The mirror's copy counters here, kept across its replicators like the throttle.
    stats: Arc<CopyStats>,
}

/// How long a failure to reach a mirror's source is answered without trying again.
const CONNECT_FAILURE_HOLD: Duration = Duration::from_secs(1);

/// The sync status of one mirror, per kind (shared with its running sync task).
pub type SyncStatuses = Arc<Mutex<BTreeMap<SyncKind, SyncStatus>>>;

/// What is shared between the manager, its tail, its supervisor and the runners.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) destination: Arc<Client>,
    pub(crate) config: MirrorManagerConfig,
    store: StateStore,
    model: Arc<Mutex<Model>>,
    /// The offset after the last state record applied to the model (moved by the tail).
    pub(crate) applied: watch::Sender<i64>,
    /// Serialises this instance's operations and runner observations (validate, write, apply).
    pub(crate) ops: tokio::sync::Mutex<()>,
    /// Source clients for admin operations (listing topics, describe offsets), by mirror.
    sources: Mutex<HashMap<String, Arc<Client>>>,
    /// What this instance owns (`None` while it owns nothing: joining, rebalancing).
    pub(crate) ownership: watch::Sender<Option<Ownership>>,
    /// Sync status of the mirrors whose sync this instance runs.
    pub(crate) sync_statuses: Mutex<BTreeMap<String, SyncStatuses>>,
    /// The replicator of each mirror copied here.
    replicators: Mutex<HashMap<String, ReplicatorSlot>>,
    /// Serialises making replicators (one source connection per mirror, however many runners ask).
    replicator_lock: tokio::sync::Mutex<()>,
    /// `mirrors.replication_throttled_rate`: the ceiling every mirror's writes here share.
    ceiling: Option<Arc<Bucket>>,
    /// Observed partition states on their way to the state topic.
    pub(crate) recorder: Recorder,
    pub(crate) tasks: TaskTracker,
    pub(crate) cancel: CancellationToken,
}

impl Shared {
    pub(crate) fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `records` in order and returns once the tail has applied them to the model.
    pub(crate) async fn commit(&self, records: &[StateRecord]) -> Result<(), StoreError> {
        match self.store.write(records).await? {
            Some(offset) => self.wait_applied(offset + 1).await,
            None => Ok(()),
        }
    }

    /// Waits until the model has applied the state topic up to `offset` (exclusive).
    async fn wait_applied(&self, offset: i64) -> Result<(), StoreError> {
        let waited = self.config.store_backoff.deadline;
        let mut applied = self.applied.subscribe();
        match tokio::time::timeout(waited, applied.wait_for(|&a| a >= offset)).await {
            Ok(Ok(_)) => Ok(()),
            // The tail ended (shutdown) or did not get there.
            _ => Err(StoreError::Lagging { topic: self.store.topic().to_owned(), offset: offset - 1, waited }),
        }
    }

    /// Brings the model up to the end of the state topic, so an operation validates against every
    /// transition written before it (by any instance).
    pub(crate) async fn catch_up(&self) -> Result<(), StoreError> {
        let end = self.store.end_offset().await?;
        self.wait_applied(end).await
    }

    /// The replicator settings of `mirror`.
    pub(crate) fn replicator_config(&self, mirror: &str, settings: &MirrorSettings) -> ReplicatorConfig {
        let mut config = ReplicatorConfig::new(mirror);
        config.isolation = settings.isolation();
        config.buffer_bytes = self.config.buffer_bytes;
        config.fetch_max_wait = settings.fetch_max_wait().unwrap_or(self.config.fetch_max_wait);
        if let Some(bytes) = settings.partition_fetch_bytes() {
            config.partition_fetch_bytes = bytes;
        }
        if let Some(bytes) = settings.fetch_response_max_bytes() {
            config.fetch_max_bytes = bytes;
        }
        if let Some(bytes) = settings.fetch_min_bytes() {
            config.fetch_min_bytes = bytes;
        }
        config.fetchers_per_broker = self.config.fetchers_per_broker.max(1);
        config.fetch_client_id = fetch_client_id(&settings.client_config(mirror).connection.client_id, &self.config.instance_id);
        config
    }

    /// The replicator of `mirror` with `settings` (those that matter for copying): the one running,
    /// or a new one (connecting to the source).
    ///
    /// # Errors
    /// The source cannot be reached ([`ReplicationError::Unavailable`], retried by the caller).
    pub(crate) async fn replicator_for(&self, mirror: &str, settings: &MirrorSettings) -> Result<Arc<Replicator>, ReplicationError> {
        let _making = self.replicator_lock.lock().await;
        {
            let slots = self.replicators.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(slot) = slots.get(mirror).filter(|s| s.settings.as_ref() == Some(settings)) {
                if let Some(r) = slot.replicator.upgrade() {
                    return Ok(r);
                }
                if let Some((at, reason)) = &slot.failed {
                    if at.elapsed() < CONNECT_FAILURE_HOLD {
                        return Err(ReplicationError::Unavailable {
                            side: "source",
                            source: crate::client::ClientError::Config { key: "bootstrap.servers".to_owned(), message: reason.clone() },
                        });
                    }
                }
            }
        }
        let connected = Client::connect(settings.client_config(mirror)).await;
        let mut slots = self.replicators.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = slots.entry(mirror.to_owned()).or_default();
        slot.settings = Some(settings.clone());
        match connected {
            Ok(source) => {
                let mut config = self.replicator_config(mirror, settings);
                config.throttle = self.throttle_in(mirror, slot);
                config.stats = slot.stats.clone();
                let replicator = Arc::new(Replicator::new(Arc::new(source), self.destination.clone(), config));
                slot.replicator = Arc::downgrade(&replicator);
                slot.failed = None;
                Ok(replicator)
            }
            Err(source) => {
                slot.failed = Some((tokio::time::Instant::now(), chain(&source)));
                Err(ReplicationError::Unavailable { side: "source", source })
            }
        }
    }

    /// The throttle of `mirror` in its slot, made (with the mirror's settings as the model has them)
    /// if it has none yet.
    fn throttle_in(&self, mirror: &str, slot: &mut ReplicatorSlot) -> Arc<Throttle> {
        slot.throttle
            .get_or_insert_with(|| {
                let throttle = Arc::new(Throttle::new(self.ceiling.clone()));
                if let Some(Ok(settings)) = self.model().mirrors.get(mirror).map(|m| &m.settings) {
                    let (rate, replicas) = settings.throttle();
                    throttle.set(rate, replicas);
                }
                throttle
            })
            .clone()
    }

    /// Applies every mirror's throttle settings, as the model has them now, to its writes here
    /// (called on each change of the model: an alter takes effect without a restart).
    pub(crate) fn apply_throttles(&self) {
        let wanted: Vec<(String, (Option<u64>, ThrottledReplicas))> =
            self.model().mirrors.iter().filter_map(|(name, m)| m.settings.as_ref().ok().map(|s| (name.clone(), s.throttle()))).collect();
        let slots = self.replicators.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (mirror, (rate, replicas)) in wanted {
            if let Some(throttle) = slots.get(&mirror).and_then(|s| s.throttle.as_ref()) {
                throttle.set(rate, replicas);
            }
        }
    }

    /// The copy counters and throttle of every mirror that copied here since this instance started.
    pub(crate) fn copy_counters(&self) -> Vec<(String, Arc<CopyStats>, Option<Arc<Throttle>>)> {
        let slots = self.replicators.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out: Vec<_> = slots.iter().map(|(m, s)| (m.clone(), s.stats.clone(), s.throttle.clone())).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Records of `__mirror_state` written but not applied here yet (as of the tail's last fetch).
    pub(crate) fn state_apply_lag(&self) -> i64 {
        (self.store.high_watermark() - *self.applied.borrow()).max(0)
    }

    /// The replicators running here, by mirror.
    pub(crate) fn running_replicators(&self) -> Vec<(String, Arc<Replicator>)> {
        let slots = self.replicators.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        slots.iter().filter_map(|(m, s)| s.replicator.upgrade().map(|r| (m.clone(), r))).collect()
    }

    /// Records `topic` STOPPED (partitions, then the topic: the write policy lets writes through
    /// from the topic record on), if its goal still is STOP.
    pub(crate) async fn finish_stop(&self, mirror: &str, topic: &str) -> Result<(), StoreError> {
        let Some(entry) = self.model().topics.get(topic).cloned() else { return Ok(()) };
        if entry.record.goal != TopicGoal::Stop {
            return Ok(());
        }
        let mut records = partition_records(mirror, topic, entry.record.partitions, &PartitionState::Stopped);
        records.push(topic_record(topic, &entry.record, TopicGoal::Stopped));
        self.commit(&records).await?;
        Ok(())
    }

    pub(crate) fn settings_of(&self, mirror: &str) -> Result<MirrorSettings, MirrorError> {
        let model = self.model();
        let entry = model.mirrors.get(mirror).ok_or_else(|| MirrorError::UnknownMirror(mirror.to_owned()))?;
        entry.settings.clone().map_err(|message| MirrorError::InvalidSettings(vec![SettingError { key: "(stored settings)".to_owned(), message }]))
    }

    /// Adds the source topics matching `patterns` and not `exclude` to `mirror` (the topic record
    /// first: from it on a topic is read-only). With `keep_patterns`, the patterns are added to the
    /// mirror's filter, which the sync uses to find new source topics later, with
    /// `replication_factor` (-1: the destination's default) for the topics they add; without it
    /// (the sync adding a topic), each topic takes the replication factor of the filter's pattern
    /// that matches it.
    pub(crate) async fn add_topics(
        &self,
        mirror: &str,
        patterns: &[String],
        exclude: &[String],
        replication_factor: i16,
        keep_patterns: bool,
    ) -> Result<TopicOutcomes, MirrorError> {
        let include = Pattern::compile_all(patterns)?;
        let excluded = Pattern::compile_all(exclude)?;
        if include.is_empty() {
            return Err(MirrorError::NoMatchingTopic("no pattern".to_owned()));
        }
        self.check_replication_factor(replication_factor).await?;
        let _op = self.ops.lock().await;
        self.catch_up().await?;
        let settings = self.settings_of(mirror)?;
        let filter = self.model().mirrors.get(mirror).map(|m| m.filter.clone()).unwrap_or_default();
        let replication_of = |topic: &str, internal: bool| {
            if keep_patterns { replication_factor } else { filter.replication_factor_for(|p| Pattern::compile(p).is_ok_and(|p| p.matches(topic, internal))) }
        };
        let source = self.source_client(mirror, &settings).await?;
        let metadata = match source.refresh_metadata(&[]).await {
            Ok(m) => m,
            Err(e) => {
                self.forget_source(mirror);
                return Err(MirrorError::SourceUnreachable { bootstrap: settings.bootstrap_servers().to_owned(), reason: chain(&e) });
            }
        };
        let matched: Vec<_> = metadata
            .topics
            .values()
            .filter(|t| {
                let internal = t.is_internal || t.name.starts_with("__");
                include.iter().any(|p| p.matches(&t.name, internal)) && !excluded.iter().any(|p| p.matches(&t.name, internal))
            })
            .collect();
        if matched.is_empty() {
            return Err(MirrorError::NoMatchingTopic(describe_patterns(patterns)));
        }
        // Mirror topics of the source itself are refused (mirrors must not loop).
        let looped = super::loops::source_mirror_topics(&source, &self.config.state_topic).await.map_err(|e| MirrorError::LoopCheck(Box::new(e)))?;
        let mut outcomes = Vec::new();
        // One commit for every topic added (each topic record before its partitions: from it on the
        // topic is read-only), not one round trip per topic.
        let mut records = Vec::new();
        let mut added = Vec::new();
        for info in matched {
            if let Some(source_mirror) = looped.get(&info.name) {
                outcomes.push((info.name.clone(), Err(MirrorError::MirrorLoop { topic: info.name.clone(), source_mirror: source_mirror.clone() })));
                continue;
            }
            let existing = self.model().topics.get(&info.name).cloned();
            if let Some(entry) = existing.filter(|e| e.record.goal != TopicGoal::Stopped) {
                outcomes.push((
                    info.name.clone(),
                    Err(MirrorError::TopicInMirror {
                        topic: info.name.clone(),
                        mirror: entry.record.mirror.clone(),
                        state: entry.summary_state().name().to_owned(),
                    }),
                ));
                continue;
            }
            let partitions = info.partitions.len() as i32;
            let record = TopicRecord {
                mirror: mirror.to_owned(),
                source_topic_id: info.topic_id,
                partitions,
                goal: TopicGoal::Mirror,
                updated_ms: now_ms(),
                replication_factor: replication_of(&info.name, info.is_internal || info.name.starts_with("__")),
            };
            records.push(StateRecord::Topic { topic: info.name.clone(), value: Some(record) });
            records.extend(partition_records(mirror, &info.name, partitions, &PartitionState::Initializing));
            added.push((info.name.clone(), partitions));
        }
        self.commit(&records).await?;
        for (topic, partitions) in added {
            info!(mirror, topic = %topic, partitions, "topic added to the mirror");
            outcomes.push((topic, Ok(())));
        }
        // The patterns last: the mirror's sync adds topics matching them that the log does not know,
        // and must not race this call for the topics it adds.
        if keep_patterns {
            let filter = self.model().mirrors.get(mirror).map(|m| m.filter.clone()).unwrap_or_default();
            let mut updated = filter.clone();
            for p in include.iter().map(|p| &p.text) {
                if !updated.include.contains(p) {
                    updated.include.push(p.clone());
                }
                // The latest --add of a pattern decides its replication factor.
                updated.replication_factors.retain(|r| &r.pattern != p);
                if replication_factor != -1 {
                    updated.replication_factors.push(PatternReplication { pattern: p.clone(), replication_factor });
                }
            }
            for p in excluded.iter().map(|p| &p.text) {
                if !updated.exclude.contains(p) {
                    updated.exclude.push(p.clone());
                }
            }
            if updated != filter {
                self.commit(&[StateRecord::Filter { mirror: mirror.to_owned(), value: Some(updated) }]).await?;
            }
        }
        Ok(outcomes)
    }

    /// A replication factor the destination can have: -1 (its default) or 1 up to its broker
    /// count, as Kafka's CreateTopics checks it (`INVALID_REPLICATION_FACTOR`), but before the
    /// topics are added rather than when the replicator creates them.
    async fn check_replication_factor(&self, replication_factor: i16) -> Result<(), MirrorError> {
        if replication_factor == -1 {
            return Ok(());
        }
        if replication_factor < 1 {
            return Err(MirrorError::InvalidReplicationFactor(format!(
                "replication factor {replication_factor} is not valid: it must be at least 1 (or -1 for the destination cluster's default)"
            )));
        }
        let brokers = match self.destination.describe_cluster().await {
            Ok(cluster) => cluster.brokers.len(),
            Err(_) => self.destination.cached_metadata().brokers.len(),
        };
        if usize::from(replication_factor.unsigned_abs()) > brokers {
            return Err(MirrorError::InvalidReplicationFactor(format!(
                "replication factor {replication_factor} is larger than the destination cluster's {brokers} broker(s)"
            )));
        }
        Ok(())
    }

    pub(crate) async fn source_client(&self, mirror: &str, settings: &MirrorSettings) -> Result<Arc<Client>, MirrorError> {
        let cached = self.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(mirror).cloned();
        if let Some(client) = cached {
            return Ok(client);
        }
        let client = connect_source(mirror, settings, self.config.source_connect_timeout).await?;
        self.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(mirror.to_owned(), client.clone());
        Ok(client)
    }

    fn forget_source(&self, mirror: &str) {
        self.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(mirror);
    }
}

pub(crate) async fn connect_source(mirror: &str, settings: &MirrorSettings, timeout: Duration) -> Result<Arc<Client>, MirrorError> {
    let mut config = settings.client_config(mirror);
    config.backoff.deadline = timeout;
    config.connection.connect_timeout = config.connection.connect_timeout.min(timeout);
    let unreachable = |reason: String| MirrorError::SourceUnreachable { bootstrap: settings.bootstrap_servers().to_owned(), reason };
    match tokio::time::timeout(timeout + Duration::from_secs(1), Client::connect(config)).await {
        Ok(Ok(client)) => Ok(Arc::new(client)),
        Ok(Err(e)) => Err(unreachable(chain(&e))),
        Err(_) => Err(unreachable(format!("no answer within {timeout:?}"))),
    }
}

/// Follows `__mirror_state` from `from` for as long as the manager runs, applying every record to
/// the model and then announcing how far it got.
async fn tail(shared: Arc<Shared>, reader: Arc<Client>, from: i64) {
    let key = shared.config.secret_key.clone();
    let apply = |records: Vec<StateRecord>, next: i64| {
        {
            let mut model = shared.model();
            for record in &records {
                model.apply(record, key.as_ref());
            }
        }
        shared.applied.send_replace(next);
    };
    shared.store.tail(&reader, from, apply, shared.cancel.child_token()).await;
}

/// The client id base of a mirror's fetch connections: `<client id>-<instance>-fetcher`.
fn fetch_client_id(client_id: &str, instance: &str) -> String {
    let instance: String = instance.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    if instance.is_empty() { format!("{client_id}-fetcher") } else { format!("{client_id}-{instance}-fetcher") }
}

fn chain(e: &dyn std::error::Error) -> String {
    crate::report::error_chain(e)
}

fn topic_record(topic: &str, current: &TopicRecord, goal: TopicGoal) -> StateRecord {
    StateRecord::Topic { topic: topic.to_owned(), value: Some(TopicRecord { goal, updated_ms: now_ms(), ..current.clone() }) }
}

pub(crate) fn partition_records(mirror: &str, topic: &str, partitions: i32, state: &PartitionState) -> Vec<StateRecord> {
    (0..partitions)
        .map(|partition| StateRecord::Partition {
            topic: topic.to_owned(),
            partition,
            value: Some(PartitionRecord { mirror: mirror.to_owned(), state: state.clone(), retry_attempt: 0, updated_ms: now_ms() }),
        })
        .collect()
}

/// A topic pattern: the text as given and its full-match regex.
struct Pattern {
    text: String,
    regex: Regex,
}

impl Pattern {
    fn compile(text: &str) -> Result<Self, MirrorError> {
        let regex = Regex::new(&format!("^(?:{text})$"))
            .map_err(|e| MirrorError::InvalidPattern { pattern: text.to_owned(), reason: e.to_string().lines().last().unwrap_or("").trim().to_owned() })?;
        Ok(Self { text: text.to_owned(), regex })
    }

    fn compile_all(texts: &[String]) -> Result<Vec<Self>, MirrorError> {
        texts.iter().map(|t| Self::compile(t.trim())).collect()
    }

    /// Internal topics (`__…`) match only when named exactly, so `.*` never mirrors them.
    fn matches(&self, topic: &str, internal: bool) -> bool {
        if internal { self.text == topic } else { self.regex.is_match(topic) }
    }
}

fn describe_patterns(patterns: &[String]) -> String {
    patterns.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
}

/// The outcome of an operation on topics: those it applied to and those it refused, by name.
pub type TopicOutcomes = Vec<(String, Result<(), MirrorError>)>;

/// Owns the mirrors of one destination cluster.
#[derive(Debug)]
pub struct MirrorManager {
    shared: Arc<Shared>,
}

impl MirrorManager {
    /// Opens (or creates) the state topic, loads it, starts following it, joins the instance
    /// group, and runs the work this instance is given: every owned topic that is not STOPPED
    /// resumes.
    ///
    /// # Errors
    /// [`MirrorError::Store`] if the state topic cannot be created or read.
    pub async fn start(destination: Arc<Client>, mut config: MirrorManagerConfig) -> Result<Self, MirrorError> {
        let (store, records, next) = StateStore::open(destination.clone(), &config.state_topic, config.store_backoff.clone()).await?;
        let mut model = Model::default();
        for record in &records {
            model.apply(record, config.secret_key.as_ref());
        }
        if config.membership.group_id.is_empty() {
            config.membership.group_id = MembershipConfig::for_state_topic(&config.state_topic).group_id;
        }
        let (applied, _) = watch::channel(next);
        let (ownership, _) = watch::channel(None);
        let ceiling = config.replication_throttled_rate.filter(|r| *r > 0).map(|rate| Arc::new(Bucket::new(Some(rate))));
        let shared = Arc::new(Shared {
            destination: destination.clone(),
            config,
            store,
            model: Arc::new(Mutex::new(model)),
            applied,
            ops: tokio::sync::Mutex::new(()),
            sources: Mutex::new(HashMap::new()),
            ownership,
            sync_statuses: Mutex::new(BTreeMap::new()),
            replicators: Mutex::new(HashMap::new()),
            replicator_lock: tokio::sync::Mutex::new(()),
            ceiling,
            recorder: Recorder::default(),
            tasks: TaskTracker::new(),
            cancel: CancellationToken::new(),
        });
        // The tail and the group membership each get a client (connections) of their own: a broker
        // answers one connection's requests in order, and both hold requests at the broker (a
        // long-polling Fetch, a JoinGroup waiting for the rebalance) that would stall the
        // replicators' writes sharing the connection.
        let connect_own = |mut config: crate::client::ClientConfig, purpose: &'static str| {
            let topic = shared.config.state_topic.clone();
            config.connection.client_id = format!("{}-{purpose}", config.connection.client_id);
            async move {
                Client::connect(config)
                    .await
                    .map(Arc::new)
                    .map_err(|e| MirrorError::Store(Box::new(StoreError::Destination { topic, action: purpose, source: Box::new(e) })))
            }
        };
        let reader = connect_own(destination.config().clone(), "state-reader").await?;
        shared.tasks.spawn(tail(shared.clone(), reader, next));
        shared.tasks.spawn(super::recorder::run(shared.clone()));
        let (supervisor, revoke) = Supervisor::new(shared.clone());
        shared.tasks.spawn(supervisor.run(shared.cancel.child_token()));
        // JoinGroup waits at the coordinator for the whole rebalance, so the group's client needs a
        // request timeout beyond the rebalance timeout.
        let mut group_client = destination.config().clone();
        let membership = shared.config.membership.clone();
        group_client.connection.request_timeout = membership.rebalance_timeout + Duration::from_secs(10);
        group_client.backoff.deadline = group_client.backoff.deadline.max(membership.session_timeout);
        let group_client = connect_own(group_client, "group").await?;
        shared.tasks.spawn(run_membership(group_client, membership, shared.ownership.clone(), revoke, shared.cancel.child_token()));
        Ok(Self { shared })
    }

    /// What this instance owns now (`None` while it is not a settled member of the instance group).
    pub fn ownership(&self) -> Option<Ownership> {
        self.shared.ownership.borrow().clone()
    }

    /// The mirror metrics (spec §10), for the proxy's `/metrics`: encoded at each scrape from the
    /// state log, this instance's copying and its sync jobs (`metrics.rs`).
    pub fn metrics(&self) -> super::metrics::MirrorMetrics {
        super::metrics::MirrorMetrics::new(self.shared.clone())
    }

    /// The sync status of every mirror whose sync runs on this instance, by mirror and kind.
    pub fn sync_statuses(&self) -> BTreeMap<String, BTreeMap<SyncKind, SyncStatus>> {
        let all = self.shared.sync_statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        all.iter().map(|(m, s)| (m.clone(), s.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone())).collect()
    }

    /// The write policy's view of mirror topics, kept current by this manager.
    pub fn lookup(&self) -> Arc<dyn MirrorLookup> {
        self.shared.model.clone()
    }

    /// Creates mirror `name` with `properties` (Java client names): checks the name, the settings
    /// and that the source answers, then records the mirror.
    ///
    /// # Errors
    /// Invalid name, existing mirror, bad settings (each named), unreachable source, store failure.
    pub async fn create_mirror(&self, name: &str, properties: BTreeMap<String, String>, validate_only: bool) -> Result<(), MirrorError> {
        validate_mirror_name(name).map_err(MirrorError::InvalidName)?;
        let _op = self.shared.ops.lock().await;
        self.shared.catch_up().await?;
        if self.shared.model().mirrors.contains_key(name) {
            return Err(MirrorError::MirrorExists(name.to_owned()));
        }
        let settings = MirrorSettings::from_properties(properties).map_err(MirrorError::InvalidSettings)?;
        let configs = settings.seal(name, self.shared.config.secret_key.as_ref()).map_err(|e| MirrorError::InvalidSettings(vec![e]))?;
        let source = connect_source(name, &settings, self.shared.config.source_connect_timeout).await?;
        if validate_only {
            return Ok(());
        }
        let cluster_id = source.cached_metadata().cluster_id.unwrap_or_default();
        let record =
            StateRecord::Mirror { name: name.to_owned(), value: Some(MirrorDefinition { configs, source_cluster_id: cluster_id, created_ms: now_ms() }) };
        self.shared.commit(&[record]).await?;
        self.shared.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name.to_owned(), source);
        info!(mirror = name, bootstrap = settings.bootstrap_servers(), "mirror created");
        Ok(())
    }

    /// Deletes mirror `name` and its (all STOPPED) topics from the state.
    ///
    /// # Errors
    /// Unknown mirror, topics not STOPPED, store failure.
    pub async fn delete_mirror(&self, name: &str) -> Result<(), MirrorError> {
        let _op = self.shared.ops.lock().await;
        self.shared.catch_up().await?;
        let records = {
            let model = self.shared.model();
            if !model.mirrors.contains_key(name) {
                return Err(MirrorError::UnknownMirror(name.to_owned()));
            }
            let busy: Vec<&String> = model.topics_of(name).filter(|(_, t)| t.record.goal != TopicGoal::Stopped).map(|(n, _)| n).collect();
            if !busy.is_empty() {
                return Err(MirrorError::NotEmpty {
                    mirror: name.to_owned(),
                    count: busy.len(),
                    topics: busy.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                });
            }
            let mut records = Vec::new();
            for (topic, entry) in model.topics_of(name) {
                for &partition in entry.partitions.keys() {
                    records.push(StateRecord::Partition { topic: topic.clone(), partition, value: None });
                }
                records.push(StateRecord::Topic { topic: topic.clone(), value: None });
            }
            if !model.mirrors.get(name).is_some_and(|m| m.filter == TopicFilter::default()) {
                records.push(StateRecord::Filter { mirror: name.to_owned(), value: None });
            }
            // The ledger of ACL bindings the mirror created is forgotten; the bindings stay on the
            // destination (clients that failed over need them).
            records.extend(model.acl_tombstones(name));
            records.push(StateRecord::Mirror { name: name.to_owned(), value: None });
            records
        };
        self.shared.commit(&records).await?;
        self.shared.forget_source(name);
        info!(mirror = name, "mirror deleted");
        Ok(())
    }

    /// Every mirror, by name.
    pub fn list_mirrors(&self) -> Vec<MirrorListing> {
        let model = self.shared.model();
        model
            .mirrors
            .iter()
            .map(|(name, m)| MirrorListing {
                name: name.clone(),
                source_bootstrap: m.settings.as_ref().map(|s| s.bootstrap_servers().to_owned()).unwrap_or_default(),
                source_cluster_id: m.definition.source_cluster_id.clone(),
                topics: model.topics_of(name).map(|(t, _)| t.clone()).collect(),
            })
            .collect()
    }

    /// Starts mirroring the source topics matching `patterns` and not `exclude`, and keeps the
    /// patterns, so that source topics created later and matching them are added too (spec §7).
    ///
    /// # Errors
    /// Top level: unknown mirror, invalid pattern, unreachable source, no matching topic, the
    /// loop check failing, store failure. Per topic (in the outcomes): the topic is already in a
    /// mirror, or is a mirror topic at the source ([`MirrorError::MirrorLoop`]).
    /// `replication_factor` is that of the destination topics created for them (-1: the
    /// destination's `default.replication.factor`, capped by its broker count).
    ///
    /// # Errors
    /// Also [`MirrorError::InvalidReplicationFactor`] for a value below 1 (other than -1) or
    /// above the destination's broker count.
    pub async fn add_topics(&self, mirror: &str, patterns: &[String], exclude: &[String], replication_factor: i16) -> Result<TopicOutcomes, MirrorError> {
        self.shared.add_topics(mirror, patterns, exclude, replication_factor, true).await
    }

    fn settings_of(&self, mirror: &str) -> Result<MirrorSettings, MirrorError> {
        self.shared.settings_of(mirror)
    }

    /// The mirror's topics (not STOPPED) matching `patterns`, with their entries.
    fn match_mirror_topics(&self, mirror: &str, patterns: &[String]) -> Result<Vec<(String, TopicEntry)>, MirrorError> {
        let compiled = Pattern::compile_all(patterns)?;
        let model = self.shared.model();
        if !model.mirrors.contains_key(mirror) {
            return Err(MirrorError::UnknownMirror(mirror.to_owned()));
        }
        let matched: Vec<(String, TopicEntry)> = model
            .topics_of(mirror)
            .filter(|(name, t)| t.record.goal != TopicGoal::Stopped && compiled.iter().any(|p| p.matches(name, name.starts_with("__"))))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect();
        if matched.is_empty() {
            return Err(MirrorError::TopicNotInMirror { mirror: mirror.to_owned(), pattern: describe_patterns(patterns) });
        }
        Ok(matched)
    }

    /// Applies a topic transition to the matching topics: `check` decides per topic (from its
    /// goal) whether it applies; the records are written, then the runner is commanded.
    async fn transition(
        &self,
        mirror: &str,
        patterns: &[String],
        check: impl Fn(&str, &TopicEntry) -> Result<(), MirrorError>,
        goal: TopicGoal,
        state: PartitionState,
    ) -> Result<TopicOutcomes, MirrorError> {
        let _op = self.shared.ops.lock().await;
        self.shared.catch_up().await?;
        let matched = self.match_mirror_topics(mirror, patterns)?;
        let mut outcomes = Vec::new();
        for (topic, entry) in matched {
            if let Err(e) = check(&topic, &entry) {
                outcomes.push((topic, Err(e)));
                continue;
            }
            let mut records = vec![topic_record(&topic, &entry.record, goal)];
            records.extend(partition_records(mirror, &topic, entry.record.partitions, &state));
            self.shared.commit(&records).await?;
            outcomes.push((topic, Ok(())));
        }
        Ok(outcomes)
    }

    /// Pauses copying of the matching topics (they stay read-only).
    ///
    /// # Errors
    /// Top level: unknown mirror, invalid pattern, no matching topic, store failure. Per topic:
    /// already paused, being stopped.
    pub async fn pause_topics(&self, mirror: &str, patterns: &[String]) -> Result<TopicOutcomes, MirrorError> {
        let check = |topic: &str, entry: &TopicEntry| match entry.record.goal {
            TopicGoal::Mirror => Ok(()),
            TopicGoal::Pause => Err(MirrorError::AlreadyPaused(topic.to_owned())),
            _ => Err(MirrorError::BeingStopped { topic: topic.to_owned(), state: entry.summary_state().name().to_owned() }),
        };
        self.transition(mirror, patterns, check, TopicGoal::Pause, PartitionState::Paused).await
    }

    /// Resumes copying of the matching paused topics.
    ///
    /// # Errors
    /// As [`MirrorManager::pause_topics`], with "not paused" per topic.
    pub async fn resume_topics(&self, mirror: &str, patterns: &[String]) -> Result<TopicOutcomes, MirrorError> {
        let check = |topic: &str, entry: &TopicEntry| match entry.record.goal {
            TopicGoal::Pause => Ok(()),
            TopicGoal::Mirror => Err(MirrorError::NotPaused { topic: topic.to_owned(), state: entry.summary_state().name().to_owned() }),
            _ => Err(MirrorError::BeingStopped { topic: topic.to_owned(), state: entry.summary_state().name().to_owned() }),
        };
        self.transition(mirror, patterns, check, TopicGoal::Mirror, PartitionState::Preparing).await
    }

    /// Stops mirroring the matching topics (failover): STOPPING, then STOPPED and writable.
    /// Returns once they are STOPPED, or after `stop_wait` (describe then shows STOPPING).
    ///
    /// # Errors
    /// As [`MirrorManager::pause_topics`], with "being stopped" per topic.
    pub async fn remove_topics(&self, mirror: &str, patterns: &[String]) -> Result<TopicOutcomes, MirrorError> {
        let check = |topic: &str, entry: &TopicEntry| match entry.record.goal {
            TopicGoal::Mirror | TopicGoal::Pause => Ok(()),
            _ => Err(MirrorError::BeingStopped { topic: topic.to_owned(), state: entry.summary_state().name().to_owned() }),
        };
        let outcomes = self.transition(mirror, patterns, check, TopicGoal::Stop, PartitionState::Stopping).await?;
        let stopping: Vec<&String> = outcomes.iter().filter(|(_, r)| r.is_ok()).map(|(t, _)| t).collect();
        // Whichever instance owns each topic stops it; the log tells when it is done.
        let mut applied = self.shared.applied.subscribe();
        let stopped = applied.wait_for(|_| {
            let model = self.shared.model();
            stopping.iter().all(|t| model.topics.get(*t).is_none_or(|e| e.record.goal == TopicGoal::Stopped))
        });
        if tokio::time::timeout(self.shared.config.stop_wait, stopped).await.is_err() {
            warn!(mirror, "topics still STOPPING after {:?}; they finish in the background", self.shared.config.stop_wait);
        }
        Ok(outcomes)
    }

    /// The mirror's settings, secrets hidden.
    ///
    /// # Errors
    /// Unknown mirror, or stored settings that cannot be opened.
    pub fn describe_configs(&self, mirror: &str) -> Result<Vec<DescribedSetting>, MirrorError> {
        let settings = self.settings_of(mirror)?;
        Ok(settings.redacted().into_iter().map(|(name, value)| DescribedSetting { is_sensitive: value.is_none(), name, value }).collect())
    }

    /// Changes the mirror's settings. Its topics reconnect to the (possibly new) source when a
    /// setting copying depends on changed; the throttle is applied while they copy.
    ///
    /// # Errors
    /// Unknown mirror, bad settings, unreachable source, store failure.
    pub async fn alter_configs(&self, mirror: &str, changes: &[ConfigChange], validate_only: bool) -> Result<(), MirrorError> {
        let _op = self.shared.ops.lock().await;
        self.shared.catch_up().await?;
        let current = self.settings_of(mirror)?;
        let mut properties = current.properties().clone();
        for change in changes {
            match change {
                ConfigChange::Set(k, v) => {
                    properties.insert(k.clone(), v.clone());
                }
                ConfigChange::Delete(k) => {
                    if setting_kind(k).is_none() {
                        return Err(MirrorError::InvalidSettings(vec![SettingError { key: k.clone(), message: "unknown setting".to_owned() }]));
                    }
                    properties.remove(k);
                }
            }
        }
        let settings = MirrorSettings::from_properties(properties).map_err(MirrorError::InvalidSettings)?;
        let configs = settings.seal(mirror, self.shared.config.secret_key.as_ref()).map_err(|e| MirrorError::InvalidSettings(vec![e]))?;
        let source = connect_source(mirror, &settings, self.shared.config.source_connect_timeout).await?;
        if validate_only {
            return Ok(());
        }
        let created_ms = self.shared.model().mirrors.get(mirror).map_or_else(now_ms, |m| m.definition.created_ms);
        let record = StateRecord::Mirror {
            name: mirror.to_owned(),
            value: Some(MirrorDefinition { configs, source_cluster_id: source.cached_metadata().cluster_id.unwrap_or_default(), created_ms }),
        };
        self.shared.commit(&[record]).await?;
        self.shared.sources.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(mirror.to_owned(), source);
        let (copying, sync) = (current.for_copying() != settings.for_copying(), current.for_sync() != settings.for_sync());
        info!(mirror, restart_copying = copying, restart_sync = sync, "mirror settings altered");
        Ok(())
    }

    /// Per-partition state and offsets of `names` (all mirrors if `None`), by name; unknown names
    /// come back as errors in place.
    pub async fn describe(&self, names: Option<&[String]>) -> Vec<(String, Result<MirrorDescription, MirrorError>)> {
        let wanted: Vec<String> = match names {
            Some(n) => n.to_vec(),
            None => self.shared.model().mirrors.keys().cloned().collect(),
        };
        let mut out = Vec::new();
        for name in wanted {
            let described = self.describe_one(&name).await;
            out.push((name, described));
        }
        out
    }

    async fn describe_one(&self, name: &str) -> Result<MirrorDescription, MirrorError> {
        let (definition, settings, topics) = {
            let model = self.shared.model();
            let m = model.mirrors.get(name).ok_or_else(|| MirrorError::UnknownMirror(name.to_owned()))?;
            let topics: Vec<(String, TopicEntry)> = model.topics_of(name).map(|(n, t)| (n.clone(), t.clone())).collect();
            (m.definition.clone(), m.settings.clone(), topics)
        };
        let timeout = self.shared.config.describe_timeout;
        let source = match &settings {
            Ok(s) => self.shared.source_client(name, s).await.ok(),
            Err(_) => None,
        };
        let isolation = settings.as_ref().map_or(IsolationLevel::ReadCommitted, MirrorSettings::isolation);
        // Offsets are asked only of partitions that exist on each side (a partition the source
        // added may not exist on the destination yet): one missing partition would fail the whole
        // ListOffsets and hide every other offset of the topic.
        let names: Vec<&str> = topics.iter().map(|(n, _)| n.as_str()).collect();
        let existing = |metadata: Option<crate::client::Metadata>, topic: &str, wanted: &[i32]| -> Vec<i32> {
            let count = metadata.and_then(|m| m.topics.get(topic).map(|t| t.partitions.len() as i32)).unwrap_or(0);
            wanted.iter().copied().filter(|p| *p < count).collect()
        };
        let source_metadata = match &source {
            Some(s) => tokio::time::timeout(timeout, s.refresh_metadata(&names)).await.ok().and_then(Result::ok),
            None => None,
        };
        let destination_metadata = tokio::time::timeout(timeout, self.shared.destination.refresh_metadata(&names)).await.ok().and_then(Result::ok);
        // Offsets of every partition of every topic at once: one ListOffsets per leader and side.
        let mut at_source: Vec<(String, i32)> = Vec::new();
        let mut at_destination: Vec<(String, i32)> = Vec::new();
        for (topic, entry) in &topics {
            let indexes: Vec<i32> = (0..entry.record.partitions).collect();
            if source.is_some() {
                at_source.extend(existing(source_metadata.clone(), topic, &indexes).into_iter().map(|p| (topic.clone(), p)));
            }
            at_destination.extend(existing(destination_metadata.clone(), topic, &indexes).into_iter().map(|p| (topic.clone(), p)));
        }
        let (source_offsets, destination_offsets) = futures_util::join!(
            async {
                match &source {
                    Some(s) => list_offsets(s, &at_source, isolation, timeout).await,
                    None => BTreeMap::new(),
                }
            },
            list_offsets(&self.shared.destination, &at_destination, IsolationLevel::ReadUncommitted, timeout),
        );
        let mut described = Vec::new();
        for (topic, entry) in topics {
            let indexes: Vec<i32> = (0..entry.record.partitions).collect();
            let partitions = indexes
                .iter()
                .map(|p| {
                    let record = entry.partitions.get(p);
                    let state = match (entry.record.goal, record) {
                        (TopicGoal::Stopped, _) => PartitionState::Stopped,
                        (_, Some(r)) => r.state.clone(),
                        (TopicGoal::Pause, None) => PartitionState::Paused,
                        (TopicGoal::Stop, None) => PartitionState::Stopping,
                        _ => PartitionState::Initializing,
                    };
                    PartitionDescription {
                        partition: *p,
                        state,
                        retry_attempt: record.map_or(0, |r| r.retry_attempt),
                        source_offset: source_offsets.get(&(topic.clone(), *p)).copied().unwrap_or(-1),
                        destination_offset: destination_offsets.get(&(topic.clone(), *p)).copied().unwrap_or(-1),
                    }
                })
                .collect();
            described.push(TopicDescription { name: topic, source_topic_id: entry.record.source_topic_id, partitions });
        }
        Ok(MirrorDescription {
            name: name.to_owned(),
            source_bootstrap: settings.as_ref().map(|s| s.bootstrap_servers().to_owned()).unwrap_or_default(),
            source_cluster_id: definition.source_cluster_id,
            topics: described,
        })
    }

    /// Stops every runner (copying stops; nothing is written) and waits for them. The manager
    /// serves nothing afterwards.
    pub async fn shutdown(&self) {
        self.shared.cancel.cancel();
        self.shared.tasks.close();
        self.shared.tasks.wait().await;
    }
}

impl Drop for MirrorManager {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
    }
}

/// The end offsets of `partitions` that arrive within `timeout`; the others are left out.
async fn list_offsets(client: &Client, partitions: &[(String, i32)], isolation: IsolationLevel, timeout: Duration) -> BTreeMap<(String, i32), i64> {
    if partitions.is_empty() {
        return BTreeMap::new();
    }
    match tokio::time::timeout(timeout, client.list_offsets_bulk(partitions, OffsetSpec::Latest, isolation)).await {
        Ok(offsets) => offsets.into_iter().filter_map(|(k, r)| r.ok().map(|o| (k, o))).collect(),
        Err(_) => BTreeMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fetch connections name the mirror's client id, the instance and the fetcher (the number is
    /// added per connection), in characters a quota's entity name takes as they are.
    #[test]
    fn fetch_client_ids_name_the_mirror_and_the_instance() {
        assert_eq!(fetch_client_id("kafka-mirror-proxy-mirror-dr", "10.0.0.7:9192"), "kafka-mirror-proxy-mirror-dr-10.0.0.7_9192-fetcher");
        assert_eq!(fetch_client_id("mine", ""), "mine-fetcher");
        let config = ReplicatorConfig { fetch_client_id: fetch_client_id("m", "h:1"), ..ReplicatorConfig::new("m") };
        assert_eq!((config.fetch_client_id_of(0), config.fetch_client_id_of(1)), ("m-h_1-fetcher-0".to_owned(), "m-h_1-fetcher-1".to_owned()));
    }
}
