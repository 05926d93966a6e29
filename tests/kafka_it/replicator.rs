//! The replicator against real brokers: the destination must be identical to the source, record by
//! record, at both isolation levels, plus log start offset and high watermark (issue 4).

use std::sync::Arc;
use std::time::Duration;

use kafka_harness::{
    Cluster, Compression, ConsumeOptions, JavaClient, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client,
    librdkafka_consume, source, unique_name,
};
use kafka_mirror_proxy::client::{Client, IsolationLevel, OffsetSpec};
use kafka_mirror_proxy::replicator::CopyState;
use kafka_mirror_proxy::replicator::{Replicator, ReplicatorConfig};

use crate::common::{client, poll_until};

/// How long a test waits for the mirror to catch up.
const CATCH_UP: Duration = Duration::from_secs(90);

pub async fn start(src: &Cluster, dst: &Cluster, topics: &[String], isolation: IsolationLevel) -> Replicator {
    let mut config = ReplicatorConfig::new("test");
    config.isolation = isolation;
    config.fetch_max_wait = Duration::from_millis(100);
    let (s, d) = (Arc::new(client(&src.bootstrap()).await), Arc::new(client(&dst.bootstrap()).await));
    Replicator::start(s, d, topics, config).await
}

/// Waits until every partition of `topic` is MIRRORING with the destination at the source's end
/// (high watermark, or LSO under read_committed).
pub async fn wait_caught_up(replicator: &Replicator, src: &Client, topic: &str) {
    let committed = replicator.reads_committed();
    let iso = if committed { IsolationLevel::ReadCommitted } else { IsolationLevel::ReadUncommitted };
    let done = poll_until(CATCH_UP, || async {
        let statuses: Vec<_> = replicator.status().into_iter().filter(|s| s.topic == topic).collect();
        if statuses.is_empty() {
            return None;
        }
        for s in &statuses {
            if let CopyState::Failed { reason } = &s.state {
                panic!("{topic}-{} FAILED: {reason}", s.partition);
            }
            let end = src.list_offset(topic, s.partition, OffsetSpec::Latest, iso).await.ok()?;
            if s.state != CopyState::Mirroring || s.destination_offset < end {
                return None;
            }
        }
        Some(())
    })
    .await;
    assert!(done.is_some(), "mirror of {topic} did not catch up: {:?}", replicator.status());
}

/// Asserts the destination equals the source: records at both isolation levels (Java consumer and
/// librdkafka), log start offsets and end offsets of every partition.
pub async fn assert_identical(java: &JavaClient, src: &Cluster, dst: &Cluster, topic: &str) {
    for opts in [ConsumeOptions::read_committed(), ConsumeOptions::default()] {
        let expected = java.consume(&src.bootstrap(), topic, &opts).unwrap();
        let got = java.consume(&dst.bootstrap(), topic, &opts).unwrap();
        assert_eq!(got.len(), expected.len(), "{topic} {:?}: record count", opts.isolation);
        assert_eq!(got, expected, "{topic} {:?}", opts.isolation);
        let rdk = librdkafka_consume(&dst.bootstrap(), topic, &opts).unwrap();
        assert_eq!(rdk, expected, "{topic} {:?} (librdkafka)", opts.isolation);
    }
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let partitions: Vec<i32> = (0..s.refresh_metadata(&[topic]).await.unwrap().topics[topic].partitions.len() as i32).collect();
    for spec in [OffsetSpec::Earliest, OffsetSpec::Latest] {
        for iso in [IsolationLevel::ReadUncommitted, IsolationLevel::ReadCommitted] {
            let a = s.list_offsets(topic, &partitions, spec, iso).await.unwrap();
            let b = d.list_offsets(topic, &partitions, spec, iso).await.unwrap();
            assert_eq!(b, a, "{topic} {spec:?} {iso:?} offsets");
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn record(partition: i32, i: usize, tag: &str) -> ProducerRecord {
    // Recent timestamps: time retention runs on record timestamps, on both sides.
    let mut r = ProducerRecord::to(partition).timestamp(now_ms() - 600_000 + i as i64);
    if i % 6 != 2 {
        r = r.key(format!("{tag}-k{i}"));
    }
    if i % 8 != 5 {
        r = r.value(format!("{tag}-v{i}-{}", "y".repeat(i * 31 % 500)));
    }
    r.header("dup", "a").header("dup", format!("b{i}")).null_header("n")
}

/// Every codec, headers with repeated keys, null keys and values, a record close to
/// `max.message.bytes`, idempotent and plain producers; written before and while the mirror runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_every_codec_and_record_shape_under_live_writes() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("mirror-codecs");
    let partitions = Compression::ALL.len() as i32;
    java.create_topic(&src.bootstrap(), &topic, partitions, 1, &[]).unwrap();
    let produce = |round: usize| {
        for (p, codec) in Compression::ALL.into_iter().enumerate() {
            let options =
                JavaProduceOptions { compression: codec, idempotent: p % 2 == 0, linger_ms: Some(200), acks: Some("all".into()), ..Default::default() };
            let mut lines: Vec<ProduceLine> = (0..60).map(|i| record(p as i32, round * 100 + i, codec.as_str()).into()).collect();
            if round == 0 && codec == Compression::None {
                // Close to the default max.message.bytes (1 MiB) once batched.
                lines.push(ProducerRecord::to(p as i32).key("big").value(vec![b'z'; 1_000_000]).into());
            }
            java.produce(&src.bootstrap(), &topic, &options, &lines).unwrap();
        }
    };
    produce(0);
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    produce(1);
    let src_client = client(&src.bootstrap()).await;
    wait_caught_up(&replicator, &src_client, &topic).await;
    produce(2);
    wait_caught_up(&replicator, &src_client, &topic).await;
    assert_identical(java, src, dst, &topic).await;
    replicator.shutdown().await;
}

/// Committed and aborted transactions interleaved with non-transactional writes, from a Kafka 4.x
/// producer (transaction version 2) and a Kafka 3.9 producer (the older protocol), mirrored in both
/// isolation modes while the source keeps receiving writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_transactions_of_new_and_old_producers_in_both_isolation_modes() {
    let (src, dst, java) = (source(), destination(), java_client());
    let java39 = JavaClient::new(&kafka_harness::dist("3.9.1").unwrap()).unwrap();
    for isolation in [IsolationLevel::ReadCommitted, IsolationLevel::ReadUncommitted] {
        let topic = unique_name("mirror-txn");
        java.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
        let write = |round: usize| {
            for (n, client) in [java, &java39].into_iter().enumerate() {
                let txn = JavaProduceOptions { transactional_id: Some(format!("{topic}-t{n}")), ..Default::default() };
                let mut lines = Vec::new();
                for (t, end) in [ProduceLine::Commit, ProduceLine::Abort, ProduceLine::Commit].into_iter().enumerate() {
                    lines.push(ProduceLine::Begin);
                    for i in 0..4 {
                        lines.push(record((i % 2) as i32, round * 1000 + n * 100 + t * 10 + i, "txn").into());
                    }
                    lines.push(end);
                }
                client.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();
                let plain: Vec<ProduceLine> = (0..5).map(|i| record((i % 2) as i32, round * 1000 + 500 + i, "plain").into()).collect();
                client.produce(&src.bootstrap(), &topic, &JavaProduceOptions { idempotent: n == 0, ..Default::default() }, &plain).unwrap();
            }
        };
        write(0);
        let replicator = start(src, dst, std::slice::from_ref(&topic), isolation).await;
        write(1);
        let src_client = client(&src.bootstrap()).await;
        wait_caught_up(&replicator, &src_client, &topic).await;
        assert_identical(java, src, dst, &topic).await;
        let dst_client = client(&dst.bootstrap()).await;
        for p in 0..2 {
            let producers = dst_client.describe_producers(&topic, p).await.unwrap();
            assert!(producers.iter().all(|s| s.producer_id >= 1 << 62 && s.current_txn_start_offset == -1), "{producers:?}");
        }
        replicator.shutdown().await;
    }
}

/// A Kafka 3.9 source cluster (old-protocol transactions) mirrored into the 4.x destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_from_a_kafka_3_9_source() {
    let src = Cluster::start(kafka_harness::ClusterSpec::new("source39").version("3.9.1")).unwrap();
    let (dst, java) = (destination(), java_client());
    let java39 = JavaClient::new(&kafka_harness::dist("3.9.1").unwrap()).unwrap();
    let topic = unique_name("from39");
    java39.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
    let txn = JavaProduceOptions { transactional_id: Some(unique_name("t39")), compression: Compression::Zstd, ..Default::default() };
    let old = |i: usize| ProduceLine::from(record((i % 2) as i32, i, "old"));
    let lines = ProduceLine::commit_then_abort((0..6).map(old), (6..9).map(old));
    java39.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();
    let replicator = start(&src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    let src_client = client(&src.bootstrap()).await;
    wait_caught_up(&replicator, &src_client, &topic).await;
    assert_identical(java, &src, dst, &topic).await;
    replicator.shutdown().await;
}

/// True if any batch of the partition has offset holes, or batches are not contiguous: the cleaner ran.
async fn has_compaction_holes(c: &Client, topic: &str, partition: i32) -> bool {
    let batches = crate::common::fetch_all_batches(c, topic, partition).await;
    let mut expected = batches.first().map_or(0, |b| b.base_offset());
    for b in &batches {
        if b.base_offset() != expected || i64::from(b.records_count()) != b.next_offset() - b.base_offset() {
            return true;
        }
        expected = b.next_offset();
    }
    false
}

/// Creates a compacted topic of one partition on `src` and returns its name once the cleaner has
/// cleaned it (holes inside batches, removed batches, batches left empty by aborted transactions)
/// and the log has come to rest (three looks a second apart see the same batches).
pub async fn cleaned_compacted_topic(java: &JavaClient, src: &Cluster) -> String {
    let topic = unique_name("mirror-compacted");
    let configs = [
        ("cleanup.policy", "compact"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("min.compaction.lag.ms", "0"),
        ("delete.retention.ms", "100"),
    ];
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &configs).unwrap();
    let keyed = |i: usize, value: Option<String>| {
        let r = ProducerRecord::to(0).key(format!("key-{}", i % 7)).timestamp(now_ms() - 1000 + i as i64);
        match value {
            Some(v) => r.value(v),
            None => r,
        }
    };
    let idem = JavaProduceOptions { idempotent: true, compression: Compression::Lz4, linger_ms: Some(50), ..Default::default() };
    let mut lines: Vec<ProduceLine> = Vec::new();
    for i in 0..120 {
        lines.push(keyed(i, (i % 11 != 0).then(|| format!("value-{i}"))).into());
        if i % 10 == 9 {
            lines.push(ProduceLine::Flush);
        }
    }
    java.produce(&src.bootstrap(), &topic, &idem, &lines).unwrap();
    let txn = JavaProduceOptions { transactional_id: Some(unique_name("ctx")), ..Default::default() };
    let mut lines = vec![ProduceLine::Begin];
    lines.extend((200..206).map(|i| ProduceLine::from(keyed(i, Some(format!("aborted-{i}"))))));
    lines.extend([ProduceLine::Abort, ProduceLine::Begin]);
    lines.extend((300..304).map(|i| ProduceLine::from(keyed(i, Some(format!("committed-{i}"))))));
    lines.push(ProduceLine::Commit);
    java.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();

    // Each further write rolls the 100 ms segment, so the cleaner gets work; poll until it did it.
    let src_client = client(&src.bootstrap()).await;
    let mut n = 1000;
    let cleaned = poll_until(Duration::from_secs(90), || {
        n += 1;
        let (java, src, topic, src_client) = (java, src, &topic, &src_client);
        async move {
            java.produce(&src.bootstrap(), topic, &JavaProduceOptions::default(), &[keyed(n, Some("tick".into())).into()]).unwrap();
            has_compaction_holes(src_client, topic, 0).await.then_some(())
        }
    })
    .await;
    assert!(cleaned.is_some(), "the source cleaner did not run");
    // The cleaner may still be working through dirty segments; wait until three looks a second apart
    // see the same log, so source and mirror are compared at rest.
    let (mut last, mut same) = (Vec::new(), 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while same < 3 {
        assert!(tokio::time::Instant::now() < deadline, "the source log kept changing");
        let now = crate::common::payloads(&crate::common::fetch_all_batches(&src_client, &topic, 0).await);
        same = if now == last { same + 1 } else { 0 };
        last = now;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    topic
}

/// A compacted topic after the cleaner has run mirrors identically, offsets included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrors_a_compacted_topic_after_cleaning() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = cleaned_compacted_topic(java, src).await;
    let src_client = client(&src.bootstrap()).await;
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadUncommitted).await;
    wait_caught_up(&replicator, &src_client, &topic).await;
    assert_identical(java, src, dst, &topic).await;
    replicator.shutdown().await;
}

/// A log start offset moved by DeleteRecords (inside a batch) and by retention is reproduced, also
/// while mirroring.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_source_log_start_offset() {
    let (src, dst, java) = (source(), destination(), java_client());
    let deleted = unique_name("mirror-deleterecords");
    java.create_topic(&src.bootstrap(), &deleted, 1, 1, &[]).unwrap();
    let batch_of = |from: usize, n: usize, ts: i64| -> Vec<ProduceLine> {
        let mut l: Vec<ProduceLine> = (from..from + n).map(|i| ProducerRecord::to(0).key(format!("k{i}")).value("v").timestamp(ts).into()).collect();
        l.push(ProduceLine::Flush);
        l
    };
    let opts = JavaProduceOptions { linger_ms: Some(100), ..Default::default() };
    let mut lines = Vec::new();
    for b in 0..5 {
        lines.extend(batch_of(b * 10, 10, now_ms()));
    }
    java.produce(&src.bootstrap(), &deleted, &opts, &lines).unwrap();
    assert_eq!(java.delete_records(&src.bootstrap(), &deleted, 0, 23).unwrap(), 23);

    // Retention: old records in a rolled segment are deleted by the source within seconds.
    let retained = unique_name("mirror-retention");
    java.create_topic(&src.bootstrap(), &retained, 1, 1, &[("retention.ms", "300000"), ("segment.ms", "100")]).unwrap();
    java.produce(&src.bootstrap(), &retained, &opts, &batch_of(0, 30, now_ms() - 3_600_000)).unwrap();
    let src_client = client(&src.bootstrap()).await;
    let trimmed = poll_until(Duration::from_secs(60), || async {
        java.produce(&src.bootstrap(), &retained, &opts, &batch_of(100, 1, now_ms())).unwrap();
        let start = src_client.list_offset(&retained, 0, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await.unwrap();
        (start >= 30).then_some(start)
    })
    .await;
    assert!(trimmed.is_some(), "source retention did not delete the old segment");

    let topics = [deleted.clone(), retained.clone()];
    let replicator = start(src, dst, &topics, IsolationLevel::ReadCommitted).await;
    for t in &topics {
        wait_caught_up(&replicator, &src_client, t).await;
        assert_identical(java, src, dst, t).await;
    }
    // Moved again while mirroring.
    java.produce(&src.bootstrap(), &deleted, &opts, &batch_of(50, 10, now_ms())).unwrap();
    assert_eq!(java.delete_records(&src.bootstrap(), &deleted, 0, 41).unwrap(), 41);
    java.produce(&src.bootstrap(), &deleted, &opts, &batch_of(60, 5, now_ms())).unwrap();
    wait_caught_up(&replicator, &src_client, &deleted).await;
    assert_identical(java, src, dst, &deleted).await;
    replicator.shutdown().await;
}

/// Polls (up to [`CATCH_UP`]) until `topic`-`partition` is FAILED; its reason.
async fn failed_reason(replicator: &Replicator, topic: &str, partition: i32) -> Option<String> {
    poll_until(CATCH_UP, || async {
        replicator.status().into_iter().find(|s| s.topic == topic && s.partition == partition).and_then(|s| match s.state {
            CopyState::Failed { reason } => Some(reason),
            _ => None,
        })
    })
    .await
}

/// A record written straight to a destination partition fails that partition with a reason naming
/// the offset while the others keep mirroring; a deleted and re-created source topic fails too,
/// and so does one deleted for good (once the source has not known it for a while).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn divergence_and_recreated_source_topics_fail_their_partitions() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("mirror-diverge");
    let recreated = unique_name("mirror-recreate");
    let deleted = unique_name("mirror-deleted");
    java.create_topic(&src.bootstrap(), &topic, 3, 1, &[]).unwrap();
    java.create_topic(&src.bootstrap(), &recreated, 1, 1, &[]).unwrap();
    java.create_topic(&src.bootstrap(), &deleted, 1, 1, &[]).unwrap();
    let write = |t: &str, from: usize| {
        let lines: Vec<ProduceLine> = (from..from + 9).map(|i| record((i % 3) as i32 % if t == topic { 3 } else { 1 }, i, "d").into()).collect();
        java.produce(&src.bootstrap(), t, &JavaProduceOptions::default(), &lines).unwrap();
    };
    write(&topic, 0);
    write(&recreated, 0);
    write(&deleted, 0);
    let topics = [topic.clone(), recreated.clone(), deleted.clone()];
    let replicator = start(src, dst, &topics, IsolationLevel::ReadCommitted).await;
    let src_client = client(&src.bootstrap()).await;
    wait_caught_up(&replicator, &src_client, &topic).await;
    wait_caught_up(&replicator, &src_client, &recreated).await;
    wait_caught_up(&replicator, &src_client, &deleted).await;

    // Someone bypasses the proxy and writes to partition 1 of the mirror topic.
    let stray = java.produce(&dst.bootstrap(), &topic, &JavaProduceOptions::default(), &[ProducerRecord::to(1).value("stray").into()]).unwrap();
    let stray_offset = stray[0].1;
    write(&topic, 100);
    let failed = failed_reason(&replicator, &topic, 1).await.expect("partition 1 goes FAILED");
    assert!(failed.contains(&format!("offset {stray_offset}")), "reason names the offset: {failed}");
    // The other partitions keep mirroring.
    write(&topic, 200);
    let others = poll_until(CATCH_UP, || async {
        let mut ok = true;
        for s in replicator.status().into_iter().filter(|s| s.topic == topic && s.partition != 1) {
            let end = src_client.list_offset(&topic, s.partition, OffsetSpec::Latest, IsolationLevel::ReadCommitted).await.ok()?;
            ok &= s.state == CopyState::Mirroring && s.destination_offset == end;
        }
        ok.then_some(())
    })
    .await;
    assert!(others.is_some(), "partitions 0 and 2 stopped mirroring: {:?}", replicator.status());

    // The source topic is deleted and created again under the same name.
    java.delete_topic(&src.bootstrap(), &recreated).unwrap();
    let gone = poll_until(Duration::from_secs(30), || async {
        src_client.refresh_metadata(&[&recreated]).await.ok().filter(|m| !m.topics.contains_key(&recreated)).map(|_| ())
    })
    .await;
    assert!(gone.is_some());
    java.create_topic(&src.bootstrap(), &recreated, 1, 1, &[]).unwrap();
    write(&recreated, 300);
    let reason = failed_reason(&replicator, &recreated, 0).await.expect("the re-created topic's partition goes FAILED");
    assert!(reason.contains("deleted") || reason.contains("re-created"), "{reason}");

    java.delete_topic(&src.bootstrap(), &deleted).unwrap();
    let reason = failed_reason(&replicator, &deleted, 0).await.expect("the deleted topic's partition goes FAILED");
    assert!(reason.contains("was deleted"), "{reason}");
    assert!(
        replicator.status().iter().filter(|s| s.topic == topic && s.partition != 1).all(|s| s.state == CopyState::Mirroring),
        "the other topic's partitions keep mirroring: {:?}",
        replicator.status()
    );
    replicator.shutdown().await;
}

/// The `replicate` tool (tests/tools/replicate.rs), built with the tests as an example.
fn replicate_tool() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let tool = dir.join("examples").join("replicate");
    assert!(tool.exists(), "{} missing: `cargo test` builds it (`--all-targets` does not), or `cargo build --examples`", tool.display());
    tool
}

/// Starts the replicator as its own process; its stdout has one JSON status line per partition
/// every 200 ms.
fn spawn_replicate(src: &Cluster, dst: &Cluster, topic: &str) -> std::process::Child {
    std::process::Command::new(replicate_tool())
        .args(["--source", &src.bootstrap(), "--destination", &dst.bootstrap(), topic])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Waits until the destination's end offsets equal the source's for every partition of `topic`.
async fn wait_ends_equal(src: &Client, dst: &Client, topic: &str, partitions: i32) {
    let all: Vec<i32> = (0..partitions).collect();
    let done = poll_until(CATCH_UP, || async {
        let a = src.list_offsets(topic, &all, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.ok()?;
        let b = dst.list_offsets(topic, &all, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.ok()?;
        (a == b).then_some(())
    })
    .await;
    assert!(done.is_some(), "destination of {topic} did not reach the source's end offsets");
}

/// kill -9 of the replicator process mid-copy, then a restart: no gap, no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicator_killed_mid_copy_resumes_exactly() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("mirror-kill9");
    java.create_topic(&src.bootstrap(), &topic, 3, 1, &[]).unwrap();
    let write = |round: usize| {
        let idem = JavaProduceOptions { idempotent: round % 2 == 0, compression: Compression::Snappy, linger_ms: Some(5), ..Default::default() };
        let mut lines: Vec<ProduceLine> = Vec::new();
        for i in 0..3000 {
            lines.push(record((i % 3) as i32, round * 10_000 + i, "k9").into());
            if i % 50 == 49 {
                lines.push(ProduceLine::Flush);
            }
        }
        java.produce(&src.bootstrap(), &topic, &idem, &lines).unwrap();
    };
    write(0);
    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    for round in 1..4 {
        let mut child = spawn_replicate(src, dst, &topic);
        // Kill it once it has copied something but not everything.
        let target: i64 = src_client.list_offsets(&topic, &[0, 1, 2], OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap().values().sum();
        let midway = poll_until(CATCH_UP, || async {
            let copied: i64 =
                dst_client.list_offsets(&topic, &[0, 1, 2], OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.map(|m| m.values().sum()).unwrap_or(0);
            (copied > 0 && (copied < target || round == 3)).then_some(copied)
        })
        .await;
        assert!(midway.is_some(), "round {round}: nothing copied");
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        write(round);
    }
    let mut child = spawn_replicate(src, dst, &topic);
    wait_ends_equal(&src_client, &dst_client, &topic, 3).await;
    assert_identical(java, src, dst, &topic).await;
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The destination partition leader killed on a 3-broker destination mid-copy: no gap, no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destination_leader_killed_mid_copy() {
    let dst = Cluster::start(kafka_harness::ClusterSpec::new("dest3-kill").brokers(3).prop("transaction.partition.verification.enable", "false")).unwrap();
    let (src, java) = (source(), java_client());
    let topic = unique_name("mirror-leaderkill");
    java.create_topic(&src.bootstrap(), &topic, 2, 1, &[("min.insync.replicas", "1")]).unwrap();
    let write = |round: usize| {
        let txn = JavaProduceOptions { transactional_id: Some(format!("{topic}-tx")), ..Default::default() };
        let mut lines = Vec::new();
        for t in 0..20 {
            lines.push(ProduceLine::Begin);
            for i in 0..50 {
                lines.push(record((i % 2) as i32, round * 10_000 + t * 100 + i, "lk").into());
            }
            lines.push(if t % 5 == 4 { ProduceLine::Abort } else { ProduceLine::Commit });
        }
        java.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();
    };
    write(0);
    let replicator = start(src, &dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let copied_some = poll_until(CATCH_UP, || async { replicator.status().iter().any(|s| s.topic == topic && s.destination_offset > 0).then_some(()) }).await;
    assert!(copied_some.is_some(), "nothing copied: {:?}", replicator.status());
    let leader = dst_client.leader_of(&topic, 0).await.unwrap();
    dst.kill_broker(leader).unwrap();
    write(1);
    dst.start_broker(leader).unwrap();
    write(2);
    wait_caught_up(&replicator, &src_client, &topic).await;
    assert_identical(java, src, &dst, &topic).await;
    replicator.shutdown().await;
}

/// A LogAppendTime source: consumers of the mirror see the source's append times (as CreateTime,
/// the one documented difference, spec §3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_append_time_sources_keep_their_timestamps() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("mirror-lat");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[("message.timestamp.type", "LogAppendTime")]).unwrap();
    for codec in [Compression::None, Compression::Gzip] {
        let opts = JavaProduceOptions { compression: codec, linger_ms: Some(50), ..Default::default() };
        let lines: Vec<ProduceLine> = (0..20).map(|i| record(0, i, "lat").into()).collect();
        java.produce(&src.bootstrap(), &topic, &opts, &lines).unwrap();
    }
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    let src_client = client(&src.bootstrap()).await;
    wait_caught_up(&replicator, &src_client, &topic).await;
    let expected = java.consume(&src.bootstrap(), &topic, &ConsumeOptions::default()).unwrap();
    assert!(expected.iter().all(|r| r.timestamp_type == "LogAppendTime"));
    let got = java.consume(&dst.bootstrap(), &topic, &ConsumeOptions::default()).unwrap();
    assert!(got.iter().all(|r| r.timestamp_type == "CreateTime"));
    let strip = |v: Vec<kafka_harness::ConsumedRecord>| -> Vec<_> {
        v.into_iter().map(|r| kafka_harness::ConsumedRecord { timestamp_type: String::new(), ..r }).collect()
    };
    assert_eq!(strip(got), strip(expected));
    replicator.shutdown().await;
}

/// A long leading gap (source log start far above 0) is filled with filler records cut away by
/// DeleteRecords, not one marker per offset: the destination's log start and records equal the
/// source's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_leading_gap_is_filled_and_cut_away() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("mirror-leadinggap");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[]).unwrap();
    let opts = JavaProduceOptions { linger_ms: Some(20), batch_size: Some(16384), ..Default::default() };
    let lines: Vec<ProduceLine> = (0..3000).map(|i| ProducerRecord::to(0).key(format!("k{i}")).value("v").timestamp(now_ms()).into()).collect();
    java.produce(&src.bootstrap(), &topic, &opts, &lines).unwrap();
    assert_eq!(java.delete_records(&src.bootstrap(), &topic, 0, 2777).unwrap(), 2777);
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    let src_client = client(&src.bootstrap()).await;
    wait_caught_up(&replicator, &src_client, &topic).await;
    assert_identical(java, src, dst, &topic).await;
    // Markers would have left the mapped filler producer on the destination; records leave none.
    let dst_client = client(&dst.bootstrap()).await;
    let producers = dst_client.describe_producers(&topic, 0).await.unwrap();
    assert!(producers.iter().all(|p| p.producer_id != i64::MAX), "{producers:?}");
    replicator.shutdown().await;
}
