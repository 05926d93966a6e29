//! One task per mirror topic owned by this instance: drives the copying of that topic (by its
//! mirror's [`Replicator`], shared by every topic of the mirror copied here) through the
//! lifecycle of spec §6, following the topic's goal as the state log says it (the supervisor hands
//! it every change), and records what it observes in `__mirror_state` (through the recorder, in
//! bulk with the other runners).
//!
//! ```text
//!   goal MIRROR ──► setup: the mirror's replicator (connects the source once per mirror),
//!        │          INITIALIZING in bulk: source topic (id unchanged?), destination topic;
//!        │          failures: FAILED (retried with backoff if they can pass)
//!        │        ► replicator.start_topic ── on each state change: note the partitions that
//!        │          changed (PREPARING, MIRRORING, FAILED + reason) for the recorder
//!        ├─ more partitions ──► replicator.sync_partitions (creates and copies the new ones)
//!        ├─ goal PAUSE ──► replicator.stop_topic ──► wait for the next goal
//!        ├─ goal STOP  ──► replicator.stop_topic ──► abort open mirrored transactions per partition
//!        │                 (retried until done) ──► STOPPED records ──► topic writable; task ends
//!        ├─ settings changed ──► stop_topic ──► setup again with the new settings (a new replicator)
//!        └─ cancel (shutdown, or the topic moved to another instance) ──► stop_topic; nothing written
//! ```
//!
//! Operators' transitions (PAUSED, STOPPING, …) are written by whichever instance served the
//! request, *before* this runner sees them; the runner's observations are written after they are
//! observed, and only while the topic's goal still is what the runner works toward (see
//! `recorder.rs`).

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use super::PartitionState;
use super::manager::Shared;
use super::recorder::Observation;
use super::records::TopicGoal;
use super::settings::MirrorSettings;
use super::stop::abort_open_transactions_of;
use crate::client::Backoff;
use crate::replicator::topic::SourceTopic;
use crate::replicator::{ReplicationError, Replicator, TopicSetup};

/// What the state log wants of a topic, as the supervisor last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicWant {
    /// The operator's goal.
    pub(crate) goal: TopicGoal,
    /// Partitions to copy (grows when the source adds partitions).
    pub(crate) partitions: i32,
    /// The mirror's settings that matter for copying (`Err`: they cannot be used, with why).
    pub(crate) settings: Result<MirrorSettings, String>,
}

/// The runner of one topic.
#[derive(Debug)]
pub(crate) struct TopicRunner {
    pub(crate) shared: Arc<Shared>,
    pub(crate) mirror: String,
    pub(crate) topic: String,
    pub(crate) source_topic_id: Uuid,
    /// Replication factor to create the destination topic with (-1: the destination's default).
    pub(crate) replication_factor: i16,
}

/// How a phase ended.
enum Next {
    /// The goal or the settings changed.
    Changed,
    Cancelled,
}

impl TopicRunner {
    /// Runs until the topic is STOPPED or `cancel` fires.
    pub(crate) async fn run(self, mut want: watch::Receiver<TopicWant>, cancel: CancellationToken) {
        loop {
            let current = want.borrow_and_update().clone();
            let next = match current.goal {
                TopicGoal::Mirror => self.mirror_until_changed(&current, &mut want, &cancel).await,
                TopicGoal::Pause => wait_change(&mut want, &cancel).await,
                TopicGoal::Stop => {
                    self.stop(current.partitions, &cancel).await;
                    return;
                }
                TopicGoal::Stopped => return,
            };
            if let Next::Cancelled = next {
                return;
            }
        }
    }

    /// The mirror's replicator, and the topic set up on it (both checked); typed errors so that
    /// retrying is decided by the error's kind.
    async fn setup(&self, want: &TopicWant) -> Result<(Arc<Replicator>, SourceTopic), SetupError> {
        let settings = want.settings.as_ref().map_err(|reason| SetupError::Settings(reason.clone()))?;
        let replicator = self.shared.replicator_for(&self.mirror, settings).await.map_err(SetupError::Replication)?;
        let expected = (!self.source_topic_id.is_nil()).then_some(self.source_topic_id);
        let setup = TopicSetup { topic: self.topic.clone(), expected, replication_factor: self.replication_factor };
        let described = replicator.setup_topic(setup).await.map_err(SetupError::Replication)?;
        Ok((replicator, described))
    }

    async fn mirror_until_changed(&self, current: &TopicWant, want: &mut watch::Receiver<TopicWant>, cancel: &CancellationToken) -> Next {
        let mut backoff = Backoff::new(&self.shared.config.retry_backoff);
        let mut attempt: i16 = 0;
        let (replicator, described) = loop {
            let setup = tokio::select! {
                biased;
                () = cancel.cancelled() => return Next::Cancelled,
                c = want.changed() => return changed(c),
                s = self.setup(current) => s,
            };
            match setup {
                Ok(ready) => break ready,
                Err(e) => {
                    let retriable = e.is_retriable();
                    let reason = e.reason();
                    attempt = attempt.saturating_add(1);
                    warn!(mirror = %self.mirror, topic = %self.topic, %reason, retriable, "mirror topic setup failed");
                    let retry = if retriable { attempt } else { -1 };
                    self.observe_all(current.partitions, PartitionState::Failed { reason }, retry);
                    if !retriable {
                        return wait_change(want, cancel).await;
                    }
                    let delay = backoff.next_delay().unwrap_or(self.shared.config.retry_backoff.max);
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return Next::Cancelled,
                        c = want.changed() => return changed(c),
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        };
        debug!(mirror = %self.mirror, topic = %self.topic, "mirroring");
        let statuses = replicator.start_topic(described);
        let mut partitions = current.partitions;
        let next = loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break Next::Cancelled,
                c = want.changed() => {
                    if c.is_err() {
                        break Next::Cancelled;
                    }
                    let now = want.borrow().clone();
                    if now.goal != current.goal || now.settings != current.settings {
                        break Next::Changed;
                    }
                    if now.partitions > partitions {
                        // The source grew (recorded by the mirror's sync): create and copy the new
                        // partitions; a failure shows on the partitions and is retried at the next change.
                        match replicator.sync_partitions(&self.topic).await {
                            Ok(n) => partitions = n.max(partitions),
                            Err(e) => warn!(mirror = %self.mirror, topic = %self.topic, reason = %e.reason(), "could not add the new partitions"),
                        }
                    }
                }
                () = statuses.changed() => {
                    for status in statuses.take_changed() {
                        let state = PartitionState::from(&status.state);
                        let retry = if matches!(state, PartitionState::Failed { .. }) { status.retry_attempt } else { 0 };
                        self.note(status.partition, state, retry);
                    }
                }
            }
        };
        replicator.stop_topic(&self.topic).await;
        self.shared.recorder.forget(&self.topic);
        next
    }

    /// Notes an observed state of every partition for the recorder.
    fn observe_all(&self, partitions: i32, state: PartitionState, retry_attempt: i16) {
        for p in 0..partitions {
            self.note(p, state.clone(), retry_attempt);
        }
    }

    /// Notes an observed partition state; the recorder writes it while the topic's goal is still
    /// MIRROR (and the topic the same).
    fn note(&self, partition: i32, state: PartitionState, retry_attempt: i16) {
        let observation = Observation { mirror: self.mirror.clone(), source_topic_id: self.source_topic_id, state, retry_attempt };
        self.shared.recorder.note(&self.topic, partition, observation);
    }

    /// STOPPING: abort what is open, then STOPPED. Retries until done or cancelled (a restart
    /// resumes it: the goal STOP is in the log). True once STOPPED.
    async fn stop(&self, partitions: i32, cancel: &CancellationToken) -> bool {
        let mut backoff = Backoff::new(&self.shared.config.retry_backoff);
        let mut pending: Vec<i32> = (0..partitions).collect();
        while !pending.is_empty() {
            let mut failed = Vec::new();
            let outcomes = tokio::select! {
                biased;
                () = cancel.cancelled() => return false,
                r = abort_open_transactions_of(&self.shared.destination, &self.topic, &pending) => r,
            };
            for &p in &pending {
                match outcomes.get(&p) {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        warn!(mirror = %self.mirror, topic = %self.topic, partition = p, error = %e, "stopping: aborting open transactions failed; retrying");
                        failed.push(p);
                    }
                    None => failed.push(p),
                }
            }
            pending = failed;
            if !pending.is_empty() {
                let delay = backoff.next_delay().unwrap_or(self.shared.config.retry_backoff.max);
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return false,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
        loop {
            let result = {
                let _op = self.shared.ops.lock().await;
                self.shared.finish_stop(&self.mirror, &self.topic).await
            };
            match result {
                Ok(()) => {
                    info!(mirror = %self.mirror, topic = %self.topic, "STOPPED: the topic is writable");
                    return true;
                }
                Err(e) => {
                    warn!(mirror = %self.mirror, topic = %self.topic, error = %e, "could not record STOPPED; retrying");
                    let delay = backoff.next_delay().unwrap_or(self.shared.config.retry_backoff.max);
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return false,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}

async fn wait_change(want: &mut watch::Receiver<TopicWant>, cancel: &CancellationToken) -> Next {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Next::Cancelled,
        c = want.changed() => changed(c),
    }
}

/// A closed want channel means the supervisor is gone: stop as if cancelled.
fn changed(result: Result<(), watch::error::RecvError>) -> Next {
    if result.is_ok() { Next::Changed } else { Next::Cancelled }
}

/// Why a topic could not be set up.
#[derive(Debug)]
enum SetupError {
    /// The mirror's stored settings cannot be used (e.g. secrets sealed with another key).
    Settings(String),
    /// Source, destination or topic problems, classified by the replicator's error.
    Replication(ReplicationError),
}

impl SetupError {
    fn is_retriable(&self) -> bool {
        match self {
            Self::Settings(_) => false,
            Self::Replication(e) => e.is_retriable(),
        }
    }

    fn reason(&self) -> String {
        match self {
            Self::Settings(reason) => reason.clone(),
            Self::Replication(e) => e.reason(),
        }
    }
}
