//! What is kept in sync besides records (spec §7), run by the instance that owns a mirror: consumer
//! group offsets now; topic configs, partition counts, new topics matching a mirror's pattern, share
//! group start offsets and ACLs are to come (issue 7).
//!
//! Must not touch record data (that is `replicator`). Talks to both clusters through `client`.

pub mod groups;

pub use groups::{GroupFilter, GroupSyncReport, SkippedGroup, SyncError, sync_group_offsets};
