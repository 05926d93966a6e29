//! The [`MirrorManager`]: owns the mirrors of one destination cluster, validates and applies the
//! admin operations, keeps `__mirror_state` and drives one `runner` task per mirror topic.
//!
//! Every operation follows the same order (spec §6, "every transition is recorded before it takes
//! effect"):
//!
//! ```text
//!   admin request ─► ops lock ─► validate against the model ─► write records to __mirror_state
//!                              ─► apply them to the model (the write policy now sees them)
//!                              ─► command the topic runners ─► unlock
//!                    (RemoveTopicsFromMirror then waits, unlocked, up to stop_wait for STOPPED)
//! ```
//!
//! On start the whole topic is read back into the model, and every topic whose goal is not
//! STOPPED gets its runner again: MIRROR resumes copying (the replicator reconciles with what the
//! destination holds), PAUSE waits, STOP finishes stopping. So a proxy killed at any moment resumes
//! where the log says it was.
//!
//! Not done yet: sharing the copying between several proxy instances (group membership or a
//! lease); today every instance that runs a manager on the same destination would copy every
//! topic, so run one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use uuid::Uuid;

use super::error::MirrorError;
use super::model::{Model, TopicEntry};
use super::records::{MirrorDefinition, PartitionRecord, StateRecord, TopicGoal, TopicRecord};
use super::runner::{COMMAND_QUEUE, Command, TopicRunner};
use super::settings::{MirrorSettings, SecretKey, SettingError, setting_kind, validate_mirror_name};
use super::store::{DEFAULT_STATE_TOPIC, StateStore, StoreError};
use super::{MirrorLookup, PartitionState, now_ms};
use crate::client::{BackoffConfig, Client, IsolationLevel, OffsetSpec};
use crate::replicator::ReplicatorConfig;

/// Default time to reach a source when validating settings or listing its topics.
pub const DEFAULT_SOURCE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time describe waits for offsets from either cluster before showing `-`.
pub const DEFAULT_DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time RemoveTopicsFromMirror waits for its topics to be STOPPED before answering.
pub const DEFAULT_STOP_WAIT: Duration = Duration::from_secs(30);
/// Default spacing of the runners' status checks.
pub const DEFAULT_STATUS_INTERVAL: Duration = Duration::from_millis(500);
/// Default memory for fetched, unwritten data per mirror topic (bytes).
pub const DEFAULT_TOPIC_BUFFER_BYTES: usize = 32 * 1024 * 1024;

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
    /// Spacing of runner status checks (how soon describe shows a replicator's state).
    pub status_interval: Duration,
    /// Backoff of FAILED topics whose cause can pass, and of stop retries.
    pub retry_backoff: BackoffConfig,
    /// Backoff of `__mirror_state` writes (their deadline bounds how long an operation waits).
    pub store_backoff: BackoffConfig,
    /// Memory for fetched, unwritten data per mirror topic, bytes.
    pub topic_buffer_bytes: usize,
    /// Default fetch wait at the source (`fetch.wait.max.ms` of a mirror overrides it).
    pub fetch_max_wait: Duration,
}

impl Default for MirrorManagerConfig {
    fn default() -> Self {
        Self {
            state_topic: DEFAULT_STATE_TOPIC.to_owned(),
            secret_key: None,
            source_connect_timeout: DEFAULT_SOURCE_CONNECT_TIMEOUT,
            describe_timeout: DEFAULT_DESCRIBE_TIMEOUT,
            stop_wait: DEFAULT_STOP_WAIT,
            status_interval: DEFAULT_STATUS_INTERVAL,
            retry_backoff: BackoffConfig {
                initial: Duration::from_millis(200),
                max: Duration::from_secs(30),
                deadline: Duration::from_secs(3600 * 24 * 365),
                ..BackoffConfig::default()
            },
            store_backoff: BackoffConfig { deadline: Duration::from_secs(30), ..BackoffConfig::default() },
            topic_buffer_bytes: DEFAULT_TOPIC_BUFFER_BYTES,
            fetch_max_wait: crate::replicator::config::DEFAULT_FETCH_MAX_WAIT,
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

/// What is shared between the manager and its runners.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) destination: Arc<Client>,
    pub(crate) config: MirrorManagerConfig,
    store: StateStore,
    model: Arc<Mutex<Model>>,
    /// Serialises operations and runner observations (validate, write, apply as one step).
    pub(crate) ops: tokio::sync::Mutex<()>,
    runners: Mutex<HashMap<String, mpsc::Sender<Command>>>,
    /// Source clients for admin operations (listing topics, describe offsets), by mirror.
    sources: Mutex<HashMap<String, Arc<Client>>>,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

impl Shared {
    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes `records` in order, applying each to the model once it is in the log.
    pub(crate) async fn commit(&self, records: &[StateRecord]) -> Result<(), StoreError> {
        for record in records {
            self.store.write(record).await?;
            self.model().apply(record, self.config.secret_key.as_ref());
        }
        Ok(())
    }

    /// The goal of `topic`, if it is in a mirror.
    pub(crate) fn goal_of(&self, topic: &str) -> Option<TopicGoal> {
        self.model().topics.get(topic).map(|t| t.record.goal)
    }

    /// The replicator settings of a topic of `mirror`.
    pub(crate) fn replicator_config(&self, mirror: &str, settings: &MirrorSettings) -> ReplicatorConfig {
        let mut config = ReplicatorConfig::new(mirror);
        config.isolation = settings.isolation();
        config.buffer_bytes = self.config.topic_buffer_bytes;
        config.fetch_max_wait = settings.fetch_max_wait().unwrap_or(self.config.fetch_max_wait);
        if let Some(bytes) = settings.partition_fetch_bytes() {
            config.partition_fetch_bytes = bytes;
        }
        config
    }

    /// Records `topic` STOPPED (partitions, then the topic: the write policy lets writes through
    /// from the topic record on) and forgets its runner.
    pub(crate) async fn finish_stop(&self, mirror: &str, topic: &str) -> Result<(), StoreError> {
        let Some(entry) = self.model().topics.get(topic).cloned() else { return Ok(()) };
        let mut records = partition_records(mirror, topic, entry.record.partitions, &PartitionState::Stopped);
        records.push(topic_record(topic, &entry.record, TopicGoal::Stopped));
        self.commit(&records).await?;
        self.runners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(topic);
        Ok(())
    }

    fn spawn_runner(self: &Arc<Self>, topic: &str, entry: &TopicEntry, settings: Result<MirrorSettings, String>) {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let runner = TopicRunner {
            shared: self.clone(),
            mirror: entry.record.mirror.clone(),
            topic: topic.to_owned(),
            partitions: entry.record.partitions,
            source_topic_id: entry.record.source_topic_id,
            settings,
        };
        self.runners.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(topic.to_owned(), tx);
        self.tasks.spawn(runner.run(rx, entry.record.goal, self.cancel.child_token()));
    }

    /// Sends `command` to the runner of `topic` (called under the ops lock, so commands arrive in
    /// the order their records were written).
    fn command(&self, topic: &str, command: Command) {
        let runners = self.runners.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match runners.get(topic).map(|tx| tx.try_send(command)) {
            Some(Ok(())) => {}
            Some(Err(e)) => warn!(topic, error = %e, "topic runner did not take a command; it follows the state log on restart"),
            None => warn!(topic, "no runner for the topic"),
        }
    }

    async fn source_client(&self, mirror: &str, settings: &MirrorSettings) -> Result<Arc<Client>, MirrorError> {
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

async fn connect_source(mirror: &str, settings: &MirrorSettings, timeout: Duration) -> Result<Arc<Client>, MirrorError> {
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

fn chain(e: &dyn std::error::Error) -> String {
    crate::report::error_chain(e)
}

fn topic_record(topic: &str, current: &TopicRecord, goal: TopicGoal) -> StateRecord {
    StateRecord::Topic { topic: topic.to_owned(), value: Some(TopicRecord { goal, updated_ms: now_ms(), ..current.clone() }) }
}

fn partition_records(mirror: &str, topic: &str, partitions: i32, state: &PartitionState) -> Vec<StateRecord> {
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
    /// Opens (or creates) the state topic, loads it, and resumes every topic that is not STOPPED.
    ///
    /// # Errors
    /// [`MirrorError::Store`] if the state topic cannot be created or read.
    pub async fn start(destination: Arc<Client>, config: MirrorManagerConfig) -> Result<Self, MirrorError> {
        let (store, records) = StateStore::open(destination.clone(), &config.state_topic, config.store_backoff.clone()).await?;
        let mut model = Model::default();
        for record in &records {
            model.apply(record, config.secret_key.as_ref());
        }
        let shared = Arc::new(Shared {
            destination,
            config,
            store,
            model: Arc::new(Mutex::new(model)),
            ops: tokio::sync::Mutex::new(()),
            runners: Mutex::new(HashMap::new()),
            sources: Mutex::new(HashMap::new()),
            tasks: TaskTracker::new(),
            cancel: CancellationToken::new(),
        });
        let resume: Vec<(String, TopicEntry, Result<MirrorSettings, String>)> = {
            let model = shared.model();
            model
                .topics
                .iter()
                .filter(|(_, t)| t.record.goal != TopicGoal::Stopped)
                .map(|(name, t)| {
                    let settings = model
                        .mirrors
                        .get(&t.record.mirror)
                        .map_or_else(|| Err(format!("mirror `{}` is not defined", t.record.mirror)), |m| m.settings.clone());
                    (name.clone(), t.clone(), settings)
                })
                .collect()
        };
        for (topic, entry, settings) in &resume {
            info!(mirror = %entry.record.mirror, topic, goal = entry.record.goal.name(), "resuming mirror topic");
            shared.spawn_runner(topic, entry, settings.clone());
        }
        Ok(Self { shared })
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
        let record = StateRecord::Mirror {
            name: name.to_owned(),
            value: Some(MirrorDefinition { configs, source_cluster_id: cluster_id, created_ms: now_ms() }),
        };
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

    /// Starts mirroring the source topics matching `patterns` and not `exclude`.
    ///
    /// # Errors
    /// Top level: unknown mirror, invalid pattern, unreachable source, no matching topic, the
    /// loop check failing, store failure. Per topic (in the outcomes): the topic is already in a
    /// mirror, or is a mirror topic at the source ([`MirrorError::MirrorLoop`]).
    pub async fn add_topics(&self, mirror: &str, patterns: &[String], exclude: &[String]) -> Result<TopicOutcomes, MirrorError> {
        let include = Pattern::compile_all(patterns)?;
        let exclude = Pattern::compile_all(exclude)?;
        if include.is_empty() {
            return Err(MirrorError::NoMatchingTopic("no pattern".to_owned()));
        }
        let _op = self.shared.ops.lock().await;
        let settings = self.settings_of(mirror)?;
        let source = self.shared.source_client(mirror, &settings).await?;
        let metadata = match source.refresh_metadata(&[]).await {
            Ok(m) => m,
            Err(e) => {
                self.shared.forget_source(mirror);
                return Err(MirrorError::SourceUnreachable { bootstrap: settings.bootstrap_servers().to_owned(), reason: chain(&e) });
            }
        };
        let matched: Vec<_> = metadata
            .topics
            .values()
            .filter(|t| {
                let internal = t.is_internal || t.name.starts_with("__");
                include.iter().any(|p| p.matches(&t.name, internal)) && !exclude.iter().any(|p| p.matches(&t.name, internal))
            })
            .collect();
        if matched.is_empty() {
            return Err(MirrorError::NoMatchingTopic(describe_patterns(patterns)));
        }
        // Mirror topics of the source itself are refused (mirrors must not loop).
        let looped = super::loops::source_mirror_topics(&source, &self.shared.config.state_topic).await.map_err(|e| MirrorError::LoopCheck(Box::new(e)))?;
        let mut outcomes = Vec::new();
        let mut added = Vec::new();
        for info in matched {
            if let Some(source_mirror) = looped.get(&info.name) {
                outcomes.push((info.name.clone(), Err(MirrorError::MirrorLoop { topic: info.name.clone(), source_mirror: source_mirror.clone() })));
                continue;
            }
            let existing = self.shared.model().topics.get(&info.name).cloned();
            if let Some(entry) = existing.filter(|e| e.record.goal != TopicGoal::Stopped) {
                outcomes.push((
                    info.name.clone(),
                    Err(MirrorError::TopicInMirror { topic: info.name.clone(), mirror: entry.record.mirror.clone(), state: entry.summary_state().name().to_owned() }),
                ));
                continue;
            }
            let partitions = info.partitions.len() as i32;
            let record = TopicRecord { mirror: mirror.to_owned(), source_topic_id: info.topic_id, partitions, goal: TopicGoal::Mirror, updated_ms: now_ms() };
            // The topic record first: from it on the topic is read-only.
            let mut records = vec![StateRecord::Topic { topic: info.name.clone(), value: Some(record) }];
            records.extend(partition_records(mirror, &info.name, partitions, &PartitionState::Initializing));
            self.shared.commit(&records).await?;
            added.push(info.name.clone());
            outcomes.push((info.name.clone(), Ok(())));
        }
        for topic in &added {
            let entry = self.shared.model().topics.get(topic).cloned();
            if let Some(entry) = entry {
                info!(mirror, topic, partitions = entry.record.partitions, "topic added to the mirror");
                self.shared.spawn_runner(topic, &entry, Ok(settings.clone()));
            }
        }
        Ok(outcomes)
    }

    fn settings_of(&self, mirror: &str) -> Result<MirrorSettings, MirrorError> {
        let model = self.shared.model();
        let entry = model.mirrors.get(mirror).ok_or_else(|| MirrorError::UnknownMirror(mirror.to_owned()))?;
        entry.settings.clone().map_err(|message| MirrorError::InvalidSettings(vec![SettingError { key: "(stored settings)".to_owned(), message }]))
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
        mut command: impl FnMut() -> Command,
    ) -> Result<TopicOutcomes, MirrorError> {
        let _op = self.shared.ops.lock().await;
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
            self.shared.command(&topic, command());
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
        self.transition(mirror, patterns, check, TopicGoal::Pause, PartitionState::Paused, || Command::Pause).await
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
        self.transition(mirror, patterns, check, TopicGoal::Mirror, PartitionState::Preparing, || Command::Resume).await
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
        let mut waits = Vec::new();
        let outcomes = self
            .transition(mirror, patterns, check, TopicGoal::Stop, PartitionState::Stopping, || {
                let (tx, rx) = oneshot::channel();
                waits.push(rx);
                Command::Stop { done: Some(tx) }
            })
            .await?;
        let all = futures_util::future::join_all(waits);
        if tokio::time::timeout(self.shared.config.stop_wait, all).await.is_err() {
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
        Ok(settings
            .redacted()
            .into_iter()
            .map(|(name, value)| DescribedSetting { is_sensitive: value.is_none(), name, value })
            .collect())
    }

    /// Changes the mirror's settings; its topics reconnect to the (possibly new) source.
    ///
    /// # Errors
    /// Unknown mirror, bad settings, unreachable source, store failure.
    pub async fn alter_configs(&self, mirror: &str, changes: &[ConfigChange], validate_only: bool) -> Result<(), MirrorError> {
        let _op = self.shared.ops.lock().await;
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
        let topics: Vec<String> = self.shared.model().topics_of(mirror).filter(|(_, t)| t.record.goal != TopicGoal::Stopped).map(|(n, _)| n.clone()).collect();
        for topic in topics {
            self.shared.command(&topic, Command::Reconnect(settings.clone()));
        }
        info!(mirror, "mirror settings altered; its topics reconnect");
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
        let mut described = Vec::new();
        for (topic, entry) in topics {
            let indexes: Vec<i32> = (0..entry.record.partitions).collect();
            let source_offsets = match &source {
                Some(s) => list_offsets(s, &topic, &indexes, isolation, timeout).await,
                None => BTreeMap::new(),
            };
            let destination_offsets = list_offsets(&self.shared.destination, &topic, &indexes, IsolationLevel::ReadUncommitted, timeout).await;
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
                        source_offset: source_offsets.get(p).copied().unwrap_or(-1),
                        destination_offset: destination_offsets.get(p).copied().unwrap_or(-1),
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

async fn list_offsets(client: &Client, topic: &str, partitions: &[i32], isolation: IsolationLevel, timeout: Duration) -> BTreeMap<i32, i64> {
    match tokio::time::timeout(timeout, client.list_offsets(topic, partitions, OffsetSpec::Latest, isolation)).await {
        Ok(Ok(offsets)) => offsets,
        _ => BTreeMap::new(),
    }
}
