//! Calls about many partitions or topics at once: one request per broker instead of one per
//! partition, with each partition's (or topic's) outcome reported on its own.
//!
//! Mirroring thousands of partitions makes per-partition round trips the cost that dominates
//! (setting up 10,000 partitions one ListOffsets at a time is 10,000 round trips per question). These
//! calls group by leader (or send one admin request), retry only the entries whose error can pass
//! (refreshing metadata when the error says it is stale), and never let one entry's failure hide
//! the others' answers.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, DescribeConfigsRequest, DescribeProducersRequest, IncrementalAlterConfigsRequest, ListOffsetsRequest,
};
use kafka_protocol::messages::{
    create_partitions_request, describe_configs_request, describe_producers_request, incremental_alter_configs_request, list_offsets_request,
};
use kafka_protocol::protocol::StrBytes;

use super::backoff::Backoff;
use super::calls::{AlterConfigOp, ConfigEntry, IsolationLevel, OffsetSpec, ProducerState, broker_error, partition_target, topic_name};
use super::cluster::Client;
use super::error::{ClientError, Target};
use super::fetch::{FetchSpec, FetchedPartition};
use crate::protocol::ErrorCode;
use crate::protocol::batch::RecordBatches;

/// A partition, by topic name and index.
pub type TopicPartition = (String, i32);

/// Per-entry outcomes of a bulk call.
pub type Outcomes<K, V> = BTreeMap<K, Result<V, ClientError>>;

impl Client {
    /// The leader of `topic`-`partition` in the cached metadata, without asking a broker.
    pub fn cached_leader_of(&self, topic: &str, partition: i32) -> Option<i32> {
        self.with_metadata(|m| m.leader_of(topic, partition))
    }

    /// Runs `attempt` on `keys`, then again on the keys whose error can pass, until none is left
    /// or the backoff deadline passes (those keys then get [`ClientError::RetriesExhausted`]).
    async fn retry_each<K, V, F, Fut>(&self, keys: Vec<K>, topic_of: impl Fn(&K) -> String, mut attempt: F) -> Outcomes<K, V>
    where
        K: Ord + Clone,
        F: FnMut(Vec<K>) -> Fut,
        Fut: Future<Output = Outcomes<K, V>>,
    {
        let mut out = BTreeMap::new();
        let mut pending = keys;
        let mut backoff = Backoff::new(&self.config().backoff);
        while !pending.is_empty() {
            let mut results = attempt(pending.clone()).await;
            let mut retry: Vec<(K, ClientError)> = Vec::new();
            for key in pending.drain(..) {
                match results.remove(&key) {
                    Some(Err(e)) if e.is_retriable() => retry.push((key, e)),
                    Some(outcome) => {
                        out.insert(key, outcome);
                    }
                    None => {
                        let target = Target { topic: Some(topic_of(&key)), ..Target::default() };
                        out.insert(key, Err(ClientError::MissingInResponse { api_key: ApiKey::Metadata, target }));
                    }
                }
            }
            if retry.is_empty() {
                break;
            }
            let Some(delay) = backoff.next_delay() else {
                for (key, e) in retry {
                    out.insert(key, Err(ClientError::RetriesExhausted { attempts: backoff.attempts() + 1, elapsed: backoff.elapsed(), source: Box::new(e) }));
                }
                break;
            };
            tokio::time::sleep(delay).await;
            if retry.iter().any(|(_, e)| e.needs_metadata_refresh()) {
                let mut topics: Vec<String> = retry.iter().map(|(k, _)| topic_of(k)).collect();
                topics.sort();
                topics.dedup();
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                // A failed refresh is not fatal; the next attempt reports what is wrong.
                let _ = self.refresh_metadata(&names).await;
            }
            pending = retry.into_iter().map(|(k, _)| k).collect();
        }
        out
    }

    /// Groups `partitions` by their leader (cached metadata, refreshed for partitions it does not
    /// know); partitions without a leader come back as errors.
    async fn by_leader<'a>(&self, partitions: &'a [TopicPartition]) -> (BTreeMap<i32, Vec<&'a TopicPartition>>, Outcomes<TopicPartition, ()>) {
        let mut grouped: BTreeMap<i32, Vec<&TopicPartition>> = BTreeMap::new();
        let mut unknown: Vec<&TopicPartition> = Vec::new();
        for tp in partitions {
            match self.cached_leader_of(&tp.0, tp.1) {
                Some(leader) => grouped.entry(leader).or_default().push(tp),
                None => unknown.push(tp),
            }
        }
        let mut failed = BTreeMap::new();
        if !unknown.is_empty() {
            let mut topics: Vec<&str> = unknown.iter().map(|tp| tp.0.as_str()).collect();
            topics.sort_unstable();
            topics.dedup();
            let refreshed = self.refresh_metadata(&topics).await;
            for tp in unknown {
                match refreshed.as_ref().ok().and_then(|m| m.leader_of(&tp.0, tp.1)) {
                    Some(leader) => grouped.entry(leader).or_default().push(tp),
                    None => {
                        failed.insert(tp.clone(), Err(ClientError::NoLeader { topic: tp.0.clone(), partition: tp.1 }));
                    }
                }
            }
        }
        (grouped, failed)
    }

    /// Offsets of many partitions: one ListOffsets per leader. Retries what can pass.
    ///
    /// `Latest` with [`IsolationLevel::ReadCommitted`] is the last stable offset.
    pub async fn list_offsets_bulk(&self, partitions: &[TopicPartition], spec: OffsetSpec, isolation: IsolationLevel) -> Outcomes<TopicPartition, i64> {
        self.retry_each(
            partitions.to_vec(),
            |tp| tp.0.clone(),
            |pending| async move {
                let (grouped, unknown) = self.by_leader(&pending).await;
                let mut out: Outcomes<TopicPartition, i64> = unknown.into_iter().map(|(k, e)| (k, e.map(|()| 0))).collect();
                let requests = grouped.into_iter().map(|(leader, parts)| async move {
                    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for tp in &parts {
                        topics.entry(tp.0.as_str()).or_default().push(tp.1);
                    }
                    let request = ListOffsetsRequest::default().with_replica_id(BrokerId(-1)).with_isolation_level(isolation.code()).with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| {
                                list_offsets_request::ListOffsetsTopic::default().with_name(topic_name(t)).with_partitions(
                                    ps.into_iter()
                                        .map(|p| {
                                            list_offsets_request::ListOffsetsPartition::default()
                                                .with_partition_index(p)
                                                .with_current_leader_epoch(-1)
                                                .with_timestamp(spec.timestamp())
                                        })
                                        .collect(),
                                )
                            })
                            .collect(),
                    );
                    (leader, parts, self.send_to(leader, &request, None).await)
                });
                for (leader, parts, response) in futures_util::future::join_all(requests).await {
                    match response {
                        Err(e) => {
                            let shared = std::sync::Arc::new(e);
                            for tp in parts {
                                out.insert(tp.clone(), Err(copy_error(&shared)));
                            }
                        }
                        Ok(response) => {
                            for t in response.topics {
                                for p in t.partitions {
                                    let key = (t.name.0.to_string(), p.partition_index);
                                    let target = partition_target(leader, &key.0, key.1);
                                    out.insert(key, broker_error(ApiKey::ListOffsets, target, p.error_code, None).map(|()| p.offset));
                                }
                            }
                        }
                    }
                }
                out
            },
        )
        .await
    }

    /// The producers with state on each of many partitions: one DescribeProducers per leader.
    /// Retries what can pass.
    pub async fn describe_producers_bulk(&self, partitions: &[TopicPartition]) -> Outcomes<TopicPartition, Vec<ProducerState>> {
        self.retry_each(
            partitions.to_vec(),
            |tp| tp.0.clone(),
            |pending| async move {
                let (grouped, unknown) = self.by_leader(&pending).await;
                let mut out: Outcomes<TopicPartition, Vec<ProducerState>> = unknown.into_iter().map(|(k, e)| (k, e.map(|()| Vec::new()))).collect();
                let requests = grouped.into_iter().map(|(leader, parts)| async move {
                    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for tp in &parts {
                        topics.entry(tp.0.as_str()).or_default().push(tp.1);
                    }
                    let request = DescribeProducersRequest::default().with_topics(
                        topics
                            .into_iter()
                            .map(|(t, ps)| describe_producers_request::TopicRequest::default().with_name(topic_name(t)).with_partition_indexes(ps))
                            .collect(),
                    );
                    (leader, parts, self.send_to(leader, &request, None).await)
                });
                for (leader, parts, response) in futures_util::future::join_all(requests).await {
                    match response {
                        Err(e) => {
                            let shared = std::sync::Arc::new(e);
                            for tp in parts {
                                out.insert(tp.clone(), Err(copy_error(&shared)));
                            }
                        }
                        Ok(response) => {
                            for t in response.topics {
                                for p in t.partitions {
                                    let key = (t.name.0.to_string(), p.partition_index);
                                    let target = partition_target(leader, &key.0, key.1);
                                    let outcome = broker_error(ApiKey::DescribeProducers, target, p.error_code, p.error_message.as_ref()).map(|()| {
                                        p.active_producers
                                            .into_iter()
                                            .map(|s| ProducerState {
                                                producer_id: s.producer_id.0,
                                                producer_epoch: s.producer_epoch,
                                                last_sequence: s.last_sequence,
                                                last_timestamp: s.last_timestamp,
                                                coordinator_epoch: s.coordinator_epoch,
                                                current_txn_start_offset: s.current_txn_start_offset,
                                            })
                                            .collect()
                                    });
                                    out.insert(key, outcome);
                                }
                            }
                        }
                    }
                }
                out
            },
        )
        .await
    }

    /// Every config of each of many topics: one DescribeConfigs. Retries what can pass.
    pub async fn describe_topic_configs_bulk(&self, topics: &[String]) -> Outcomes<String, BTreeMap<String, ConfigEntry>> {
        self.retry_each(topics.to_vec(), Clone::clone, |pending| async move {
            let request = DescribeConfigsRequest::default().with_resources(
                pending
                    .iter()
                    .map(|t| {
                        describe_configs_request::DescribeConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(StrBytes::from_string(t.clone()))
                            .with_configuration_keys(None)
                    })
                    .collect(),
            );
            let response = match self.any_broker() {
                Ok(broker) => self.send_to(broker, &request, None).await,
                Err(e) => Err(e),
            };
            let mut out = BTreeMap::new();
            match response {
                Err(e) => {
                    let shared = std::sync::Arc::new(e);
                    for t in pending {
                        out.insert(t, Err(copy_error(&shared)));
                    }
                }
                Ok(response) => {
                    for r in response.results {
                        let name = r.resource_name.to_string();
                        let target = Target { topic: Some(name.clone()), ..Target::default() };
                        let outcome = broker_error(ApiKey::DescribeConfigs, target, r.error_code, r.error_message.as_ref()).map(|()| {
                            r.configs
                                .into_iter()
                                .map(|c| {
                                    let entry = ConfigEntry {
                                        value: c.value.map(|v| v.to_string()),
                                        source: c.config_source,
                                        is_sensitive: c.is_sensitive,
                                        read_only: c.read_only,
                                    };
                                    (c.name.to_string(), entry)
                                })
                                .collect()
                        });
                        out.insert(name, outcome);
                    }
                }
            }
            out
        })
        .await
    }

    /// Applies config changes to many topics: one IncrementalAlterConfigs. Idempotent, so retried.
    pub async fn alter_topic_configs_bulk(&self, changes: &[(String, Vec<AlterConfigOp>)]) -> Outcomes<String, ()> {
        let by_topic: BTreeMap<String, Vec<AlterConfigOp>> = changes.iter().cloned().collect();
        let by_topic = &by_topic;
        self.retry_each(by_topic.keys().cloned().collect(), Clone::clone, |pending| async move {
            let request = IncrementalAlterConfigsRequest::default().with_resources(
                pending
                    .iter()
                    .map(|t| {
                        let configs = by_topic[t]
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
                        incremental_alter_configs_request::AlterConfigsResource::default()
                            .with_resource_type(2)
                            .with_resource_name(StrBytes::from_string(t.clone()))
                            .with_configs(configs)
                    })
                    .collect(),
            );
            let response = match self.any_broker() {
                Ok(broker) => self.send_to(broker, &request, None).await,
                Err(e) => Err(e),
            };
            let mut out = BTreeMap::new();
            match response {
                Err(e) => {
                    let shared = std::sync::Arc::new(e);
                    for t in pending {
                        out.insert(t, Err(copy_error(&shared)));
                    }
                }
                Ok(response) => {
                    for r in response.responses {
                        let name = r.resource_name.to_string();
                        let target = Target { topic: Some(name.clone()), ..Target::default() };
                        out.insert(name, broker_error(ApiKey::IncrementalAlterConfigs, target, r.error_code, r.error_message.as_ref()));
                    }
                }
            }
            out
        })
        .await
    }

    /// Raises the partition counts of many topics: one CreatePartitions. A count a topic already
    /// has is success.
    pub async fn create_partitions_bulk(&self, counts: &[(String, i32)], timeout: Duration) -> Outcomes<String, ()> {
        let wanted: BTreeMap<String, i32> = counts.iter().cloned().collect();
        let wanted = &wanted;
        let outcomes = self
            .retry_each(wanted.keys().cloned().collect(), Clone::clone, |pending| async move {
                let request = CreatePartitionsRequest::default().with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)).with_topics(
                    pending
                        .iter()
                        .map(|t| {
                            create_partitions_request::CreatePartitionsTopic::default().with_name(topic_name(t)).with_count(wanted[t]).with_assignments(None)
                        })
                        .collect(),
                );
                let response = match self.any_broker() {
                    Ok(broker) => self.send_to(broker, &request, None).await,
                    Err(e) => Err(e),
                };
                let mut out = BTreeMap::new();
                match response {
                    Err(e) => {
                        let shared = std::sync::Arc::new(e);
                        for t in pending {
                            out.insert(t, Err(copy_error(&shared)));
                        }
                    }
                    Ok(response) => {
                        for r in response.results {
                            let name = r.name.0.to_string();
                            let target = Target { topic: Some(name.clone()), ..Target::default() };
                            out.insert(name, broker_error(ApiKey::CreatePartitions, target, r.error_code, r.error_message.as_ref()));
                        }
                    }
                }
                out
            })
            .await;
        // Kafka answers InvalidPartitions when a topic already has the count asked for.
        let invalid: Vec<&str> =
            outcomes.iter().filter(|(_, r)| matches!(r, Err(e) if e.code() == Some(ErrorCode::InvalidPartitions))).map(|(t, _)| t.as_str()).collect();
        if invalid.is_empty() {
            return outcomes;
        }
        let metadata = self.refresh_metadata(&invalid).await.ok();
        outcomes
            .into_iter()
            .map(|(topic, outcome)| {
                let has = metadata.as_ref().and_then(|m| m.topics.get(&topic)).map(|t| t.partitions.len() as i32);
                let outcome = if outcome.is_err() && has == wanted.get(&topic).copied() { Ok(()) } else { outcome };
                (topic, outcome)
            })
            .collect()
    }

    /// Waits until every partition `0..count` of each topic has a leader in the metadata, refreshing
    /// it (one request for all topics) until the backoff deadline. Returns the topics that still
    /// lack one, each with its first partition without a leader.
    pub async fn wait_for_leaders(&self, topics: &[(String, i32)]) -> Vec<(String, i32)> {
        let mut backoff = Backoff::new(&self.config().backoff);
        loop {
            let names: Vec<&str> = topics.iter().map(|(t, _)| t.as_str()).collect();
            let missing: Vec<(String, i32)> = match self.refresh_metadata(&names).await {
                Ok(m) => topics.iter().filter_map(|(t, n)| (0..*n).find(|p| m.leader_of(t, *p).is_none()).map(|p| (t.clone(), p))).collect(),
                Err(_) => topics.iter().map(|(t, _)| (t.clone(), 0)).collect(),
            };
            if missing.is_empty() {
                return missing;
            }
            match backoff.next_delay() {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return missing,
            }
        }
    }

    /// Reads each partition at its offset (no session, no wait): one Fetch per leader for up to
    /// `max_bytes / partition_max_bytes` partitions, and on its own a partition whose first batch
    /// came back cut off (a batch larger than `partition_max_bytes` is whole only in the first
    /// partition of a response). Retries what can pass; partition errors (e.g. `OffsetOutOfRange`)
    /// are that partition's outcome.
    pub async fn fetch_at_bulk(
        &self,
        requests: &[(String, i32, i64)],
        isolation: IsolationLevel,
        partition_max_bytes: i32,
        max_bytes: i32,
    ) -> Outcomes<TopicPartition, FetchedPartition> {
        let offsets: BTreeMap<TopicPartition, i64> = requests.iter().map(|(t, p, o)| ((t.clone(), *p), *o)).collect();
        let offsets = &offsets;
        let per_request = usize::try_from((max_bytes / partition_max_bytes.max(1)).max(1)).unwrap_or(1);
        self.retry_each(
            offsets.keys().cloned().collect(),
            |tp| tp.0.clone(),
            |pending| async move {
                let (grouped, unknown) = self.by_leader(&pending).await;
                let mut out: Outcomes<TopicPartition, FetchedPartition> = BTreeMap::new();
                for (k, e) in unknown {
                    if let Err(e) = e {
                        out.insert(k, Err(e));
                    }
                }
                for (leader, parts) in grouped {
                    for chunk in parts.chunks(per_request) {
                        let spec = FetchSpec {
                            partitions: chunk
                                .iter()
                                .map(|tp| super::fetch::FetchPartitionSpec {
                                    topic: tp.0.clone(),
                                    partition: tp.1,
                                    fetch_offset: offsets[*tp],
                                    last_fetched_epoch: -1,
                                    partition_max_bytes,
                                })
                                .collect(),
                            isolation,
                            max_wait: Duration::ZERO,
                            min_bytes: 0,
                            max_bytes,
                        };
                        match self.fetch(leader, &spec, None).await {
                            Err(e) => {
                                let shared = std::sync::Arc::new(e);
                                for tp in chunk {
                                    out.insert((*tp).clone(), Err(copy_error(&shared)));
                                }
                            }
                            Ok(fetched) => {
                                for p in fetched {
                                    let key = (p.topic.clone(), p.partition);
                                    let target = partition_target(leader, &key.0, key.1);
                                    let outcome = match p.error {
                                        Some(code) => Err(ClientError::Broker { api_key: ApiKey::Fetch, target, code, message: None }),
                                        None if cut_off(&p) => self
                                            .fetch(leader, &FetchSpec::single(&key.0, key.1, offsets[&key], isolation, max_bytes), None)
                                            .await
                                            .and_then(|solo| {
                                                solo.into_iter().find(|s| s.topic == key.0 && s.partition == key.1).ok_or(ClientError::MissingInResponse {
                                                    api_key: ApiKey::Fetch,
                                                    target: partition_target(leader, &key.0, key.1),
                                                })
                                            }),
                                        None => Ok(p),
                                    };
                                    out.insert(key, outcome);
                                }
                            }
                        }
                    }
                }
                out
            },
        )
        .await
    }
}

/// True if `p` holds bytes but not one whole batch.
fn cut_off(p: &FetchedPartition) -> bool {
    if p.records.is_empty() {
        return false;
    }
    let mut batches = RecordBatches::new(p.records.clone());
    !batches.any(|b| b.is_ok())
}

/// One copy of a request-level failure for each entry of the request, keeping what callers branch
/// on (retriable, ambiguous, the broker's code).
fn copy_error(error: &std::sync::Arc<ClientError>) -> ClientError {
    match &**error {
        ClientError::Broker { api_key, target, code, message } => {
            ClientError::Broker { api_key: *api_key, target: target.clone(), code: *code, message: message.clone() }
        }
        ClientError::NoLeader { topic, partition } => ClientError::NoLeader { topic: topic.clone(), partition: *partition },
        ClientError::UnknownBroker { broker } => ClientError::UnknownBroker { broker: *broker },
        ClientError::Config { key, message } => ClientError::Config { key: key.clone(), message: message.clone() },
        ClientError::Connection { broker, api_key, source } => ClientError::Connection {
            broker: *broker,
            api_key: *api_key,
            source: super::error::ConnectionError::Poisoned { addr: format!("broker {broker}"), source: std::sync::Arc::new(clone_connection_error(source)) },
        },
        other => ClientError::Connection { broker: -1, api_key: ApiKey::Metadata, source: super::error::ConnectionError::Closed { addr: other.to_string() } },
    }
}

/// A transport failure shared by every entry of one request: its kind kept (ambiguous, transport,
/// security), its text kept.
fn clone_connection_error(e: &super::error::ConnectionError) -> super::error::ConnectionError {
    use super::error::ConnectionError as C;
    match e {
        C::Closed { addr } => C::Closed { addr: addr.clone() },
        C::Timeout { addr, api_key, api_version, correlation_id, timeout } => {
            C::Timeout { addr: addr.clone(), api_key: *api_key, api_version: *api_version, correlation_id: *correlation_id, timeout: *timeout }
        }
        C::ConnectTimeout { addr, timeout } => C::ConnectTimeout { addr: addr.clone(), timeout: *timeout },
        C::Connect { addr, source } => C::Connect { addr: addr.clone(), source: std::io::Error::new(source.kind(), source.to_string()) },
        C::Poisoned { addr, source } => C::Poisoned { addr: addr.clone(), source: source.clone() },
        C::SecurityConfig { key, message } => C::SecurityConfig { key: key.clone(), message: message.clone() },
        C::Authentication { addr, mechanism, code, message } => C::Authentication { addr: addr.clone(), mechanism, code: *code, message: message.clone() },
        other => C::Closed { addr: other.to_string() },
    }
}
