//! The client against real brokers: raw batches copied between clusters, transactions replayed with
//! WriteTxnMarkers, DeleteRecords and ListOffsets, admin calls, and typed errors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_harness::{
    Compression, ConsumeOptions, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, librdkafka_consume, source,
    unique_name,
};
use kafka_mirror_proxy::client::{
    AlterConfigOp, ClientError, ConfigResource, ConnectionError, FetchSpec, IsolationLevel, NewTopic, OffsetSpec, ProduceOptions, TxnMarker,
};
use kafka_mirror_proxy::protocol::batch::{BatchBuilder, Compression as BatchCompression, Record};
use kafka_mirror_proxy::protocol::{ErrorCode, FrameError};

use crate::common::{PID_MAPPING_BIT, client, copy_batches, fetch_all_batches, payloads};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Records with every shape the format allows: keys and null keys, values and null values, headers
/// with repeated keys and null values, explicit timestamps.
fn varied_records(partition: i32, n: usize, tag: &str) -> Vec<ProduceLine> {
    let base_ts = now_ms() - 3_600_000;
    let mut lines = Vec::new();
    for i in 0..n {
        let mut r = ProducerRecord::to(partition).timestamp(base_ts + i as i64 * 7);
        if i % 5 != 1 {
            r = r.key(format!("key-{tag}-{i}"));
        }
        if i % 7 != 3 {
            r = r.value(format!("value-{tag}-{i}-{}", "x".repeat(i * 13 % 200)));
        }
        r = r.header("h", format!("first-{i}")).header("h", format!("second-{i}"));
        if i % 4 == 0 {
            r = r.null_header("nothing");
        }
        lines.push(r.into());
        if i % 9 == 8 {
            lines.push(ProduceLine::Flush);
        }
    }
    lines
}

/// A batch the Java producer wrote (each codec, with headers) is fetched raw, its producer id and
/// sequence patched, produced into a second cluster, and read back by librdkafka and the Java
/// consumer with the same keys, values, headers, timestamps and offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_batches_of_every_codec_copy_exactly_between_clusters() {
    let (src, dst) = (source(), destination());
    let java = java_client();
    let topic = unique_name("codecs");
    let partitions = Compression::ALL.len() as i32;
    java.create_topic(&src.bootstrap(), &topic, partitions, 1, &[]).unwrap();
    java.create_topic(&dst.bootstrap(), &topic, partitions, 1, &[("message.timestamp.after.max.ms", "9223372036854775807")]).unwrap();
    for (p, codec) in Compression::ALL.into_iter().enumerate() {
        let options = JavaProduceOptions { compression: codec, idempotent: true, linger_ms: Some(1000), ..Default::default() };
        java.produce(&src.bootstrap(), &topic, &options, &varied_records(p as i32, 40, codec.as_str())).unwrap();
    }

    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    for p in 0..partitions {
        let batches = fetch_all_batches(&src_client, &topic, p).await;
        assert!(batches.len() >= 4, "partition {p}: expected several batches, got {}", batches.len());
        assert!(batches.iter().all(|b| b.has_producer_id()), "idempotent producer batches carry a producer id");
        copy_batches(&dst_client, &topic, p, &batches, "unused").await;

        // Same batch boundaries and the very same record bytes; producer ids mapped.
        let copied = fetch_all_batches(&dst_client, &topic, p).await;
        assert_eq!(payloads(&copied), payloads(&batches), "partition {p}");
        for (c, s) in copied.iter().zip(&batches) {
            assert_eq!(c.producer_id(), s.producer_id() | PID_MAPPING_BIT);
            assert_eq!(c.compression(), s.compression());
            assert_eq!((c.base_timestamp(), c.max_timestamp()), (s.base_timestamp(), s.max_timestamp()));
        }
    }

    let expected = java.consume(&src.bootstrap(), &topic, &ConsumeOptions::default()).unwrap();
    assert_eq!(expected.len(), 40 * partitions as usize);
    assert!(expected.iter().any(|r| r.key.is_none()) && expected.iter().any(|r| r.value.is_none()));
    assert!(expected.iter().all(|r| r.headers.iter().filter(|(k, _)| k == "h").count() == 2));
    assert_eq!(java.consume(&dst.bootstrap(), &topic, &ConsumeOptions::default()).unwrap(), expected, "Java consumer");
    assert_eq!(librdkafka_consume(&dst.bootstrap(), &topic, &ConsumeOptions::default()).unwrap(), expected, "librdkafka");
}

/// Transactional data in Produce v11 plus WriteTxnMarkers into a broker with verification off: a
/// read_committed consumer sees exactly the source's committed records; DescribeProducers shows the
/// mapped producer; an ABORT marker of a producer with no open transaction takes one invisible offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_replay_with_write_txn_markers() {
    let (src, dst) = (source(), destination());
    let java = java_client();
    let topic = unique_name("txn");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[]).unwrap();
    java.create_topic(&dst.bootstrap(), &topic, 1, 1, &[("message.timestamp.after.max.ms", "9223372036854775807")]).unwrap();

    let record = |i: usize| -> ProduceLine { ProducerRecord::to(0).key(format!("k{i}")).value(format!("v{i}")).header("n", i.to_string()).into() };
    let txn = JavaProduceOptions { transactional_id: Some(unique_name("txn-src")), ..Default::default() };
    let plain = JavaProduceOptions { idempotent: true, ..Default::default() };
    let lines = ProduceLine::commit_then_abort((0..3).map(record), (3..5).map(record));
    java.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();
    java.produce(&src.bootstrap(), &topic, &plain, &(5..7).map(record).collect::<Vec<_>>()).unwrap();
    let mut lines = vec![ProduceLine::Begin];
    lines.extend((7..10).map(record));
    lines.push(ProduceLine::Commit);
    java.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();

    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let batches = fetch_all_batches(&src_client, &topic, 0).await;
    assert_eq!(batches.iter().filter(|b| b.is_control()).count(), 3, "commit, abort, commit markers");
    let txn_pid = batches.iter().find(|b| b.is_transactional()).unwrap().producer_id();
    copy_batches(&dst_client, &topic, 0, &batches, "kmp-test-mirror").await;

    for opts in [ConsumeOptions::read_committed(), ConsumeOptions::default()] {
        let expected = java.consume(&src.bootstrap(), &topic, &opts).unwrap();
        assert_eq!(java.consume(&dst.bootstrap(), &topic, &opts).unwrap(), expected, "{:?}", opts.isolation);
        assert_eq!(librdkafka_consume(&dst.bootstrap(), &topic, &opts).unwrap(), expected, "{:?}", opts.isolation);
    }
    let committed = java.consume(&dst.bootstrap(), &topic, &ConsumeOptions::read_committed()).unwrap();
    let keys: Vec<_> = committed.iter().map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap()).collect();
    assert_eq!(keys, ["k0", "k1", "k2", "k5", "k6", "k7", "k8", "k9"]);

    let producers = dst_client.describe_producers(&topic, 0).await.unwrap();
    let mapped = producers.iter().find(|p| p.producer_id == txn_pid | PID_MAPPING_BIT).expect("mapped producer listed");
    assert_eq!(mapped.current_txn_start_offset, -1, "no transaction left open");
    assert!(producers.iter().all(|p| p.producer_id >= PID_MAPPING_BIT), "only mapped producer ids: {producers:?}");

    // An ABORT marker of a producer that never wrote: one offset, invisible at both isolation levels.
    let before = dst_client.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let uncommitted_before = java.consume(&dst.bootstrap(), &topic, &ConsumeOptions::default()).unwrap();
    dst_client
        .write_txn_markers(&TxnMarker {
            producer_id: i64::MAX,
            producer_epoch: 0,
            commit: false,
            coordinator_epoch: 0,
            topic: topic.clone(),
            partitions: vec![0],
        })
        .await
        .unwrap();
    let after = dst_client.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    assert_eq!(after, before + 1);
    assert_eq!(dst_client.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadCommitted).await.unwrap(), after, "LSO unaffected");
    assert_eq!(java.consume(&dst.bootstrap(), &topic, &ConsumeOptions::default()).unwrap(), uncommitted_before);
    assert_eq!(java.consume(&dst.bootstrap(), &topic, &ConsumeOptions::read_committed()).unwrap(), committed);
}

/// DeleteRecords moves the log start offset; ListOffsets reports earliest, latest and the LSO (held
/// back by an open transaction until its marker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_and_list_offsets() {
    let dst = destination();
    let topic = unique_name("offsets");
    let dst_client = client(&dst.bootstrap()).await;
    let created = dst_client
        .create_topics(&[NewTopic { name: topic.clone(), num_partitions: 1, replication_factor: 1, configs: vec![] }], Duration::from_secs(30))
        .await
        .unwrap();
    assert!(created[0].is_ok(), "{:?}", created[0]);
    let again = dst_client
        .create_topics(&[NewTopic { name: topic.clone(), num_partitions: 1, replication_factor: 1, configs: vec![] }], Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(again[0].as_ref().unwrap_err().code(), Some(ErrorCode::TopicAlreadyExists));
    crate::common::partition_ready(&dst_client, &topic, 0).await;

    let records = |n: usize| (0..n).map(|i| Record { key: Some(format!("k{i}").into()), value: Some("v".into()), ..Record::default() });
    let plain = BatchBuilder::new().with_base_timestamp(now_ms()).with_records(records(10)).build().unwrap();
    let produced = dst_client.produce(&topic, 0, plain, &ProduceOptions::default()).await.unwrap();
    assert_eq!(produced.base_offset, 0);

    let low = dst_client.delete_records(&topic, 0, 4, Duration::from_secs(30)).await.unwrap();
    assert_eq!(low, 4);
    let offset = |spec, iso| {
        let c = &dst_client;
        let t = topic.clone();
        async move { c.list_offset(&t, 0, spec, iso).await.unwrap() }
    };
    assert_eq!(offset(OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await, 4);
    assert_eq!(offset(OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await, 10);
    assert_eq!(offset(OffsetSpec::Latest, IsolationLevel::ReadCommitted).await, 10);

    // An open transaction holds the LSO at its first offset until the marker.
    let pid = PID_MAPPING_BIT | 77;
    let txn_batch = BatchBuilder::new()
        .with_producer_id(pid)
        .with_producer_epoch(3)
        .with_base_sequence(0)
        .with_transactional(true)
        .with_base_timestamp(now_ms())
        .with_records(records(3))
        .build()
        .unwrap();
    let options = ProduceOptions { transactional_id: Some("kmp-test-mirror".into()), version: Some(11), ..ProduceOptions::default() };
    assert_eq!(dst_client.produce(&topic, 0, txn_batch, &options).await.unwrap().base_offset, 10);
    assert_eq!(offset(OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await, 13);
    assert_eq!(offset(OffsetSpec::Latest, IsolationLevel::ReadCommitted).await, 10);
    let open = dst_client.describe_producers(&topic, 0).await.unwrap();
    assert_eq!(open.iter().find(|p| p.producer_id == pid).map(|p| (p.producer_epoch, p.last_sequence, p.current_txn_start_offset)), Some((3, 2, 10)));
    dst_client
        .write_txn_markers(&TxnMarker { producer_id: pid, producer_epoch: 3, commit: true, coordinator_epoch: 5, topic: topic.clone(), partitions: vec![0] })
        .await
        .unwrap();
    assert_eq!(offset(OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await, 14);
    assert_eq!(offset(OffsetSpec::Latest, IsolationLevel::ReadCommitted).await, 14);
    let fetched = dst_client.fetch_partition(&topic, 0, 4, IsolationLevel::ReadCommitted, 1 << 20).await.unwrap();
    assert_eq!((fetched.log_start_offset, fetched.high_watermark, fetched.last_stable_offset), (4, 14, 14));

    // The batch builder's compressed output is accepted by a real broker too.
    let lz4 = BatchBuilder::new().with_compression(BatchCompression::Lz4).with_base_timestamp(now_ms()).with_records(records(5)).build().unwrap();
    assert_eq!(dst_client.produce(&topic, 0, lz4, &ProduceOptions::default()).await.unwrap().base_offset, 14);
}

/// Cluster id, configs and their changes, as Kafka's own admin client reports them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_against_a_real_cluster() {
    let dst = destination();
    let dst_client = client(&dst.bootstrap()).await;
    let cluster = dst_client.describe_cluster().await.unwrap();
    if let Some(id) = dst.cluster_id() {
        assert_eq!(cluster.cluster_id, id);
    }
    assert_eq!(cluster.brokers.len(), dst.node_ids().len());
    assert_eq!(dst_client.cached_metadata().cluster_id.as_deref(), Some(cluster.cluster_id.as_str()));

    let topic = unique_name("configs");
    let created = dst_client
        .create_topics(
            &[NewTopic { name: topic.clone(), num_partitions: 3, replication_factor: 1, configs: vec![("cleanup.policy".into(), "compact".into())] }],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let topic_id = *created[0].as_ref().unwrap();
    assert_eq!(dst_client.topic_id(&topic).await.unwrap(), topic_id);
    let resource = ConfigResource::Topic(topic.clone());
    let configs = dst_client.describe_configs(&resource).await.unwrap();
    assert_eq!(configs["cleanup.policy"].value.as_deref(), Some("compact"));
    dst_client
        .incremental_alter_configs(&resource, &[AlterConfigOp::Set("retention.ms".into(), "123456789".into()), AlterConfigOp::Delete("cleanup.policy".into())])
        .await
        .unwrap();
    // Brokers apply config changes from the metadata log asynchronously: poll until they show.
    let applied = crate::common::poll_until(Duration::from_secs(20), || async {
        let configs = dst_client.describe_configs(&resource).await.unwrap();
        let got = (configs["retention.ms"].value.clone(), configs["cleanup.policy"].value.clone());
        (got == (Some("123456789".to_owned()), Some("delete".to_owned()))).then_some(got)
    })
    .await;
    assert!(applied.is_some(), "config change not applied within 20 s");
    let verification = dst_client.describe_configs(&ConfigResource::Broker(cluster.brokers[0].id)).await.unwrap();
    assert_eq!(verification["transaction.partition.verification.enable"].value.as_deref(), Some("false"));

    let err = dst_client.incremental_alter_configs(&resource, &[AlterConfigOp::Set("retention.ms".into(), "soon".into())]).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidConfig), "{err}");
}

/// Bad input from a real broker: a response over the frame cap and an unknown topic are typed errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_responses_and_unknown_topics_are_typed_errors() {
    let src = source();
    let java = java_client();
    let topic = unique_name("big");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[]).unwrap();
    let big: Vec<ProduceLine> = (0..20).map(|i| ProducerRecord::to(0).value(vec![b'x'; 1000 + i]).into()).collect();
    java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &big).unwrap();

    let mut config = kafka_mirror_proxy::client::ClientConfig::new(&src.bootstrap());
    config.connection.max_frame_bytes = 4096;
    let small = kafka_mirror_proxy::client::Client::connect(config).await.unwrap();
    let leader = small.leader_of(&topic, 0).await.unwrap();
    let err = small.fetch(leader, &FetchSpec::single(&topic, 0, 0, IsolationLevel::ReadUncommitted, 1 << 20), None).await.unwrap_err();
    match &err {
        ClientError::Connection { source: ConnectionError::Poisoned { source, .. }, .. } => {
            assert!(matches!(&**source, ConnectionError::Frame { source: FrameError::TooLarge { max: 4096, .. }, .. }), "{source:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.is_ambiguous() && err.is_retriable());
    // The poisoned connection is replaced on the next call.
    assert!(small.describe_cluster().await.is_ok());

    let client = client(&src.bootstrap()).await;
    let missing = unique_name("missing");
    let err = client.describe_producers(&missing, 0).await.unwrap_err();
    assert!(matches!(err, ClientError::RetriesExhausted { .. } | ClientError::NoLeader { .. }), "{err}");
    let err = client.describe_configs(&ConfigResource::Topic(missing.clone())).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition), "{err}");
}

/// An incremental fetch session (KIP-227): after the first fetch, the broker answers only for
/// partitions with news, and a partition dropped from the fetch is forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_sessions_return_only_partitions_with_news() {
    use kafka_mirror_proxy::client::{FetchPartitionSpec, FetchSession};
    let src = source();
    let java = java_client();
    let topic = unique_name("session");
    java.create_topic(&src.bootstrap(), &topic, 3, 1, &[]).unwrap();
    let one = |p: i32| -> Vec<ProduceLine> { vec![ProducerRecord::to(p).value(format!("v{p}")).into()] };
    for p in 0..3 {
        java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &one(p)).unwrap();
    }
    let c = client(&src.bootstrap()).await;
    let leader = c.leader_of(&topic, 0).await.unwrap();
    let spec = |offsets: &[(i32, i64)]| FetchSpec {
        partitions: offsets
            .iter()
            .map(|&(partition, fetch_offset)| FetchPartitionSpec {
                topic: topic.clone(),
                partition,
                fetch_offset,
                last_fetched_epoch: -1,
                partition_max_bytes: 1 << 20,
            })
            .collect(),
        isolation: IsolationLevel::ReadUncommitted,
        max_wait: Duration::from_millis(10),
        min_bytes: 0,
        max_bytes: 1 << 20,
    };
    let mut session = FetchSession::new();
    let full = c.fetch(leader, &spec(&[(0, 0), (1, 0), (2, 0)]), Some(&mut session)).await.unwrap();
    assert_eq!(full.len(), 3);
    assert!(full.iter().all(|p| !p.records.is_empty()));
    assert_ne!(session.id(), 0, "the broker created a session");
    // Caught up everywhere: nothing new, so an incremental fetch names no partition.
    let idle = c.fetch(leader, &spec(&[(0, 1), (1, 1), (2, 1)]), Some(&mut session)).await.unwrap();
    assert!(idle.is_empty(), "{idle:?}");
    // New data in partition 2 only.
    java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &one(2)).unwrap();
    let news = c.fetch(leader, &spec(&[(0, 1), (1, 1), (2, 1)]), Some(&mut session)).await.unwrap();
    let parts: Vec<i32> = news.iter().map(|p| p.partition).collect();
    assert_eq!(parts, vec![2]);
    assert_eq!(news[0].high_watermark, 2);
    // Partition 0 dropped from the fetch: forgotten by the session, so its new data is not returned.
    let rest = c.fetch(leader, &spec(&[(1, 1), (2, 2)]), Some(&mut session)).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &one(0)).unwrap();
    let after = c.fetch(leader, &spec(&[(1, 1), (2, 2)]), Some(&mut session)).await.unwrap();
    assert!(after.is_empty(), "partition 0 still in the session: {after:?}");
    let back = c.fetch(leader, &spec(&[(0, 1), (1, 1), (2, 2)]), Some(&mut session)).await.unwrap();
    assert_eq!(back.iter().map(|p| (p.partition, p.high_watermark)).collect::<Vec<_>>(), vec![(0, 2)]);
}

/// A broker the cached metadata does not list (it was down when the cache was filled, as in a
/// rolling restart) is looked up again before the client gives up on it: once it is back, a
/// connection to it opens without anyone refreshing the metadata first. Before, every such call
/// failed with "broker N is not in the cluster metadata" until some unrelated refresh ran (the
/// instance group could not reach its coordinator after a rolling restart of the destination).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_when_the_metadata_was_cached_is_reachable_once_back() {
    use kafka_harness::{Cluster, ClusterSpec};
    let cluster = std::sync::Arc::new(
        crate::proxy::blocking(|| Cluster::start(ClusterSpec::new(kafka_harness::unique_name("client-restart")).brokers(3)).unwrap()).await,
    );
    let c = client(&cluster.bootstrap()).await;
    let victim = *cluster.node_ids().last().unwrap();
    let own = cluster.clone();
    crate::proxy::blocking(move || own.stop_broker(victim).unwrap()).await;
    let forgotten = crate::common::poll_until(Duration::from_secs(60), || async {
        c.refresh_metadata(&[]).await.ok().filter(|m| !m.brokers.contains_key(&victim)).map(|_| ())
    })
    .await;
    assert!(forgotten.is_some(), "broker {victim} still listed after it stopped");
    assert!(!c.cached_metadata().brokers.contains_key(&victim));
    let own = cluster.clone();
    crate::proxy::blocking(move || own.start_broker(victim).unwrap()).await;
    let conn = c.connection(victim).await.unwrap_or_else(|e| panic!("broker {victim} back, but: {e}"));
    assert!(conn.is_usable());
    assert!(c.cached_metadata().brokers.contains_key(&victim), "the broker list was refreshed");
}
