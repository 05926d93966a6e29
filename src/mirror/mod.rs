//! The mirror model: mirrors, their topics and partitions, the partition state machine (spec §6) and,
//! later, its store in the compacted topic `__mirror_state`.
//!
//! Owns what a mirror *is* and which state each partition is in. Does not own sockets or Kafka
//! messages: it drives `replicator` and `sync`, which talk to Kafka through `client`; `proxy` and
//! `admin` read and change mirror state only through the types here.

mod lookup;
mod state;

pub use lookup::{InMemoryMirrorLookup, MirrorLookup, MirroredTopic};
pub use state::{PartitionState, PartitionStatus};
