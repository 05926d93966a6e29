//! The mirror model: mirrors, their topics and partitions, the partition state machine (spec §6) and
//! its store in the compacted topic `__mirror_state`.
//!
//! Owns what a mirror *is* and which state each partition is in. Does not own sockets or Kafka
//! messages: it drives `replicator` and `sync`, which talk to Kafka through `client`; `proxy` and
//! `admin` read and change mirror state only through the types here.
//!
//! ```text
//!   admin ──► MirrorManager (manager.rs) ──validate──► StateStore::write (store.rs, records.rs)
//!                 │                                      └─► Model::apply (model.rs) ◄── proxy's
//!                 │                                                                  write policy
//!                 └─► one TopicRunner per topic (runner.rs) ──► Replicator (one per topic)
//!                        STOPPING: abort open mirrored transactions (stop.rs) ──► STOPPED
//! ```
//!
//! - [`settings`]: mirror names, settings (Java client names) and sealed secrets.
//! - [`records`]: the versioned record schemas of `__mirror_state`.
//! - [`store`]: the topic itself: create, load, write; segment decoding for `--dump-state`.
//! - `model`: the in-memory image the write policy and describe read.
//! - [`manager`]: the operations; `runner`: one task per mirror topic.
//! - [`loops`]: which source topics are themselves mirror topics there (refused: mirrors must not loop).

mod error;
mod lookup;
pub mod loops;
pub mod manager;
mod model;
pub mod records;
mod runner;
pub mod settings;
mod state;
mod stop;
pub mod store;

pub use error::MirrorError;
pub use lookup::{InMemoryMirrorLookup, MirrorLookup, MirroredTopic};
pub use loops::{LoopCheckError, source_mirror_topics};
pub use manager::{
    ConfigChange, DescribedSetting, MirrorDescription, MirrorListing, MirrorManager, MirrorManagerConfig, PartitionDescription,
    TopicDescription, TopicOutcomes,
};
pub use settings::{MirrorSettings, SecretKey, SettingError};
pub use state::{PartitionState, PartitionStatus};
pub use stop::abort_open_transactions;

/// Milliseconds since the Unix epoch (record timestamps).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
