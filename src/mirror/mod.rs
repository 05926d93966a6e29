//! The mirror model: mirrors, their topics and partitions, the partition state machine (spec §6) and
//! its store in the compacted topic `__mirror_state`.
//!
//! Owns what a mirror *is* and which state each partition is in. Does not own sockets or Kafka
//! messages: it drives `replicator` and `sync`, which talk to Kafka through `client`; `proxy` and
//! `admin` read and change mirror state only through the types here.
//!
//! ```text
//!   admin ──► MirrorManager (manager.rs) ──validate──► StateStore::write (store.rs, records.rs)
//!                                                               │ (any instance)
//!   StateStore::tail ◄──────────────────────────────────────────┘
//!        └─► Model::apply (model.rs) ◄── proxy's write policy, describe
//!              └─► Supervisor (supervisor.rs) + Ownership (ownership.rs: the instance group)
//!                    ├─► one TopicRunner per owned topic (runner.rs) ──► the mirror's Replicator
//!                    │      (one per mirror on this instance, shared by its topics' runners)
//!                    │      state changes ──► Recorder (recorder.rs): written in bulk
//!                    │      STOPPING: abort open mirrored transactions (stop.rs) ──► STOPPED
//!                    └─► one sync task per owned mirror (sync.rs) ──► sync::SyncRunner
//! ```
//!
//! - [`settings`]: mirror names, settings (Java client names) and sealed secrets.
//! - [`records`]: the versioned record schemas of `__mirror_state`.
//! - [`store`]: the topic itself: create, load, write; segment decoding for `--dump-state`.
//! - `model`: the in-memory image the write policy and describe read, fed by the state topic's tail.
//! - [`manager`]: the operations; [`ownership`]: which instance runs what (the instance group);
//!   `supervisor`: starts and stops this instance's work; `runner`: one task per owned mirror
//!   topic; `recorder`: observed partition states into the state topic, in bulk; `sync`: the sync
//!   jobs of an owned mirror.
//! - [`loops`]: which source topics are themselves mirror topics there (refused: mirrors must not loop).
//! - [`verify`]: `kafka-mirrors --verify`, both sides read and compared record by record; changes nothing.

mod error;
mod lookup;
pub mod loops;
pub mod manager;
pub mod metrics;
mod model;
pub mod ownership;
mod recorder;
pub mod records;
mod runner;
pub mod settings;
mod state;
mod stop;
pub mod store;
mod supervisor;
mod sync;
pub mod verify;

pub use error::MirrorError;
pub use lookup::{InMemoryMirrorLookup, MirrorLookup, MirroredTopic};
pub use loops::{LoopCheckError, source_mirror_topics};
pub use manager::{
    ConfigChange, DescribedSetting, MirrorDescription, MirrorListing, MirrorManager, MirrorManagerConfig, PartitionDescription, SyncStatuses, TopicDescription,
    TopicOutcomes,
};
pub use ownership::{MembershipConfig, Ownership};
pub use settings::{MirrorSettings, SecretKey, SettingError};
pub use state::PartitionState;
pub use stop::abort_open_transactions;

/// Milliseconds since the Unix epoch (record timestamps).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
