//! What the replicator reports of each partition it copies: its copy state and offsets, kept per
//! topic, with a signal when a partition's *state* changes (not its offsets), so whoever records
//! states (the mirror's runner) wakes only for changes and reads only the partitions that changed.
//!
//! The replicator owns these types; the mirror maps [`CopyState`] onto its partition lifecycle
//! (spec §6), which adds the states only an operator causes (PAUSED, STOPPING, STOPPED).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// How far the replicator has got with one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyState {
    /// The destination topic is being created or checked.
    Initializing,
    /// The destination partition is being aligned with the source (resume point, gaps).
    Preparing,
    /// Copying.
    Mirroring,
    /// Failed; the reason says why.
    Failed {
        /// What went wrong, for operators (names the offset where it matters).
        reason: String,
    },
}

impl CopyState {
    /// The name operators see.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Initializing => "INITIALIZING",
            Self::Preparing => "PREPARING",
            Self::Mirroring => "MIRRORING",
            Self::Failed { .. } => "FAILED",
        }
    }
}

impl fmt::Display for CopyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed { reason } => write!(f, "FAILED ({reason})"),
            other => f.write_str(other.name()),
        }
    }
}

/// One partition as the replicator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Topic name (same on both sides).
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// State.
    pub state: CopyState,
    /// Source high watermark, as last seen (-1 before the first fetch).
    pub source_high_watermark: i64,
    /// Source last stable offset, as last seen (-1 before the first fetch).
    pub source_last_stable_offset: i64,
    /// Next destination offset to write (the destination log end offset as far as we wrote it).
    pub destination_offset: i64,
    /// While FAILED: automatic retries so far (1 for the first failure), -1 if the failure is not
    /// retried (it needs an operator).
    pub retry_attempt: i16,
    /// The newest record timestamp written to the destination (ms; -1 before the first write).
    pub written_timestamp_ms: i64,
}

impl PartitionStatus {
    /// A partition not looked at yet.
    pub fn new(topic: &str, partition: i32, state: CopyState) -> Self {
        Self {
            topic: topic.to_owned(),
            partition,
            state,
            source_high_watermark: -1,
            source_last_stable_offset: -1,
            destination_offset: 0,
            retry_attempt: 0,
            written_timestamp_ms: -1,
        }
    }

    /// Offsets not copied yet: up to the LSO under read_committed, else up to the high watermark.
    pub fn lag(&self, read_committed: bool) -> i64 {
        let end = if read_committed { self.source_last_stable_offset } else { self.source_high_watermark };
        (end - self.destination_offset).max(0)
    }

    /// How far behind in time the destination is, seconds, at `now_ms`: 0 while nothing is to be
    /// copied, else the age of the newest record written (what the destination lacks is newer
    /// than that). A partition that lags before its first write counts from `now_ms` (0).
    pub fn lag_seconds(&self, read_committed: bool, now_ms: i64) -> f64 {
        if self.lag(read_committed) == 0 || self.written_timestamp_ms < 0 {
            return 0.0;
        }
        (now_ms - self.written_timestamp_ms).max(0) as f64 / 1000.0
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The statuses of one topic's partitions, and which of them changed state since last read.
#[derive(Debug)]
pub struct TopicStatuses {
    topic: String,
    partitions: Mutex<BTreeMap<i32, Arc<Mutex<PartitionStatus>>>>,
    changed: Mutex<BTreeSet<i32>>,
    notify: Notify,
}

impl TopicStatuses {
    pub(crate) fn new(topic: &str) -> Arc<Self> {
        Arc::new(Self { topic: topic.to_owned(), partitions: Mutex::new(BTreeMap::new()), changed: Mutex::new(BTreeSet::new()), notify: Notify::new() })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The handle of `partition`, created in `state` if new (an existing one is set to `state`).
    pub(crate) fn partition(self: &Arc<Self>, partition: i32, state: CopyState) -> StatusHandle {
        let (cell, new) = {
            let mut partitions = lock(&self.partitions);
            match partitions.get(&partition) {
                Some(cell) => (cell.clone(), false),
                None => {
                    let cell = Arc::new(Mutex::new(PartitionStatus::new(&self.topic, partition, state.clone())));
                    partitions.insert(partition, cell.clone());
                    (cell, true)
                }
            }
        };
        let handle = StatusHandle { topic: self.clone(), partition, cell };
        if new {
            self.mark(partition);
        } else {
            handle.set_state(state, 0);
        }
        handle
    }

    /// Every partition's status, by index.
    pub fn snapshot(&self) -> Vec<PartitionStatus> {
        lock(&self.partitions).values().map(|c| lock(c).clone()).collect()
    }

    /// The status of `partition`.
    pub fn get(&self, partition: i32) -> Option<PartitionStatus> {
        lock(&self.partitions).get(&partition).map(|c| lock(c).clone())
    }

    /// Waits until some partition changed state since the last [`TopicStatuses::take_changed`].
    ///
    /// # Cancel safety
    /// Cancel safe: a change is kept until taken.
    pub async fn changed(&self) {
        loop {
            let notified = self.notify.notified();
            if !lock(&self.changed).is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// The partitions that changed state since the last call, with their status now.
    pub fn take_changed(&self) -> Vec<PartitionStatus> {
        let changed = std::mem::take(&mut *lock(&self.changed));
        let partitions = lock(&self.partitions);
        changed.into_iter().filter_map(|p| partitions.get(&p).map(|c| lock(c).clone())).collect()
    }

    fn mark(&self, partition: i32) {
        lock(&self.changed).insert(partition);
        self.notify.notify_one();
    }
}

/// One partition's status, as its copier and its fetcher update it.
#[derive(Debug, Clone)]
pub struct StatusHandle {
    topic: Arc<TopicStatuses>,
    partition: i32,
    cell: Arc<Mutex<PartitionStatus>>,
}

impl StatusHandle {
    /// A handle not attached to any topic's statuses (tests).
    #[cfg(test)]
    pub(crate) fn detached(topic: &str, partition: i32) -> Self {
        TopicStatuses::new(topic).partition(partition, CopyState::Preparing)
    }

    /// Moves to `state` (with the retry count shown while FAILED); a change of state is signalled.
    /// Returns the state before.
    pub(crate) fn set_state(&self, state: CopyState, retry_attempt: i16) -> CopyState {
        let mut s = lock(&self.cell);
        let before = std::mem::replace(&mut s.state, state);
        let changed = before != s.state || s.retry_attempt != retry_attempt;
        s.retry_attempt = retry_attempt;
        drop(s);
        if changed {
            self.topic.mark(self.partition);
        }
        before
    }

    /// Records what the source said (negative values are "not said" and leave the old ones).
    pub(crate) fn set_source(&self, high_watermark: i64, last_stable_offset: i64) {
        let mut s = lock(&self.cell);
        if high_watermark >= 0 {
            s.source_high_watermark = high_watermark;
        }
        if last_stable_offset >= 0 {
            s.source_last_stable_offset = last_stable_offset;
        }
    }

    /// Records the newest record timestamp written (kept if older than the one before).
    pub(crate) fn set_written_timestamp(&self, timestamp_ms: i64) {
        let mut status = lock(&self.cell);
        status.written_timestamp_ms = status.written_timestamp_ms.max(timestamp_ms);
    }

    /// Records the next destination offset.
    pub(crate) fn set_destination(&self, next_offset: i64) {
        lock(&self.cell).destination_offset = next_offset;
    }

    /// The status now.
    pub fn get(&self) -> PartitionStatus {
        lock(&self.cell).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only state changes are signalled and taken, once each; offsets are not.
    #[tokio::test]
    async fn state_changes_are_signalled_offsets_are_not() {
        let topic = TopicStatuses::new("t");
        let a = topic.partition(0, CopyState::Preparing);
        let b = topic.partition(1, CopyState::Preparing);
        assert_eq!(topic.take_changed().len(), 2, "new partitions count as changed");
        a.set_destination(10);
        a.set_source(12, 11);
        assert!(topic.take_changed().is_empty());
        b.set_state(CopyState::Mirroring, 0);
        b.set_state(CopyState::Mirroring, 0);
        topic.changed().await;
        let changed = topic.take_changed();
        assert_eq!(changed.iter().map(|s| (s.partition, s.state.clone())).collect::<Vec<_>>(), vec![(1, CopyState::Mirroring)]);
        // The same state with another retry count is a change too (describe shows the count).
        b.set_state(CopyState::Failed { reason: "x".into() }, 1);
        b.set_state(CopyState::Failed { reason: "x".into() }, 2);
        assert_eq!(topic.take_changed()[0].retry_attempt, 2);
        assert_eq!(topic.get(0).unwrap().lag(true), 1);
        assert_eq!(topic.snapshot().len(), 2);
    }
}
