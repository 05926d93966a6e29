//! Which topics are mirrored, for the proxy's write policy.
//!
//! The proxy asks per topic; the answer names the mirror and the state so that a refusal can say
//! both. [`InMemoryMirrorLookup`] is the implementation until `__mirror_state` backs it (issue 6).

use std::collections::HashMap;
use std::sync::RwLock;

use super::PartitionState;

/// A mirrored topic as the write policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirroredTopic {
    /// The mirror the topic belongs to.
    pub mirror: String,
    /// The topic's state (the least advanced of its partitions').
    pub state: PartitionState,
}

/// Answers "is this topic mirrored, by which mirror, in which state?".
pub trait MirrorLookup: Send + Sync + std::fmt::Debug {
    /// The mirror of `topic`, if it is mirrored (in any state, STOPPED included).
    fn mirrored_topic(&self, topic: &str) -> Option<MirroredTopic>;

    /// True if clients must not write to `topic` (mirrored and not STOPPED).
    fn is_read_only(&self, topic: &str) -> bool {
        self.mirrored_topic(topic).is_some_and(|t| t.state.is_read_only())
    }
}

/// A lookup kept in memory, changed by whoever owns it.
#[derive(Debug, Default)]
pub struct InMemoryMirrorLookup {
    topics: RwLock<HashMap<String, MirroredTopic>>,
}

impl InMemoryMirrorLookup {
    /// No topic mirrored.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `topic` as mirrored by `mirror` in `state` (replacing what was there).
    pub fn set(&self, topic: &str, mirror: &str, state: PartitionState) {
        let mut topics = self.topics.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        topics.insert(topic.to_owned(), MirroredTopic { mirror: mirror.to_owned(), state });
    }

    /// Forgets `topic`.
    pub fn remove(&self, topic: &str) {
        self.topics.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(topic);
    }
}

impl MirrorLookup for InMemoryMirrorLookup {
    fn mirrored_topic(&self, topic: &str) -> Option<MirroredTopic> {
        self.topics.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(topic).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_until_stopped() {
        let lookup = InMemoryMirrorLookup::new();
        assert!(!lookup.is_read_only("orders"));
        lookup.set("orders", "dr", PartitionState::Mirroring);
        assert!(lookup.is_read_only("orders"));
        lookup.set("orders", "dr", PartitionState::Paused);
        assert!(lookup.is_read_only("orders"));
        lookup.set("orders", "dr", PartitionState::Stopped);
        assert!(!lookup.is_read_only("orders"));
        assert_eq!(lookup.mirrored_topic("orders").unwrap().mirror, "dr");
    }
}
