//! The periodic sync of one mirror, with its settings (the mirror configuration's names, spec §7)
//! and a status per kind of sync (last success, last failure) for describe and metrics.
//!
//! ```text
//!   SyncRunner::run ── every sync.group.offsets.interval.ms ──► groups::sync_group_offsets
//!                   │                                         └► share_groups::sync_share_group_offsets
//!                   └─ every metadata.refresh.interval.ms ────► configs, partitions, new topics, ACLs
//! ```
//!
//! A failed run (an unreachable cluster, say) is recorded and retried at the next tick; it never
//! stops data mirroring, which the replicator does on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::acls::{AclLedger, AclSync, InMemoryAclLedger, parse_acl_filters};
use super::configs::{ConfigFilter, DEFAULT_EXCLUDED_PROPERTIES, sync_topic_configs_bulk};
use super::groups::{GroupFilter, SkippedGroup, SyncError, sync_group_offsets};
use super::share_groups::sync_share_group_offsets;
use super::topics::{DEFAULT_EXCLUDED_TOPICS, TopicPattern, new_matching_topics};
use crate::client::{AclFilter, Client};
use crate::report::error_chain;

/// What the runner needs from the mirror it syncs: which topics it mirrors, following a
/// partition increase, and adding a new topic. The mirror implements it (through its state log,
/// never by driving a replicator: sync and replicator are siblings, both driven by the mirror).
pub trait MirroredTopics: Send + Sync + std::fmt::Debug {
    /// The topics mirrored.
    fn topics(&self) -> Vec<String>;
    /// Follows a partition increase of `topic` at the source; the partition count mirrored now, or
    /// why it could not be followed.
    fn sync_partitions<'a>(&'a self, topic: &'a str) -> futures_util::future::BoxFuture<'a, Result<i32, String>>;
    /// Starts mirroring a new topic; `Err` with the reason if it was refused.
    fn add_topic<'a>(&'a self, topic: &'a str) -> futures_util::future::BoxFuture<'a, Result<(), String>>;
}

/// Default `sync.group.offsets.interval.ms`.
pub const DEFAULT_GROUP_OFFSETS_INTERVAL: Duration = Duration::from_secs(10);
/// Default `metadata.refresh.interval.ms`.
pub const DEFAULT_METADATA_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// The sync settings of a mirror.
#[derive(Debug, Clone)]
pub struct SyncSettings {
    /// `sync.group.offsets.enabled` (default true).
    pub group_offsets: bool,
    /// `sync.group.offsets.interval.ms` (default 10000).
    pub group_offsets_interval: Duration,
    /// `groups.include` / `groups.exclude` (default all / none).
    pub groups: GroupFilter,
    /// `sync.topic.configs.enabled` (default true).
    pub topic_configs: bool,
    /// `topic.properties.exclude` (default [`DEFAULT_EXCLUDED_PROPERTIES`]).
    pub configs: ConfigFilter,
    /// `metadata.refresh.interval.ms` (default 30000): configs, partitions, new topics, ACLs.
    pub metadata_refresh_interval: Duration,
    /// The mirror's topic pattern (from `--add --topic REGEX`) with `topics.exclude`
    /// (default `__.*`), if topics were added by pattern.
    pub topics: Option<TopicPattern>,
    /// `sync.acls.enabled` (default false).
    pub acls: bool,
    /// `acls.include`.
    pub acl_filters: Vec<AclFilter>,
}

impl Default for SyncSettings {
    fn default() -> Self {
        Self {
            group_offsets: true,
            group_offsets_interval: DEFAULT_GROUP_OFFSETS_INTERVAL,
            groups: GroupFilter::default(),
            topic_configs: true,
            configs: ConfigFilter::default(),
            metadata_refresh_interval: DEFAULT_METADATA_REFRESH_INTERVAL,
            topics: None,
            acls: false,
            acl_filters: Vec::new(),
        }
    }
}

/// A setting with a bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value `{value}` for `{key}`: {message}")]
pub struct SettingError {
    /// The setting.
    pub key: String,
    /// Its value.
    pub value: String,
    /// What is wrong.
    pub message: String,
}

/// The names [`SyncSettings::from_properties`] reads.
pub const SYNC_SETTING_NAMES: &[&str] = &[
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.ms",
    "groups.include",
    "groups.exclude",
    "sync.topic.configs.enabled",
    "topic.properties.exclude",
    "metadata.refresh.interval.ms",
    "topics.exclude",
    "sync.acls.enabled",
    "acls.include",
];

impl SyncSettings {
    /// Reads the sync settings from a mirror configuration (other keys are ignored: the caller
    /// validates the whole configuration). Lists are comma-separated. `topic_pattern` is the
    /// mirror's `--add --topic REGEX`, if any.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad setting.
    pub fn from_properties(props: &BTreeMap<String, String>, topic_pattern: Option<&str>) -> Result<Self, SettingError> {
        let bad = |key: &str, message: String| SettingError { key: key.to_owned(), value: props.get(key).cloned().unwrap_or_default(), message };
        let boolean = |key: &str, default: bool| -> Result<bool, SettingError> {
            match props.get(key).map(|v| v.trim().to_ascii_lowercase()) {
                None => Ok(default),
                Some(v) if v == "true" => Ok(true),
                Some(v) if v == "false" => Ok(false),
                Some(_) => Err(bad(key, "expected true or false".to_owned())),
            }
        };
        let millis = |key: &str, default: Duration| -> Result<Duration, SettingError> {
            match props.get(key) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
                    _ => Err(bad(key, "expected a positive number of milliseconds".to_owned())),
                },
            }
        };
        let list = |key: &str| -> Option<Vec<&str>> { props.get(key).map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()) };
        let pattern_err = |key: &'static str| move |e: SyncError| bad(key, e.to_string());
        let groups =
            GroupFilter::new(&list("groups.include").unwrap_or_else(|| vec![".*"]), &list("groups.exclude").unwrap_or_default()).map_err(|e| match e {
                SyncError::InvalidPattern { key, .. } => bad(key, e.to_string()),
                other => bad("groups.include", other.to_string()),
            })?;
        let configs = ConfigFilter::new(&list("topic.properties.exclude").unwrap_or_else(|| DEFAULT_EXCLUDED_PROPERTIES.to_vec()))
            .map_err(pattern_err("topic.properties.exclude"))?;
        let topics = match topic_pattern {
            None => None,
            Some(p) => {
                Some(TopicPattern::new(p, &list("topics.exclude").unwrap_or_else(|| DEFAULT_EXCLUDED_TOPICS.to_vec())).map_err(pattern_err("topics.exclude"))?)
            }
        };
        let acls = boolean("sync.acls.enabled", false)?;
        let acl_filters = parse_acl_filters(&list("acls.include").unwrap_or_default()).map_err(pattern_err("acls.include"))?;
        if acls && acl_filters.is_empty() {
            return Err(bad("acls.include", "required when sync.acls.enabled is true".to_owned()));
        }
        Ok(Self {
            group_offsets: boolean("sync.group.offsets.enabled", true)?,
            group_offsets_interval: millis("sync.group.offsets.interval.ms", DEFAULT_GROUP_OFFSETS_INTERVAL)?,
            groups,
            topic_configs: boolean("sync.topic.configs.enabled", true)?,
            configs,
            metadata_refresh_interval: millis("metadata.refresh.interval.ms", DEFAULT_METADATA_REFRESH_INTERVAL)?,
            topics,
            acls,
            acl_filters,
        })
    }
}

/// The kinds of sync, as shown in status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SyncKind {
    /// Consumer group offsets.
    GroupOffsets,
    /// Share group start offsets (KIP-932), on the group offsets schedule.
    ShareGroupOffsets,
    /// Topic configs.
    TopicConfigs,
    /// Partition increases.
    Partitions,
    /// New topics matching the pattern.
    NewTopics,
    /// ACL bindings.
    Acls,
}

impl SyncKind {
    /// The name in metrics and describe output.
    pub fn name(self) -> &'static str {
        match self {
            Self::GroupOffsets => "group_offsets",
            Self::ShareGroupOffsets => "share_group_offsets",
            Self::TopicConfigs => "topic_configs",
            Self::Partitions => "partitions",
            Self::NewTopics => "new_topics",
            Self::Acls => "acls",
        }
    }
}

/// The last outcome of one kind of sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncStatus {
    /// When it last succeeded.
    pub last_success: Option<SystemTime>,
    /// When it last failed, and why.
    pub last_failure: Option<(SystemTime, String)>,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// Runs since this status was made (successes and failures).
    pub runs: u64,
    /// Failed runs since this status was made.
    pub failures: u64,
    /// Groups the last successful run left alone, and why (group offset syncs only).
    pub skipped: Vec<SkippedGroup>,
    /// Why the last successful run did nothing at all, if so (e.g. share groups on a source older
    /// than Kafka 4.1).
    pub note: Option<String>,
}

/// Runs the syncs of one mirror until cancelled.
#[derive(Debug)]
pub struct SyncRunner {
    source: Arc<Client>,
    destination: Arc<Client>,
    mirror: Arc<dyn MirroredTopics>,
    settings: SyncSettings,
    status: Arc<Mutex<BTreeMap<SyncKind, SyncStatus>>>,
    acl_sync: AclSync,
}

impl SyncRunner {
    /// A runner for the topics `mirror` mirrors. The ACL bindings it creates are remembered in
    /// memory only, until [`SyncRunner::with_acl_ledger`] gives it a ledger that lasts.
    pub fn new(source: Arc<Client>, destination: Arc<Client>, mirror: Arc<dyn MirroredTopics>, settings: SyncSettings) -> Self {
        Self::with_status(source, destination, mirror, settings, Arc::default())
    }

    /// A runner recording its status in `status` (which the caller may have filled already, e.g.
    /// with failures to reach the source before the runner could start).
    pub fn with_status(
        source: Arc<Client>,
        destination: Arc<Client>,
        mirror: Arc<dyn MirroredTopics>,
        settings: SyncSettings,
        status: Arc<Mutex<BTreeMap<SyncKind, SyncStatus>>>,
    ) -> Self {
        let acl_sync = AclSync::new(String::new(), Arc::new(InMemoryAclLedger::new()));
        Self { source, destination, mirror, settings, status, acl_sync }
    }

    /// Keeps the ACL bindings this runner creates in `ledger`, under `mirror`.
    #[must_use]
    pub fn with_acl_ledger(mut self, mirror: &str, ledger: Arc<dyn AclLedger>) -> Self {
        self.acl_sync = AclSync::new(mirror, ledger);
        self
    }

    /// A handle on the status, readable while the runner runs.
    pub fn status_handle(&self) -> Arc<Mutex<BTreeMap<SyncKind, SyncStatus>>> {
        self.status.clone()
    }

    fn record(&self, kind: SyncKind, outcome: Result<(), String>) {
        self.record_details(kind, outcome.map(|()| (Vec::new(), None)));
    }

    /// Records a run's outcome: on success, the groups it skipped and why it did nothing (if so).
    fn record_details(&self, kind: SyncKind, outcome: Result<(Vec<SkippedGroup>, Option<String>), String>) {
        let mut all = self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let s = all.entry(kind).or_default();
        match outcome {
            Ok((skipped, note)) => {
                for g in &skipped {
                    debug!(?kind, group = %g.group, reason = %g.reason, "group skipped");
                }
                s.last_success = Some(SystemTime::now());
                s.consecutive_failures = 0;
                s.runs += 1;
                s.skipped = skipped;
                s.note = note;
            }
            Err(reason) => {
                warn!(?kind, %reason, "sync failed; retried at the next interval");
                s.last_failure = Some((SystemTime::now(), reason));
                s.consecutive_failures += 1;
                s.runs += 1;
                s.failures += 1;
            }
        }
    }

    /// One round of the group offset syncs: consumer groups, then share groups. Each has its own
    /// status; a cluster without share groups does not fail either.
    pub async fn sync_groups_once(&self) {
        if !self.settings.group_offsets {
            return;
        }
        let topics: BTreeSet<String> = self.mirror.topics().into_iter().collect();
        let outcome = sync_group_offsets(&self.source, &self.destination, &topics, &self.settings.groups).await;
        self.record_details(SyncKind::GroupOffsets, outcome.map(|r| (r.skipped, None)).map_err(|e| error_chain(&e)));
        let outcome = sync_share_group_offsets(&self.source, &self.destination, &topics, &self.settings.groups).await;
        self.record_details(SyncKind::ShareGroupOffsets, outcome.map(|r| (r.skipped, r.unsupported)).map_err(|e| error_chain(&e)));
    }

    /// One round of the metadata syncs: configs, partitions, new topics, ACLs.
    pub async fn sync_metadata_once(&mut self) {
        let topics = self.mirror.topics();
        if self.settings.topic_configs {
            let outcome = sync_topic_configs_bulk(&self.source, &self.destination, &topics, &self.settings.configs).await;
            self.record(SyncKind::TopicConfigs, outcome.map(drop).map_err(|e| error_chain(&e)));
        }
        // One metadata request for every topic: the partition checks below read it.
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        if !names.is_empty() {
            let _ = self.source.refresh_metadata(&names).await;
        }
        let mut outcome = Ok(());
        for t in &topics {
            if let Err(reason) = self.mirror.sync_partitions(t).await {
                outcome = Err(reason);
            }
        }
        self.record(SyncKind::Partitions, outcome);
        if let Some(pattern) = &self.settings.topics {
            let mirrored: BTreeSet<String> = topics.iter().cloned().collect();
            match new_matching_topics(&self.source, pattern, &mirrored).await {
                Ok(new) => {
                    let mut refused = Vec::new();
                    for t in new {
                        if let Err(reason) = self.mirror.add_topic(&t).await {
                            refused.push(format!("{t}: {reason}"));
                        }
                    }
                    self.record(SyncKind::NewTopics, if refused.is_empty() { Ok(()) } else { Err(refused.join("; ")) });
                }
                Err(e) => self.record(SyncKind::NewTopics, Err(error_chain(&e))),
            }
        }
        if self.settings.acls {
            let outcome = self.acl_sync.run(self.source.as_ref(), self.destination.as_ref(), &self.settings.acl_filters).await;
            self.record(SyncKind::Acls, outcome.map(drop).map_err(|e| error_chain(&e)));
        }
    }

    /// Runs both schedules until `cancel`.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut groups = tokio::time::interval(self.settings.group_offsets_interval);
        let mut metadata = tokio::time::interval(self.settings.metadata_refresh_interval);
        groups.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        metadata.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                _ = groups.tick() => self.sync_groups_once().await,
                _ = metadata.tick() => self.sync_metadata_once().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults_and_overrides() {
        let d = SyncSettings::from_properties(&props(&[]), None).unwrap();
        assert!(d.group_offsets && d.topic_configs && !d.acls);
        assert_eq!((d.group_offsets_interval, d.metadata_refresh_interval), (Duration::from_secs(10), Duration::from_secs(30)));
        let s = SyncSettings::from_properties(
            &props(&[
                ("sync.group.offsets.interval.ms", "2500"),
                ("groups.exclude", "tmp-.*, test"),
                ("sync.acls.enabled", "true"),
                ("acls.include", "topic:prefixed:orders"),
            ]),
            Some("orders\\..*"),
        )
        .unwrap();
        assert_eq!(s.group_offsets_interval, Duration::from_millis(2500));
        assert!(!s.groups.matches("tmp-1") && !s.groups.matches("test") && s.groups.matches("app"));
        assert!(s.topics.as_ref().unwrap().matches("orders.eu") && !s.topics.unwrap().matches("__orders"));
    }

    #[test]
    fn each_bad_setting_is_named() {
        for (key, value) in [
            ("sync.group.offsets.enabled", "yes"),
            ("sync.group.offsets.interval.ms", "-5"),
            ("groups.include", "("),
            ("groups.exclude", "["),
            ("topic.properties.exclude", "*"),
            ("acls.include", "topic:glob:x"),
            ("metadata.refresh.interval.ms", "soon"),
        ] {
            let err = SyncSettings::from_properties(&props(&[(key, value)]), None).unwrap_err();
            assert_eq!(err.key, key, "{err}");
        }
        let err = SyncSettings::from_properties(&props(&[("sync.acls.enabled", "true")]), None).unwrap_err();
        assert_eq!(err.key, "acls.include");
        let err = SyncSettings::from_properties(&props(&[("topics.exclude", "(")]), Some(".*")).unwrap_err();
        assert_eq!(err.key, "topics.exclude");
    }
}
