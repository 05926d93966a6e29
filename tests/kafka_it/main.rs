//! Integration tests against real Apache Kafka brokers, started by `tests/harness`.
//!
//! One test binary, so that every test shares the same source and destination clusters (started on
//! first use); tests keep apart through unique topic names.

#![allow(clippy::disallowed_methods, reason = "tests time real clusters with std::time::Instant; no paused time here")]

mod binaries;
mod client;
mod common;
mod control;
mod e2e;
mod faults;
mod instances;
mod operations;
mod proxy;
mod replicator;
mod scale;
mod security;
mod sync;
mod verify;
