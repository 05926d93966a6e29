//! Recording observed partition states in `__mirror_state`, in bulk: runners note what their
//! replicator reports (only partitions whose state changed), and one task per instance writes
//! everything noted since its last write in one commit.
//!
//! ```text
//!   TopicRunner ── note(topic, partition, state) ──► pending (latest per partition)
//!   TopicRunner ── note(...) ─────────────────────┘      │ woken
//!                                                         ▼
//!                          recorder task: ops lock ─► keep what is still current (the topic's goal
//!                          is MIRROR, same mirror and source topic id, and the log does not say it
//!                          already) ─► one commit ─► unlock; a failed commit is retried with backoff
//! ```
//!
//! Why in bulk: thousands of partitions change state at about the same time (a mirror of a large
//! topic set starting, an instance taking work over); one commit per partition, each waiting for
//! the state topic's tail, would take minutes.
//!
//! An observation is written only while the topic's goal still is what the runner worked toward,
//! checked under the operation lock against the model, so it never overwrites a newer transition
//! this instance knows of (an operator's PAUSE or STOP, say).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tracing::warn;
use uuid::Uuid;

use super::PartitionState;
use super::manager::Shared;
use super::records::{PartitionRecord, StateRecord, TopicGoal};
use crate::client::Backoff;

/// What a runner observed of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observation {
    /// The mirror the runner copies the topic for.
    pub(crate) mirror: String,
    /// The source topic id the runner was started for.
    pub(crate) source_topic_id: Uuid,
    /// The state seen.
    pub(crate) state: PartitionState,
    /// The retry count shown while FAILED (0 otherwise).
    pub(crate) retry_attempt: i16,
}

/// Observations waiting to be written.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    pending: Mutex<BTreeMap<(String, i32), Observation>>,
    wake: Notify,
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<(String, i32), Observation>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes `observation` of `topic`-`partition` (replacing one not yet written).
    pub(crate) fn note(&self, topic: &str, partition: i32, observation: Observation) {
        self.lock().insert((topic.to_owned(), partition), observation);
        self.wake.notify_one();
    }

    /// Drops what is noted of `topic` and not yet written (its runner stopped).
    pub(crate) fn forget(&self, topic: &str) {
        self.lock().retain(|(t, _), _| t != topic);
    }
}

/// Writes noted observations until the manager stops.
pub(crate) async fn run(shared: Arc<Shared>) {
    let recorder = &shared.recorder;
    let mut backoff: Option<Backoff> = None;
    loop {
        tokio::select! {
            biased;
            () = shared.cancel.cancelled() => return,
            () = recorder.wake.notified() => {}
        }
        let batch = std::mem::take(&mut *recorder.lock());
        if batch.is_empty() {
            continue;
        }
        let _op = shared.ops.lock().await;
        let records: Vec<StateRecord> = {
            let model = shared.model();
            batch
                .iter()
                .filter(|((topic, partition), o)| {
                    let Some(entry) = model.topics.get(topic) else { return false };
                    let current = entry.partitions.get(partition).map(|r| (&r.state, r.retry_attempt));
                    entry.record.goal == TopicGoal::Mirror
                        && entry.record.mirror == o.mirror
                        && (o.source_topic_id.is_nil() || entry.record.source_topic_id == o.source_topic_id)
                        && current != Some((&o.state, o.retry_attempt))
                })
                .map(|((topic, partition), o)| StateRecord::Partition {
                    topic: topic.clone(),
                    partition: *partition,
                    value: Some(PartitionRecord {
                        mirror: o.mirror.clone(),
                        state: o.state.clone(),
                        retry_attempt: o.retry_attempt,
                        updated_ms: super::now_ms(),
                    }),
                })
                .collect()
        };
        if records.is_empty() {
            continue;
        }
        match shared.commit(&records).await {
            Ok(()) => backoff = None,
            Err(e) => {
                warn!(records = records.len(), error = %crate::report::error_chain(&e), "could not record partition states; retrying");
                {
                    // Put back what nothing newer replaced meanwhile.
                    let mut pending = recorder.lock();
                    for (key, o) in batch {
                        pending.entry(key).or_insert(o);
                    }
                }
                drop(_op);
                let delay = backoff.get_or_insert_with(|| Backoff::new(&shared.config.retry_backoff)).next_delay().unwrap_or(shared.config.retry_backoff.max);
                tokio::select! {
                    () = shared.cancel.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                recorder.wake.notify_one();
            }
        }
    }
}
