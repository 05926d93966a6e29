//! Settings of the replicator, with their defaults.

use std::time::Duration;

use crate::client::{BackoffConfig, IsolationLevel};

/// Default cap on one partition's data in a fetch response (bytes).
pub const DEFAULT_PARTITION_FETCH_BYTES: i32 = 8 * 1024 * 1024;
/// Default time a fetch waits at the source for new data.
pub const DEFAULT_FETCH_MAX_WAIT: Duration = Duration::from_millis(500);
/// Default memory for fetched data not yet written, across all partitions (bytes).
pub const DEFAULT_BUFFER_BYTES: usize = 256 * 1024 * 1024;
/// Default broker-side timeout of a Produce or WriteTxnMarkers.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(15);
/// Default leading gap (offsets) above which filler records plus DeleteRecords replace markers.
pub const DEFAULT_MARKER_GAP_LIMIT: i64 = 1000;
/// Filler records per batch (brokers hold a batch's records in memory while validating).
pub const FILLER_RECORDS_PER_BATCH: usize = 50_000;

/// Hook for throttling: called with the bytes about to be written to a partition; returns once they
/// may be written. The default lets everything through.
pub trait RateLimiter: Send + Sync + std::fmt::Debug {
    /// Waits until `bytes` may be written to `topic`-`partition`.
    fn acquire<'a>(&'a self, topic: &'a str, partition: i32, bytes: usize) -> futures_util::future::BoxFuture<'a, ()>;
}

/// How the replicator copies.
#[derive(Debug, Clone)]
pub struct ReplicatorConfig {
    /// `mirror.isolation.level`: read_committed copies up to the source LSO (the default),
    /// read_uncommitted up to the high watermark.
    pub isolation: IsolationLevel,
    /// The transactional id put in Produce requests carrying transactional batches (any fixed id;
    /// the broker only checks the principal's WRITE on it).
    pub transactional_id: String,
    /// Cap on one partition's data per fetch, bytes.
    pub partition_fetch_bytes: i32,
    /// How long a fetch waits at the source for data.
    pub fetch_max_wait: Duration,
    /// Memory for fetched, unwritten data across partitions, bytes; fetching waits when it is used up.
    pub buffer_bytes: usize,
    /// Broker-side timeout of each write. Also how long to wait after a lost connection before
    /// reading the destination back, so that a write still queued at the broker has completed.
    pub write_timeout: Duration,
    /// Retry spacing for source and destination errors that can pass.
    pub backoff: BackoffConfig,
    /// A leading gap longer than this is filled with filler records then cut with DeleteRecords,
    /// instead of one marker per offset.
    pub marker_gap_limit: i64,
    /// Replication factor of created destination topics (-1: min(3, brokers)).
    pub replication_factor: i16,
    /// Throttling hook.
    pub rate_limiter: Option<std::sync::Arc<dyn RateLimiter>>,
}

impl ReplicatorConfig {
    /// Defaults, with `transactional_id` naming the mirror.
    pub fn new(mirror: &str) -> Self {
        Self {
            isolation: IsolationLevel::ReadCommitted,
            transactional_id: format!("kafka-mirror-proxy-{mirror}"),
            partition_fetch_bytes: DEFAULT_PARTITION_FETCH_BYTES,
            fetch_max_wait: DEFAULT_FETCH_MAX_WAIT,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            backoff: BackoffConfig { deadline: Duration::from_secs(3600 * 24 * 365), ..BackoffConfig::default() },
            marker_gap_limit: DEFAULT_MARKER_GAP_LIMIT,
            replication_factor: -1,
            rate_limiter: None,
        }
    }
}
