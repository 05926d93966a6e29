//! Running it in production (issue 24), through the real binaries: bandwidth control on both sides
//! (`mirror.replication.throttled.rate` and `.replicas`, a source client quota on the documented
//! fetch client id) and the metrics an operator alerts on.
//!
//! Rates are measured from the destination's end offsets and printed; the assertions only take
//! wide bounds (this machine's two cores are shared with the brokers), never a timing of their own.

#![allow(clippy::print_stderr, reason = "the measured rates are reported for the record (issue 24 asks for the figures)")]

use std::time::Duration;

use kafka_harness::{destination, java_client, source, unique_name};
use kafka_mirror_proxy::client::{Client, IsolationLevel, OffsetSpec};

use crate::binaries::{ProxyProcess, cli_async, describe, properties_file, sample};
use crate::common::{client, fetch_all_batches, payloads, poll_until};
use crate::proxy::{blocking, kafka_tool, run};

/// Bytes of each produced record's value.
const RECORD_BYTES: usize = 1000;

/// Writes `records` records of [`RECORD_BYTES`] (uncompressed) spread over `topic`'s partitions
/// with Kafka's own producer performance tool.
async fn fill(bootstrap: &str, topic: &str, records: usize) {
    let (b, t) = (bootstrap.to_owned(), topic.to_owned());
    let (ok, stdout, stderr) = blocking(move || {
        let props = format!("bootstrap.servers={b}");
        let cmd = kafka_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            &[
                "--topic",
                &t,
                "--num-records",
                &records.to_string(),
                "--throughput",
                "-1",
                "--record-size",
                &RECORD_BYTES.to_string(),
                "--producer-props",
                &props,
                "acks=1",
                "compression.type=none",
                "linger.ms=5",
            ],
        );
        run(cmd, Duration::from_secs(240))
    })
    .await;
    assert!(ok, "ProducerPerformance:\n{stdout}\n{stderr}");
}

/// The end offsets of `topic`'s partitions `0..partitions`, read_uncommitted.
async fn ends(c: &Client, topic: &str, partitions: i32) -> Vec<i64> {
    let all: Vec<i32> = (0..partitions).collect();
    let ends = c.list_offsets(topic, &all, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.unwrap_or_default();
    all.iter().map(|p| ends.get(p).copied().unwrap_or(0)).collect()
}

/// Records copied per second into `topic` over `window`, from its end offsets on `dst`.
async fn copy_rate(dst: &Client, topic: &str, partitions: i32, window: Duration) -> f64 {
    let before: i64 = ends(dst, topic, partitions).await.iter().sum();
    let start = std::time::Instant::now();
    tokio::time::sleep(window).await;
    let after: i64 = ends(dst, topic, partitions).await.iter().sum();
    (after - before) as f64 / start.elapsed().as_secs_f64()
}

/// Polls until the destination has at least `records` records in `topic`.
async fn wait_copied(dst: &Client, topic: &str, partitions: i32, records: i64) {
    let reached = poll_until(Duration::from_secs(120), || async { (ends(dst, topic, partitions).await.iter().sum::<i64>() >= records).then_some(()) }).await;
    assert!(reached.is_some(), "{topic}: fewer than {records} records copied: {:?}", ends(dst, topic, partitions).await);
}

/// Record data bytes per record on the source, and asserts the destination holds the same batches
/// (offsets, record counts, bytes) in every partition of `topic`.
async fn assert_exact(src: &Client, dst: &Client, topic: &str, partitions: i32) -> f64 {
    let (mut bytes, mut records) = (0usize, 0i64);
    for p in 0..partitions {
        let (a, b) = (fetch_all_batches(src, topic, p).await, fetch_all_batches(dst, topic, p).await);
        assert_eq!(payloads(&a), payloads(&b), "{topic}-{p} differs");
        bytes += a.iter().map(|b| b.size_in_bytes()).sum::<usize>();
        records += a.iter().map(|b| i64::from(b.records_count())).sum::<i64>();
    }
    bytes as f64 / records.max(1) as f64
}

async fn cli_ok(args: &[&str]) -> String {
    let (ok, out, err) = cli_async(args).await;
    assert!(ok, "kafka-mirrors {args:?}: {err}");
    out
}

/// Creates `mirror` from the shared source with `extra` settings, once the proxy answers.
pub(crate) async fn create_mirror(proxy: &str, mirror: &str, extra: &str) {
    let config = properties_file(&format!("bootstrap.servers={}\n{extra}", source().bootstrap()));
    let created = poll_until(Duration::from_secs(60), || async {
        let (ok, out, _) = cli_async(&["--bootstrap-server", proxy, "--create", "--mirror", mirror, "--mirror-config", &config]).await;
        ok.then_some(out)
    })
    .await;
    assert!(created.is_some(), "kafka-mirrors --create {mirror}");
}

async fn alter(proxy: &str, mirror: &str, set: &str) {
    let file = properties_file(set);
    cli_ok(&["--bootstrap-server", proxy, "--alter", "--mirror", mirror, "--mirror-config", &file]).await;
}

/// `mirror.replication.throttled.rate` set at `--create` holds the copy to its rate, `--alter`
/// changes it while copying, `--delete-config` lifts it, and the copy is exact; then a
/// `mirror.replication.throttled.replicas` list throttles only its partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_destination_throttle_follows_the_mirror_settings() {
    let (src, dst, java) = (source(), destination(), java_client());
    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__ops_state"), "");
    let proxy = proxy_process.bootstrap.clone();
    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let mirror = unique_name("throttled");
    const MB: f64 = 1_000_000.0;

    // Part 1: the rate, altered and removed while copying.
    let topic = unique_name("throttled-rate");
    const RECORDS: usize = 36_000;
    java.create_topic(&src.bootstrap(), &topic, 4, 1, &[]).unwrap();
    fill(&src.bootstrap(), &topic, RECORDS).await;
    create_mirror(&proxy, &mirror, "mirror.replication.throttled.rate=1000000\n").await;
    cli_ok(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &topic]).await;
    wait_copied(&dst_client, &topic, 4, 500).await;
    // Records per second first; bytes per record are known exactly once the copy is compared.
    let at_1 = copy_rate(&dst_client, &topic, 4, Duration::from_secs(8)).await;
    alter(&proxy, &mirror, "mirror.replication.throttled.rate=4000000\n").await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // "within a second" of the alter
    let at_4 = copy_rate(&dst_client, &topic, 4, Duration::from_secs(3)).await;
    let copied_before_lift: i64 = ends(&dst_client, &topic, 4).await.iter().sum();
    assert!(copied_before_lift < RECORDS as i64 * 9 / 10, "the throttled copy ran ahead: {copied_before_lift} of {RECORDS}");
    cli_ok(&["--bootstrap-server", &proxy, "--alter", "--mirror", &mirror, "--delete-config", "mirror.replication.throttled.rate"]).await;
    let lifted_from = std::time::Instant::now();
    wait_copied(&dst_client, &topic, 4, RECORDS as i64).await;
    let lifted = (RECORDS as i64 - copied_before_lift) as f64 / lifted_from.elapsed().as_secs_f64();
    let per_record = assert_exact(&src_client, &dst_client, &topic, 4).await;
    let (at_1, at_4, lifted) = (at_1 * per_record, at_4 * per_record, lifted * per_record);
    eprintln!(
        "throttle: 1 MB/s -> {:.3} MB/s, 4 MB/s -> {:.3} MB/s, lifted -> {:.1} MB/s ({per_record:.1} bytes per record)",
        at_1 / MB,
        at_4 / MB,
        lifted / MB
    );
    assert!((0.5 * MB..=1.5 * MB).contains(&at_1), "at 1 MB/s the copy ran at {:.3} MB/s", at_1 / MB);
    assert!((2.0 * MB..=6.0 * MB).contains(&at_4), "at 4 MB/s the copy ran at {:.3} MB/s", at_4 / MB);
    assert!(lifted > 6.0 * MB, "with the rate removed the copy ran at {:.3} MB/s", lifted / MB);

    // Part 2: only the listed partitions are throttled.
    let listed = unique_name("throttled-list");
    java.create_topic(&src.bootstrap(), &listed, 2, 1, &[]).unwrap();
    fill(&src.bootstrap(), &listed, 6_000).await;
    let source_ends = ends(&src_client, &listed, 2).await;
    alter(&proxy, &mirror, &format!("mirror.replication.throttled.rate=300000\nmirror.replication.throttled.replicas={listed}:0\n")).await;
    cli_ok(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &listed]).await;
    let free_done = poll_until(Duration::from_secs(60), || async {
        let now = ends(&dst_client, &listed, 2).await;
        (now[1] == source_ends[1]).then_some(now)
    })
    .await
    .expect("the partition left out of the list is copied");
    eprintln!("throttled.replicas: partition 1 (not listed) done while partition 0 (listed) had {} of {}", free_done[0], source_ends[0]);
    assert!(free_done[0] < source_ends[0] / 2, "the listed partition was not held back: {} of {}", free_done[0], source_ends[0]);
    cli_ok(&["--bootstrap-server", &proxy, "--alter", "--mirror", &mirror, "--delete-config", "mirror.replication.throttled.replicas"]).await;
    cli_ok(&["--bootstrap-server", &proxy, "--alter", "--mirror", &mirror, "--delete-config", "mirror.replication.throttled.rate"]).await;
    wait_copied(&dst_client, &listed, 2, source_ends.iter().sum()).await;
    assert_exact(&src_client, &dst_client, &listed, 2).await;

    let rows = describe(&proxy, &mirror).await.expect("describe");
    assert!(rows.iter().all(|r| r["state"] == "MIRRORING"), "{rows:?}");
    drop(proxy_process);
}

/// The proxy-wide ceiling (`mirrors.replication_throttled_rate` in proxy.yaml) holds a mirror whose
/// own rate is higher to the ceiling, and the copy stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_wide_ceiling_caps_a_faster_mirror() {
    let (src, dst, java) = (source(), destination(), java_client());
    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__ceiling_state"), "  replication_throttled_rate: 1000000\n");
    let proxy = proxy_process.bootstrap.clone();
    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    const MB: f64 = 1_000_000.0;
    const RECORDS: usize = 14_000;
    let topic = unique_name("ceiling");
    java.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
    fill(&src.bootstrap(), &topic, RECORDS).await;
    let mirror = unique_name("ceiling");
    create_mirror(&proxy, &mirror, "mirror.replication.throttled.rate=4000000\n").await;
    cli_ok(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &topic]).await;
    wait_copied(&dst_client, &topic, 2, 500).await;
    let rate = copy_rate(&dst_client, &topic, 2, Duration::from_secs(5)).await;
    let copied: i64 = ends(&dst_client, &topic, 2).await.iter().sum();
    assert!(copied < RECORDS as i64 * 9 / 10, "the capped copy ran ahead: {copied} of {RECORDS}");
    wait_copied(&dst_client, &topic, 2, RECORDS as i64).await;
    let rate = rate * assert_exact(&src_client, &dst_client, &topic, 2).await;
    eprintln!("ceiling 1 MB/s, mirror 4 MB/s -> {:.3} MB/s", rate / MB);
    assert!((0.5 * MB..=1.5 * MB).contains(&rate), "under a 1 MB/s ceiling the copy ran at {:.3} MB/s", rate / MB);
}

/// A source client quota on the documented fetch client id slows the copy, and the proxy's
/// fetch loop reports the broker's `throttle_time_ms` as source throttle time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_client_quota_on_the_fetch_client_id_throttles_the_copy() {
    let (src, dst, java) = (source(), destination(), java_client());
    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__quota_state"), "  num_replica_fetchers: 1\n");
    let proxy = proxy_process.bootstrap.clone();
    let (src_client, dst_client) = (client(&src.bootstrap()).await, client(&dst.bootstrap()).await);
    let (mirror, client_id) = (unique_name("quota"), unique_name("quota-client"));
    // `<client.id>-<instance>-fetcher-<n>`: the instance is the proxy's advertised host:port.
    let fetch_client_id = format!("{client_id}-{}-fetcher-0", proxy.replace(':', "_"));
    let src_bootstrap = src.bootstrap();
    let (b, id) = (src_bootstrap.clone(), fetch_client_id.clone());
    let (ok, stdout, stderr) = blocking(move || {
        run(
            kafka_tool(
                "org.apache.kafka.tools.ConfigCommand",
                &["--bootstrap-server", &b, "--alter", "--entity-type", "clients", "--entity-name", &id, "--add-config", "consumer_byte_rate=400000"],
            ),
            Duration::from_secs(120),
        )
    })
    .await;
    assert!(ok, "kafka-configs --entity-type clients:\n{stdout}\n{stderr}");

    let topic = unique_name("quota");
    const RECORDS: usize = 8_000;
    java.create_topic(&src_bootstrap, &topic, 2, 1, &[]).unwrap();
    fill(&src_bootstrap, &topic, RECORDS).await;
    create_mirror(&proxy, &mirror, &format!("client.id={client_id}\nfetch.max.bytes=65536\n")).await;
    cli_ok(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &topic]).await;
    wait_copied(&dst_client, &topic, 2, 500).await;
    let rate = copy_rate(&dst_client, &topic, 2, Duration::from_secs(6)).await;
    let metrics = proxy_process.scrape().await.expect("metrics");
    let throttled = sample(&metrics, &format!("kafka_mirror_proxy_mirror_throttle_seconds_total{{mirror=\"{mirror}\",side=\"source\"}}")).unwrap_or(0.0);

    // Lifting the quota lets the copy finish; it is exact.
    let (b, id) = (src_bootstrap.clone(), fetch_client_id.clone());
    let (ok, stdout, stderr) = blocking(move || {
        run(
            kafka_tool(
                "org.apache.kafka.tools.ConfigCommand",
                &["--bootstrap-server", &b, "--alter", "--entity-type", "clients", "--entity-name", &id, "--delete-config", "consumer_byte_rate"],
            ),
            Duration::from_secs(120),
        )
    })
    .await;
    assert!(ok, "kafka-configs --delete-config:\n{stdout}\n{stderr}");
    wait_copied(&dst_client, &topic, 2, RECORDS as i64).await;
    let rate = rate * assert_exact(&src_client, &dst_client, &topic, 2).await;
    eprintln!("source quota 400000 bytes/s on {fetch_client_id}: copy at {rate:.0} bytes/s, source throttle {throttled:.1} s");
    assert!((100_000.0..=800_000.0).contains(&rate), "under a 400 kB/s quota the copy ran at {rate:.0} bytes/s");
    assert!(throttled > 0.0, "no source throttle time reported:\n{metrics}");
    drop(proxy_process);
}

/// The value of `name{labels}` in `exposition`, or 0.
fn value(exposition: &str, name_and_labels: &str) -> f64 {
    sample(exposition, name_and_labels).unwrap_or(0.0)
}

/// Metric names the exposition declares (`# TYPE` lines), with the sample names of histograms.
fn exported_names(exposition: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let Some((name, kind)) = rest.split_once(' ') else { continue };
        names.insert(name.to_owned());
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names
}

/// Every `kafka_mirror_proxy_…` name in a file of `docker/`.
fn names_in(file: &str) -> (String, std::collections::BTreeSet<String>) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docker").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let names = regex::Regex::new("kafka_mirror_proxy_[a-z_]+").unwrap().find_iter(&text).map(|m| m.as_str().to_owned()).collect();
    (text, names)
}

fn parses_as_yaml(file: &str, text: &str) {
    let parsed = config::Config::builder().add_source(config::File::from_str(text, config::FileFormat::Yaml)).build();
    assert!(parsed.is_ok(), "docker/{file} does not parse as YAML: {parsed:?}");
}

/// The metrics of spec §10 are exported and move while a throttled mirror copies (lag in records
/// and in time, records and bytes copied, fetch and produce latency, throttle time and rate,
/// partition states, sync runs, state apply lag), a FAILED partition is counted by its reason's
/// class; and every metric the Grafana dashboard and the alert rules of `docker/` query is one the
/// running proxy exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_an_operator_alerts_on_move_and_the_dashboard_queries_only_them() {
    let (src, dst, java) = (source(), destination(), java_client());
    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__metrics_state"), "");
    let proxy = proxy_process.bootstrap.clone();
    let dst_client = client(&dst.bootstrap()).await;
    let mirror = unique_name("observed");
    let topic = unique_name("observed");
    const RECORDS: usize = 6_000;
    java.create_topic(&src.bootstrap(), &topic, 2, 1, &[]).unwrap();
    fill(&src.bootstrap(), &topic, RECORDS).await;
    create_mirror(&proxy, &mirror, "mirror.replication.throttled.rate=2000000\nmetadata.refresh.interval.ms=1000\nsync.group.offsets.interval.ms=1000\n").await;
    cli_ok(&["--bootstrap-server", &proxy, "--add", "--mirror", &mirror, "--topic", &topic]).await;
    let m = format!("mirror=\"{mirror}\"");
    let partition_labels = |p: i32| format!("{{{m},topic=\"{topic}\",partition=\"{p}\"}}");

    // While the throttled copy runs: lag in records and in time.
    let lagging = poll_until(Duration::from_secs(60), || async {
        let page = proxy_process.scrape().await?;
        let lag = value(&page, &format!("kafka_mirror_proxy_mirror_partition_lag_records{}", partition_labels(0)));
        let seconds = value(&page, &format!("kafka_mirror_proxy_mirror_partition_lag_seconds{}", partition_labels(0)));
        (lag > 0.0 && value(&page, &format!("kafka_mirror_proxy_mirror_copied_records_total{{{m}}}")) > 0.0).then_some((lag, seconds, page))
    })
    .await;
    let (lag, lag_seconds, during) = lagging.expect("a partition lagging while records are copied");
    eprintln!("while copying: partition 0 lags {lag} records, {lag_seconds} s");
    assert!(value(&during, &format!("kafka_mirror_proxy_mirror_throttle_rate_bytes{{{m}}}")) == 2_000_000.0, "{during}");

    wait_copied(&dst_client, &topic, 2, RECORDS as i64).await;
    let after = poll_until(Duration::from_secs(60), || async {
        let page = proxy_process.scrape().await?;
        let caught_up = (0..2).all(|p| value(&page, &format!("kafka_mirror_proxy_mirror_partition_lag_records{}", partition_labels(p))) == 0.0);
        let synced = value(&page, &format!("kafka_mirror_proxy_mirror_sync_runs_total{{{m},kind=\"group_offsets\"}}")) > 0.0;
        (caught_up && synced).then_some(page)
    })
    .await
    .expect("caught up, and the group offset sync ran");
    assert_eq!(value(&after, &format!("kafka_mirror_proxy_mirror_copied_records_total{{{m}}}")), RECORDS as f64, "{after}");
    assert!(value(&after, &format!("kafka_mirror_proxy_mirror_copied_bytes_total{{{m}}}")) > (RECORDS * RECORD_BYTES) as f64, "{after}");
    for p in 0..2 {
        assert_eq!(value(&after, &format!("kafka_mirror_proxy_mirror_partition_lag_seconds{}", partition_labels(p))), 0.0, "{after}");
    }
    assert!(value(&after, &format!("kafka_mirror_proxy_mirror_fetch_duration_seconds_count{{{m}}}")) > 0.0, "{after}");
    assert!(value(&after, &format!("kafka_mirror_proxy_mirror_produce_duration_seconds_count{{{m}}}")) > 0.0, "{after}");
    assert!(value(&after, &format!("kafka_mirror_proxy_mirror_throttle_seconds_total{{{m},side=\"destination\"}}")) > 0.5, "{after}");
    assert_eq!(value(&after, &format!("kafka_mirror_proxy_mirror_partitions{{{m},state=\"MIRRORING\"}}")), 2.0, "{after}");
    assert_eq!(value(&after, "kafka_mirror_proxy_mirror_group_member"), 1.0, "{after}");
    assert!(sample(&after, "kafka_mirror_proxy_mirror_state_apply_lag_records").is_some(), "{after}");
    assert!(sample(&after, &format!("kafka_mirror_proxy_mirror_sync_failures_total{{{m},kind=\"group_offsets\"}}")).is_some(), "{after}");

    // A record written straight to the destination partition (around the proxy): the next source
    // record diverges, the partition goes FAILED, counted by its reason's class.
    let one = [kafka_harness::ProduceLine::from(kafka_harness::ProducerRecord::to(1).key("intruder").value("x"))];
    java.produce(&dst.bootstrap(), &topic, &kafka_harness::ProduceOptions::default(), &one).unwrap();
    let source_one = [kafka_harness::ProduceLine::from(kafka_harness::ProducerRecord::to(1).key("next").value("y"))];
    java.produce(&src.bootstrap(), &topic, &kafka_harness::ProduceOptions::default(), &source_one).unwrap();
    let failed = poll_until(Duration::from_secs(60), || async {
        let page = proxy_process.scrape().await?;
        (value(&page, &format!("kafka_mirror_proxy_mirror_failed_partitions{{{m},reason=\"divergence\"}}")) == 1.0).then_some(page)
    })
    .await;
    assert!(failed.is_some(), "no FAILED partition counted as divergence: {:?}", describe(&proxy, &mirror).await);
    let page = failed.unwrap_or_default();
    assert_eq!(value(&page, &format!("kafka_mirror_proxy_mirror_partitions{{{m},state=\"FAILED\"}}")), 1.0, "{page}");

    // The dashboard and the alert rules query only what the proxy exports; the files parse.
    let exported = exported_names(&page);
    let (dashboard, dashboard_names) = names_in("grafana/dashboards/kafka-mirror-proxy.json");
    serde_json::from_str::<serde_json::Value>(&dashboard).expect("the dashboard is JSON");
    let (alerts, alert_names) = names_in("prometheus/alerts.yml");
    parses_as_yaml("prometheus/alerts.yml", &alerts);
    assert!(dashboard_names.len() >= 15 && !alert_names.is_empty(), "{dashboard_names:?} {alert_names:?}");
    let missing: Vec<&String> = dashboard_names.iter().chain(&alert_names).filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}\nexported: {exported:?}");
    for file in [
        "compose.yaml",
        "prometheus/prometheus.yml",
        "grafana/provisioning/datasources/prometheus.yml",
        "grafana/provisioning/dashboards/kafka-mirror-proxy.yml",
    ] {
        let (text, _) = names_in(file);
        parses_as_yaml(file, &text);
    }
    // The proxy configuration compose mounts is one the binary accepts.
    let compose_config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/proxy.compose.yaml");
    let loaded = kafka_mirror_proxy::proxy::config::ConfigSource::from_file_and_process_env(&compose_config).load();
    assert!(loaded.is_ok(), "docker/proxy.compose.yaml: {:?}", loaded.err());
    drop(proxy_process);
}

/// The replication factor of every partition of `topic` on `dst`, once the topic has `partitions`
/// partitions there.
async fn replication_factors(dst: &Client, topic: &str, partitions: usize) -> Option<Vec<usize>> {
    poll_until(Duration::from_secs(90), || async {
        let metadata = dst.refresh_metadata(&[topic]).await.ok()?;
        let info = metadata.topics.get(topic)?;
        (info.partitions.len() == partitions).then(|| info.partitions.iter().map(|p| p.replicas.len()).collect())
    })
    .await
}

/// `kafka-mirrors --add --replication-factor`, through the real CLI against a 3-broker destination
/// whose `default.replication.factor` is 2: without the option the mirror topic gets the
/// destination's default (2, where the proxy used to take min(3, brokers)); with 1 it gets 1; a
/// pattern added with 3 gives 3 to the topics it matches now and to one created on the source
/// later; 4, 0 and a misplaced option are each one `Error:` line, and nothing is added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replication_factor_of_mirror_topics_is_the_operators_or_the_destinations_default() {
    let spec = kafka_harness::ClusterSpec::new("dest3-rf").brokers(3).prop("default.replication.factor", "2");
    let dst = blocking(move || kafka_harness::Cluster::start(spec).map_err(|e| e.to_string())).await.expect("3-broker destination");
    let (src, java) = (source(), java_client());
    let proxy_process = ProxyProcess::start(&dst.bootstrap(), &unique_name("__rf_state"), "");
    let proxy = proxy_process.bootstrap.clone();
    let dst_client = client(&dst.bootstrap()).await;
    let mirror = unique_name("rf");
    let (by_default, with_one, base) = (unique_name("rf-default"), unique_name("rf-one"), unique_name("rf-pattern"));
    let (first, later, refused) = (format!("{base}.a"), format!("{base}.b"), unique_name("rf-refused"));
    for t in [&by_default, &with_one, &first, &refused] {
        java.create_topic(&src.bootstrap(), t, 2, 1, &[]).unwrap();
    }
    create_mirror(&proxy, &mirror, "metadata.refresh.interval.ms=1000\n").await;
    let add = |topic: String, rf: Option<&'static str>| {
        let proxy = proxy.clone();
        let mirror = mirror.clone();
        async move {
            let mut args = vec!["--bootstrap-server".to_owned(), proxy, "--add".to_owned(), "--mirror".to_owned(), mirror, "--topic".to_owned(), topic];
            if let Some(rf) = rf {
                args.extend(["--replication-factor".to_owned(), rf.to_owned()]);
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            cli_async(&args).await
        }
    };

    let (ok, out, err) = add(by_default.clone(), None).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), format!("Added 1 topic(s) to mirror {mirror}: [{by_default}]"));
    assert_eq!(replication_factors(&dst_client, &by_default, 2).await, Some(vec![2, 2]), "{by_default}: the destination's default.replication.factor");

    let (ok, _, err) = add(with_one.clone(), Some("1")).await;
    assert!(ok, "{err}");
    assert_eq!(replication_factors(&dst_client, &with_one, 2).await, Some(vec![1, 1]), "{with_one}: --replication-factor 1");

    let (ok, _, err) = add(format!("{}\\..*", regex::escape(&base)), Some("3")).await;
    assert!(ok, "{err}");
    assert_eq!(replication_factors(&dst_client, &first, 2).await, Some(vec![3, 3]), "{first}: the pattern's --replication-factor 3");
    java.create_topic(&src.bootstrap(), &later, 2, 1, &[]).unwrap();
    assert_eq!(replication_factors(&dst_client, &later, 2).await, Some(vec![3, 3]), "{later}: added by the pattern later, with its replication factor");

    // Impossible values: one line, naming the problem; the topic is not added.
    let one_error_line = |err: &str| {
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(lines[0].starts_with("Error: "), "{err}");
        lines[0].to_owned()
    };
    let (ok, out, err) = add(refused.clone(), Some("4")).await;
    assert!(!ok, "RF 4 on 3 brokers accepted: {out}");
    let line = one_error_line(&err);
    assert!(
        line.contains("replication factor 4 is larger than the destination cluster's 3 broker(s)") && line.contains("INVALID_REPLICATION_FACTOR"),
        "{line}"
    );
    let (ok, _, err) = add(refused.clone(), Some("0")).await;
    assert!(!ok);
    assert_eq!(one_error_line(&err), "Error: --replication-factor must be a number from 1 to 32767, not `0`");
    let (ok, _, err) = cli_async(&["--bootstrap-server", &proxy, "--pause", "--mirror", &mirror, "--topic", &with_one, "--replication-factor", "2"]).await;
    assert!(!ok);
    assert_eq!(one_error_line(&err), "Error: --replication-factor is only used with --add");
    let described = describe(&proxy, &mirror).await.expect("describe");
    assert!(!described.iter().any(|row| row["topic"] == refused.as_str()), "{refused} was added: {described:?}");
    let metadata = dst_client.refresh_metadata(&[refused.as_str()]).await.unwrap();
    assert!(!metadata.topics.contains_key(&refused), "{refused} was created on the destination");
}
