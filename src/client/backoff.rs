//! Exponential backoff with jitter, a cap and a deadline: the one retry schedule of the client.

use std::time::Duration;

use tokio::time::Instant;

/// Default first delay.
pub const DEFAULT_INITIAL: Duration = Duration::from_millis(50);
/// Default cap on one delay.
pub const DEFAULT_MAX: Duration = Duration::from_secs(2);
/// Default total time a call keeps retrying.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// How retries are spaced.
#[derive(Debug, Clone)]
pub struct BackoffConfig {
    /// First delay.
    pub initial: Duration,
    /// Largest single delay.
    pub max: Duration,
    /// Growth factor per attempt.
    pub multiplier: f64,
    /// Fraction of each delay that is randomised (0 = none, 1 = anywhere in `[0, delay]`).
    pub jitter: f64,
    /// Total time after which no further attempt is made.
    pub deadline: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self { initial: DEFAULT_INITIAL, max: DEFAULT_MAX, multiplier: 2.0, jitter: 0.5, deadline: DEFAULT_DEADLINE }
    }
}

/// One retry sequence.
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    next: Duration,
    started: Instant,
    attempts: u32,
    rng: XorShift,
}

impl Backoff {
    /// Starts a sequence now, with a seed from the clock.
    pub fn new(config: &BackoffConfig) -> Self {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0x9e37_79b9, |d| d.as_nanos() as u64);
        Self::with_seed(config, seed)
    }

    /// Starts a sequence with a fixed jitter seed (tests).
    pub fn with_seed(config: &BackoffConfig, seed: u64) -> Self {
        Self { next: config.initial, config: config.clone(), started: Instant::now(), attempts: 0, rng: XorShift(seed | 1) }
    }

    /// Attempts made so far (calls to [`Backoff::next_delay`]).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time since the sequence started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The delay before the next attempt, or `None` once the deadline would be passed.
    pub fn next_delay(&mut self) -> Option<Duration> {
        let base = self.next.min(self.config.max);
        let jitter = self.config.jitter.clamp(0.0, 1.0);
        let delay = base.mul_f64(1.0 - jitter * self.rng.next_unit());
        if self.started.elapsed() + delay > self.config.deadline {
            return None;
        }
        self.attempts += 1;
        self.next = self.next.mul_f64(self.config.multiplier.max(1.0)).min(self.config.max);
        Some(delay)
    }
}

/// A tiny PRNG for jitter only; not for anything that needs real randomness.
#[derive(Debug)]
struct XorShift(u64);

impl XorShift {
    fn next_unit(&mut self) -> f64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn grows_caps_and_stops_at_deadline() {
        let config = BackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
            multiplier: 2.0,
            jitter: 0.0,
            deadline: Duration::from_secs(1),
        };
        let mut b = Backoff::with_seed(&config, 7);
        let mut delays = Vec::new();
        while let Some(d) = b.next_delay() {
            delays.push(d.as_millis());
            tokio::time::sleep(d).await;
        }
        assert_eq!(delays, vec![100, 200, 400]);
        assert_eq!(b.attempts(), 3);
    }

    #[test]
    fn jitter_stays_within_bounds() {
        let config = BackoffConfig { jitter: 1.0, deadline: Duration::from_secs(3600), ..Default::default() };
        let mut b = Backoff::with_seed(&config, 42);
        for _ in 0..50 {
            let d = b.next_delay().unwrap();
            assert!(d <= config.max);
        }
    }
}
