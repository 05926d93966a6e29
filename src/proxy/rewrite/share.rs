//! ShareFetch (78) and ShareAcknowledge (79) responses, v1–2: the leader endpoints at their end are
//! found by a walk and rewritten; every other byte stays the broker's.
//!
//! Why a walk and not `kafka-protocol`: the crate (0.18) decodes v1 only, while Kafka 4.4 serves v2
//! (KIP-1206 acquire modes, KIP-1222 renew acknowledgements) and its share consumer uses v2 when it is
//! offered. The two versions differ in their requests; the responses differ in one field only
//! (ShareAcknowledge v2 adds `acquisition_lock_timeout_ms`), and all the proxy changes in them is the
//! `node_endpoints` list that ends the body (KIP-951 style leader endpoints, for partitions answered
//! NOT_LEADER_OR_FOLLOWER). So the body is walked over its fixed fields, record data skipped and never
//! copied; the endpoints are parsed; and a rewritten body is the broker's bytes before the endpoints,
//! the new endpoints, and the broker's top-level tagged fields after them. A response without
//! endpoints (nearly every one) is forwarded as it came.
//!
//! This module must not change anything but an endpoint's host and port, and must not read record data.
//!
//! # References
//! - `ShareFetchResponse.json`, `ShareAcknowledgeResponse.json` in kafka-clients 4.4.0
//!   (`common/message/`): the schemas walked here.
//! - KIP-932 (share groups): <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>

use std::collections::HashMap;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use super::node_endpoints::{self, NodeEndpoint};
use super::{BrokerEndpoint, Endpoint};
use crate::proxy::wire::{Reader, WireError};

/// The versions of ShareFetch and ShareAcknowledge responses this module walks.
pub(crate) const VERSIONS: (i16, i16) = (1, 2);

/// A ShareFetch or ShareAcknowledge response body with its `node_endpoints` parsed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShareResponse {
    body: Bytes,
    /// The bytes of `node_endpoints` in `body` (what comes after is the top-level tagged fields).
    endpoints_at: Range<usize>,
    endpoints: Vec<NodeEndpoint>,
}

impl ShareResponse {
    /// Walks a response body of `api_key` (ShareFetch or ShareAcknowledge) at `api_version`.
    ///
    /// # Errors
    /// A body that does not match the schema, is truncated or has bytes left over.
    pub(crate) fn walk(api_key: ApiKey, api_version: i16, body: Bytes) -> Result<Self, WireError> {
        let fetch = api_key == ApiKey::ShareFetch;
        let mut r = Reader::new(&body);
        r.i32("throttle_time_ms")?;
        r.i16("error_code")?;
        r.nullable_string(true, "error_message")?;
        if fetch || api_version >= 2 {
            r.i32("acquisition_lock_timeout_ms")?;
        }
        // Smallest encodings: a topic is a uuid, an empty array and its tags (18 bytes); a partition
        // at least 17 (ShareAcknowledge's fields, all empty); an acquired range 19.
        let topics = r.array_len(true, 18, "responses")?.unwrap_or(0);
        for _ in 0..topics {
            r.uuid("topic_id")?;
            let partitions = r.array_len(true, 17, "partitions")?.unwrap_or(0);
            for _ in 0..partitions {
                r.i32("partition_index")?;
                r.i16("error_code")?;
                r.nullable_string(true, "error_message")?;
                if fetch {
                    r.i16("acknowledge_error_code")?;
                    r.nullable_string(true, "acknowledge_error_message")?;
                }
                r.i32("current_leader.leader_id")?;
                r.i32("current_leader.leader_epoch")?;
                r.skip_tagged_fields()?;
                if fetch {
                    r.skip_bytes(true, "records")?;
                    let ranges = r.array_len(true, 19, "acquired_records")?.unwrap_or(0);
                    for _ in 0..ranges {
                        r.i64("first_offset")?;
                        r.i64("last_offset")?;
                        r.i16("delivery_count")?;
                        r.skip_tagged_fields()?;
                    }
                }
                r.skip_tagged_fields()?;
            }
            r.skip_tagged_fields()?;
        }
        let start = r.pos();
        let endpoints = node_endpoints::read(&mut r)?;
        let end = r.pos();
        r.skip_tagged_fields()?;
        r.finish()?;
        Ok(Self { endpoints_at: start..end, endpoints, body })
    }

    /// The endpoints the response carries, `(node_id, host, port)`.
    pub(crate) fn broker_endpoints(&self) -> Vec<BrokerEndpoint> {
        self.endpoints.iter().map(NodeEndpoint::broker_endpoint).collect()
    }

    /// Replaces the host and port of every endpoint whose node is in `map`.
    pub(crate) fn apply_endpoints(&mut self, map: &HashMap<i32, Endpoint>) {
        node_endpoints::apply(&mut self.endpoints, map);
    }

    /// Appends the body, with the endpoints as they are now, to `out`.
    pub(crate) fn write_body(&self, out: &mut BytesMut) {
        out.extend_from_slice(&self.body[..self.endpoints_at.start]);
        let mut list = Vec::new();
        node_endpoints::write(&mut list, &self.endpoints);
        out.extend_from_slice(&list);
        out.extend_from_slice(&self.body[self.endpoints_at.end..]);
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{BrokerId, ShareAcknowledgeResponse, ShareFetchResponse};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    use super::*;
    use crate::proxy::wire::put_uvarint;

    fn map() -> HashMap<i32, Endpoint> {
        HashMap::from([(4, Endpoint { host: "proxy.example".to_owned(), port: 7004 })])
    }

    fn fetch_response(with_endpoints: bool) -> ShareFetchResponse {
        use kafka_protocol::messages::share_fetch_response::{AcquiredRecords, LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareFetchableTopicResponse};
        let partition = |index: i32, error: i16, records: &'static [u8]| {
            PartitionData::default()
                .with_partition_index(index)
                .with_error_code(error)
                .with_error_message((error != 0).then(|| StrBytes::from_static_str("not the leader")))
                .with_acknowledge_error_code(0)
                .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(4).with_leader_epoch(7))
                .with_records(Some(Bytes::from_static(records)))
                .with_acquired_records(vec![
                    AcquiredRecords::default().with_first_offset(10).with_last_offset(19).with_delivery_count(1),
                    AcquiredRecords::default().with_first_offset(20).with_last_offset(21).with_delivery_count(3),
                ])
        };
        let topic = |b: u8| {
            ShareFetchableTopicResponse::default()
                .with_topic_id(uuid::Uuid::from_bytes([b; 16]))
                .with_partitions(vec![partition(0, 0, b"record bytes, never read"), partition(1, 6, b"")])
        };
        let endpoints = if with_endpoints {
            vec![
                NodeEndpoint::default().with_node_id(BrokerId(4)).with_host(StrBytes::from_static_str("broker-4")).with_port(9092),
                NodeEndpoint::default()
                    .with_node_id(BrokerId(5))
                    .with_host(StrBytes::from_static_str("broker-5"))
                    .with_port(9093)
                    .with_rack(Some(StrBytes::from_static_str("rack-b"))),
            ]
        } else {
            Vec::new()
        };
        ShareFetchResponse::default().with_acquisition_lock_timeout_ms(30_000).with_responses(vec![topic(1), topic(2)]).with_node_endpoints(endpoints)
    }

    fn ack_response() -> ShareAcknowledgeResponse {
        use kafka_protocol::messages::share_acknowledge_response::{LeaderIdAndEpoch, NodeEndpoint, PartitionData, ShareAcknowledgeTopicResponse};
        ShareAcknowledgeResponse::default()
            .with_error_message(Some(StrBytes::from_static_str("partly")))
            .with_responses(vec![ShareAcknowledgeTopicResponse::default().with_topic_id(uuid::Uuid::from_bytes([3; 16])).with_partitions(
                vec![PartitionData::default()
                    .with_partition_index(2)
                    .with_error_code(6)
                    .with_current_leader(LeaderIdAndEpoch::default().with_leader_id(4).with_leader_epoch(2))],
            )])
            .with_node_endpoints(vec![NodeEndpoint::default().with_node_id(BrokerId(4)).with_host(StrBytes::from_static_str("broker-4")).with_port(9092)])
    }

    fn encode<T: Encodable>(message: &T, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        message.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn rewrite(api_key: ApiKey, version: i16, body: Bytes) -> (Vec<BrokerEndpoint>, Bytes) {
        let mut walked = ShareResponse::walk(api_key, version, body).unwrap();
        let before = walked.broker_endpoints();
        walked.apply_endpoints(&map());
        let mut out = BytesMut::new();
        walked.write_body(&mut out);
        (before, out.freeze())
    }

    #[test]
    fn share_fetch_endpoints_are_rewritten_and_everything_else_kept() {
        let original = fetch_response(true);
        // v2 of the response has v1's layout: the same bytes walk as either.
        for version in [1, 2] {
            let (before, out) = rewrite(ApiKey::ShareFetch, version, encode(&original, 1));
            assert_eq!(before, vec![(4, "broker-4".to_owned(), 9092), (5, "broker-5".to_owned(), 9093)]);
            let mut expected = original.clone();
            expected.node_endpoints[0].host = StrBytes::from_static_str("proxy.example");
            expected.node_endpoints[0].port = 7004;
            let got = ShareFetchResponse::decode(&mut out.clone(), 1).unwrap();
            assert_eq!(got, expected, "v{version}: only node 4's endpoint changes");
        }
    }

    /// `parse_response`, the proxy_response fuzz target's entry, on real responses: they walk,
    /// rewrite and walk again to the mapped endpoints, whatever the proxy's host length.
    #[test]
    fn parse_response_walks_real_share_responses() {
        for host_len in [0, 8, 40] {
            for version in [1, 2] {
                let fetch = encode(&fetch_response(true), 1);
                crate::proxy::parse_response(ApiKey::ShareFetch as i16, version, &fetch, host_len).expect("ShareFetch");
            }
            let ack = encode(&ack_response(), 1);
            crate::proxy::parse_response(ApiKey::ShareAcknowledge as i16, 1, &ack, host_len).expect("ShareAcknowledge");
        }
    }

    #[test]
    fn without_endpoints_or_without_a_mapping_the_bytes_are_the_brokers() {
        for with_endpoints in [false, true] {
            let body = encode(&fetch_response(with_endpoints), 1);
            let walked = ShareResponse::walk(ApiKey::ShareFetch, 2, body.clone()).unwrap();
            assert_eq!(walked.broker_endpoints().is_empty(), !with_endpoints);
            let mut out = BytesMut::new();
            walked.write_body(&mut out);
            assert_eq!(out.freeze(), body);
        }
    }

    #[test]
    fn share_acknowledge_v1_and_v2() {
        let original = ack_response();
        let v1 = encode(&original, 1);
        let (before, out) = rewrite(ApiKey::ShareAcknowledge, 1, v1.clone());
        assert_eq!(before, vec![(4, "broker-4".to_owned(), 9092)]);
        let mut expected = original.clone();
        expected.node_endpoints[0].host = StrBytes::from_static_str("proxy.example");
        expected.node_endpoints[0].port = 7004;
        assert_eq!(ShareAcknowledgeResponse::decode(&mut out.clone(), 1).unwrap(), expected);

        // v2 = v1 with acquisition_lock_timeout_ms after the top-level error message (which kafka-protocol
        // 0.18 cannot encode): throttle (4), error code (2), "partly" (1 + 6).
        let at = 4 + 2 + 1 + 6;
        let lock_timeout = 15_000i32.to_be_bytes();
        let v2 = Bytes::from([&v1[..at], &lock_timeout, &v1[at..]].concat());
        assert!(ShareResponse::walk(ApiKey::ShareAcknowledge, 1, v2.clone()).is_err(), "v2 bytes are not v1");
        let (_, out) = rewrite(ApiKey::ShareAcknowledge, 2, v2);
        assert_eq!(&out[at..at + 4], &lock_timeout, "the v2 field is kept");
        let as_v1 = Bytes::from([&out[..at], &out[at + 4..]].concat());
        assert_eq!(ShareAcknowledgeResponse::decode(&mut as_v1.clone(), 1).unwrap(), expected);
    }

    #[test]
    fn truncated_or_trailing_bytes_are_errors() {
        for (api_key, body) in [(ApiKey::ShareFetch, encode(&fetch_response(true), 1)), (ApiKey::ShareAcknowledge, encode(&ack_response(), 1))] {
            for len in 0..body.len() {
                assert!(ShareResponse::walk(api_key, 1, body.slice(..len)).is_err(), "{api_key:?} cut at {len}");
            }
            let longer = Bytes::from([&body[..], &[0]].concat());
            assert!(matches!(ShareResponse::walk(api_key, 1, longer), Err(WireError::Trailing { extra: 1 })));
        }
    }

    #[test]
    fn a_huge_count_fails_before_anything_is_reserved() {
        // throttle, error code, null message, lock timeout, then responses announcing 2^31 topics.
        let mut body = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        put_uvarint(&mut body, u32::MAX >> 1);
        assert!(matches!(ShareResponse::walk(ApiKey::ShareFetch, 2, Bytes::from(body)), Err(WireError::BadLength { what: "responses", .. })));
    }
}
