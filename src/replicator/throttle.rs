//! Destination-side bandwidth control (spec §9): `mirror.replication.throttled.rate` per mirror,
//! `mirror.replication.throttled.replicas` choosing the partitions it applies to, and a ceiling
//! for the whole instance (`mirrors.replication_throttled_rate` in `proxy.yaml`).
//!
//! A write waits *before* it is sent, for as long as its bytes take at the rate; nothing is
//! dropped, split or reordered (a partition has one write in flight, so waiting only spaces its
//! writes out). Each limit is a token bucket that may go into debt by one write: a write may go
//! once the bucket is not in debt, and takes its bytes, however many. Waiters re-check under the
//! lock, so only one write goes per refill and the debt stays below one batch; the long-run rate is
//! the configured one. A rate changed or removed at run time wakes every waiter, which then waits
//! for the new rate only: a change takes effect at once, not after the queue drawn at the old rate.
//!
//! Owns: the buckets and the partition selection. Does not own: where the settings come from (the
//! mirror's settings, `proxy.yaml`), nor the source side, which is Kafka's client quotas on the
//! fetch client ids and `throttle_time_ms` (`fetch/session_loop.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Longest a bucket saves up while idle: a burst after a quiet spell is at most this long at the
/// rate (the debt model lets one more write through on top).
const BURST: Duration = Duration::from_millis(100);

/// One rate limit, changeable at run time.
#[derive(Debug, Default)]
pub struct Bucket {
    state: Mutex<BucketState>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct BucketState {
    /// Bytes per second; `None`: unlimited.
    rate: Option<u64>,
    /// Bytes that may go now; negative: the debt of the last write.
    tokens: f64,
    refilled: Option<Instant>,
}

impl BucketState {
    fn refill(&mut self, rate: u64, now: Instant) {
        let elapsed = self.refilled.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        let cap = rate as f64 * BURST.as_secs_f64();
        self.tokens = (self.tokens + rate as f64 * elapsed.as_secs_f64()).min(cap);
        self.refilled = Some(now);
    }
}

impl Bucket {
    /// A bucket at `rate` bytes/s (`None`: unlimited).
    pub fn new(rate: Option<u64>) -> Self {
        let bucket = Self::default();
        bucket.set_rate(rate);
        bucket
    }

    /// The rate now (`None`: unlimited).
    pub fn rate(&self) -> Option<u64> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).rate
    }

    /// Changes the rate; waiting writes re-check at once. A rate of 0 is taken as unlimited.
    pub fn set_rate(&self, rate: Option<u64>) {
        let rate = rate.filter(|r| *r > 0);
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.rate == rate {
                return;
            }
            if let Some(old) = state.rate {
                state.refill(old, Instant::now());
            }
            state.rate = rate;
            // The debt of the last write is kept (at the new rate), savings above the new burst are not.
            if let Some(new) = rate {
                state.tokens = state.tokens.min(new as f64 * BURST.as_secs_f64());
            } else {
                state.tokens = 0.0;
            }
        }
        self.changed.notify_waiters();
    }

    /// Waits until `bytes` may go, then takes them. Returns how long it waited.
    pub async fn acquire(&self, bytes: usize) -> Duration {
        let started = Instant::now();
        loop {
            // Registered before the check, so that a change between the check and the sleep wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let wait = {
                let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(rate) = state.rate else { return started.elapsed() };
                let now = Instant::now();
                state.refill(rate, now);
                if state.tokens >= 0.0 {
                    state.tokens -= bytes as f64;
                    return now.saturating_duration_since(started);
                }
                Duration::from_secs_f64(-state.tokens / rate as f64)
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut changed => {}
            }
        }
    }
}

/// Which partitions of a mirror the mirror's rate applies to
/// (`mirror.replication.throttled.replicas`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ThrottledReplicas {
    /// Every partition (`*`, and the default when the setting is absent).
    #[default]
    All,
    /// These partitions: per topic, every partition (`None`) or those listed.
    Some(BTreeMap<String, Option<BTreeSet<i32>>>),
}

impl ThrottledReplicas {
    /// Parses the setting: `*`, or a comma-separated list of `TOPIC:PARTITION` and `TOPIC:*`
    /// entries. An empty value throttles nothing.
    ///
    /// # Errors
    /// The first malformed entry, and why.
    pub fn parse(value: &str) -> Result<Self, String> {
        let value = value.trim();
        if value == "*" {
            return Ok(Self::All);
        }
        let mut topics: BTreeMap<String, Option<BTreeSet<i32>>> = BTreeMap::new();
        for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((topic, partition)) = entry.rsplit_once(':') else {
                return Err(format!("`{entry}` is not TOPIC:PARTITION or TOPIC:* (or `*` alone for every partition)"));
            };
            let topic = topic.trim();
            if topic.is_empty() || topic.contains(':') {
                return Err(format!("`{entry}` does not name one topic"));
            }
            let slot = topics.entry(topic.to_owned()).or_insert_with(|| Some(BTreeSet::new()));
            match partition.trim() {
                "*" => *slot = None,
                p => {
                    let p: i32 = p.parse().ok().filter(|p| *p >= 0).ok_or_else(|| format!("`{entry}`: `{p}` is not a partition number"))?;
                    if let Some(set) = slot {
                        set.insert(p);
                    }
                }
            }
        }
        Ok(Self::Some(topics))
    }

    /// Whether the mirror's rate applies to `topic`-`partition`.
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        match self {
            Self::All => true,
            Self::Some(topics) => topics.get(topic).is_some_and(|p| p.as_ref().is_none_or(|set| set.contains(&partition))),
        }
    }
}

/// The throttle of one mirror's writes on this instance: its own bucket for the partitions
/// selected, then the instance's ceiling for every write. Counts the time writes waited.
#[derive(Debug)]
pub struct Throttle {
    mirror: Bucket,
    replicas: Mutex<ThrottledReplicas>,
    ceiling: Option<Arc<Bucket>>,
    waited_nanos: AtomicU64,
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Throttle {
    /// Unlimited until [`Throttle::set`], under the instance's `ceiling` if any.
    pub fn new(ceiling: Option<Arc<Bucket>>) -> Self {
        Self { mirror: Bucket::new(None), replicas: Mutex::new(ThrottledReplicas::All), ceiling, waited_nanos: AtomicU64::new(0) }
    }

    /// Applies the mirror's settings: its rate (bytes/s, `None` unlimited) and the partitions it
    /// applies to. Writes waiting now re-check at once.
    pub fn set(&self, rate: Option<u64>, replicas: ThrottledReplicas) {
        *self.replicas.lock().unwrap_or_else(PoisonError::into_inner) = replicas;
        self.mirror.set_rate(rate);
    }

    /// The mirror's rate now, bytes/s (`None`: unlimited).
    pub fn rate(&self) -> Option<u64> {
        self.mirror.rate()
    }

    /// Time writes of this mirror have waited for a limit, in all.
    pub fn waited(&self) -> Duration {
        Duration::from_nanos(self.waited_nanos.load(Ordering::Relaxed))
    }

    /// Waits until `bytes` may be written to `topic`-`partition`.
    pub async fn acquire(&self, topic: &str, partition: i32, bytes: usize) {
        let selected = self.replicas.lock().unwrap_or_else(PoisonError::into_inner).contains(topic, partition);
        let mut waited = Duration::ZERO;
        if selected {
            waited += self.mirror.acquire(bytes).await;
        }
        if let Some(ceiling) = &self.ceiling {
            waited += ceiling.acquire(bytes).await;
        }
        if !waited.is_zero() {
            self.waited_nanos.fetch_add(u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_lists() {
        assert_eq!(ThrottledReplicas::parse("*").unwrap(), ThrottledReplicas::All);
        let some = ThrottledReplicas::parse(" orders:0, orders:3 ,payments:*").unwrap();
        assert!(some.contains("orders", 0) && some.contains("orders", 3) && !some.contains("orders", 1));
        assert!(some.contains("payments", 0) && some.contains("payments", 99));
        assert!(!some.contains("other", 0));
        let none = ThrottledReplicas::parse("").unwrap();
        assert!(!none.contains("orders", 0));
        for bad in ["orders", "orders:x", "orders:-1", ":0", "a:b:0"] {
            assert!(ThrottledReplicas::parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_spaces_writes_at_its_rate() {
        let bucket = Bucket::new(Some(1000));
        let start = Instant::now();
        for _ in 0..10 {
            bucket.acquire(500).await;
        }
        // The first write goes at once (debt), the other nine wait for 500 bytes each at 1000/s.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(4400) && took <= Duration::from_millis(4600), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_change_reaches_a_waiting_write_at_once() {
        let bucket = Arc::new(Bucket::new(Some(10)));
        bucket.acquire(1000).await; // 100 s of debt at 10 bytes/s
        let waiter = {
            let bucket = bucket.clone();
            tokio::spawn(async move { bucket.acquire(10).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!waiter.is_finished());
        bucket.set_rate(None);
        let waited = waiter.await.unwrap();
        assert!(waited <= Duration::from_millis(1100), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn unselected_partitions_only_meet_the_ceiling() {
        let throttle = Throttle::new(None);
        throttle.set(Some(100), ThrottledReplicas::parse("t:1").unwrap());
        let start = Instant::now();
        for _ in 0..5 {
            throttle.acquire("t", 0, 1000).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        throttle.acquire("t", 1, 100).await;
        throttle.acquire("t", 1, 100).await;
        assert!(start.elapsed() >= Duration::from_millis(900), "{:?}", start.elapsed());
        assert!(throttle.waited() >= Duration::from_millis(900));

        let ceiling = Arc::new(Bucket::new(Some(100)));
        let capped = Throttle::new(Some(ceiling));
        let start = Instant::now();
        capped.acquire("t", 0, 100).await;
        capped.acquire("t", 0, 100).await;
        assert!(start.elapsed() >= Duration::from_millis(900), "{:?}", start.elapsed());
    }
}
