//! The mirror admin messages (spec §8): versioned, flexible Kafka-protocol messages that the proxy
//! serves on its bootstrap listener and `kafka-mirrors` sends. Pure encode/decode, no I/O.
//!
//! Owns: the api keys and error codes of the mirror APIs ([`MirrorApiKey`], [`MirrorErrorCode`]),
//! the message structs ([`messages`]), their wire primitives ([`wire`]), and the request/response
//! header helpers a server or client needs around a body ([`header`]). Does not own: what the
//! requests *do* (`admin`, `mirror`) or sockets (`client::MirrorAdminClient`, the proxy's listener).
//!
//! # Api keys
//!
//! The proposal's prototype numbers these RPCs from 94 upward. Apache Kafka 4.4 already uses key 94
//! (`UnregisterController`; checked against `ApiKeys` of kafka-clients 4.4.0), so CreateMirror moves
//! to the first key above every key the proposal used (94–107). The config RPCs have no number in
//! the proposal (it reuses DescribeConfigs/IncrementalAlterConfigs with a `CLUSTER_MIRROR` resource
//! type, which unmodified brokers reject), so they follow. Keys the proposal used for inter-broker
//! RPCs we do not have (97, 100, 101, 105–107) stay unused.
//!
//! | API                    | key | proposal key | versions |
//! |------------------------|-----|--------------|----------|
//! | CreateMirror           | 108 | 94 (taken by Kafka 4.4 `UnregisterController`) | 0 |
//! | AddTopicsToMirror      | 95  | 95           | 0        |
//! | RemoveTopicsFromMirror | 96  | 96           | 0        |
//! | ListMirrors            | 98  | 98           | 0        |
//! | DescribeMirrors        | 99  | 99           | 0        |
//! | PauseMirrorTopics      | 102 | 102          | 0        |
//! | ResumeMirrorTopics     | 103 | 103          | 0        |
//! | DeleteMirror           | 104 | 104          | 0        |
//! | DescribeMirrorConfigs  | 109 | — (DescribeConfigs, resource type 64) | 0 |
//! | AlterMirrorConfigs     | 110 | — (IncrementalAlterConfigs, resource type 64) | 0 |
//!
//! Every version is flexible (compact strings and arrays, tagged fields): request header v2,
//! response header v1.
//!
//! # Error codes
//!
//! The proposal's latest numbering (134–146) where Kafka 4.4's `Errors` leaves the code free; Kafka
//! 4.4 uses 134 (`GROUP_DELETION_FAILED`), 135 (`STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED`) and 136
//! (`CONTROLLER_ID_NOT_REGISTERED`), so the three mirror errors that had those numbers move above 146.
//!
//! | Error                          | code | proposal code |
//! |--------------------------------|------|---------------|
//! | UNKNOWN_MIRROR                 | 137  | 137 |
//! | TOPIC_ALREADY_IN_MIRROR        | 138  | 138 |
//! | TOPIC_NOT_IN_MIRROR            | 139  | 139 |
//! | MIRROR_TOPIC_ALREADY_PAUSED    | 140  | 140 |
//! | MIRROR_TOPIC_NOT_PAUSED        | 141  | 141 |
//! | MIRROR_TOPIC_BEING_STOPPED     | 142  | 142 |
//! | MIRROR_NOT_EMPTY               | 143  | 143 |
//! | MIRROR_AUTHORIZATION_FAILED    | 144  | 144 |
//! | INVALID_MIRROR_STATE           | 145  | 145 |
//! | MIRROR_TOPIC_NOT_STOPPED       | 146  | 146 |
//! | READ_ONLY_TOPIC                | 147  | 134 (taken by `GROUP_DELETION_FAILED`) |
//! | MIRROR_ALREADY_EXISTS          | 148  | 136 (taken by `CONTROLLER_ID_NOT_REGISTERED`) |
//! | INVALID_MIRROR_NAME            | 149  | 135 in the proposal's second generation (taken by `STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED`) |
//!
//! Kafka's own codes are reused where they mean the same: `INVALID_CONFIG` (40) for a bad mirror
//! setting or an unreachable source, `INVALID_REGULAR_EXPRESSION` (128), `UNKNOWN_TOPIC_OR_PARTITION`
//! (3) for a pattern that matches no source topic, `INVALID_REPLICATION_FACTOR` (38) for a
//! `--replication-factor` the destination cannot have, `COORDINATOR_LOAD_IN_PROGRESS` (14) while
//! `__mirror_state` loads, `INVALID_REQUEST` (42), `UNSUPPORTED_VERSION` (35) and
//! `UNKNOWN_SERVER_ERROR` (-1).
//!
//! # References
//! - KIP-1279 (Cluster Mirroring), as digested in `../shared/spec/notes/proposal-digest.md` §3–4.
//! - Kafka protocol guide: <https://kafka.apache.org/protocol.html>
//! - KIP-482 (tagged fields): <https://cwiki.apache.org/confluence/x/OhMyBw>

pub mod header;
pub mod messages;
pub mod wire;

use std::fmt;

pub use header::{RequestHeader, decode_request_header, decode_response_header, encode_request, encode_response};
pub use messages::*;
pub use wire::DecodeError;

/// The api keys of the mirror RPCs (see the module docs for the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MirrorApiKey {
    /// Create a mirror with its source connection settings.
    CreateMirror,
    /// Start mirroring topics (names or patterns).
    AddTopicsToMirror,
    /// Stop mirroring topics: failover; they become writable.
    RemoveTopicsFromMirror,
    /// List mirrors.
    ListMirrors,
    /// Per-partition state and lag.
    DescribeMirrors,
    /// Suspend copying (topics stay read-only).
    PauseMirrorTopics,
    /// Resume copying.
    ResumeMirrorTopics,
    /// Delete a mirror with no topic still mirroring.
    DeleteMirror,
    /// Read a mirror's settings (secrets hidden).
    DescribeMirrorConfigs,
    /// Change a mirror's settings (reconnects).
    AlterMirrorConfigs,
}

impl MirrorApiKey {
    /// Every mirror api, in key order.
    pub const ALL: [Self; 10] = [
        Self::AddTopicsToMirror,
        Self::RemoveTopicsFromMirror,
        Self::ListMirrors,
        Self::DescribeMirrors,
        Self::PauseMirrorTopics,
        Self::ResumeMirrorTopics,
        Self::DeleteMirror,
        Self::CreateMirror,
        Self::DescribeMirrorConfigs,
        Self::AlterMirrorConfigs,
    ];

    /// The wire api key.
    pub fn key(self) -> i16 {
        match self {
            Self::AddTopicsToMirror => 95,
            Self::RemoveTopicsFromMirror => 96,
            Self::ListMirrors => 98,
            Self::DescribeMirrors => 99,
            Self::PauseMirrorTopics => 102,
            Self::ResumeMirrorTopics => 103,
            Self::DeleteMirror => 104,
            Self::CreateMirror => 108,
            Self::DescribeMirrorConfigs => 109,
            Self::AlterMirrorConfigs => 110,
        }
    }

    /// The mirror api with wire key `key`, if it is one.
    pub fn from_key(key: i16) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.key() == key)
    }

    /// The versions this build serves and sends: `(min, max)`.
    pub fn versions(self) -> (i16, i16) {
        (0, 0)
    }

    /// The api's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::CreateMirror => "CreateMirror",
            Self::AddTopicsToMirror => "AddTopicsToMirror",
            Self::RemoveTopicsFromMirror => "RemoveTopicsFromMirror",
            Self::ListMirrors => "ListMirrors",
            Self::DescribeMirrors => "DescribeMirrors",
            Self::PauseMirrorTopics => "PauseMirrorTopics",
            Self::ResumeMirrorTopics => "ResumeMirrorTopics",
            Self::DeleteMirror => "DeleteMirror",
            Self::DescribeMirrorConfigs => "DescribeMirrorConfigs",
            Self::AlterMirrorConfigs => "AlterMirrorConfigs",
        }
    }
}

impl fmt::Display for MirrorApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error codes in mirror responses: the mirror errors (module docs) and the Kafka errors reused
/// with the same meaning, with an `Unknown` fallback for anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MirrorErrorCode {
    /// 0: success.
    None,
    /// -1: an unexpected server-side failure.
    UnknownServerError,
    /// 3: no source topic matches the pattern.
    UnknownTopicOrPartition,
    /// 14: `__mirror_state` is still loading.
    CoordinatorLoadInProgress,
    /// 35: a version this server does not serve.
    UnsupportedVersion,
    /// 38: a replication factor below 1 or above the destination's broker count.
    InvalidReplicationFactor,
    /// 40: a bad mirror setting, or a source that cannot be reached.
    InvalidConfig,
    /// 42: a malformed request.
    InvalidRequest,
    /// 128: a topic pattern that is not a valid regular expression.
    InvalidRegularExpression,
    /// 137: no mirror by that name.
    UnknownMirror,
    /// 138: the topic is already in a mirror (this or another).
    TopicAlreadyInMirror,
    /// 139: the topic is not in this mirror.
    TopicNotInMirror,
    /// 140: pause of a paused topic.
    MirrorTopicAlreadyPaused,
    /// 141: resume of a topic that is not paused.
    MirrorTopicNotPaused,
    /// 142: the topic is being stopped.
    MirrorTopicBeingStopped,
    /// 143: delete of a mirror with topics not STOPPED.
    MirrorNotEmpty,
    /// 144: the principal may not do this on the `ClusterMirror` resource.
    MirrorAuthorizationFailed,
    /// 145: the partitions' states do not allow the request.
    InvalidMirrorState,
    /// 146: the operation needs the topic STOPPED.
    MirrorTopicNotStopped,
    /// 147: a client write to a mirror topic.
    ReadOnlyTopic,
    /// 148: create with a name already taken.
    MirrorAlreadyExists,
    /// 149: the mirror name breaks the topic-name rules or ends in `.removed`/`.paused`.
    InvalidMirrorName,
    /// Any other code.
    Unknown(i16),
}

impl MirrorErrorCode {
    const KNOWN: [Self; 22] = [
        Self::None,
        Self::UnknownServerError,
        Self::UnknownTopicOrPartition,
        Self::CoordinatorLoadInProgress,
        Self::UnsupportedVersion,
        Self::InvalidReplicationFactor,
        Self::InvalidConfig,
        Self::InvalidRequest,
        Self::InvalidRegularExpression,
        Self::UnknownMirror,
        Self::TopicAlreadyInMirror,
        Self::TopicNotInMirror,
        Self::MirrorTopicAlreadyPaused,
        Self::MirrorTopicNotPaused,
        Self::MirrorTopicBeingStopped,
        Self::MirrorNotEmpty,
        Self::MirrorAuthorizationFailed,
        Self::InvalidMirrorState,
        Self::MirrorTopicNotStopped,
        Self::ReadOnlyTopic,
        Self::MirrorAlreadyExists,
        Self::InvalidMirrorName,
    ];

    /// The wire code.
    pub fn code(self) -> i16 {
        match self {
            Self::None => 0,
            Self::UnknownServerError => -1,
            Self::UnknownTopicOrPartition => 3,
            Self::CoordinatorLoadInProgress => 14,
            Self::UnsupportedVersion => 35,
            Self::InvalidReplicationFactor => 38,
            Self::InvalidConfig => 40,
            Self::InvalidRequest => 42,
            Self::InvalidRegularExpression => 128,
            Self::UnknownMirror => 137,
            Self::TopicAlreadyInMirror => 138,
            Self::TopicNotInMirror => 139,
            Self::MirrorTopicAlreadyPaused => 140,
            Self::MirrorTopicNotPaused => 141,
            Self::MirrorTopicBeingStopped => 142,
            Self::MirrorNotEmpty => 143,
            Self::MirrorAuthorizationFailed => 144,
            Self::InvalidMirrorState => 145,
            Self::MirrorTopicNotStopped => 146,
            Self::ReadOnlyTopic => 147,
            Self::MirrorAlreadyExists => 148,
            Self::InvalidMirrorName => 149,
            Self::Unknown(code) => code,
        }
    }

    /// The error with wire code `code`.
    pub fn from_code(code: i16) -> Self {
        Self::KNOWN.into_iter().find(|e| e.code() == code).unwrap_or(Self::Unknown(code))
    }

    /// True for success.
    pub fn is_ok(self) -> bool {
        self == Self::None
    }

    /// The Kafka-style name (`UNKNOWN_MIRROR`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "NONE",
            Self::UnknownServerError => "UNKNOWN_SERVER_ERROR",
            Self::UnknownTopicOrPartition => "UNKNOWN_TOPIC_OR_PARTITION",
            Self::CoordinatorLoadInProgress => "COORDINATOR_LOAD_IN_PROGRESS",
            Self::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Self::InvalidReplicationFactor => "INVALID_REPLICATION_FACTOR",
            Self::InvalidConfig => "INVALID_CONFIG",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::InvalidRegularExpression => "INVALID_REGULAR_EXPRESSION",
            Self::UnknownMirror => "UNKNOWN_MIRROR",
            Self::TopicAlreadyInMirror => "TOPIC_ALREADY_IN_MIRROR",
            Self::TopicNotInMirror => "TOPIC_NOT_IN_MIRROR",
            Self::MirrorTopicAlreadyPaused => "MIRROR_TOPIC_ALREADY_PAUSED",
            Self::MirrorTopicNotPaused => "MIRROR_TOPIC_NOT_PAUSED",
            Self::MirrorTopicBeingStopped => "MIRROR_TOPIC_BEING_STOPPED",
            Self::MirrorNotEmpty => "MIRROR_NOT_EMPTY",
            Self::MirrorAuthorizationFailed => "MIRROR_AUTHORIZATION_FAILED",
            Self::InvalidMirrorState => "INVALID_MIRROR_STATE",
            Self::MirrorTopicNotStopped => "MIRROR_TOPIC_NOT_STOPPED",
            Self::ReadOnlyTopic => "READ_ONLY_TOPIC",
            Self::MirrorAlreadyExists => "MIRROR_ALREADY_EXISTS",
            Self::InvalidMirrorName => "INVALID_MIRROR_NAME",
            Self::Unknown(_) => "UNKNOWN",
        }
    }
}

impl fmt::Display for MirrorErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(code) => write!(f, "error code {code}"),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Api keys and error codes of Apache Kafka 4.4.0 at and above the range the proposal uses
    /// (from `ApiKeys.values()` and `Errors.values()` of kafka-clients 4.4.0).
    const KAFKA_4_4_MAX_API_KEY: i16 = 94;
    const KAFKA_4_4_MAX_ERROR_CODE: i16 = 136;

    #[test]
    fn keys_are_unique_and_do_not_collide_with_kafka() {
        let mut keys: Vec<i16> = MirrorApiKey::ALL.iter().map(|k| k.key()).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), MirrorApiKey::ALL.len());
        assert!(keys.iter().all(|&k| k > KAFKA_4_4_MAX_API_KEY), "{keys:?}");
        for k in MirrorApiKey::ALL {
            assert_eq!(MirrorApiKey::from_key(k.key()), Some(k));
            // Nor with the keys the kafka-protocol crate knows.
            assert!(kafka_protocol::messages::ApiKey::try_from(k.key()).is_err(), "{k}");
        }
    }

    #[test]
    fn error_codes_round_trip_and_mirror_codes_are_free_in_kafka() {
        for e in MirrorErrorCode::KNOWN {
            assert_eq!(MirrorErrorCode::from_code(e.code()), e);
        }
        assert_eq!(MirrorErrorCode::from_code(7777), MirrorErrorCode::Unknown(7777));
        for e in MirrorErrorCode::KNOWN.iter().filter(|e| e.code() > 128) {
            assert!(e.code() > KAFKA_4_4_MAX_ERROR_CODE, "{e} collides with Kafka 4.4");
        }
    }
}
