//! Typed calls on the cluster client, keeping record data as raw `Bytes`.
//!
//! Each call is routed (partition leader, any broker, or a named broker) and turns the response's
//! error codes into [`ClientError::Broker`] with the topic and partition they concern. Reads and
//! idempotent admin calls retry with backoff and metadata refresh; [`Client::produce`] and
//! [`Client::write_txn_markers`] never retry, because repeating an ambiguous write could duplicate
//! data: the replicator reconciles instead (spec §3, "Strict order, no blind retries").

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeProducersRequest, IncrementalAlterConfigsRequest, ListOffsetsRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
    WriteTxnMarkersRequest,
};
use kafka_protocol::messages::{
    create_partitions_request, create_topics_request, delete_records_request, describe_configs_request, describe_producers_request,
    incremental_alter_configs_request, list_offsets_request, produce_request, write_txn_markers_request,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::cluster::{BrokerInfo, Client};
use super::error::{ClientError, Target};
use crate::protocol::ErrorCode;

pub(super) fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_owned()))
}

pub(super) fn partition_target(broker: i32, topic: &str, partition: i32) -> Target {
    Target { broker: Some(broker), topic: Some(topic.to_owned()), partition: Some(partition) }
}

pub(super) fn broker_error(api_key: ApiKey, target: Target, code: i16, message: Option<&StrBytes>) -> Result<(), ClientError> {
    match ErrorCode::try_from_code(code) {
        None => Ok(()),
        Some(code) => Err(ClientError::Broker { api_key, target, code, message: message.map(|m| m.to_string()) }),
    }
}

/// `isolation_level` of Fetch and ListOffsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Up to the high watermark.
    ReadUncommitted,
    /// Up to the last stable offset; aborted transactions reported.
    #[default]
    ReadCommitted,
}

impl IsolationLevel {
    pub(super) fn code(self) -> i8 {
        match self {
            Self::ReadUncommitted => 0,
            Self::ReadCommitted => 1,
        }
    }
}

/// Which offset ListOffsets returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (read_uncommitted: high watermark; read_committed: last stable offset).
    Latest,
    /// The first offset whose timestamp is at least this (ms).
    Timestamp(i64),
}

impl OffsetSpec {
    pub(super) fn timestamp(self) -> i64 {
        match self {
            Self::Earliest => -2,
            Self::Latest => -1,
            Self::Timestamp(t) => t,
        }
    }
}

/// Produce settings.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    /// `acks` (-1 = all in-sync replicas).
    pub acks: i16,
    /// How long the broker waits for replication, per request.
    pub timeout: Duration,
    /// Transactional id, required when any batch is transactional.
    pub transactional_id: Option<String>,
    /// Version override (e.g. 11 for transactional data); otherwise the pin or the highest common.
    pub version: Option<i16>,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        Self { acks: -1, timeout: Duration::from_secs(30), transactional_id: None, version: None }
    }
}

/// One partition's data in a Produce request: exactly one v2 record batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The raw batch.
    pub records: Bytes,
}

/// A successful append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    /// Offset the broker gave the first record.
    pub base_offset: i64,
    /// Broker append time for LogAppendTime topics, -1 otherwise.
    pub log_append_time: i64,
    /// Log start offset after the append.
    pub log_start_offset: i64,
}

/// One COMMIT or ABORT marker to write with WriteTxnMarkers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarker {
    /// Producer id of the transaction.
    pub producer_id: i64,
    /// Producer epoch of the marker.
    pub producer_epoch: i16,
    /// True for COMMIT, false for ABORT.
    pub commit: bool,
    /// Coordinator epoch written into the marker.
    pub coordinator_epoch: i32,
    /// Topic.
    pub topic: String,
    /// Partitions that get the marker.
    pub partitions: Vec<i32>,
}

/// One producer's state on a partition, from DescribeProducers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerState {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i32,
    /// Last sequence written.
    pub last_sequence: i32,
    /// Timestamp of the last write (the batch's max timestamp).
    pub last_timestamp: i64,
    /// Coordinator epoch of the last marker.
    pub coordinator_epoch: i32,
    /// First offset of the open transaction, -1 if none.
    pub current_txn_start_offset: i64,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Name.
    pub name: String,
    /// Partition count (-1: broker default).
    pub num_partitions: i32,
    /// Replication factor (-1: broker default).
    pub replication_factor: i16,
    /// Topic configs.
    pub configs: Vec<(String, String)>,
}

/// A config resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigResource {
    /// A topic.
    Topic(String),
    /// One broker's configuration (sent to that broker).
    Broker(i32),
    /// The cluster-wide dynamic broker default.
    BrokerDefault,
}

impl ConfigResource {
    fn type_and_name(&self) -> (i8, String) {
        match self {
            Self::Topic(t) => (2, t.clone()),
            Self::Broker(id) => (4, id.to_string()),
            Self::BrokerDefault => (4, String::new()),
        }
    }

    fn target(&self) -> Target {
        match self {
            Self::Topic(t) => Target { topic: Some(t.clone()), ..Target::default() },
            Self::Broker(id) => Target { broker: Some(*id), ..Target::default() },
            Self::BrokerDefault => Target::default(),
        }
    }
}

/// One config value as DescribeConfigs reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Value (None for sensitive values).
    pub value: Option<String>,
    /// Kafka's config source code (1 = dynamic topic, 5 = static broker, …).
    pub source: i8,
    /// The value is secret.
    pub is_sensitive: bool,
    /// The value cannot be changed.
    pub read_only: bool,
}

/// An IncrementalAlterConfigs operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Set the key to the value.
    Set(String, String),
    /// Remove the dynamic value (back to the default).
    Delete(String),
}

/// DescribeCluster's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterDescription {
    /// Cluster id.
    pub cluster_id: String,
    /// Active controller id as brokers see it.
    pub controller_id: i32,
    /// Brokers.
    pub brokers: Vec<BrokerInfo>,
}

impl Client {
    /// Lists offsets of `partitions` of `topic`, each from its leader. Retries with backoff.
    ///
    /// `Latest` with [`IsolationLevel::ReadCommitted`] is the last stable offset.
    ///
    /// # Errors
    /// The first partition error that retrying did not cure.
    pub async fn list_offsets(&self, topic: &str, partitions: &[i32], spec: OffsetSpec, isolation: IsolationLevel) -> Result<BTreeMap<i32, i64>, ClientError> {
        self.retrying(&[topic], || async {
            let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
            for &p in partitions {
                by_leader.entry(self.leader_of(topic, p).await?).or_default().push(p);
            }
            let mut out = BTreeMap::new();
            for (leader, parts) in by_leader {
                let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_isolation_level(isolation.code()).with_topics(vec![
                    list_offsets_request::ListOffsetsTopic::default().with_name(topic_name(topic)).with_partitions(
                        parts
                            .iter()
                            .map(|&p| {
                                list_offsets_request::ListOffsetsPartition::default()
                                    .with_partition_index(p)
                                    .with_current_leader_epoch(-1)
                                    .with_timestamp(spec.timestamp())
                            })
                            .collect(),
                    ),
                ]);
                let response = self.send_to(leader, &request, None).await?;
                for t in response.topics {
                    for p in t.partitions {
                        broker_error(ApiKey::ListOffsets, partition_target(leader, topic, p.partition_index), p.error_code, None)?;
                        out.insert(p.partition_index, p.offset);
                    }
                }
            }
            for &p in partitions {
                if !out.contains_key(&p) {
                    return Err(ClientError::MissingInResponse {
                        api_key: ApiKey::ListOffsets,
                        target: Target { topic: Some(topic.to_owned()), partition: Some(p), ..Target::default() },
                    });
                }
            }
            Ok(out)
        })
        .await
    }

    /// One partition's offset; see [`Client::list_offsets`].
    ///
    /// # Errors
    /// As [`Client::list_offsets`].
    pub async fn list_offset(&self, topic: &str, partition: i32, spec: OffsetSpec, isolation: IsolationLevel) -> Result<i64, ClientError> {
        let offsets = self.list_offsets(topic, &[partition], spec, isolation).await?;
        offsets.get(&partition).copied().ok_or_else(|| ClientError::MissingInResponse {
            api_key: ApiKey::ListOffsets,
            target: Target { topic: Some(topic.to_owned()), partition: Some(partition), ..Target::default() },
        })
    }

    /// Sends one Produce with one batch per partition to `broker`. **No retry.** Per-partition
    /// outcomes are returned in request order; check [`ClientError::is_ambiguous`] on failures.
    ///
    /// # Errors
    /// Transport errors (the whole request's outcome is then unknown).
    pub async fn produce_to(
        &self,
        broker: i32,
        batches: &[ProducePartition],
        options: &ProduceOptions,
    ) -> Result<Vec<Result<Produced, ClientError>>, ClientError> {
        let conn = self.connection(broker).await?;
        let version =
            conn.version_for(ApiKey::Produce, options.version).map_err(|source| ClientError::Connection { broker, api_key: ApiKey::Produce, source })?;
        let mut topics: BTreeMap<&str, Vec<produce_request::PartitionProduceData>> = BTreeMap::new();
        for b in batches {
            topics
                .entry(b.topic.as_str())
                .or_default()
                .push(produce_request::PartitionProduceData::default().with_index(b.partition).with_records(Some(b.records.clone())));
        }
        let mut topic_data = Vec::new();
        for (t, parts) in topics {
            let id = if version >= 13 { self.topic_id(t).await? } else { Uuid::nil() };
            topic_data.push(produce_request::TopicProduceData::default().with_name(topic_name(t)).with_topic_id(id).with_partition_data(parts));
        }
        let request = ProduceRequest::default()
            .with_transactional_id(options.transactional_id.as_ref().map(|t| TransactionalId(StrBytes::from_string(t.clone()))))
            .with_acks(options.acks)
            .with_timeout_ms(i32::try_from(options.timeout.as_millis()).unwrap_or(i32::MAX))
            .with_topic_data(topic_data);
        let response = conn.send(&request, Some(version)).await.map_err(|source| ClientError::Connection { broker, api_key: ApiKey::Produce, source })?;
        let mut results: BTreeMap<(String, i32), Result<Produced, ClientError>> = BTreeMap::new();
        for t in response.responses {
            let name = if t.name.0.is_empty() {
                // v13 answers with topic ids only; map back through the metadata cache.
                self.cached_topic_name(t.topic_id).unwrap_or_default()
            } else {
                t.name.0.to_string()
            };
            for p in t.partition_responses {
                let target = partition_target(broker, &name, p.index);
                let outcome = broker_error(ApiKey::Produce, target, p.error_code, p.error_message.as_ref()).map(|()| Produced {
                    base_offset: p.base_offset,
                    log_append_time: p.log_append_time_ms,
                    log_start_offset: p.log_start_offset,
                });
                results.insert((name.clone(), p.index), outcome);
            }
        }
        Ok(batches
            .iter()
            .map(|b| {
                results.remove(&(b.topic.clone(), b.partition)).unwrap_or_else(|| {
                    Err(ClientError::MissingInResponse { api_key: ApiKey::Produce, target: partition_target(broker, &b.topic, b.partition) })
                })
            })
            .collect())
    }

    /// Produces one batch to the leader of `topic`-`partition`. **No retry**; see
    /// [`Client::produce_to`].
    ///
    /// # Errors
    /// Transport or broker errors; [`ClientError::is_ambiguous`] says whether the batch may have been
    /// appended anyway.
    pub async fn produce(&self, topic: &str, partition: i32, records: Bytes, options: &ProduceOptions) -> Result<Produced, ClientError> {
        let leader = self.leader_of(topic, partition).await?;
        let batch = ProducePartition { topic: topic.to_owned(), partition, records };
        let mut results = self.produce_to(leader, std::slice::from_ref(&batch), options).await?;
        results.pop().unwrap_or_else(|| Err(ClientError::MissingInResponse { api_key: ApiKey::Produce, target: partition_target(leader, topic, partition) }))
    }

    /// Writes transaction markers through `broker` (which must lead every partition named).
    /// **No retry.** Returns each `(producer id, topic, partition)` with its outcome.
    ///
    /// # Errors
    /// Transport errors.
    pub async fn write_txn_markers_to(&self, broker: i32, markers: &[TxnMarker]) -> Result<Vec<(i64, String, i32, Result<(), ClientError>)>, ClientError> {
        let request = WriteTxnMarkersRequest::default().with_markers(
            markers
                .iter()
                .map(|m| {
                    write_txn_markers_request::WritableTxnMarker::default()
                        .with_producer_id(ProducerId(m.producer_id))
                        .with_producer_epoch(m.producer_epoch)
                        .with_transaction_result(m.commit)
                        .with_coordinator_epoch(m.coordinator_epoch)
                        .with_topics(vec![
                            write_txn_markers_request::WritableTxnMarkerTopic::default()
                                .with_name(topic_name(&m.topic))
                                .with_partition_indexes(m.partitions.clone()),
                        ])
                })
                .collect(),
        );
        let response = self.send_to(broker, &request, None).await?;
        let mut out = Vec::new();
        for m in response.markers {
            for t in m.topics {
                for p in t.partitions {
                    let target = partition_target(broker, &t.name.0, p.partition_index);
                    out.push((m.producer_id.0, t.name.0.to_string(), p.partition_index, broker_error(ApiKey::WriteTxnMarkers, target, p.error_code, None)));
                }
            }
        }
        Ok(out)
    }

    /// Writes one marker to the leader of each of its partitions. **No retry.**
    ///
    /// # Errors
    /// The first failed partition (check [`ClientError::is_ambiguous`]).
    pub async fn write_txn_markers(&self, marker: &TxnMarker) -> Result<(), ClientError> {
        let mut by_leader: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
        for &p in &marker.partitions {
            by_leader.entry(self.leader_of(&marker.topic, p).await?).or_default().push(p);
        }
        for (leader, partitions) in by_leader {
            let m = TxnMarker { partitions: partitions.clone(), ..marker.clone() };
            let results = self.write_txn_markers_to(leader, std::slice::from_ref(&m)).await?;
            for p in partitions {
                match results.iter().find(|(_, t, q, _)| *t == marker.topic && *q == p) {
                    Some((_, _, _, Ok(()))) => {}
                    Some((_, _, _, Err(e))) => {
                        return Err(ClientError::Broker {
                            api_key: ApiKey::WriteTxnMarkers,
                            target: partition_target(leader, &marker.topic, p),
                            code: e.code().unwrap_or(ErrorCode::UnknownServerError),
                            message: None,
                        });
                    }
                    None => {
                        return Err(ClientError::MissingInResponse { api_key: ApiKey::WriteTxnMarkers, target: partition_target(leader, &marker.topic, p) });
                    }
                }
            }
        }
        Ok(())
    }

    /// The producers with state on `topic`-`partition` (from its leader). Retries.
    ///
    /// # Errors
    /// A partition error that retrying did not cure.
    pub async fn describe_producers(&self, topic: &str, partition: i32) -> Result<Vec<ProducerState>, ClientError> {
        self.retrying(&[topic], || async {
            let leader = self.leader_of(topic, partition).await?;
            let request = DescribeProducersRequest::default()
                .with_topics(vec![describe_producers_request::TopicRequest::default().with_name(topic_name(topic)).with_partition_indexes(vec![partition])]);
            let response = self.send_to(leader, &request, None).await?;
            for t in response.topics {
                for p in t.partitions {
                    if p.partition_index != partition {
                        continue;
                    }
                    broker_error(ApiKey::DescribeProducers, partition_target(leader, topic, partition), p.error_code, p.error_message.as_ref())?;
                    return Ok(p
                        .active_producers
                        .into_iter()
                        .map(|s| ProducerState {
                            producer_id: s.producer_id.0,
                            producer_epoch: s.producer_epoch,
                            last_sequence: s.last_sequence,
                            last_timestamp: s.last_timestamp,
                            coordinator_epoch: s.coordinator_epoch,
                            current_txn_start_offset: s.current_txn_start_offset,
                        })
                        .collect());
                }
            }
            Err(ClientError::MissingInResponse { api_key: ApiKey::DescribeProducers, target: partition_target(leader, topic, partition) })
        })
        .await
    }

    /// Moves the log start offset of `topic`-`partition` to `offset` (-1: the high watermark).
    /// Idempotent, so retried. Returns the new low watermark.
    ///
    /// # Errors
    /// E.g. `PolicyViolation` on a topic without `delete` in its cleanup policy, `OffsetOutOfRange`.
    pub async fn delete_records(&self, topic: &str, partition: i32, offset: i64, timeout: Duration) -> Result<i64, ClientError> {
        self.retrying(&[topic], || async {
            let leader = self.leader_of(topic, partition).await?;
            let request = DeleteRecordsRequest::default().with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)).with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default().with_partition_index(partition).with_offset(offset)]),
            ]);
            let response = self.send_to(leader, &request, None).await?;
            let result = response.topics.into_iter().flat_map(|t| t.partitions).find(|p| p.partition_index == partition);
            if let Some(p) = result {
                broker_error(ApiKey::DeleteRecords, partition_target(leader, topic, partition), p.error_code, None)?;
                return Ok(p.low_watermark);
            }
            Err(ClientError::MissingInResponse { api_key: ApiKey::DeleteRecords, target: partition_target(leader, topic, partition) })
        })
        .await
    }

    /// Creates topics. Returns each topic's outcome (its id on success) in request order; a topic
    /// that already exists is an error entry with `TopicAlreadyExists`.
    ///
    /// # Errors
    /// Transport errors that retrying did not cure.
    pub async fn create_topics(&self, topics: &[NewTopic], timeout: Duration) -> Result<Vec<Result<Uuid, ClientError>>, ClientError> {
        let request = CreateTopicsRequest::default().with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)).with_topics(
            topics
                .iter()
                .map(|t| {
                    create_topics_request::CreatableTopic::default()
                        .with_name(topic_name(&t.name))
                        .with_num_partitions(t.num_partitions)
                        .with_replication_factor(t.replication_factor)
                        .with_configs(
                            t.configs
                                .iter()
                                .map(|(k, v)| {
                                    create_topics_request::CreatableTopicConfig::default()
                                        .with_name(StrBytes::from_string(k.clone()))
                                        .with_value(Some(StrBytes::from_string(v.clone())))
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
        let response = self
            .retrying(&[], || async {
                let broker = self.any_broker()?;
                let response = self.send_to(broker, &request, None).await?;
                // NotController is transient in KRaft (forwarding); retry the whole request.
                if let Some(t) = response.topics.iter().find(|t| t.error_code == ErrorCode::NotController.code()) {
                    broker_error(ApiKey::CreateTopics, Target::default(), t.error_code, None)?;
                }
                Ok(response)
            })
            .await?;
        Ok(topics
            .iter()
            .map(|t| {
                let target = Target { topic: Some(t.name.clone()), ..Target::default() };
                match response.topics.iter().find(|r| r.name.0.as_str() == t.name) {
                    None => Err(ClientError::MissingInResponse { api_key: ApiKey::CreateTopics, target }),
                    Some(r) => broker_error(ApiKey::CreateTopics, target, r.error_code, r.error_message.as_ref()).map(|()| r.topic_id),
                }
            })
            .collect())
    }

    /// Raises `topic`'s partition count to `count`. A count the topic already has is success.
    ///
    /// # Errors
    /// E.g. `InvalidPartitions` for a count below the current one.
    pub async fn create_partitions(&self, topic: &str, count: i32, timeout: Duration) -> Result<(), ClientError> {
        let request = CreatePartitionsRequest::default().with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)).with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default().with_name(topic_name(topic)).with_count(count).with_assignments(None),
        ]);
        let target = Target { topic: Some(topic.to_owned()), ..Target::default() };
        let result = self
            .retrying(&[topic], || async {
                let broker = self.any_broker()?;
                let response = self.send_to(broker, &request, None).await?;
                let result = response
                    .results
                    .into_iter()
                    .next()
                    .ok_or_else(|| ClientError::MissingInResponse { api_key: ApiKey::CreatePartitions, target: target.clone() })?;
                if result.error_code == ErrorCode::NotController.code() {
                    broker_error(ApiKey::CreatePartitions, target.clone(), result.error_code, None)?;
                }
                Ok(result)
            })
            .await?;
        // Kafka answers InvalidPartitions when the topic already has `count` partitions.
        let metadata = self.refresh_metadata(&[topic]).await?;
        if metadata.topics.get(topic).is_some_and(|t| t.partitions.len() as i32 == count) {
            return Ok(());
        }
        broker_error(ApiKey::CreatePartitions, target, result.error_code, result.error_message.as_ref())
    }

    /// Where config requests about `resource` go: a broker's own configs to that broker, anything
    /// else to any broker (KRaft brokers forward changes to the controller).
    fn broker_for(&self, resource: &ConfigResource) -> Result<i32, ClientError> {
        match resource {
            ConfigResource::Broker(id) => Ok(*id),
            _ => self.any_broker(),
        }
    }

    /// Describes every config of `resource`.
    ///
    /// # Errors
    /// The resource's error (e.g. `UnknownTopicOrPartition`).
    pub async fn describe_configs(&self, resource: &ConfigResource) -> Result<BTreeMap<String, ConfigEntry>, ClientError> {
        let (resource_type, name) = resource.type_and_name();
        let request = DescribeConfigsRequest::default().with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name))
                .with_configuration_keys(None),
        ]);
        self.retrying(&[], || async {
            let broker = self.broker_for(resource)?;
            let response = self.send_to(broker, &request, None).await?;
            let result = response
                .results
                .into_iter()
                .next()
                .ok_or_else(|| ClientError::MissingInResponse { api_key: ApiKey::DescribeConfigs, target: resource.target() })?;
            broker_error(ApiKey::DescribeConfigs, resource.target(), result.error_code, result.error_message.as_ref())?;
            Ok(result
                .configs
                .into_iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        ConfigEntry { value: c.value.map(|v| v.to_string()), source: c.config_source, is_sensitive: c.is_sensitive, read_only: c.read_only },
                    )
                })
                .collect())
        })
        .await
    }

    /// Applies `ops` to `resource` with IncrementalAlterConfigs (idempotent, so retried).
    ///
    /// # Errors
    /// The resource's error (e.g. `InvalidConfig`, `PolicyViolation`).
    pub async fn incremental_alter_configs(&self, resource: &ConfigResource, ops: &[AlterConfigOp]) -> Result<(), ClientError> {
        let (resource_type, name) = resource.type_and_name();
        let configs = ops
            .iter()
            .map(|op| match op {
                AlterConfigOp::Set(k, v) => incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(0)
                    .with_value(Some(StrBytes::from_string(v.clone()))),
                AlterConfigOp::Delete(k) => incremental_alter_configs_request::AlterableConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_config_operation(1)
                    .with_value(None),
            })
            .collect();
        let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(StrBytes::from_string(name))
                .with_configs(configs),
        ]);
        self.retrying(&[], || async {
            let broker = self.broker_for(resource)?;
            let response = self.send_to(broker, &request, None).await?;
            let result = response
                .responses
                .into_iter()
                .next()
                .ok_or_else(|| ClientError::MissingInResponse { api_key: ApiKey::IncrementalAlterConfigs, target: resource.target() })?;
            broker_error(ApiKey::IncrementalAlterConfigs, resource.target(), result.error_code, result.error_message.as_ref())
        })
        .await
    }

    /// The cluster id, controller and brokers.
    ///
    /// # Errors
    /// A broker error that retrying did not cure.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription, ClientError> {
        self.retrying(&[], || async {
            let broker = self.any_broker()?;
            let response = self.send_to(broker, &DescribeClusterRequest::default(), None).await?;
            broker_error(ApiKey::DescribeCluster, Target { broker: Some(broker), ..Target::default() }, response.error_code, response.error_message.as_ref())?;
            Ok(ClusterDescription {
                cluster_id: response.cluster_id.to_string(),
                controller_id: response.controller_id.0,
                brokers: response
                    .brokers
                    .into_iter()
                    .map(|b| BrokerInfo { id: b.broker_id.0, host: b.host.to_string(), port: b.port, rack: b.rack.map(|r| r.to_string()) })
                    .collect(),
            })
        })
        .await
    }
}
