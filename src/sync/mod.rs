//! What is kept in sync besides records (spec §7), run by the instance that owns a mirror: consumer
//! group offsets ([`groups`]), share group start offsets ([`share_groups`]) and topic configs
//! ([`configs`]); partition increases are followed through the mirror ([`MirroredTopics`]); new source
//! topics matching a mirror's pattern ([`topics`]); ACL bindings ([`acls`], remembered in an
//! [`AclLedger`]), on the schedules of [`runner`] with the mirror's `sync.*` settings. Mirror-loop
//! detection for topics being added is `mirror::loops`'.
//!
//! Must not touch record data (that is `replicator`). Talks to both clusters through `client`.

pub mod acls;
pub mod configs;
pub mod groups;
pub mod runner;
pub mod share_groups;
pub mod topics;

pub use acls::{AclCluster, AclLedger, AclSync, AclSyncReport, InMemoryAclLedger, LedgerError, parse_acl_filters};
pub use configs::{ConfigFilter, DEFAULT_EXCLUDED_PROPERTIES, sync_topic_configs, sync_topic_configs_bulk};
pub use groups::{GroupFilter, GroupSyncReport, SkippedGroup, SyncError, sync_group_offsets};
pub use runner::{MirroredTopics, SYNC_SETTING_NAMES, SettingError, SyncKind, SyncRunner, SyncSettings, SyncStatus};
pub use share_groups::{ShareGroupSyncReport, sync_share_group_offsets};
pub use topics::{DEFAULT_EXCLUDED_TOPICS, TopicPattern, new_matching_topics};
