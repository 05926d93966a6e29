//! The cluster-level client: bootstrap, metadata, one connection per broker, leader routing.
//!
//! ```text
//!   Client ──metadata()──► any broker (bootstrap list first, then known brokers)
//!     │
//!     ├── leader_of(topic, partition) ── cached Metadata, refreshed on NotLeader/unknown errors
//!     └── connection(broker id) ──► BrokerConnection (one per broker; replaced when poisoned or
//!                                    near its SASL session's end, reconnect attempts spaced by Backoff)
//! ```
//!
//! Reads (metadata, fetch, list offsets, describe calls) are retried here with backoff. Writes that
//! may be applied twice (Produce, WriteTxnMarkers) are never retried here: their callers reconcile.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::{debug, warn};
use uuid::Uuid;

use super::backoff::{Backoff, BackoffConfig};
use super::connection::{BrokerConnection, ConnectionConfig};
use super::error::{ClientError, ConnectionError, Target};
use crate::protocol::ErrorCode;

/// Settings of a cluster client.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    /// `bootstrap.servers`: `host:port` entries.
    pub bootstrap_servers: Vec<String>,
    /// Per-connection settings (client id, timeouts, frame cap, pins, security).
    pub connection: ConnectionConfig,
    /// Spacing of retries and reconnects, and how long a call keeps retrying.
    pub backoff: BackoffConfig,
}

impl ClientConfig {
    /// A config for `bootstrap` (comma-separated `host:port` list) with defaults elsewhere.
    pub fn new(bootstrap: &str) -> Self {
        Self { bootstrap_servers: bootstrap.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(), ..Self::default() }
    }
}

/// A broker as the metadata names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    /// `node.id`.
    pub id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// Rack, if configured.
    pub rack: Option<String>,
}

impl BrokerInfo {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// One partition in the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition index.
    pub partition: i32,
    /// Leader broker id, -1 if none.
    pub leader: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replica broker ids.
    pub replicas: Vec<i32>,
    /// In-sync replica broker ids.
    pub isr: Vec<i32>,
    /// Partition-level error, if any.
    pub error: Option<ErrorCode>,
}

/// One topic in the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Topic id (all zero if the broker does not report one).
    pub topic_id: Uuid,
    /// Internal topic (`__consumer_offsets`, …).
    pub is_internal: bool,
    /// Partitions, sorted by index.
    pub partitions: Vec<PartitionInfo>,
}

/// A snapshot of cluster metadata.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// The cluster id.
    pub cluster_id: Option<String>,
    /// The active controller as brokers see it (-1 if unknown).
    pub controller_id: i32,
    /// Brokers by id.
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Topics by name (only those asked for, or all).
    pub topics: BTreeMap<String, TopicInfo>,
    /// Topics the broker answered with a topic-level error instead (not in `topics`): an
    /// UNKNOWN_TOPIC_OR_PARTITION here may only mean that the answering broker has not caught up
    /// with the controller yet. Set on the snapshot a refresh returns, not kept in the cache.
    pub topic_errors: BTreeMap<String, ErrorCode>,
}

impl Metadata {
    fn from_response(response: MetadataResponse) -> (Self, Vec<(String, ErrorCode)>) {
        let mut errors = Vec::new();
        let brokers = response
            .brokers
            .into_iter()
            .map(|b| {
                let info = BrokerInfo { id: b.node_id.0, host: b.host.to_string(), port: b.port, rack: b.rack.map(|r| r.to_string()) };
                (info.id, info)
            })
            .collect();
        let mut topics = BTreeMap::new();
        for t in response.topics {
            let name = t.name.map(|n| n.0.to_string()).unwrap_or_default();
            if let Some(code) = ErrorCode::try_from_code(t.error_code) {
                errors.push((name, code));
                continue;
            }
            let mut partitions: Vec<PartitionInfo> = t
                .partitions
                .into_iter()
                .map(|p| PartitionInfo {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replica_nodes.into_iter().map(|b| b.0).collect(),
                    isr: p.isr_nodes.into_iter().map(|b| b.0).collect(),
                    error: ErrorCode::try_from_code(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            topics.insert(name.clone(), TopicInfo { name, topic_id: t.topic_id, is_internal: t.is_internal, partitions });
        }
        let topic_errors = errors.iter().cloned().collect();
        let metadata = Self { cluster_id: response.cluster_id.map(|c| c.to_string()), controller_id: response.controller_id.0, brokers, topics, topic_errors };
        (metadata, errors)
    }

    /// The leader of `topic`-`partition`, if known and alive in this snapshot.
    pub fn leader_of(&self, topic: &str, partition: i32) -> Option<i32> {
        let p = self.topics.get(topic)?.partitions.iter().find(|p| p.partition == partition)?;
        (p.leader >= 0 && self.brokers.contains_key(&p.leader)).then_some(p.leader)
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<BrokerConnection>>>>;

/// An async Kafka client for one cluster.
#[derive(Debug)]
pub struct Client {
    config: ClientConfig,
    /// Shared with [`Client::sibling`]s: one metadata cache per cluster, however many connections.
    metadata: Arc<Mutex<Metadata>>,
    /// One slot per broker id; the async mutex serialises (re)connecting to that broker only.
    connections: Mutex<HashMap<i32, Slot>>,
}

impl Client {
    /// Connects to the first bootstrap server that answers and loads the cluster metadata.
    ///
    /// # Errors
    /// [`ClientError::Config`] for an empty bootstrap list or unusable security settings (naming the
    /// key), [`ClientError::Bootstrap`] when none answers within the backoff deadline, or at once when
    /// a broker refuses the credentials or the TLS handshake ([`ClientError::security_failure`]).
    pub async fn connect(config: ClientConfig) -> Result<Self, ClientError> {
        if config.bootstrap_servers.is_empty() {
            return Err(ClientError::Config { key: "bootstrap.servers".to_owned(), message: "no host:port given".to_owned() });
        }
        config.connection.security.validate()?;
        let client = Self { config, metadata: Arc::new(Mutex::new(Metadata::default())), connections: Mutex::new(HashMap::new()) };
        client.refresh_metadata(&[]).await?;
        Ok(client)
    }

    /// A client that knows `metadata` and has never connected (unit tests of its users: it cannot
    /// reach anything).
    #[cfg(test)]
    pub(crate) fn offline(config: ClientConfig, metadata: Metadata) -> Client {
        Self { config, metadata: Arc::new(Mutex::new(metadata)), connections: Mutex::new(HashMap::new()) }
    }

    /// A client of the same cluster with connections of its own, sending `client_id`, and sharing
    /// this client's metadata cache (a refresh by either is seen by both). Sends nothing until
    /// used. For traffic that must not wait behind other requests on a connection (a broker
    /// answers one connection's requests in order): long-polling fetches, above all.
    pub fn sibling(&self, client_id: &str) -> Client {
        let mut config = self.config.clone();
        config.connection.client_id = client_id.to_owned();
        Self { config, metadata: self.metadata.clone(), connections: Mutex::new(HashMap::new()) }
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The last metadata snapshot.
    pub fn cached_metadata(&self) -> Metadata {
        self.lock_metadata().clone()
    }

    /// The cluster id of the last metadata, without copying the snapshot.
    pub fn cached_cluster_id(&self) -> Option<String> {
        self.lock_metadata().cluster_id.clone()
    }

    /// The topic id of `topic` in the last metadata (`None` if the topic is not in it), without
    /// copying the snapshot or asking a broker.
    pub fn cached_topic_id(&self, topic: &str) -> Option<Uuid> {
        self.lock_metadata().topics.get(topic).map(|t| t.topic_id)
    }

    /// The name of the topic with id `topic_id` in the last metadata.
    pub fn cached_topic_name(&self, topic_id: Uuid) -> Option<String> {
        self.lock_metadata().topics.values().find(|t| t.topic_id == topic_id).map(|t| t.name.clone())
    }

    /// Reads the cached metadata without copying it.
    pub fn with_metadata<T>(&self, read: impl FnOnce(&Metadata) -> T) -> T {
        read(&self.lock_metadata())
    }

    fn lock_metadata(&self) -> std::sync::MutexGuard<'_, Metadata> {
        self.metadata.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fetches metadata for `topics` (all topics if empty), merges it into the cache and returns it.
    /// Topics that do not exist are absent from the result (their error is logged at debug).
    ///
    /// # Errors
    /// [`ClientError::Bootstrap`] if no broker answers within the backoff deadline.
    pub async fn refresh_metadata(&self, topics: &[&str]) -> Result<Metadata, ClientError> {
        let request = MetadataRequest::default().with_topics(if topics.is_empty() {
            None
        } else {
            Some(topics.iter().map(|t| MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string((*t).to_owned()))))).collect())
        });
        let mut backoff = Backoff::new(&self.config.backoff);
        loop {
            match self.metadata_once(&request).await {
                Ok(response) => {
                    let (fresh, errors) = Metadata::from_response(response);
                    for (topic, code) in errors {
                        debug!(topic, %code, "metadata: topic error");
                    }
                    let mut cached = self.lock_metadata();
                    cached.cluster_id = fresh.cluster_id.clone();
                    cached.controller_id = fresh.controller_id;
                    cached.brokers = fresh.brokers.clone();
                    if topics.is_empty() {
                        cached.topics = fresh.topics.clone();
                    } else {
                        for t in topics {
                            cached.topics.remove(*t);
                        }
                        cached.topics.extend(fresh.topics.clone());
                    }
                    return Ok(fresh);
                }
                Err(source) if source.is_security_failure() => {
                    // Bad credentials or certificates do not get better by retrying.
                    return Err(ClientError::Bootstrap { bootstrap: self.config.bootstrap_servers.join(","), source });
                }
                Err(source) => match backoff.next_delay() {
                    Some(delay) => {
                        debug!(error = %source, ?delay, "metadata request failed; retrying");
                        tokio::time::sleep(delay).await;
                    }
                    None => {
                        return Err(ClientError::Bootstrap { bootstrap: self.config.bootstrap_servers.join(","), source });
                    }
                },
            }
        }
    }

    /// Refreshes the cached brokers (and cluster id and controller) with one Metadata request that
    /// names no topic; the cached topics stay. A failure leaves the cache as it was.
    async fn refresh_brokers(&self) {
        let request = MetadataRequest::default().with_topics(Some(Vec::new()));
        match Box::pin(self.metadata_once(&request)).await {
            Ok(response) => {
                let (fresh, _) = Metadata::from_response(response);
                let mut cached = self.lock_metadata();
                cached.cluster_id = fresh.cluster_id;
                cached.controller_id = fresh.controller_id;
                cached.brokers = fresh.brokers;
            }
            Err(e) => debug!(error = %e, "broker list refresh failed"),
        }
    }

    /// One metadata attempt: known brokers first, then the bootstrap list. A security failure ends
    /// the attempt at once (the same credentials and trust apply to every broker).
    async fn metadata_once(&self, request: &MetadataRequest) -> Result<MetadataResponse, ConnectionError> {
        let known: Vec<i32> = self.lock_metadata().brokers.keys().copied().collect();
        let mut last = None;
        for id in known {
            match self.connection(id).await {
                Ok(conn) => match conn.send(request, None).await {
                    Ok(r) => return Ok(r),
                    Err(e) => last = Some(e),
                },
                Err(ClientError::Connection { source, .. }) if source.is_security_failure() => return Err(source),
                Err(ClientError::Connection { source, .. }) => last = Some(source),
                Err(_) => {}
            }
        }
        for addr in &self.config.bootstrap_servers {
            match BrokerConnection::connect(addr, self.config.connection.clone()).await {
                Ok(conn) => match conn.send(request, None).await {
                    Ok(r) => return Ok(r),
                    Err(e) => last = Some(e),
                },
                Err(e) if e.is_security_failure() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| ConnectionError::Closed { addr: self.config.bootstrap_servers.join(",") }))
    }

    /// The connection to broker `id`, opened (or re-opened after a failure) on demand.
    ///
    /// # Errors
    /// [`ClientError::UnknownBroker`] if the metadata does not name it, [`ClientError::Connection`]
    /// if it cannot be reached (one attempt; callers retry).
    pub async fn connection(&self, id: i32) -> Result<Arc<BrokerConnection>, ClientError> {
        let slot = {
            let mut map = self.connections.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            map.entry(id).or_default().clone()
        };
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref() {
            // A poisoned connection, or one near the end of its SASL session, is replaced; callers
            // still holding the old one finish their requests on it.
            if conn.is_usable() {
                return Ok(conn.clone());
            }
        }
        let cached = self.lock_metadata().brokers.get(&id).map(BrokerInfo::addr);
        let addr = match cached {
            Some(addr) => addr,
            None => {
                // The cache may be from while the broker was down (a rolling restart): ask once
                // which brokers are alive before giving up on it.
                self.refresh_brokers().await;
                self.lock_metadata().brokers.get(&id).map(BrokerInfo::addr).ok_or(ClientError::UnknownBroker { broker: id })?
            }
        };
        let conn = BrokerConnection::connect(&addr, self.config.connection.clone()).await.map_err(|source| ClientError::Connection {
            broker: id,
            api_key: ApiKey::ApiVersions,
            source,
        })?;
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Any live broker (the controller if known, otherwise the lowest id).
    pub(crate) fn any_broker(&self) -> Result<i32, ClientError> {
        let md = self.lock_metadata();
        if md.brokers.contains_key(&md.controller_id) {
            return Ok(md.controller_id);
        }
        md.brokers.keys().next().copied().ok_or(ClientError::UnknownBroker { broker: -1 })
    }

    /// The leader of `topic`-`partition`. If the cache does not know one, metadata is refreshed
    /// until a leader appears (a new topic, an election) or the retry deadline passes. Looking up a
    /// leader sends nothing to the partition, so this is safe before writes too.
    ///
    /// # Errors
    /// [`ClientError::RetriesExhausted`] around [`ClientError::NoLeader`].
    pub async fn leader_of(&self, topic: &str, partition: i32) -> Result<i32, ClientError> {
        if let Some(id) = self.lock_metadata().leader_of(topic, partition) {
            return Ok(id);
        }
        self.retrying(&[topic], || async {
            let fresh = self.refresh_metadata(&[topic]).await?;
            fresh.leader_of(topic, partition).ok_or_else(|| ClientError::NoLeader { topic: topic.to_owned(), partition })
        })
        .await
    }

    /// The topic id of `topic` (all zero if unknown to this cluster version). A topic that metadata
    /// does not show yet (just created) is waited for within the retry deadline.
    ///
    /// # Errors
    /// [`ClientError::RetriesExhausted`] around `UnknownTopicOrPartition` if it does not exist.
    pub async fn topic_id(&self, topic: &str) -> Result<Uuid, ClientError> {
        if let Some(t) = self.lock_metadata().topics.get(topic) {
            return Ok(t.topic_id);
        }
        self.retrying(&[topic], || async {
            let fresh = self.refresh_metadata(&[topic]).await?;
            fresh.topics.get(topic).map(|t| t.topic_id).ok_or_else(|| ClientError::Broker {
                api_key: ApiKey::Metadata,
                target: Target { topic: Some(topic.to_owned()), ..Target::default() },
                code: ErrorCode::UnknownTopicOrPartition,
                message: None,
            })
        })
        .await
    }

    /// Sends `request` to broker `broker`, mapping transport errors to [`ClientError::Connection`].
    /// No retry.
    ///
    /// # Errors
    /// Connection errors only; the response's error codes are the caller's to read.
    pub async fn send_to<R>(&self, broker: i32, request: &R, version: Option<i16>) -> Result<R::Response, ClientError>
    where
        R: kafka_protocol::protocol::Request + Sync,
        R::Response: Send,
    {
        let api_key = ApiKey::try_from(R::KEY).expect("invariant: every kafka-protocol Request has a known ApiKey");
        let conn = self.connection(broker).await?;
        conn.send(request, version).await.map_err(|source| ClientError::Connection { broker, api_key, source })
    }

    /// Runs `attempt` until it succeeds or fails with an error that retrying cannot fix, refreshing
    /// metadata when the error says it is stale. For reads and other idempotent calls only.
    pub(crate) async fn retrying<T, F, Fut>(&self, topics: &[&str], mut attempt: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let mut backoff = Backoff::new(&self.config.backoff);
        loop {
            let error = match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) if !e.is_retriable() => return Err(e),
                Err(e) => e,
            };
            let Some(delay) = backoff.next_delay() else {
                return Err(ClientError::RetriesExhausted { attempts: backoff.attempts() + 1, elapsed: backoff.elapsed(), source: Box::new(error) });
            };
            if backoff.attempts() > 3 {
                warn!(%error, ?delay, "retrying");
            } else {
                debug!(%error, ?delay, "retrying");
            }
            tokio::time::sleep(delay).await;
            if error.needs_metadata_refresh() {
                // A failed refresh is not fatal here; the next attempt reports the real problem.
                let _ = self.refresh_metadata(topics).await;
            }
        }
    }

    /// Fetches a fresh metadata snapshot including topic ids.
    ///
    /// # Errors
    /// As [`Client::refresh_metadata`].
    pub async fn metadata(&self, topics: &[&str]) -> Result<Metadata, ClientError> {
        self.refresh_metadata(topics).await
    }
}
