//! The control plane against real clusters (issue 6): a [`MirrorManager`] on the shared destination,
//! served by an in-test [`AdminServer`] on a loopback port, driven through the `kafka-mirrors`
//! binary exactly as an operator would (until the proxy's listener serves the mirror APIs).

use std::sync::Arc;
use std::time::Duration;

use kafka_harness::{Cluster, JavaClient, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, source, unique_name};
use kafka_mirror_proxy::admin::{AdminHandler, AdminServer, AllowAll};
use kafka_mirror_proxy::client::{IsolationLevel, OffsetSpec};
use kafka_mirror_proxy::mirror::{MirrorManager, MirrorManagerConfig, PartitionState};
use serde_json::Value;

use crate::binaries::properties_file;
use crate::common::{client, poll_until};

/// How long a test waits for mirroring to catch up.
const CATCH_UP: Duration = Duration::from_secs(90);

/// A manager and the server in front of it.
struct ControlPlane {
    manager: Arc<MirrorManager>,
    server: AdminServer,
}

impl ControlPlane {
    async fn start(dst: &Cluster, state_topic: &str) -> Self {
        let config = MirrorManagerConfig {
            state_topic: state_topic.to_owned(),
            stop_wait: Duration::from_secs(60),
            fetch_max_wait: Duration::from_millis(100),
            ..MirrorManagerConfig::default()
        };
        let manager = Arc::new(MirrorManager::start(Arc::new(client(&dst.bootstrap()).await), config).await.expect("manager starts"));
        let server = AdminServer::bind("127.0.0.1:0", AdminHandler::new(manager.clone(), Arc::new(AllowAll))).await.unwrap();
        Self { manager, server }
    }

    fn bootstrap(&self) -> String {
        self.server.local_addr().to_string()
    }

    async fn stop(self) {
        self.server.shutdown().await;
        self.manager.shutdown().await;
    }
}

/// Runs `kafka-mirrors ARGS`; returns (success, stdout, stderr).
async fn cli(args: &[&str]) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-mirrors")).args(&args).output().expect("kafka-mirrors runs");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await
    .unwrap()
}

/// Runs `kafka-mirrors` and asserts it succeeds; returns stdout.
async fn cli_ok(args: &[&str]) -> String {
    let (ok, out, err) = cli(args).await;
    assert!(ok, "kafka-mirrors {args:?} failed: {err}");
    out
}

/// Runs `kafka-mirrors`, asserts it fails with one `Error:` line containing `expected`.
async fn cli_err(args: &[&str], expected: &str) {
    let (ok, _, err) = cli(args).await;
    assert!(!ok, "kafka-mirrors {args:?} succeeded");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("Error: ") && lines[0].contains(expected), "{args:?}: `{err}` lacks `{expected}`");
}

/// `--describe --json` rows of `mirror`.
async fn describe(bootstrap: &str, mirror: &str) -> Vec<Value> {
    let out = cli_ok(&["--bootstrap-server", bootstrap, "--describe", "--mirror", mirror, "--json"]).await;
    match serde_json::from_str::<Value>(out.trim()).unwrap() {
        Value::Array(rows) => rows,
        other => panic!("not an array: {other}"),
    }
}

/// Waits until every partition of `topics` has `state` and lag 0 (or, if `lagging`, some lag).
async fn wait_rows(bootstrap: &str, mirror: &str, topics: &[&str], state: &str, lagging: bool) -> Vec<Value> {
    let mut last = Vec::new();
    let done = poll_until(CATCH_UP, || {
        let bootstrap = bootstrap.to_owned();
        async move {
            let rows = describe(&bootstrap, mirror).await;
            let mine: Vec<&Value> = rows.iter().filter(|r| topics.contains(&r["topic"].as_str().unwrap())).collect();
            for r in &mine {
                assert_ne!(r["state"], "FAILED", "{r}");
            }
            let ok = !mine.is_empty()
                && mine.iter().all(|r| r["state"] == state)
                && if lagging { mine.iter().any(|r| r["lag"].as_i64() > Some(0)) } else { mine.iter().all(|r| r["lag"] == 0) };
            ok.then_some(rows)
        }
    })
    .await;
    if let Some(rows) = done {
        return rows;
    }
    last.extend(describe(bootstrap, mirror).await);
    panic!("{topics:?} did not reach {state} (lagging: {lagging}): {last:?}");
}

fn produce(java: &JavaClient, cluster: &Cluster, topic: &str, partitions: i32, n: usize, tag: &str) {
    let lines: Vec<ProduceLine> = (0..n).map(|i| ProducerRecord::to((i as i32) % partitions).key(format!("{tag}-{i}")).value(format!("v{i}")).into()).collect();
    java.produce(&cluster.bootstrap(), topic, &JavaProduceOptions::default(), &lines).unwrap();
}

/// The whole lifecycle through the CLI: create, add by regex, MIRRORING with lag 0, pause (lag
/// grows, still read-only), resume, a restart of the control plane, remove (writable; the next
/// write lands at the next offset), delete; and each operator error as one clear line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_through_the_cli() {
    let (src, dst, java) = (source(), destination(), java_client());
    let prefix = unique_name("ctl");
    let (t1, t2) = (format!("{prefix}-a"), format!("{prefix}-b"));
    java.create_topic(&src.bootstrap(), &t1, 2, 1, &[]).unwrap();
    java.create_topic(&src.bootstrap(), &t2, 1, 1, &[]).unwrap();
    produce(java, src, &t1, 2, 20, "before");
    produce(java, src, &t2, 1, 7, "before");

    let state_topic = unique_name("__mirror_state_it");
    let plane = ControlPlane::start(dst, &state_topic).await;
    let bs = plane.bootstrap();
    let bs = bs.as_str();
    let mirror = unique_name("dr");
    let config = properties_file(&format!("# the source\nbootstrap.servers={}\n", src.bootstrap()));

    // Create, and the errors around it.
    let out = cli_ok(&["--bootstrap-server", bs, "--create", "--mirror", &mirror, "--mirror-config", &config]).await;
    assert_eq!(out.trim(), format!("Created mirror {mirror}"));
    cli_err(&["--bootstrap-server", bs, "--create", "--mirror", &mirror, "--mirror-config", &config], "already exists").await;
    cli_err(&["--bootstrap-server", bs, "--create", "--mirror", "dr.removed", "--mirror-config", &config], "reserved suffix `.removed`").await;
    cli_err(&["--bootstrap-server", bs, "--create", "--mirror", "dr.paused", "--mirror-config", &config], "reserved suffix `.paused`").await;
    cli_err(&["--bootstrap-server", bs, "--create", "--mirror", "d r", "--mirror-config", &config], "contains ` `").await;
    let unknown = properties_file(&format!("bootstrap.servers={}\nno.such.setting=1\n", src.bootstrap()));
    cli_err(&["--bootstrap-server", bs, "--create", "--mirror", "x", "--mirror-config", &unknown], "`no.such.setting`").await;
    let unreachable = properties_file("bootstrap.servers=127.0.0.1:1\n");
    cli_err(&["--bootstrap-server", bs, "--create", "--mirror", "x", "--mirror-config", &unreachable], "cannot be reached").await;
    cli_err(&["--bootstrap-server", &dst.bootstrap(), "--list"], "does not serve the mirror APIs").await;

    // Add by regex: read-only from that moment on.
    let pattern = format!("{prefix}-.*");
    let out = cli_ok(&["--bootstrap-server", bs, "--add", "--mirror", &mirror, "--topic", &pattern]).await;
    assert_eq!(out.trim(), format!("Added 2 topic(s) to mirror {mirror}: [{t1}, {t2}]"));
    let lookup = plane.manager.lookup();
    assert!(lookup.is_read_only(&t1) && lookup.is_read_only(&t2));
    assert_eq!(lookup.mirrored_topic(&t1).unwrap().mirror, mirror);
    cli_err(&["--bootstrap-server", bs, "--add", "--mirror", &mirror, "--topic", "(["], "not a valid regular expression").await;
    cli_err(&["--bootstrap-server", bs, "--add", "--mirror", "no-such-mirror", "--topic", &t1], "does not exist").await;
    cli_err(&["--bootstrap-server", bs, "--add", "--mirror", &mirror, "--topic", &unique_name("absent")], "no topic of the source").await;
    let other = unique_name("dr-other");
    cli_ok(&["--bootstrap-server", bs, "--create", "--mirror", &other, "--mirror-config", &config]).await;
    cli_err(&["--bootstrap-server", bs, "--add", "--mirror", &other, "--topic", &t1], &format!("already in mirror `{mirror}`")).await;

    let list = cli_ok(&["--bootstrap-server", bs, "--list"]).await;
    let header = list.lines().next().unwrap();
    assert!(header.starts_with("MIRROR") && header.contains("TOPICS") && header.contains("CLUSTER-ID") && header.contains("BOOTSTRAP-SERVER"), "{list}");
    let row = list.lines().find(|l| l.starts_with(&mirror)).unwrap();
    assert_eq!(row.split_whitespace().nth(1), Some("2"), "{list}");
    assert_eq!(row.find(&src.bootstrap()), header.find("BOOTSTRAP-SERVER"), "aligned columns:\n{list}");

    wait_rows(bs, &mirror, &[&t1, &t2], "MIRRORING", false).await;
    let table = cli_ok(&["--bootstrap-server", bs, "--describe", "--mirror", &mirror]).await;
    assert!(table.lines().next().unwrap().split_whitespace().eq(["MIRROR", "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG", "STATE"]));
    assert_eq!(table.lines().count(), 4, "one row per partition:\n{table}");

    // Pause: lag grows while the source is written, still read-only. Resume catches up.
    let out = cli_ok(&["--bootstrap-server", bs, "--pause", "--mirror", &mirror, "--topic", &t1]).await;
    assert_eq!(out.trim(), format!("Paused mirroring for 1 topic(s) in mirror {mirror}: [{t1}]"));
    cli_err(&["--bootstrap-server", bs, "--pause", "--mirror", &mirror, "--topic", &t1], "already paused").await;
    cli_err(&["--bootstrap-server", bs, "--resume", "--mirror", &mirror, "--topic", &t2], "is not paused").await;
    produce(java, src, &t1, 2, 10, "paused");
    let rows = wait_rows(bs, &mirror, &[&t1], "PAUSED", true).await;
    let lag: i64 = rows.iter().filter(|r| r["topic"] == t1.as_str()).map(|r| r["lag"].as_i64().unwrap()).sum();
    assert_eq!(lag, 10);
    assert!(lookup.is_read_only(&t1));
    let out = cli_ok(&["--bootstrap-server", bs, "--resume", "--mirror", &mirror, "--topic", &t1]).await;
    assert_eq!(out.trim(), format!("Resumed mirroring for 1 topic(s) in mirror {mirror}: [{t1}]"));
    wait_rows(bs, &mirror, &[&t1, &t2], "MIRRORING", false).await;

    // Restart the control plane: the state comes back from __mirror_state and mirroring goes on.
    plane.stop().await;
    produce(java, src, &t2, 1, 5, "restart");
    let plane = ControlPlane::start(dst, &state_topic).await;
    let bs = plane.bootstrap();
    let bs = bs.as_str();
    let lookup = plane.manager.lookup();
    assert!(lookup.is_read_only(&t1) && lookup.is_read_only(&t2));
    wait_rows(bs, &mirror, &[&t1, &t2], "MIRRORING", false).await;

    // Remove: STOPPED and writable; a producer appends at the next offset.
    cli_err(&["--bootstrap-server", bs, "--delete", "--mirror", &mirror], "not STOPPED").await;
    let out = cli_ok(&["--bootstrap-server", bs, "--remove", "--mirror", &mirror, "--topic", &t1]).await;
    assert_eq!(out.trim(), format!("Removed 1 topic(s) from mirror {mirror}: [{t1}]"));
    assert_eq!(lookup.mirrored_topic(&t1).unwrap().state, PartitionState::Stopped);
    assert!(!lookup.is_read_only(&t1));
    let rows = describe(bs, &mirror).await;
    assert!(rows.iter().filter(|r| r["topic"] == t1.as_str()).all(|r| r["state"] == "STOPPED"), "{rows:?}");
    let d = client(&dst.bootstrap()).await;
    let end = d.list_offset(&t1, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let s = client(&src.bootstrap()).await;
    assert_eq!(end, s.list_offset(&t1, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap());
    let written = java.produce(&dst.bootstrap(), &t1, &JavaProduceOptions::default(), &[ProducerRecord::to(0).value("after-failover").into()]).unwrap();
    assert_eq!(written, vec![(0, end)]);
    cli_err(&["--bootstrap-server", bs, "--remove", "--mirror", &mirror, "--topic", &t1], "no topic of mirror").await;

    // Delete: only once every topic is STOPPED.
    cli_ok(&["--bootstrap-server", bs, "--remove", "--mirror", &mirror, "--topic", &t2]).await;
    let out = cli_ok(&["--bootstrap-server", bs, "--delete", "--mirror", &mirror]).await;
    assert_eq!(out.trim(), format!("Deleted mirror {mirror}"));
    cli_err(&["--bootstrap-server", bs, "--describe", "--mirror", &mirror], "does not exist").await;
    assert!(lookup.mirrored_topic(&t1).is_none());
    cli_ok(&["--bootstrap-server", bs, "--delete", "--mirror", &other]).await;
    plane.stop().await;

    // The state topic's segment decodes offline.
    if let Some(dir) = dst.dir() {
        let segment = find_segment(dir, &format!("{state_topic}-0")).expect("state topic segment");
        let dump = cli_ok(&["--dump-state", "--files", &segment]).await;
        assert!(dump.contains(&format!("\"type\":\"mirror\",\"mirror\":\"{mirror}\"")), "{dump}");
        assert!(dump.contains("\"state\":\"STOPPED\""), "{dump}");
        assert!(dump.contains("\"goal\":\"STOPPED\""), "{dump}");
    }
}

fn find_segment(dir: &std::path::Path, partition_dir: &str) -> Option<String> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == partition_dir) {
                let log = path.join("00000000000000000000.log");
                return log.exists().then(|| log.to_string_lossy().into_owned());
            }
            if let Some(found) = find_segment(&path, partition_dir) {
                return Some(found);
            }
        }
    }
    None
}

/// STOPPING aborts a mirrored transaction left open: with read_uncommitted copying, a source
/// transaction that never ends is copied open; once the topic is removed, the destination has no
/// open transaction and its last stable offset reaches its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_aborts_open_mirrored_transactions() {
    let (src, dst, java) = (source(), destination(), java_client());
    let topic = unique_name("ctl-open-txn");
    java.create_topic(&src.bootstrap(), &topic, 1, 1, &[]).unwrap();
    produce(java, src, &topic, 1, 3, "plain");
    let txn = JavaProduceOptions { transactional_id: Some(unique_name("open")), ..Default::default() };
    let lines = vec![ProduceLine::Begin, ProducerRecord::to(0).value("open-1").into(), ProducerRecord::to(0).value("open-2").into(), ProduceLine::Halt];
    java.produce(&src.bootstrap(), &topic, &txn, &lines).unwrap();

    let plane = ControlPlane::start(dst, &unique_name("__mirror_state_it")).await;
    let mirror = unique_name("uncommitted");
    let props = [("bootstrap.servers".to_owned(), src.bootstrap()), ("mirror.isolation.level".to_owned(), "read_uncommitted".to_owned())];
    plane.manager.create_mirror(&mirror, props.into_iter().collect(), false).await.unwrap();
    let added = plane.manager.add_topics(&mirror, std::slice::from_ref(&topic), &[], -1).await.unwrap();
    assert!(added.iter().all(|(_, r)| r.is_ok()), "{added:?}");

    let d = client(&dst.bootstrap()).await;
    let s = client(&src.bootstrap()).await;
    let source_end = s.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let copied = poll_until(CATCH_UP, || async {
        let end = d.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.ok()?;
        (end == source_end).then_some(())
    })
    .await;
    assert!(copied.is_some(), "the open transaction was not copied");
    let open = d.describe_producers(&topic, 0).await.unwrap();
    assert!(open.iter().any(|p| p.current_txn_start_offset >= 0), "copied transaction should be open: {open:?}");

    let removed = plane.manager.remove_topics(&mirror, std::slice::from_ref(&topic)).await.unwrap();
    assert!(removed.iter().all(|(_, r)| r.is_ok()), "{removed:?}");
    assert!(!plane.manager.lookup().is_read_only(&topic));
    let producers = d.describe_producers(&topic, 0).await.unwrap();
    assert!(producers.iter().all(|p| p.current_txn_start_offset == -1), "{producers:?}");
    let end = d.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap();
    let stable = d.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadCommitted).await.unwrap();
    assert_eq!(stable, end, "the abort marker must release the LSO");
    assert_eq!(end, source_end + 1, "one ABORT marker after the copied data");
    plane.manager.delete_mirror(&mirror).await.unwrap();
    plane.stop().await;
}
