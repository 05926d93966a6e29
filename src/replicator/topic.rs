//! INITIALIZING: creating (or checking) the destination topic of a mirrored source topic, with the
//! settings of spec §3 that let an unmodified broker accept the mirrored batches as they are.

use std::collections::BTreeMap;
use std::time::Duration;

use uuid::Uuid;

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

/// Source topics as described for setup, with the destination settings they ask for.
type Described = BTreeMap<String, (SourceTopic, Vec<(String, String)>)>;

/// Topics set up in one bulk round at most.
pub(crate) const MAX_SETUP_BATCH: usize = 1000;

/// One topic to set up (INITIALIZING).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSetup {
    /// The topic (the same name on both sides).
    pub topic: String,
    /// The source topic id recorded when it was added; a different one fails the topic.
    pub expected: Option<Uuid>,
    /// Replication factor to create the destination topic with; -1: the destination's
    /// `default.replication.factor`, capped by its broker count. A topic that exists keeps its own.
    pub replication_factor: i16,
}

impl TopicSetup {
    /// `topic`, with no recorded id and the destination's default replication factor.
    pub fn new(topic: &str) -> Self {
        Self { topic: topic.to_owned(), expected: None, replication_factor: -1 }
    }
}

/// INITIALIZING for many topics at once: reads each source topic (one Metadata and one
/// DescribeConfigs for all), checks its id against the one recorded (`expected`, if any), then
/// creates the destination topics (one CreateTopics), or checks existing ones and brings their
/// partition counts and §3 settings in line (one request each for all), and waits until every
/// partition has a leader. One outcome per request, in order.
pub async fn setup_topics(source: &Client, destination: &Client, requests: &[TopicSetup]) -> Vec<Result<SourceTopic, ReplicationError>> {
    let mut outcomes: BTreeMap<String, Result<SourceTopic, ReplicationError>> = BTreeMap::new();
    let names: Vec<&str> = requests.iter().map(|r| r.topic.as_str()).collect();
    let finish = |mut outcomes: BTreeMap<String, Result<SourceTopic, ReplicationError>>| -> Vec<Result<SourceTopic, ReplicationError>> {
        requests
            .iter()
            .map(|TopicSetup { topic: t, .. }| {
                outcomes.remove(t).unwrap_or_else(|| Err(ReplicationError::DestinationTopic { topic: t.clone(), detail: "set up twice at once".to_owned() }))
            })
            .collect()
    };
    let metadata = match source.refresh_metadata(&names).await {
        Ok(m) => m,
        Err(e) => {
            let shared = std::sync::Arc::new(e);
            for r in requests {
                outcomes.insert(r.topic.clone(), Err(ReplicationError::Unavailable { side: "source", source: copy(&shared) }));
            }
            return finish(outcomes);
        }
    };
    let mut found: Vec<String> = Vec::new();
    for TopicSetup { topic, expected, .. } in requests {
        match metadata.topics.get(topic) {
            None => {
                outcomes.insert(topic.clone(), Err(ReplicationError::SourceTopicChanged { topic: topic.clone(), detail: "does not exist".to_owned() }));
            }
            Some(info) if expected.is_some_and(|id| !id.is_nil() && id != info.topic_id) => {
                let recorded = expected.unwrap_or_default();
                outcomes.insert(
                    topic.clone(),
                    Err(ReplicationError::SourceTopicChanged {
                        topic: topic.clone(),
                        detail: format!("was re-created (topic id {} now, {recorded} when added to the mirror)", info.topic_id),
                    }),
                );
            }
            Some(_) => found.push(topic.clone()),
        }
    }
    let mut source_configs = source.describe_topic_configs_bulk(&found).await;
    let mut described: Described = BTreeMap::new();
    for topic in found {
        match source_configs.remove(&topic) {
            Some(Ok(configs)) => {
                let info = &metadata.topics[&topic];
                let described_topic = SourceTopic {
                    name: topic.clone(),
                    topic_id: info.topic_id,
                    cluster_id: metadata.cluster_id.clone().unwrap_or_default(),
                    partitions: info.partitions.len() as i32,
                    cleanup_policy: configs.get("cleanup.policy").and_then(|e| e.value.clone()).unwrap_or_else(|| "delete".to_owned()),
                };
                described.insert(topic, (described_topic, destination_configs(&configs)));
            }
            Some(Err(e)) => {
                outcomes.insert(topic, Err(unavailable("source")(e)));
            }
            None => {
                outcomes.insert(topic.clone(), Err(ReplicationError::DestinationTopic { topic, detail: "no DescribeConfigs result".to_owned() }));
            }
        }
    }
    if described.is_empty() {
        return finish(outcomes);
    }
    let default_replication = if requests.iter().any(|r| r.replication_factor == -1 && described.contains_key(&r.topic)) {
        default_replication_factor(destination).await
    } else {
        -1
    };
    let mut seen = std::collections::BTreeSet::new();
    let new_topics: Vec<NewTopic> = requests
        .iter()
        .filter_map(|r| {
            let (t, wanted) = described.get(&r.topic).filter(|_| seen.insert(r.topic.as_str()))?;
            let replication_factor = if r.replication_factor > 0 { r.replication_factor } else { default_replication };
            Some(NewTopic { name: t.name.clone(), num_partitions: t.partitions, replication_factor, configs: wanted.clone() })
        })
        .collect();
    let created = match destination.create_topics(&new_topics, Duration::from_secs(60)).await {
        Ok(c) => c,
        Err(e) => {
            let shared = std::sync::Arc::new(e);
            for t in described.keys() {
                outcomes.insert(t.clone(), Err(ReplicationError::Unavailable { side: "destination", source: copy(&shared) }));
            }
            return finish(outcomes);
        }
    };
    let mut ready: Vec<String> = Vec::new();
    let mut existing: Vec<String> = Vec::new();
    for (topic, result) in new_topics.iter().map(|t| t.name.clone()).zip(created) {
        match result {
            Ok(_) => ready.push(topic),
            Err(e) if e.code() == Some(ErrorCode::TopicAlreadyExists) => existing.push(topic),
            Err(e) => {
                outcomes.insert(topic.clone(), Err(ReplicationError::DestinationTopic { topic, detail: format!("cannot be created: {e}") }));
            }
        }
    }
    if !existing.is_empty() {
        let checked = check_existing(destination, &existing, &described).await;
        for (topic, outcome) in checked {
            match outcome {
                Ok(()) => ready.push(topic),
                Err(e) => {
                    outcomes.insert(topic, Err(e));
                }
            }
        }
    }
    // Nobody writes before every partition has a leader.
    let waiting: Vec<(String, i32)> = ready.iter().map(|t| (t.clone(), described[t].0.partitions)).collect();
    let missing: BTreeMap<String, i32> = destination.wait_for_leaders(&waiting).await.into_iter().collect();
    for topic in ready {
        let outcome = match missing.get(&topic) {
            Some(&partition) => Err(ReplicationError::Unavailable { side: "destination", source: ClientError::NoLeader { topic: topic.clone(), partition } }),
            None => Ok(described[&topic].0.clone()),
        };
        outcomes.insert(topic, outcome);
    }
    finish(outcomes)
}

/// The replication factor of topics created without one: the destination's
/// `default.replication.factor` (read from a broker), capped by its broker count so that a
/// cluster smaller than its own default still gets the topic. If the setting cannot be read, -1:
/// the broker applies its default itself.
async fn default_replication_factor(destination: &Client) -> i16 {
    let brokers: Vec<i32> = destination.cached_metadata().brokers.keys().copied().collect();
    let Some(&broker) = brokers.first() else { return -1 };
    let configured = match destination.describe_configs(&ConfigResource::Broker(broker)).await {
        Ok(configs) => configs.get("default.replication.factor").and_then(|e| e.value.as_deref()?.parse::<i16>().ok()),
        Err(e) => {
            tracing::warn!(broker, error = %e, "cannot read the destination's default.replication.factor; leaving it to the broker");
            None
        }
    };
    let count = i16::try_from(brokers.len()).unwrap_or(i16::MAX);
    configured.map_or(-1, |d| d.clamp(1, count))
}

/// Checks destination topics that exist already: not more partitions than the source (fewer are
/// added: the source grew while nobody copied the topic), and the §3 settings.
async fn check_existing(destination: &Client, topics: &[String], described: &Described) -> Vec<(String, Result<(), ReplicationError>)> {
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let metadata = match destination.refresh_metadata(&names).await {
        Ok(m) => m,
        Err(e) => {
            let shared = std::sync::Arc::new(e);
            return topics.iter().map(|t| (t.clone(), Err(ReplicationError::Unavailable { side: "destination", source: copy(&shared) }))).collect();
        }
    };
    let mut out: BTreeMap<String, Result<(), ReplicationError>> = BTreeMap::new();
    let mut grow: Vec<(String, i32)> = Vec::new();
    for topic in topics {
        let source = &described[topic].0;
        let Some(partitions) = metadata.topics.get(topic).map(|t| t.partitions.len() as i32) else {
            // CreateTopics said it exists, the broker asked does not know it yet (its metadata lags
            // the controller's, for long when thousands of partitions are being created): later.
            out.insert(
                topic.clone(),
                Err(ReplicationError::Unavailable { side: "destination", source: ClientError::NoLeader { topic: topic.clone(), partition: 0 } }),
            );
            continue;
        };
        if partitions > source.partitions {
            let detail = format!("has {partitions} partitions, the source has {}", source.partitions);
            out.insert(topic.clone(), Err(ReplicationError::DestinationTopic { topic: topic.clone(), detail }));
        } else if partitions < source.partitions {
            tracing::info!(topic = %topic, from = partitions, to = source.partitions, "destination partitions added to match the source");
            grow.push((topic.clone(), source.partitions));
        }
    }
    if !grow.is_empty() {
        for (topic, outcome) in destination.create_partitions_bulk(&grow, Duration::from_secs(60)).await {
            match outcome {
                Ok(()) => {}
                // The controller has at least the count already: the metadata read above lagged
                // (a count above the source's is caught on the next attempt, from fresher metadata).
                Err(e) if e.code() == Some(ErrorCode::InvalidPartitions) => {
                    out.insert(topic, Err(ReplicationError::Unavailable { side: "destination", source: e }));
                }
                Err(e) => {
                    out.insert(topic.clone(), Err(ReplicationError::DestinationTopic { topic, detail: format!("cannot add partitions: {e}") }));
                }
            }
        }
    }
    let settle: Vec<String> = topics.iter().filter(|t| !out.contains_key(*t)).cloned().collect();
    let mut current = destination.describe_topic_configs_bulk(&settle).await;
    let mut changes: Vec<(String, Vec<AlterConfigOp>)> = Vec::new();
    for topic in &settle {
        match current.remove(topic) {
            Some(Ok(current)) => {
                let ops: Vec<AlterConfigOp> = described[topic]
                    .1
                    .iter()
                    .filter(|(k, v)| current.get(k).and_then(|e| e.value.as_deref()) != Some(v.as_str()))
                    .map(|(k, v)| AlterConfigOp::Set(k.clone(), v.clone()))
                    .collect();
                if !ops.is_empty() {
                    changes.push((topic.clone(), ops));
                }
            }
            Some(Err(e)) => {
                out.insert(topic.clone(), Err(unavailable("destination")(e)));
            }
            None => {}
        }
    }
    if !changes.is_empty() {
        for (topic, outcome) in destination.alter_topic_configs_bulk(&changes).await {
            if let Err(e) = outcome {
                out.insert(topic.clone(), Err(ReplicationError::DestinationTopic { topic, detail: format!("settings refused: {e}") }));
            }
        }
    }
    topics.iter().map(|t| (t.clone(), out.remove(t).unwrap_or(Ok(())))).collect()
}

/// One copy of a failure of a request made for many topics, for each of them.
fn copy(error: &std::sync::Arc<ClientError>) -> ClientError {
    match &**error {
        ClientError::Broker { api_key, target, code, message } => {
            ClientError::Broker { api_key: *api_key, target: target.clone(), code: *code, message: message.clone() }
        }
        ClientError::Bootstrap { bootstrap, source } => ClientError::Bootstrap {
            bootstrap: bootstrap.clone(),
            source: crate::client::ConnectionError::Poisoned {
                addr: bootstrap.clone(),
                source: std::sync::Arc::new(crate::client::ConnectionError::Closed { addr: source.to_string() }),
            },
        },
        other => ClientError::Connection {
            broker: -1,
            api_key: kafka_protocol::messages::ApiKey::Metadata,
            source: crate::client::ConnectionError::Closed { addr: other.to_string() },
        },
    }
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
