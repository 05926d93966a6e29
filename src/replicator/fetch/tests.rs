//! Unit tests of the fetch table's bookkeeping (the loops against real brokers are in
//! tests/kafka_it/scale.rs and the replicator tests).

use super::*;
use crate::client::{ClientConfig, Metadata};
use crate::replicator::status::StatusHandle;
use std::time::Duration;

fn shared(partition_buffer_bytes: usize) -> Arc<Shared> {
    let mut config = ReplicatorConfig::new("t");
    config.partition_buffer_bytes = partition_buffer_bytes;
    let control = Arc::new(Client::offline(ClientConfig::new("127.0.0.1:1"), Metadata::default()));
    Arc::new(Shared {
        clients: vec![control.clone()],
        control,
        budget: Arc::new(Semaphore::new(1024)),
        config,
        table: Mutex::new(Table::default()),
        route: Notify::new(),
        next_id: AtomicU64::new(1),
        cancel: CancellationToken::new(),
        tasks: TaskTracker::new(),
    })
}

const LOOP: LoopId = LoopId { broker: 1, index: 0 };

/// A registration owned by `LOOP`, as `register` + `assign` leave it, without starting a loop.
fn owned(shared: &Arc<Shared>, key: &Key, id: u64) -> mpsc::Receiver<Fetched> {
    let (tx, rx) = mpsc::channel(INBOX_MESSAGES + 1);
    let mut table = lock(&shared.table);
    table.partitions.insert(
        key.clone(),
        Registration {
            id,
            identity: Identity { topic_id: Uuid::nil(), cluster_id: String::new() },
            fetch_offset: 0,
            last_epoch: -1,
            inbox: tx,
            status: StatusHandle::detached(&key.0, key.1),
            owner: Some(LOOP),
            held_bytes: 0,
            held_messages: 0,
            paused: false,
            solo: false,
            empty_at: None,
            retry_at: None,
            errors: 0,
            heard: Instant::now(),
        },
    );
    table.loops.entry(LOOP).or_default().members.insert(key.clone());
    rx
}

fn held(shared: &Arc<Shared>, key: &Key, id: u64, bytes: usize) -> Held {
    let mut table = lock(&shared.table);
    let reg = table.partitions.get_mut(key).unwrap();
    reg.held_bytes += bytes;
    reg.held_messages += 1;
    Held { shared: shared.clone(), key: key.clone(), id, bytes, _permit: None }
}

/// A partition paused because its copier holds too much rejoins its loop's session (dirty, loop
/// woken) once its copier has written enough; not before.
#[tokio::test]
async fn written_data_resumes_a_paused_partition() {
    let shared = shared(100);
    let key = ("t".to_owned(), 0);
    let _rx = owned(&shared, &key, 7);
    let first = held(&shared, &key, 7, 60);
    let second = held(&shared, &key, 7, 60);
    let third = held(&shared, &key, 7, 60);
    {
        let mut table = lock(&shared.table);
        table.partitions.get_mut(&key).unwrap().paused = true;
        let slot = table.loops.get_mut(&LOOP).unwrap();
        slot.paused.insert(key.clone());
        slot.dirty.clear();
    }
    drop(first);
    {
        let table = lock(&shared.table);
        let reg = &table.partitions[&key];
        assert!(reg.paused, "120 of 100 bytes still held: {reg:?}");
    }
    drop(second);
    let notify = {
        let table = lock(&shared.table);
        let reg = &table.partitions[&key];
        assert_eq!((reg.held_bytes, reg.held_messages, reg.paused), (60, 1, false));
        let slot = &table.loops[&LOOP];
        assert!(slot.dirty.contains(&key) && !slot.paused.contains(&key));
        slot.notify.clone()
    };
    // The loop is woken (a permit is stored for its next wait).
    tokio::time::timeout(Duration::from_secs(1), notify.notified()).await.expect("loop woken");
    drop(third);
    assert_eq!(lock(&shared.table).partitions[&key].held_bytes, 0);
}

/// Memory a copier held for an earlier registration of the partition does not count against the
/// new one when released.
#[test]
fn a_late_release_of_an_old_registration_is_ignored() {
    let shared = shared(1000);
    let key = ("t".to_owned(), 3);
    let _old = owned(&shared, &key, 1);
    let stale = held(&shared, &key, 1, 50);
    let _new = owned(&shared, &key, 2);
    let fresh = held(&shared, &key, 2, 30);
    drop(stale);
    assert_eq!(lock(&shared.table).partitions[&key].held_bytes, 30);
    drop(fresh);
    assert_eq!(lock(&shared.table).partitions[&key].held_bytes, 0);
}

/// Dropping an inbox ends its registration (and only its own): the loop forgets the partition.
#[test]
fn a_dropped_inbox_leaves_its_loop() {
    let shared = shared(1000);
    let key = ("t".to_owned(), 1);
    let rx = owned(&shared, &key, 5);
    let stale = Inbox { rx, _guard: RegistrationGuard { shared: shared.clone(), key: key.clone(), id: 4 } };
    drop(stale);
    assert!(lock(&shared.table).partitions.contains_key(&key), "another registration's guard leaves it alone");
    let rx = owned(&shared, &key, 6);
    let inbox = Inbox { rx, _guard: RegistrationGuard { shared: shared.clone(), key: key.clone(), id: 6 } };
    assert_eq!(inbox.id(), 6);
    drop(inbox);
    let table = lock(&shared.table);
    assert!(!table.partitions.contains_key(&key));
    let slot = &table.loops[&LOOP];
    assert!(!slot.members.contains(&key) && slot.dirty.contains(&key));
}

/// Ending a registration sends its last message, even with the inbox's data slots full.
#[test]
fn the_last_message_always_fits() {
    let shared = shared(1000);
    let key = ("t".to_owned(), 2);
    let mut rx = owned(&shared, &key, 9);
    {
        let table = lock(&shared.table);
        let reg = &table.partitions[&key];
        for _ in 0..INBOX_MESSAGES {
            reg.inbox.try_send(Fetched::OutOfRange { offset: 0 }).unwrap();
        }
    }
    lock(&shared.table).end(&key, Fetched::Failed(ReplicationError::Internal { detail: "x".into() }));
    let mut last = None;
    while let Ok(m) = rx.try_recv() {
        last = Some(m);
    }
    assert!(matches!(last, Some(Fetched::Failed(_))));
    assert!(!lock(&shared.table).partitions.contains_key(&key));
}

#[test]
fn loop_indexes_spread_and_stay_in_range() {
    let mut shared = shared(1);
    Arc::get_mut(&mut shared).unwrap().clients = (0..3).map(|_| Arc::new(Client::offline(ClientConfig::new("x:1"), Metadata::default()))).collect();
    let mut seen = [0usize; 3];
    for p in 0..300 {
        let i = shared.index_of(&("topic".to_owned(), p));
        seen[i] += 1;
        assert_eq!(i, shared.index_of(&("topic".to_owned(), p)), "stable");
    }
    assert!(seen.iter().all(|n| *n > 50), "{seen:?}");
}

/// The staleness of the lag follows the loop's last answer while the partition is in a loop,
/// keeps the last answer it had once it leaves (a failed fetch sends it to routing), and starts
/// at its registration.
#[tokio::test(start_paused = true)]
async fn staleness_is_the_age_of_the_last_answer_for_the_longest_waiting_partition() {
    let shared = shared(1 << 20);
    let fetcher = SourceFetcher { shared: shared.clone() };
    assert_eq!(fetcher.staleness(), None, "nothing registered");
    let (a, b): (Key, Key) = (("t".into(), 0), ("t".into(), 1));
    let _ra = owned(&shared, &a, 1);
    let _rb = owned(&shared, &b, 2);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(fetcher.staleness(), Some(Duration::from_secs(2)), "no answer yet: since registration");

    lock(&shared.table).loops.get_mut(&LOOP).unwrap().answered = Some(Instant::now());
    tokio::time::advance(Duration::from_millis(300)).await;
    assert_eq!(fetcher.staleness(), Some(Duration::from_millis(300)));

    // The fetch fails: `a` goes to routing and keeps the answer it had; the loop still answers for `b`.
    lock(&shared.table).unroute(&a);
    tokio::time::advance(Duration::from_secs(5)).await;
    lock(&shared.table).loops.get_mut(&LOOP).unwrap().answered = Some(Instant::now());
    assert_eq!(fetcher.staleness(), Some(Duration::from_millis(5300)), "the unrouted partition waits longest");

    // Back in a loop that answers, nothing is stale.
    {
        let mut table = lock(&shared.table);
        table.partitions.get_mut(&a).unwrap().owner = Some(LOOP);
        table.unrouted.remove(&a);
        table.loops.get_mut(&LOOP).unwrap().members.insert(a.clone());
    }
    assert_eq!(fetcher.staleness(), Some(Duration::ZERO));
}
