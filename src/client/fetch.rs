//! Fetch: one request to one broker, with or without an incremental fetch session (KIP-227).
//!
//! A [`FetchSession`] is what the caller wants fetched from one broker, kept between requests:
//! the caller [`FetchSession::set`]s a partition when it is added or its fetch offset moves, and
//! [`FetchSession::remove`]s it when it should no longer be fetched. Only those changes travel: an
//! incremental request names the partitions set since the last answer and forgets the removed
//! ones, and the broker answers only for partitions with news (records, a moved high watermark or
//! log start, an error). So an idle partition costs nothing per request, however many partitions
//! the session holds.
//!
//! ```text
//!   set / remove ──► pending changes ──► next request: full (new session) or incremental
//!                                          │ answered: changes now held by the broker
//!                                          └ failed, or a session error: next request is full
//! ```
//!
//! References: KIP-227 (incremental fetch sessions); the broker side is `FetchSession.scala`
//! (`IncrementalFetchContext`, `CachedPartition.maybeUpdateResponseData`), which also moves
//! partitions that returned records to the end of the session, so a response capped by
//! `max_bytes` serves every partition in turn.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, fetch_request};
use uuid::Uuid;

use super::calls::{IsolationLevel, broker_error, partition_target, topic_name};
use super::cluster::Client;
use super::error::{ClientError, Target};
use crate::protocol::ErrorCode;

/// One partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartitionSpec {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// First offset wanted.
    pub fetch_offset: i64,
    /// The leader epoch of the batch that ended at `fetch_offset` (-1: unknown, not checked); see
    /// [`FetchedPartition::diverging_epoch`].
    pub last_fetched_epoch: i32,
    /// Cap on this partition's data, bytes.
    pub partition_max_bytes: i32,
}

/// A Fetch request to one broker.
#[derive(Debug, Clone)]
pub struct FetchSpec {
    /// Partitions (all led by the target broker).
    pub partitions: Vec<FetchPartitionSpec>,
    /// Isolation level.
    pub isolation: IsolationLevel,
    /// How long the broker may wait for `min_bytes`.
    pub max_wait: Duration,
    /// Bytes the broker waits for before answering.
    pub min_bytes: i32,
    /// Cap on the whole response, bytes.
    pub max_bytes: i32,
}

impl FetchSpec {
    /// A fetch of one partition that answers at once.
    pub fn single(topic: &str, partition: i32, fetch_offset: i64, isolation: IsolationLevel, max_bytes: i32) -> Self {
        Self {
            partitions: vec![FetchPartitionSpec { topic: topic.to_owned(), partition, fetch_offset, last_fetched_epoch: -1, partition_max_bytes: max_bytes }],
            isolation,
            max_wait: Duration::ZERO,
            min_bytes: 0,
            max_bytes,
        }
    }

    /// The same fetch, asking the broker to check each partition's log against `epoch`, the
    /// leader epoch of the batch the caller last read before the fetch offset.
    #[must_use]
    pub fn after_epoch(mut self, epoch: i32) -> Self {
        for p in &mut self.partitions {
            p.last_fetched_epoch = epoch;
        }
        self
    }

    fn options(&self) -> FetchOptions {
        FetchOptions { isolation: self.isolation, max_wait: self.max_wait, min_bytes: self.min_bytes, max_bytes: self.max_bytes }
    }
}

/// The request-level settings of a session fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchOptions {
    /// Isolation level.
    pub isolation: IsolationLevel,
    /// How long the broker may wait for `min_bytes`.
    pub max_wait: Duration,
    /// Bytes the broker waits for before answering.
    pub min_bytes: i32,
    /// Cap on the whole response, bytes.
    pub max_bytes: i32,
}

/// What a Fetch returned for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Partition-level error, if any (records are then empty).
    pub error: Option<ErrorCode>,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset (-1 if the broker did not say).
    pub last_stable_offset: i64,
    /// Log start offset (-1 if the broker did not say).
    pub log_start_offset: i64,
    /// Aborted transactions in the returned range: `(producer id, first offset)` (read_committed).
    pub aborted_transactions: Vec<(i64, i64)>,
    /// Raw record batches; the last one may be cut off.
    pub records: Bytes,
    /// Set when the request gave a last fetched epoch (Fetch v12+) and the broker's log does not
    /// continue it: `(epoch, end offset)`, the largest leader epoch the broker has up to the one
    /// asked for and the offset where it ends, which is before the fetch offset (or the epoch is
    /// older than asked). The log was truncated below what the caller read, and rewritten, as after
    /// an unclean leader election. No records come with it.
    pub diverging_epoch: Option<(i32, i64)>,
}

/// A whole Fetch answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// How long the broker asks the client to wait before its next request (a quota it exceeded,
    /// KIP-219: the broker has already answered and mutes the connection meanwhile), ms.
    pub throttle_time_ms: i32,
    /// The partitions answered for: with a session, only those with news.
    pub partitions: Vec<FetchedPartition>,
}

/// What the broker holds of one session partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    topic_id: Uuid,
    fetch_offset: i64,
    last_fetched_epoch: i32,
    partition_max_bytes: i32,
}

type Key = (String, i32);

/// What the next request names (partitions and their entries), and what it forgets (with topic ids).
type RequestEntries<'a> = (Vec<(&'a Key, &'a Entry)>, Vec<(&'a Key, Uuid)>);

/// Incremental fetch session state (KIP-227), kept by the caller between fetches to one broker.
#[derive(Debug, Clone, Default)]
pub struct FetchSession {
    /// Broker-assigned id; 0 before the first answer, or when the broker keeps no session.
    id: i32,
    /// Epoch of the next request: 0 asks for a new session (a full request), 1.. continue it.
    epoch: i32,
    /// What the caller wants fetched.
    wanted: HashMap<Key, Entry>,
    /// What the broker holds (as of the last answered request).
    held: HashMap<Key, Entry>,
    /// Keys whose wanted entry differs from the held one (set, moved or removed since).
    changed: HashSet<Key>,
}

impl FetchSession {
    /// A session that will be created by the next fetch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets the broker-side session; the next fetch starts a new one (a full request).
    pub fn reset(&mut self) {
        self.id = 0;
        self.epoch = 0;
        self.held.clear();
        self.changed = self.wanted.keys().cloned().collect();
    }

    /// The broker-assigned session id (0 before the first response).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Partitions wanted.
    pub fn len(&self) -> usize {
        self.wanted.len()
    }

    /// True if no partition is wanted.
    pub fn is_empty(&self) -> bool {
        self.wanted.is_empty()
    }

    /// True if `topic`-`partition` is wanted.
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        self.wanted.contains_key(&(topic.to_owned(), partition))
    }

    /// The fetch offset wanted for `topic`-`partition`, if it is wanted.
    pub fn offset_of(&self, topic: &str, partition: i32) -> Option<i64> {
        self.wanted.get(&(topic.to_owned(), partition)).map(|e| e.fetch_offset)
    }

    /// Fetches `topic`-`partition` from `fetch_offset` on (adds it, or moves it). `topic_id` may be
    /// nil: it is then looked up when a request needs it (Fetch v13 and later name topics by id).
    /// `last_fetched_epoch`: the leader epoch of the batch read last before `fetch_offset`, for the
    /// broker to check its log against (-1: none; see [`FetchedPartition::diverging_epoch`]).
    pub fn set(&mut self, topic: &str, topic_id: Uuid, partition: i32, fetch_offset: i64, last_fetched_epoch: i32, partition_max_bytes: i32) {
        let key = (topic.to_owned(), partition);
        let entry = Entry { topic_id, fetch_offset, last_fetched_epoch, partition_max_bytes };
        if self.held.get(&key) == Some(&entry) {
            self.changed.remove(&key);
        } else {
            self.changed.insert(key.clone());
        }
        self.wanted.insert(key, entry);
    }

    /// Stops fetching `topic`-`partition`.
    pub fn remove(&mut self, topic: &str, partition: i32) {
        let key = (topic.to_owned(), partition);
        self.wanted.remove(&key);
        if self.held.contains_key(&key) {
            self.changed.insert(key);
        } else {
            self.changed.remove(&key);
        }
    }

    /// Makes the wanted set exactly `spec`'s partitions (the shape of [`Client::fetch`]).
    fn sync_to(&mut self, spec: &FetchSpec) {
        let keep: HashSet<Key> = spec.partitions.iter().map(|p| (p.topic.clone(), p.partition)).collect();
        let gone: Vec<Key> = self.wanted.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        for (t, p) in gone {
            self.remove(&t, p);
        }
        for p in &spec.partitions {
            let id = self.wanted.get(&(p.topic.clone(), p.partition)).map_or(Uuid::nil(), |e| e.topic_id);
            self.set(&p.topic, id, p.partition, p.fetch_offset, p.last_fetched_epoch, p.partition_max_bytes);
        }
    }

    /// True if the next request starts a session (and so names every wanted partition).
    fn is_full(&self) -> bool {
        self.epoch == 0
    }

    /// The partitions the next request names, and those it forgets.
    fn request_entries(&self) -> RequestEntries<'_> {
        if self.is_full() {
            return (self.wanted.iter().collect(), Vec::new());
        }
        let mut send = Vec::new();
        let mut forget = Vec::new();
        for key in &self.changed {
            match self.wanted.get(key) {
                Some(entry) => send.push((key, entry)),
                None => forget.push((key, self.held.get(key).map_or(Uuid::nil(), |e| e.topic_id))),
            }
        }
        (send, forget)
    }

    /// The broker answered `response_session_id` without a session error: what was sent is held.
    fn answered(&mut self, response_session_id: i32) {
        if self.is_full() {
            self.held = self.wanted.clone();
        } else {
            for key in self.changed.drain() {
                match self.wanted.get(&key) {
                    Some(e) => {
                        self.held.insert(key, *e);
                    }
                    None => {
                        self.held.remove(&key);
                    }
                }
            }
        }
        self.changed.clear();
        if response_session_id == 0 {
            // No session (the broker's cache is full, or sessions are off): every request is full.
            self.id = 0;
            self.epoch = 0;
            self.held.clear();
            self.changed = self.wanted.keys().cloned().collect();
        } else if self.id != response_session_id {
            self.id = response_session_id;
            self.epoch = 1;
        } else {
            // Epochs wrap from i32::MAX to 1 (0 would ask for a new session).
            self.epoch = if self.epoch == i32::MAX { 1 } else { self.epoch + 1 };
        }
    }
}

impl Client {
    /// Sends one Fetch to `broker`. No retry; partition errors are returned in each entry, a
    /// top-level error as [`ClientError::Broker`]. With a session, the session's wanted set
    /// becomes exactly `spec`'s partitions, and a stale session is reset and reported as the
    /// broker's `FetchSessionIdNotFound`/`InvalidFetchSessionEpoch` error.
    ///
    /// # Errors
    /// Transport errors and top-level broker errors.
    pub async fn fetch(&self, broker: i32, spec: &FetchSpec, session: Option<&mut FetchSession>) -> Result<Vec<FetchedPartition>, ClientError> {
        let mut sessionless = FetchSession::new();
        let (session, keep) = match session {
            Some(s) => (s, true),
            None => (&mut sessionless, false),
        };
        session.sync_to(spec);
        let fetched = self.fetch_with(broker, session, &spec.options(), keep).await?;
        Ok(fetched.partitions)
    }

    /// Sends one Fetch of `session`'s partitions to `broker`: a full request that starts a session
    /// when the session is new (or was reset), otherwise only the changes since the last answer.
    /// No retry. Partitions answered for are those with news.
    ///
    /// # Errors
    /// Transport errors and top-level broker errors; a session error also resets the session.
    pub async fn fetch_session(&self, broker: i32, session: &mut FetchSession, options: &FetchOptions) -> Result<Fetched, ClientError> {
        self.fetch_with(broker, session, options, true).await
    }

    async fn fetch_with(&self, broker: i32, session: &mut FetchSession, options: &FetchOptions, keep_session: bool) -> Result<Fetched, ClientError> {
        let connection_error = |source| ClientError::Connection { broker, api_key: ApiKey::Fetch, source };
        let conn = self.connection(broker).await?;
        let version = conn.version_for(ApiKey::Fetch, None).map_err(connection_error)?;
        let (send, forget) = session.request_entries();
        // Topic ids are needed from v13 on: the session's, else the metadata's.
        let mut ids: BTreeMap<String, Uuid> = BTreeMap::new();
        for (key, id) in send.iter().map(|(k, e)| (*k, e.topic_id)).chain(forget.iter().map(|(k, id)| (*k, *id))) {
            if ids.get(&key.0).is_none_or(|i| i.is_nil()) {
                let id = if version < 13 {
                    Uuid::nil()
                } else if id.is_nil() {
                    self.topic_id(&key.0).await?
                } else {
                    id
                };
                ids.insert(key.0.clone(), id);
            }
        }
        let mut topics: BTreeMap<&str, Vec<fetch_request::FetchPartition>> = BTreeMap::new();
        for ((topic, partition), entry) in &send {
            topics.entry(topic.as_str()).or_default().push(
                fetch_request::FetchPartition::default()
                    .with_partition(*partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(entry.fetch_offset)
                    // The field exists from v12 on; earlier versions cannot carry it.
                    .with_last_fetched_epoch(if version >= 12 { entry.last_fetched_epoch } else { -1 })
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(entry.partition_max_bytes),
            );
        }
        let mut forgotten: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for ((topic, partition), _) in &forget {
            forgotten.entry(topic.as_str()).or_default().push(*partition);
        }
        let id_of = |t: &str| ids.get(t).copied().unwrap_or_default();
        let (session_id, session_epoch) = if keep_session { (session.id, session.epoch) } else { (0, -1) };
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(i32::try_from(options.max_wait.as_millis()).unwrap_or(i32::MAX))
            .with_min_bytes(options.min_bytes)
            .with_max_bytes(options.max_bytes)
            .with_isolation_level(options.isolation.code())
            .with_session_id(session_id)
            .with_session_epoch(session_epoch)
            .with_forgotten_topics_data(
                forgotten
                    .into_iter()
                    .map(|(t, ps)| fetch_request::ForgottenTopic::default().with_topic(topic_name(t)).with_topic_id(id_of(t)).with_partitions(ps))
                    .collect(),
            )
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, parts)| fetch_request::FetchTopic::default().with_topic(topic_name(t)).with_topic_id(id_of(t)).with_partitions(parts))
                    .collect(),
            );
        let response = match conn.send(&request, Some(version)).await {
            Ok(r) => r,
            Err(source) => {
                // The broker may or may not have moved the session on: start over.
                session.reset();
                return Err(connection_error(source));
            }
        };
        if keep_session {
            match ErrorCode::try_from_code(response.error_code) {
                None => session.answered(response.session_id),
                Some(_) => session.reset(),
            }
        }
        broker_error(ApiKey::Fetch, Target { broker: Some(broker), ..Target::default() }, response.error_code, None)?;
        let names_by_id: BTreeMap<Uuid, &String> = ids.iter().map(|(n, id)| (*id, n)).collect();
        let mut out = Vec::new();
        for t in response.responses {
            let name = if !t.topic.0.is_empty() {
                t.topic.0.to_string()
            } else if let Some(n) = names_by_id.get(&t.topic_id) {
                (*n).clone()
            } else {
                // An incremental answer names topics not in this request: the session's, else the
                // metadata's.
                session
                    .wanted
                    .iter()
                    .find(|(_, e)| e.topic_id == t.topic_id)
                    .map(|((n, _), _)| n.clone())
                    .or_else(|| self.cached_topic_name(t.topic_id))
                    .unwrap_or_default()
            };
            for p in t.partitions {
                out.push(FetchedPartition {
                    topic: name.clone(),
                    partition: p.partition_index,
                    error: ErrorCode::try_from_code(p.error_code),
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    aborted_transactions: p.aborted_transactions.unwrap_or_default().into_iter().map(|a| (a.producer_id.0, a.first_offset)).collect(),
                    records: p.records.unwrap_or_default(),
                    diverging_epoch: (version >= 12 && p.diverging_epoch.epoch >= 0).then_some((p.diverging_epoch.epoch, p.diverging_epoch.end_offset)),
                });
            }
        }
        Ok(Fetched { throttle_time_ms: response.throttle_time_ms, partitions: out })
    }

    /// Fetches one partition from its leader (no session), retrying leader changes and transport
    /// errors. `max_bytes` caps the data returned.
    ///
    /// # Errors
    /// A partition error that retrying did not cure (e.g. `OffsetOutOfRange`).
    pub async fn fetch_partition(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        isolation: IsolationLevel,
        max_bytes: i32,
    ) -> Result<FetchedPartition, ClientError> {
        self.retrying(&[topic], || async {
            let leader = self.leader_of(topic, partition).await?;
            let spec = FetchSpec::single(topic, partition, offset, isolation, max_bytes);
            let fetched = self.fetch(leader, &spec, None).await?;
            let p = fetched
                .into_iter()
                .find(|p| p.topic == topic && p.partition == partition)
                .ok_or_else(|| ClientError::MissingInResponse { api_key: ApiKey::Fetch, target: partition_target(leader, topic, partition) })?;
            if let Some(code) = p.error {
                return Err(ClientError::Broker { api_key: ApiKey::Fetch, target: partition_target(leader, topic, partition), code, message: None });
            }
            Ok(p)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(entries: &[(&Key, &Entry)]) -> Vec<Key> {
        let mut k: Vec<Key> = entries.iter().map(|(k, _)| (*k).clone()).collect();
        k.sort();
        k
    }

    fn forgotten(entries: &[(&Key, Uuid)]) -> Vec<Key> {
        let mut k: Vec<Key> = entries.iter().map(|(k, _)| (*k).clone()).collect();
        k.sort();
        k
    }

    /// A new session sends everything; later requests only what changed since the last answer, and
    /// forget what was removed; a reset (or an answer without a session) makes the next one full.
    #[test]
    fn only_changes_travel_once_a_session_exists() {
        let mut s = FetchSession::new();
        for p in 0..3 {
            s.set("t", Uuid::nil(), p, 0, -1, 100);
        }
        let (send, forget) = s.request_entries();
        assert_eq!((keys(&send).len(), forget.len()), (3, 0));
        s.answered(7);
        assert_eq!((s.id(), s.epoch), (7, 1));
        let (send, forget) = s.request_entries();
        assert!(send.is_empty() && forget.is_empty(), "idle: an empty incremental request");

        s.set("t", Uuid::nil(), 1, 5, -1, 100);
        s.set("t", Uuid::nil(), 2, 0, -1, 100); // unchanged
        s.remove("t", 0);
        s.set("u", Uuid::nil(), 0, 0, -1, 100);
        let (send, forget) = s.request_entries();
        assert_eq!(keys(&send), vec![("t".to_owned(), 1), ("u".to_owned(), 0)]);
        assert_eq!(forgotten(&forget), vec![("t".to_owned(), 0)]);
        s.answered(7);
        assert_eq!(s.epoch, 2);
        assert!(s.request_entries().0.is_empty() && s.request_entries().1.is_empty());

        // Set back to what the broker holds: nothing to send.
        s.set("t", Uuid::nil(), 1, 9, -1, 100);
        s.set("t", Uuid::nil(), 1, 5, -1, 100);
        assert!(s.request_entries().0.is_empty());
        // A new last fetched epoch at the same offset travels: the broker checks against it.
        s.set("t", Uuid::nil(), 1, 5, 4, 100);
        assert_eq!(keys(&s.request_entries().0), vec![("t".to_owned(), 1)]);
        s.set("t", Uuid::nil(), 1, 5, -1, 100);
        // Added and removed before any request: nothing to send or forget.
        s.set("v", Uuid::nil(), 0, 0, -1, 100);
        s.remove("v", 0);
        assert!(s.request_entries().0.is_empty() && s.request_entries().1.is_empty());

        s.reset();
        let (send, _) = s.request_entries();
        assert_eq!(keys(&send).len(), 3, "after a reset every wanted partition is sent");
        s.answered(0);
        assert_eq!(s.request_entries().0.len(), 3, "no session on the broker: every request is full");
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn epochs_wrap_to_one() {
        let mut s = FetchSession::new();
        s.set("t", Uuid::nil(), 0, 0, -1, 1);
        s.answered(3);
        s.epoch = i32::MAX;
        s.answered(3);
        assert_eq!(s.epoch, 1);
        s.answered(4);
        assert_eq!((s.id, s.epoch), (4, 1), "a new session id starts at epoch 1");
    }
}
