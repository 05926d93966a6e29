//! What is kept in sync besides records (spec §7): consumer and share group offsets, topic configs,
//! partition counts, new topics matching a mirror's pattern, ACLs.
//!
//! Must not touch: record data (that is `replicator`). Not built yet (issue 7).
