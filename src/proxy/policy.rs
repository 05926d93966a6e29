//! The write policy (spec §2): while a topic is mirrored (any state but STOPPED), clients may not
//! write to it.
//!
//! | API                       | refused                                              | granularity |
//! |---------------------------|------------------------------------------------------|-------------|
//! | Produce                   | every partition of a mirror topic                    | partition   |
//! | DeleteRecords             | every partition of a mirror topic                    | partition   |
//! | CreatePartitions          | a mirror topic                                       | topic       |
//! | AlterConfigs              | a mirror topic (it replaces *all* of the topic's configs) | resource |
//! | IncrementalAlterConfigs   | a mirror topic, unless every config it sets is local ([`LOCAL_TOPIC_CONFIGS`]) | resource |
//!
//! The rest of a request goes to the broker untouched; the refused entries are answered by the proxy
//! with the configured error code and a message naming the mirror and its state, merged into the
//! broker's response in the order the client expects nothing about (Kafka clients match results by
//! topic and partition, not position). A request whose entries are all refused never reaches a broker.
//!
//! # The error code
//! Kafka 4.4 has no "read-only topic" code (the proposal's READ_ONLY_TOPIC is not in Apache Kafka;
//! a client would report an unknown code as UNKNOWN_SERVER_ERROR), so an existing non-retriable code
//! is used; `policy.refusal_error_code` changes it. Measured by
//! `proxy::refusal_error_codes_as_clients_see_them` (tests/kafka_it/proxy.rs, run with
//! `--nocapture` to print the table): one idempotent producer per code sends one record to a mirror
//! topic through the proxy, Kafka 4.4.0 broker and Java client, confluent-kafka 2.16 (librdkafka
//! 2.16.0). Times are from process start (the JVM needs about 1 s before it sends anything).
//!
//! | code                          | Java producer                                                   | librdkafka                                  |
//! |-------------------------------|-----------------------------------------------------------------|---------------------------------------------|
//! | 44 POLICY_VIOLATION           | 1.2 s, `PolicyViolationException: <our message>`                | 0.5 s, `POLICY_VIOLATION` "Broker: Policy violation", not retriable |
//! | 29 TOPIC_AUTHORIZATION_FAILED | 1.3 s, `TopicAuthorizationException: Not authorized to access topics: [t]` (message replaced) | 0.5 s, not retriable |
//! | 17 INVALID_TOPIC_EXCEPTION    | 1.4 s, `InvalidTopicException: <our message>`                   | 0.5 s, `TOPIC_EXCEPTION`, not retriable     |
//! | 87 INVALID_RECORD             | 1.2 s, `InvalidRecordException: <our message>`                  | 0.5 s, `INVALID_RECORD`, not retriable      |
//! | -1 UNKNOWN_SERVER_ERROR       | 1.5 s, `UnknownServerException: <our message>`                  | 0.5 s, `UNKNOWN`, not retriable             |
//!
//! All fail fast and none is retried. librdkafka never shows the broker's per-partition message
//! (it reports the code's generic text), so the code's own meaning matters there: POLICY_VIOLATION
//! ("the cluster's policy refuses this") is the one that tells the truth without the message, and the
//! Java client shows the message with it.
//!
//! franz-go 1.22 and KafkaJS 2.2.4 with POLICY_VIOLATION (`proxy::franz_go_through_the_proxy`,
//! `proxy::kafkajs_through_the_proxy`, with `--nocapture`): both fail the send at once (23 ms and
//! 5 ms), non-retriable, with the code's generic text ("Request parameters do not satisfy the
//! configured policy"); like librdkafka they do not surface the per-partition message.

use std::borrow::Cow;
use std::sync::Arc;

use kafka_protocol::messages::{ApiKey, CreatePartitionsResponse, DeleteRecordsResponse, IncrementalAlterConfigsResponse, ProduceResponse, TopicName};
use kafka_protocol::messages::{
    alter_configs_response, create_partitions_response, delete_records_response, incremental_alter_configs_response, produce_response,
};
use kafka_protocol::protocol::StrBytes;

use super::requests::{Keep, RESOURCE_TYPE_TOPIC, ScannedRequest, TopicRef};
use crate::mirror::{MirrorLookup, MirroredTopic};

/// Topic configs that stay local to the destination and may be changed on mirror topics: they are
/// about this cluster's replicas, not the data (spec §7, "except those that must stay local").
pub const LOCAL_TOPIC_CONFIGS: &[&str] =
    &["min.insync.replicas", "unclean.leader.election.enable", "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"];

/// Decides which entries of a write request to refuse.
#[derive(Debug, Clone)]
pub struct WritePolicy {
    lookup: Arc<dyn MirrorLookup>,
    refusal_error_code: i16,
}

/// One refused entry of a request: a topic (with the partitions refused, for Produce and
/// DeleteRecords) or a config resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefusedEntry {
    pub topic: String,
    /// Produce v13+: the topic id the client used.
    pub topic_id: Option<uuid::Uuid>,
    pub partitions: Vec<i32>,
    /// Config requests: the resource type.
    pub resource_type: i8,
    pub message: String,
}

/// The outcome for one request that has refused entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusals {
    pub api_key: ApiKey,
    pub error_code: i16,
    pub entries: Vec<RefusedEntry>,
    /// What to forward, per scanned entry.
    pub keep: Vec<Keep>,
    /// True if nothing is left to forward.
    pub nothing_left: bool,
}

/// The name of the topic `topic` refers to: its own, or the one `resolve` knows for its id (Produce
/// v13+); `None` for an unknown id or a resource that is not a topic.
fn resolved_name<'a>(topic: &'a TopicRef, resolve: &impl Fn(&uuid::Uuid) -> Option<String>) -> Option<Cow<'a, str>> {
    match topic {
        TopicRef::Name(n) => Some(Cow::Borrowed(n.as_str())),
        TopicRef::Id(id) => resolve(id).map(Cow::Owned),
        TopicRef::NotATopic => None,
    }
}

impl WritePolicy {
    /// A policy asking `lookup`, refusing with `refusal_error_code`.
    pub fn new(lookup: Arc<dyn MirrorLookup>, refusal_error_code: i16) -> Self {
        Self { lookup, refusal_error_code }
    }

    /// The lookup.
    pub fn lookup(&self) -> &Arc<dyn MirrorLookup> {
        &self.lookup
    }

    /// The refusal message for `topic`.
    pub fn message(topic: &str, mirrored: &MirroredTopic) -> String {
        format!(
            "Topic '{topic}' is a mirror topic of mirror '{}' in state {}: writes are refused until the mirror topic is stopped (kafka-mirror-proxy)",
            mirrored.mirror, mirrored.state
        )
    }

    /// The mirror of `topic` if the topic is one that clients may not write to.
    fn read_only(&self, topic: &str) -> Option<MirroredTopic> {
        self.lookup.mirrored_topic(topic).filter(|m| m.state.is_read_only())
    }

    /// True if every partition of `topic` may be written: it names a topic (`resolve` maps a Produce
    /// v13 topic id to its name) that is not a read-only mirror topic. False for an id `resolve` does
    /// not know: the caller then takes the path that learns it.
    pub(crate) fn allows_whole_topic(&self, topic: &TopicRef, resolve: impl Fn(&uuid::Uuid) -> Option<String>) -> bool {
        resolved_name(topic, &resolve).is_some_and(|name| self.read_only(&name).is_none())
    }

    /// Checks a scanned write request. `resolve` maps Produce v13 topic ids to names. `None` if
    /// nothing is refused (forward the request unchanged).
    pub(crate) fn check(&self, scanned: &ScannedRequest, resolve: impl Fn(&uuid::Uuid) -> Option<String>) -> Option<Refusals> {
        // Nothing is allocated before the first mirror topic: this runs on every Produce request.
        // `keep` stays empty until then, and from then on has one element per entry seen.
        let mut keep = Vec::new();
        let mut entries = Vec::new();
        for (index, entry) in scanned.entries.iter().enumerate() {
            let topic_id = match &entry.topic {
                TopicRef::Id(id) => Some(*id),
                _ => None,
            };
            let name = resolved_name(&entry.topic, &resolve);
            let mirrored = name.as_deref().and_then(|n| self.read_only(n));
            let (Some(name), Some(mirrored)) = (name, mirrored) else {
                if !keep.is_empty() {
                    keep.push(Keep::All);
                }
                continue;
            };
            let name = name.into_owned();
            if keep.is_empty() {
                keep = vec![Keep::All; index];
            }
            let refuse = match scanned.api_key {
                ApiKey::IncrementalAlterConfigs => {
                    entry.resource_type == RESOURCE_TYPE_TOPIC && entry.config_names.iter().any(|c| !LOCAL_TOPIC_CONFIGS.contains(&c.as_str()))
                }
                _ => true,
            };
            if !refuse {
                keep.push(Keep::All);
                continue;
            }
            keep.push(Keep::None);
            entries.push(RefusedEntry {
                message: Self::message(&name, &mirrored),
                topic: name,
                topic_id,
                partitions: entry.partitions.iter().map(|p| p.index).collect(),
                resource_type: entry.resource_type,
            });
        }
        if entries.is_empty() {
            return None;
        }
        let nothing_left = keep.iter().all(|k| *k == Keep::None);
        Some(Refusals { api_key: scanned.api_key, error_code: self.refusal_error_code, entries, keep, nothing_left })
    }
}

fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

fn text(s: &str) -> Option<StrBytes> {
    Some(StrBytes::from_string(s.to_owned()))
}

impl Refusals {
    /// Adds the refused partitions to a Produce response (a fresh one if `base` is `None`).
    pub(crate) fn produce_response(&self, base: Option<ProduceResponse>) -> ProduceResponse {
        let mut response = base.unwrap_or_default();
        for e in &self.entries {
            let mut topic = produce_response::TopicProduceResponse::default();
            topic.name = topic_name(&e.topic);
            topic.topic_id = e.topic_id.unwrap_or_default();
            for &index in &e.partitions {
                let mut p = produce_response::PartitionProduceResponse::default();
                p.index = index;
                p.error_code = self.error_code;
                p.base_offset = -1;
                p.log_append_time_ms = -1;
                p.log_start_offset = -1;
                p.error_message = text(&e.message);
                topic.partition_responses.push(p);
            }
            response.responses.push(topic);
        }
        response
    }

    /// Adds the refused partitions to a DeleteRecords response.
    pub(crate) fn delete_records_response(&self, base: Option<DeleteRecordsResponse>) -> DeleteRecordsResponse {
        let mut response = base.unwrap_or_default();
        for e in &self.entries {
            let mut topic = delete_records_response::DeleteRecordsTopicResult::default();
            topic.name = topic_name(&e.topic);
            for &index in &e.partitions {
                let mut p = delete_records_response::DeleteRecordsPartitionResult::default();
                p.partition_index = index;
                p.low_watermark = -1;
                p.error_code = self.error_code;
                topic.partitions.push(p);
            }
            response.topics.push(topic);
        }
        response
    }

    /// Adds the refused topics to a CreatePartitions response.
    pub(crate) fn create_partitions_response(&self, base: Option<CreatePartitionsResponse>) -> CreatePartitionsResponse {
        let mut response = base.unwrap_or_default();
        for e in &self.entries {
            let mut r = create_partitions_response::CreatePartitionsTopicResult::default();
            r.name = topic_name(&e.topic);
            r.error_code = self.error_code;
            r.error_message = text(&e.message);
            response.results.push(r);
        }
        response
    }

    /// Adds the refused resources to an AlterConfigs response.
    pub(crate) fn alter_configs_response(
        &self,
        base: Option<kafka_protocol::messages::AlterConfigsResponse>,
    ) -> kafka_protocol::messages::AlterConfigsResponse {
        let mut response = base.unwrap_or_default();
        for e in &self.entries {
            let mut r = alter_configs_response::AlterConfigsResourceResponse::default();
            r.error_code = self.error_code;
            r.error_message = text(&e.message);
            r.resource_type = e.resource_type;
            r.resource_name = StrBytes::from_string(e.topic.clone());
            response.responses.push(r);
        }
        response
    }

    /// Adds the refused resources to an IncrementalAlterConfigs response.
    pub(crate) fn incremental_alter_configs_response(&self, base: Option<IncrementalAlterConfigsResponse>) -> IncrementalAlterConfigsResponse {
        let mut response = base.unwrap_or_default();
        for e in &self.entries {
            let mut r = incremental_alter_configs_response::AlterConfigsResourceResponse::default();
            r.error_code = self.error_code;
            r.error_message = text(&e.message);
            r.resource_type = e.resource_type;
            r.resource_name = StrBytes::from_string(e.topic.clone());
            response.responses.push(r);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::{InMemoryMirrorLookup, PartitionState};
    use crate::proxy::requests::scan_request;
    use crate::proxy::requests::tests::{encode, produce};

    fn policy() -> (WritePolicy, Arc<InMemoryMirrorLookup>) {
        let lookup = Arc::new(InMemoryMirrorLookup::new());
        lookup.set("mirror", "dr", PartitionState::Mirroring);
        lookup.set("stopped", "dr", PartitionState::Stopped);
        (WritePolicy::new(lookup.clone(), 44), lookup)
    }

    #[test]
    fn produce_refuses_only_mirror_partitions() {
        let (policy, _) = policy();
        let frame = encode(&produce(9, &[("free", &[0]), ("mirror", &[0, 1]), ("stopped", &[0])]), 9, 1);
        let scanned = scan_request(&frame, ApiKey::Produce, 9).unwrap();
        let refusals = policy.check(&scanned, |_| None).unwrap();
        assert_eq!(refusals.keep, vec![Keep::All, Keep::None, Keep::All]);
        assert!(!refusals.nothing_left);
        assert_eq!(refusals.entries[0].partitions, vec![0, 1]);
        assert!(refusals.entries[0].message.contains("mirror 'dr' in state MIRRORING"), "{}", refusals.entries[0].message);
        let response = refusals.produce_response(None);
        assert_eq!(response.responses[0].partition_responses.len(), 2);
        assert_eq!(response.responses[0].partition_responses[1].error_code, 44);
    }

    #[test]
    fn nothing_refused_means_forward_unchanged() {
        let (policy, _) = policy();
        let frame = encode(&produce(13, &[("free", &[0])]), 13, 1);
        let scanned = scan_request(&frame, ApiKey::Produce, 13).unwrap();
        assert!(policy.check(&scanned, |_| Some("free".to_owned())).is_none());
        // v13 names topics by id: the resolver decides.
        let frame = encode(&produce(13, &[("mirror", &[0])]), 13, 1);
        let scanned = scan_request(&frame, ApiKey::Produce, 13).unwrap();
        let refusals = policy.check(&scanned, |_| Some("mirror".to_owned())).unwrap();
        assert!(refusals.nothing_left);
        assert_eq!(refusals.entries[0].topic_id, Some(uuid::Uuid::from_u128(6)));
    }

    #[test]
    fn whole_topics_are_allowed_unless_read_only_or_unknown() {
        let (policy, lookup) = policy();
        let name = |n: &str| TopicRef::Name(n.to_owned());
        assert!(policy.allows_whole_topic(&name("free"), |_| None));
        assert!(policy.allows_whole_topic(&name("stopped"), |_| None));
        assert!(!policy.allows_whole_topic(&name("mirror"), |_| None));
        lookup.set("mirror", "dr", PartitionState::Paused);
        assert!(!policy.allows_whole_topic(&name("mirror"), |_| None));
        let id = TopicRef::Id(uuid::Uuid::from_u128(6));
        assert!(policy.allows_whole_topic(&id, |_| Some("free".to_owned())));
        assert!(!policy.allows_whole_topic(&id, |_| Some("mirror".to_owned())));
        assert!(!policy.allows_whole_topic(&id, |_| None), "an unknown id is not allowed here");
        assert!(!policy.allows_whole_topic(&TopicRef::NotATopic, |_| None));
    }

    #[test]
    fn paused_and_failed_are_read_only_too() {
        let (policy, lookup) = policy();
        for state in [PartitionState::Paused, PartitionState::Failed { reason: "x".to_owned() }, PartitionState::Initializing] {
            lookup.set("mirror", "dr", state.clone());
            let frame = encode(&produce(8, &[("mirror", &[0])]), 8, 1);
            let scanned = scan_request(&frame, ApiKey::Produce, 8).unwrap();
            assert!(policy.check(&scanned, |_| None).unwrap().nothing_left, "{state}");
        }
    }
}
