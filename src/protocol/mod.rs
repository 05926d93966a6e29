//! The Kafka wire protocol as this project needs it: pure, synchronous, no I/O.
//!
//! Owns:
//! - [`frame`]: the length-prefixed framing every Kafka connection uses, with the size cap checked
//!   before any allocation;
//! - [`batch`]: record batches (magic v2) as raw bytes: iterate, read header fields, patch them in
//!   place with a fresh CRC-32C, iterate records, build control batches;
//! - [`mirror`]: the mirror admin messages (api keys, error codes, bodies, headers);
//! - [`ErrorCode`]: Kafka's error codes, a typed enum with an `Unknown(i16)` fallback (re-exported from
//!   `kafka-protocol`, which keeps it in step with Kafka's `Errors`).
//!
//! Does not own: sockets, correlation of requests and responses, retries (that is `client/`), or any
//! routing decision (`proxy/`, `replicator/`). Message bodies themselves are encoded and decoded by the
//! `kafka-protocol` crate; this module adds what that crate does not do over raw bytes.
//!
//! # References
//! - Kafka protocol guide: <https://kafka.apache.org/protocol.html>
//! - Record batch format: <https://kafka.apache.org/documentation/#recordbatch>

pub mod batch;
mod control;
pub mod frame;
pub mod mirror;
mod records;

pub use frame::{FrameDecoder, FrameError, MAX_FRAME_BYTES_DEFAULT, encode_frame};
pub use kafka_protocol::ResponseError as ErrorCode;
