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
struct GroupMember {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl GroupMember {
    fn join(bootstrap: &str, topic: &str, group: &str) -> Self {
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
    fn first_offsets(&mut self, partitions: usize) -> BTreeMap<i32, i64> {
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
