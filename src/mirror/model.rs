//! The in-memory image of `__mirror_state`: mirrors, their topics and partition states, and the ACL
//! bindings each mirror created (the ACL sync's ledger), built by applying records in log order.
//! Every change goes through [`Model::apply`] as the state topic's tail reads it back (this
//! instance's writes and every other instance's alike), so what readers see (the write policy,
//! describe, the supervisor choosing runners) never runs ahead of the log and is the same on every
//! instance once it has read as far.

use std::collections::{BTreeMap, BTreeSet};

use super::records::{AclRecord, MirrorDefinition, PartitionRecord, StateRecord, TopicFilter, TopicGoal, TopicRecord};
use super::settings::{MirrorSettings, SecretKey};
use super::{MirrorLookup, MirroredTopic, PartitionState};
use crate::client::AclBinding;

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
    /// ACL bindings each mirror created on the destination, by mirror name. Kept as the log has
    /// them: a mirror's tombstone does not remove them, their own tombstones do.
    pub acls: BTreeMap<String, BTreeMap<AclBinding, AclRecord>>,
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
            StateRecord::Acl { mirror, binding, value: Some(v) } => {
                self.acls.entry(mirror.clone()).or_default().insert(binding.clone(), v.clone());
            }
            StateRecord::Acl { mirror, binding, value: None } => {
                if let Some(bindings) = self.acls.get_mut(mirror) {
                    bindings.remove(binding);
                    if bindings.is_empty() {
                        self.acls.remove(mirror);
                    }
                }
            }
        }
    }

    /// The ACL bindings `mirror` created and has not deleted: what `AclLedger::load` returns.
    pub fn acl_bindings_of(&self, mirror: &str) -> BTreeSet<AclBinding> {
        self.acls.get(mirror).map(|b| b.keys().cloned().collect()).unwrap_or_default()
    }

    /// Tombstones for every ACL record of `mirror`, to write when the mirror is deleted (the
    /// bindings themselves stay on the destination: deleting a mirror does not revoke access).
    pub fn acl_tombstones(&self, mirror: &str) -> Vec<StateRecord> {
        self.acls
            .get(mirror)
            .map(|b| b.keys().map(|binding| StateRecord::Acl { mirror: mirror.to_owned(), binding: binding.clone(), value: None }).collect())
            .unwrap_or_default()
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
            value: Some(TopicRecord { mirror: "dr".to_owned(), source_topic_id: Uuid::nil(), partitions: 2, goal, updated_ms: 0, replication_factor: -1 }),
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
    fn acl_records_are_kept_per_mirror() {
        let binding = |name: &str| AclBinding {
            resource_type: 2,
            resource_name: name.to_owned(),
            pattern_type: 3,
            principal: "User:a".to_owned(),
            host: "*".to_owned(),
            operation: 3,
            permission_type: 3,
        };
        let acl = |mirror: &str, name: &str, created: bool| StateRecord::Acl {
            mirror: mirror.to_owned(),
            binding: binding(name),
            value: created.then_some(AclRecord { created_ms: 1 }),
        };
        let mut model = Model::default();
        for r in [acl("dr", "a", true), acl("dr", "b", true), acl("other", "a", true), acl("dr", "a", false)] {
            model.apply(&r, None);
        }
        assert_eq!(model.acl_bindings_of("dr"), [binding("b")].into());
        assert_eq!(model.acl_bindings_of("other"), [binding("a")].into());
        assert!(model.acl_bindings_of("none").is_empty());
        // A mirror's tombstone leaves its ACL records; their tombstones remove them.
        model.apply(&StateRecord::Mirror { name: "dr".to_owned(), value: None }, None);
        assert_eq!(model.acl_tombstones("dr"), vec![acl("dr", "b", false)]);
        for r in model.acl_tombstones("dr") {
            model.apply(&r, None);
        }
        assert!(model.acl_bindings_of("dr").is_empty() && !model.acls.contains_key("dr"));
    }

    #[test]
    fn partitions_before_their_topic_are_kept() {
        let mut model = Model::default();
        model.apply(&partition(1, PartitionState::Paused), None);
        model.apply(&topic(TopicGoal::Pause), None);
        assert_eq!(model.topics["orders"].partitions[&1].state, PartitionState::Paused);
    }
}
