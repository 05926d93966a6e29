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

/// Reads a client request the way a session does before forwarding it: the header, and for the
/// APIs the write policy inspects, the whole body. For fuzzing (`fuzz/fuzz_targets/proxy_request.rs`)
/// and tests; never panics, whatever the bytes.
///
/// # Errors
/// The first problem found.
pub fn parse_request(frame: &[u8]) -> Result<RequestHead, String> {
    let head = RequestHead::parse(frame).map_err(|e| e.to_string())?;
    if let Ok(api_key) = kafka_protocol::messages::ApiKey::try_from(head.api_key) {
        if requests::scan_range(api_key).is_some() {
            let scanned = requests::scan_request(frame, api_key, head.api_version).map_err(|e| e.to_string())?;
            let keep = vec![requests::Keep::All; scanned.entries.len()];
            let rebuilt = requests::rebuild(frame, &scanned, &keep);
            if rebuilt != frame {
                return Err("rebuilding the request changed it".to_owned());
            }
        }
    }
    Ok(head)
}
