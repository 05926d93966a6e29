//! Fuzzes what the proxy does to broker responses: the KIP-951 walks of Produce and Fetch bodies,
//! the rewrite of a streamed Fetch response's tail (which must keep its length: the frame's length
//! went out before it), the ShareFetch / ShareAcknowledge walk and rewrite (which must walk again
//! to the mapped endpoints), and the whole decode, endpoint rewrite and encode of every response
//! the proxy decodes (which must decode again to exactly what was encoded).
//!
//!     cargo +nightly fuzz run proxy_response
//!
//! The first three bytes choose the API, the version and the length of the proxy's host. A broker
//! is trusted more than a client, but no bytes may panic or abort the proxy (an array claiming
//! billions of entries once did: src/lib.rs). Findings become regression tests next to the code
//! they found.
#![no_main]

use kafka_mirror_proxy::proxy::{ParseError, parse_response};
use libfuzzer_sys::fuzz_target;

/// Produce, Fetch, Metadata, FindCoordinator, ApiVersions, DeleteRecords, AlterConfigs,
/// SaslAuthenticate, CreatePartitions, IncrementalAlterConfigs, DescribeCluster, ShareFetch,
/// ShareAcknowledge.
const KEYS: [i16; 13] = [0, 1, 3, 10, 18, 21, 33, 36, 37, 44, 60, 78, 79];

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let api_key = KEYS[usize::from(data[0]) % KEYS.len()];
    let api_version = i16::from(data[1] % 20);
    let host_len = usize::from(data[2] % 64);
    if let Err(ParseError::Inconsistent(what)) = parse_response(api_key, api_version, &data[3..], host_len) {
        panic!("{what}");
    }
});
