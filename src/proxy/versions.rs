//! Which versions of which APIs the proxy can serve, and the capping of ApiVersions responses.
//!
//! The proxy forwards most requests without reading their bodies, so for those it advertises what the
//! brokers advertise. For the APIs it must read (a request it inspects or a response it rewrites), it
//! advertises the intersection of the brokers' range and the range it can decode, and drops an API
//! whose intersection is empty: a client then never sends a version the proxy cannot parse.
//!
//! | API                      | read because                       | proxy range |
//! |--------------------------|------------------------------------|-------------|
//! | Produce                  | write policy; KIP-951 leader endpoints (v10+) | 3–13 |
//! | Fetch                    | KIP-951 leader endpoints (v16+)    | 4–18        |
//! | Metadata                 | broker endpoints, topic ids        | 0–13        |
//! | FindCoordinator          | coordinator endpoint               | 0–6         |
//! | DescribeCluster          | broker endpoints                   | 0–2         |
//! | ShareFetch, ShareAcknowledge | leader endpoints               | 1–2 (see below) |
//! | ApiVersions              | this capping                       | 0–4         |
//! | DeleteRecords            | write policy                       | 0–2         |
//! | CreatePartitions         | write policy                       | 0–3         |
//! | AlterConfigs             | write policy                       | 0–2         |
//! | IncrementalAlterConfigs  | write policy                       | 0–1         |
//! | SaslHandshake            | v0 switches to unframed SASL tokens, which a framing proxy cannot follow | 1 |
//! | SaslAuthenticate         | the authenticated principal        | 0–2         |
//!
//! The ranges are those of the `kafka-protocol` crate (0.18), which decodes the responses, and of
//! [`super::requests`], which reads the requests. DescribeQuorum is forwarded as is: its endpoints are
//! controller listeners, which the proxy does not front (the endpoint audit is in [`super::rewrite`]).
//!
//! ShareFetch and ShareAcknowledge: Kafka 4.4 serves v1–2, and `kafka-protocol` 0.18 decodes v1 only.
//! The proxy reads their responses with its own walk instead (`rewrite::share`: the leader endpoints at
//! the end are all it changes), so it serves both versions, including v2's KIP-1206 acquire modes and
//! KIP-1222 renew acknowledgements, whose request fields it forwards unread. Kafka 4.4's share consumer
//! uses v2 through the proxy (`proxy::share_consumer_through_the_proxy_at_v2`).
//!
//! # References
//! - KIP-511 (ApiVersions v3, flexible): <https://cwiki.apache.org/confluence/x/qRJ4CQ>

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// The range the proxy can serve for `api_key`, or `None` if it forwards that API without reading it.
pub fn proxy_range(api_key: ApiKey) -> Option<(i16, i16)> {
    let crate_range = || {
        let r = api_key.valid_versions();
        (r.min, r.max)
    };
    match api_key {
        ApiKey::Produce
        | ApiKey::Fetch
        | ApiKey::Metadata
        | ApiKey::FindCoordinator
        | ApiKey::DescribeCluster
        | ApiKey::ApiVersions
        | ApiKey::SaslAuthenticate => Some(crate_range()),
        ApiKey::DeleteRecords | ApiKey::CreatePartitions | ApiKey::AlterConfigs | ApiKey::IncrementalAlterConfigs => {
            let (min, max) = crate_range();
            let (smin, smax) = super::requests::scan_range(api_key)?;
            Some((min.max(smin), max.min(smax)))
        }
        // Walked by the proxy's own reader, not decoded by the crate (see the module doc).
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => Some(super::rewrite::SHARE_VERSIONS),
        ApiKey::SaslHandshake => Some((1, 1)),
        _ => None,
    }
}

/// True if the proxy can handle `api_version` of `api_key` (always true for forwarded-only APIs).
pub fn is_supported(api_key: ApiKey, api_version: i16) -> bool {
    proxy_range(api_key).is_none_or(|(min, max)| api_version >= min && api_version <= max)
}

/// Caps `response` to what the proxy can serve; drops APIs left with no version.
pub fn cap_api_versions(response: &mut ApiVersionsResponse) {
    response.api_keys.retain_mut(|k| {
        let Ok(api_key) = ApiKey::try_from(k.api_key) else {
            // An API newer than the crate: forwarded without reading, so the broker's range stands.
            return true;
        };
        match proxy_range(api_key) {
            None => true,
            Some((min, max)) => {
                k.min_version = k.min_version.max(min);
                k.max_version = k.max_version.min(max);
                k.min_version <= k.max_version
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;

    fn entry(key: ApiKey, min: i16, max: i16) -> ApiVersion {
        ApiVersion::default().with_api_key(key as i16).with_min_version(min).with_max_version(max)
    }

    #[test]
    fn caps_read_apis_and_passes_the_rest() {
        let mut response = ApiVersionsResponse::default().with_api_keys(vec![
            entry(ApiKey::Produce, 0, 99),
            entry(ApiKey::Metadata, 0, 99),
            entry(ApiKey::JoinGroup, 0, 99),
            entry(ApiKey::SaslHandshake, 0, 1),
            entry(ApiKey::ShareFetch, 5, 6),
            entry(ApiKey::ShareAcknowledge, 1, 9),
            ApiVersion::default().with_api_key(32_000).with_min_version(0).with_max_version(3),
        ]);
        cap_api_versions(&mut response);
        let got: Vec<(i16, i16, i16)> = response.api_keys.iter().map(|k| (k.api_key, k.min_version, k.max_version)).collect();
        assert_eq!(
            got,
            vec![
                (ApiKey::Produce as i16, 3, ApiKey::Produce.valid_versions().max),
                (ApiKey::Metadata as i16, 0, ApiKey::Metadata.valid_versions().max),
                (ApiKey::JoinGroup as i16, 0, 99),
                (ApiKey::SaslHandshake as i16, 1, 1),
                (ApiKey::ShareAcknowledge as i16, 1, 2),
                (32_000, 0, 3),
            ]
        );
    }

    #[test]
    fn supported() {
        assert!(is_supported(ApiKey::JoinGroup, 1000));
        assert!(!is_supported(ApiKey::Produce, 2));
        assert!(!is_supported(ApiKey::SaslHandshake, 0));
    }
}
