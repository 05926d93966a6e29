//! The replicator at scale (issue 26): a mirror of more than a thousand partitions in several
//! topics, run by the mirror manager as the proxy runs it, from a 3-broker source whose leaders move
//! while it copies. Its partitions are fetched per source broker, so a record written to any idle
//! partition arrives.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_harness::{
    Cluster, ClusterSpec, Compression, ConsumeOptions, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, unique_name,
};
use kafka_mirror_proxy::client::{Client, IsolationLevel, OffsetSpec, TopicPartition};
use kafka_mirror_proxy::mirror::{MirrorManager, MirrorManagerConfig, PartitionState};

use crate::common::{client, poll_until};

/// How long the test waits for the whole mirror to catch up.
const CATCH_UP: Duration = Duration::from_secs(240);

fn record(topic_tag: &str, partition: i32, i: usize) -> ProducerRecord {
    ProducerRecord::to(partition).key(format!("{topic_tag}-{partition}-k{i}")).value(format!("{topic_tag}-{partition}-v{i}")).header("h", format!("{i}"))
}

/// Every partition's offsets on one side: end (both isolation levels) and start.
async fn offsets(c: &Client, partitions: &[TopicPartition]) -> BTreeMap<(TopicPartition, &'static str), i64> {
    let mut out = BTreeMap::new();
    for (name, spec, iso) in [
        ("latest", OffsetSpec::Latest, IsolationLevel::ReadUncommitted),
        ("stable", OffsetSpec::Latest, IsolationLevel::ReadCommitted),
        ("earliest", OffsetSpec::Earliest, IsolationLevel::ReadUncommitted),
    ] {
        for (tp, r) in c.list_offsets_bulk(partitions, spec, iso).await {
            out.insert((tp, name), r.unwrap_or(-1));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_partitions_copy_exactly_while_leaders_move_and_idle_partitions_stay_served() {
    crate::common::log_if_asked();
    let src = Cluster::start(ClusterSpec::new("source3-scale").brokers(3)).unwrap();
    let (dst, java) = (destination(), java_client());
    let base = unique_name("scale");
    // 4 topics of 240 partitions on one replica, and one of 48 on two (so its leaders can move
    // without a copy); 1,008 partitions.
    let plain: Vec<String> = (0..4).map(|i| format!("{base}.t{i}")).collect();
    let moved = format!("{base}.moved");
    for t in &plain {
        java.create_topic(&src.bootstrap(), t, 240, 1, &[]).unwrap();
    }
    java.create_topic(&src.bootstrap(), &moved, 48, 2, &[]).unwrap();
    let mut layout: Vec<(String, i32)> = plain.iter().map(|t| (t.clone(), 240)).collect();
    layout.push((moved.clone(), 48));
    let all: Vec<TopicPartition> = layout.iter().flat_map(|(t, n)| (0..*n).map(move |p| (t.clone(), p))).collect();
    assert!(all.len() >= 1000);

    let write = |round: usize| {
        for (n, t) in plain.iter().enumerate() {
            let opts = JavaProduceOptions { idempotent: n % 2 == 0, compression: Compression::Lz4, linger_ms: Some(5), ..Default::default() };
            let lines: Vec<ProduceLine> =
                (0..240).flat_map(|p| (0..3).map(move |i| (p, round * 10 + i))).map(|(p, i)| record(&format!("t{n}"), p, i).into()).collect();
            java.produce(&src.bootstrap(), t, &opts, &lines).unwrap();
        }
        // Committed and aborted transactions on the topic whose leaders move.
        let txn = JavaProduceOptions { transactional_id: Some(format!("{moved}-tx")), compression: Compression::Zstd, ..Default::default() };
        let mut lines = Vec::new();
        for (t, end) in [ProduceLine::Commit, ProduceLine::Abort, ProduceLine::Commit].into_iter().enumerate() {
            lines.push(ProduceLine::Begin);
            lines.extend((0..48).map(|p| ProduceLine::from(record("moved", p, round * 10 + t))));
            lines.push(end);
        }
        java.produce(&src.bootstrap(), &moved, &txn, &lines).unwrap();
    };
    write(0);

    let state_topic = unique_name("__scale_state");
    let config = MirrorManagerConfig { state_topic, stop_wait: Duration::from_secs(60), ..MirrorManagerConfig::default() };
    let manager = Arc::new(MirrorManager::start(Arc::new(client(&dst.bootstrap()).await), config).await.expect("manager starts"));
    let mirror = unique_name("scale-m");
    let props: BTreeMap<String, String> = [("bootstrap.servers".to_owned(), src.bootstrap())].into();
    manager.create_mirror(&mirror, props, false).await.expect("mirror created");
    let added = manager.add_topics(&mirror, &[format!("{}\\..*", regex::escape(&base))], &[], -1).await.expect("topics added");
    assert_eq!(added.len(), 5, "{added:?}");

    // Once copying has started, move leaders: the 48 two-replica partitions to their other replica
    // (preferred election), and one single-replica partition to another broker (a copy, then a new
    // leader); and write more meanwhile.
    let src_client = client(&src.bootstrap()).await;
    let dst_client = client(&dst.bootstrap()).await;
    let started = poll_until(CATCH_UP, || async {
        let ends = dst_client.list_offsets_bulk(&all, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
        (ends.values().filter(|r| r.as_ref().is_ok_and(|o| *o > 0)).count() > 50).then_some(())
    })
    .await;
    assert!(started.is_some(), "nothing copied");
    // The moves run while writes keep going (two more rounds to every partition).
    let described = java.describe_topic(&src.bootstrap(), &moved).unwrap();
    let t0 = java.describe_topic(&src.bootstrap(), &plain[0]).unwrap();
    let moves = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            write(1);
            write(2);
        });
        let mut moves = 0;
        for p in described.partitions.iter().filter(|p| p.partition % 4 == 0) {
            let mut replicas = p.replicas.clone();
            replicas.reverse();
            let leader = java.reassign(&src.bootstrap(), &moved, p.partition, &replicas).unwrap();
            assert_ne!(leader, p.leader, "{moved}-{} still led by {}", p.partition, p.leader);
            moves += 1;
        }
        let p0 = &t0.partitions[0];
        let elsewhere = src.node_ids().into_iter().find(|b| *b != p0.leader).unwrap();
        assert_eq!(java.reassign(&src.bootstrap(), &plain[0], 0, &[elsewhere]).unwrap(), elsewhere);
        writer.join().unwrap();
        moves + 1
    });
    assert!(moves >= 13);

    // Every partition MIRRORING, and every end offset (both isolation levels) and start offset equal.
    let want = offsets(&src_client, &all).await;
    let caught_up = poll_until(CATCH_UP, || async {
        let described = manager.describe(Some(std::slice::from_ref(&mirror))).await;
        let mirror = described.into_iter().next()?.1.ok()?;
        let states: Vec<&PartitionState> = mirror.topics.iter().flat_map(|t| t.partitions.iter().map(|p| &p.state)).collect();
        if let Some(PartitionState::Failed { reason }) = states.iter().find(|s| matches!(s, PartitionState::Failed { .. })) {
            panic!("a partition FAILED: {reason}");
        }
        if states.len() != all.len() || states.iter().any(|s| **s != PartitionState::Mirroring) {
            return None;
        }
        (offsets(&dst_client, &all).await == want).then_some(())
    })
    .await;
    if caught_up.is_none() {
        let got = offsets(&dst_client, &all).await;
        let differ: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(*v)).take(10).collect();
        panic!("the mirror did not catch up; first differences (source side): {differ:?}");
    }

    // Records, at both isolation levels, on a sample: the whole topic whose leaders moved, the
    // partition moved to another broker, and one more.
    for opts in [ConsumeOptions::read_committed(), ConsumeOptions::default()] {
        let expected = java.consume(&src.bootstrap(), &moved, &opts).unwrap();
        let got = java.consume(&dst.bootstrap(), &moved, &opts).unwrap();
        assert_eq!(got, expected, "{moved} {:?}", opts.isolation);
        for (t, p) in [(&plain[0], 0), (&plain[3], 117)] {
            let one = ConsumeOptions { partition: Some(p), ..opts.clone() };
            let expected = java.consume(&src.bootstrap(), t, &one).unwrap();
            assert!(!expected.is_empty());
            assert_eq!(java.consume(&dst.bootstrap(), t, &one).unwrap(), expected, "{t}-{p} {:?}", opts.isolation);
        }
    }

    // One record into each of 20 idle partitions: each arrives (the partitions sharing a fetch
    // session with a thousand others are served as soon as they have data).
    let mut picked: Vec<TopicPartition> = (0..20).map(|i| all[(i * 7919 + 13) % all.len()].clone()).collect();
    picked.sort();
    picked.dedup();
    let before = dst_client.list_offsets_bulk(&picked, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
    let mut by_topic: BTreeMap<&str, Vec<ProduceLine>> = BTreeMap::new();
    for (t, p) in &picked {
        by_topic.entry(t.as_str()).or_default().push(ProducerRecord::to(*p).key("idle").value(format!("idle-{t}-{p}")).into());
    }
    for (t, lines) in by_topic {
        java.produce(&src.bootstrap(), t, &JavaProduceOptions::default(), &lines).unwrap();
    }
    let arrived = poll_until(CATCH_UP, || async {
        let now = dst_client.list_offsets_bulk(&picked, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
        picked.iter().all(|tp| now.get(tp).and_then(|r| r.as_ref().ok()).copied() == before.get(tp).and_then(|r| r.as_ref().ok()).map(|o| o + 1)).then_some(())
    })
    .await;
    assert!(arrived.is_some(), "a record written to an idle partition did not arrive");
    let src_ends = src_client.list_offsets_bulk(&picked, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
    let dst_ends = dst_client.list_offsets_bulk(&picked, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
    assert_eq!(dst_ends.into_iter().map(|(k, v)| (k, v.ok())).collect::<Vec<_>>(), src_ends.into_iter().map(|(k, v)| (k, v.ok())).collect::<Vec<_>>());
    manager.shutdown().await;
}
