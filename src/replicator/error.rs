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
