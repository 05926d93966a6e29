//! ApiVersions negotiation: for each API, the highest version both the broker and this client (the
//! `kafka-protocol` crate) can speak, unless a version is pinned.
//!
//! Pins exist because the highest version is not always right: transactional data must go in
//! Produce v11 or lower so that an unmodified broker does not verify it against its own transaction
//! coordinator (`notes/broker-constraints.md` §4).

use std::collections::HashMap;

use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::VersionRange;

/// Versions pinned per API. A pinned version must be supported by both sides, or calls fail with
/// [`ConnectionError::UnsupportedVersion`](super::ConnectionError::UnsupportedVersion).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionPins(HashMap<i16, i16>);

impl VersionPins {
    /// No pins: always the highest common version.
    pub fn new() -> Self {
        Self::default()
    }

    /// Pins `api_key` to `version`.
    pub fn with_pin(mut self, api_key: ApiKey, version: i16) -> Self {
        self.0.insert(api_key as i16, version);
        self
    }

    /// The pinned version of `api_key`, if any.
    pub fn get(&self, api_key: ApiKey) -> Option<i16> {
        self.0.get(&(api_key as i16)).copied()
    }
}

/// What one broker said it supports, per API key.
#[derive(Debug, Clone, Default)]
pub struct BrokerVersions(HashMap<i16, VersionRange>);

impl BrokerVersions {
    /// From `(api_key, min, max)` triples of an ApiVersions response.
    pub fn from_ranges(ranges: impl IntoIterator<Item = (i16, i16, i16)>) -> Self {
        Self(ranges.into_iter().map(|(k, min, max)| (k, VersionRange { min, max })).collect())
    }

    /// The broker's range for `api_key`, if it supports the API at all.
    pub fn range(&self, api_key: ApiKey) -> Option<VersionRange> {
        self.range_of(api_key as i16)
    }

    /// The range announced for a raw api key, including keys Kafka does not define (the mirror APIs
    /// a proxy announces).
    pub fn range_of(&self, api_key: i16) -> Option<VersionRange> {
        self.0.get(&api_key).copied()
    }

    /// The broker's range for a raw api key, including keys the `kafka-protocol` crate does not know
    /// (the mirror APIs a kafka-mirror-proxy announces, for instance).
    pub fn range_of_key(&self, api_key: i16) -> Option<VersionRange> {
        self.0.get(&api_key).copied()
    }

    /// The version to use for `api_key`: `wanted` if given (a per-call or configured pin) and supported
    /// by both sides, otherwise the highest common version. `None` if there is none.
    pub fn choose(&self, api_key: ApiKey, wanted: Option<i16>) -> Option<i16> {
        let common = self.range(api_key)?.intersect(&ours(api_key));
        if common.is_empty() {
            return None;
        }
        match wanted {
            Some(v) if v >= common.min && v <= common.max => Some(v),
            Some(_) => None,
            None => Some(common.max),
        }
    }
}

/// The versions this client can both encode the request and decode the response of.
/// `ApiKey::valid_versions` is not enough: `kafka-protocol` sometimes knows a newer response than
/// request (OffsetFetch 0.18: requests to v9, responses to v10).
pub fn ours(api_key: ApiKey) -> VersionRange {
    use kafka_protocol::messages as m;
    use kafka_protocol::protocol::Message;
    macro_rules! both {
        ($($key:ident => $req:ident, $resp:ident;)*) => {
            match api_key {
                $(ApiKey::$key => m::$req::VERSIONS.intersect(&m::$resp::VERSIONS),)*
                other => other.valid_versions(),
            }
        };
    }
    both! {
        ApiVersions => ApiVersionsRequest, ApiVersionsResponse;
        Metadata => MetadataRequest, MetadataResponse;
        Produce => ProduceRequest, ProduceResponse;
        Fetch => FetchRequest, FetchResponse;
        ListOffsets => ListOffsetsRequest, ListOffsetsResponse;
        WriteTxnMarkers => WriteTxnMarkersRequest, WriteTxnMarkersResponse;
        DescribeProducers => DescribeProducersRequest, DescribeProducersResponse;
        DeleteRecords => DeleteRecordsRequest, DeleteRecordsResponse;
        CreateTopics => CreateTopicsRequest, CreateTopicsResponse;
        DescribeConfigs => DescribeConfigsRequest, DescribeConfigsResponse;
        IncrementalAlterConfigs => IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse;
        DescribeCluster => DescribeClusterRequest, DescribeClusterResponse;
        FindCoordinator => FindCoordinatorRequest, FindCoordinatorResponse;
        ListGroups => ListGroupsRequest, ListGroupsResponse;
        OffsetFetch => OffsetFetchRequest, OffsetFetchResponse;
        OffsetCommit => OffsetCommitRequest, OffsetCommitResponse;
        CreatePartitions => CreatePartitionsRequest, CreatePartitionsResponse;
        DescribeAcls => DescribeAclsRequest, DescribeAclsResponse;
        CreateAcls => CreateAclsRequest, CreateAclsResponse;
        DeleteAcls => DeleteAclsRequest, DeleteAclsResponse;
        DescribeGroups => DescribeGroupsRequest, DescribeGroupsResponse;
        ShareGroupDescribe => ShareGroupDescribeRequest, ShareGroupDescribeResponse;
        DescribeShareGroupOffsets => DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse;
        AlterShareGroupOffsets => AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_common_or_pinned() {
        let b = BrokerVersions::from_ranges([(ApiKey::Produce as i16, 3, 500), (ApiKey::Fetch as i16, 4, 8)]);
        let ours = ours(ApiKey::Produce).max;
        assert_eq!(b.choose(ApiKey::Produce, None), Some(ours));
        assert_eq!(b.choose(ApiKey::Produce, Some(11)), Some(11));
        assert_eq!(b.choose(ApiKey::Produce, Some(2)), None);
        assert_eq!(b.choose(ApiKey::Fetch, None), Some(8));
        assert_eq!(b.choose(ApiKey::WriteTxnMarkers, None), None);
    }

    #[test]
    fn never_above_what_the_request_encoder_knows() {
        let b = BrokerVersions::from_ranges([(ApiKey::OffsetFetch as i16, 0, 10)]);
        let request_max = <kafka_protocol::messages::OffsetFetchRequest as kafka_protocol::protocol::Message>::VERSIONS.max;
        assert_eq!(b.choose(ApiKey::OffsetFetch, None), Some(request_max.min(10)));
    }
}
