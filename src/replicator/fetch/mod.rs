//! Fetching from the source per broker, not per partition: every partition a replicator copies is
//! fetched by the fetch loop of its source leader (one incremental fetch session on a connection of
//! its own, `fetchers_per_broker` of them per broker), which hands each partition's batches to that
//! partition's copier.
//!
//! ```text
//!   PartitionCopier ── register(offset) ──► partitions (one shared table, one lock)
//!        ▲                                     │ leader known?        │ no / moved / topic unknown
//!        │ Inbox (bounded)                     ▼                      ▼
//!        │                           FetchLoop(broker, n)        route task: metadata refresh,
//!        └── Data / Gap / OutOfRange ──  one session Fetch for       identity checks (topic id,
//!            / Failed (+ Held memory)    all its partitions          cluster id), assigns leaders
//! ```
//!
//! Why: a broker answers one connection's requests strictly in order, so long polls of partitions
//! sharing a connection wait behind each other (a partition served every N × max_wait). One fetch
//! per broker asks about all of them at once and the broker answers as soon as any has data.
//!
//! The table is the one truth about each partition's fetching: its registration (a copier's, with
//! an id so that a late event of an old registration is ignored), the offset of its next fetch, the
//! loop that owns it, and the fetched data its copier holds. Loops learn of changes through their
//! `dirty` set (applied to their session before each request, so a fetch only names what changed),
//! and never deliver data for a partition they no longer own or at an offset other than the one
//! fetched: a partition moved between loops resumes at exactly the offset where the old loop would
//! have, so nothing is lost or repeated.
//!
//! Backpressure: a partition whose copier holds `partition_buffer_bytes` (or a full inbox) leaves
//! its loop's session until its copier has written some; memory across partitions is capped by the
//! replicator's budget (`buffer_bytes`), and while any partition of a loop waits on its copier, that
//! loop polls briefly so the partition is back within milliseconds of being ready.
//!
//! Owns: the source connections used for fetching, fetch sessions, leader routing of fetches.
//! Does not own: what is written (the copier, `partition.rs`), nor the destination.

mod read;
mod route;
mod session_loop;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::config::ReplicatorConfig;
use super::error::ReplicationError;
use super::status::StatusHandle;
use crate::client::Client;

/// Messages a partition's inbox holds at most (data and gaps; one more slot stays free for the
/// message that ends a registration).
const INBOX_MESSAGES: usize = 4;

/// A partition: topic name and index.
pub(crate) type Key = (String, i32);

/// What the fetch side hands to a partition's copier.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// Complete batches fetched at `offset` (the first may start before it).
    Data {
        /// The fetch offset that returned them: where the previous message ended.
        offset: i64,
        /// Raw complete batches.
        records: Bytes,
        /// The offset after them: where the next message starts.
        next: i64,
        /// Source log start offset.
        log_start_offset: i64,
        /// Memory held until the batches are written.
        held: Held,
    },
    /// `[from, to)` holds no batch at the source (compacted away): fill it.
    Gap {
        /// First missing offset (where the previous message ended).
        from: i64,
        /// Offset after the gap.
        to: i64,
        /// Source log start offset.
        log_start_offset: i64,
        /// Counts against the inbox like data.
        held: Held,
    },
    /// The fetch offset is outside the source log (retention, DeleteRecords, or a truncated or
    /// replaced source). Ends the registration: the copier decides and registers again.
    OutOfRange {
        /// The offset fetched.
        offset: i64,
    },
    /// The partition cannot go on (the source topic was deleted or re-created, the source cluster
    /// changed, a batch is corrupt). Ends the registration.
    Failed(ReplicationError),
}

/// Who the partition's source is, as the mirror recorded it at setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// Source topic id (nil if the source does not have ids).
    pub(crate) topic_id: Uuid,
    /// Source cluster id (empty if unknown).
    pub(crate) cluster_id: String,
}

/// A fetch loop: one source broker, one of its `fetchers_per_broker` sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LoopId {
    pub(crate) broker: i32,
    pub(crate) index: usize,
}

/// One registered partition.
#[derive(Debug)]
struct Registration {
    id: u64,
    identity: Identity,
    /// The offset the next fetch asks for: where the last message handed over ended.
    fetch_offset: i64,
    /// The source leader epoch of the last batch handed over (-1: none yet in this registration).
    /// Every fetch names it, and the broker answers with a diverging epoch if its log no longer
    /// continues that batch (truncated below `fetch_offset` and rewritten, as an unclean leader
    /// election does): the copy then holds records the source lost, and the partition fails.
    last_epoch: i32,
    inbox: mpsc::Sender<Fetched>,
    status: StatusHandle,
    owner: Option<LoopId>,
    /// Bytes and messages handed over and not yet released by the copier.
    held_bytes: usize,
    held_messages: usize,
    /// Left out of its loop's session because its copier holds too much.
    paused: bool,
    /// To be fetched alone (a cut-off batch, or an empty answer to confirm) before it rejoins the
    /// session.
    solo: bool,
    /// The `(offset, bound)` of an empty answer below the source's end, seen once: seen again
    /// alone, the range is filled.
    empty_at: Option<(i64, i64)>,
    /// Not fetched before this (after a partition error), and how many such errors in a row.
    retry_at: Option<Instant>,
    errors: u32,
    /// When the source last answered for it while it had no loop or another one (its
    /// registration, or its last loop's last answer when it left): see [`SourceFetcher::staleness`].
    heard: Instant,
}

impl Registration {
    /// Whether its copier holds as much as a partition may (`limit` bytes, or a full inbox): the
    /// partition pauses when a hand-over reaches this and resumes when a release leaves it.
    fn holds_enough(&self, limit: usize) -> bool {
        self.held_messages >= INBOX_MESSAGES || self.held_bytes >= limit
    }
}

/// What a loop needs to know from the table.
#[derive(Debug, Default)]
struct LoopSlot {
    /// Partitions whose fetching changed since the loop last looked.
    dirty: HashSet<Key>,
    /// Partitions owned now.
    members: HashSet<Key>,
    /// Members paused for backpressure.
    paused: HashSet<Key>,
    /// Members waiting out a partition error, by when.
    waiting: BTreeSet<(Instant, Key)>,
    notify: Arc<Notify>,
    /// When the loop's broker last answered a fetch (none yet: `None`).
    answered: Option<Instant>,
}

#[derive(Debug, Default)]
struct Table {
    partitions: HashMap<Key, Registration>,
    loops: HashMap<LoopId, LoopSlot>,
    /// Partitions without a loop: leader unknown, moved, or their topic to be checked.
    unrouted: BTreeSet<Key>,
    /// Topics whose identity the route task checks at its next refresh.
    check_topics: BTreeSet<String>,
    /// Topics the source's metadata did not know, since when (see `route`).
    missing: HashMap<String, Instant>,
}

/// Shared by the fetch side's tasks and handles.
#[derive(Debug)]
struct Shared {
    /// Metadata and leader lookups (the replicator's source client).
    control: Arc<Client>,
    /// Fetch connections: client `n` carries loop `n` of every broker.
    clients: Vec<Arc<Client>>,
    config: ReplicatorConfig,
    /// Memory for fetched, unwritten data (permits are KiB).
    budget: Arc<Semaphore>,
    table: Mutex<Table>,
    /// Wakes the route task.
    route: Notify,
    next_id: AtomicU64,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

fn lock(m: &Mutex<Table>) -> MutexGuard<'_, Table> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The fetch side of one replicator.
#[derive(Debug, Clone)]
pub(crate) struct SourceFetcher {
    shared: Arc<Shared>,
}

impl SourceFetcher {
    /// A fetcher reading `control`'s cluster, with `config.fetchers_per_broker` connections per
    /// broker of its own; its tasks run on `tasks` until `cancel`.
    pub(crate) fn new(control: Arc<Client>, config: ReplicatorConfig, budget: Arc<Semaphore>, tasks: TaskTracker, cancel: CancellationToken) -> Self {
        let clients = (0..config.fetchers_per_broker.max(1)).map(|n| Arc::new(control.sibling(&config.fetch_client_id_of(n)))).collect();
        let shared = Arc::new(Shared {
            control,
            clients,
            config,
            budget,
            table: Mutex::new(Table::default()),
            route: Notify::new(),
            next_id: AtomicU64::new(1),
            cancel,
            tasks,
        });
        shared.tasks.spawn(route::run(shared.clone()));
        Self { shared }
    }

    /// Starts fetching `key` from `offset` on, for a copier reading the returned inbox. A
    /// registration of the same partition still open is replaced.
    pub(crate) fn register(&self, key: &Key, identity: Identity, offset: i64, status: StatusHandle) -> Inbox {
        let (tx, rx) = mpsc::channel(INBOX_MESSAGES + 1);
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let registration = Registration {
            id,
            identity,
            fetch_offset: offset,
            last_epoch: -1,
            inbox: tx,
            status,
            owner: None,
            held_bytes: 0,
            held_messages: 0,
            paused: false,
            solo: false,
            empty_at: None,
            retry_at: None,
            errors: 0,
            heard: Instant::now(),
        };
        {
            let mut table = lock(&self.shared.table);
            if let Some(old) = table.partitions.remove(key) {
                table.leave_loop(key, old.owner);
            }
            table.partitions.insert(key.clone(), registration);
            let leader = self.shared.control.cached_leader_of(&key.0, key.1);
            match leader {
                Some(broker) => self.shared.assign(&mut table, key, broker),
                None => {
                    table.unrouted.insert(key.clone());
                }
            }
        }
        self.shared.route.notify_one();
        Inbox { rx, _guard: RegistrationGuard { shared: self.shared.clone(), key: key.clone(), id } }
    }

    /// Partitions registered, and how many of them have a loop (for tests and metrics).
    pub(crate) fn counts(&self) -> (usize, usize) {
        let table = lock(&self.shared.table);
        (table.partitions.len(), table.partitions.values().filter(|r| r.owner.is_some()).count())
    }

    /// How long ago the source last answered for the partition that has waited longest (`None`
    /// with nothing registered). A partition's lag is only known as of then: an incremental
    /// fetch answer covers every partition of its session, so a reachable source keeps this
    /// under the fetch's max wait plus a round trip; while the source is cut off or a partition
    /// waits for a leader it grows, and the lag figures say nothing of what the source got since.
    /// O(partitions), for a metrics scrape.
    pub(crate) fn staleness(&self) -> Option<std::time::Duration> {
        let table = lock(&self.shared.table);
        let now = Instant::now();
        table
            .partitions
            .values()
            .map(|reg| {
                let answered = reg.owner.and_then(|o| table.loops.get(&o)).and_then(|slot| slot.answered);
                now.saturating_duration_since(answered.map_or(reg.heard, |a| a.max(reg.heard)))
            })
            .max()
    }
}

impl Shared {
    /// The loop index of `key` among a broker's `fetchers_per_broker` loops.
    fn index_of(&self, key: &Key) -> usize {
        let n = self.clients.len();
        if n <= 1 {
            return 0;
        }
        let hash = key.0.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        (hash.wrapping_add(key.1 as u64) % n as u64) as usize
    }

    /// Makes `broker`'s loop for `key` own it (starting that loop if it does not run yet).
    fn assign(self: &Arc<Self>, table: &mut Table, key: &Key, broker: i32) {
        let id = LoopId { broker, index: self.index_of(key) };
        let Some(reg) = table.partitions.get_mut(key) else { return };
        let before = reg.owner.replace(id);
        reg.paused = false;
        table.unrouted.remove(key);
        table.leave_loop(key, before.filter(|b| *b != id));
        let new = !table.loops.contains_key(&id);
        let slot = table.loops.entry(id).or_default();
        slot.members.insert(key.clone());
        slot.dirty.insert(key.clone());
        slot.notify.notify_one();
        if new {
            let notify = slot.notify.clone();
            self.tasks.spawn(session_loop::run(self.clone(), id, notify));
        }
    }
}

impl Table {
    /// Takes `key` out of loop `owner` (its session forgets it at the next request).
    fn leave_loop(&mut self, key: &Key, owner: Option<LoopId>) {
        let Some(owner) = owner else { return };
        if let Some(slot) = self.loops.get_mut(&owner) {
            if let (Some(reg), Some(answered)) = (self.partitions.get_mut(key), slot.answered) {
                reg.heard = reg.heard.max(answered);
            }
            slot.members.remove(key);
            slot.paused.remove(key);
            slot.waiting.retain(|(_, k)| k != key);
            slot.dirty.insert(key.clone());
            slot.notify.notify_one();
        }
    }

    /// Ends `key`'s registration with a last message to its copier (the inbox keeps a slot free
    /// for it).
    fn end(&mut self, key: &Key, last: Fetched) {
        if let Some(reg) = self.partitions.remove(key) {
            self.unrouted.remove(key);
            self.leave_loop(key, reg.owner);
            let _ = reg.inbox.try_send(last);
        }
    }

    /// Sends `key` to the route task (its leader to be found again).
    fn unroute(&mut self, key: &Key) {
        if let Some(reg) = self.partitions.get_mut(key) {
            let owner = reg.owner.take();
            reg.paused = false;
            self.leave_loop(key, owner);
            self.unrouted.insert(key.clone());
        }
    }
}

/// Fetched data (or a gap) a copier holds: counted against its partition and the replicator's
/// budget until dropped (written).
#[derive(Debug)]
pub(crate) struct Held {
    shared: Arc<Shared>,
    key: Key,
    id: u64,
    bytes: usize,
    _permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut table = lock(&self.shared.table);
        let limit = self.shared.config.partition_buffer_bytes;
        let Some(reg) = table.partitions.get_mut(&self.key).filter(|r| r.id == self.id) else { return };
        reg.held_bytes = reg.held_bytes.saturating_sub(self.bytes);
        reg.held_messages = reg.held_messages.saturating_sub(1);
        if reg.paused && !reg.holds_enough(limit) {
            reg.paused = false;
            if let Some(slot) = reg.owner.and_then(|o| table.loops.get_mut(&o)) {
                slot.paused.remove(&self.key);
                slot.dirty.insert(self.key.clone());
                slot.notify.notify_one();
            }
        }
    }
}

/// A copier's end of its registration: dropped, the partition is no longer fetched.
#[derive(Debug)]
pub(crate) struct Inbox {
    rx: mpsc::Receiver<Fetched>,
    _guard: RegistrationGuard,
}

impl Inbox {
    /// The next message; `None` once the fetch side has stopped (the replicator shuts down).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn recv(&mut self) -> Option<Fetched> {
        self.rx.recv().await
    }

    /// The registration's id (tests).
    #[cfg(test)]
    fn id(&self) -> u64 {
        self._guard.id
    }
}

#[derive(Debug)]
struct RegistrationGuard {
    shared: Arc<Shared>,
    key: Key,
    id: u64,
}

impl Drop for RegistrationGuard {
    fn drop(&mut self) {
        let mut table = lock(&self.shared.table);
        if table.partitions.get(&self.key).is_some_and(|r| r.id == self.id) {
            let reg = table.partitions.remove(&self.key);
            table.unrouted.remove(&self.key);
            table.leave_loop(&self.key, reg.and_then(|r| r.owner));
        }
    }
}

#[cfg(test)]
mod tests;
