//! Several proxy instances sharing one `__mirror_state`, and instances killed with SIGKILL in the
//! middle of transitions (issue 6), through the real binaries against the shared clusters.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use kafka_harness::{ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, source, unique_name};
use kafka_mirror_proxy::client::{Client, IsolationLevel, OffsetSpec, ProduceOptions};
use kafka_mirror_proxy::mirror::records::{StateRecord, TopicGoal};
use kafka_mirror_proxy::protocol::batch::{BatchBuilder, Record};
use serde_json::Value;

use crate::binaries::{ProxyProcess, cli_async, describe, properties_file, sample};
use crate::common::{authorizing_cluster, client, fetch_all_batches, payloads, poll_until};

/// Fast failure detection for tests: the broker's minimum session timeout (6 s by default).
pub(crate) const MEMBERSHIP: &str = "  session_timeout_ms: 6000\n  heartbeat_interval_ms: 1000\n";
/// How long mirroring may take to catch up or a takeover to complete.
const SETTLE: Duration = Duration::from_secs(120);

/// Writes batches of 5 records to every partition of `topics` on the source, round after round,
/// until stopped; counts the records written.
struct SourceWriter {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl SourceWriter {
    fn start(source: Arc<Client>, topics: Vec<(String, i32)>) -> Self {
        let (stop, written) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (s, w) = (stop.clone(), written.clone());
        let task = tokio::spawn(async move {
            let mut round = 0u64;
            while !s.load(Ordering::Relaxed) {
                for (topic, partitions) in &topics {
                    for p in 0..*partitions {
                        let records = (0..5).map(|i| Record {
                            key: Some(Bytes::from(format!("r{round}-{i}"))),
                            value: Some(Bytes::from(format!("{topic}-{p}-{round}-{i}"))),
                            ..Record::default()
                        });
                        let batch = BatchBuilder::new().with_base_timestamp(kafka_mirror_proxy_now()).with_records(records).build().unwrap();
                        source.produce(topic, p, batch, &ProduceOptions::default()).await.expect("source write");
                        w.fetch_add(5, Ordering::Relaxed);
                    }
                }
                round += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self { stop, written, task }
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        self.written.load(Ordering::Relaxed)
    }
}

fn kafka_mirror_proxy_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The topics an instance says it copies (`kafka_mirror_proxy_mirror_topic_owned`), if it answers
/// and is a settled member of an instance group of `instances`.
async fn owned_topics(proxy: &ProxyProcess, mirror: &str, instances: usize) -> Option<BTreeSet<String>> {
    let text = proxy.scrape().await?;
    if sample(&text, "kafka_mirror_proxy_mirror_group_instances") != Some(instances as f64) {
        return None;
    }
    let prefix = format!("kafka_mirror_proxy_mirror_topic_owned{{mirror=\"{mirror}\",topic=\"");
    Some(text.lines().filter_map(|l| l.strip_prefix(&prefix)?.split_once('"').map(|(t, _)| t.to_owned())).collect())
}

/// Creates `mirror` of the source through `proxy` and adds `pattern`.
async fn create_and_add(proxy: &str, mirror: &str, pattern: &str, extra: &str) {
    let config = properties_file(&format!("bootstrap.servers={}\n{extra}", source().bootstrap()));
    let created = poll_until(Duration::from_secs(60), || async {
        let (ok, out, _) = cli_async(&["--bootstrap-server", proxy, "--create", "--mirror", mirror, "--mirror-config", &config]).await;
        ok.then_some(out)
    })
    .await
    .expect("kafka-mirrors --create");
    assert_eq!(created.trim(), format!("Created mirror {mirror}"));
    let (ok, _, err) = cli_async(&["--bootstrap-server", proxy, "--add", "--mirror", mirror, "--topic", pattern]).await;
    assert!(ok, "--add: {err}");
}

/// Waits until every partition of `mirror` described through `proxy` is `state` with lag 0 (any lag
/// if `state` is PAUSED, or if `any_lag`, e.g. while the source is being written); the rows then.
async fn wait_state(proxy: &str, mirror: &str, partitions: usize, state: &str) -> Vec<Value> {
    wait_rows(proxy, mirror, None, partitions, state, state == "PAUSED").await
}

/// As [`wait_state`], for the rows of `topic` only if given.
async fn wait_rows(proxy: &str, mirror: &str, topic: Option<&str>, partitions: usize, state: &str, any_lag: bool) -> Vec<Value> {
    let settled = poll_until(SETTLE, || async {
        let rows: Vec<Value> = describe(proxy, mirror).await?.into_iter().filter(|r| topic.is_none_or(|t| r["topic"] == t)).collect();
        for r in &rows {
            assert!(r["state"] != "FAILED", "a partition FAILED: {r}");
        }
        (rows.len() == partitions && rows.iter().all(|r| r["state"] == state && (any_lag || r["lag"] == 0))).then_some(rows)
    })
    .await;
    match settled {
        Some(rows) => rows,
        None => panic!("{mirror} not all {state} with lag 0: {:?}", describe(proxy, mirror).await),
    }
}

/// Asserts that every partition of `topic` holds the same batches at the same offsets on both
/// clusters.
async fn assert_identical(src: &Client, dst: &Client, topic: &str, partitions: i32) {
    for p in 0..partitions {
        let expected = payloads(&fetch_all_batches(src, topic, p).await);
        let got = payloads(&fetch_all_batches(dst, topic, p).await);
        assert_eq!(got.len(), expected.len(), "{topic}-{p}: batch count differs");
        assert!(got == expected, "{topic}-{p}: the destination differs from the source");
        let src_end = src.list_offset(topic, p, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
        let dst_end = dst.list_offset(topic, p, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
        assert_eq!(dst_end, src_end, "{topic}-{p}: end offsets differ");
    }
}

/// Two instances split the topics between them (each topic copied by exactly one); the one copying
/// more is killed with SIGKILL under live writes; the other takes all over within seconds, and every
/// partition ends identical to the source: no gap, no duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_the_copying_and_the_survivor_takes_over() {
    let (src, dst, java) = (source(), destination(), java_client());
    let state_topic = unique_name("__instances_state");
    let mut a = ProxyProcess::start(&dst.bootstrap(), &state_topic, MEMBERSHIP);
    let mut b = ProxyProcess::start(&dst.bootstrap(), &state_topic, MEMBERSHIP);
    let prefix = unique_name("shared");
    let topics: Vec<String> = (0..8).map(|i| format!("{prefix}.t{i}")).collect();
    for t in &topics {
        java.create_topic(&src.bootstrap(), t, 2, 1, &[]).unwrap();
    }
    let (s, d) = (Arc::new(client(&src.bootstrap()).await), client(&dst.bootstrap()).await);
    let writer = SourceWriter::start(s.clone(), topics.iter().map(|t| (t.clone(), 2)).collect());

    let mirror = unique_name("dr");
    create_and_add(&a.bootstrap, &mirror, &format!("{}\\..*", regex::escape(&prefix)), "fetch.wait.max.ms=100\n").await;
    // Each topic is copied by exactly one instance, and between them by both.
    let all: BTreeSet<String> = topics.iter().cloned().collect();
    let split = poll_until(SETTLE, || async {
        let (in_a, in_b) = (owned_topics(&a, &mirror, 2).await?, owned_topics(&b, &mirror, 2).await?);
        (in_a.is_disjoint(&in_b) && in_a.union(&in_b).cloned().collect::<BTreeSet<_>>() == all).then_some((in_a, in_b))
    })
    .await;
    let (in_a, in_b) = split.unwrap_or_else(|| panic!("the instances did not split {all:?}"));
    wait_rows(&b.bootstrap, &mirror, None, 16, "MIRRORING", true).await;

    // Kill the instance copying more topics (at least half) while the source is being written.
    let (victim, survivor, moved) = if in_a.len() >= in_b.len() { (&mut a, &b, in_a) } else { (&mut b, &a, in_b) };
    victim.kill();
    let took_over = poll_until(SETTLE, || async { (owned_topics(survivor, &mirror, 1).await? == all).then_some(()) }).await;
    assert!(took_over.is_some(), "the survivor did not take over {moved:?}: {:?}", survivor.scrape().await);

    let written = writer.stop().await;
    assert!(written > 0);
    wait_state(&survivor.bootstrap, &mirror, 16, "MIRRORING").await;
    for t in &topics {
        assert_identical(&s, &d, t, 2).await;
    }
}

/// Waits until `topic`'s records in the state topic (read straight from the destination, as any
/// instance's tail reads them) show `goal` after the last record with goal `after` (if given).
pub(crate) async fn wait_goal_recorded(dst: &Client, state_topic: &str, topic: &str, after: Option<TopicGoal>, goal: TopicGoal) {
    let seen = poll_until(Duration::from_secs(60), || async {
        let (records, _) = kafka_mirror_proxy::mirror::store::read_state_topic(dst, state_topic).await.ok()?;
        let goals: Vec<Option<TopicGoal>> = records
            .iter()
            .filter_map(|r| match r {
                StateRecord::Topic { topic: t, value } if t == topic => Some(value.as_ref().map(|v| v.goal)),
                _ => None,
            })
            .collect();
        let from = match after {
            Some(previous) => goals.iter().rposition(|g| *g == Some(previous))? + 1,
            None => 0,
        };
        goals[from..].contains(&Some(goal)).then_some(())
    })
    .await;
    assert!(seen.is_some(), "{topic}: goal {} never recorded in {state_topic}", goal.name());
}

/// SIGKILL of the proxy right after each transition was recorded (add, pause, resume, remove), then
/// a restart: the recorded transition is carried out, and the destination ends identical to the
/// source (and writable after remove).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_each_transition_then_restart() {
    let (src, dst, java) = (source(), destination(), java_client());
    let state_topic = unique_name("__kill9_state");
    let mut proxy = ProxyProcess::start(&dst.bootstrap(), &state_topic, MEMBERSHIP);
    let topic = unique_name("kill9");
    java.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
    let produce = |n: usize, tag: &str| {
        let lines: Vec<ProduceLine> = (0..n).map(|i| ProducerRecord::to((i % 2) as i32).key(format!("{tag}{i}")).value("v").into()).collect();
        java.produce(&src.bootstrap(), &topic, &JavaProduceOptions { idempotent: true, ..Default::default() }, &lines).unwrap();
    };
    produce(200, "a");
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let mirror = unique_name("dr");
    let bootstrap = proxy.bootstrap.clone();

    // add: killed once the topic is recorded (read-only from then on), before it is mirrored.
    let add = {
        let config = properties_file(&format!("bootstrap.servers={}\n", src.bootstrap()));
        let created = poll_until(Duration::from_secs(60), || async {
            cli_async(&["--bootstrap-server", &bootstrap, "--create", "--mirror", &mirror, "--mirror-config", &config]).await.0.then_some(())
        })
        .await;
        assert!(created.is_some(), "--create");
        let (b, m, t) = (bootstrap.clone(), mirror.clone(), topic.clone());
        tokio::spawn(async move { cli_async(&["--bootstrap-server", &b, "--add", "--mirror", &m, "--topic", &t]).await })
    };
    wait_goal_recorded(&d, &state_topic, &topic, None, TopicGoal::Mirror).await;
    proxy.kill();
    let _ = add.await;
    proxy.restart();
    wait_state(&bootstrap, &mirror, 2, "MIRRORING").await;
    assert_identical(&s, &d, &topic, 2).await;

    // pause: killed right after PAUSE is recorded; after the restart it stays paused while the
    // source moves on.
    let pause = {
        let (b, m, t) = (bootstrap.clone(), mirror.clone(), topic.clone());
        tokio::spawn(async move { cli_async(&["--bootstrap-server", &b, "--pause", "--mirror", &m, "--topic", &t]).await })
    };
    wait_goal_recorded(&d, &state_topic, &topic, Some(TopicGoal::Mirror), TopicGoal::Pause).await;
    proxy.kill();
    let _ = pause.await;
    let before: BTreeMap<i32, i64> = d.list_offsets(&topic, &[0, 1], OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    produce(40, "b");
    proxy.restart();
    let rows = wait_state(&bootstrap, &mirror, 2, "PAUSED").await;
    assert!(rows.iter().all(|r| r["lag"] == 20), "paused partitions lag by what the source got since: {rows:?}");
    let after: BTreeMap<i32, i64> = d.list_offsets(&topic, &[0, 1], OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    assert_eq!(after, before, "a paused topic was copied");

    // resume: killed right after the goal is MIRROR again; catches up after the restart.
    let resume = {
        let (b, m, t) = (bootstrap.clone(), mirror.clone(), topic.clone());
        tokio::spawn(async move { cli_async(&["--bootstrap-server", &b, "--resume", "--mirror", &m, "--topic", &t]).await })
    };
    wait_goal_recorded(&d, &state_topic, &topic, Some(TopicGoal::Pause), TopicGoal::Mirror).await;
    proxy.kill();
    let _ = resume.await;
    produce(40, "c");
    proxy.restart();
    wait_state(&bootstrap, &mirror, 2, "MIRRORING").await;
    assert_identical(&s, &d, &topic, 2).await;

    // remove: killed once STOP is recorded; after the restart the topic ends STOPPED and writable,
    // its next record at the source's next offset.
    let remove = {
        let (b, m, t) = (bootstrap.clone(), mirror.clone(), topic.clone());
        tokio::spawn(async move { cli_async(&["--bootstrap-server", &b, "--remove", "--mirror", &m, "--topic", &t]).await })
    };
    wait_goal_recorded(&d, &state_topic, &topic, Some(TopicGoal::Mirror), TopicGoal::Stop).await;
    proxy.kill();
    let _ = remove.await;
    proxy.restart();
    wait_goal_recorded(&d, &state_topic, &topic, Some(TopicGoal::Stop), TopicGoal::Stopped).await;
    assert_identical(&s, &d, &topic, 2).await;
    let src_end = s.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let one = [ProduceLine::from(ProducerRecord::to(0).key("after").value("failover"))];
    let opts =
        JavaProduceOptions { props: vec![("delivery.timeout.ms".into(), "10000".into()), ("request.timeout.ms".into(), "5000".into())], ..Default::default() };
    let landed = poll_until(Duration::from_secs(60), || async { java.produce(&bootstrap, &topic, &opts, &one).ok() }).await.expect("writable after remove");
    assert_eq!(landed, vec![(0, src_end)], "the first write after failover takes the source's next offset");
}

/// The mirror's sync runs on the instance that owns the mirror, with the mirror's `sync.*`
/// settings (issue 7, through the binaries): committed group offsets, a topic config change, a
/// partition increase and a new topic matching the `--add` pattern all follow the source; after
/// `--remove`, the group consuming through the proxy starts exactly at the synced offsets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owning_instance_keeps_offsets_configs_partitions_and_new_topics_in_sync() {
    use kafka_mirror_proxy::client::{AlterConfigOp, ConfigResource};
    let (src, dst, java) = (source(), destination(), java_client());
    let proxy = ProxyProcess::start(&dst.bootstrap(), &unique_name("__sync_state"), MEMBERSHIP);
    let prefix = unique_name("synced");
    let (first, second) = (format!("{prefix}.orders"), format!("{prefix}.payments"));
    java.create_topic(&src.bootstrap(), &first, 2, 1, &[("retention.ms", "86400000")]).unwrap();
    let write = |topic: &str, partitions: i32, n: usize| {
        let lines: Vec<ProduceLine> = (0..n).map(|i| ProducerRecord::to(i as i32 % partitions).key(format!("k{i}")).value("v").into()).collect();
        java.produce(&src.bootstrap(), topic, &JavaProduceOptions::default(), &lines).unwrap();
    };
    write(&first, 2, 40);
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let mirror = unique_name("dr");
    let settings = "sync.group.offsets.interval.ms=1000\nmetadata.refresh.interval.ms=2000\n";
    create_and_add(&proxy.bootstrap, &mirror, &format!("{}\\..*", regex::escape(&prefix)), settings).await;
    wait_state(&proxy.bootstrap, &mirror, 2, "MIRRORING").await;

    // Group offsets: committed on the source, copied as they are (no leader epoch).
    let group = unique_name("app");
    java.commit_offset(&src.bootstrap(), &group, &first, 0, 7).unwrap();
    java.commit_offset(&src.bootstrap(), &group, &first, 1, 13).unwrap();
    let synced = poll_until(SETTLE, || async {
        let got: BTreeMap<i32, (i64, Option<i32>)> =
            java.group_offsets(&dst.bootstrap(), &group).ok()?.iter().map(|o| (o.partition, (o.offset, o.leader_epoch))).collect();
        (got == [(0, (7, None)), (1, (13, None))].into()).then_some(())
    })
    .await;
    assert!(synced.is_some(), "group offsets not synced: {:?}", java.group_offsets(&dst.bootstrap(), &group));

    // A topic config change.
    let resource = ConfigResource::Topic(first.clone());
    s.incremental_alter_configs(&resource, &[AlterConfigOp::Set("retention.ms".into(), "172800000".into())]).await.unwrap();
    let copied = poll_until(SETTLE, || async {
        let c = d.describe_configs(&resource).await.ok()?;
        (c.get("retention.ms")?.value.as_deref() == Some("172800000")).then_some(())
    })
    .await;
    assert!(copied.is_some(), "retention.ms did not reach the destination");

    // A partition increase, then a new topic matching the pattern: both mirror with exact offsets.
    s.create_partitions(&first, 3, Duration::from_secs(30)).await.unwrap();
    kafka_harness::wait_topic_ready(&src.bootstrap(), &first, 3, Duration::from_secs(30)).unwrap();
    write(&first, 3, 30);
    java.create_topic(&src.bootstrap(), &second, 1, 1, &[]).unwrap();
    write(&second, 1, 5);
    wait_state(&proxy.bootstrap, &mirror, 4, "MIRRORING").await;
    assert_identical(&s, &d, &first, 3).await;
    assert_identical(&s, &d, &second, 1).await;

    // The source grows while the topic is paused: resuming adds and copies the new partition.
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy.bootstrap, "--pause", "--mirror", &mirror, "--topic", &first]).await;
    assert!(ok, "--pause: {err}");
    s.create_partitions(&first, 4, Duration::from_secs(30)).await.unwrap();
    kafka_harness::wait_topic_ready(&src.bootstrap(), &first, 4, Duration::from_secs(30)).unwrap();
    write(&first, 4, 8);
    // The mirror's sync records the new partition while the topic is paused; nothing is copied.
    wait_rows(&proxy.bootstrap, &mirror, Some(&first), 4, "PAUSED", true).await;
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy.bootstrap, "--resume", "--mirror", &mirror, "--topic", &first]).await;
    assert!(ok, "--resume: {err}");
    wait_state(&proxy.bootstrap, &mirror, 5, "MIRRORING").await;
    assert_identical(&s, &d, &first, 4).await;

    // Metrics show the owner's sync runs.
    let metrics = proxy.scrape().await.expect("metrics");
    let key = format!("kafka_mirror_proxy_mirror_sync_consecutive_failures{{mirror=\"{mirror}\",kind=\"group_offsets\"}}");
    assert_eq!(sample(&metrics, &key), Some(0.0), "{metrics}");
    assert!(metrics.contains(&format!("kafka_mirror_proxy_mirror_sync_last_success_timestamp_seconds{{mirror=\"{mirror}\",kind=\"group_offsets\"}}")));

    // Failover: the group consuming through the proxy continues exactly where it was at the source.
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy.bootstrap, "--remove", "--mirror", &mirror, "--topic", &first]).await;
    assert!(ok, "--remove: {err}");
    let mut member = crate::sync::GroupMember::join(&proxy.bootstrap, &first, &group);
    // Partitions 2 and 3 have no committed offset: they start at the beginning (auto.offset.reset=earliest).
    assert_eq!(member.first_offsets(4), [(0, 7), (1, 13), (2, 0), (3, 0)].into());
    drop(member);
}

/// ACL sync through the control plane: nothing happens while `sync.acls.enabled` is false (the
/// default); once enabled with `--alter`, bindings within `acls.include` are created on the
/// destination; after a SIGKILL and restart of the proxy, a binding deleted at the source is deleted
/// on the destination too (the mirror's record of what it created is kept in `__mirror_state`),
/// while a destination-only binding and one outside the filter stay as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_sync_remembers_what_it_created_across_a_restart() {
    use kafka_mirror_proxy::client::{ANY, AclBinding, AclFilter, PATTERN_LITERAL, PATTERN_PREFIXED, RESOURCE_TOPIC};
    let (src, dst, java) = (authorizing_cluster("acl-ctl-source"), authorizing_cluster("acl-ctl-dest"), java_client());
    let (s, d) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let binding = |pattern_type, name: &str, principal: &str| AclBinding {
        resource_type: RESOURCE_TOPIC,
        resource_name: name.to_owned(),
        pattern_type,
        principal: principal.to_owned(),
        host: "*".to_owned(),
        operation: 3,
        permission_type: 3,
    };
    let (alice, bob, outside, local) = (
        binding(PATTERN_PREFIXED, "orders", "User:alice"),
        binding(PATTERN_LITERAL, "orders.eu", "User:bob"),
        binding(PATTERN_LITERAL, "payments", "User:carol"),
        binding(PATTERN_LITERAL, "orders.local", "User:dave"),
    );
    s.create_acls(&[alice.clone(), bob.clone(), outside.clone()]).await.unwrap();
    d.create_acls(std::slice::from_ref(&local)).await.unwrap();
    java.create_topic(&src.bootstrap(), "orders.eu", 1, 1, &[]).unwrap();

    let mut proxy = ProxyProcess::start(&dst.bootstrap(), "__mirror_state", MEMBERSHIP);
    let mirror = "acl-dr";
    // First without `sync.acls.enabled` (default false), the filter already set.
    let filter = "acls.include=topic:prefixed:orders,topic:literal:orders.eu\nmetadata.refresh.interval.ms=1000\n";
    let config = properties_file(&format!("bootstrap.servers={}\n{filter}", src.bootstrap()));
    let created = poll_until(Duration::from_secs(60), || async {
        cli_async(&["--bootstrap-server", &proxy.bootstrap, "--create", "--mirror", mirror, "--mirror-config", &config]).await.0.then_some(())
    })
    .await;
    assert!(created.is_some(), "--create");
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy.bootstrap, "--add", "--mirror", mirror, "--topic", "orders.eu"]).await;
    assert!(ok, "--add: {err}");
    // Disabled: once the mirror's metadata sync has run twice, the destination still has only its own binding.
    let configs_synced = format!("kafka_mirror_proxy_mirror_sync_last_success_timestamp_seconds{{mirror=\"{mirror}\",kind=\"topic_configs\"}}");
    let last_run = || async { sample(&proxy.scrape().await?, &configs_synced) };
    let first = poll_until(SETTLE, last_run).await.expect("the mirror's sync runs");
    let ran_twice = poll_until(SETTLE, || async { (last_run().await? > first).then_some(()) }).await;
    assert!(ran_twice.is_some(), "the mirror's sync did not run: {:?}", proxy.scrape().await);
    let all = AclFilter { resource_type: ANY, pattern_type: ANY, resource_name: None };
    assert_eq!(d.describe_acls(&all).await.unwrap(), vec![local.clone()], "ACLs synced while sync.acls.enabled is false");
    // Enabled at run time with --alter.
    let enable = properties_file("sync.acls.enabled=true\n");
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy.bootstrap, "--alter", "--mirror", mirror, "--mirror-config", &enable]).await;
    assert!(ok, "--alter: {err}");

    let expect = |want: Vec<AclBinding>| {
        let (d, all) = (&d, all.clone());
        async move {
            let mut want = want;
            want.sort();
            let got = poll_until(SETTLE, || async {
                let mut got = d.describe_acls(&all).await.ok()?;
                got.sort();
                (got == want).then_some(())
            })
            .await;
            assert!(got.is_some(), "destination ACLs are {:?}, expected {want:?}", d.describe_acls(&all).await);
        }
    };
    expect(vec![alice.clone(), bob.clone(), local.clone()]).await;

    // The proxy dies; the source deletes bob's binding meanwhile; the restarted proxy deletes it on
    // the destination, knowing from __mirror_state that the mirror created it.
    proxy.kill();
    s.delete_acls(std::slice::from_ref(&bob)).await.unwrap();
    proxy.restart();
    expect(vec![alice.clone(), local.clone()]).await;
}
