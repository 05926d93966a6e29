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

/// What describe shows for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// Topic name (same on both sides).
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// State.
    pub state: PartitionState,
    /// Source high watermark, as last seen (-1 before the first fetch).
    pub source_high_watermark: i64,
    /// Source last stable offset, as last seen (-1 before the first fetch).
    pub source_last_stable_offset: i64,
    /// Next destination offset to write (the destination log end offset as far as we wrote it).
    pub destination_offset: i64,
    /// While FAILED: automatic retries so far (1 for the first failure), -1 if the failure is not
    /// retried (it needs an operator).
    pub retry_attempt: i16,
}

impl PartitionStatus {
    /// Offsets not copied yet: up to the LSO under read_committed, else up to the high watermark.
    pub fn lag(&self, read_committed: bool) -> i64 {
        let end = if read_committed { self.source_last_stable_offset } else { self.source_high_watermark };
        (end - self.destination_offset).max(0)
    }
}
