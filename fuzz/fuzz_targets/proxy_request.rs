//! Fuzzes the proxy's request parsing path: the request header, and for the APIs the write policy
//! reads (Produce, DeleteRecords, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) the whole
//! body, then rebuilding the request from what was read (which must give back the same bytes); for
//! Produce also the head read alone, as the streaming path reads a large request (which must agree
//! with the whole scan, and must not panic on a request cut anywhere).
//!
//!     cargo +nightly fuzz run proxy_request
//!
//! The first two bytes of the input choose the API key and version, so the fuzzer reaches every
//! scanner without having to discover header layouts. Findings become regression tests in
//! src/proxy/requests.rs.
#![no_main]

use kafka_mirror_proxy::proxy::{ParseError, parse_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let api_key = [0i16, 21, 37, 33, 44][usize::from(data[0]) % 5];
    let api_version = i16::from(data[1] % 16);
    let mut frame = Vec::with_capacity(data.len() + 8);
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&api_version.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    frame.extend_from_slice(&data[2..]);
    // Where a large request would be cut when its head is read before the rest has arrived.
    let cut = usize::from(data[0]) * 8;
    check(&frame, cut);
    // And the input as a whole frame, header included.
    check(data, cut);
});

/// Malformed requests are expected; two readings of the same bytes disagreeing never are.
fn check(frame: &[u8], cut: usize) {
    if let Err(ParseError::Inconsistent(what)) = parse_request(frame, cut) {
        panic!("{what}");
    }
}
