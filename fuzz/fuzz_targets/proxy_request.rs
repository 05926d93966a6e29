//! Fuzzes the proxy's request parsing path: the request header, and for the APIs the write policy
//! reads (Produce, DeleteRecords, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) the whole
//! body, then rebuilding the request from what was read (which must give back the same bytes).
//!
//!     cargo +nightly fuzz run proxy_request
//!
//! The first two bytes of the input choose the API key and version, so the fuzzer reaches every
//! scanner without having to discover header layouts. Findings become regression tests in
//! src/proxy/requests.rs.
#![no_main]

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
    let _ = kafka_mirror_proxy::proxy::parse_request(&frame);
    // And the input as a whole frame, header included.
    let _ = kafka_mirror_proxy::proxy::parse_request(data);
});
