//! What the replicator counts for the metrics of its mirror (spec §10): records and bytes copied,
//! fetch and produce latency, and the time the source throttled its fetches. One [`CopyStats`]
//! per mirror, kept by the mirror across its replicators (a settings change makes a new
//! replicator; the counters go on). Lag is not here: it is per partition, in [`super::status`].
//!
//! Owns: the counters and histograms, updated with atomics on the copying path. Does not own how
//! they are exposed (the mirror's metrics collector encodes them).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds of the latency buckets, seconds: from a millisecond (a produce on loopback) to the
/// 30 s of a request timeout; a fetch long-polls up to its max wait (500 ms by default) when idle.
pub const LATENCY_BUCKETS: [f64; 14] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The counters of one mirror's copying on this instance.
#[derive(Debug)]
pub struct CopyStats {
    records: AtomicU64,
    bytes: AtomicU64,
    source_throttle_nanos: AtomicU64,
    /// Fetch requests to source brokers, from sending to the whole response (long polls included).
    pub fetch_latency: Histogram,
    /// Produce requests to destination brokers, from sending to the response.
    pub produce_latency: Histogram,
}

impl Default for CopyStats {
    fn default() -> Self {
        Self {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            source_throttle_nanos: AtomicU64::new(0),
            fetch_latency: Histogram::new(LATENCY_BUCKETS),
            produce_latency: Histogram::new(LATENCY_BUCKETS),
        }
    }
}

impl CopyStats {
    /// A batch of `records` records and `bytes` bytes landed on the destination.
    pub fn copied(&self, records: i64, bytes: usize) {
        self.records.fetch_add(u64::try_from(records).unwrap_or(0), Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The source asked a fetch connection to wait `for_` (`throttle_time_ms`, a client quota).
    pub fn source_throttled(&self, for_: Duration) {
        self.source_throttle_nanos.fetch_add(u64::try_from(for_.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Records copied so far (data records; markers and fillers are not counted).
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Record batch bytes copied so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Time the source throttled the fetches, in all.
    pub fn source_throttle(&self) -> Duration {
        Duration::from_nanos(self.source_throttle_nanos.load(Ordering::Relaxed))
    }
}
