//! The partition lifecycle of spec §6.
//!
//! ```text
//!   INITIALIZING ──► PREPARING ──► MIRRORING ──► STOPPING ──► STOPPED (writable)
//!        │               │            │  ▲
//!        │               │            ▼  │
//!        │               │           PAUSED
//!        └───────────────┴────────────┴──► FAILED (reason; retried with backoff where it can pass)
//! ```
//!
//! - INITIALIZING: the destination topic is being created or checked.
//! - PREPARING: the destination is aligned with the source (resume point, gaps).
//! - MIRRORING: steady copying.
//! - PAUSED: copying suspended; the topic stays read-only.
//! - STOPPING: stop requested: stop fetching, reconcile the last write, abort mirrored transactions.
//! - STOPPED: no longer mirrored; writable.
//! - FAILED: a per-partition error; other partitions go on.

use std::fmt;

/// The state of one mirrored partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionState {
    /// Destination topic being created or checked.
    Initializing,
    /// Aligning the destination with the source.
    Preparing,
    /// Copying.
    Mirroring,
    /// Copying suspended, still read-only.
    Paused,
    /// Stop requested, finishing.
    Stopping,
    /// Not mirrored any more: writable.
    Stopped,
    /// Failed; the reason says why.
    Failed {
        /// What went wrong, for operators (names the offset where it matters).
        reason: String,
    },
}

impl PartitionState {
    /// Clients may not write to a partition in this state (every state but STOPPED).
    pub fn is_read_only(&self) -> bool {
        !matches!(self, Self::Stopped)
    }

    /// The name operators see (`MIRRORING`, `FAILED`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Initializing => "INITIALIZING",
            Self::Preparing => "PREPARING",
            Self::Mirroring => "MIRRORING",
            Self::Paused => "PAUSED",
            Self::Stopping => "STOPPING",
            Self::Stopped => "STOPPED",
            Self::Failed { .. } => "FAILED",
        }
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed { reason } => write!(f, "FAILED ({reason})"),
            other => f.write_str(other.name()),
        }
    }
}

impl From<&crate::replicator::CopyState> for PartitionState {
    fn from(state: &crate::replicator::CopyState) -> Self {
        use crate::replicator::CopyState;
        match state {
            CopyState::Initializing => Self::Initializing,
            CopyState::Preparing => Self::Preparing,
            CopyState::Mirroring => Self::Mirroring,
            CopyState::Failed { reason } => Self::Failed { reason: reason.clone() },
        }
    }
}
