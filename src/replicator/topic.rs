//! INITIALIZING: creating (or checking) the destination topic of a mirrored source topic, with the
//! settings of spec §3 that let an unmodified broker accept the mirrored batches as they are.

use std::collections::BTreeMap;
use std::time::Duration;

use uuid::Uuid;

use super::config::ReplicatorConfig;
use super::error::ReplicationError;
use crate::client::{AlterConfigOp, Client, ClientError, ConfigEntry, ConfigResource, NewTopic};
use crate::protocol::ErrorCode;

/// `Long.MAX_VALUE`, Kafka's "no limit" for timestamp windows.
const NO_LIMIT: &str = "9223372036854775807";

/// What the replicator recorded about a source topic when it set up its mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceTopic {
    /// Topic name.
    pub name: String,
    /// Source topic id: the mirror fails if it changes (topic deleted and re-created).
    pub topic_id: Uuid,
    /// Source cluster id.
    pub cluster_id: String,
    /// Partition count.
    pub partitions: i32,
    /// The source's `cleanup.policy`.
    pub cleanup_policy: String,
}

impl SourceTopic {
    /// True if DeleteRecords works on the topic (its cleanup policy includes `delete`).
    pub fn allows_delete_records(&self) -> bool {
        self.cleanup_policy.split(',').any(|p| p.trim() == "delete")
    }
}

fn unavailable(side: &'static str) -> impl Fn(ClientError) -> ReplicationError {
    move |source| ReplicationError::Unavailable { side, source }
}

/// The destination configs that §3 requires, given the source topic's configs.
pub fn destination_configs(source: &BTreeMap<String, ConfigEntry>) -> Vec<(String, String)> {
    let value = |k: &str| source.get(k).and_then(|e| e.value.clone());
    let mut configs = vec![
        ("message.timestamp.type".to_owned(), "CreateTime".to_owned()),
        ("message.timestamp.before.max.ms".to_owned(), NO_LIMIT.to_owned()),
        ("message.timestamp.after.max.ms".to_owned(), NO_LIMIT.to_owned()),
        ("compression.type".to_owned(), "producer".to_owned()),
    ];
    for key in ["cleanup.policy", "max.message.bytes", "retention.ms", "retention.bytes", "segment.bytes", "min.compaction.lag.ms", "delete.retention.ms"] {
        if let Some(v) = value(key) {
            configs.push((key.to_owned(), v));
        }
    }
    configs
}

/// Reads what the mirror needs to know about `topic` on the source.
///
/// # Errors
/// [`ReplicationError::SourceTopicChanged`] if it does not exist; `Unavailable` if the source cannot
/// be reached.
pub async fn describe_source(source: &Client, topic: &str) -> Result<SourceTopic, ReplicationError> {
    let metadata = source.refresh_metadata(&[topic]).await.map_err(unavailable("source"))?;
    let info =
        metadata.topics.get(topic).ok_or_else(|| ReplicationError::SourceTopicChanged { topic: topic.to_owned(), detail: "does not exist".to_owned() })?;
    let configs = source.describe_configs(&ConfigResource::Topic(topic.to_owned())).await.map_err(unavailable("source"))?;
    Ok(SourceTopic {
        name: topic.to_owned(),
        topic_id: info.topic_id,
        cluster_id: metadata.cluster_id.clone().unwrap_or_default(),
        partitions: info.partitions.len() as i32,
        cleanup_policy: configs.get("cleanup.policy").and_then(|e| e.value.clone()).unwrap_or_else(|| "delete".to_owned()),
    })
}

/// Creates the destination topic for `source_topic`, or checks an existing one (same partition
/// count) and brings its §3 settings in line.
///
/// # Errors
/// [`ReplicationError::DestinationTopic`] for a partition count mismatch or refused settings.
pub async fn ensure_destination(source: &Client, destination: &Client, source_topic: &SourceTopic, config: &ReplicatorConfig) -> Result<(), ReplicationError> {
    let name = &source_topic.name;
    let source_configs = source.describe_configs(&ConfigResource::Topic(name.clone())).await.map_err(unavailable("source"))?;
    let wanted = destination_configs(&source_configs);
    let replication_factor =
        if config.replication_factor > 0 { config.replication_factor } else { destination.cached_metadata().brokers.len().clamp(1, 3) as i16 };
    let created = destination
        .create_topics(
            &[NewTopic { name: name.clone(), num_partitions: source_topic.partitions, replication_factor, configs: wanted.clone() }],
            Duration::from_secs(60),
        )
        .await
        .map_err(unavailable("destination"))?;
    match created.into_iter().next() {
        Some(Ok(_)) => {
            // Wait until the new topic has leaders everywhere before anyone writes.
            for p in 0..source_topic.partitions {
                destination.leader_of(name, p).await.map_err(unavailable("destination"))?;
            }
            Ok(())
        }
        Some(Err(e)) if e.code() == Some(ErrorCode::TopicAlreadyExists) => check_existing(destination, source_topic, &wanted).await,
        Some(Err(e)) => Err(ReplicationError::DestinationTopic { topic: name.clone(), detail: format!("cannot be created: {e}") }),
        None => Err(ReplicationError::DestinationTopic { topic: name.clone(), detail: "no CreateTopics result".to_owned() }),
    }
}

async fn check_existing(destination: &Client, source_topic: &SourceTopic, wanted: &[(String, String)]) -> Result<(), ReplicationError> {
    let name = &source_topic.name;
    let metadata = destination.refresh_metadata(&[name]).await.map_err(unavailable("destination"))?;
    let partitions = metadata.topics.get(name).map_or(0, |t| t.partitions.len() as i32);
    if partitions > source_topic.partitions {
        return Err(ReplicationError::DestinationTopic {
            topic: name.clone(),
            detail: format!("has {partitions} partitions, the source has {}", source_topic.partitions),
        });
    }
    if partitions < source_topic.partitions {
        // The source grew while nobody copied the topic (paused, or its copier moved or stopped
        // before adding them): add the missing partitions now (spec §7).
        destination
            .create_partitions(name, source_topic.partitions, Duration::from_secs(60))
            .await
            .map_err(|e| ReplicationError::DestinationTopic { topic: name.clone(), detail: format!("cannot add partitions: {e}") })?;
        for p in partitions..source_topic.partitions {
            destination.leader_of(name, p).await.map_err(unavailable("destination"))?;
        }
        tracing::info!(topic = %name, from = partitions, to = source_topic.partitions, "destination partitions added to match the source");
    }
    let current = destination.describe_configs(&ConfigResource::Topic(name.clone())).await.map_err(unavailable("destination"))?;
    let ops: Vec<AlterConfigOp> = wanted
        .iter()
        .filter(|(k, v)| current.get(k).and_then(|e| e.value.as_deref()) != Some(v.as_str()))
        .map(|(k, v)| AlterConfigOp::Set(k.clone(), v.clone()))
        .collect();
    if !ops.is_empty() {
        destination
            .incremental_alter_configs(&ConfigResource::Topic(name.clone()), &ops)
            .await
            .map_err(|e| ReplicationError::DestinationTopic { topic: name.clone(), detail: format!("settings refused: {e}") })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destination_configs_follow_the_source() {
        let entry = |v: &str| ConfigEntry { value: Some(v.to_owned()), source: 1, is_sensitive: false, read_only: false };
        let source: BTreeMap<String, ConfigEntry> = [
            ("cleanup.policy".to_owned(), entry("compact")),
            ("max.message.bytes".to_owned(), entry("2097152")),
            ("retention.ms".to_owned(), entry("-1")),
            ("message.timestamp.type".to_owned(), entry("LogAppendTime")),
        ]
        .into_iter()
        .collect();
        let configs: BTreeMap<String, String> = destination_configs(&source).into_iter().collect();
        assert_eq!(configs["cleanup.policy"], "compact");
        assert_eq!(configs["max.message.bytes"], "2097152");
        assert_eq!(configs["retention.ms"], "-1");
        assert_eq!(configs["message.timestamp.type"], "CreateTime");
        assert_eq!(configs["message.timestamp.after.max.ms"], NO_LIMIT);
        assert_eq!(configs["compression.type"], "producer");
    }
}
