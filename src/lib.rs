//! kafka-mirror-proxy: Cluster Mirroring for unmodified Apache Kafka.
//!
//! A Kafka-protocol proxy fronts a destination cluster; a replicator copies record batches from a
//! source cluster into it at the same offsets (see `../shared/spec/cluster-mirroring.md`).
//!
//! Components, and the one direction data flows between them:
//!
//! ```text
//!   proxy ──┐                     ┌──► replicator ──┐
//!           ├──► mirror (state) ──┤                 ├──► client ──► protocol
//!   admin ──┘                     └──► sync ────────┘
//! ```
//!
//! - [`protocol`]: framing, record batches, error codes (pure, no I/O).
//! - [`client`]: our Kafka client (connections, metadata, typed calls with raw record bytes).
//! - [`proxy`]: listeners, per-broker routing, address rewriting, write policy.
//! - [`mirror`]: the mirror model, partition state machine, `__mirror_state` store.
//! - [`replicator`]: fetch, batch rewrite, offset-exact writes, throttling.
//! - [`sync`]: group offsets, ACLs, configs, partitions.
//! - [`admin`]: handlers of the mirror admin APIs and their authorization.

/// The allocator of every binary that links this crate (the proxy, the tools, the tests, the fuzz
/// targets): the system's, except that allocations of 1 GiB or more are reserved without being
/// committed (`crates/reserve-alloc` says why). So a response of nine bytes claiming 4 billion
/// array entries, which `kafka-protocol` sizes its `Vec` from, fails that one decode and closes the
/// one connection that got it instead of aborting the process (under `vm.overcommit_memory` 0 or 1,
/// Linux's default). Without it, the tests `impossible_array_counts_are_decode_errors`
/// (proxy/rewrite.rs), `a_broker_response_with_an_impossible_array_count_ends_its_session_not_the_process`
/// (proxy/session.rs) and `an_impossible_array_count_is_a_decode_error` (client) abort.
#[global_allocator]
static ALLOCATOR: reserve_alloc::ReserveLarge = reserve_alloc::ReserveLarge;

pub mod admin;
pub mod client;
pub mod mirror;
pub mod protocol;
pub mod proxy;
pub mod replicator;
pub mod report;
pub mod sync;
