//! Rewriting broker responses: broker endpoints become the proxy's, ApiVersions is capped, refused
//! writes are merged in, and the authenticated principal is noticed.
//!
//! Responses come from our destination brokers, so they are decoded with the `kafka-protocol` crate
//! (which trusts counts); client requests never are (see [`super::wire`]). Only responses that need a
//! change are decoded and re-encoded; everything else is forwarded as the broker's bytes. Produce (v10+)
//! and Fetch (v16+) responses, the ones that can carry KIP-951 leader endpoints, are first walked
//! without allocating ([`produce_has_node_endpoints`], [`fetch_has_node_endpoints`]) and decoded only
//! if they actually carry some; otherwise the broker's bytes go to the client.
//!
//! # Endpoint audit, Kafka 4.4
//! Every message of Kafka 4.4.0 (`common/message/*.json` in kafka-clients 4.4.0, 203 definitions)
//! with a host/port field, and what the proxy does with it. The proxy fronts the brokers' client
//! listeners, nothing else: an endpoint is rewritten when it is a broker a client is meant to connect
//! to, and left alone otherwise.
//!
//! | message (api key)                     | field                                        | proxy                | why |
//! |---------------------------------------|----------------------------------------------|----------------------|-----|
//! | MetadataResponse (3)                  | `brokers[]`                                  | rewritten            | the brokers clients connect to |
//! | FindCoordinatorResponse (10)          | `host`/`port` (v0–3), `coordinators[]` (v4+) | rewritten            | the coordinator is a broker |
//! | DescribeClusterResponse (60)          | `brokers[]`, `endpoint_type` 1 (brokers)     | rewritten            | brokers, as in Metadata |
//! | DescribeClusterResponse (60)          | `brokers[]`, `endpoint_type` 2 (controllers) | unchanged            | controllers (KIP-919); a broker answers such a request with MISMATCHED_ENDPOINT_TYPE anyway |
//! | ProduceResponse (0)                   | `node_endpoints` (v10+, tagged, KIP-951)     | rewritten            | new leaders, clients connect to them |
//! | FetchResponse (1)                     | `node_endpoints` (v16+, tagged, KIP-951)     | rewritten            | the same; in a streamed (large) response within the broker's bytes, else left out ([`super::stream`]) |
//! | ShareFetchResponse (78)               | `node_endpoints`                             | rewritten (v1–2)     | the same, for share consumers (KIP-932); walked by [`share`], not decoded |
//! | ShareAcknowledgeResponse (79)         | `node_endpoints`                             | rewritten (v1–2)     | the same |
//! | DescribeQuorumResponse (55)           | `nodes[].listeners` (v2+, KIP-853)           | unchanged            | the KRaft controllers' own listeners (e.g. `CONTROLLER://host:9093`), shown by `kafka-metadata-quorum describe`; no client connects to them from this answer, and the proxy has no controller listener to map them to (a broker listener in their place would send controller RPCs to brokers) |
//! | AddRaftVoterRequest (80)              | `listeners[]`                                | unchanged            | a new controller's own listeners, given by the operator; the quorum must use them as they are |
//! | StreamsGroupHeartbeatRequest/Response (88) | `user_endpoint`, `partitions_by_user_endpoint` | unchanged    | Kafka Streams application endpoints for interactive queries (KIP-1071), not brokers |
//! | StreamsGroupDescribeResponse (89)     | `members[].user_endpoint`                    | unchanged            | the same |
//! | VoteResponse (52), BeginQuorumEpochRequest/Response (53), EndQuorumEpochRequest/Response (54), FetchSnapshotResponse (59), UpdateRaftVoterRequest/Response (82) | leader / voter endpoints (KIP-853) | not seen | controller-to-controller RPCs: only controller listeners serve them, and brokers do not advertise them |
//! | BrokerRegistrationRequest (62), ControllerRegistrationRequest (70) | `listeners[]`              | not seen             | broker/controller to controller only |
//! | VotersRecord                          | voter endpoints                              | not seen             | a metadata log record, not a client message |
//!
//! Fields named `*Host` that are not endpoints are forwarded unchanged and say something about the
//! proxy: `client_host` of DescribeGroups (15), ConsumerGroupDescribe (69), ShareGroupDescribe (77) and
//! StreamsGroupDescribe (89) members is the address the broker sees, that is the proxy's; ACL `host`
//! (CreateAcls 30, DescribeAcls 29, DeleteAcls 31) is matched by the broker against the proxy's
//! address too, so host-restricted ACLs do not work through the proxy. DescribeTopicPartitions (75)
//! names nodes by id only (clients resolve them through Metadata). GetTelemetrySubscriptions (71) and
//! PushTelemetry (72) carry no endpoints.
//!
//! Tests through the proxy with real clients: Metadata, FindCoordinator and DescribeCluster by the Java
//! admin client, console consumers (classic and KIP-848 groups), librdkafka, franz-go and KafkaJS;
//! Produce/Fetch leader endpoints by a Produce v12 and a Fetch v17 sent to a broker that does not
//! lead (the real broker's NOT_LEADER_OR_FOLLOWER answer names the leader at the proxy's listener;
//! the Fetch also as a streamed response of 1.5 MB),
//! by the leader-change test with the Java clients, and by the unit tests below;
//! ShareFetch/ShareAcknowledge by `kafka-console-share-consumer` at v2 (every response walked by
//! [`share`]); DescribeQuorum by `kafka-metadata-quorum describe --status` (answer as
//! directly, controller endpoints unchanged). All in `tests/kafka_it/proxy.rs`.
//!
//! # References
//! - KIP-951 (leader discovery optimisations): <https://cwiki.apache.org/confluence/x/kQmzDw>
//! - KIP-853 (KRaft controller membership changes):
//!   <https://cwiki.apache.org/confluence/display/KAFKA/KIP-853%3A+KRaft+Controller+Membership+Changes>
//! - KIP-932 (share groups): <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>

use std::collections::HashMap;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{
    AlterConfigsResponse, ApiKey, ApiVersionsResponse, CreatePartitionsResponse, DeleteRecordsResponse, DescribeClusterResponse, FetchResponse,
    FindCoordinatorResponse, IncrementalAlterConfigsResponse, MetadataResponse, ProduceResponse, ResponseHeader, SaslAuthenticateResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use super::policy::Refusals;
use super::versions::cap_api_versions;

pub(crate) mod node_endpoints;
mod share;
pub(crate) use share::ShareResponse;
pub(crate) use share::VERSIONS as SHARE_VERSIONS;

/// A response could not be decoded or encoded. The session that got it is closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// The broker's response did not decode (or had bytes left over).
    #[error("cannot decode the {api_key:?} v{api_version} response: {message}")]
    Decode { api_key: ApiKey, api_version: i16, message: String },
    /// The rewritten response did not encode.
    #[error("cannot encode the {api_key:?} v{api_version} response: {message}")]
    Encode { api_key: ApiKey, api_version: i16, message: String },
}

/// A proxy endpoint that replaces a broker's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Advertised host.
    pub host: String,
    /// Listener port.
    pub port: i32,
}

/// A broker endpoint found in a response: `(node_id, host, port)`.
pub type BrokerEndpoint = (i32, String, i32);

/// The responses the proxy decodes.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant, reason = "one short-lived value per rewritten response")]
pub(crate) enum Decoded {
    Metadata(MetadataResponse),
    FindCoordinator(FindCoordinatorResponse),
    DescribeCluster(DescribeClusterResponse),
    Produce(ProduceResponse),
    Fetch(FetchResponse),
    /// ShareFetch or ShareAcknowledge: walked, not decoded ([`share`]).
    Share(ShareResponse),
    ApiVersions(ApiVersionsResponse),
    DeleteRecords(DeleteRecordsResponse),
    CreatePartitions(CreatePartitionsResponse),
    AlterConfigs(AlterConfigsResponse),
    IncrementalAlterConfigs(IncrementalAlterConfigsResponse),
    SaslAuthenticate(SaslAuthenticateResponse),
}

/// True if responses of `api_key` at `api_version` may need rewriting (endpoints or capping).
pub(crate) fn needs_decode(api_key: ApiKey, api_version: i16) -> bool {
    match api_key {
        ApiKey::Metadata
        | ApiKey::FindCoordinator
        | ApiKey::DescribeCluster
        | ApiKey::ShareFetch
        | ApiKey::ShareAcknowledge
        | ApiKey::ApiVersions
        | ApiKey::SaslAuthenticate => true,
        ApiKey::Produce => api_version >= 10,
        ApiKey::Fetch => api_version >= 16,
        _ => false,
    }
}

fn decode_one<T: Decodable>(body: &mut Bytes, api_key: ApiKey, api_version: i16) -> Result<T, RewriteError> {
    let decode_err = |message: String| RewriteError::Decode { api_key, api_version, message };
    let value = T::decode(body, api_version).map_err(|e| decode_err(format!("{e:#}")))?;
    if body.has_remaining() {
        return Err(decode_err(format!("{} bytes left over", body.remaining())));
    }
    Ok(value)
}

/// Splits a response frame into its correlation id and body, given the response header version.
///
/// # Errors
/// [`RewriteError::Decode`] for a truncated header.
pub(crate) fn split_response(frame: Bytes, api_key: ApiKey, api_version: i16) -> Result<(i32, Bytes), RewriteError> {
    let mut buf = frame;
    let header = ResponseHeader::decode(&mut buf, api_key.response_header_version(api_version)).map_err(|e| RewriteError::Decode {
        api_key,
        api_version,
        message: format!("header: {e:#}"),
    })?;
    Ok((header.correlation_id, buf))
}

/// True if a Fetch response body (v12+, flexible) carries the top-level `node_endpoints` tagged field
/// (tag 0, KIP-951). Walks the response without allocating and without touching record data, so
/// the common case (no leader change) costs a pass over partition headers instead of a full decode.
///
/// # Errors
/// A body that does not match the schema (the caller then decodes it fully and reports that).
pub(crate) fn fetch_has_node_endpoints(body: &[u8]) -> Result<bool, super::wire::WireError> {
    use super::wire::Reader;
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    r.i16("error_code")?;
    r.i32("session_id")?;
    let topics = r.array_len(true, 17, "responses")?.unwrap_or(0);
    for _ in 0..topics {
        r.uuid("topic_id")?;
        let partitions = r.array_len(true, 40, "partitions")?.unwrap_or(0);
        for _ in 0..partitions {
            r.i32("partition_index")?;
            r.i16("error_code")?;
            r.i64("high_watermark")?;
            r.i64("last_stable_offset")?;
            r.i64("log_start_offset")?;
            if let Some(n) = r.array_len(true, 17, "aborted_transactions")? {
                for _ in 0..n {
                    r.i64("producer_id")?;
                    r.i64("first_offset")?;
                    r.skip_tagged_fields()?;
                }
            }
            r.i32("preferred_read_replica")?;
            r.skip_bytes(true, "records")?;
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    has_tag_0(&mut r)
}

/// True if `frame` (a whole response) is a Produce (v10+) or Fetch (v16+) response that carries no
/// KIP-951 leader endpoints, so it can be forwarded as it is; false for every other response, and for
/// one that does not walk cleanly (the full decode then reports the problem).
pub(crate) fn carries_no_endpoints(api_key: ApiKey, api_version: i16, frame: &Bytes) -> bool {
    let walk = match api_key {
        ApiKey::Produce if api_version >= 10 => produce_has_node_endpoints,
        ApiKey::Fetch if api_version >= 16 => |body: &[u8], _| fetch_has_node_endpoints(body),
        _ => return false,
    };
    split_response(frame.clone(), api_key, api_version).is_ok_and(|(_, body)| walk(&body, api_version) == Ok(false))
}

/// True if a Produce response body (v10+, flexible) carries the top-level `node_endpoints` tagged
/// field (tag 0, KIP-951). Like [`fetch_has_node_endpoints`]: a walk over the partition results
/// without allocating, so a Produce response without a leader change (nearly all of them) is
/// forwarded as the broker's bytes instead of being decoded and dropped.
///
/// # Errors
/// A body that does not match the schema (the caller then decodes it fully and reports that).
pub(crate) fn produce_has_node_endpoints(body: &[u8], api_version: i16) -> Result<bool, super::wire::WireError> {
    use super::wire::Reader;
    let mut r = Reader::new(body);
    let topics = r.array_len(true, 3, "responses")?.unwrap_or(0);
    for _ in 0..topics {
        if api_version >= 13 {
            r.uuid("topic_id")?;
        } else {
            r.skip_bytes(true, "name")?;
        }
        // 33 bytes at least: index, error code, three offsets, two empty arrays/strings, tags.
        let partitions = r.array_len(true, 33, "partition_responses")?.unwrap_or(0);
        for _ in 0..partitions {
            r.i32("index")?;
            r.i16("error_code")?;
            r.i64("base_offset")?;
            r.i64("log_append_time_ms")?;
            r.i64("log_start_offset")?;
            if let Some(n) = r.array_len(true, 6, "record_errors")? {
                for _ in 0..n {
                    r.i32("batch_index")?;
                    r.skip_bytes(true, "batch_index_error_message")?;
                    r.skip_tagged_fields()?;
                }
            }
            r.skip_bytes(true, "error_message")?;
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    r.i32("throttle_time_ms")?;
    has_tag_0(&mut r)
}

/// Reads the top-level tagged fields at the end of a body: true if tag 0 is present with more than
/// an empty array, and nothing follows.
fn has_tag_0(r: &mut super::wire::Reader<'_>) -> Result<bool, super::wire::WireError> {
    let count = r.uvarint()?;
    let mut found = false;
    for _ in 0..count {
        let tag = r.uvarint()?;
        let size = r.uvarint()? as usize;
        // An empty compact array is one byte: endpoints are present only in a longer field.
        found |= tag == 0 && size > 1;
        r.skip(size, "tagged field")?;
    }
    r.finish()?;
    Ok(found)
}

impl Decoded {
    /// Decodes a response body of `api_key` at `api_version`.
    ///
    /// # Errors
    /// [`RewriteError::Decode`], also for an API the proxy does not decode.
    pub(crate) fn decode(api_key: ApiKey, api_version: i16, mut body: Bytes) -> Result<Self, RewriteError> {
        let b = &mut body;
        let (k, v) = (api_key, api_version);
        Ok(match api_key {
            ApiKey::Metadata => Self::Metadata(decode_one(b, k, v)?),
            ApiKey::FindCoordinator => Self::FindCoordinator(decode_one(b, k, v)?),
            ApiKey::DescribeCluster => Self::DescribeCluster(decode_one(b, k, v)?),
            ApiKey::Produce => Self::Produce(decode_one(b, k, v)?),
            ApiKey::Fetch => Self::Fetch(decode_one(b, k, v)?),
            ApiKey::ShareFetch | ApiKey::ShareAcknowledge => {
                Self::Share(ShareResponse::walk(k, v, body).map_err(|e| RewriteError::Decode { api_key: k, api_version: v, message: e.to_string() })?)
            }
            ApiKey::ApiVersions => Self::ApiVersions(decode_one(b, k, v)?),
            ApiKey::DeleteRecords => Self::DeleteRecords(decode_one(b, k, v)?),
            ApiKey::CreatePartitions => Self::CreatePartitions(decode_one(b, k, v)?),
            ApiKey::AlterConfigs => Self::AlterConfigs(decode_one(b, k, v)?),
            ApiKey::IncrementalAlterConfigs => Self::IncrementalAlterConfigs(decode_one(b, k, v)?),
            ApiKey::SaslAuthenticate => Self::SaslAuthenticate(decode_one(b, k, v)?),
            other => {
                return Err(RewriteError::Decode { api_key: other, api_version, message: "not an API the proxy decodes".to_owned() });
            }
        })
    }

    /// An empty response of `api_key` with the refusals filled in (nothing was forwarded).
    pub(crate) fn from_refusals(refusals: &Refusals) -> Option<Self> {
        Some(match refusals.api_key {
            ApiKey::Produce => Self::Produce(refusals.produce_response(None)),
            ApiKey::DeleteRecords => Self::DeleteRecords(refusals.delete_records_response(None)),
            ApiKey::CreatePartitions => Self::CreatePartitions(refusals.create_partitions_response(None)),
            ApiKey::AlterConfigs => Self::AlterConfigs(refusals.alter_configs_response(None)),
            ApiKey::IncrementalAlterConfigs => Self::IncrementalAlterConfigs(refusals.incremental_alter_configs_response(None)),
            _ => return None,
        })
    }

    /// Adds the refusals to this (broker) response.
    pub(crate) fn merge_refusals(self, refusals: &Refusals) -> Self {
        match self {
            Self::Produce(r) => Self::Produce(refusals.produce_response(Some(r))),
            Self::DeleteRecords(r) => Self::DeleteRecords(refusals.delete_records_response(Some(r))),
            Self::CreatePartitions(r) => Self::CreatePartitions(refusals.create_partitions_response(Some(r))),
            Self::AlterConfigs(r) => Self::AlterConfigs(refusals.alter_configs_response(Some(r))),
            Self::IncrementalAlterConfigs(r) => Self::IncrementalAlterConfigs(refusals.incremental_alter_configs_response(Some(r))),
            other => other,
        }
    }

    /// The broker endpoints this response carries.
    pub(crate) fn broker_endpoints(&self) -> Vec<BrokerEndpoint> {
        let s = |h: &StrBytes| h.to_string();
        match self {
            Self::Metadata(r) => r.brokers.iter().map(|b| (b.node_id.0, s(&b.host), b.port)).collect(),
            Self::FindCoordinator(r) => {
                let mut out: Vec<BrokerEndpoint> = r.coordinators.iter().filter(|c| c.node_id.0 >= 0).map(|c| (c.node_id.0, s(&c.host), c.port)).collect();
                if r.node_id.0 >= 0 && !r.host.is_empty() {
                    out.push((r.node_id.0, s(&r.host), r.port));
                }
                out
            }
            Self::DescribeCluster(r) if r.endpoint_type != 2 => r.brokers.iter().map(|b| (b.broker_id.0, s(&b.host), b.port)).collect(),
            Self::Produce(r) => r.node_endpoints.iter().map(|n| (n.node_id.0, s(&n.host), n.port)).collect(),
            Self::Fetch(r) => r.node_endpoints.iter().map(|n| (n.node_id.0, s(&n.host), n.port)).collect(),
            Self::Share(r) => r.broker_endpoints(),
            _ => Vec::new(),
        }
    }

    /// Topic ids and names a Metadata response carries.
    pub(crate) fn topic_ids(&self) -> Vec<(uuid::Uuid, String)> {
        match self {
            Self::Metadata(r) => {
                r.topics.iter().filter(|t| !t.topic_id.is_nil()).filter_map(|t| t.name.as_ref().map(|n| (t.topic_id, n.0.to_string()))).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Replaces every broker endpoint found in `map` (by node id). Endpoints not in the map are left
    /// as they are.
    pub(crate) fn apply_endpoints(&mut self, map: &HashMap<i32, Endpoint>) {
        fn set(map: &HashMap<i32, Endpoint>, id: i32, host: &mut StrBytes, port: &mut i32) {
            if let Some(e) = map.get(&id) {
                *host = StrBytes::from_string(e.host.clone());
                *port = e.port;
            }
        }
        match self {
            Self::Metadata(r) => r.brokers.iter_mut().for_each(|b| set(map, b.node_id.0, &mut b.host, &mut b.port)),
            Self::FindCoordinator(r) => {
                r.coordinators.iter_mut().for_each(|c| set(map, c.node_id.0, &mut c.host, &mut c.port));
                // v0–3 only: from v4 the top-level fields are absent (empty host) and must stay unset.
                if !r.host.is_empty() {
                    set(map, r.node_id.0, &mut r.host, &mut r.port);
                }
            }
            Self::DescribeCluster(r) if r.endpoint_type != 2 => r.brokers.iter_mut().for_each(|b| set(map, b.broker_id.0, &mut b.host, &mut b.port)),
            Self::Produce(r) => r.node_endpoints.iter_mut().for_each(|n| set(map, n.node_id.0, &mut n.host, &mut n.port)),
            Self::Fetch(r) => r.node_endpoints.iter_mut().for_each(|n| set(map, n.node_id.0, &mut n.host, &mut n.port)),
            Self::Share(r) => r.apply_endpoints(map),
            _ => {}
        }
    }

    /// Caps an ApiVersions response and adds `served` (`(api_key, min, max)` of the APIs the proxy
    /// serves itself: the mirror APIs); a no-op for other responses.
    pub(crate) fn cap_versions(&mut self, served: &[(i16, i16, i16)]) {
        if let Self::ApiVersions(r) = self {
            cap_api_versions(r);
            r.api_keys.retain(|k| !served.iter().any(|(key, _, _)| *key == k.api_key));
            r.api_keys.extend(served.iter().map(|&(key, min, max)| {
                kafka_protocol::messages::api_versions_response::ApiVersion::default().with_api_key(key).with_min_version(min).with_max_version(max)
            }));
        }
    }

    /// Whether a successful SaslAuthenticate response.
    pub(crate) fn is_successful_authentication(&self) -> bool {
        matches!(self, Self::SaslAuthenticate(r) if r.error_code == 0)
    }

    /// Encodes header and body into a frame body (no length prefix).
    ///
    /// # Errors
    /// [`RewriteError::Encode`].
    pub(crate) fn encode(&self, api_key: ApiKey, api_version: i16, correlation_id: i32) -> Result<Bytes, RewriteError> {
        let mut buf = BytesMut::new();
        let err = |e: anyhow::Error| RewriteError::Encode { api_key, api_version, message: format!("{e:#}") };
        ResponseHeader::default().with_correlation_id(correlation_id).encode(&mut buf, api_key.response_header_version(api_version)).map_err(err)?;
        let (v, b) = (api_version, &mut buf);
        match self {
            Self::Metadata(r) => encode_body(r, b, v),
            Self::FindCoordinator(r) => encode_body(r, b, v),
            Self::DescribeCluster(r) => encode_body(r, b, v),
            Self::Produce(r) => encode_body(r, b, v),
            Self::Fetch(r) => encode_body(r, b, v),
            Self::Share(r) => {
                r.write_body(b);
                Ok(())
            }
            Self::ApiVersions(r) => encode_body(r, b, v),
            Self::DeleteRecords(r) => encode_body(r, b, v),
            Self::CreatePartitions(r) => encode_body(r, b, v),
            Self::AlterConfigs(r) => encode_body(r, b, v),
            Self::IncrementalAlterConfigs(r) => encode_body(r, b, v),
            Self::SaslAuthenticate(r) => encode_body(r, b, v),
        }
        .map_err(err)?;
        Ok(buf.freeze())
    }
}

/// Encodes `message` and checks that it wrote the size `kafka-protocol` computes for it.
///
/// They differ for a decoded response that carried a tagged field numbered 2^31 or above (the tag
/// is read as a negative `i32`): `kafka-protocol` 0.18 counts such a field but does not write it,
/// so the bytes it writes would be a response whose tagged-field count is one too high, which a
/// client fails to read. No Kafka broker writes such tags; bytes that do are refused here, and the
/// session closes with this error instead of forwarding bytes it knows to be broken (found by
/// `fuzz/fuzz_targets/proxy_response.rs`).
fn encode_body<T: Encodable>(message: &T, buf: &mut BytesMut, version: i16) -> anyhow::Result<()> {
    let size = message.compute_size(version)?;
    buf.reserve(size);
    let start = buf.len();
    message.encode(buf, version)?;
    let written = buf.len() - start;
    anyhow::ensure!(
        written == size,
        "{written} bytes written where the message's size is {size} (a tagged field numbered 2^31 or above, which cannot be encoded again)"
    );
    Ok(())
}

/// The ApiVersions answer the proxy gives itself to a client asking with a version above what the
/// proxy can decode (KIP-511): UNSUPPORTED_VERSION in v0, listing the ApiVersions versions it can
/// serve so that the client retries with one of them.
pub(crate) fn unsupported_api_versions(correlation_id: i32) -> Result<Bytes, RewriteError> {
    let range = ApiKey::ApiVersions.valid_versions();
    let mut response = ApiVersionsResponse::default();
    response.error_code = 35; // UNSUPPORTED_VERSION
    let mut entry = kafka_protocol::messages::api_versions_response::ApiVersion::default();
    entry.api_key = ApiKey::ApiVersions as i16;
    entry.min_version = range.min;
    entry.max_version = range.max;
    response.api_keys.push(entry);
    Decoded::ApiVersions(response).encode(ApiKey::ApiVersions, 0, correlation_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::messages::metadata_response::MetadataResponseBroker;

    /// A broker response whose first array claims more entries than any frame could hold
    /// (i32::MAX, or u32::MAX - 1 compact) is a decode error. `kafka-protocol` reserves the claimed
    /// count before reading an entry (hundreds of GB here); with the system allocator that
    /// reservation is refused and aborts the test binary, so this passes only with the crate's
    /// allocator (src/lib.rs).
    #[test]
    fn impossible_array_counts_are_decode_errors() {
        let count = |flexible: bool| if flexible { vec![0xff, 0xff, 0xff, 0xff, 0x0f] } else { 0x7fff_ffff_i32.to_be_bytes().to_vec() };
        let mut cases: Vec<(ApiKey, i16, Vec<u8>)> = Vec::new();
        // Metadata: [throttle_time_ms (v3+)] brokers.
        for v in 0..=13 {
            cases.push((ApiKey::Metadata, v, [if v >= 3 { vec![0; 4] } else { vec![] }, count(v >= 9)].concat()));
        }
        // Produce: responses first.
        for v in 3..=13 {
            cases.push((ApiKey::Produce, v, count(v >= 9)));
        }
        // Fetch: throttle_time_ms, error_code, session_id, responses.
        for v in 7..=18 {
            cases.push((ApiKey::Fetch, v, [vec![0; 10], count(v >= 12)].concat()));
        }
        // ApiVersions: error_code, api_keys.
        for v in 0..=4 {
            cases.push((ApiKey::ApiVersions, v, [vec![0; 2], count(v >= 3)].concat()));
        }
        for (key, v, body) in cases {
            let err = Decoded::decode(key, v, Bytes::from(body)).expect_err("an impossible count");
            assert!(matches!(err, RewriteError::Decode { api_key, api_version, .. } if api_key == key && api_version == v), "{key:?} v{v}: {err}");
        }
    }

    /// A tagged field numbered 2^31 or above decodes (as a negative tag), but `kafka-protocol`
    /// would write the response without it and with its count: the encode refuses instead of
    /// producing broken bytes. The bytes are the fuzzer's finding (CreatePartitions v2, one result
    /// with tags 0xffff_ffff and 6291455).
    #[test]
    fn a_tagged_field_that_cannot_be_encoded_again_is_an_encode_error() {
        let body: &[u8] = &[2, 2, 2, 2, 2, 2, 2, 2, 126, 2, 2, 2, 255, 255, 255, 2, 2, 255, 255, 255, 255, 255, 255, 255, 6, 2, 32, 33, 33, 4, 0, 0];
        let decoded = Decoded::decode(ApiKey::CreatePartitions, 2, Bytes::from_static(body)).expect("decodes");
        let Decoded::CreatePartitions(r) = &decoded else { panic!("{decoded:?}") };
        assert!(r.results[0].unknown_tagged_fields.contains_key(&-1), "{r:?}");
        let err = decoded.encode(ApiKey::CreatePartitions, 2, 7).expect_err("cannot be encoded again");
        assert!(matches!(&err, RewriteError::Encode { api_key: ApiKey::CreatePartitions, api_version: 2, message } if message.contains("2^31")), "{err}");
        // Without that tag, the same response round-trips.
        let mut fixed = r.clone();
        fixed.results[0].unknown_tagged_fields.remove(&-1);
        let frame = Decoded::CreatePartitions(fixed.clone()).encode(ApiKey::CreatePartitions, 2, 7).expect("encodes");
        let (_, again) = split_response(frame, ApiKey::CreatePartitions, 2).expect("splits");
        assert_eq!(Decoded::decode(ApiKey::CreatePartitions, 2, again).expect("decodes"), Decoded::CreatePartitions(fixed));
    }

    #[test]
    fn metadata_brokers_are_rewritten_and_round_trip() {
        for v in 0..=13 {
            let mut response = MetadataResponse::default();
            for id in [1, 2] {
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(id);
                b.host = StrBytes::from_static_str("10.0.0.1");
                b.port = 9092;
                response.brokers.push(b);
            }
            let frame = Decoded::Metadata(response).encode(ApiKey::Metadata, v, 77).unwrap();
            let (cid, body) = split_response(frame, ApiKey::Metadata, v).unwrap();
            assert_eq!(cid, 77);
            let mut decoded = Decoded::decode(ApiKey::Metadata, v, body).unwrap();
            assert_eq!(decoded.broker_endpoints(), vec![(1, "10.0.0.1".to_owned(), 9092), (2, "10.0.0.1".to_owned(), 9092)]);
            let map = HashMap::from([(1, Endpoint { host: "proxy".to_owned(), port: 19001 })]);
            decoded.apply_endpoints(&map);
            assert_eq!(decoded.broker_endpoints(), vec![(1, "proxy".to_owned(), 19001), (2, "10.0.0.1".to_owned(), 9092)]);
        }
    }

    #[test]
    fn find_coordinator_old_and_new() {
        for v in 0..=6 {
            let mut response = FindCoordinatorResponse::default();
            if v < 4 {
                response.node_id = BrokerId(3);
                response.host = StrBytes::from_static_str("b3");
                response.port = 1;
            } else {
                let mut c = kafka_protocol::messages::find_coordinator_response::Coordinator::default();
                c.node_id = BrokerId(3);
                c.host = StrBytes::from_static_str("b3");
                c.port = 1;
                response.coordinators.push(c);
            }
            let mut d = Decoded::FindCoordinator(response);
            assert_eq!(d.broker_endpoints(), vec![(3, "b3".to_owned(), 1)]);
            // Node 0 is also the default of the absent v4+ top-level node_id.
            d.apply_endpoints(&HashMap::from([(3, Endpoint { host: "p".to_owned(), port: 2 }), (0, Endpoint { host: "zero".to_owned(), port: 9 })]));
            assert_eq!(d.broker_endpoints(), vec![(3, "p".to_owned(), 2)]);
            d.encode(ApiKey::FindCoordinator, v, 1).unwrap();
        }
    }

    #[test]
    fn kip_951_leader_endpoints_in_produce_and_fetch() {
        let map = HashMap::from([(2, Endpoint { host: "proxy".to_owned(), port: 7002 })]);
        for v in 10..=13 {
            let mut response = ProduceResponse::default();
            let mut n = kafka_protocol::messages::produce_response::NodeEndpoint::default();
            n.node_id = BrokerId(2);
            n.host = StrBytes::from_static_str("broker-2");
            n.port = 9092;
            response.node_endpoints.push(n);
            let frame = Decoded::Produce(response).encode(ApiKey::Produce, v, 1).unwrap();
            let (_, body) = split_response(frame, ApiKey::Produce, v).unwrap();
            let mut d = Decoded::decode(ApiKey::Produce, v, body).unwrap();
            d.apply_endpoints(&map);
            assert_eq!(d.broker_endpoints(), vec![(2, "proxy".to_owned(), 7002)], "Produce v{v}");
        }
        for v in 16..=18 {
            let mut response = FetchResponse::default();
            let mut n = kafka_protocol::messages::fetch_response::NodeEndpoint::default();
            n.node_id = BrokerId(2);
            n.host = StrBytes::from_static_str("broker-2");
            n.port = 9092;
            response.node_endpoints.push(n);
            let frame = Decoded::Fetch(response).encode(ApiKey::Fetch, v, 1).unwrap();
            let (_, body) = split_response(frame, ApiKey::Fetch, v).unwrap();
            let mut d = Decoded::decode(ApiKey::Fetch, v, body).unwrap();
            d.apply_endpoints(&map);
            assert_eq!(d.broker_endpoints(), vec![(2, "proxy".to_owned(), 7002)], "Fetch v{v}");
            d.encode(ApiKey::Fetch, v, 1).unwrap();
        }
        assert!(!needs_decode(ApiKey::Fetch, 15));
        // The allocation-free check agrees with the full decode, with and without endpoints and with
        // partitions carrying records and aborted transactions.
        for v in 16..=18 {
            for with_endpoints in [false, true] {
                let mut response = FetchResponse::default();
                let mut topic = kafka_protocol::messages::fetch_response::FetchableTopicResponse::default();
                topic.topic_id = uuid::Uuid::from_u128(7);
                for p in 0..3 {
                    let mut part = kafka_protocol::messages::fetch_response::PartitionData::default();
                    part.partition_index = p;
                    part.records = Some(Bytes::from(vec![p as u8; 100]));
                    part.aborted_transactions = Some(vec![kafka_protocol::messages::fetch_response::AbortedTransaction::default()]);
                    part.current_leader.leader_id = BrokerId(2);
                    topic.partitions.push(part);
                }
                response.responses.push(topic);
                if with_endpoints {
                    let mut n = kafka_protocol::messages::fetch_response::NodeEndpoint::default();
                    n.node_id = BrokerId(2);
                    n.host = StrBytes::from_static_str("b");
                    response.node_endpoints.push(n);
                }
                let frame = Decoded::Fetch(response).encode(ApiKey::Fetch, v, 1).unwrap();
                assert_eq!(carries_no_endpoints(ApiKey::Fetch, v, &frame), !with_endpoints, "v{v}");
                assert!(!carries_no_endpoints(ApiKey::Metadata, v, &frame), "only Produce and Fetch are walked");
                let (_, body) = split_response(frame, ApiKey::Fetch, v).unwrap();
                assert_eq!(fetch_has_node_endpoints(&body), Ok(with_endpoints), "v{v}");
                assert!(fetch_has_node_endpoints(&body[..body.len() - 1]).is_err());
            }
        }
        assert!(!needs_decode(ApiKey::Produce, 9));
        // The smallest real answer: one topic, one partition, nothing optional (what a broker sends
        // for a one-record produce without a leader change).
        for v in 10..=13 {
            let mut response = ProduceResponse::default();
            let mut topic = kafka_protocol::messages::produce_response::TopicProduceResponse::default();
            topic.name = kafka_protocol::messages::TopicName(StrBytes::from_static_str("t"));
            topic.partition_responses.push(kafka_protocol::messages::produce_response::PartitionProduceResponse::default());
            response.responses.push(topic);
            let frame = Decoded::Produce(response).encode(ApiKey::Produce, v, 1).unwrap();
            let (_, body) = split_response(frame, ApiKey::Produce, v).unwrap();
            assert_eq!(produce_has_node_endpoints(&body, v), Ok(false), "v{v}");
        }
        // The same for Produce v10–13 (by name up to v12, by topic id from v13), with record errors.
        for v in 10..=13 {
            for with_endpoints in [false, true] {
                let mut response = ProduceResponse::default();
                let mut topic = kafka_protocol::messages::produce_response::TopicProduceResponse::default();
                topic.name = kafka_protocol::messages::TopicName(StrBytes::from_static_str("orders"));
                topic.topic_id = uuid::Uuid::from_u128(7);
                for p in 0..3 {
                    let mut part = kafka_protocol::messages::produce_response::PartitionProduceResponse::default();
                    part.index = p;
                    part.base_offset = 100;
                    part.error_message = (p == 1).then(|| StrBytes::from_static_str("bad batch"));
                    part.record_errors = vec![kafka_protocol::messages::produce_response::BatchIndexAndErrorMessage::default()];
                    part.current_leader.leader_id = BrokerId(2);
                    topic.partition_responses.push(part);
                }
                response.responses.push(topic);
                if with_endpoints {
                    let mut n = kafka_protocol::messages::produce_response::NodeEndpoint::default();
                    n.node_id = BrokerId(2);
                    n.host = StrBytes::from_static_str("b");
                    response.node_endpoints.push(n);
                }
                let frame = Decoded::Produce(response).encode(ApiKey::Produce, v, 1).unwrap();
                assert_eq!(carries_no_endpoints(ApiKey::Produce, v, &frame), !with_endpoints, "v{v}");
                let (_, body) = split_response(frame, ApiKey::Produce, v).unwrap();
                assert_eq!(produce_has_node_endpoints(&body, v), Ok(with_endpoints), "v{v}");
                assert!(produce_has_node_endpoints(&body[..body.len() - 1], v).is_err());
            }
        }
    }

    #[test]
    fn share_fetch_share_acknowledge_and_describe_cluster() {
        let map = HashMap::from([(4, Endpoint { host: "proxy".to_owned(), port: 7004 })]);
        let node = || {
            let mut n = kafka_protocol::messages::share_fetch_response::NodeEndpoint::default();
            n.node_id = BrokerId(4);
            n.host = StrBytes::from_static_str("broker-4");
            n.port = 9092;
            n
        };
        let mut fetch = kafka_protocol::messages::ShareFetchResponse::default();
        fetch.node_endpoints.push(node());
        let mut ack = kafka_protocol::messages::ShareAcknowledgeResponse::default();
        let mut n = kafka_protocol::messages::share_acknowledge_response::NodeEndpoint::default();
        n.node_id = BrokerId(4);
        n.host = StrBytes::from_static_str("broker-4");
        ack.node_endpoints.push(n);
        let encode = |m: &dyn Fn(&mut BytesMut)| {
            let mut header = BytesMut::new();
            ResponseHeader::default().with_correlation_id(3).encode(&mut header, 1).unwrap();
            m(&mut header);
            header.freeze()
        };
        let frames = [(ApiKey::ShareFetch, encode(&|b| fetch.encode(b, 1).unwrap())), (ApiKey::ShareAcknowledge, encode(&|b| ack.encode(b, 1).unwrap()))];
        for (key, frame) in frames {
            assert!(needs_decode(key, 1), "{key:?}");
            let (_, body) = split_response(frame, key, 1).unwrap();
            let mut d = Decoded::decode(key, 1, body).unwrap();
            assert_eq!(d.broker_endpoints().len(), 1, "{key:?}");
            d.apply_endpoints(&map);
            assert_eq!(d.broker_endpoints(), vec![(4, "proxy".to_owned(), 7004)], "{key:?}");
            let (cid, body) = split_response(d.encode(key, 1, 3).unwrap(), key, 1).unwrap();
            assert_eq!(cid, 3);
            assert_eq!(Decoded::decode(key, 1, body).unwrap().broker_endpoints(), vec![(4, "proxy".to_owned(), 7004)]);
        }
        // DescribeCluster: brokers are rewritten, controllers (endpoint_type 2) are not ours to map.
        for endpoint_type in [1, 2] {
            let mut r = DescribeClusterResponse::default();
            r.endpoint_type = endpoint_type;
            let mut b = kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker::default();
            b.broker_id = BrokerId(4);
            b.host = StrBytes::from_static_str("node-4");
            b.port = 9093;
            r.brokers.push(b);
            let mut d = Decoded::DescribeCluster(r);
            d.apply_endpoints(&map);
            let Decoded::DescribeCluster(r) = &d else { unreachable!() };
            let got = (r.brokers[0].host.to_string(), r.brokers[0].port);
            let expected = if endpoint_type == 1 { ("proxy".to_owned(), 7004) } else { ("node-4".to_owned(), 9093) };
            assert_eq!(got, expected, "endpoint_type {endpoint_type}");
        }
    }

    #[test]
    fn unsupported_api_versions_is_v0() {
        let frame = unsupported_api_versions(5).unwrap();
        let (cid, body) = split_response(frame, ApiKey::ApiVersions, 0).unwrap();
        assert_eq!(cid, 5);
        let Decoded::ApiVersions(r) = Decoded::decode(ApiKey::ApiVersions, 0, body).unwrap() else { panic!() };
        assert_eq!(r.error_code, 35);
    }
}
