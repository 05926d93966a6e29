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
        self.0.get(&(api_key as i16)).copied()
    }

    /// The version to use for `api_key`: `wanted` if given (a per-call or configured pin) and supported
    /// by both sides, otherwise the highest common version. `None` if there is none.
    pub fn choose(&self, api_key: ApiKey, wanted: Option<i16>) -> Option<i16> {
        let common = self.range(api_key)?.intersect(&api_key.valid_versions());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn highest_common_or_pinned() {
        let b = BrokerVersions::from_ranges([(ApiKey::Produce as i16, 3, 500), (ApiKey::Fetch as i16, 4, 8)]);
        let ours = ApiKey::Produce.valid_versions().max;
        assert_eq!(b.choose(ApiKey::Produce, None), Some(ours));
        assert_eq!(b.choose(ApiKey::Produce, Some(11)), Some(11));
        assert_eq!(b.choose(ApiKey::Produce, Some(2)), None);
        assert_eq!(b.choose(ApiKey::Fetch, None), Some(8));
        assert_eq!(b.choose(ApiKey::WriteTxnMarkers, None), None);
    }
}
