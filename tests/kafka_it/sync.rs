//! Sync of consumer group offsets against real clusters (issue 7, first part).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use kafka_harness::{ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, source, unique_name};
use kafka_mirror_proxy::client::IsolationLevel;
use kafka_mirror_proxy::sync::{GroupFilter, sync_group_offsets};

use crate::common::client;
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
    let committed: BTreeSet<(String, i32, i64)> =
        report.committed.iter().filter(|c| c.1 == topic).map(|(g, _, p, o)| (g.clone(), *p, *o)).collect();
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
    s.incremental_alter_configs(&resource, &[AlterConfigOp::Set("retention.ms".into(), "172800000".into()), AlterConfigOp::Set("min.insync.replicas".into(), "1".into())])
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
/// deleted at the source, only those the mirror created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_follow_the_source_within_the_filter() {
    use kafka_harness::{Cluster, ClusterSpec};
    use kafka_mirror_proxy::client::{AclBinding, AclFilter, ANY, PATTERN_LITERAL, PATTERN_PREFIXED, RESOURCE_GROUP, RESOURCE_TOPIC};
    use kafka_mirror_proxy::sync::{AclSync, parse_acl_filters};
    let secured = |name: &str| {
        Cluster::start(
            ClusterSpec::new(name)
                .prop("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
                // Plaintext connections (brokers, controllers and these tests) are User:ANONYMOUS.
                .prop("super.users", "User:ANONYMOUS"),
        )
        .unwrap()
    };
    let (src, dst) = (secured("acl-source"), secured("acl-dest"));
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
    let mut sync = AclSync::new();
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

    s.delete_acls(std::slice::from_ref(&alice_group)).await.unwrap();
    crate::common::poll_until(std::time::Duration::from_secs(20), || async { (s.describe_acls(&all).await.unwrap().len() == 2).then_some(()) })
        .await
        .expect("source deletion visible");
    let report = sync.run(&s, &d, &filters).await.unwrap();
    assert_eq!(report.deleted, vec![alice_group.clone()]);
    assert!(expect(vec![alice_topics.clone(), carol.clone()]).await.is_some(), "{:?}", d.describe_acls(&all).await);
}

/// The sync runner with an unreachable source: the failure is reported in its status and retried;
/// once the source is back, offsets arrive again and data mirroring goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_source_is_reported_and_retried() {
    use std::sync::Arc;
    use std::time::Duration;
    use kafka_harness::{Cluster, ClusterSpec};
    use kafka_mirror_proxy::client::{BackoffConfig, Client, ClientConfig};
    use kafka_mirror_proxy::sync::{SyncKind, SyncRunner, SyncSettings};
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
    let settings = SyncSettings {
        group_offsets_interval: Duration::from_millis(300),
        metadata_refresh_interval: Duration::from_millis(1000),
        ..SyncSettings::default()
    };
    let runner = SyncRunner::new(s.clone(), d.clone(), replicator.clone(), settings);
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
