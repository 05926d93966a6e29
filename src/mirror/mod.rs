//! The mirror model: mirrors, their topics and partitions, the partition state machine (INITIALIZING,
//! PREPARING, MIRRORING, PAUSED, STOPPING, STOPPED, FAILED; spec §6) and its store in the compacted
//! topic `__mirror_state`.
//!
//! Must not touch: sockets or Kafka messages directly; it drives `replicator` and `sync`, which talk
//! to Kafka through `client`. Not built yet (issues 4 and 6).
