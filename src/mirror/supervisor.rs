//! The supervisor: keeps this instance's running work equal to what the state log and the instance
//! group say it should be.
//!
//! ```text
//!   `applied` moved (any state record) ─┐
//!   ownership changed (ownership.rs) ───┼─► reconcile:
//!   every second (reap ended runners) ──┘     topics not STOPPED that this instance owns
//!                                               ─► one TopicRunner each (runner.rs), told the
//!                                                  topic's goal, partitions and settings
//!                                             mirrors with topics being mirrored that it owns
//!                                               ─► one sync task each (sync.rs)
//!                                             everything else ─► cancelled, and awaited
//!   revoke (before the instance rejoins the group) ─► ownership is None: everything stops;
//!                                                      answered once it has stopped
//! ```
//!
//! A runner stopped because its topic moved to another instance writes nothing more; the new
//! owner's runner starts from what the destination holds (PREPARING reconciles).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};
use uuid::Uuid;

use super::manager::Shared;
use super::ownership::{Revoke, mirror_key, topic_key};
use super::records::{TopicFilter, TopicGoal};
use super::runner::{TopicRunner, TopicWant};
use super::settings::MirrorSettings;
use super::sync::run_mirror_sync;

/// How often ended runners are noticed when nothing else happens.
const REAP_INTERVAL: Duration = Duration::from_secs(1);

/// A running task and how to stop it.
#[derive(Debug)]
struct Running {
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

impl Running {
    /// Cancels every task first, then waits for all (each runner's shutdown waits for its writes
    /// in flight; done one after the other, a revoke of many topics would add those waits up).
    async fn stop_all(running: impl IntoIterator<Item = Self>) {
        let handles: Vec<JoinHandle<()>> = running
            .into_iter()
            .map(|r| {
                r.cancel.cancel();
                r.handle
            })
            .collect();
        futures_util::future::join_all(handles).await;
    }
}

/// What identifies a topic runner beyond its topic: a topic removed and added again (to another
/// mirror, or after the source topic was re-created) gets a new runner.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TopicIdentity {
    mirror: String,
    source_topic_id: Uuid,
    replication_factor: i16,
}

/// What a mirror's sync task is started with; any change restarts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyncWant {
    pub(crate) settings: MirrorSettings,
    pub(crate) filter: TopicFilter,
}

/// The supervisor of one instance.
#[derive(Debug)]
pub(crate) struct Supervisor {
    shared: Arc<Shared>,
    revokes: mpsc::Receiver<oneshot::Sender<()>>,
    topics: HashMap<String, (TopicIdentity, watch::Sender<TopicWant>, Running)>,
    syncs: HashMap<String, (SyncWant, Running)>,
}

impl Supervisor {
    /// A supervisor, and the revoke callback the membership calls before rejoining.
    pub(crate) fn new(shared: Arc<Shared>) -> (Self, Revoke) {
        let (tx, revokes) = mpsc::channel::<oneshot::Sender<()>>(1);
        let revoke: Revoke = Arc::new(move || {
            let tx = tx.clone();
            Box::pin(async move {
                let (ack, done) = oneshot::channel();
                if tx.send(ack).await.is_ok() {
                    let _ = done.await;
                }
            })
        });
        (Self { shared, revokes, topics: HashMap::new(), syncs: HashMap::new() }, revoke)
    }

    /// Runs until `cancel`, then stops every runner and sync task and waits for them.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        let mut applied = self.shared.applied.subscribe();
        let mut ownership = self.shared.ownership.subscribe();
        let mut reap = tokio::time::interval(REAP_INTERVAL);
        reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.reconcile().await;
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                Some(ack) = self.revokes.recv() => {
                    self.reconcile().await;
                    debug!(runners = self.topics.len(), syncs = self.syncs.len(), "owned work revoked");
                    let _ = ack.send(());
                }
                _ = applied.changed() => {}
                _ = ownership.changed() => {}
                _ = reap.tick() => {}
            }
        }
        let topics = self.topics.drain().map(|(_, (_, _, r))| r);
        let syncs = self.syncs.drain().map(|(_, (_, r))| r);
        Running::stop_all(topics.chain(syncs)).await;
    }

    /// Starts, updates and stops runners and sync tasks to match the model and the ownership.
    async fn reconcile(&mut self) {
        self.shared.apply_throttles();
        let ownership = self.shared.ownership.borrow().clone();
        let owns = |key: &str| ownership.as_ref().is_some_and(|o| o.owns(key));
        let (wanted_topics, wanted_syncs) = {
            let model = self.shared.model();
            let mut topics = BTreeMap::new();
            let mut syncs = BTreeMap::new();
            for (name, entry) in &model.topics {
                if entry.record.goal == TopicGoal::Stopped || !owns(&topic_key(name)) {
                    continue;
                }
                let settings = model
                    .mirrors
                    .get(&entry.record.mirror)
                    .map_or_else(|| Err(format!("mirror `{}` is not defined", entry.record.mirror)), |m| m.settings.clone())
                    .map(|s| s.for_copying());
                let identity = TopicIdentity {
                    mirror: entry.record.mirror.clone(),
                    source_topic_id: entry.record.source_topic_id,
                    replication_factor: entry.record.replication_factor,
                };
                topics.insert(name.clone(), (identity, TopicWant { goal: entry.record.goal, partitions: entry.record.partitions, settings }));
            }
            for (name, mirror) in &model.mirrors {
                let active = model.topics_of(name).any(|(_, t)| matches!(t.record.goal, TopicGoal::Mirror | TopicGoal::Pause));
                if let (true, true, Ok(settings)) = (active, owns(&mirror_key(name)), &mirror.settings) {
                    syncs.insert(name.clone(), SyncWant { settings: settings.for_sync(), filter: mirror.filter.clone() });
                }
            }
            (topics, syncs)
        };

        let stale: Vec<String> = self
            .topics
            .iter()
            .filter(|(name, (identity, _, running))| running.handle.is_finished() || wanted_topics.get(*name).is_none_or(|(wanted, _)| wanted != identity))
            .map(|(name, _)| name.clone())
            .collect();
        let stopping: Vec<Running> = stale
            .iter()
            .filter_map(|name| {
                debug!(topic = %name, "topic runner stopping here (not owned, stopped, or ended)");
                self.topics.remove(name).map(|(_, _, r)| r)
            })
            .collect();
        Running::stop_all(stopping).await;
        for (name, (identity, want)) in wanted_topics {
            match self.topics.get(&name) {
                Some((_, want_tx, _)) => {
                    want_tx.send_if_modified(|current| {
                        let changed = *current != want;
                        if changed {
                            *current = want.clone();
                        }
                        changed
                    });
                }
                None => {
                    info!(mirror = %identity.mirror, topic = %name, goal = want.goal.name(), "this instance runs the mirror topic");
                    let (tx, rx) = watch::channel(want);
                    let cancel = self.shared.cancel.child_token();
                    let runner = TopicRunner {
                        shared: self.shared.clone(),
                        mirror: identity.mirror.clone(),
                        topic: name.clone(),
                        source_topic_id: identity.source_topic_id,
                        replication_factor: identity.replication_factor,
                    };
                    let handle = tokio::spawn(runner.run(rx, cancel.clone()));
                    self.topics.insert(name, (identity, tx, Running { cancel, handle }));
                }
            }
        }

        let stale: Vec<String> = self
            .syncs
            .iter()
            .filter(|(name, (want, running))| running.handle.is_finished() || wanted_syncs.get(*name) != Some(want))
            .map(|(name, _)| name.clone())
            .collect();
        let stopping: Vec<Running> = stale.iter().filter_map(|name| self.syncs.remove(name).map(|(_, r)| r)).collect();
        Running::stop_all(stopping).await;
        for name in &stale {
            self.shared.sync_statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(name);
        }
        for (name, want) in wanted_syncs {
            if self.syncs.contains_key(&name) {
                continue;
            }
            info!(mirror = %name, "this instance runs the mirror's sync");
            let cancel = self.shared.cancel.child_token();
            let handle = tokio::spawn(run_mirror_sync(self.shared.clone(), name.clone(), want.clone(), cancel.clone()));
            self.syncs.insert(name, (want, Running { cancel, handle }));
        }
    }
}
