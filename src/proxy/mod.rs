//! The Kafka-protocol proxy in front of the destination cluster: listeners (one per destination
//! broker), routing to the right broker, rewriting broker endpoints in responses, and the write policy
//! that refuses client writes to mirror topics (spec §2).
//!
//! Must not touch: replication or mirror state directly; it asks `mirror` whether a topic is mirrored.
//! Not built yet (issue 5).
