//! What is kept in sync besides records (spec §7), run by the instance that owns a mirror: consumer
//! group offsets ([`groups`]) and topic configs ([`configs`]); partition increases are followed by
//! `Replicator::sync_partitions`; new source topics matching a mirror's pattern ([`topics`]);
//! ACL bindings ([`acls`]), on the schedules of [`runner`] with the mirror's `sync.*` settings.
//! Share group start offsets and mirror-loop detection are to come (issue 7).
//!
//! Must not touch record data (that is `replicator`). Talks to both clusters through `client`.

pub mod acls;
pub mod configs;
pub mod groups;
pub mod runner;
pub mod topics;

pub use acls::{AclSync, AclSyncReport, parse_acl_filters};
pub use configs::{ConfigFilter, DEFAULT_EXCLUDED_PROPERTIES, sync_topic_configs};
pub use groups::{GroupFilter, GroupSyncReport, SkippedGroup, SyncError, sync_group_offsets};
pub use runner::{MirroredTopics, SYNC_SETTING_NAMES, SettingError, SyncKind, SyncRunner, SyncSettings, SyncStatus};
pub use topics::{DEFAULT_EXCLUDED_TOPICS, TopicPattern, new_matching_topics};
