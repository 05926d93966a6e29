//! The in-memory image of `__mirror_state`: mirrors, their topics and partition states, built by
//! applying records in log order. Every change goes through [`Model::apply`] as the state topic's
//! tail reads it back (this instance's writes and every other instance's alike), so what readers
//! see (the write policy, describe, the supervisor choosing runners) never runs ahead of the log
//! and is the same on every instance once it has read as far.

use std::collections::BTreeMap;

use super::records::{MirrorDefinition, PartitionRecord, StateRecord, TopicFilter, TopicGoal, TopicRecord};
use super::settings::{MirrorSettings, SecretKey};
use super::{MirrorLookup, MirroredTopic, PartitionState};

/// One mirror.
#[derive(Debug, Clone)]
pub struct MirrorEntry {
    /// As stored.
    pub definition: MirrorDefinition,
    /// Decoded settings; `Err` with the reason if the stored ones cannot be opened (wrong secret
    /// key): the mirror's topics then fail until an operator alters the settings.
    pub settings: Result<MirrorSettings, String>,
    /// The topic patterns added to the mirror (empty until a pattern is added).
    pub filter: TopicFilter,
}

/// One topic of a mirror.
#[derive(Debug, Clone)]
pub struct TopicEntry {
    /// As stored.
    pub record: TopicRecord,
    /// Partition states, by index.
    pub partitions: BTreeMap<i32, PartitionRecord>,
}

impl TopicEntry {
    /// The state the write policy and `--list` see: STOPPED only once the topic's goal is
    /// STOPPED, else the least advanced partition's (FAILED first).
    pub fn summary_state(&self) -> PartitionState {
        if self.record.goal == TopicGoal::Stopped {
            return PartitionState::Stopped;
        }
        let rank = |s: &PartitionState| match s {
            PartitionState::Failed { .. } => 0,
            PartitionState::Stopping => 1,
            PartitionState::Initializing => 2,
            PartitionState::Preparing => 3,
            PartitionState::Paused => 4,
            PartitionState::Mirroring => 5,
            PartitionState::Stopped => 6,
        };
        let fallback = match self.record.goal {
            TopicGoal::Pause => PartitionState::Paused,
            TopicGoal::Stop => PartitionState::Stopping,
            _ => PartitionState::Initializing,
        };
        let least = self.partitions.values().map(|p| &p.state).min_by_key(|s| rank(s)).cloned().unwrap_or_else(|| fallback.clone());
        // A partition still STOPPED from an earlier round must not make a re-added topic writable.
        if least == PartitionState::Stopped { fallback } else { least }
    }
}

/// Everything loaded from `__mirror_state`.
#[derive(Debug, Default)]
pub struct Model {
    /// Mirrors by name.
    pub mirrors: BTreeMap<String, MirrorEntry>,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicEntry>,
    /// Partition records seen before their topic record (a compacted log keeps the latest of each
    /// key, not their order); attached when the topic record comes.
    orphans: BTreeMap<String, BTreeMap<i32, PartitionRecord>>,
    /// Filter records seen before their mirror record, for the same reason.
    orphan_filters: BTreeMap<String, TopicFilter>,
}

impl Model {
    /// Applies one record (after it was written, or while loading).
    pub fn apply(&mut self, record: &StateRecord, key: Option<&SecretKey>) {
        match record {
            StateRecord::Mirror { name, value: Some(definition) } => {
                let settings = MirrorSettings::unseal(name, &definition.configs, key).map_err(|e| e.to_string());
                let filter = self.mirrors.remove(name).map(|m| m.filter).or_else(|| self.orphan_filters.remove(name)).unwrap_or_default();
                self.mirrors.insert(name.clone(), MirrorEntry { definition: definition.clone(), settings, filter });
            }
            StateRecord::Mirror { name, value: None } => {
                self.mirrors.remove(name);
                self.orphan_filters.remove(name);
            }
            StateRecord::Filter { mirror, value } => {
                let filter = value.clone().unwrap_or_default();
                match self.mirrors.get_mut(mirror) {
                    Some(m) => m.filter = filter,
                    None if value.is_some() => {
                        self.orphan_filters.insert(mirror.clone(), filter);
                    }
                    None => {
                        self.orphan_filters.remove(mirror);
                    }
                }
            }
            StateRecord::Topic { topic, value: Some(record) } => {
                let entry = self.topics.entry(topic.clone()).or_insert_with(|| TopicEntry { record: record.clone(), partitions: BTreeMap::new() });
                entry.record = record.clone();
                if let Some(orphans) = self.orphans.remove(topic) {
                    entry.partitions.extend(orphans);
                }
            }
            StateRecord::Topic { topic, value: None } => {
                self.topics.remove(topic);
                self.orphans.remove(topic);
            }
            StateRecord::Partition { topic, partition, value } => {
                let slot = match self.topics.get_mut(topic) {
                    Some(t) => &mut t.partitions,
                    None => self.orphans.entry(topic.clone()).or_default(),
                };
                match value {
                    Some(v) => {
                        slot.insert(*partition, v.clone());
                    }
                    None => {
                        slot.remove(partition);
                    }
                }
            }
        }
    }

    /// The topics of `mirror`, by name.
    pub fn topics_of<'a>(&'a self, mirror: &'a str) -> impl Iterator<Item = (&'a String, &'a TopicEntry)> + 'a {
        self.topics.iter().filter(move |(_, t)| t.record.mirror == mirror)
    }

    /// The write policy's view of `topic`.
    pub fn mirrored_topic(&self, topic: &str) -> Option<MirroredTopic> {
        let entry = self.topics.get(topic)?;
        Some(MirroredTopic { mirror: entry.record.mirror.clone(), state: entry.summary_state() })
    }
}

impl MirrorLookup for std::sync::Mutex<Model> {
    fn mirrored_topic(&self, topic: &str) -> Option<MirroredTopic> {
        self.lock().unwrap_or_else(std::sync::PoisonError::into_inner).mirrored_topic(topic)
    }
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;

    fn topic(goal: TopicGoal) -> StateRecord {
        StateRecord::Topic {
            topic: "orders".to_owned(),
            value: Some(TopicRecord { mirror: "dr".to_owned(), source_topic_id: Uuid::nil(), partitions: 2, goal, updated_ms: 0 }),
        }
    }

    fn partition(p: i32, state: PartitionState) -> StateRecord {
        StateRecord::Partition {
            topic: "orders".to_owned(),
            partition: p,
            value: Some(PartitionRecord { mirror: "dr".to_owned(), state, retry_attempt: 0, updated_ms: 0 }),
        }
    }

    #[test]
    fn read_only_from_add_until_stopped() {
        let mut model = Model::default();
        assert!(model.mirrored_topic("orders").is_none());
        model.apply(&topic(TopicGoal::Mirror), None);
        assert!(model.mirrored_topic("orders").unwrap().state.is_read_only());
        model.apply(&partition(0, PartitionState::Mirroring), None);
        model.apply(&partition(1, PartitionState::Preparing), None);
        assert_eq!(model.mirrored_topic("orders").unwrap().state, PartitionState::Preparing);
        model.apply(&topic(TopicGoal::Stop), None);
        model.apply(&partition(0, PartitionState::Stopped), None);
        model.apply(&partition(1, PartitionState::Stopped), None);
        // Partitions STOPPED but the topic's goal not yet: still read-only.
        assert!(model.mirrored_topic("orders").unwrap().state.is_read_only());
        model.apply(&topic(TopicGoal::Stopped), None);
        assert!(!model.mirrored_topic("orders").unwrap().state.is_read_only());
        model.apply(&StateRecord::Topic { topic: "orders".to_owned(), value: None }, None);
        assert!(model.mirrored_topic("orders").is_none());
    }

    #[test]
    fn partitions_before_their_topic_are_kept() {
        let mut model = Model::default();
        model.apply(&partition(1, PartitionState::Paused), None);
        model.apply(&topic(TopicGoal::Pause), None);
        assert_eq!(model.topics["orders"].partitions[&1].state, PartitionState::Paused);
    }
}
