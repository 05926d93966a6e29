//! Topic configs, from the source's mirror topics to the destination's (spec §7).
//!
//! Settings that either side sets on the topic itself are copied with the source's effective value,
//! minus `topic.properties.exclude`: by default the settings the replicator owns (timestamps,
//! compression, see `replicator::topic`) and those that must stay local to a cluster (replica
//! throttles, durability settings).

use std::collections::BTreeMap;

use regex::Regex;

use super::groups::SyncError;
use crate::client::{AlterConfigOp, Client, ClientError, ConfigEntry, ConfigResource};

/// Kafka's `DYNAMIC_TOPIC_CONFIG` source: the value is set on the topic itself.
const TOPIC_CONFIG_SOURCE: i8 = 1;

/// Default of `topic.properties.exclude`.
pub const DEFAULT_EXCLUDED_PROPERTIES: &[&str] = &[
    // Owned by the replicator: an unmodified broker must accept mirrored batches as they are.
    "message\\.timestamp\\..*",
    "compression\\.type",
    "compression\\..*\\.level",
    // Local to each cluster.
    "follower\\.replication\\.throttled\\.replicas",
    "leader\\.replication\\.throttled\\.replicas",
    "min\\.insync\\.replicas",
    "unclean\\.leader\\.election\\.enable",
    "remote\\.storage\\.enable",
    "local\\.retention\\..*",
];

/// `topic.properties.exclude`: regexes matched against whole config names.
#[derive(Debug, Clone)]
pub struct ConfigFilter {
    exclude: Vec<Regex>,
}

impl Default for ConfigFilter {
    fn default() -> Self {
        Self::new(DEFAULT_EXCLUDED_PROPERTIES).expect("invariant: the default patterns compile")
    }
}

impl ConfigFilter {
    /// From patterns (each matches a whole config name).
    ///
    /// # Errors
    /// [`SyncError::InvalidPattern`] naming `topic.properties.exclude`.
    pub fn new(exclude: &[&str]) -> Result<Self, SyncError> {
        let exclude = exclude
            .iter()
            .map(|p| {
                Regex::new(&format!("^(?:{p})$")).map_err(|e| SyncError::InvalidPattern {
                    key: "topic.properties.exclude",
                    pattern: (*p).to_owned(),
                    message: e.to_string(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { exclude })
    }

    /// True if `name` is synced.
    pub fn syncs(&self, name: &str) -> bool {
        !self.exclude.iter().any(|r| r.is_match(name))
    }
}

/// The changes that bring `destination`'s settings in line with `source`'s: for every synced setting
/// that either side sets on the topic itself, the destination gets the source's *effective* value
/// (so a setting the source leaves at its broker default gets that default's value, not the
/// destination broker's default, which may differ). Nothing is deleted: a value the destination must
/// lose is replaced by the source's.
pub fn config_changes(source: &BTreeMap<String, ConfigEntry>, destination: &BTreeMap<String, ConfigEntry>, filter: &ConfigFilter) -> Vec<AlterConfigOp> {
    let topic_level = |configs: &BTreeMap<String, ConfigEntry>| -> Vec<String> {
        configs.iter().filter(|(_, e)| e.source == TOPIC_CONFIG_SOURCE).map(|(k, _)| k.clone()).collect()
    };
    let mut keys = topic_level(source);
    keys.extend(topic_level(destination));
    keys.sort();
    keys.dedup();
    let mut ops = Vec::new();
    for k in keys.into_iter().filter(|k| filter.syncs(k)) {
        let Some(wanted) = source.get(&k) else { continue };
        // Sensitive values are not returned by DescribeConfigs: they cannot be copied.
        let Some(value) = wanted.value.as_ref().filter(|_| !wanted.is_sensitive && !wanted.read_only) else { continue };
        if destination.get(&k).and_then(|e| e.value.as_ref()) != Some(value) {
            ops.push(AlterConfigOp::Set(k, value.clone()));
        }
    }
    ops
}

/// Copies `topic`'s settings from the source to the destination; returns what changed.
///
/// # Errors
/// [`SyncError::Cluster`] if either side cannot be read or the destination refuses a change.
pub async fn sync_topic_configs(source: &Client, destination: &Client, topic: &str, filter: &ConfigFilter) -> Result<Vec<AlterConfigOp>, SyncError> {
    let resource = ConfigResource::Topic(topic.to_owned());
    let err = |side: &'static str| move |source: ClientError| SyncError::Cluster { side, what: format!("configs of {topic}"), source: Box::new(source) };
    let wanted = source.describe_configs(&resource).await.map_err(err("source"))?;
    let current = destination.describe_configs(&resource).await.map_err(err("destination"))?;
    let ops = config_changes(&wanted, &current, filter);
    if !ops.is_empty() {
        destination.incremental_alter_configs(&resource, &ops).await.map_err(err("destination"))?;
    }
    Ok(ops)
}

/// Copies the settings of every topic of `topics` from the source to the destination: one
/// DescribeConfigs per cluster and one IncrementalAlterConfigs for all of them. Returns the topics
/// that changed.
///
/// # Errors
/// [`SyncError::Cluster`] for the first topic whose settings could not be read or changed (the
/// others are synced all the same).
pub async fn sync_topic_configs_bulk(source: &Client, destination: &Client, topics: &[String], filter: &ConfigFilter) -> Result<Vec<String>, SyncError> {
    let err = |side: &'static str, topic: &str, source: ClientError| SyncError::Cluster { side, what: format!("configs of {topic}"), source: Box::new(source) };
    let (mut wanted, mut current) = futures_util::join!(source.describe_topic_configs_bulk(topics), destination.describe_topic_configs_bulk(topics));
    let mut first_error = None;
    let mut changes = Vec::new();
    for topic in topics {
        match (wanted.remove(topic), current.remove(topic)) {
            (Some(Ok(w)), Some(Ok(c))) => {
                let ops = config_changes(&w, &c, filter);
                if !ops.is_empty() {
                    changes.push((topic.clone(), ops));
                }
            }
            (Some(Err(e)), _) => {
                first_error.get_or_insert(err("source", topic, e));
            }
            (_, Some(Err(e))) => {
                first_error.get_or_insert(err("destination", topic, e));
            }
            // A topic not answered for was not asked for: nothing to do.
            _ => {}
        }
    }
    let mut changed = Vec::new();
    for (topic, outcome) in destination.alter_topic_configs_bulk(&changes).await {
        match outcome {
            Ok(()) => changed.push(topic),
            Err(e) => {
                first_error.get_or_insert(err("destination", &topic, e));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(value: &str, source: i8) -> ConfigEntry {
        ConfigEntry { value: Some(value.to_owned()), source, is_sensitive: false, read_only: false }
    }

    #[test]
    fn copies_effective_values_of_synced_settings() {
        let source: BTreeMap<String, ConfigEntry> = [
            ("retention.ms".to_owned(), entry("1000", TOPIC_CONFIG_SOURCE)),
            ("cleanup.policy".to_owned(), entry("compact", TOPIC_CONFIG_SOURCE)),
            ("message.timestamp.type".to_owned(), entry("LogAppendTime", TOPIC_CONFIG_SOURCE)),
            ("min.insync.replicas".to_owned(), entry("2", TOPIC_CONFIG_SOURCE)),
            ("max.message.bytes".to_owned(), entry("1048588", 5)),
            ("segment.bytes".to_owned(), entry("1073741824", 5)),
        ]
        .into();
        let destination: BTreeMap<String, ConfigEntry> = [
            ("retention.ms".to_owned(), entry("1000", TOPIC_CONFIG_SOURCE)),
            ("max.message.bytes".to_owned(), entry("2000000", TOPIC_CONFIG_SOURCE)),
            ("message.timestamp.type".to_owned(), entry("CreateTime", TOPIC_CONFIG_SOURCE)),
            ("segment.bytes".to_owned(), entry("1073741824", 5)),
        ]
        .into();
        let ops = config_changes(&source, &destination, &ConfigFilter::default());
        assert_eq!(ops, vec![AlterConfigOp::Set("cleanup.policy".into(), "compact".into()), AlterConfigOp::Set("max.message.bytes".into(), "1048588".into())]);
    }
}
