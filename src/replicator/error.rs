//! Why a partition stopped copying.

use crate::client::ClientError;

use super::plan::PlanError;

/// A partition-level replication failure. [`ReplicationError::is_retriable`] tells whether the
/// partition is retried with backoff or stays FAILED until an operator acts.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicationError {
    /// The destination holds something the mirror did not write, or assigned another offset.
    #[error("divergence at offset {offset}: {detail}")]
    Divergence { offset: i64, detail: String },
    /// The source topic was deleted, or deleted and re-created (its topic id changed).
    #[error("source topic {topic} {detail}")]
    SourceTopicChanged { topic: String, detail: String },
    /// The source cluster id changed: the mirror now points at another cluster.
    #[error("source cluster id changed from {recorded} to {now}")]
    SourceClusterChanged { recorded: String, now: String },
    /// A source batch cannot be reproduced.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The destination topic cannot be used as a mirror of the source topic.
    #[error("destination topic {topic}: {detail}")]
    DestinationTopic { topic: String, detail: String },
    /// The destination refused a write for a reason retrying cannot fix.
    #[error("destination refused the write at offset {offset}")]
    Refused {
        offset: i64,
        #[source]
        source: ClientError,
    },
    /// A task of the partition ended without reporting why: it panicked (a bug, with its message),
    /// or stopped on its own. Not retried: what failed once would fail again.
    #[error("internal error: {detail}")]
    Internal { detail: String },
    /// The source or the destination failed in a way that can pass (unreachable, leader moving).
    #[error("{side} cluster unavailable")]
    Unavailable {
        side: &'static str,
        #[source]
        source: ClientError,
    },
}

impl ReplicationError {
    /// True if the partition should be retried with backoff.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// The reason shown in describe: the error and its causes on one line.
    pub fn reason(&self) -> String {
        crate::report::error_chain(self)
    }
}

/// The class of a FAILED reason as [`ReplicationError::reason`] wrote it (or the mirror, for
/// settings it cannot use): a short, bounded name for a metric label. The reasons themselves name
/// offsets and topics, so they cannot be labels.
pub fn reason_class(reason: &str) -> &'static str {
    const CLASSES: [(&str, &str); 11] = [
        ("divergence at offset", "divergence"),
        ("source topic ", "source_topic_changed"),
        ("source batch at offset", "batch_not_reproducible"),
        ("source cluster id changed", "source_cluster_changed"),
        ("corrupt source batch", "corrupt_batch"),
        ("destination topic ", "destination_topic"),
        ("destination refused the write", "write_refused"),
        ("internal error", "internal"),
        ("source cluster unavailable", "source_unavailable"),
        ("destination cluster unavailable", "destination_unavailable"),
        ("mirror setting", "settings"),
    ];
    CLASSES.iter().find(|(prefix, _)| reason.starts_with(prefix)).map_or("other", |(_, class)| class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_its_class() {
        let unavailable = |side| ReplicationError::Unavailable { side, source: ClientError::UnknownBroker { broker: 1 } };
        let cases = [
            (ReplicationError::Divergence { offset: 5, detail: "x".into() }, "divergence"),
            (ReplicationError::SourceTopicChanged { topic: "t".into(), detail: "was deleted".into() }, "source_topic_changed"),
            (ReplicationError::SourceClusterChanged { recorded: "a".into(), now: "b".into() }, "source_cluster_changed"),
            (ReplicationError::DestinationTopic { topic: "t".into(), detail: "x".into() }, "destination_topic"),
            (ReplicationError::Refused { offset: 1, source: ClientError::UnknownBroker { broker: 1 } }, "write_refused"),
            (ReplicationError::Internal { detail: "x".into() }, "internal"),
            (unavailable("source"), "source_unavailable"),
            (unavailable("destination"), "destination_unavailable"),
        ];
        for (error, class) in cases {
            assert_eq!(reason_class(&error.reason()), class, "{}", error.reason());
        }
        assert_eq!(reason_class("anything else"), "other");
    }
}
