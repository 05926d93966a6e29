//! The sync jobs of one mirror (spec §7), run by the instance owning the mirror: a
//! [`SyncRunner`] over the mirror's topics as the state log lists them.
//!
//! ```text
//!   run_mirror_sync ── connect the source (retried; failures show in the sync status)
//!                   └─ SyncRunner::run ── group offsets, configs (of topics MIRROR or PAUSE)
//!                                      ├─ partition increase ─► Topic record with the new count
//!                                      │     (+ INITIALIZING partitions) ─► the topic's owner
//!                                      │     creates and copies them (runner.rs)
//!                                      └─ new source topic matching the mirror's filter
//!                                            ─► added like `--add` (never one the log already
//!                                               knows, so a STOPPED topic is not re-added)
//! ```
//!
//! The sync changes mirrors only through the state log, as an operator would; it never drives a
//! replicator itself, since the topic may be copied by another instance.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::MirrorError;
use super::manager::{Shared, SyncStatuses, partition_records};
use super::records::{AclRecord, StateRecord, TopicGoal, TopicRecord};
use super::supervisor::SyncWant;
use super::{PartitionState, now_ms};
use crate::client::{AclBinding, Backoff, Client};
use crate::replicator::{ReplicationError, topic as replicator_topic};
use crate::sync::{AclLedger, LedgerError, MirroredTopics, SyncKind, SyncRunner, SyncSettings, SyncStatus};

/// Runs the sync of `mirror` until `cancel` (or until its settings change: the supervisor then
/// cancels and restarts it).
pub(crate) async fn run_mirror_sync(shared: Arc<Shared>, mirror: String, want: SyncWant, cancel: CancellationToken) {
    let statuses: SyncStatuses = Arc::default();
    shared.sync_statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(mirror.clone(), statuses.clone());
    let pattern = (!want.filter.include.is_empty()).then(|| want.filter.include.iter().map(|p| format!("(?:{p})")).collect::<Vec<_>>().join("|"));
    let mut properties = want.settings.properties().clone();
    if !want.filter.exclude.is_empty() {
        // The `--exclude` patterns of `--add` join the mirror's `topics.exclude` (default `__.*`).
        let base = properties.get("topics.exclude").cloned().unwrap_or_else(|| crate::sync::DEFAULT_EXCLUDED_TOPICS.join(","));
        let extra = want.filter.exclude.join(",");
        properties.insert("topics.exclude".to_owned(), if base.trim().is_empty() { extra } else { format!("{base},{extra}") });
    }
    let settings = match SyncSettings::from_properties(&properties, pattern.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            // Validated when the mirror was created or altered; only a filter pattern can get here.
            record_failure(&statuses, &e.to_string());
            warn!(mirror, error = %e, "the mirror's sync settings are not usable; its sync does not run");
            cancel.cancelled().await;
            return;
        }
    };
    let mut backoff = Backoff::new(&shared.config.retry_backoff);
    let source = loop {
        let connected = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            c = super::manager::connect_source(&mirror, &want.settings, shared.config.source_connect_timeout) => c,
        };
        match connected {
            Ok(source) => break source,
            Err(e) => {
                record_failure(&statuses, &e.to_string());
                let delay = backoff.next_delay().unwrap_or(shared.config.retry_backoff.max);
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    };
    info!(mirror, "mirror sync running");
    let view = Arc::new(MirrorTopicsView { shared: shared.clone(), mirror: mirror.clone(), source: source.clone(), refused: Mutex::default() });
    let ledger = Arc::new(StateAclLedger { shared: shared.clone() });
    let runner = SyncRunner::with_status(source, shared.destination.clone(), view, settings, statuses).with_acl_ledger(&mirror, ledger);
    runner.run(cancel).await;
}

/// Records a failure of the sync as a whole (the source cannot be reached) against every kind, so
/// describe and metrics show it.
fn record_failure(statuses: &Mutex<std::collections::BTreeMap<SyncKind, SyncStatus>>, reason: &str) {
    let mut all = statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = std::time::SystemTime::now();
    for kind in [SyncKind::GroupOffsets, SyncKind::ShareGroupOffsets, SyncKind::TopicConfigs, SyncKind::Partitions] {
        let s = all.entry(kind).or_default();
        s.last_failure = Some((now, reason.to_owned()));
        s.consecutive_failures += 1;
        s.runs += 1;
        s.failures += 1;
    }
}

/// The ACL bindings a mirror created, kept in `__mirror_state` (key type 3), so that a restarted or
/// new owner of the mirror's sync still deletes them when the source deletes them, and never
/// deletes bindings it did not create.
#[derive(Debug)]
struct StateAclLedger {
    shared: Arc<Shared>,
}

impl StateAclLedger {
    async fn write(&self, mirror: &str, bindings: &[AclBinding], created: bool) -> Result<(), LedgerError> {
        let value = created.then(|| AclRecord { created_ms: now_ms() });
        let records: Vec<StateRecord> =
            bindings.iter().map(|b| StateRecord::Acl { mirror: mirror.to_owned(), binding: b.clone(), value: value.clone() }).collect();
        self.shared.commit(&records).await.map_err(|e| LedgerError { mirror: mirror.to_owned(), reason: crate::report::error_chain(&e) })
    }
}

impl AclLedger for StateAclLedger {
    fn load<'a>(&'a self, mirror: &'a str) -> BoxFuture<'a, Result<BTreeSet<AclBinding>, LedgerError>> {
        Box::pin(async move { Ok(self.shared.model().acl_bindings_of(mirror)) })
    }

    fn record_created<'a>(&'a self, mirror: &'a str, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(self.write(mirror, bindings, true))
    }

    fn record_deleted<'a>(&'a self, mirror: &'a str, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), LedgerError>> {
        Box::pin(self.write(mirror, bindings, false))
    }
}

/// A mirror's topics as the sync sees them: from the state log, changed through it.
#[derive(Debug)]
struct MirrorTopicsView {
    shared: Arc<Shared>,
    mirror: String,
    source: Arc<Client>,
    /// New topics refused so far (logged once each).
    refused: Mutex<BTreeSet<String>>,
}

impl MirrorTopicsView {
    async fn grow(&self, topic: &str) -> Result<i32, ReplicationError> {
        let Some(record) = self.record(topic) else { return Ok(0) };
        // The sync refreshed the source metadata of every mirrored topic for this round (one
        // request); only a topic missing from it is asked about on its own.
        let cached = self.source.with_metadata(|m| m.topics.get(topic).map(|t| (t.topic_id, t.partitions.len() as i32)));
        let (topic_id, partitions) = match cached {
            Some(known) => known,
            None => {
                let d = replicator_topic::describe_source(&self.source, topic).await?;
                (d.topic_id, d.partitions)
            }
        };
        if topic_id != record.source_topic_id && !record.source_topic_id.is_nil() {
            // The runner fails the topic on its own (it checks the id at every setup).
            return Ok(record.partitions);
        }
        if partitions <= record.partitions {
            return Ok(record.partitions);
        }
        let _op = self.shared.ops.lock().await;
        // Re-read under the lock: an operator may have stopped the topic meanwhile.
        let Some(record) = self.record(topic) else { return Ok(0) };
        if partitions <= record.partitions {
            return Ok(record.partitions);
        }
        // A paused topic stays paused; its owner adds the partitions when it resumes.
        let state = if record.goal == TopicGoal::Pause { PartitionState::Paused } else { PartitionState::Initializing };
        let mut records: Vec<StateRecord> =
            partition_records(&self.mirror, topic, partitions, &state).into_iter().skip(usize::try_from(record.partitions).unwrap_or(0)).collect();
        records.push(StateRecord::Topic { topic: topic.to_owned(), value: Some(TopicRecord { partitions, updated_ms: now_ms(), ..record.clone() }) });
        self.shared
            .commit(&records)
            .await
            .map_err(|e| ReplicationError::DestinationTopic { topic: topic.to_owned(), detail: format!("cannot record the new partitions: {e}") })?;
        info!(mirror = %self.mirror, topic, from = record.partitions, to = partitions, "source partitions added; mirroring them");
        Ok(partitions)
    }

    /// The topic's record while it belongs to this mirror and is being mirrored (MIRROR or PAUSE).
    fn record(&self, topic: &str) -> Option<TopicRecord> {
        let model = self.shared.model();
        model.topics.get(topic).map(|t| t.record.clone()).filter(|r| r.mirror == self.mirror && matches!(r.goal, TopicGoal::Mirror | TopicGoal::Pause))
    }
}

impl MirroredTopics for MirrorTopicsView {
    fn topics(&self) -> Vec<String> {
        let model = self.shared.model();
        model.topics_of(&self.mirror).filter(|(_, t)| matches!(t.record.goal, TopicGoal::Mirror | TopicGoal::Pause)).map(|(n, _)| n.clone()).collect()
    }

    fn sync_partitions<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<i32, String>> {
        Box::pin(async move { self.grow(topic).await.map_err(|e| e.reason()) })
    }

    fn add_topic<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            // Any topic the log knows (another mirror's, or one stopped here) stays as it is.
            if self.shared.model().topics.contains_key(topic) {
                return Ok(());
            }
            let refused = match self.shared.add_topics(&self.mirror, &[regex::escape(topic)], &[], -1, false).await {
                Ok(outcomes) => outcomes.into_iter().find_map(|(_, outcome)| match outcome {
                    // Added meanwhile (by an operator, or by a sync that ran before a rebalance).
                    Err(MirrorError::TopicInMirror { .. }) | Ok(()) => None,
                    Err(e) => Some(e.to_string()),
                }),
                Err(e) => Some(e.to_string()),
            };
            let Some(reason) = refused else { return Ok(()) };
            // Refused again at every sync (a mirror loop, say): the sync status shows it each time,
            // the log once.
            let first = self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(topic.to_owned());
            if first {
                warn!(mirror = %self.mirror, topic, %reason, "new source topic matching the mirror's patterns not added");
            } else {
                debug!(mirror = %self.mirror, topic, %reason, "new source topic still not added");
            }
            Err(reason)
        })
    }
}
