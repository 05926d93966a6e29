//! End to end through the real binaries: `kafka-mirror-proxy` (proxy + control plane) in front of
//! the destination, `kafka-mirrors` talking to it, Kafka's Java clients through the proxy.

use std::time::Duration;

use kafka_harness::{ConsumeOptions, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, source, unique_name};

use crate::binaries::{ProxyProcess, cli, describe, properties_file};
use crate::common::poll_until;

/// Create, add by regex, MIRRORING with lag 0, produce through the proxy refused, remove (writable),
/// a producer through the proxy appends at the next offset, consumers through the proxy read it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirror_lifecycle_through_the_proxy_binary_and_the_cli() {
    let (src, dst, java) = (source(), destination(), java_client());
    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__e2e_state"), "");
    let proxy = proxy_process.bootstrap.clone();
    let prefix = unique_name("e2e");
    let topic = format!("{prefix}.orders");
    java.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
    let lines: Vec<ProduceLine> = (0..20).map(|i| ProducerRecord::to(i % 2).key(format!("k{i}")).value(format!("v{i}")).into()).collect();
    java.produce(&src.bootstrap(), &topic, &JavaProduceOptions { idempotent: true, ..Default::default() }, &lines).unwrap();

    // The proxy answers once its control plane has loaded the state topic.
    let config = properties_file(&format!("bootstrap.servers={}\n", src.bootstrap()));
    let mirror = unique_name("dr");
    let created = poll_until(Duration::from_secs(60), || async {
        let (ok, out, _) = cli(&["--bootstrap-server", &proxy, "--create", "--mirror", &mirror, "--mirror-config", &config]);
        ok.then_some(out)
    })
    .await
    .expect("kafka-mirrors --create through the proxy");
    assert_eq!(created.trim(), format!("Created mirror {mirror}"));
    let (ok, out, err) = cli(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &format!("{}\\..*", regex::escape(&prefix))]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("Added 1 topic(s) to mirror {mirror}: [{topic}]"));

    let caught_up = poll_until(Duration::from_secs(90), || async {
        let rows = describe(&proxy, &mirror).await?;
        (rows.len() == 2 && rows.iter().all(|r| r["state"] == "MIRRORING" && r["lag"] == 0)).then_some(rows)
    })
    .await;
    assert!(caught_up.is_some(), "not MIRRORING with lag 0: {:?}", describe(&proxy, &mirror).await);

    // Read-only through the proxy.
    let one = [ProduceLine::from(ProducerRecord::to(0).key("after").value("failover"))];
    let opts =
        JavaProduceOptions { props: vec![("delivery.timeout.ms".into(), "5000".into()), ("request.timeout.ms".into(), "4000".into())], ..Default::default() };
    let refused = java.produce(&proxy, &topic, &opts, &one);
    assert!(refused.is_err(), "a write to a mirror topic through the proxy succeeded");

    // Failover: stop mirroring; the topic becomes writable and continues at the source's offsets.
    let (ok, out, err) = cli(&["--bootstrap-server", &proxy, "--remove", "--mirror", &mirror, "--topic", &topic]);
    assert!(ok, "{err}");
    assert!(out.contains(&topic), "{out}");
    let landed = poll_until(Duration::from_secs(60), || async { java.produce(&proxy, &topic, &opts, &one).ok() }).await.expect("writable after remove");
    assert_eq!(landed, vec![(0, 10)], "the first write after failover takes the next offset of partition 0");

    let mut expected = java.consume(&src.bootstrap(), &topic, &ConsumeOptions::default()).unwrap();
    let through_proxy = java.consume(&proxy, &topic, &ConsumeOptions::default()).unwrap();
    assert_eq!(through_proxy.len(), expected.len() + 1);
    let new = through_proxy.iter().find(|r| r.partition == 0 && r.offset == 10).expect("the new record").clone();
    expected.push(new);
    expected.sort_by_key(|r| (r.partition, r.offset));
    assert_eq!(through_proxy, expected);
    drop(proxy_process);
}
