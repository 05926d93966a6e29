//! One fetch loop: a source broker's partitions (those of this loop's index) fetched in one
//! incremental session on a connection of its own.
//!
//! ```text
//!   loop:
//!     apply the dirty set to the session (added, moved on, paused, waiting, gone)
//!     fetch alone each partition marked solo (cut-off batch, empty answer to confirm)
//!     session empty? wait for a change (or the next partition's retry time)
//!     one Fetch of the session (long poll; short while a member waits on its copier)
//!       ├─ answered: hand each partition's news to its copier (waiting for memory if the budget
//!       │            is used up), honour throttle_time_ms
//!       └─ failed:   back off, reset the session, send every member to the route task
//!   cancelled ─► return
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::mpsc::error::TrySendError;
use tokio::time::Instant;
use tracing::{debug, error, warn};

use super::read::{Read, read};
use super::{Fetched, Held, Key, LoopId, Shared, lock};
use crate::client::{Backoff, ClientError, FetchOptions, FetchSession, FetchSpec, FetchedPartition};
use crate::replicator::error::ReplicationError;
use crate::replicator::plan::PlanError;

/// Longest wait of a fetch while a member of the loop is paused for backpressure: how soon a
/// partition is fetched again once its copier has written some.
const BACKPRESSURE_WAIT: Duration = Duration::from_millis(10);
/// Pause between solo fetches of a partition whose empty answers do not agree yet.
const SOLO_RETRY: Duration = Duration::from_millis(100);

/// Runs loop `id` until cancelled; if it panics (a bug), its partitions go FAILED with the message
/// instead of waiting forever for data.
pub(super) async fn run(shared: Arc<Shared>, id: LoopId, notify: Arc<Notify>) {
    let fetch_loop = FetchLoop { shared: shared.clone(), id, notify, session: FetchSession::new(), backoff: None };
    let outcome = crate::report::catch_panic_async(fetch_loop.run()).await;
    let mut table = lock(&shared.table);
    let Some(slot) = table.loops.remove(&id) else { return };
    if let Err(message) = outcome {
        error!(broker = id.broker, fetcher = id.index, %message, "source fetch loop panicked; its partitions fail");
        for key in slot.members {
            let detail = format!("the source fetch loop of broker {} panicked: {message}", id.broker);
            table.end(&key, Fetched::Failed(ReplicationError::Internal { detail }));
        }
    } else {
        // Cancelled: the replicator stops. Members left would find a new loop if routed again.
        for key in slot.members {
            if let Some(reg) = table.partitions.get_mut(&key) {
                reg.owner = None;
            }
        }
    }
}

/// What applying the dirty set left for this round.
#[derive(Debug, Default)]
struct Round {
    solo: Vec<Key>,
    next_wake: Option<Instant>,
    any_paused: bool,
}

struct FetchLoop {
    shared: Arc<Shared>,
    id: LoopId,
    notify: Arc<Notify>,
    session: FetchSession,
    /// Spacing of requests after failures, until one succeeds.
    backoff: Option<Backoff>,
}

impl FetchLoop {
    async fn run(mut self) {
        let cancel = self.shared.cancel.clone();
        let config = self.shared.config.clone();
        let client = self.shared.clients[self.id.index].clone();
        loop {
            if cancel.is_cancelled() {
                return;
            }
            let round = self.apply_dirty();
            for key in round.solo {
                if !self.fetch_alone(&key).await {
                    break;
                }
            }
            if self.session.is_empty() {
                let wake = round.next_wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    () = self.notify.notified() => {}
                    () = tokio::time::sleep_until(wake) => {}
                }
                continue;
            }
            let mut max_wait = config.fetch_max_wait;
            if round.any_paused {
                max_wait = max_wait.min(BACKPRESSURE_WAIT);
            }
            if let Some(wake) = round.next_wake {
                max_wait = max_wait.min(wake.saturating_duration_since(Instant::now()));
            }
            let options = FetchOptions { isolation: config.isolation, max_wait, min_bytes: config.fetch_min_bytes, max_bytes: config.fetch_max_bytes };
            let sent = Instant::now();
            let result = tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                r = client.fetch_session(self.id.broker, &mut self.session, &options) => r,
            };
            config.stats.fetch_latency.observe(sent.elapsed().as_secs_f64());
            match result {
                Err(e) => self.failed(&e).await,
                Ok(fetched) => {
                    self.backoff = None;
                    self.answered(sent);
                    let bytes: usize = fetched.partitions.iter().map(|p| p.records.len()).sum();
                    // A response near its cap did not reach every partition with data: their empty
                    // answers mean nothing.
                    let full = bytes + usize::try_from(config.partition_fetch_bytes).unwrap_or(0) >= usize::try_from(config.fetch_max_bytes).unwrap_or(0);
                    for p in fetched.partitions {
                        let key = (p.topic.clone(), p.partition);
                        let Some(offset) = self.session.offset_of(&key.0, key.1) else { continue };
                        self.handle(p, offset, false, full).await;
                    }
                    if fetched.throttle_time_ms > 0 {
                        // KIP-219: the broker answered and mutes the connection for this long.
                        let throttle = Duration::from_millis(u64::try_from(fetched.throttle_time_ms).unwrap_or(0));
                        debug!(broker = self.id.broker, ?throttle, "source throttles the fetch");
                        config.stats.source_throttled(throttle);
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(throttle) => {}
                        }
                    }
                }
            }
        }
    }

    /// Brings the session in line with the table for every partition that changed.
    fn apply_dirty(&mut self) -> Round {
        let now = Instant::now();
        let partition_max = self.shared.config.partition_fetch_bytes;
        let mut table = lock(&self.shared.table);
        let table = &mut *table;
        let Some(slot) = table.loops.get_mut(&self.id) else { return Round::default() };
        while let Some((at, key)) = slot.waiting.first().cloned() {
            if at > now {
                break;
            }
            slot.waiting.pop_first();
            slot.dirty.insert(key);
        }
        let mut round = Round::default();
        for key in std::mem::take(&mut slot.dirty) {
            match table.partitions.get_mut(&key) {
                Some(reg) if reg.owner == Some(self.id) => {
                    if let Some(at) = reg.retry_at.filter(|at| *at > now) {
                        slot.waiting.insert((at, key.clone()));
                        self.session.remove(&key.0, key.1);
                        continue;
                    }
                    reg.retry_at = None;
                    if reg.solo {
                        self.session.remove(&key.0, key.1);
                        round.solo.push(key);
                    } else if reg.paused {
                        self.session.remove(&key.0, key.1);
                    } else {
                        self.session.set(&key.0, reg.identity.topic_id, key.1, reg.fetch_offset, reg.last_epoch, partition_max);
                    }
                }
                _ => self.session.remove(&key.0, key.1),
            }
        }
        round.next_wake = slot.waiting.first().map(|(at, _)| *at);
        round.any_paused = !slot.paused.is_empty();
        round
    }

    /// Fetches `key` on its own (the broker then returns its first batch whole). False if the
    /// connection failed (the loop has backed off and given its partitions back).
    async fn fetch_alone(&mut self, key: &Key) -> bool {
        let (offset, last_epoch) = {
            let table = lock(&self.shared.table);
            match table.partitions.get(key) {
                Some(reg) if reg.owner == Some(self.id) && reg.solo => (reg.fetch_offset, reg.last_epoch),
                _ => return true,
            }
        };
        let config = &self.shared.config;
        let max = config.fetch_max_bytes.max(config.partition_fetch_bytes);
        let spec = FetchSpec::single(&key.0, key.1, offset, config.isolation, max).after_epoch(last_epoch);
        let client = self.shared.clients[self.id.index].clone();
        let sent = Instant::now();
        let result = tokio::select! {
            biased;
            () = self.shared.cancel.cancelled() => return false,
            r = client.fetch(self.id.broker, &spec, None) => r,
        };
        config.stats.fetch_latency.observe(sent.elapsed().as_secs_f64());
        match result {
            Err(e) => {
                self.failed(&e).await;
                false
            }
            Ok(parts) => {
                match parts.into_iter().find(|p| p.topic == key.0 && p.partition == key.1) {
                    Some(p) => self.handle(p, offset, true, false).await,
                    None => self.retry_later(key, "the broker did not answer for the partition"),
                }
                true
            }
        }
    }

    /// The broker answered the session's fetch sent at `sent`: every partition in the session is
    /// known as of then (an incremental answer leaves out only what did not change).
    fn answered(&self, sent: Instant) {
        if let Some(slot) = lock(&self.shared.table).loops.get_mut(&self.id) {
            slot.answered = Some(sent);
        }
    }

    /// The fetch failed as a whole: back off, start a new session, and let the route task find
    /// every member's leader again (the broker may be gone).
    async fn failed(&mut self, e: &ClientError) {
        let backoff = self.backoff.get_or_insert_with(|| Backoff::new(&self.shared.config.backoff));
        let delay = backoff.next_delay().unwrap_or(self.shared.config.backoff.max);
        if backoff.attempts() > 3 {
            warn!(broker = self.id.broker, fetcher = self.id.index, error = %crate::report::error_chain(e), ?delay, "source fetch failed; retrying");
        } else {
            debug!(broker = self.id.broker, fetcher = self.id.index, error = %crate::report::error_chain(e), ?delay, "source fetch failed; retrying");
        }
        self.session.reset();
        tokio::select! {
            () = self.shared.cancel.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        let mut table = lock(&self.shared.table);
        let members: Vec<Key> = table.loops.get(&self.id).map(|s| s.members.iter().cloned().collect()).unwrap_or_default();
        for key in &members {
            table.unroute(key);
        }
        drop(table);
        for key in &members {
            self.session.remove(&key.0, key.1);
        }
        self.shared.route.notify_one();
    }

    /// Puts `key` aside for a while after a partition error.
    fn retry_later(&self, key: &Key, why: &str) {
        let mut table = lock(&self.shared.table);
        let table = &mut *table;
        let Some(reg) = table.partitions.get_mut(key).filter(|r| r.owner == Some(self.id)) else { return };
        reg.errors = reg.errors.saturating_add(1);
        let delay = error_delay(&self.shared.config.backoff, reg.errors);
        reg.retry_at = Some(Instant::now() + delay);
        if reg.errors >= 4 && reg.errors.is_power_of_two() {
            warn!(topic = %key.0, partition = key.1, errors = reg.errors, ?delay, reason = why, "source partition cannot be fetched; retrying");
        } else {
            debug!(topic = %key.0, partition = key.1, errors = reg.errors, ?delay, reason = why, "source partition cannot be fetched; retrying");
        }
        if let Some(slot) = table.loops.get_mut(&self.id) {
            slot.dirty.insert(key.clone());
        }
    }

    /// Acts on one partition's answer, fetched at `offset` (`alone`: by a solo fetch; `full`: the
    /// answer was cut at its size cap).
    async fn handle(&mut self, p: FetchedPartition, offset: i64, alone: bool, full: bool) {
        let key = (p.topic.clone(), p.partition);
        let isolation = self.shared.config.isolation;
        let outcome = read(&p, offset, isolation);
        let unknown = matches!(outcome, Read::Unknown(_));
        let next = {
            let mut table = lock(&self.shared.table);
            let table = &mut *table;
            let Some(reg) = table.partitions.get_mut(&key) else { return };
            if reg.owner != Some(self.id) || reg.fetch_offset != offset {
                // Moved or re-registered while the fetch was out: not ours to hand over.
                return;
            }
            reg.status.set_source(p.high_watermark, p.last_stable_offset);
            let id = reg.id;
            let mark = |table: &mut super::Table| {
                if let Some(slot) = table.loops.get_mut(&self.id) {
                    slot.dirty.insert(key.clone());
                }
            };
            match outcome {
                Read::Data { records, next, last_epoch } => Next::Deliver(id, Message::Data { records, next, last_epoch }),
                Read::Diverged { epoch, end_offset } => {
                    let detail = diverged(reg.last_epoch, offset, epoch, end_offset);
                    warn!(topic = %key.0, partition = key.1, epoch, end_offset, offset, "the source log diverged from the copy");
                    table.end(&key, Fetched::Failed(ReplicationError::Divergence { offset: end_offset, detail }));
                    return;
                }
                Read::CaughtUp => {
                    reg.empty_at = None;
                    reg.errors = 0;
                    if alone {
                        reg.solo = false;
                        mark(table);
                    }
                    return;
                }
                Read::EmptyBelow { bound } => {
                    if !alone {
                        if !full {
                            reg.empty_at = Some((offset, bound));
                            reg.solo = true;
                            mark(table);
                        }
                        return;
                    }
                    if reg.empty_at != Some((offset, bound)) {
                        // Not the same twice yet (the source is moving): look again shortly.
                        reg.empty_at = Some((offset, bound));
                        reg.retry_at = Some(Instant::now() + SOLO_RETRY);
                        mark(table);
                        return;
                    }
                    // Nothing in [offset, bound), seen twice: the range is to be filled.
                    reg.empty_at = None;
                    reg.solo = false;
                    Next::Deliver(id, Message::Gap { to: bound })
                }
                Read::CutOff if !alone => {
                    reg.solo = true;
                    mark(table);
                    return;
                }
                Read::CutOff => {
                    reg.solo = false;
                    Next::Retry("a solo fetch returned part of a batch only".to_owned())
                }
                Read::OutOfRange => {
                    table.end(&key, Fetched::OutOfRange { offset });
                    return;
                }
                Read::Moved(code) | Read::Unknown(code) => {
                    debug!(topic = %key.0, partition = key.1, %code, "source partition moved or unknown; finding its leader");
                    reg.errors = reg.errors.saturating_add(1);
                    if reg.errors > 1 {
                        reg.retry_at = Some(Instant::now() + error_delay(&self.shared.config.backoff, reg.errors - 1));
                    }
                    if unknown {
                        table.check_topics.insert(key.0.clone());
                    }
                    table.unroute(&key);
                    Next::Route
                }
                Read::Error(code) => Next::Retry(code.to_string()),
                Read::Corrupt { offset: at, source } => {
                    table.end(&key, Fetched::Failed(ReplicationError::Plan(PlanError::Corrupt { offset: at, source })));
                    return;
                }
            }
        };
        let (registration, message) = match next {
            Next::Deliver(id, message) => (id, message),
            Next::Retry(why) => return self.retry_later(&key, &why),
            Next::Route => return self.shared.route.notify_one(),
        };
        // Data, or a confirmed gap: take memory from the budget (waiting if it is used up), then
        // hand over, if the partition is still ours at that offset.
        let bytes = match &message {
            Message::Data { records, .. } => records.len(),
            Message::Gap { .. } => 0,
        };
        let max_kib = u32::try_from(self.shared.config.buffer_bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).clamp(1, max_kib);
        let permit = match self.shared.budget.clone().try_acquire_many_owned(kib) {
            Ok(p) => Some(p),
            Err(_) => tokio::select! {
                () = self.shared.cancel.cancelled() => return,
                p = self.shared.budget.clone().acquire_many_owned(kib) => p.ok(),
            },
        };
        let mut refused = None;
        {
            let mut table = lock(&self.shared.table);
            let table = &mut *table;
            let limit = self.shared.config.partition_buffer_bytes;
            let Some(reg) = table.partitions.get_mut(&key).filter(|r| r.id == registration && r.owner == Some(self.id) && r.fetch_offset == offset) else {
                return;
            };
            let held = Held { shared: self.shared.clone(), key: key.clone(), id: registration, bytes, _permit: permit };
            let (fetched, next, epoch) = match message {
                Message::Data { records, next, last_epoch } => {
                    (Fetched::Data { offset, records, next, log_start_offset: p.log_start_offset, held }, next, last_epoch)
                }
                // Past a range without batches the last epoch says nothing of where the source's
                // log is now (the range may span epochs whose batches were all cleaned away): not
                // checked until the next batch.
                Message::Gap { to } => (Fetched::Gap { from: offset, to, log_start_offset: p.log_start_offset, held }, to, -1),
            };
            match reg.inbox.try_send(fetched) {
                Ok(()) => {
                    reg.held_bytes += bytes;
                    reg.held_messages += 1;
                    reg.fetch_offset = next;
                    reg.last_epoch = epoch;
                    reg.errors = 0;
                    reg.empty_at = None;
                    if alone {
                        reg.solo = false;
                    }
                    let pause = reg.holds_enough(limit);
                    reg.paused = pause;
                    if let Some(slot) = table.loops.get_mut(&self.id) {
                        if pause {
                            slot.paused.insert(key.clone());
                        } else {
                            slot.paused.remove(&key);
                        }
                        slot.dirty.insert(key.clone());
                    }
                }
                // The copier is gone (its registration ends with it), or, against the inbox's
                // accounting, full: nothing handed over, the offset stays, so nothing is skipped.
                Err(TrySendError::Closed(m) | TrySendError::Full(m)) => refused = Some(m),
            }
        }
        // Dropped outside the table's lock: a Held releases itself through it.
        drop(refused);
    }
}

/// What to do once a partition's answer is read (with the table's lock released).
enum Next {
    Deliver(u64, Message),
    Retry(String),
    Route,
}

/// What a delivery hands over, once memory is reserved.
enum Message {
    Data { records: bytes::Bytes, next: i64, last_epoch: i32 },
    Gap { to: i64 },
}

/// Why a partition fails when the source answers a fetch at `offset` (after a batch of leader epoch
/// `last_epoch`) with the diverging epoch `(epoch, end_offset)`.
fn diverged(last_epoch: i32, offset: i64, epoch: i32, end_offset: i64) -> String {
    let source = if epoch == last_epoch {
        format!("on the source that epoch ends at offset {end_offset}")
    } else {
        format!("the source has no epoch {last_epoch}: its epoch {epoch} before it ends at offset {end_offset}")
    };
    format!(
        "the source log no longer holds what was copied: the copy holds records of source leader epoch {last_epoch} up to offset {offset}, but {source} and other records follow (the source truncated records below its high watermark: an unclean leader election?)"
    )
}

/// The pause after the `errors`-th partition error in a row: the backoff schedule without jitter.
fn error_delay(backoff: &crate::client::BackoffConfig, errors: u32) -> Duration {
    let factor = backoff.multiplier.max(1.0).powi(i32::try_from(errors.saturating_sub(1)).unwrap_or(i32::MAX).min(30));
    backoff.initial.mul_f64(factor).min(backoff.max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_delays_grow_to_the_cap() {
        let config = crate::client::BackoffConfig { initial: Duration::from_millis(50), max: Duration::from_secs(2), ..Default::default() };
        assert_eq!(error_delay(&config, 1), Duration::from_millis(50));
        assert_eq!(error_delay(&config, 2), Duration::from_millis(100));
        assert_eq!(error_delay(&config, 20), Duration::from_secs(2));
        assert_eq!(error_delay(&config, u32::MAX), Duration::from_secs(2));
    }
}
