//! Fuzzes what the proxy does to broker responses without decoding them: the KIP-951 walks of
//! Produce and Fetch bodies, the rewrite of a streamed Fetch response's tail (which must keep its
//! length: the frame's length went out before it), and the ShareFetch / ShareAcknowledge walk and
//! rewrite (which must walk again to the mapped endpoints).
//!
//!     cargo +nightly fuzz run proxy_response
//!
//! The first two bytes choose the API, the version and the length of the proxy's host. A broker is
//! trusted more than a client, but the proxy must not panic on any bytes. Findings become
//! regression tests next to the code they found.
#![no_main]

use kafka_mirror_proxy::proxy::{ParseRequestError, parse_response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    // Produce, Fetch, ShareFetch, ShareAcknowledge.
    let api_key = [0i16, 1, 78, 79][usize::from(data[0] % 4)];
    let api_version = i16::from(data[0] >> 2) % 20;
    let host_len = usize::from(data[1] % 64);
    if let Err(ParseRequestError::Inconsistent(what)) = parse_response(api_key, api_version, &data[2..], host_len) {
        panic!("{what}");
    }
});
