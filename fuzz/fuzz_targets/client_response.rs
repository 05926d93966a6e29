//! Fuzzes the decoding of broker responses by our client (`client/connection.rs`, which hands the
//! body to `kafka-protocol`): every API at every version `kafka-protocol` knows, as the replicator,
//! the sync jobs and the control plane read them from the source and destination clusters. The
//! source cluster may be run by someone else, so no bytes may panic or abort the process (an array
//! claiming billions of entries once did: `crates/reserve-alloc`).
//!
//!     cargo +nightly fuzz run client_response
//!
//! The first three bytes choose the API and the version.
#![no_main]

use kafka_protocol::messages::{ApiKey, ResponseKind};
use libfuzzer_sys::fuzz_target;
// Linked for its global allocator, which the client's process runs with.
use kafka_mirror_proxy as _;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let Ok(api_key) = ApiKey::try_from(i16::from_be_bytes([data[0], data[1]]) % 100) else { return };
    let range = api_key.valid_versions();
    let span = u16::try_from(range.max - range.min + 1).unwrap_or(1).max(1);
    let version = range.min + i16::try_from(u16::from(data[2]) % span).unwrap_or(0);
    let mut body = bytes::Bytes::copy_from_slice(&data[3..]);
    let _ = ResponseKind::decode(api_key, &mut body, version);
});
