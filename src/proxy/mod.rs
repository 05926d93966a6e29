//! The Kafka-protocol proxy in front of the destination cluster (spec §2): listeners (one per
//! destination broker plus the bootstrap one), raw forwarding, rewriting of broker endpoints in
//! responses, ApiVersions capping, and the write policy that refuses client writes to mirror topics.
//!
//! ```text
//!   client ─► bootstrap listener ─┐                      ┌─► any destination broker
//!   client ─► broker N listener ──┼─► session (1 task) ──┼─► destination broker N
//!                                 │    requests half: read frame ─► policy (Produce, DeleteRecords,
//!                                 │      CreatePartitions, AlterConfigs, IncrementalAlterConfigs)
//!                                 │      ─► forward (unchanged bytes, or without refused entries);
//!                                 │      a large Produce to one allowed topic: read its head ─►
//!                                 │      policy ─► the rest forwarded as it arrives (spliced)
//!                                 │      mirror APIs ─► a task of their own (src/admin) ─┐
//!                                 │    responses half: broker frame ─► rewrite endpoints / cap
//!                                 │      ApiVersions / merge refusals, or the mirror ◄───┘ answer
//!                                 │      ─► client, in request order
//!   metadata refresh task ────────┴─► registry: node id ─► (broker address, listener port), topic ids
//! ```
//!
//! Files: [`config`] (YAML + env), `server` (start, drain), `listener` (accept loops), `threads`
//! (the threads that serve connections), `session` (one client connection), `upstream` (broker connections), `sockopt` (their TCP options), `registry` (brokers and listeners),
//! `mirror_apis` (the seam to the mirror admin APIs, answered by `src/admin`), `cancel` (a shutdown
//! signal cheap to poll per request),
//! `wire` and `requests` (reading untrusted requests), `policy` (what is refused), `rewrite`
//! (responses; `rewrite::share` and `rewrite::node_endpoints` walk what the crate does not decode),
//! `stream` (large Fetch responses and Produce requests forwarded as they arrive) and `splice` (their
//! bytes moved socket to socket), `versions` (ApiVersions), `metrics` (`/metrics`, `/health`).
//!
//! Must not touch: replication or mirror state directly; it asks [`crate::mirror::MirrorLookup`]
//! whether a topic is mirrored.

mod cancel;
pub mod config;
mod error;
mod listener;
mod metrics;
mod mirror_apis;
mod policy;
mod registry;
mod requests;
mod rewrite;
mod server;
mod session;
mod sockopt;
mod splice;
mod stream;
mod threads;
mod tls;
mod upstream;
mod versions;
mod wire;

pub use config::{ConfigError, ConfigProblem, ConfigSource, ProxyConfig, ProxySettings};
pub use error::{ProxyError, SessionError};
pub use metrics::Metrics;
pub use policy::{LOCAL_TOPIC_CONFIGS, WritePolicy};
pub use requests::{ScanError, TopicRef};
pub use server::{Proxy, run};
pub use versions::{cap_api_versions, is_supported, proxy_range};
pub use wire::{RequestHead, WireError};

/// What the proxy does to a broker's response body of `api_key` at `api_version`: the walks and
/// rewrites done without decoding (the KIP-951 walks of Produce (v10+) and Fetch (v16+) bodies, the
/// rewrite of a streamed Fetch response's tail (its top-level tagged fields, rewritten in exactly
/// their length), the ShareFetch / ShareAcknowledge walk and rewrite), and for every API the proxy
/// decodes whole (Metadata, FindCoordinator, DescribeCluster, Produce, Fetch, ApiVersions and the
/// write APIs it may answer for), the decode, endpoint rewrite and encode. Every endpoint is mapped
/// to a host of `host_len` bytes. For fuzzing (`fuzz/fuzz_targets/proxy_response.rs`) and tests;
/// never panics or aborts, whatever the bytes.
///
/// # Errors
/// [`ParseError::Malformed`] for bytes the walks or the decode refuse;
/// [`ParseError::Inconsistent`] when a rewritten tail has another length than the broker's,
/// a rewritten share body does not walk again to the mapped endpoints, or a decoded, rewritten and
/// re-encoded response does not decode again to the same value.
pub fn parse_response(api_key: i16, api_version: i16, body: &[u8], host_len: usize) -> Result<(), ParseError> {
    use kafka_protocol::messages::ApiKey;
    let malformed = |e: WireError| ParseError::Malformed(e.to_string());
    let nodes = |found: Vec<rewrite::BrokerEndpoint>| -> std::collections::HashMap<i32, rewrite::Endpoint> {
        found.into_iter().map(|(id, _, _)| (id, rewrite::Endpoint { host: "h".repeat(host_len), port: id.wrapping_add(9000) })).collect()
    };
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::Produce) => {
            if let Err(e @ ParseError::Inconsistent(_)) = decode_whole(ApiKey::Produce, api_version, body, &nodes) {
                return Err(e);
            }
            rewrite::produce_has_node_endpoints(body, api_version).map(drop).map_err(malformed)
        }
        Ok(ApiKey::Fetch) => {
            let _ = rewrite::fetch_has_node_endpoints(body);
            // The same bytes as a whole body, and below as a streamed response's tail.
            if let Err(e @ ParseError::Inconsistent(_)) = decode_whole(ApiKey::Fetch, api_version, body, &nodes) {
                return Err(e);
            }
            // `body` as the tail of a streamed response (what follows the last partition).
            let Some(found) = stream::node_endpoints(body).map_err(malformed)? else { return Ok(()) };
            let map = nodes(found.iter().map(rewrite::node_endpoints::NodeEndpoint::broker_endpoint).collect());
            let (tail, dropped) = stream::rewrite_tail(body, &map).map_err(malformed)?;
            if tail.len() != body.len() {
                return Err(ParseError::Inconsistent("a rewritten tail changed length"));
            }
            let mut want = found;
            rewrite::node_endpoints::apply(&mut want, &map);
            match (stream::node_endpoints(&tail), dropped) {
                (Ok(None), true) => Ok(()),
                (Ok(Some(got)), false) if got == want => Ok(()),
                _ => Err(ParseError::Inconsistent("a rewritten tail does not read back as the mapped endpoints")),
            }
        }
        Ok(key @ (ApiKey::ShareFetch | ApiKey::ShareAcknowledge)) => {
            let mut share = rewrite::ShareResponse::walk(key, api_version, bytes::Bytes::copy_from_slice(body)).map_err(malformed)?;
            let map = nodes(share.broker_endpoints());
            share.apply_endpoints(&map);
            let mut out = bytes::BytesMut::new();
            share.write_body(&mut out);
            match rewrite::ShareResponse::walk(key, api_version, out.freeze()) {
                Ok(again) if again.broker_endpoints() == share.broker_endpoints() => Ok(()),
                _ => Err(ParseError::Inconsistent("a rewritten share response does not walk back to the mapped endpoints")),
            }
        }
        Ok(
            key @ (ApiKey::Metadata
            | ApiKey::FindCoordinator
            | ApiKey::DescribeCluster
            | ApiKey::ApiVersions
            | ApiKey::DeleteRecords
            | ApiKey::CreatePartitions
            | ApiKey::AlterConfigs
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::SaslAuthenticate),
        ) => decode_whole(key, api_version, body, &nodes),
        _ => Ok(()),
    }
}

/// The session's path for a response it decodes whole: decode, map the endpoints, encode. The
/// encoded response must decode again to exactly what was encoded: the proxy changes the endpoints
/// and nothing else. Versions the proxy does not serve are never decoded by a session, so not here
/// either.
fn decode_whole(
    api_key: kafka_protocol::messages::ApiKey,
    api_version: i16,
    body: &[u8],
    nodes: &dyn Fn(Vec<rewrite::BrokerEndpoint>) -> std::collections::HashMap<i32, rewrite::Endpoint>,
) -> Result<(), ParseError> {
    if !is_supported(api_key, api_version) {
        return Ok(());
    }
    let mut decoded = rewrite::Decoded::decode(api_key, api_version, bytes::Bytes::copy_from_slice(body)).map_err(|e| ParseError::Malformed(e.to_string()))?;
    decoded.apply_endpoints(&nodes(decoded.broker_endpoints()));
    // An encode error is a refusal the session reports (RewriteError::Encode), not a disagreement.
    let frame = decoded.encode(api_key, api_version, 7).map_err(|e| ParseError::Malformed(e.to_string()))?;
    let again = rewrite::split_response(frame, api_key, api_version).and_then(|(_, body)| rewrite::Decoded::decode(api_key, api_version, body));
    match again {
        Ok(again) if again == decoded => Ok(()),
        _ => Err(ParseError::Inconsistent("a re-encoded response does not decode to what was encoded")),
    }
}

/// Why [`parse_request`] or [`parse_response`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The bytes are not a request (or response) the proxy reads; a session that gets them closes its
    /// connection with a log line.
    #[error("{0}")]
    Malformed(String),
    /// Two readings of the same bytes disagree: a bug in the proxy, whatever the bytes.
    #[error("{0}")]
    Inconsistent(&'static str),
}

/// Reads a client request the way a session does before forwarding it: the header, and for the
/// APIs the write policy inspects, the whole body. A Produce request is also read the way a large
/// one is before it is streamed: its head alone (`produce_prefix`), from the whole frame and from its
/// first `cut` bytes. For fuzzing (`fuzz/fuzz_targets/proxy_request.rs`) and tests; never panics,
/// whatever the bytes.
///
/// # Errors
/// [`ParseError::Malformed`] with the first problem found; [`ParseError::Inconsistent`]
/// when the rebuilt request differs from `frame`, or the head read alone does not give what the
/// whole scan does.
pub fn parse_request(frame: &[u8], cut: usize) -> Result<RequestHead, ParseError> {
    use kafka_protocol::messages::ApiKey;
    let malformed = |e: WireError| ParseError::Malformed(e.to_string());
    let head = RequestHead::parse(frame).map_err(malformed)?;
    if head.api_key == ApiKey::Produce as i16 {
        // Whatever part of a request has arrived, reading its head alone must not panic.
        let _ = requests::produce_prefix(&frame[..cut.min(frame.len())], head.api_version);
    }
    if let Ok(api_key) = ApiKey::try_from(head.api_key) {
        if requests::scan_range(api_key).is_some() {
            let scanned = requests::scan_request(frame, api_key, head.api_version).map_err(|e| ParseError::Malformed(e.to_string()))?;
            let keep = vec![requests::Keep::All; scanned.entries.len()];
            if requests::rebuild(frame, &scanned, &keep) != frame {
                return Err(ParseError::Inconsistent("rebuilding the request changed it"));
            }
            if api_key == ApiKey::Produce {
                let Ok(prefix) = requests::produce_prefix(frame, head.api_version) else {
                    return Err(ParseError::Inconsistent("the head alone is unreadable in a readable Produce request"));
                };
                let first = scanned.entries.first().map(|e| &e.topic);
                if prefix.topics != scanned.entries.len() || prefix.first_topic.as_ref() != first || Some(prefix.acks) != scanned.acks {
                    return Err(ParseError::Inconsistent("the head read alone disagrees with the whole Produce request"));
                }
            }
        }
    }
    Ok(head)
}
