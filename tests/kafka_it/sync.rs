//! The sync jobs against real clusters (issue 7): consumer and share group offsets, topic configs,
//! partitions, new topics, ACLs, and the sync runner.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use kafka_harness::{ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, source, unique_name};
use std::time::Duration;

use kafka_mirror_proxy::client::IsolationLevel;
use kafka_mirror_proxy::sync::{GroupFilter, sync_group_offsets};
use kafka_protocol::messages::ApiKey;

use crate::common::{client, poll_until};
use crate::replicator::{start, wait_caught_up};

/// A librdkafka group member (tests/clients/group_member.py) that stays in the group until dropped.
pub struct GroupMember {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl GroupMember {
    pub fn join(bootstrap: &str, topic: &str, group: &str) -> Self {
        let python = kafka_harness::provision_python().unwrap();
        let script = kafka_harness::repo_root().unwrap().join("tests/clients/group_member.py");
        let mut child = Command::new(python)
            .arg(script)
            .args(["--bootstrap", bootstrap, "--topic", topic, "--group", group])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("member output").unwrap();
        assert!(first.contains("joined"), "{first}");
        Self { child, lines }
    }

    /// The first offset it received per partition, once it has one for `partitions` partitions.
    pub fn first_offsets(&mut self, partitions: usize) -> BTreeMap<i32, i64> {
        let mut out = BTreeMap::new();
        while out.len() < partitions {
            let line = self.lines.next().expect("member output").unwrap();
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            out.insert(v["partition"].as_i64().unwrap() as i32, v["first_offset"].as_i64().unwrap());
        }
        out
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Offsets committed on the source arrive on the destination as they are (no translation, no leader
/// epoch); a consumer there starts exactly at them; a group active on the destination is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_group_offsets_arrive_unchanged_and_active_groups_are_left_alone() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("sync-groups");
    java.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
    let lines: Vec<ProduceLine> = (0..40).map(|i| ProducerRecord::to(i % 2).key(format!("k{i}")).value("v").into()).collect();
    java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &lines).unwrap();
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    wait_caught_up(&replicator, &s, &topic).await;

    let (synced, active, excluded) = (unique_name("app"), unique_name("busy"), unique_name("private"));
    for (group, p0, p1) in [(&synced, 7, 13), (&active, 3, 4), (&excluded, 1, 1)] {
        java.commit_offset(&src.bootstrap(), group, &topic, 0, p0).unwrap();
        java.commit_offset(&src.bootstrap(), group, &topic, 1, p1).unwrap();
    }
    // `busy` has a live member on the destination, with its own offsets there.
    java.commit_offset(&dst.bootstrap(), &active, &topic, 0, 9).unwrap();
    java.commit_offset(&dst.bootstrap(), &active, &topic, 1, 9).unwrap();
    let member = GroupMember::join(&dst.bootstrap(), &topic, &active);

    let topics: BTreeSet<String> = [topic.clone()].into();
    let filter = GroupFilter::new(&[".*"], &[&excluded]).unwrap();
    let report = sync_group_offsets(&s, &d, &topics, &filter).await.unwrap();
    let committed: BTreeSet<(String, i32, i64)> = report.committed.iter().filter(|c| c.1 == topic).map(|(g, _, p, o)| (g.clone(), *p, *o)).collect();
    assert_eq!(committed, [(synced.clone(), 0, 7), (synced.clone(), 1, 13)].into());
    assert!(report.skipped.iter().any(|s| s.group == active && s.reason.contains("active")), "{:?}", report.skipped);

    let on_destination = java.group_offsets(&dst.bootstrap(), &synced).unwrap();
    let got: BTreeMap<i32, (i64, Option<i32>)> = on_destination.iter().map(|o| (o.partition, (o.offset, o.leader_epoch))).collect();
    assert_eq!(got, [(0, (7, None)), (1, (13, None))].into());
    let busy: BTreeMap<i32, i64> = java.group_offsets(&dst.bootstrap(), &active).unwrap().iter().map(|o| (o.partition, o.offset)).collect();
    assert_eq!(busy, [(0, 9), (1, 9)].into(), "the active group's offsets were touched");
    assert!(java.group_offsets(&dst.bootstrap(), &excluded).unwrap().is_empty(), "excluded group synced");
    drop(member);

    // A second run changes nothing; a consumer of the group on the destination starts exactly there.
    let again = sync_group_offsets(&s, &d, &topics, &filter).await.unwrap();
    assert!(again.committed.iter().all(|c| c.0 != synced), "{again:?}");
    let mut consumer = GroupMember::join(&dst.bootstrap(), &topic, &synced);
    assert_eq!(consumer.first_offsets(2), [(0, 7), (1, 13)].into());
    drop(consumer);
    replicator.shutdown().await;
}

/// A topic config change and a partition increase at the source reach the destination, and the new
/// partition mirrors with exact offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_configs_and_partition_increases_follow_the_source() {
    use kafka_mirror_proxy::client::{AlterConfigOp, ConfigResource};
    use kafka_mirror_proxy::sync::{ConfigFilter, sync_topic_configs};
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("sync-topic");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[("retention.ms", "86400000")]).unwrap();
    let write = |partitions: i32, from: usize| {
        let lines: Vec<ProduceLine> = (from..from + 10).map(|i| ProducerRecord::to(i as i32 % partitions).key(format!("k{i}")).value("v").into()).collect();
        java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &lines).unwrap();
    };
    write(1, 0);
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    wait_caught_up(&replicator, &s, &topic).await;

    let resource = ConfigResource::Topic(topic.clone());
    s.incremental_alter_configs(
        &resource,
        &[AlterConfigOp::Set("retention.ms".into(), "172800000".into()), AlterConfigOp::Set("min.insync.replicas".into(), "1".into())],
    )
    .await
    .unwrap();
    // Brokers apply config changes asynchronously; sync until the change is seen and copied.
    let filter = ConfigFilter::default();
    let copied = crate::common::poll_until(std::time::Duration::from_secs(30), || async {
        let ops = sync_topic_configs(&s, &d, &topic, &filter).await.unwrap();
        ops.contains(&AlterConfigOp::Set("retention.ms".into(), "172800000".into())).then_some(ops)
    })
    .await
    .expect("retention.ms copied");
    assert!(!copied.iter().any(|op| matches!(op, AlterConfigOp::Set(k, _) if k == "min.insync.replicas")), "excluded setting copied: {copied:?}");
    let applied = crate::common::poll_until(std::time::Duration::from_secs(30), || async {
        let c = d.describe_configs(&resource).await.unwrap();
        (c["retention.ms"].value.as_deref() == Some("172800000")).then_some(c)
    })
    .await
    .expect("the destination shows the new retention.ms");
    assert_eq!(applied["message.timestamp.type"].value.as_deref(), Some("CreateTime"), "replicator-owned setting kept");

    s.create_partitions(&topic, 3, std::time::Duration::from_secs(30)).await.unwrap();
    write(3, 100);
    assert_eq!(replicator.sync_partitions(&topic).await.unwrap(), 3);
    wait_caught_up(&replicator, &s, &topic).await;
    crate::replicator::assert_identical(java, src, dst, &topic).await;
    replicator.shutdown().await;
}

/// A new source topic matching the mirror's pattern is found and, added to the replicator, mirrors
/// with exact offsets; internal and non-matching topics are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_topics_matching_the_pattern_are_found() {
    use kafka_mirror_proxy::sync::{DEFAULT_EXCLUDED_TOPICS, TopicPattern, new_matching_topics};
    let (src, dst, java) = (source(), destination(), java_client());
    let prefix = unique_name("regex");
    let first = format!("{prefix}.a");
    java.create_topic(&src.bootstrap(), &first, 1, 1, &[]).unwrap();
    let replicator = start(src, dst, std::slice::from_ref(&first), IsolationLevel::ReadCommitted).await;
    let s = client(&src.bootstrap()).await;
    let pattern = TopicPattern::new(&format!("{}\\..*", regex::escape(&prefix)), DEFAULT_EXCLUDED_TOPICS).unwrap();

    let (second, other) = (format!("{prefix}.b"), format!("{prefix}-other"));
    java.create_topic(&src.bootstrap(), &second, 2, 1, &[]).unwrap();
    java.create_topic(&src.bootstrap(), &other, 1, 1, &[]).unwrap();
    let lines: Vec<ProduceLine> = (0..12).map(|i| ProducerRecord::to(i % 2).key(format!("k{i}")).value("v").into()).collect();
    java.produce(&src.bootstrap(), &second, &JavaProduceOptions::default(), &lines).unwrap();
    let mirrored: BTreeSet<String> = replicator.topics().into_iter().collect();
    let found = new_matching_topics(&s, &pattern, &mirrored).await.unwrap();
    assert_eq!(found, vec![second.clone()]);
    for t in &found {
        replicator.add_topic(t).await;
    }
    wait_caught_up(&replicator, &s, &second).await;
    crate::replicator::assert_identical(java, src, dst, &second).await;
    let mirrored: BTreeSet<String> = replicator.topics().into_iter().collect();
    assert!(new_matching_topics(&s, &pattern, &mirrored).await.unwrap().is_empty());
    replicator.shutdown().await;
}

/// ACL bindings matching `acls.include` are created on the destination and deleted there when
/// deleted at the source, only those the mirror created, also by a sync started afresh over the
/// same ledger (a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_follow_the_source_within_the_filter() {
    use kafka_mirror_proxy::client::{ANY, AclBinding, AclFilter, PATTERN_LITERAL, PATTERN_PREFIXED, RESOURCE_GROUP, RESOURCE_TOPIC};
    use kafka_mirror_proxy::sync::{AclLedger, AclSync, InMemoryAclLedger, parse_acl_filters};
    let (src, dst) = (crate::common::authorizing_cluster("acl-source"), crate::common::authorizing_cluster("acl-dest"));
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let binding = |resource_type, pattern_type, name: &str, principal: &str, operation| AclBinding {
        resource_type,
        resource_name: name.to_owned(),
        pattern_type,
        principal: principal.to_owned(),
        host: "*".to_owned(),
        operation,
        permission_type: 3,
    };
    let alice_topics = binding(RESOURCE_TOPIC, PATTERN_PREFIXED, "orders", "User:alice", 3);
    let alice_group = binding(RESOURCE_GROUP, PATTERN_LITERAL, "app", "User:alice", 3);
    let bob = binding(RESOURCE_TOPIC, PATTERN_LITERAL, "other", "User:bob", 4);
    let carol = binding(RESOURCE_TOPIC, PATTERN_PREFIXED, "orders", "User:carol", 3);
    s.create_acls(&[alice_topics.clone(), alice_group.clone(), bob.clone()]).await.unwrap();
    d.create_acls(std::slice::from_ref(&carol)).await.unwrap();

    let filters = parse_acl_filters(&["topic:prefixed:orders", "group:literal:app"]).unwrap();
    let all = AclFilter { resource_type: ANY, pattern_type: ANY, resource_name: None };
    // ACL changes reach every broker through the metadata log: poll until the source shows them.
    crate::common::poll_until(std::time::Duration::from_secs(20), || async { (s.describe_acls(&all).await.unwrap().len() == 3).then_some(()) })
        .await
        .expect("source ACLs visible");
    let ledger = std::sync::Arc::new(InMemoryAclLedger::new());
    let mut sync = AclSync::new("acl-mirror", ledger.clone());
    let report = sync.run(&s, &d, &filters).await.unwrap();
    let mut want = vec![alice_topics.clone(), alice_group.clone()];
    want.sort();
    assert_eq!(report.created, want, "bob's binding is outside the filter");
    let expect = |want: Vec<AclBinding>| {
        let d = &d;
        let all = all.clone();
        async move {
            let mut want = want;
            want.sort();
            crate::common::poll_until(std::time::Duration::from_secs(20), || async { (d.describe_acls(&all).await.unwrap() == want).then_some(()) }).await
        }
    };
    assert!(expect(vec![alice_topics.clone(), alice_group.clone(), carol.clone()]).await.is_some(), "{:?}", d.describe_acls(&all).await);

    assert_eq!(ledger.load("acl-mirror").await.unwrap(), want.iter().cloned().collect());
    drop(sync);

    s.delete_acls(std::slice::from_ref(&alice_group)).await.unwrap();
    crate::common::poll_until(std::time::Duration::from_secs(20), || async { (s.describe_acls(&all).await.unwrap().len() == 2).then_some(()) })
        .await
        .expect("source deletion visible");
    let mut restarted = AclSync::new("acl-mirror", ledger.clone());
    let report = restarted.run(&s, &d, &filters).await.unwrap();
    assert_eq!(report.deleted, vec![alice_group.clone()]);
    assert!(expect(vec![alice_topics.clone(), carol.clone()]).await.is_some(), "{:?}", d.describe_acls(&all).await);
}

/// The sync runner with an unreachable source: the failure is reported in its status and retried;
/// once the source is back, offsets arrive again and data mirroring goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_source_is_reported_and_retried() {
    use kafka_mirror_proxy::replicator::Replicator;
    use kafka_mirror_proxy::sync::MirroredTopics;

    /// The runner's view of a mirror whose topics one replicator copies (the test's stand-in for
    /// the mirror, which follows partitions through its state log).
    #[derive(Debug)]
    struct Copied(Arc<Replicator>);
    impl MirroredTopics for Copied {
        fn topics(&self) -> Vec<String> {
            self.0.topics()
        }
        fn sync_partitions<'a>(&'a self, topic: &'a str) -> futures_util::future::BoxFuture<'a, Result<i32, String>> {
            Box::pin(async move { self.0.sync_partitions(topic).await.map_err(|e| e.reason()) })
        }
        fn add_topic<'a>(&'a self, topic: &'a str) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                self.0.add_topic(topic).await;
                Ok(())
            })
        }
    }

    use kafka_harness::{Cluster, ClusterSpec};
    use kafka_mirror_proxy::client::{BackoffConfig, Client, ClientConfig};
    use kafka_mirror_proxy::sync::{SyncKind, SyncRunner, SyncSettings};
    use std::sync::Arc;
    use std::time::Duration;
    let src = Cluster::start(ClusterSpec::new("sync-flaky-source")).unwrap();
    let (dst, java) = (destination(), java_client());
    let topic = unique_name("sync-flaky");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[]).unwrap();
    let write = |from: usize| {
        let lines: Vec<ProduceLine> = (from..from + 10).map(|i| ProducerRecord::to(0).key(format!("k{i}")).value("v").into()).collect();
        java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &lines).unwrap();
    };
    write(0);
    let quick = |bootstrap: String| async move {
        let mut config = ClientConfig::new(&bootstrap);
        config.backoff = BackoffConfig { deadline: Duration::from_secs(3), max: Duration::from_millis(500), ..BackoffConfig::default() };
        Arc::new(Client::connect(config).await.unwrap())
    };
    let (s, d) = (quick(src.bootstrap()).await, quick(dst.bootstrap()).await);
    let replicator = Arc::new(start(&src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await);
    wait_caught_up(&replicator, &s, &topic).await;
    let settings =
        SyncSettings { group_offsets_interval: Duration::from_millis(300), metadata_refresh_interval: Duration::from_millis(1000), ..SyncSettings::default() };
    let runner = SyncRunner::new(s.clone(), d.clone(), Arc::new(Copied(replicator.clone())), settings);
    let status = runner.status_handle();
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(runner.run(cancel.clone()));
    let group = unique_name("flaky-group");
    let offset_on_destination = |want: i64| {
        let (java, dst, group) = (java, dst, group.clone());
        async move {
            crate::common::poll_until(Duration::from_secs(60), || async {
                java.group_offsets(&dst.bootstrap(), &group).ok().filter(|o| o.first().map(|x| x.offset) == Some(want)).map(|_| ())
            })
            .await
        }
    };
    java.commit_offset(&src.bootstrap(), &group, &topic, 0, 4).unwrap();
    assert!(offset_on_destination(4).await.is_some(), "offset 4 not synced");

    src.stop_broker(0).unwrap();
    let failing = crate::common::poll_until(Duration::from_secs(60), || async {
        let all = status.lock().unwrap().clone();
        all.get(&SyncKind::GroupOffsets).filter(|s| s.consecutive_failures >= 2).and_then(|s| s.last_failure.clone())
    })
    .await
    .expect("the failure is reported");
    assert!(failing.1.contains("source"), "{failing:?}");

    src.start_broker(0).unwrap();
    java.commit_offset(&src.bootstrap(), &group, &topic, 0, 8).unwrap();
    assert!(offset_on_destination(8).await.is_some(), "offset 8 not synced after the source came back");
    assert_eq!(status.lock().unwrap()[&SyncKind::GroupOffsets].consecutive_failures, 0);
    write(100);
    wait_caught_up(&replicator, &s, &topic).await;
    crate::replicator::assert_identical(java, &src, dst, &topic).await;
    cancel.cancel();
    task.await.unwrap();
}

/// Share group start offsets (KIP-932): after a share group consumed and acknowledged part of a
/// mirrored topic on the source, one sync run gives the group on the destination the source's
/// start offset for every partition (as DescribeShareGroupOffsets reads them on both sides), and a
/// share consumer of the group there receives exactly the records from those offsets on. A group
/// with a member on the destination is left alone; a name that is a consumer group on the
/// destination is reported (once) and skipped. Share groups are on by default in Kafka 4.2+
/// (`share.version` 1 from metadata version 4.2-IV0), so the shared clusters serve them as they are.
///
/// The start offset a broker reports trails what was acknowledged by one state write (it persists
/// the share-partition state, then moves the start offset in memory; seen with Kafka 4.4): so the
/// group consumes twice, every record each time, and the start offsets it reports are where the
/// second round began. The test asserts against what the source reports, not against that rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_start_offsets_arrive_and_a_share_consumer_resumes_there() {
    use kafka_mirror_proxy::sync::sync_share_group_offsets;
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("sync-share");
    java.create_topic(&src.bootstrap(), &topic, 3, 1, &[]).unwrap();
    let write = |round: usize| {
        let lines: Vec<ProduceLine> = (0..30).map(|i| ProducerRecord::to(i % 3).key(format!("k{round}-{i}")).value("v").into()).collect();
        java.produce(&src.bootstrap(), &topic, &JavaProduceOptions::default(), &lines).unwrap();
    };
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    for (side, c) in [("source", &s), ("destination", &d)] {
        assert!(c.supports(ApiKey::AlterShareGroupOffsets).await.unwrap(), "{side} has no share groups");
    }
    let prefix = unique_name("share");
    let (synced, busy, conflict) = (format!("{prefix}-app"), format!("{prefix}-busy"), format!("{prefix}-conflict"));
    // Two rounds of consuming and acknowledging every record, then records nobody consumed yet.
    write(0);
    assert_eq!(java.share_consume(&src.bootstrap(), &topic, &synced, 30, Some("earliest")).unwrap().len(), 30);
    write(1);
    assert_eq!(java.share_consume(&src.bootstrap(), &topic, &synced, 30, None).unwrap().len(), 30);
    write(2);
    let replicator = start(src, dst, std::slice::from_ref(&topic), IsolationLevel::ReadCommitted).await;
    wait_caught_up(&replicator, &s, &topic).await;

    let partitions: BTreeMap<String, Vec<i32>> = [(topic.clone(), vec![0, 1, 2])].into();
    let at_source = s.describe_share_group_offsets(&synced, &partitions).await.unwrap();
    assert_eq!(at_source.len(), 3, "every partition has a start offset: {at_source:?}");
    assert!(at_source.values().all(|o| *o > 0 && *o < 30), "{at_source:?}");
    // `busy` and `conflict` are share groups on the source too (AlterShareGroupOffsets creates them);
    // on the destination `busy` has a member (starting at the latest offsets, Kafka's default) and
    // `conflict` is a consumer group.
    for group in [&busy, &conflict] {
        s.alter_share_group_offsets(group, &[((topic.clone(), 0), 2)].into()).await.unwrap();
        assert_eq!(s.describe_share_group_offsets(group, &partitions).await.unwrap(), [((topic.clone(), 0), 2)].into());
    }
    let member = java.share_member(&dst.bootstrap(), &topic, &busy).unwrap();
    poll_until(Duration::from_secs(60), || async { d.describe_share_group(&busy).await.unwrap().filter(|g| !g.members.is_empty()) })
        .await
        .expect("the destination member of `busy` joins");
    let busy_before = d.describe_share_group_offsets(&busy, &partitions).await.unwrap();
    java.commit_offset(&dst.bootstrap(), &conflict, &topic, 0, 2).unwrap();

    let topics: BTreeSet<String> = [topic.clone()].into();
    let filter = GroupFilter::new(&[&format!("{}.*", regex::escape(&prefix))], &[]).unwrap();
    let report = sync_share_group_offsets(&s, &d, &topics, &filter).await.unwrap();
    assert_eq!(report.unsupported, None);
    let altered: BTreeMap<(String, i32), i64> = report.altered.iter().filter(|a| a.0 == synced).map(|(_, t, p, o)| ((t.clone(), *p), *o)).collect();
    assert_eq!(report.altered.len(), altered.len(), "only `{synced}` is written: {report:?}");
    assert_eq!(altered, at_source);
    let reasons: BTreeMap<&str, &str> = report.skipped.iter().map(|g| (g.group.as_str(), g.reason.as_str())).collect();
    assert_eq!(reasons.len(), 2, "{report:?}");
    assert!(reasons[busy.as_str()].starts_with("has 1 active member(s) on the destination"), "{report:?}");
    assert_eq!(reasons[conflict.as_str()], "a share group on the source and a consumer group on the destination");
    // The consumer group sync does not report the same conflict again.
    let consumer_report = sync_group_offsets(&s, &d, &topics, &filter).await.unwrap();
    assert!(consumer_report.skipped.is_empty() && consumer_report.committed.is_empty(), "{consumer_report:?}");

    assert_eq!(d.describe_share_group_offsets(&synced, &partitions).await.unwrap(), at_source);
    assert_eq!(d.describe_share_group_offsets(&busy, &partitions).await.unwrap(), busy_before, "the active group's offsets were touched");
    let conflict_offsets: Vec<(i32, i64)> = java.group_offsets(&dst.bootstrap(), &conflict).unwrap().iter().map(|o| (o.partition, o.offset)).collect();
    assert_eq!(conflict_offsets, vec![(0, 2)]);
    drop(member);

    // A second run writes nothing for `synced` (unchanged) and, now that its member left, syncs
    // `busy`. A share consumer of `synced` on the destination receives exactly the records from
    // the synced start offsets on, none before.
    let again = sync_share_group_offsets(&s, &d, &topics, &filter).await.unwrap();
    assert_eq!(again.altered, vec![(busy.clone(), topic.clone(), 0, 2)], "{again:?}");
    let expected: Vec<_> = java
        .consume(&src.bootstrap(), &topic, &Default::default())
        .unwrap()
        .into_iter()
        .filter(|r| r.offset >= at_source[&(topic.clone(), r.partition)])
        .collect();
    assert_eq!(expected.len() as i64, at_source.values().map(|o| 30 - o).sum::<i64>());
    let got = java.share_consume(&dst.bootstrap(), &topic, &synced, expected.len(), None).unwrap();
    assert_eq!(got, expected);
    replicator.shutdown().await;
}

/// A source older than Kafka 4.1 (here 3.9, which has no share groups): the group offset tick of
/// the sync runner still syncs consumer group offsets, and the share group sync succeeds with the
/// reason it did nothing. Needs its own 3.9 cluster (the shared ones run `KAFKA_VERSION`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_share_groups_does_not_fail_the_group_sync() {
    use kafka_harness::{Cluster, ClusterSpec};
    use kafka_mirror_proxy::sync::{MirroredTopics, SyncKind, SyncRunner, SyncSettings};
    use std::sync::Arc;

    /// The runner's view of the mirror: one topic, copied by hand below.
    #[derive(Debug)]
    struct Fixed(String);
    impl MirroredTopics for Fixed {
        fn topics(&self) -> Vec<String> {
            vec![self.0.clone()]
        }
        fn sync_partitions<'a>(&'a self, _: &'a str) -> futures_util::future::BoxFuture<'a, Result<i32, String>> {
            unreachable!("not on the group tick")
        }
        fn add_topic<'a>(&'a self, _: &'a str) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
            unreachable!("not on the group tick")
        }
    }

    let old = Cluster::start(ClusterSpec::new("sync-kafka39").version("3.9.1")).unwrap();
    let (dst, java) = (destination(), java_client());
    let topic = unique_name("sync-old");
    let lines: Vec<ProduceLine> = (0..10).map(|i| ProducerRecord::to(0).key(format!("k{i}")).value("v").into()).collect();
    for cluster in [&old, dst] {
        java.create_topic(&cluster.bootstrap(), &topic, 1, 1, &[]).unwrap();
        java.produce(&cluster.bootstrap(), &topic, &JavaProduceOptions::default(), &lines).unwrap();
    }
    let group = unique_name("old-group");
    java.commit_offset(&old.bootstrap(), &group, &topic, 0, 4).unwrap();
    let (s, d) = (Arc::new(client(&old.bootstrap()).await), Arc::new(client(&dst.bootstrap()).await));
    assert!(!s.supports(ApiKey::DescribeShareGroupOffsets).await.unwrap());
    let settings = SyncSettings { groups: GroupFilter::new(&[&regex::escape(&group)], &[]).unwrap(), ..SyncSettings::default() };
    let runner = SyncRunner::new(s, d, Arc::new(Fixed(topic.clone())), settings);
    runner.sync_groups_once().await;
    let status = runner.status_handle().lock().unwrap().clone();
    let groups = &status[&SyncKind::GroupOffsets];
    assert!(groups.last_success.is_some() && groups.last_failure.is_none(), "{groups:?}");
    let share = &status[&SyncKind::ShareGroupOffsets];
    assert!(share.last_success.is_some() && share.last_failure.is_none(), "{share:?}");
    assert!(share.note.as_deref().is_some_and(|n| n.contains("source cluster does not serve DescribeShareGroupOffsets")), "{share:?}");
    let synced: Vec<(i32, i64)> = java.group_offsets(&dst.bootstrap(), &group).unwrap().iter().map(|o| (o.partition, o.offset)).collect();
    assert_eq!(synced, vec![(0, 4)]);
}

/// Mirror loops: a source topic that is a mirror topic (not STOPPED) of a mirror on the source
/// cluster is refused, by name and by a pattern (which still adds the other topic it matches),
/// found through the source's state topic and, with another state topic name, only by asking the
/// kafka-mirror-proxy in front of the source; once the topic is STOPPED at the source it can be
/// added. The source is made to look mirrored by a manager whose destination is the shared source
/// (mirroring a topic from the shared destination into it), with a state topic of its own name so
/// that no other test sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_topics_of_the_source_are_refused_until_stopped_there() {
    use kafka_mirror_proxy::admin::{AdminHandler, AllowAll};
    use kafka_mirror_proxy::mirror::{MirrorError, MirrorManager, MirrorManagerConfig};
    use kafka_mirror_proxy::protocol::mirror::MirrorErrorCode;
    use kafka_mirror_proxy::proxy::{Proxy, ProxySettings};
    use std::sync::Arc;
    let (src, dst, java) = (source(), destination(), java_client());
    let manager = |bootstrap: String, state_topic: String| async move {
        let config = MirrorManagerConfig {
            state_topic,
            stop_wait: Duration::from_secs(60),
            fetch_max_wait: Duration::from_millis(100),
            ..MirrorManagerConfig::default()
        };
        Arc::new(MirrorManager::start(Arc::new(client(&bootstrap).await), config).await.expect("manager starts"))
    };
    let mirror_of = |bootstrap: String| [("bootstrap.servers".to_owned(), bootstrap)].into_iter().collect();
    let state_topic = unique_name("__mirror_state-loops");

    // Back: the shared destination's `looped` is mirrored into the shared source.
    let looped = unique_name("loop");
    java.create_topic(&dst.bootstrap(), &looped, 1, 1, &[]).unwrap();
    let lines: Vec<ProduceLine> = (0..5).map(|i| ProducerRecord::to(0).key(format!("k{i}")).value("v").into()).collect();
    java.produce(&dst.bootstrap(), &looped, &JavaProduceOptions::default(), &lines).unwrap();
    let back = manager(src.bootstrap(), state_topic.clone()).await;
    let back_mirror = unique_name("back");
    back.create_mirror(&back_mirror, mirror_of(dst.bootstrap()), false).await.unwrap();
    let added = back.add_topics(&back_mirror, std::slice::from_ref(&looped), &[], -1).await.unwrap();
    assert!(added.iter().all(|(_, r)| r.is_ok()), "{added:?}");
    let s = client(&src.bootstrap()).await;
    poll_until(Duration::from_secs(60), || async { s.refresh_metadata(&[&looped]).await.unwrap().topics.contains_key(&looped).then_some(()) })
        .await
        .expect("the back mirror creates its topic on the source");
    let plain = unique_name("plain");
    java.create_topic(&src.bootstrap(), &plain, 1, 1, &[]).unwrap();

    let is_loop = |outcome: &Result<(), MirrorError>| match outcome {
        Err(e @ MirrorError::MirrorLoop { topic, source_mirror }) => {
            assert_eq!((topic, source_mirror), (&looped, &back_mirror));
            assert_eq!(e.code(), MirrorErrorCode::TopicAlreadyInMirror);
            assert!(e.message().contains(&format!("topic `{looped}` is a mirror topic of mirror `{back_mirror}` on the source cluster")), "{}", e.message());
            true
        }
        _ => false,
    };

    // Forth, through the source's state topic (same name on both sides).
    let forth = manager(dst.bootstrap(), state_topic.clone()).await;
    let forth_mirror = unique_name("forth");
    forth.create_mirror(&forth_mirror, mirror_of(src.bootstrap()), false).await.unwrap();
    let by_name = forth.add_topics(&forth_mirror, std::slice::from_ref(&looped), &[], -1).await.unwrap();
    assert_eq!(by_name.len(), 1);
    assert!(is_loop(&by_name[0].1), "{by_name:?}");
    let pattern = format!("{}|{}", regex::escape(&looped), regex::escape(&plain));
    let by_pattern: BTreeMap<String, Result<(), MirrorError>> = forth.add_topics(&forth_mirror, &[pattern], &[], -1).await.unwrap().into_iter().collect();
    assert_eq!(by_pattern.len(), 2, "{by_pattern:?}");
    assert!(is_loop(&by_pattern[&looped]), "{by_pattern:?}");
    assert!(by_pattern[&plain].is_ok(), "{by_pattern:?}");
    let listing = forth.list_mirrors().into_iter().find(|m| m.name == forth_mirror).unwrap();
    assert_eq!(listing.topics, vec![plain.clone()]);

    // Forth through a kafka-mirror-proxy in front of the source that serves the back manager's
    // mirror APIs; this manager's state topic has another name, so only the proxy can tell.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut settings = ProxySettings::for_bootstrap(&src.bootstrap());
    settings.startup_timeout = Duration::from_secs(30);
    let handler = Arc::new(AdminHandler::new(back.clone(), Arc::new(AllowAll)));
    let proxy = Proxy::start_with_admin(settings, back.lookup(), Some(handler), shutdown.clone()).await.expect("proxy starts");
    let via_proxy = manager(dst.bootstrap(), unique_name("__mirror_state-loops-other")).await;
    let proxied_mirror = unique_name("proxied");
    via_proxy.create_mirror(&proxied_mirror, mirror_of(proxy.bootstrap_addr().to_string()), false).await.unwrap();
    let outcomes = via_proxy.add_topics(&proxied_mirror, std::slice::from_ref(&looped), &[], -1).await.unwrap();
    assert!(is_loop(&outcomes[0].1), "{outcomes:?}");

    // STOPPED at the source: no longer a mirror topic there.
    let removed = back.remove_topics(&back_mirror, std::slice::from_ref(&looped)).await.unwrap();
    assert!(removed.iter().all(|(_, r)| r.is_ok()), "{removed:?}");
    let back_state = back.describe(Some(std::slice::from_ref(&back_mirror))).await.remove(0).1.unwrap();
    assert!(back_state.topics[0].partitions.iter().all(|p| p.state == kafka_mirror_proxy::mirror::PartitionState::Stopped), "{back_state:?}");
    // Added by one manager at a time: `looped` on the destination is the original topic, so each
    // stops copying into it again before the other adds it.
    for (m, name) in [(&via_proxy, &proxied_mirror), (&forth, &forth_mirror)] {
        let outcomes = m.add_topics(name, std::slice::from_ref(&looped), &[], -1).await.unwrap();
        assert!(outcomes.iter().all(|(_, r)| r.is_ok()), "{outcomes:?}");
        m.remove_topics(name, std::slice::from_ref(&looped)).await.unwrap();
    }
    shutdown.cancel();
    assert!(proxy.wait().await, "proxy stops gracefully");
    for m in [forth, via_proxy, back] {
        m.shutdown().await;
    }
}
