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

/// Why [`parse_request`] gave up on a request.
#[derive(Debug, thiserror::Error)]
pub enum ParseRequestError {
    /// The bytes are not a request the proxy reads (what a session answers with an error).
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
/// [`ParseRequestError::Malformed`] with the first problem found; [`ParseRequestError::Inconsistent`]
/// when the rebuilt request differs from `frame`, or the head read alone does not give what the
/// whole scan does.
pub fn parse_request(frame: &[u8], cut: usize) -> Result<RequestHead, ParseRequestError> {
    use kafka_protocol::messages::ApiKey;
    let malformed = |e: WireError| ParseRequestError::Malformed(e.to_string());
    let head = RequestHead::parse(frame).map_err(malformed)?;
    if head.api_key == ApiKey::Produce as i16 {
        // Whatever part of a request has arrived, reading its head alone must not panic.
        let _ = requests::produce_prefix(&frame[..cut.min(frame.len())], head.api_version);
    }
    if let Ok(api_key) = ApiKey::try_from(head.api_key) {
        if requests::scan_range(api_key).is_some() {
            let scanned = requests::scan_request(frame, api_key, head.api_version).map_err(|e| ParseRequestError::Malformed(e.to_string()))?;
            let keep = vec![requests::Keep::All; scanned.entries.len()];
            if requests::rebuild(frame, &scanned, &keep) != frame {
                return Err(ParseRequestError::Inconsistent("rebuilding the request changed it"));
            }
            if api_key == ApiKey::Produce {
                let Ok(prefix) = requests::produce_prefix(frame, head.api_version) else {
                    return Err(ParseRequestError::Inconsistent("the head alone is unreadable in a readable Produce request"));
                };
                let first = scanned.entries.first().map(|e| &e.topic);
                if prefix.topics != scanned.entries.len() || prefix.first_topic.as_ref() != first || Some(prefix.acks) != scanned.acks {
                    return Err(ParseRequestError::Inconsistent("the head read alone disagrees with the whole Produce request"));
                }
            }
        }
    }
    Ok(head)
}
