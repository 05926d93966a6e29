//! The replicator: copies source partitions into an unmodified destination at the same offsets
//! (spec §3–5).
//!
//! Owns: fetching from source leaders, turning source batches into destination writes ([`plan`]),
//! producer id mapping and sequence renumbering ([`producers`]), writing with offset checks,
//! reconciliation after ambiguous outcomes, and per-partition status. Does not own: the mirror's
//! persistent state or its API (`mirror`, `admin`), nor client connections of the proxy.

pub mod plan;
pub mod producers;
