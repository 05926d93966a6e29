//! The harness against real brokers: node kill and restart on a 3-node cluster, Kafka 3.9 support, and
//! brokers dying with the process that started them.

#![allow(clippy::disallowed_methods, reason = "synchronous test code: std::time::Instant is right here")]

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kafka_harness::{
    Cluster, ClusterSpec, ConsumeOptions, JavaClient, ProduceLine, ProduceOptions, ProducerRecord, dist, java_client, librdkafka_consume, metadata, unique_name,
};

fn records(partitions: i32, tag: &str) -> Vec<ProduceLine> {
    (0..partitions).map(|p| ProducerRecord::to(p).key(format!("{tag}-{p}")).value(tag).into()).collect()
}

fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn three_node_cluster_survives_kill_and_restart_of_a_node() {
    let cluster = Cluster::start(ClusterSpec::new("kill3").brokers(3)).expect("start 3-node cluster");
    assert_eq!(cluster.node_ids(), vec![0, 1, 2]);
    let bootstrap = cluster.bootstrap();
    let client = java_client();
    let topic = unique_name("kill");
    client.create_topic(&bootstrap, &topic, 3, 3, &[]).expect("create topic");
    let acks_all = ProduceOptions { acks: Some("all".into()), ..Default::default() };
    let before = client.produce(&bootstrap, &topic, &acks_all, &records(3, "before")).expect("produce before kill");
    assert_eq!(before, vec![(0, 0), (1, 0), (2, 0)]);

    let victim = 1;
    let victim_addr = cluster.broker_addrs()[victim as usize].1;
    cluster.kill_broker(victim).expect("kill");
    assert!(TcpStream::connect_timeout(&victim_addr, Duration::from_secs(1)).is_err(), "killed node still listens");

    // Leaders on the dead node move once the controller fences it; the producer retries until then.
    let during = client.produce(&bootstrap, &topic, &acks_all, &records(3, "during")).expect("produce while down");
    assert_eq!(during, vec![(0, 1), (1, 1), (2, 1)]);
    assert_eq!(client.consume(&bootstrap, &topic, &ConsumeOptions::default()).expect("consume").len(), 6);

    cluster.start_broker(victim).expect("restart");
    let victim_bootstrap = victim_addr.to_string();
    eventually("the restarted node back in every ISR", Duration::from_secs(60), || {
        metadata(&victim_bootstrap, Some(&[&topic]), Duration::from_secs(2)).is_ok_and(|md| md.topics[0].partitions.iter().all(|p| p.isr_nodes.len() == 3))
    });
    let read_back = client.consume(&victim_bootstrap, &topic, &ConsumeOptions::default()).expect("consume");
    assert_eq!(read_back.len(), 6);

    let log = std::fs::read_to_string(cluster.log_path(victim).expect("log path")).expect("read log");
    assert_eq!(log.matches("=== kafka-harness: starting").count(), 2, "one start, one restart");
    assert!(log.contains("JVM exited with status 137"), "the kill was a SIGKILL");
}

#[test]
fn kafka_3_9_cluster_with_transactions() {
    let version = "3.9.1";
    let client = JavaClient::new(&dist(version).expect("provision 3.9.1")).expect("compile client for 3.9.1");
    let cluster = Cluster::start(ClusterSpec::new("v39").version(version)).expect("start 3.9.1");
    let bootstrap = cluster.bootstrap();
    let topic = unique_name("txn39");
    client.create_topic(&bootstrap, &topic, 1, 1, &[]).expect("create topic");

    let lines = ProduceLine::commit_then_abort(records(1, "committed-a").into_iter().chain(records(1, "committed-b")), records(1, "aborted"));
    let opts = ProduceOptions { transactional_id: Some(unique_name("txn")), ..Default::default() };
    let placed = client.produce(&bootstrap, &topic, &opts, &lines).expect("transactional produce");
    // Offsets 2 and 4 hold the commit and abort markers.
    assert_eq!(placed, vec![(0, 0), (0, 1), (0, 3)]);

    let committed = ConsumeOptions::read_committed();
    let java = client.consume(&bootstrap, &topic, &committed).expect("java read_committed");
    let rdkafka = librdkafka_consume(&bootstrap, &topic, &committed).expect("librdkafka read_committed");
    assert_eq!(java, rdkafka);
    assert_eq!(java.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![0, 1]);

    let all = client.consume(&bootstrap, &topic, &ConsumeOptions::default()).expect("read_uncommitted");
    assert_eq!(all, librdkafka_consume(&bootstrap, &topic, &ConsumeOptions::default()).expect("librdkafka"));
    assert_eq!(all.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![0, 1, 3]);

    let offsets = client.offsets(&bootstrap, &topic).expect("offsets");
    assert_eq!((offsets[0].latest, offsets[0].last_stable), (5, 5));

    // A graceful stop and restart keeps everything, including the transaction state.
    cluster.stop_broker(0).expect("graceful stop");
    cluster.start_broker(0).expect("restart");
    let again = client.consume(&bootstrap, &topic, &committed).expect("consume after restart");
    assert_eq!(again, java);

    let log = std::fs::read_to_string(cluster.log_path(0).expect("log path")).expect("read log");
    assert!(log.contains("Kafka Server started"), "3.x logging (reload4j) reaches the log file");
    assert!(log.contains("JVM exited with status 143"), "the stop was a SIGTERM");
}

#[test]
fn brokers_die_with_the_process_that_started_them() {
    let mut up = Command::new(env!("CARGO_BIN_EXE_kafka-harness"))
        .args(["up", "--name", "orphan"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn kafka-harness up");
    // Read up to the last line it prints, and keep the pipe open: it must die by the SIGKILL below.
    let mut lines = BufReader::new(up.stdout.take().expect("piped")).lines();
    let mut bootstrap = None;
    for line in lines.by_ref() {
        let line = line.expect("read kafka-harness output");
        if let Some(b) = line.strip_prefix("bootstrap=") {
            bootstrap = Some(b.to_string());
        }
        if line.starts_with("running") {
            break;
        }
    }
    let bootstrap = bootstrap.expect("kafka-harness up printed no bootstrap");
    assert!(metadata(&bootstrap, Some(&[]), Duration::from_secs(2)).is_ok(), "cluster answers");

    assert!(up.try_wait().expect("poll").is_none(), "kafka-harness up exited early");
    up.kill().expect("SIGKILL kafka-harness up");
    let status = up.wait().expect("reap");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    drop(lines);
    let addr = bootstrap.parse().expect("socket address");
    eventually("the orphaned broker to die", Duration::from_secs(15), || TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}
