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

pub mod admin;
pub mod client;
pub mod mirror;
pub mod protocol;
pub mod proxy;
pub mod replicator;
pub mod report;
pub mod sync;
