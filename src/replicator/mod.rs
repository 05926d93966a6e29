//! The replicator: fetches record batches from source partition leaders and writes them to the
//! destination at the same offsets (spec §3–5): batch header rewrite, sequence renumbering, producer id
//! mapping, transaction markers, gap filling, reconciliation after ambiguous outcomes, throttling.
//!
//! Must not touch: client connections of the proxy, or mirror state other than through `mirror`'s
//! interfaces. Not built yet (issue 4).
