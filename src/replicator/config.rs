//! Settings of the replicator, with their defaults.
//!
//! The fetch settings follow the mirror settings of the proposal (`fetch.wait.max.ms`,
//! `fetch.min.bytes`, `fetch.response.max.bytes`, `fetch.max.bytes` per partition,
//! `mirror.num.replica.fetchers`); `notes/proposal-digest.md` §5.

use std::time::Duration;

use crate::client::{BackoffConfig, IsolationLevel};

/// Default cap on one partition's data in a fetch response (bytes; the proposal's `fetch.max.bytes`).
pub const DEFAULT_PARTITION_FETCH_BYTES: i32 = 1024 * 1024;
/// Default cap on a whole fetch response (bytes; the proposal's `fetch.response.max.bytes`).
pub const DEFAULT_FETCH_MAX_BYTES: i32 = 32 * 1024 * 1024;
/// Default bytes a fetch waits for at the source before answering (`fetch.min.bytes`).
pub const DEFAULT_FETCH_MIN_BYTES: i32 = 1;
/// Default time a fetch waits at the source for new data.
pub const DEFAULT_FETCH_MAX_WAIT: Duration = Duration::from_millis(500);
/// Default fetch sessions (connections) per source broker (`mirror.num.replica.fetchers`). A broker
/// reads every partition of a session on each fetch: at 10,000 partitions 4 sessions halved the
/// idle-partition lag against 1 (p99 58 against 120 ms) and cost no throughput at 12 (BENCHMARKS.md).
pub const DEFAULT_FETCHERS_PER_BROKER: usize = 4;
/// Default writer connections per destination broker.
pub const DEFAULT_WRITERS_PER_BROKER: usize = 4;
/// Default memory for fetched data not yet written, across all partitions (bytes).
pub const DEFAULT_BUFFER_BYTES: usize = 256 * 1024 * 1024;
/// Default fetched data one partition may hold before it is left out of fetches until it wrote
/// some (bytes).
pub const DEFAULT_PARTITION_BUFFER_BYTES: usize = 4 * 1024 * 1024;
/// Default broker-side timeout of a Produce or WriteTxnMarkers.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(15);
/// Default leading gap (offsets) above which filler records plus DeleteRecords replace markers.
pub const DEFAULT_MARKER_GAP_LIMIT: i64 = 1000;
/// The key of filler records (below the source log start, cut away with DeleteRecords).
pub const FILLER_KEY: &[u8] = b"__kafka_mirror_proxy_filler";
/// Filler records per batch (brokers hold a batch's records in memory while validating).
pub const FILLER_RECORDS_PER_BATCH: usize = 50_000;

/// How the replicator copies.
#[derive(Debug, Clone)]
pub struct ReplicatorConfig {
    /// `mirror.isolation.level`: read_committed copies up to the source LSO (the default),
    /// read_uncommitted up to the high watermark.
    pub isolation: IsolationLevel,
    /// The transactional id put in Produce requests carrying transactional batches (any fixed id;
    /// the broker only checks the principal's WRITE on it).
    pub transactional_id: String,
    /// Cap on one partition's data per fetch, bytes. A batch larger than this is still copied: it
    /// is fetched on its own, where the broker returns a first batch whole.
    pub partition_fetch_bytes: i32,
    /// Cap on a whole fetch response, bytes.
    pub fetch_max_bytes: i32,
    /// Bytes the source waits for before answering a fetch.
    pub fetch_min_bytes: i32,
    /// How long a fetch waits at the source for data.
    pub fetch_max_wait: Duration,
    /// Fetch sessions per source broker, each on a connection of its own (more carry more bandwidth
    /// where one response at a time cannot).
    pub fetchers_per_broker: usize,
    /// The client id of fetch connections, before `-<n>` (n = 0..fetchers_per_broker): a source
    /// operator throttles mirroring with a client quota on it.
    pub fetch_client_id: String,
    /// Writer connections per destination broker (each partition writes through one of them).
    pub writers_per_broker: usize,
    /// Memory for fetched, unwritten data across partitions, bytes; fetching waits when it is used up.
    pub buffer_bytes: usize,
    /// Fetched, unwritten data of one partition above which it is not fetched until it wrote some.
    pub partition_buffer_bytes: usize,
    /// Broker-side timeout of each write. Also how long to wait after a lost connection before
    /// reading the destination back, so that a write still queued at the broker has completed.
    pub write_timeout: Duration,
    /// Retry spacing for source and destination errors that can pass.
    pub backoff: BackoffConfig,
    /// A leading gap longer than this is filled with filler records then cut with DeleteRecords,
    /// instead of one marker per offset.
    pub marker_gap_limit: i64,
    /// Destination-side throttling of record data (unlimited unless set; shared by the clones of
    /// this config, so a rate set on it reaches every partition at once).
    pub throttle: std::sync::Arc<super::throttle::Throttle>,
    /// What the copying counts for the metrics (shared by the clones of this config).
    pub stats: std::sync::Arc<super::stats::CopyStats>,
}

impl ReplicatorConfig {
    /// Defaults, with `transactional_id` and the fetch client id naming the mirror.
    pub fn new(mirror: &str) -> Self {
        Self {
            isolation: IsolationLevel::ReadCommitted,
            transactional_id: format!("kafka-mirror-proxy-{mirror}"),
            partition_fetch_bytes: DEFAULT_PARTITION_FETCH_BYTES,
            fetch_max_bytes: DEFAULT_FETCH_MAX_BYTES,
            fetch_min_bytes: DEFAULT_FETCH_MIN_BYTES,
            fetch_max_wait: DEFAULT_FETCH_MAX_WAIT,
            fetchers_per_broker: DEFAULT_FETCHERS_PER_BROKER,
            fetch_client_id: format!("kafka-mirror-proxy-mirror-{mirror}-fetcher"),
            writers_per_broker: DEFAULT_WRITERS_PER_BROKER,
            buffer_bytes: DEFAULT_BUFFER_BYTES,
            partition_buffer_bytes: DEFAULT_PARTITION_BUFFER_BYTES,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            backoff: BackoffConfig { deadline: Duration::from_secs(3600 * 24 * 365), ..BackoffConfig::default() },
            marker_gap_limit: DEFAULT_MARKER_GAP_LIMIT,
            throttle: std::sync::Arc::default(),
            stats: std::sync::Arc::default(),
        }
    }

    /// The client id of fetch connection `n`.
    pub fn fetch_client_id_of(&self, n: usize) -> String {
        format!("{}-{n}", self.fetch_client_id)
    }
}
