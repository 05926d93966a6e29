//! The proxy (issue 5) in front of the real destination cluster: Kafka's Java clients and librdkafka
//! through it, the write policy, ApiVersions capping, malformed input, and the binary's start and
//! stop. Each test starts its own in-process proxy on free ports (or the binary), in front of the
//! shared destination cluster, and uses unique topic names.
//!
//! Style rule 53: an in-process proxy's WARN and ERROR events fail its test unless allow-listed
//! ([`log_check`]): [`ALLOWED_PROXY_WARNINGS`] for every test, [`TestProxy::allow`] for one test's
//! expected trouble (malformed input, killed brokers), each entry with its reason.

#![allow(clippy::result_large_err, reason = "the harness's HarnessError, returned from blocking closures")]

use std::io::{Read, Write};
use std::net::TcpStream as StdTcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_harness::{
    ConsumeOptions, ConsumedRecord, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, destination, java_client, librdkafka_consume,
    provision_python, repo_root, unique_name,
};
use kafka_mirror_proxy::client::{BrokerConnection, ConnectionConfig};
use kafka_mirror_proxy::mirror::{InMemoryMirrorLookup, PartitionState};
use kafka_mirror_proxy::protocol::batch::{BatchBuilder, Record};
use kafka_mirror_proxy::proxy::{Proxy, ProxySettings, proxy_range};
use kafka_protocol::messages::{ApiKey, CreatePartitionsRequest, DeleteRecordsRequest, IncrementalAlterConfigsRequest, ProduceRequest, TopicName};
use kafka_protocol::messages::{create_partitions_request, delete_records_request, incremental_alter_configs_request, produce_request};
use kafka_protocol::protocol::StrBytes;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

/// WARN/ERROR events any in-process proxy may log without failing its test: (text the event's
/// message or fields contain, why it is harmless).
const ALLOWED_PROXY_WARNINGS: &[(&str, &str)] = &[];

/// Style rule 53 for the in-process proxies: a capturing `tracing` layer, installed once as this
/// test binary's global subscriber, keeps the WARN and ERROR events logged under a
/// `proxy_under_test{test_id}` span. Each [`TestProxy`] starts its proxy under such a span; every span
/// the proxy creates (listeners, sessions, the metadata refresh, mirror calls) has it as an ancestor,
/// so events are told apart by test even though tests run in parallel. [`TestProxy`]'s `Drop` takes
/// its events and fails the test on any not allow-listed. Only spans and WARN/ERROR events are
/// enabled, so the other tests in this binary pay nothing for it.
mod log_check {
    use std::collections::HashMap;
    use std::fmt::Write as _;
    use std::sync::{Mutex, OnceLock};

    use tracing::field::{Field, Visit};
    use tracing::subscriber::Interest;
    use tracing::{Event, Level, Metadata, Subscriber, span};
    use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
    use tracing_subscriber::registry::LookupSpan;

    /// The name of the span a test's proxy runs under.
    pub(super) const SPAN: &str = "proxy_under_test";

    /// One captured event: level, target, message and fields as text.
    #[derive(Debug, Clone)]
    pub(super) struct Captured {
        pub(super) level: Level,
        pub(super) target: String,
        pub(super) text: String,
    }

    fn captured() -> &'static Mutex<HashMap<u64, Vec<Captured>>> {
        static CAPTURED: OnceLock<Mutex<HashMap<u64, Vec<Captured>>>> = OnceLock::new();
        CAPTURED.get_or_init(Default::default)
    }

    /// Span extension: this span is a test's proxy span.
    struct TestId(u64);

    struct TestIdVisitor(Option<u64>);
    impl Visit for TestIdVisitor {
        fn record_u64(&mut self, field: &Field, value: u64) {
            if field.name() == "test_id" {
                self.0 = Some(value);
            }
        }
        fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
    }

    struct TextVisitor(String);
    impl Visit for TextVisitor {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = write!(self.0, "{}{}={value:?}", if self.0.is_empty() { "" } else { " " }, field.name());
        }
    }

    fn wanted(metadata: &Metadata<'_>) -> bool {
        // Spans: to find the test span among an event's ancestors. Events: WARN and ERROR only
        // (a more verbose level is a greater one).
        metadata.is_span() || *metadata.level() <= Level::WARN
    }

    struct CaptureLayer;

    impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CaptureLayer {
        fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
            if wanted(metadata) { Interest::always() } else { Interest::never() }
        }

        fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
            wanted(metadata)
        }

        fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
            if attrs.metadata().name() != SPAN {
                return;
            }
            let mut visitor = TestIdVisitor(None);
            attrs.record(&mut visitor);
            if let (Some(test_id), Some(span)) = (visitor.0, ctx.span(id)) {
                span.extensions_mut().insert(TestId(test_id));
            }
        }

        fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
            if *event.metadata().level() > Level::WARN {
                return;
            }
            let Some(scope) = ctx.event_scope(event) else { return };
            let Some(test_id) = scope.from_root().find_map(|s| s.extensions().get::<TestId>().map(|t| t.0)) else { return };
            let mut text = TextVisitor(String::new());
            event.record(&mut text);
            let event = Captured { level: *event.metadata().level(), target: event.metadata().target().to_owned(), text: text.0 };
            captured().lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(test_id).or_default().push(event);
        }
    }

    /// Installs the capturing subscriber (once per process).
    pub(super) fn install() {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        let installed = INSTALLED.get_or_init(|| tracing::subscriber::set_global_default(tracing_subscriber::registry().with(CaptureLayer)).is_ok());
        assert!(*installed, "another global tracing subscriber is installed in this test binary: the log check cannot run");
    }

    /// A fresh test id.
    pub(super) fn next_id() -> u64 {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// How many events captured for `test_id` so far contain `text`.
    pub(super) fn count(test_id: u64, text: &str) -> usize {
        let captured = captured().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        captured.get(&test_id).map_or(0, |events| events.iter().filter(|e| e.text.contains(text)).count())
    }

    /// The events captured for `test_id` so far (and forgets them).
    pub(super) fn take(test_id: u64) -> Vec<Captured> {
        captured().lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&test_id).unwrap_or_default()
    }
}

/// A proxy in process in front of the shared destination, with its mirror lookup. Dropping it checks
/// the proxy's WARN/ERROR events (see [`log_check`]).
struct TestProxy {
    proxy: Proxy,
    lookup: Arc<InMemoryMirrorLookup>,
    test_id: u64,
    /// This test's additions to [`ALLOWED_PROXY_WARNINGS`].
    allowed: std::sync::Mutex<Vec<(&'static str, &'static str)>>,
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        let events = log_check::take(self.test_id);
        if std::thread::panicking() {
            return;
        }
        let allowed = self.allowed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let unexpected: Vec<String> = events
            .iter()
            .filter(|e| !ALLOWED_PROXY_WARNINGS.iter().chain(allowed.iter()).any(|(text, _)| e.text.contains(text)))
            .map(|e| format!("{} {}: {}", e.level, e.target, e.text))
            .collect();
        assert!(unexpected.is_empty(), "the proxy logged WARN/ERROR events that no allow-list entry explains:\n{}", unexpected.join("\n"));
    }
}

impl TestProxy {
    async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    async fn start_with(tweak: impl FnOnce(&mut ProxySettings)) -> Self {
        Self::start_for(&destination().bootstrap(), tweak).await
    }

    async fn start_for(bootstrap: &str, tweak: impl FnOnce(&mut ProxySettings)) -> Self {
        let mut settings = ProxySettings::for_bootstrap(bootstrap);
        settings.startup_timeout = Duration::from_secs(30);
        tweak(&mut settings);
        let lookup = Arc::new(InMemoryMirrorLookup::new());
        log_check::install();
        let test_id = log_check::next_id();
        // Everything the proxy spawns is created inside this span, so it descends from it.
        let span = tracing::info_span!(log_check::SPAN, test_id);
        let proxy = Proxy::start(settings, lookup.clone(), CancellationToken::new()).instrument(span).await.expect("proxy starts");
        Self { proxy, lookup, test_id, allowed: std::sync::Mutex::new(Vec::new()) }
    }

    /// How many WARN/ERROR events containing `text` the proxy logged so far.
    fn logged(&self, text: &str) -> usize {
        log_check::count(self.test_id, text)
    }

    /// Allows WARN/ERROR events containing `text` for this test only; `why` says why they are expected
    /// (kept with the entry, for the reader).
    fn allow(&self, text: &'static str, why: &'static str) {
        self.allowed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((text, why));
    }

    fn bootstrap(&self) -> String {
        self.proxy.bootstrap_addr().to_string()
    }

    fn mirror(&self, topic: &str) {
        self.lookup.set(topic, "dr-mirror", PartitionState::Mirroring);
    }
}

/// Runs blocking work (a client process) off the async workers, which serve the proxy.
pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

fn records(n: usize, partitions: i32, tag: &str) -> Vec<ProduceLine> {
    (0..n)
        .map(|i| {
            ProducerRecord::to(i as i32 % partitions)
                .key(format!("k-{tag}-{i}"))
                .value(format!("v-{tag}-{i}-{}", "x".repeat(i % 50)))
                .header("h", format!("{i}"))
                .into()
        })
        .collect()
}

/// All of `topic` as the Java consumer (or librdkafka, if `rdkafka`) reads it from `bootstrap`.
async fn read_topic(bootstrap: String, topic: String, opts: ConsumeOptions, rdkafka: bool) -> kafka_harness::Result<Vec<ConsumedRecord>> {
    blocking(move || if rdkafka { librdkafka_consume(&bootstrap, &topic, &opts) } else { java_client().consume(&bootstrap, &topic, &opts) }).await
}

/// Runs `cmd` with a deadline; returns (success, stdout, stderr).
pub(crate) fn run(mut cmd: Command, timeout: Duration) -> (bool, String, String) {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (t_out.join().unwrap_or_default(), t_err.join().unwrap_or_default());
    (status.is_some_and(|s| s.success()), stdout, stderr)
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// librdkafka's producer (tests/interop/librdkafka/produce.py): its JSON result lines.
fn librdkafka_produce(bootstrap: &str, topic: &str, extra: &[&str]) -> Vec<Value> {
    let python = provision_python().expect("python with confluent-kafka");
    let mut cmd = Command::new(python);
    cmd.arg(repo_root().unwrap().join("tests/interop/librdkafka/produce.py")).args(["--bootstrap", bootstrap, "--topic", topic]).args(extra);
    let (ok, stdout, stderr) = run(cmd, Duration::from_secs(120));
    assert!(ok, "librdkafka producer failed:\n{stdout}\n{stderr}");
    json_lines(&stdout)
}

/// A Kafka tool class of the harness's Kafka version (console consumer, perf tools) with `args`.
pub(crate) fn kafka_tool(class: &str, args: &[&str]) -> Command {
    let dist = kafka_harness::dist(&kafka_harness::default_version()).expect("kafka dist");
    let mut cmd = dist.java(&["-Xmx256m".to_owned(), "-XX:+UseSerialGC".to_owned(), "-XX:TieredStopAtLevel=1".to_owned()], None);
    cmd.arg(class).args(args);
    cmd
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_owned()))
}

async fn connect(addr: &str) -> BrokerConnection {
    BrokerConnection::connect(addr, ConnectionConfig::default()).await.expect("connect through the proxy")
}

/// Java producer (idempotent and transactional) and consumer through the proxy: the exact records,
/// as read directly from the destination and by librdkafka through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_and_librdkafka_clients_read_and_write_exact_records_through_the_proxy() {
    let p = TestProxy::start().await;
    let (proxy, direct) = (p.bootstrap(), destination().bootstrap());
    let topic = unique_name("proxy-rw");
    let java = java_client();
    {
        let (proxy, topic) = (proxy.clone(), topic.clone());
        blocking(move || java.create_topic(&proxy, &topic, 3, 1, &[])).await.expect("create topic through the proxy");
    }
    let idem = JavaProduceOptions { idempotent: true, linger_ms: Some(5), ..Default::default() };
    let lines = records(60, 3, "idem");
    let acks = {
        let (proxy, topic, lines) = (proxy.clone(), topic.clone(), lines.clone());
        blocking(move || java.produce(&proxy, &topic, &idem, &lines)).await.expect("idempotent produce")
    };
    assert_eq!(acks.len(), 60);
    let txn = JavaProduceOptions { transactional_id: Some(unique_name("txn")), ..Default::default() };
    let txn_lines = ProduceLine::commit_then_abort(records(9, 3, "committed"), records(6, 3, "aborted"));
    {
        let (proxy, topic) = (proxy.clone(), topic.clone());
        blocking(move || java.produce(&proxy, &topic, &txn, &txn_lines)).await.expect("transactional produce");
    }

    let read = |bootstrap: String, opts: ConsumeOptions, rdkafka: bool| read_topic(bootstrap, topic.clone(), opts, rdkafka);
    let direct_committed = read(direct.clone(), ConsumeOptions::read_committed(), false).await.expect("direct read");
    let via_proxy = read(proxy.clone(), ConsumeOptions::read_committed(), false).await.expect("java through the proxy");
    let via_rdkafka = read(proxy.clone(), ConsumeOptions::read_committed(), true).await.expect("librdkafka through the proxy");
    assert_eq!(direct_committed.len(), 69, "60 idempotent + 9 committed records");
    assert_eq!(via_proxy, direct_committed);
    assert_eq!(via_rdkafka, direct_committed);
    let values: Vec<String> = direct_committed.iter().filter_map(|r| r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned())).collect();
    assert!(values.iter().all(|v| !v.contains("aborted")));
    assert!(values.iter().any(|v| v.starts_with("v-committed-8")));
    // Every record of the idempotent run, at the offset the producer was told.
    for (line, (partition, offset)) in lines.iter().zip(&acks) {
        let ProduceLine::Record(r) = line else { continue };
        let got = direct_committed.iter().find(|c| c.partition == *partition && c.offset == *offset).expect("acked record present");
        assert_eq!((&got.key, &got.value), (&r.key, &r.value));
    }
    let read_uncommitted = read(proxy.clone(), ConsumeOptions::default(), false).await.expect("read_uncommitted");
    assert_eq!(read_uncommitted.len(), 75, "aborted records are visible read_uncommitted");
}

/// `n` records of about 2 KB each over `partitions`: Fetch responses of them are large enough to be
/// streamed (64 KiB and more).
fn large_records(n: usize, partitions: i32, tag: &str) -> Vec<ProduceLine> {
    (0..n)
        .map(|i| {
            let value: String = (0..2000).map(|j| char::from(b'a' + ((i * 7 + j) % 26) as u8)).collect();
            ProducerRecord::to(i as i32 % partitions).key(format!("k-{tag}-{i}")).value(format!("{tag}-{i}-{value}")).header("i", format!("{i}")).into()
        })
        .collect()
}

/// Large Fetch responses go through the proxy as they arrive, their record sets spliced socket to
/// socket, and clients read exactly what they read directly: Java at both isolation levels (so
/// aborted-transaction lists are walked too) and librdkafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_fetch_responses_are_streamed_and_read_exactly() {
    let p = TestProxy::start().await;
    let (proxy, direct) = (p.bootstrap(), destination().bootstrap());
    let topic = unique_name("proxy-large");
    let java = java_client();
    let (d, t) = (direct.clone(), topic.clone());
    blocking(move || java.create_topic(&d, &t, 3, 1, &[])).await.expect("create topic");
    let mut lines = ProduceLine::commit_then_abort(large_records(1500, 3, "first"), large_records(300, 3, "aborted"));
    lines.push(ProduceLine::Begin);
    lines.extend(large_records(300, 3, "committed"));
    lines.push(ProduceLine::Commit);
    let opts = JavaProduceOptions { transactional_id: Some(unique_name("large-txn")), linger_ms: Some(20), ..Default::default() };
    let (d, t) = (direct.clone(), topic.clone());
    blocking(move || java.produce(&d, &t, &opts, &lines)).await.expect("produce directly");

    let read = |bootstrap: String, opts: ConsumeOptions, rdkafka: bool| read_topic(bootstrap, topic.clone(), opts, rdkafka);
    let direct_committed = read(direct.clone(), ConsumeOptions::read_committed(), false).await.expect("direct read_committed");
    assert_eq!(direct_committed.len(), 1800, "two committed transactions");
    let direct_all = read(direct.clone(), ConsumeOptions::default(), false).await.expect("direct read_uncommitted");
    assert_eq!(direct_all.len(), 2100);

    let before = p.proxy.metrics().streamed_responses();
    assert_eq!(read(proxy.clone(), ConsumeOptions::read_committed(), false).await.expect("java read_committed"), direct_committed);
    assert_eq!(read(proxy.clone(), ConsumeOptions::default(), false).await.expect("java read_uncommitted"), direct_all);
    assert_eq!(read(proxy.clone(), ConsumeOptions::read_committed(), true).await.expect("librdkafka"), direct_committed);
    assert!(p.proxy.metrics().streamed_responses() > before, "no Fetch response was streamed");
    assert!(p.proxy.metrics().spliced_bytes() > 1_000_000, "record sets were not spliced: {}", p.proxy.metrics().spliced_bytes());
}

/// Large Produce requests (batches up to 256 KiB, several partitions per request) go through the
/// proxy as they arrive, their records spliced socket to socket, and land exactly as the same
/// records produced directly: an idempotent and a transactional Java producer (one committed and one
/// aborted transaction), compared offset for offset with keys, values and headers. A large request
/// to a mirror topic is still refused: the write policy reads the topic of every large request before
/// a byte of it is forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_produce_requests_are_streamed_and_land_exactly() {
    let p = TestProxy::start().await;
    let (proxy, direct) = (p.bootstrap(), destination().bootstrap());
    let (via, twin, mirrored) = (unique_name("proxy-big-produce"), unique_name("direct-big-produce"), unique_name("proxy-big-mirror"));
    let java = java_client();
    let (d, topics) = (direct.clone(), [via.clone(), twin.clone(), mirrored.clone()]);
    blocking(move || topics.iter().for_each(|t| java.create_topic(&d, t, 3, 1, &[]).expect("create"))).await;
    p.mirror(&mirrored);
    let big = |transactional_id: Option<String>| JavaProduceOptions {
        idempotent: true,
        transactional_id,
        linger_ms: Some(100),
        batch_size: Some(256 * 1024),
        ..Default::default()
    };
    let txn = ProduceLine::commit_then_abort(large_records(600, 3, "committed"), large_records(300, 3, "aborted"));
    let (streamed, spliced) = (p.proxy.metrics().streamed_requests(), p.proxy.metrics().spliced_bytes());
    for (bootstrap, topic) in [(proxy.clone(), via.clone()), (direct.clone(), twin.clone())] {
        let (txn, idempotent, transactional) = (txn.clone(), big(None), big(Some(unique_name("big-txn"))));
        blocking(move || {
            java.produce(&bootstrap, &topic, &idempotent, &large_records(900, 3, "idempotent")).expect("idempotent producer");
            java.produce(&bootstrap, &topic, &transactional, &txn).expect("transactional producer");
        })
        .await;
    }
    let metrics = p.proxy.metrics();
    assert!(metrics.streamed_requests() > streamed, "no Produce request was streamed");
    assert!(metrics.spliced_bytes() > spliced + 1_000_000, "records were not spliced: {}", metrics.spliced_bytes() - spliced);
    // Every Produce request, streamed or not, has its duration recorded once its response is written.
    let start = Instant::now();
    while metrics.durations_of(ApiKey::Produce, u64::MAX).0 != metrics.requests_of(ApiKey::Produce) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "durations {:?} of {} Produce requests",
            metrics.durations_of(ApiKey::Produce, u64::MAX),
            metrics.requests_of(ApiKey::Produce)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let strip = |records: Vec<ConsumedRecord>| records.into_iter().map(|r| (r.partition, r.offset, r.key, r.value, r.headers)).collect::<Vec<_>>();
    let through = strip(read_topic(direct.clone(), via.clone(), ConsumeOptions::default(), false).await.expect("read what went through"));
    let expected = strip(read_topic(direct.clone(), twin.clone(), ConsumeOptions::default(), false).await.expect("read the twin"));
    assert_eq!(through.len(), 1800, "every record, the aborted ones included");
    assert!(through == expected, "what went through the proxy differs from the same records produced directly");

    let (pb, m) = (proxy.clone(), mirrored.clone());
    let refused = metrics.refused_partitions();
    let err = blocking(move || java.produce(&pb, &m, &big(None), &large_records(300, 3, "refused"))).await.expect_err("a mirror topic");
    assert!(err.to_string().contains("PolicyViolationException"), "{err}");
    assert!(metrics.refused_partitions() > refused);
}

/// Admin calls through the proxy: topics created and described, and the cluster described with the
/// proxy's endpoints (never the broker's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_through_the_proxy_see_proxy_endpoints() {
    let p = TestProxy::start().await;
    let proxy = p.bootstrap();
    let topic = unique_name("proxy-admin");
    let java = java_client();
    let (pb, t) = (proxy.clone(), topic.clone());
    let (description, cluster) = blocking(move || {
        java.create_topic(&pb, &t, 4, 1, &[("retention.ms", "3600000")]).expect("create");
        (java.describe_topic(&pb, &t).expect("describe topic"), java.admin(&pb, "describe-cluster", &[]).expect("describe cluster"))
    })
    .await;
    assert_eq!(description.partitions.len(), 4);
    assert_eq!(description.configs.get("retention.ms").map(String::as_str), Some("3600000"));
    let nodes = cluster[0]["nodes"].as_array().expect("nodes").clone();
    assert_eq!(nodes.len(), destination().node_ids().len());
    for node in nodes {
        let id = node["id"].as_i64().unwrap() as i32;
        let advertised = format!("{}:{}", node["host"].as_str().unwrap(), node["port"].as_i64().unwrap());
        assert_eq!(Some(advertised.clone()), p.proxy.broker_endpoint(id), "node {id} must point at the proxy");
        assert!(!destination().bootstrap().contains(&advertised), "a broker's own address leaked: {advertised}");
    }
    // Metadata through the proxy (harness wire client) lists only proxy endpoints too.
    let md = kafka_harness::metadata(&proxy, Some(&[topic.as_str()]), Duration::from_secs(10)).expect("metadata");
    for b in &md.brokers {
        assert_eq!(Some(format!("{}:{}", b.host, b.port)), p.proxy.broker_endpoint(b.node_id));
    }
}

/// Consumer groups through the proxy, classic protocol and the KIP-848 consumer protocol: Kafka's
/// console consumer reads every record in a group (FindCoordinator, JoinGroup / ConsumerGroupHeartbeat,
/// OffsetCommit all go through the proxy) and the committed offsets are at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_groups_classic_and_consumer_protocol_through_the_proxy() {
    let p = TestProxy::start().await;
    let proxy = p.bootstrap();
    let topic = unique_name("proxy-group");
    let java = java_client();
    {
        let (pb, t) = (proxy.clone(), topic.clone());
        blocking(move || {
            java.create_topic(&pb, &t, 2, 1, &[]).expect("create");
            java.produce(&pb, &t, &JavaProduceOptions::default(), &records(20, 2, "g")).expect("produce");
        })
        .await;
    }
    for protocol in ["classic", "consumer"] {
        let group = unique_name(&format!("group-{protocol}"));
        let (pb, t, g) = (proxy.clone(), topic.clone(), group.clone());
        let (ok, stdout, stderr) = blocking(move || {
            let cmd = kafka_tool(
                "org.apache.kafka.tools.consumer.ConsoleConsumer",
                &[
                    "--bootstrap-server",
                    &pb,
                    "--topic",
                    &t,
                    "--group",
                    &g,
                    "--from-beginning",
                    "--max-messages",
                    "20",
                    "--timeout-ms",
                    "60000",
                    "--consumer-property",
                    &format!("group.protocol={protocol}"),
                ],
            );
            run(cmd, Duration::from_secs(120))
        })
        .await;
        assert!(ok, "console consumer ({protocol}) failed:\n{stdout}\n{stderr}");
        let mut values: Vec<&str> = stdout.lines().filter(|l| l.starts_with("v-g-")).collect();
        values.sort_unstable();
        assert_eq!(values.len(), 20, "{protocol}: {stdout}");
        let (pb, g) = (proxy.clone(), group.clone());
        let offsets = blocking(move || java.group_offsets(&pb, &g)).await.expect("group offsets");
        let total: i64 = offsets.iter().map(|o| o.offset).sum();
        assert_eq!(total, 20, "{protocol}: committed offsets {offsets:?}");
    }
}

/// A produce to a mirror topic fails fast with the message, for the Java producer and librdkafka,
/// while other topics keep working; in one request mixing both, only the mirror topic's partitions
/// are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_to_a_mirror_topic_is_refused_per_partition_and_others_still_work() {
    let p = TestProxy::start().await;
    let proxy = p.bootstrap();
    let (mirrored, free) = (unique_name("proxy-mirrored"), unique_name("proxy-free"));
    let java = java_client();
    {
        let (pb, m, f) = (proxy.clone(), mirrored.clone(), free.clone());
        blocking(move || {
            java.create_topic(&pb, &m, 2, 1, &[]).expect("create mirrored");
            java.create_topic(&pb, &f, 2, 1, &[]).expect("create free");
        })
        .await;
    }
    p.mirror(&mirrored);

    // Java producer: fails at once with PolicyViolationException and our message.
    let started = Instant::now();
    let (pb, m) = (proxy.clone(), mirrored.clone());
    let err = blocking(move || java.produce(&pb, &m, &JavaProduceOptions { idempotent: true, ..Default::default() }, &records(1, 1, "m")))
        .await
        .expect_err("a write to a mirror topic must fail");
    let text = err.to_string();
    assert!(text.contains("PolicyViolationException"), "{text}");
    assert!(text.contains(&format!("Topic '{mirrored}' is a mirror topic of mirror 'dr-mirror' in state MIRRORING")), "{text}");
    assert!(started.elapsed() < Duration::from_secs(20), "must fail fast, took {:?}", started.elapsed());

    // librdkafka: a non-retriable delivery error, at once.
    let (pb, m) = (proxy.clone(), mirrored.clone());
    let lines = blocking(move || librdkafka_produce(&pb, &m, &["--idempotent", "--count", "3"])).await;
    let errors: Vec<&Value> = lines.iter().filter(|l| l.get("error").is_some()).collect();
    assert_eq!(errors.len(), 3, "{lines:?}");
    for e in errors {
        assert_eq!(e["error"], "POLICY_VIOLATION", "{e}");
        assert_eq!(e["retriable"], false, "{e}");
        assert!(e["elapsed_ms"].as_i64().unwrap() < 10_000, "{e}");
    }
    // The free topic still works for both, through the same proxy.
    let (pb, f) = (proxy.clone(), free.clone());
    let ok = blocking(move || librdkafka_produce(&pb, &f, &["--count", "5"])).await;
    assert_eq!(ok.iter().filter(|l| l.get("offset").is_some()).count(), 5, "{ok:?}");
    let (pb, f) = (proxy.clone(), free.clone());
    blocking(move || java.produce(&pb, &f, &JavaProduceOptions::default(), &records(4, 2, "free"))).await.expect("free topic");

    // One Produce request with both topics: the free partitions are written, the mirror ones refused.
    let md = kafka_harness::metadata(&proxy, Some(&[free.as_str()]), Duration::from_secs(10)).expect("metadata");
    let leader = md.topics[0].partitions.iter().find(|p| p.partition_index == 0).unwrap().leader_id;
    let broker = md.brokers.iter().find(|b| b.node_id == leader).unwrap();
    let conn = connect(&format!("{}:{}", broker.host, broker.port)).await;
    let record = Record { value: Some(Bytes::from_static(b"mixed")), ..Record::default() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let batch = BatchBuilder::new().with_base_timestamp(now).with_records(vec![record]).build().expect("batch");
    let topic = |t: &str| {
        produce_request::TopicProduceData::default()
            .with_name(name(t))
            .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch.clone()))])
    };
    let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(10_000).with_topic_data(vec![topic(&free), topic(&mirrored)]);
    let response = conn.send(&request, Some(12)).await.expect("produce response");
    let by_topic = |t: &str| response.responses.iter().find(|r| r.name.0.as_str() == t).expect("topic in response").partition_responses[0].clone();
    assert_eq!(by_topic(&free).error_code, 0);
    assert!(by_topic(&free).base_offset >= 0);
    let refused = by_topic(&mirrored);
    assert_eq!(refused.error_code, 44);
    assert!(refused.error_message.as_ref().is_some_and(|m| m.contains("mirror 'dr-mirror'")), "{refused:?}");
    assert!(p.proxy.metrics().refused_partitions() >= 3);

    // Once the mirror topic is STOPPED, it is writable.
    p.lookup.set(&mirrored, "dr-mirror", PartitionState::Stopped);
    let (pb, m) = (proxy.clone(), mirrored.clone());
    blocking(move || java.produce(&pb, &m, &JavaProduceOptions::default(), &records(2, 2, "after-stop"))).await.expect("stopped topic is writable");
}

/// DeleteRecords, CreatePartitions and changes of mirrored configs are refused on mirror topics;
/// local configs and other topics go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_writes_to_mirror_topics_are_refused() {
    let p = TestProxy::start().await;
    let proxy = p.bootstrap();
    let (mirrored, free) = (unique_name("proxy-adm-m"), unique_name("proxy-adm-f"));
    let java = java_client();
    {
        let (pb, m, f) = (proxy.clone(), mirrored.clone(), free.clone());
        blocking(move || {
            java.create_topic(&pb, &m, 1, 1, &[]).expect("create");
            java.create_topic(&pb, &f, 1, 1, &[]).expect("create");
            java.produce(&pb, &m, &JavaProduceOptions::default(), &records(5, 1, "m")).expect("produce before mirroring");
            java.produce(&pb, &f, &JavaProduceOptions::default(), &records(5, 1, "f")).expect("produce");
        })
        .await;
    }
    p.mirror(&mirrored);

    // The Java admin client's DeleteRecords.
    let (pb, m) = (proxy.clone(), mirrored.clone());
    let err = blocking(move || java.delete_records(&pb, &m, 0, 2)).await.expect_err("delete records on a mirror topic");
    assert!(err.to_string().contains("PolicyViolationException"), "{err}");
    let (pb, f) = (proxy.clone(), free.clone());
    assert_eq!(blocking(move || java.delete_records(&pb, &f, 0, 2)).await.expect("free topic"), 2);

    let conn = connect(&proxy).await;
    // DeleteRecords with both topics in one request (sent to the partitions' leader: one broker here
    // or the request is split by topic below).
    let dr = DeleteRecordsRequest::default().with_timeout_ms(5000).with_topics(
        [&free, &mirrored]
            .iter()
            .map(|t| {
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(name(t))
                    .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default().with_partition_index(0).with_offset(3)])
            })
            .collect(),
    );
    let md = kafka_harness::metadata(&proxy, Some(&[free.as_str(), mirrored.as_str()]), Duration::from_secs(10)).unwrap();
    if md.topics.iter().all(|t| t.partitions[0].leader_id == md.topics[0].partitions[0].leader_id) {
        let leader = md.brokers.iter().find(|b| b.node_id == md.topics[0].partitions[0].leader_id).unwrap();
        let leader_conn = connect(&format!("{}:{}", leader.host, leader.port)).await;
        let r = leader_conn.send(&dr, None).await.expect("delete records");
        for t in &r.topics {
            let code = t.partitions[0].error_code;
            if t.name.0.as_str() == free { assert_eq!(code, 0) } else { assert_eq!(code, 44) }
        }
    }

    // CreatePartitions.
    let cp = CreatePartitionsRequest::default().with_timeout_ms(10_000).with_topics(
        [&free, &mirrored]
            .iter()
            .map(|t| create_partitions_request::CreatePartitionsTopic::default().with_name(name(t)).with_count(2).with_assignments(None))
            .collect(),
    );
    let r = conn.send(&cp, None).await.expect("create partitions");
    for result in &r.results {
        if result.name.0.as_str() == free {
            assert_eq!(result.error_code, 0, "{result:?}");
        } else {
            assert_eq!(result.error_code, 44, "{result:?}");
            assert!(result.error_message.as_ref().is_some_and(|m| m.contains("mirror topic")), "{result:?}");
        }
    }
    assert_eq!(r.results.len(), 2);

    // IncrementalAlterConfigs: a mirrored setting refused, a local one allowed.
    let alter = |topic: &str, config: &str, value: &str| {
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(topic.to_owned()))
                .with_configs(vec![
                    incremental_alter_configs_request::AlterableConfig::default()
                        .with_name(StrBytes::from_string(config.to_owned()))
                        .with_config_operation(0)
                        .with_value(Some(StrBytes::from_string(value.to_owned()))),
                ]),
        ])
    };
    let r = conn.send(&alter(&mirrored, "retention.ms", "1000"), None).await.expect("alter configs");
    assert_eq!(r.responses[0].error_code, 44, "{r:?}");
    let r = conn.send(&alter(&mirrored, "min.insync.replicas", "1"), None).await.expect("alter configs");
    assert_eq!(r.responses[0].error_code, 0, "local settings stay alterable: {r:?}");
    let r = conn.send(&alter(&free, "retention.ms", "1000"), None).await.expect("alter configs");
    assert_eq!(r.responses[0].error_code, 0, "{r:?}");
}

/// ApiVersions through the proxy: every API the proxy reads is capped to what it can decode; the
/// rest is the broker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_are_capped_to_what_the_proxy_decodes() {
    let p = TestProxy::start().await;
    let direct = connect(&destination().bootstrap()).await;
    let via = connect(&p.bootstrap()).await;
    for key in [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
        ApiKey::DescribeCluster,
        ApiKey::DeleteRecords,
        ApiKey::CreatePartitions,
        ApiKey::IncrementalAlterConfigs,
        ApiKey::SaslHandshake,
        ApiKey::JoinGroup,
        ApiKey::OffsetCommit,
    ] {
        let (Some(b), Some(v)) = (direct.versions().range(key), via.versions().range(key)) else {
            panic!("{key:?} missing: direct {:?}, proxy {:?}", direct.versions().range(key), via.versions().range(key));
        };
        match proxy_range(key) {
            Some((min, max)) => assert_eq!((v.min, v.max), (b.min.max(min), b.max.min(max)), "{key:?}"),
            None => assert_eq!((v.min, v.max), (b.min, b.max), "{key:?} must pass through"),
        }
    }
}

/// Garbage, oversized frames, unknown and unsupported versions: each closes only its connection;
/// the proxy and a connection opened before keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_closes_only_its_own_connection() {
    let p = TestProxy::start_with(|s| s.max_frame_bytes = 1 << 20).await;
    p.allow("closing client connection", "each malformed request closes its connection, logged once at warn (style rule 20)");
    let bootstrap = p.bootstrap();
    let healthy = connect(&bootstrap).await;
    let expect_closed = |label: &str, bytes: &[u8]| {
        let mut s = StdTcpStream::connect(&bootstrap).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).expect("write");
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "{label}: the proxy must close the connection, got {n} bytes");
    };
    let with_len = |body: &[u8]| {
        let mut f = (body.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    };
    // Oversized: announced 1 GiB, nothing else sent.
    expect_closed("oversized", &(1i32 << 30).to_be_bytes());
    // Negative length.
    expect_closed("negative length", &(-7i32).to_be_bytes());
    // A Produce v9 whose body is garbage.
    expect_closed("garbage produce", &with_len(&[0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0, 0xde, 0xad, 0xbe, 0xef, 0x7f, 0xff, 0xff]));
    // A Produce v9 announcing 2^31-1 topics in a tiny frame.
    expect_closed("huge count", &with_len(&[0, 0, 0, 9, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]));
    // Shorter than a request header.
    expect_closed("short header", &with_len(&[0, 3]));
    // Produce v99 (no proxy can read it) and Metadata v99.
    expect_closed("produce v99", &with_len(&[0, 0, 0, 99, 0, 0, 0, 1, 0xff, 0xff]));
    expect_closed("metadata v99", &with_len(&[0, 3, 0, 99, 0, 0, 0, 1, 0xff, 0xff]));

    // ApiVersions v99: answered (UNSUPPORTED_VERSION, v0) rather than closed, as a broker does.
    let mut s = StdTcpStream::connect(&bootstrap).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&with_len(&[0, 18, 0, 99, 0, 0, 0, 42, 0xff, 0xff])).unwrap();
    let mut head = [0u8; 10];
    s.read_exact(&mut head).expect("an ApiVersions answer");
    assert_eq!(i32::from_be_bytes([head[4], head[5], head[6], head[7]]), 42, "correlation id");
    assert_eq!(i16::from_be_bytes([head[8], head[9]]), 35, "UNSUPPORTED_VERSION");

    // The earlier connection and new ones still work.
    let md = healthy.send(&kafka_protocol::messages::MetadataRequest::default(), None).await.expect("still served");
    assert!(!md.brokers.is_empty());
    assert!(connect(&bootstrap).await.versions().range(ApiKey::Produce).is_some());
    assert!(p.proxy.metrics().malformed_requests() >= 3);
    // Each closed connection was logged once at warn, and the log check saw it (so it would have
    // failed the test without the allow-list entry).
    // (A session logs after its socket is closed, so the last ones may still be on their way.)
    let start = Instant::now();
    while p.logged("closing client connection") < 7 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p.logged("closing client connection"), 7, "one warning per bad connection");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The proxy binary with `yaml` as its configuration file, in a directory removed when the returned
/// guard drops.
fn proxy_binary(yaml: &str, env: &[(&str, &str)]) -> (Command, tempfile::TempDir) {
    let dir = tempfile::Builder::new().prefix("kmp-config-").tempdir().unwrap();
    let file = dir.path().join("proxy.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kafka-mirror-proxy"));
    cmd.arg("--config").arg(&file).env("RUST_LOG", "info");
    for (k, v) in env {
        cmd.env(k, v);
    }
    (cmd, dir)
}

/// `kafka-mirror-proxy --config FILE` with a wrong key, a bad address or an unreachable destination:
/// one line naming the key, exit status 1.
#[test]
fn the_binary_names_the_key_of_a_bad_configuration() {
    let good = |dest: &str| {
        format!(
            "proxy:\n  listen: \"127.0.0.1:0\"\n  advertised_host: \"127.0.0.1\"\ndestination:\n  bootstrap_servers: \"{dest}\"\n  startup_timeout_ms: 2000\n"
        )
    };
    let dead = format!("127.0.0.1:{}", free_port());
    let cases = [
        ("unknown key", good(&dead).replace("listen:", "lisen:"), vec![], "lisen"),
        ("bad address", good(&dead).replace("127.0.0.1:0", "not-an-address"), vec![], "proxy.listen"),
        ("bad env address", good(&dead), vec![("KMP_ADMIN__METRICS_LISTEN", "nowhere")], "admin.metrics_listen"),
        ("unreachable destination", good(&dead), vec![], "destination.bootstrap_servers"),
        ("unknown congestion control", good(&dead), vec![("KMP_PROXY__TCP_CONGESTION_CONTROL", "no_such_algo")], "no_such_algo\" (this system has: "),
        ("bad congestion control name", good(&dead), vec![("KMP_PROXY__TCP_CONGESTION_CONTROL", "reno;x")], "proxy.tcp_congestion_control"),
    ];
    for (label, yaml, env, key) in cases {
        let (cmd, _dir) = proxy_binary(&yaml, &env);
        let (ok, stdout, stderr) = run(cmd, Duration::from_secs(60));
        assert!(!ok, "{label}: must fail");
        let line = stderr.lines().rev().find(|l| l.starts_with("kafka-mirror-proxy:")).unwrap_or_else(|| panic!("{label}: no error line in {stderr}"));
        assert!(line.contains(key), "{label}: {line}");
        assert!(stdout.is_empty(), "{label}: stdout {stdout}");
    }
}

/// The congestion control algorithm of each established TCP socket of process `pid`, as `ss` shows
/// it: (local address, peer address, algorithm).
fn congestion_of(pid: u32) -> Vec<(String, String, String)> {
    let out = Command::new("ss").args(["-tinpH", "state", "established"]).output().expect("ss (iproute2, which .ci/run installs)");
    assert!(out.status.success(), "ss: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut sockets = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        // Each socket is a line (queues, local, peer, process) and an indented line of TCP details,
        // the algorithm first.
        let info = lines.next_if(|l| l.starts_with('\t')).unwrap_or_default();
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 5 && line.contains(&format!("pid={pid},")) {
            sockets.push((fields[2].to_owned(), fields[3].to_owned(), info.split_whitespace().next().unwrap_or_default().to_owned()));
        }
    }
    sockets
}

/// The binary serves clients, reports health, and on SIGTERM drains and exits 0. It runs with
/// `TOKIO_WORKER_THREADS=3`, `proxy.worker_threads` unset and `proxy.session_threads: true` (from the
/// environment): its runtime reports three workers, as tokio's own default would, and as many session
/// threads (src/proxy/threads.rs) serve the connections
/// (the in-process proxies of the other tests serve them on the shared runtime, the default). It
/// also runs with `proxy.tcp_congestion_control` set to an algorithm other than the system's: a
/// client's connection to the proxy and the proxy's connection to a broker for it use that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_and_drains_on_sigterm() {
    let system = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").expect("the system's algorithm").trim().to_owned();
    // `reno` is always there and allowed; `cubic` (for a system whose default is reno) needs root or
    // the sysctl's allowed list, as CI has.
    let algorithm = if system == "reno" { "cubic" } else { "reno" };
    let (port, metrics_port) = (free_port(), free_port());
    let yaml = "proxy:\n  listen: \"127.0.0.1:1\"\ndestination:\n  bootstrap_servers: \"127.0.0.1:1\"\n";
    let bootstrap = format!("127.0.0.1:{port}");
    let env = [
        ("KMP_PROXY__LISTEN", bootstrap.as_str()),
        ("KMP_PROXY__BROKER_PORT_BASE", "0"),
        ("KMP_DESTINATION__BOOTSTRAP_SERVERS", &destination().bootstrap()),
        ("KMP_ADMIN__METRICS_LISTEN", &format!("127.0.0.1:{metrics_port}")),
        ("TOKIO_WORKER_THREADS", "3"),
        ("KMP_PROXY__SESSION_THREADS", "true"),
        ("KMP_PROXY__TCP_CONGESTION_CONTROL", algorithm),
    ];
    let (mut cmd, _dir) = proxy_binary(yaml, &env);
    cmd.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn the proxy");
    let health = |path: &str| {
        let mut s = StdTcpStream::connect(("127.0.0.1", metrics_port)).ok()?;
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        Some(body)
    };
    let start = Instant::now();
    while !health("/health").is_some_and(|b| b.starts_with("HTTP/1.1 200")) {
        assert!(start.elapsed() < Duration::from_secs(30), "the proxy did not become healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    let topic = unique_name("proxy-bin");
    let java = java_client();
    let (b, t) = (bootstrap.clone(), topic.clone());
    blocking(move || {
        java.create_topic(&b, &t, 1, 1, &[]).expect("create through the binary");
        java.produce(&b, &t, &JavaProduceOptions::default(), &records(3, 1, "bin")).expect("produce through the binary");
        assert_eq!(java.consume(&b, &t, &ConsumeOptions::default()).expect("consume").len(), 3);
    })
    .await;
    let metrics = health("/metrics").expect("metrics");
    assert!(metrics.contains("kafka_mirror_proxy_requests_total{api=\"Produce\"}"), "{metrics}");
    assert!(metrics.contains("kafka_mirror_proxy_request_duration_seconds_count{api=\"Produce\"}"), "{metrics}");

    let mut session_threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", child.id()))
        .expect("the proxy's threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("kmp-session-"))
        .collect();
    session_threads.sort();
    assert_eq!(session_threads, ["kmp-session-0", "kmp-session-1", "kmp-session-2"]);

    // An idle client connection stays open during the drain and is closed by it.
    let idle = connect(&bootstrap).await;
    let sockets = congestion_of(child.id());
    let accepted: Vec<_> = sockets.iter().filter(|(local, _, _)| *local == bootstrap).collect();
    assert!(!accepted.is_empty() && accepted.iter().all(|(_, _, a)| a == algorithm), "client side: {sockets:?}");
    let broker_ports: Vec<String> = destination().bootstrap().split(',').filter_map(|a| a.rsplit_once(':')).map(|(_, p)| format!(":{p}")).collect();
    assert!(
        sockets.iter().any(|(_, peer, a)| a == algorithm && broker_ports.iter().any(|p| peer.ends_with(p.as_str()))),
        "no connection to a broker ({broker_ports:?}) with {algorithm}: {sockets:?}"
    );
    // The proxy's own metadata connection (src/client) keeps the system's: only the connections that
    // carry clients' traffic are tuned.
    assert!(sockets.iter().any(|(_, _, a)| *a == system), "{sockets:?}");
    let status = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill");
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(exit.success(), "exit {exit:?}\n{stderr}");
    assert!(stderr.contains("received signal") && stderr.contains("shut down gracefully"), "{stderr}");
    assert!(stderr.contains("runtime started") && stderr.contains("worker_threads=3"), "the runtime's own count: {stderr}");
    assert!(stderr.contains("session_threads=3"), "{stderr}");
    assert!(!stderr.contains(" ERROR "), "{stderr}");
    drop(idle);
}

/// How each candidate refusal code looks to the Java producer and to librdkafka (the measurement
/// behind `policy.refusal_error_code`'s default, documented in `src/proxy/policy.rs`). Prints one row
/// per code; asserts that the default, POLICY_VIOLATION, fails fast and non-retriably in both and
/// that the Java producer shows our message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr, reason = "the measurement table is the point of this test")]
async fn refusal_error_codes_as_clients_see_them() {
    let java = java_client();
    let topic = unique_name("proxy-codes");
    {
        let (b, t) = (destination().bootstrap(), topic.clone());
        blocking(move || java.create_topic(&b, &t, 1, 1, &[])).await.expect("create");
    }
    let mut rows = Vec::new();
    for code in [44i16, 29, 17, 87, -1] {
        let p = TestProxy::start_with(|s| s.refusal_error_code = code).await;
        p.mirror(&topic);
        let (b, t) = (p.bootstrap(), topic.clone());
        let started = Instant::now();
        let java_result = blocking(move || {
            let opts = JavaProduceOptions { idempotent: true, props: vec![("delivery.timeout.ms".into(), "20000".into())], ..Default::default() };
            java.produce(&b, &t, &opts, &records(1, 1, "code"))
        })
        .await;
        let java_ms = started.elapsed().as_millis();
        let java_text = match &java_result {
            Ok(_) => "accepted?!".to_owned(),
            Err(e) => e.to_string().lines().find(|l| l.starts_with("error:")).unwrap_or("no error line").trim_start_matches("error: ").to_owned(),
        };
        let (b, t) = (p.bootstrap(), topic.clone());
        let rd = blocking(move || librdkafka_produce(&b, &t, &["--idempotent", "--timeout-ms", "20000"])).await;
        let rd_err = rd.iter().find(|l| l.get("error").is_some()).cloned().unwrap_or(Value::Null);
        eprintln!(
            "refusal code {code:>3}: java {java_ms:>5} ms: {java_text} | librdkafka {} ms: {} {} (retriable {}, fatal {})",
            rd_err["elapsed_ms"], rd_err["error"], rd_err["message"], rd_err["retriable"], rd_err["fatal"]
        );
        rows.push((code, java_ms, java_text, rd_err));
    }
    let (_, java_ms, java_text, rd) = &rows[0];
    assert!(*java_ms < 15_000 && java_text.contains("PolicyViolationException") && java_text.contains("dr-mirror"), "{java_text}");
    assert_eq!(rd["error"], "POLICY_VIOLATION");
    assert_eq!(rd["retriable"], false);
    assert!(rd["elapsed_ms"].as_i64().unwrap() < 10_000);
}

/// Checks the JSON lines of an interop program (tests/interop/*): every step present, the brokers
/// it saw are the proxy's, the mirror step failed fast and non-retriably. Returns the mirror step.
fn check_interop_steps(client: &str, p: &TestProxy, stdout: &str, groups: &[&str]) -> Value {
    let steps = json_lines(stdout);
    let step = |name: &str| steps.iter().find(|s| s["step"] == name).cloned().unwrap_or_else(|| panic!("{client}: no {name} step in {stdout}"));
    let describe = step("describe");
    assert_eq!(describe["partitions"], 2, "{client}: {describe}");
    for b in describe["brokers"].as_array().expect("brokers") {
        let advertised = format!("{}:{}", b["host"].as_str().unwrap(), b["port"]);
        assert_eq!(Some(advertised), p.proxy.broker_endpoint(b["id"].as_i64().unwrap() as i32), "{client}: {b}");
    }
    assert_eq!(step("produce")["count"], 10, "{client}");
    assert_eq!(step("transaction")["committed"], 5, "{client}");
    for protocol in groups {
        let g = steps.iter().find(|s| s["step"] == "group" && s["protocol"] == *protocol).unwrap_or_else(|| panic!("{client}: no {protocol} group step"));
        assert!(g["records"].as_i64().unwrap() >= 15, "{client}: {g}");
    }
    let mirror = step("mirror");
    assert_eq!(mirror["retriable"], false, "{client}: {mirror}");
    assert!(mirror["elapsed_ms"].as_i64().unwrap() < 10_000, "{client}: {mirror}");
    mirror
}

/// The topic and mirror topic for an interop run: the topic is created by the client, the mirror
/// topic exists and is mirrored.
async fn interop_topics(p: &TestProxy) -> (String, String) {
    let (topic, mirrored) = (unique_name("proxy-interop"), unique_name("proxy-interop-m"));
    let (b, m) = (p.bootstrap(), mirrored.clone());
    let java = java_client();
    blocking(move || java.create_topic(&b, &m, 1, 1, &[])).await.expect("create mirror topic");
    p.mirror(&mirrored);
    (topic, mirrored)
}

/// franz-go (tests/interop/franz-go): admin, idempotent and transactional produce, classic and
/// KIP-848 consumer groups, and a refused produce to a mirror topic, all through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr, reason = "the client's view of a refusal, for the record")]
async fn franz_go_through_the_proxy() {
    let p = TestProxy::start().await;
    let (topic, mirrored) = interop_topics(&p).await;
    let dir = repo_root().unwrap().join("tests/interop/franz-go");
    let mut cmd = Command::new("go");
    cmd.current_dir(&dir).args(["run", "."]).args([
        "-bootstrap",
        &p.bootstrap(),
        "-topic",
        &topic,
        "-mirror-topic",
        &mirrored,
        "-txn-id",
        &unique_name("franz-txn"),
        "-group-prefix",
        &unique_name("franz-group"),
    ]);
    let (ok, stdout, stderr) = blocking(move || run(cmd, Duration::from_secs(400))).await;
    assert!(ok, "franz-go failed (is Go installed? .ci/run downloads the modules):\n{stdout}\n{stderr}");
    let mirror = check_interop_steps("franz-go", &p, &stdout, &["classic", "consumer"]);
    assert_eq!(mirror["code"], 44, "{mirror}");
    eprintln!("franz-go refusal: {mirror}");
}

/// KafkaJS (tests/interop/kafkajs): admin, idempotent and transactional produce, a classic consumer
/// group (KafkaJS has no KIP-848), and a refused produce to a mirror topic, all through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stderr, reason = "the client's view of a refusal, for the record")]
async fn kafkajs_through_the_proxy() {
    let p = TestProxy::start().await;
    let (topic, mirrored) = interop_topics(&p).await;
    let dir = repo_root().unwrap().join("tests/interop/kafkajs");
    if !dir.join("node_modules/kafkajs").is_dir() {
        let mut npm = Command::new("npm");
        npm.current_dir(&dir).args(["ci", "--no-audit", "--no-fund"]);
        let (ok, stdout, stderr) = blocking(move || run(npm, Duration::from_secs(300))).await;
        assert!(ok, "npm ci failed:\n{stdout}\n{stderr}");
    }
    let mut cmd = Command::new("node");
    cmd.current_dir(&dir).arg("index.js").args([
        "--bootstrap",
        &p.bootstrap(),
        "--topic",
        &topic,
        "--mirror-topic",
        &mirrored,
        "--txn-id",
        &unique_name("kafkajs-txn"),
        "--group",
        &unique_name("kafkajs-group"),
    ]);
    let (ok, stdout, stderr) = blocking(move || run(cmd, Duration::from_secs(200))).await;
    assert!(ok, "KafkaJS failed:\n{stdout}\n{stderr}");
    let mirror = check_interop_steps("KafkaJS", &p, &stdout, &["classic"]);
    assert_eq!(mirror["code"], "POLICY_VIOLATION", "{mirror}");
    eprintln!("KafkaJS refusal: {mirror}");
}

/// A leader change (the leader killed) and a broker restart while a Java producer (idempotent,
/// acks=all) and a consumer group stream through the proxy: both finish, every record is written
/// exactly once and read. Runs its own 3-broker cluster, since it kills brokers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_recover_from_a_leader_change_and_a_broker_restart() {
    let cluster = blocking(|| kafka_harness::Cluster::start(kafka_harness::ClusterSpec::new("proxy-failover").brokers(3))).await.expect("3-broker cluster");
    let cluster = Arc::new(cluster);
    let p = TestProxy::start_for(&cluster.bootstrap(), |_| {}).await;
    p.allow("session failed", "sessions to the killed leader lose their broker connection (close path 3)");
    p.allow("metadata refresh failed", "the refresh may ask the killed broker before the client notices");
    p.allow("retrying", "the proxy's metadata client retries a killed broker");
    let proxy = p.bootstrap();
    let topic = unique_name("proxy-failover");
    let java = java_client();
    let (b, t) = (proxy.clone(), topic.clone());
    blocking(move || java.create_topic(&b, &t, 1, 3, &[("min.insync.replicas", "2")])).await.expect("create");
    const RECORDS: u32 = 24_000;
    let (b, t) = (proxy.clone(), topic.clone());
    let producer = tokio::task::spawn_blocking(move || {
        let props = format!("bootstrap.servers={b}");
        let cmd = kafka_tool(
            "org.apache.kafka.tools.ProducerPerformance",
            &[
                "--topic",
                &t,
                "--num-records",
                &RECORDS.to_string(),
                "--throughput",
                "1500",
                "--record-size",
                "100",
                "--producer-props",
                &props,
                "acks=all",
                "enable.idempotence=true",
                "delivery.timeout.ms=120000",
            ],
        );
        run(cmd, Duration::from_secs(240))
    });
    let (b, t, g) = (proxy.clone(), topic.clone(), unique_name("failover-group"));
    let consumer = tokio::task::spawn_blocking(move || {
        let cmd = kafka_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &["--bootstrap-server", &b, "--topic", &t, "--group", &g, "--from-beginning", "--max-messages", &RECORDS.to_string(), "--timeout-ms", "120000"],
        );
        run(cmd, Duration::from_secs(240))
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Asked through the proxy's bootstrap listener, which finds a live broker.
    let leader = || {
        kafka_harness::metadata(&proxy, Some(&[topic.as_str()]), Duration::from_secs(10))
            .ok()
            .and_then(|md| md.topics.first().and_then(|t| t.partitions.first()).map(|p| p.leader_id))
            .unwrap_or(-1)
    };
    let first = leader();
    let c = cluster.clone();
    blocking(move || c.kill_broker(first)).await.expect("kill the leader");
    let start = Instant::now();
    while leader() == first || leader() < 0 {
        assert!(start.elapsed() < Duration::from_secs(30), "no new leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let c = cluster.clone();
    blocking(move || c.start_broker(first)).await.expect("restart the old leader");

    let (ok, stdout, stderr) = producer.await.expect("producer task");
    assert!(ok, "producer failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("{RECORDS} records sent")), "{stdout}");
    let (ok, stdout, stderr) = consumer.await.expect("consumer task");
    assert!(ok, "consumer failed:\n{stderr}");
    assert!(stderr.contains(&format!("Processed a total of {RECORDS} messages")), "{stderr}");
    assert_eq!(stdout.lines().filter(|l| !l.is_empty()).count(), RECORDS as usize);
    let (b, t) = (proxy.clone(), topic.clone());
    let offsets = blocking(move || java.offsets(&b, &t)).await.expect("offsets");
    assert_eq!(offsets[0].latest, i64::from(RECORDS), "exactly once: no duplicates, no loss");
}

/// TLS on the client side (`proxy.tls`): the Java clients and librdkafka produce and read exact
/// records through a TLS proxy; a plaintext client is refused without harm to the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_through_the_proxy() {
    let dir = tempfile::Builder::new().prefix("kmp-tls-").tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let mut openssl = Command::new("openssl");
    openssl
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert);
    let (ok, _, stderr) = run(openssl, Duration::from_secs(60));
    assert!(ok, "openssl: {stderr}");
    let (c, k) = (cert.clone(), key.clone());
    let p = TestProxy::start_with(move |s| s.tls = Some((c, k))).await;
    p.allow("closing client connection", "the plaintext client fails the TLS handshake on purpose");
    let proxy = p.bootstrap();
    let topic = unique_name("proxy-tls");
    let java = java_client();
    let (d, t) = (destination().bootstrap(), topic.clone());
    blocking(move || java.create_topic(&d, &t, 2, 1, &[])).await.expect("create (directly)");

    // A plaintext Kafka request to the TLS listener: the handshake fails, only that connection closes
    // (the TLS clients below still work).
    let mut s = StdTcpStream::connect(&proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&[0, 0, 0, 10, 0, 18, 0, 3, 0, 0, 0, 1, 0xff, 0xff]).unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(n == 0 || buf[0] == 0x15, "expected a close or a TLS alert, got {:?}", &buf[..n]);

    let java_tls: Vec<(String, String)> = vec![
        ("security.protocol".into(), "SSL".into()),
        ("ssl.truststore.type".into(), "PEM".into()),
        ("ssl.truststore.location".into(), cert.display().to_string()),
    ];
    let (b, t, props) = (proxy.clone(), topic.clone(), java_tls.clone());
    let acks = blocking(move || {
        let opts = JavaProduceOptions { idempotent: true, props, ..Default::default() };
        java.produce(&b, &t, &opts, &records(30, 2, "tls"))
    })
    .await
    .expect("produce over TLS");
    assert_eq!(acks.len(), 30);
    let (b, t) = (proxy.clone(), topic.clone());
    let via_java = blocking(move || java.consume(&b, &t, &ConsumeOptions { props: java_tls, ..ConsumeOptions::default() })).await.expect("consume over TLS");
    let rd_tls = vec![("security.protocol".to_owned(), "ssl".to_owned()), ("ssl.ca.location".to_owned(), cert.display().to_string())];
    let (b, t) = (proxy.clone(), topic.clone());
    let via_rdkafka =
        blocking(move || librdkafka_consume(&b, &t, &ConsumeOptions { props: rd_tls, ..ConsumeOptions::default() })).await.expect("librdkafka over TLS");
    let (d, t) = (destination().bootstrap(), topic.clone());
    let direct = blocking(move || java.consume(&d, &t, &ConsumeOptions::default())).await.expect("direct");
    assert_eq!(direct.len(), 30);
    assert_eq!(via_java, direct);
    assert_eq!(via_rdkafka, direct);

    // Large Fetch responses to a TLS client are streamed too, copied through the proxy (TLS needs
    // the bytes), never spliced.
    let large = unique_name("proxy-tls-large");
    let (d, t) = (destination().bootstrap(), large.clone());
    blocking(move || {
        java.create_topic(&d, &t, 2, 1, &[])?;
        java.produce(&d, &t, &JavaProduceOptions { linger_ms: Some(20), ..Default::default() }, &large_records(2000, 2, "tls"))
    })
    .await
    .expect("large topic, directly");
    let (d, t) = (destination().bootstrap(), large.clone());
    let direct = blocking(move || java.consume(&d, &t, &ConsumeOptions::default())).await.expect("direct");
    assert_eq!(direct.len(), 2000);
    let (b, t) = (proxy.clone(), large.clone());
    // 4 MiB per partition: each response holds a partition's 2 MB, over the streaming threshold.
    let rd_tls = vec![
        ("security.protocol".to_owned(), "ssl".to_owned()),
        ("ssl.ca.location".to_owned(), cert.display().to_string()),
        ("max.partition.fetch.bytes".to_owned(), "4194304".to_owned()),
    ];
    let via_rdkafka =
        blocking(move || librdkafka_consume(&b, &t, &ConsumeOptions { props: rd_tls, ..ConsumeOptions::default() })).await.expect("librdkafka over TLS");
    assert_eq!(via_rdkafka, direct);
    assert!(p.proxy.metrics().streamed_responses() > 0, "no Fetch response was streamed");
    assert_eq!(p.proxy.metrics().spliced_bytes(), 0, "TLS bytes cannot be spliced");
}

/// The lines of `kafka-metadata-quorum describe --status` that do not move while the cluster idles
/// (the high watermark and the lag do).
fn stable_quorum_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| ["ClusterId:", "LeaderId:", "CurrentVoters:", "CurrentObservers:"].iter().any(|k| l.starts_with(k)))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// DescribeQuorum (KIP-853 v2 carries the controllers' listeners) through the proxy with Kafka's own
/// `kafka-metadata-quorum --bootstrap-server PROXY describe --status`: the request goes through the
/// proxy, and the answer is the broker's, controller endpoints unchanged (the proxy fronts brokers,
/// not controllers; see the table in src/proxy/rewrite.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_quorum_through_the_proxy_keeps_the_controller_endpoints() {
    let p = TestProxy::start().await;
    let describe = |bootstrap: String| {
        blocking(move || {
            run(
                kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", &["--bootstrap-server", &bootstrap, "describe", "--status"]),
                Duration::from_secs(120),
            )
        })
    };
    let (ok, direct, stderr) = describe(destination().bootstrap()).await;
    assert!(ok, "direct:\n{direct}\n{stderr}");
    let (ok, via, stderr) = describe(p.bootstrap()).await;
    assert!(ok, "through the proxy:\n{via}\n{stderr}");
    assert!(p.proxy.metrics().requests_of(ApiKey::DescribeQuorum) >= 1, "the tool's DescribeQuorum must have gone through the proxy");
    let (direct, via) = (stable_quorum_lines(&direct), stable_quorum_lines(&via));
    assert_eq!(via.len(), 4, "{via:?}");
    assert_eq!(via, direct);
    let voters = via.iter().find(|l| l.starts_with("CurrentVoters:")).expect("voters");
    assert!(voters.contains("CONTROLLER://127.0.0.1:"), "the controllers' own listeners: {voters}");
    for id in destination().node_ids() {
        let endpoint = p.proxy.broker_endpoint(id).expect("broker listener");
        assert!(!voters.contains(&endpoint), "a controller endpoint must not be mapped to broker listener {endpoint}: {voters}");
    }
}

/// A KIP-932 share consumer (Kafka's `kafka-console-share-consumer`, KafkaShareConsumer) through the
/// proxy: the proxy offers ShareFetch and ShareAcknowledge v1–2 (it walks their responses itself, see
/// `rewrite::share`), so the consumer, which takes the highest version both sides offer, fetches and
/// acknowledges at v2 and every response passes the proxy's walk. Every record is delivered once and
/// acknowledged (the group's lag is 0 afterwards, as `kafka-share-groups --describe` reports through
/// the proxy: Kafka 4.4 counts acknowledged records past the share-partition start offset as
/// delivered, KIP-1226).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_consumer_through_the_proxy_at_v2() {
    let p = TestProxy::start().await;
    let proxy = p.bootstrap();
    let via = connect(&proxy).await;
    let direct = connect(&destination().bootstrap()).await;
    for key in [ApiKey::ShareFetch, ApiKey::ShareAcknowledge] {
        let range = via.versions().range(key).unwrap_or_else(|| panic!("{key:?} advertised (share.version >= 1 on the destination)"));
        let broker = direct.versions().range(key).expect("the destination serves share groups");
        assert_eq!((range.min, range.max), (broker.min.max(1), broker.max.min(2)), "{key:?}: the broker's range, up to v2");
        assert_eq!(range.max, 2, "{key:?}: Kafka 4.4 serves v2, and so does the proxy");
    }
    let (topic, group) = (unique_name("proxy-share"), unique_name("share-group"));
    let java = java_client();
    let (pb, t) = (proxy.clone(), topic.clone());
    blocking(move || {
        java.create_topic(&pb, &t, 2, 1, &[]).expect("create");
        java.produce(&pb, &t, &JavaProduceOptions::default(), &records(30, 2, "share")).expect("produce");
    })
    .await;
    // Share groups start at the latest offset by default; this one reads from the start.
    let (pb, g) = (proxy.clone(), group.clone());
    let (ok, stdout, stderr) = blocking(move || {
        run(
            kafka_tool(
                "org.apache.kafka.tools.ConfigCommand",
                &["--bootstrap-server", &pb, "--alter", "--entity-type", "groups", "--entity-name", &g, "--add-config", "share.auto.offset.reset=earliest"],
            ),
            Duration::from_secs(120),
        )
    })
    .await;
    assert!(ok, "group config:\n{stdout}\n{stderr}");
    let (pb, t, g) = (proxy.clone(), topic.clone(), group.clone());
    let (ok, stdout, stderr) = blocking(move || {
        run(
            kafka_tool(
                "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
                &["--bootstrap-server", &pb, "--topic", &t, "--group", &g, "--max-messages", "30", "--timeout-ms", "60000"],
            ),
            Duration::from_secs(120),
        )
    })
    .await;
    assert!(ok, "share consumer:\n{stdout}\n{stderr}");
    let mut values: Vec<&str> = stdout.lines().filter(|l| l.starts_with("v-share-")).collect();
    values.sort_unstable();
    let mut expected: Vec<String> = (0..30).map(|i| format!("v-share-{i}-{}", "x".repeat(i % 50))).collect();
    expected.sort_unstable();
    assert_eq!(values, expected, "every record exactly once:\n{stdout}\n{stderr}");
    let metrics = p.proxy.metrics();
    assert!(metrics.requests_of(ApiKey::ShareGroupHeartbeat) >= 1 && metrics.requests_of(ApiKey::ShareFetch) >= 1, "share traffic went through the proxy");
    // Acknowledged: no lag left on either partition (the share coordinator persists asynchronously).
    let (pb, g) = (proxy.clone(), group.clone());
    let start = Instant::now();
    loop {
        let (ok, stdout, stderr) = blocking({
            let (pb, g) = (pb.clone(), g.clone());
            move || {
                run(
                    kafka_tool("org.apache.kafka.tools.consumer.group.ShareGroupCommand", &["--bootstrap-server", &pb, "--describe", "--group", &g]),
                    Duration::from_secs(120),
                )
            }
        })
        .await;
        assert!(ok, "describe share group:\n{stdout}\n{stderr}");
        let lags: Vec<&str> = stdout.lines().filter(|l| l.contains(&topic)).filter_map(|l| l.split_whitespace().nth(4)).collect();
        if lags == ["0", "0"] {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "records left unacknowledged: lags {lags:?}\n{stdout}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(metrics.requests_of(ApiKey::ShareAcknowledge) + metrics.requests_of(ApiKey::ShareFetch) >= 2);
}

/// Brokers joining and leaving a running destination: a broker added with a new node id gets a proxy
/// listener that Metadata through the proxy names, and a Java producer writes to a partition it
/// leads; once that broker is stopped for good, its listener closes after
/// `destination.broker_removal_delay_ms` and clients keep working on the remaining broker.
/// Runs its own cluster (one combined node and one spare broker-only node), since it adds and removes
/// brokers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_listeners_follow_brokers_joining_and_leaving() {
    let cluster = blocking(|| kafka_harness::Cluster::start(kafka_harness::ClusterSpec::new("proxy-brokers").spare_brokers(1)))
        .await
        .expect("cluster with a spare broker");
    let cluster = Arc::new(cluster);
    let p = TestProxy::start_for(&cluster.bootstrap(), |s| {
        s.metadata_refresh_interval = Duration::from_millis(300);
        s.broker_removal_delay = Duration::from_secs(3);
    })
    .await;
    p.allow("session failed", "connections through broker 1's listener lose their broker when it stops (close path 3)");
    p.allow("metadata refresh failed", "the refresh may ask broker 1 while it shuts down");
    p.allow("retrying", "the proxy's metadata client retries broker 1 while it shuts down");
    let proxy = p.bootstrap();
    assert!(p.proxy.broker_endpoint(0).is_some());
    assert_eq!(p.proxy.broker_endpoint(1), None, "the spare broker is not running yet");

    let c = cluster.clone();
    blocking(move || c.start_broker(1)).await.expect("add broker 1");
    let wait_for = |what: &str, mut check: Box<dyn FnMut() -> bool + Send>| {
        let what = what.to_owned();
        blocking(move || {
            let start = Instant::now();
            while !check() {
                assert!(start.elapsed() < Duration::from_secs(60), "timed out waiting for {what}");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let (pb, shared) = (proxy.clone(), Arc::new(p));
    let s = shared.clone();
    wait_for("a listener for broker 1", Box::new(move || s.proxy.broker_endpoint(1).is_some())).await;
    let added = shared.proxy.broker_endpoint(1).expect("listener of broker 1");
    let md = kafka_harness::metadata(&pb, Some(&[]), Duration::from_secs(10)).expect("metadata through the proxy");
    let named: Vec<(i32, String)> = md.brokers.iter().map(|b| (b.node_id, format!("{}:{}", b.host, b.port))).collect();
    assert!(named.contains(&(1, added.clone())), "Metadata through the proxy names the new broker's listener: {named:?}");

    // A topic whose only partition lives on the new broker, written through its proxy listener.
    let on_new = unique_name("proxy-on-new-broker");
    let (b, t) = (pb.clone(), on_new.clone());
    let (ok, stdout, stderr) = blocking(move || {
        run(
            kafka_tool("org.apache.kafka.tools.TopicCommand", &["--bootstrap-server", &b, "--create", "--topic", &t, "--replica-assignment", "1"]),
            Duration::from_secs(120),
        )
    })
    .await;
    assert!(ok, "create on broker 1:\n{stdout}\n{stderr}");
    let md = kafka_harness::metadata(&pb, Some(&[on_new.as_str()]), Duration::from_secs(10)).expect("metadata");
    assert_eq!(md.topics[0].partitions[0].leader_id, 1, "{md:?}");
    let java = java_client();
    let (b, t) = (pb.clone(), on_new.clone());
    let acks = blocking(move || java.produce(&b, &t, &JavaProduceOptions { idempotent: true, ..Default::default() }, &records(10, 1, "new")))
        .await
        .expect("produce to the new broker through the proxy");
    assert_eq!(acks, (0..10).map(|o| (0, o)).collect::<Vec<_>>());
    let direct_1 = cluster.broker_addrs().iter().find(|(id, _)| *id == 1).map(|(_, a)| a.to_string()).expect("broker 1");
    let (d, t) = (direct_1, on_new.clone());
    let read = blocking(move || java.consume(&d, &t, &ConsumeOptions::default())).await.expect("read broker 1 directly");
    assert_eq!(read.len(), 10);

    // Broker 1 leaves for good: its listener closes after the removal delay.
    let c = cluster.clone();
    blocking(move || c.stop_broker(1)).await.expect("stop broker 1");
    let s = shared.clone();
    wait_for("broker 1's listener to close", Box::new(move || s.proxy.broker_endpoint(1).is_none())).await;
    let a = added.clone();
    wait_for("broker 1's port to refuse connections", Box::new(move || StdTcpStream::connect(&a).is_err())).await;
    let md = kafka_harness::metadata(&pb, Some(&[]), Duration::from_secs(10)).expect("metadata after the removal");
    assert_eq!(md.brokers.iter().map(|b| b.node_id).collect::<Vec<_>>(), vec![0]);

    // Clients keep working on broker 0.
    let on_old = unique_name("proxy-on-old-broker");
    let (b, t) = (pb.clone(), on_old.clone());
    let read = blocking(move || {
        java.create_topic(&b, &t, 2, 1, &[]).expect("create on broker 0");
        let acks = java.produce(&b, &t, &JavaProduceOptions::default(), &records(8, 2, "old")).expect("produce after the removal");
        assert_eq!(acks.len(), 8);
        java.consume(&b, &t, &ConsumeOptions::default()).expect("consume after the removal")
    })
    .await;
    assert_eq!(read.len(), 8);
}

/// KIP-951 leader endpoints through the proxy, against real brokers: a Produce (v12), a Fetch (v17)
/// and a ShareFetch (v1) sent through the proxy's listener of a broker that does not host the
/// partition come back NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint, and that
/// endpoint is the proxy's listener of the leader, never the broker's own address; the same for a
/// Fetch response of 1.5 MB, which the proxy streams (the endpoint rewritten within the broker's
/// bytes, the records exactly the broker's). Uses the shared 3-broker destination.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip_951_leader_endpoints_in_produce_and_fetch_point_at_the_proxy() {
    let cluster = kafka_harness::destination3();
    let p = TestProxy::start_for(&cluster.bootstrap(), |_| {}).await;
    let topic = unique_name("proxy-kip951");
    let java = java_client();
    let (b, t) = (p.bootstrap(), topic.clone());
    blocking(move || java.create_topic(&b, &t, 1, 1, &[])).await.expect("create");
    let via = connect(&p.bootstrap()).await;
    let md = via
        .send(
            &kafka_protocol::messages::MetadataRequest::default()
                .with_topics(Some(vec![kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(name(&topic)))])),
            Some(12),
        )
        .await
        .expect("metadata");
    let (leader, topic_id) = (md.topics[0].partitions[0].leader_id.0, md.topics[0].topic_id);
    let other = cluster.node_ids().into_iter().find(|id| *id != leader).expect("a broker that does not lead");
    let leader_endpoint = p.proxy.broker_endpoint(leader).expect("the leader's listener");
    let wrong = connect(&p.proxy.broker_endpoint(other).expect("the other broker's listener")).await;
    let is_proxy_leader = |id: i32, host: &str, port: i32| {
        assert_eq!(id, leader);
        assert_eq!(format!("{host}:{port}"), leader_endpoint, "the leader endpoint must be the proxy's listener");
    };

    let record = Record { value: Some(Bytes::from_static(b"kip-951")), ..Record::default() };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let batch = BatchBuilder::new().with_base_timestamp(now).with_records(vec![record]).build().expect("batch");
    let produce = ProduceRequest::default().with_acks(1).with_timeout_ms(10_000).with_topic_data(vec![
        produce_request::TopicProduceData::default()
            .with_name(name(&topic))
            .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(0).with_records(Some(batch))]),
    ]);
    let response = wrong.send(&produce, Some(12)).await.expect("produce response");
    let partition = &response.responses[0].partition_responses[0];
    assert_eq!(partition.error_code, 6, "NOT_LEADER_OR_FOLLOWER: {response:?}");
    assert_eq!(partition.current_leader.leader_id.0, leader, "{response:?}");
    assert_eq!(response.node_endpoints.len(), 1, "{response:?}");
    let n = &response.node_endpoints[0];
    is_proxy_leader(n.node_id.0, n.host.as_str(), n.port);

    let fetch = kafka_protocol::messages::FetchRequest::default().with_max_wait_ms(0).with_topics(vec![
        kafka_protocol::messages::fetch_request::FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![kafka_protocol::messages::fetch_request::FetchPartition::default().with_partition(0).with_partition_max_bytes(1 << 20)]),
    ]);
    let response = wrong.send(&fetch, Some(17)).await.expect("fetch response");
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 6, "NOT_LEADER_OR_FOLLOWER: {response:?}");
    assert_eq!(partition.current_leader.leader_id.0, leader, "{response:?}");
    assert_eq!(response.node_endpoints.len(), 1, "{response:?}");
    let n = &response.node_endpoints[0];
    is_proxy_leader(n.node_id.0, n.host.as_str(), n.port);
    assert!(p.proxy.metrics().requests_of(ApiKey::Fetch) >= 1);

    // ShareFetch (KIP-932) through the same listener: share partitions live on their leader, so the
    // broker answers NOT_LEADER_OR_FOLLOWER with the leader's endpoint, in a response the proxy walks
    // itself (`rewrite::share`). At v1, the highest version kafka-protocol decodes (the walk of v2 is
    // exercised by `share_consumer_through_the_proxy_at_v2`). A ShareAcknowledge sent the same way
    // gets UNKNOWN_TOPIC_OR_PARTITION without endpoints from Kafka 4.4, so the rewrite of its
    // endpoints is covered by `rewrite::share`'s unit tests only. The member id has the form of
    // Kafka's Uuid (16 bytes, URL-safe base64), as a share consumer's has.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let member = base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, (nanos ^ u128::from(std::process::id())).to_be_bytes());
    let share_fetch = kafka_protocol::messages::ShareFetchRequest::default()
        .with_group_id(Some(kafka_protocol::messages::GroupId(StrBytes::from_string(unique_name("kip951-share")))))
        .with_member_id(Some(StrBytes::from_string(member)))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(100)
        .with_batch_size(100)
        .with_topics(vec![kafka_protocol::messages::share_fetch_request::FetchTopic::default().with_topic_id(topic_id).with_partitions(vec![
            kafka_protocol::messages::share_fetch_request::FetchPartition::default().with_partition_index(0).with_partition_max_bytes(1 << 20),
        ])]);
    let response = wrong.send(&share_fetch, Some(1)).await.expect("share fetch response");
    assert_eq!(response.error_code, 0, "{response:?}");
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 6, "NOT_LEADER_OR_FOLLOWER: {response:?}");
    assert_eq!(partition.current_leader.leader_id, leader, "{response:?}");
    assert_eq!(response.node_endpoints.len(), 1, "{response:?}");
    let n = &response.node_endpoints[0];
    is_proxy_leader(n.node_id.0, n.host.as_str(), n.port);
    assert!(p.proxy.metrics().requests_of(ApiKey::ShareFetch) >= 1);

    // The same in a response large enough to be streamed (64 KiB and more, `stream.rs`): 1.5 MB from a
    // partition the other broker leads, fetched together with the partition it does not lead. The
    // endpoint is rewritten within the broker's bytes when the proxy's fits there, else left out.
    let big = unique_name("proxy-kip951-big");
    let (b, t) = (p.bootstrap(), big.clone());
    blocking(move || java_client().create_topic(&b, &t, 3, 1, &[])).await.expect("create");
    let md = via
        .send(
            &kafka_protocol::messages::MetadataRequest::default()
                .with_topics(Some(vec![kafka_protocol::messages::metadata_request::MetadataRequestTopic::default().with_name(Some(name(&big)))])),
            Some(12),
        )
        .await
        .expect("metadata");
    let big_id = md.topics[0].topic_id;
    // Three partitions on three brokers with one replica each: one of them is the other broker's.
    let mine = md.topics[0].partitions.iter().find(|p| p.leader_id.0 == other).expect("a partition led by the other broker").partition_index;
    for batch in 0..2 {
        let records: Vec<Record> =
            (0..12).map(|i| Record { value: Some(Bytes::from(vec![b'a' + (batch * 12 + i) as u8 % 26; 64 * 1024])), ..Record::default() }).collect();
        let batch = BatchBuilder::new().with_base_timestamp(now).with_records(records).build().expect("batch");
        let produce = ProduceRequest::default().with_acks(1).with_timeout_ms(10_000).with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(name(&big))
                .with_partition_data(vec![produce_request::PartitionProduceData::default().with_index(mine).with_records(Some(batch))]),
        ]);
        let response = wrong.send(&produce, Some(12)).await.expect("produce response");
        assert_eq!(response.responses[0].partition_responses[0].error_code, 0, "{response:?}");
    }
    let fetch = kafka_protocol::messages::FetchRequest::default().with_max_wait_ms(0).with_max_bytes(8 << 20).with_topics(vec![
        kafka_protocol::messages::fetch_request::FetchTopic::default()
            .with_topic_id(big_id)
            .with_partitions(vec![kafka_protocol::messages::fetch_request::FetchPartition::default().with_partition(mine).with_partition_max_bytes(4 << 20)]),
        kafka_protocol::messages::fetch_request::FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![kafka_protocol::messages::fetch_request::FetchPartition::default().with_partition(0).with_partition_max_bytes(4 << 20)]),
    ]);
    let (streamed, dropped) = (p.proxy.metrics().streamed_responses(), p.proxy.metrics().streamed_endpoints_dropped());
    let response = wrong.send(&fetch, Some(17)).await.expect("large fetch response");
    assert_eq!(p.proxy.metrics().streamed_responses(), streamed + 1, "the response was streamed");
    let other_addr = cluster.broker_addrs().into_iter().find(|(id, _)| *id == other).expect("the other broker's address").1;
    let direct = connect(&other_addr.to_string()).await.send(&fetch, Some(17)).await.expect("direct fetch");
    let data = |r: &kafka_protocol::messages::FetchResponse| r.responses[0].partitions[0].records.clone().unwrap_or_default();
    assert!(data(&response).len() > 1_500_000, "{} bytes", data(&response).len());
    assert_eq!(data(&response), data(&direct), "the records as the broker sent them");
    assert_eq!(response.responses[1].partitions[0].error_code, 6, "NOT_LEADER_OR_FOLLOWER");
    // The broker wrote its own endpoint for the leader; the proxy's fits in its place when its host is
    // as long, or 3 bytes shorter at least (room for the padding field).
    let leader_addr = cluster.broker_addrs().into_iter().find(|(id, _)| *id == leader).expect("the leader's address").1;
    let (theirs, ours) = (direct.node_endpoints[0].host.len(), leader_endpoint.rsplit_once(':').expect("host:port").0.len());
    assert_eq!(format!("{}:{}", direct.node_endpoints[0].host.as_str(), direct.node_endpoints[0].port), leader_addr.to_string());
    if ours == theirs || ours + 3 <= theirs {
        assert_eq!(response.node_endpoints.len(), 1, "{:?}", response.node_endpoints);
        let n = &response.node_endpoints[0];
        is_proxy_leader(n.node_id.0, n.host.as_str(), n.port);
        assert_eq!(p.proxy.metrics().streamed_endpoints_dropped(), dropped);
    } else {
        assert!(response.node_endpoints.is_empty(), "left out: {:?}", response.node_endpoints);
        assert_eq!(p.proxy.metrics().streamed_endpoints_dropped(), dropped + 1);
    }
}
