//! Prometheus metrics of the proxy and the `/metrics` + `/health` HTTP endpoint (`admin.metrics_listen`).
//!
//! Counters are plain atomics on the request path (no lock, no label lookup per request), encoded at
//! each scrape in the Prometheus text format (version 0.0.4) by `prometheus-client`, with the mirror
//! control plane's collector after them; the endpoint is a minimal HTTP/1.1 responder (one request per connection, `Connection: close`), enough for a scraper
//! and a load balancer's health check, with no HTTP dependency.
//!
//! Names follow `<crate>_<thing>_<unit>`: `kafka_mirror_proxy_requests_total{api="Produce"}`, …

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use kafka_protocol::messages::ApiKey;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

/// Number of per-API counters (API keys 0..N; higher keys count under `api="other"`).
const API_SLOTS: usize = 128;
/// Longest the endpoint waits for a request's head.
const HTTP_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head the endpoint reads, bytes.
const HTTP_MAX_HEAD: usize = 8 * 1024;
/// Upper bounds of the request duration buckets, microseconds (rendered in seconds). From a
/// quarter of a millisecond, what one proxied request costs below saturation, to the 30 s of a
/// client's default `request.timeout.ms`.
const DURATION_BUCKETS_US: [u64; 15] =
    [250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 10_000_000, 30_000_000];

/// Request durations of one API: a cumulative-at-render Prometheus histogram of atomics.
pub(crate) struct DurationHistogram {
    /// Observations per bucket (not cumulative); the last slot is above every bound.
    buckets: [AtomicU64; DURATION_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Default for DurationHistogram {
    fn default() -> Self {
        Self { buckets: std::array::from_fn(|_| AtomicU64::new(0)), sum_us: AtomicU64::new(0) }
    }
}

impl DurationHistogram {
    fn observe(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let slot = DURATION_BUCKETS_US.partition_point(|&bound| bound < us);
        inc(&self.buckets[slot]);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }
}

/// The proxy's counters and gauges.
pub struct Metrics {
    pub(crate) connections_active: AtomicI64,
    pub(crate) connections_total: AtomicU64,
    pub(crate) requests: Vec<AtomicU64>,
    pub(crate) requests_other: AtomicU64,
    /// Durations of requests forwarded to brokers, by API key (as `requests`).
    pub(crate) durations: Vec<DurationHistogram>,
    pub(crate) durations_other: DurationHistogram,
    pub(crate) request_bytes: AtomicU64,
    pub(crate) response_bytes: AtomicU64,
    pub(crate) rewritten_responses: AtomicU64,
    pub(crate) streamed_responses: AtomicU64,
    pub(crate) streamed_requests: AtomicU64,
    pub(crate) streamed_endpoints_dropped: AtomicU64,
    pub(crate) spliced_bytes: AtomicU64,
    pub(crate) refused_partitions: AtomicU64,
    pub(crate) refused_resources: AtomicU64,
    pub(crate) malformed_requests: AtomicU64,
    pub(crate) client_reauthentications: AtomicU64,
    pub(crate) unsupported_versions: AtomicU64,
    pub(crate) upstream_connect_failures: AtomicU64,
    pub(crate) brokers: AtomicI64,
    pub(crate) ready: AtomicBool,
    /// More metrics in the exposition (the mirror control plane's collector).
    pub(crate) extra: Option<std::sync::Arc<dyn Collector>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("connections_active", &self.connections_active).field("brokers", &self.brokers).finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            connections_active: AtomicI64::new(0),
            connections_total: AtomicU64::new(0),
            requests: (0..API_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            requests_other: AtomicU64::new(0),
            durations: (0..API_SLOTS).map(|_| DurationHistogram::default()).collect(),
            durations_other: DurationHistogram::default(),
            request_bytes: AtomicU64::new(0),
            response_bytes: AtomicU64::new(0),
            rewritten_responses: AtomicU64::new(0),
            streamed_responses: AtomicU64::new(0),
            streamed_requests: AtomicU64::new(0),
            streamed_endpoints_dropped: AtomicU64::new(0),
            spliced_bytes: AtomicU64::new(0),
            refused_partitions: AtomicU64::new(0),
            refused_resources: AtomicU64::new(0),
            malformed_requests: AtomicU64::new(0),
            client_reauthentications: AtomicU64::new(0),
            unsupported_versions: AtomicU64::new(0),
            upstream_connect_failures: AtomicU64::new(0),
            brokers: AtomicI64::new(0),
            ready: AtomicBool::new(false),
            extra: None,
        }
    }
}

/// The `api` label of a per-API slot: the API's name, or its number if it has none.
fn api_label(slot: usize) -> String {
    i16::try_from(slot).ok().and_then(|k| ApiKey::try_from(k).ok()).map_or_else(|| slot.to_string(), |k| format!("{k:?}"))
}

pub(crate) fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn add(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Ordering::Relaxed);
}

impl Metrics {
    pub(crate) fn count_request(&self, api_key: i16, bytes: usize) {
        match usize::try_from(api_key).ok().and_then(|k| self.requests.get(k)) {
            Some(c) => inc(c),
            None => inc(&self.requests_other),
        }
        add(&self.request_bytes, bytes);
    }

    /// A request forwarded to a broker took `elapsed` from its forwarding to its response's last byte
    /// written to the client (`None`: an API the proxy does not know).
    pub(crate) fn observe_duration(&self, api_key: Option<ApiKey>, elapsed: Duration) {
        match api_key.and_then(|k| self.durations.get(k as usize)) {
            Some(h) => h.observe(elapsed),
            None => self.durations_other.observe(elapsed),
        }
    }

    /// Requests of `api_key` whose duration was recorded, and how many of them took at most
    /// `bound_us` microseconds, a bucket bound (tests).
    pub fn durations_of(&self, api_key: ApiKey, bound_us: u64) -> (u64, u64) {
        let Some(h) = self.durations.get(api_key as usize) else { return (0, 0) };
        let within = DURATION_BUCKETS_US.iter().take_while(|&&b| b <= bound_us).count();
        (h.count(), h.buckets[..within].iter().map(|b| b.load(Ordering::Relaxed)).sum())
    }

    /// Total requests counted for `api_key` (tests).
    pub fn requests_of(&self, api_key: ApiKey) -> u64 {
        self.requests.get(api_key as usize).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Partitions refused by the write policy so far.
    pub fn refused_partitions(&self) -> u64 {
        self.refused_partitions.load(Ordering::Relaxed)
    }

    /// Fetch responses streamed so far.
    pub fn streamed_responses(&self) -> u64 {
        self.streamed_responses.load(Ordering::Relaxed)
    }

    /// Produce requests streamed so far.
    pub fn streamed_requests(&self) -> u64 {
        self.streamed_requests.load(Ordering::Relaxed)
    }

    /// Streamed Fetch responses whose leader endpoints were left out so far.
    pub fn streamed_endpoints_dropped(&self) -> u64 {
        self.streamed_endpoints_dropped.load(Ordering::Relaxed)
    }

    /// Record bytes spliced so far.
    pub fn spliced_bytes(&self) -> u64 {
        self.spliced_bytes.load(Ordering::Relaxed)
    }

    /// Client connections open now.
    pub fn connections_active(&self) -> i64 {
        self.connections_active.load(Ordering::Relaxed)
    }

    /// Requests closed as malformed so far.
    pub fn malformed_requests(&self) -> u64 {
        self.malformed_requests.load(Ordering::Relaxed)
    }

    /// Client SASL re-authentications (KIP-368) passed through so far.
    pub fn client_reauthentications(&self) -> u64 {
        self.client_reauthentications.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition (version 0.0.4), encoded by `prometheus-client`: the proxy's
    /// counters, then the collector in `extra` (the mirror control plane's).
    pub fn render(self: &std::sync::Arc<Self>) -> String {
        let mut registry = Registry::with_prefix("kafka_mirror_proxy");
        registry.register_collector(Box::new(ProxyCollector(self.clone())));
        if let Some(extra) = &self.extra {
            registry.register_collector(Box::new(Delegate(extra.clone())));
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &registry);
        out
    }
}

/// The proxy's own metrics, read from its atomics at each scrape.
#[derive(Debug)]
struct ProxyCollector(std::sync::Arc<Metrics>);

/// A shared collector registered for one scrape.
#[derive(Debug)]
struct Delegate(std::sync::Arc<dyn Collector>);

impl Collector for Delegate {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

impl Collector for ProxyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let m = &self.0;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut counter = |name: &str, help: &str, value: u64| {
            encoder.encode_descriptor(name, help, None, MetricType::Counter)?.encode_counter::<NoLabelSet, u64, f64>(&value, None)
        };
        counter("connections", "Client connections accepted.", l(&m.connections_total))?;
        counter("request_bytes", "Bytes of client requests read.", l(&m.request_bytes))?;
        counter("response_bytes", "Bytes of responses written to clients.", l(&m.response_bytes))?;
        counter("rewritten_responses", "Responses decoded and re-encoded.", l(&m.rewritten_responses))?;
        counter("streamed_responses", "Large Fetch responses forwarded as their bytes arrived.", l(&m.streamed_responses))?;
        counter(
            "streamed_endpoints_dropped",
            "Streamed Fetch responses whose leader endpoints did not fit in the broker's bytes and were left out (the client refreshes metadata).",
            l(&m.streamed_endpoints_dropped),
        )?;
        counter(
            "streamed_requests",
            "Large Produce requests to one topic the write policy allows whole, forwarded as their bytes arrived.",
            l(&m.streamed_requests),
        )?;
        counter("spliced_bytes", "Bytes moved socket to socket without a copy (splice): record sets of streamed responses and requests.", l(&m.spliced_bytes))?;
        counter("refused_partitions", "Partitions refused by the write policy (Produce, DeleteRecords).", l(&m.refused_partitions))?;
        counter("refused_resources", "Topics or config resources refused by the write policy.", l(&m.refused_resources))?;
        counter("malformed_requests", "Client connections closed for a malformed request.", l(&m.malformed_requests))?;
        counter(
            "client_reauthentications",
            "Successful SASL authentications on client connections that had already authenticated (KIP-368, passed through to the broker).",
            l(&m.client_reauthentications),
        )?;
        counter("unsupported_versions", "Client connections closed for an API version the proxy cannot read.", l(&m.unsupported_versions))?;
        counter("upstream_connect_failures", "Failed connections to destination brokers.", l(&m.upstream_connect_failures))?;
        {
            let mut metric = encoder.encode_descriptor("requests", "Client requests by API.", None, MetricType::Counter)?;
            for (key, c) in m.requests.iter().enumerate() {
                let v = l(c);
                if v > 0 {
                    metric.encode_family(&[("api", api_label(key))])?.encode_counter::<NoLabelSet, u64, f64>(&v, None)?;
                }
            }
            metric.encode_family(&[("api", "other".to_owned())])?.encode_counter::<NoLabelSet, u64, f64>(&l(&m.requests_other), None)?;
        }
        {
            let mut metric = encoder.encode_descriptor(
                "request_duration_seconds",
                "Requests forwarded to brokers, from forwarding to the response's last byte written to the client (the broker's time included), by API.",
                None,
                MetricType::Histogram,
            )?;
            let named = m.durations.iter().enumerate().map(|(key, h)| (api_label(key), h));
            for (name, h) in named.chain(std::iter::once(("other".to_owned(), &m.durations_other))) {
                let count = h.count();
                if count == 0 {
                    continue;
                }
                let buckets: Vec<(f64, u64)> = DURATION_BUCKETS_US.iter().zip(&h.buckets).map(|(bound, b)| (*bound as f64 / 1e6, l(b))).collect();
                let sum = l(&h.sum_us) as f64 / 1e6;
                metric.encode_family(&[("api", name)])?.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
            }
        }
        encoder
            .encode_descriptor("connections_active", "Client connections open.", None, MetricType::Gauge)?
            .encode_gauge(&m.connections_active.load(Ordering::Relaxed))?;
        encoder
            .encode_descriptor("brokers", "Destination brokers with a listener.", None, MetricType::Gauge)?
            .encode_gauge(&m.brokers.load(Ordering::Relaxed))?;
        Ok(())
    }
}

/// Serves `/metrics` and `/health` on `listener` until `shutdown`. Connections are tracked by
/// `tracker`.
pub(crate) async fn serve_http(listener: TcpListener, metrics: std::sync::Arc<Metrics>, shutdown: CancellationToken, tracker: TaskTracker) {
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let metrics = metrics.clone();
                let stop = shutdown.clone();
                tracker.spawn(async move {
                    tokio::select! {
                        () = stop.cancelled() => {}
                        r = answer(stream, &metrics) => if let Err(error) = r { debug!(%error, "metrics connection failed") },
                    }
                });
            }
            Err(error) => {
                debug!(%error, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut stream: TcpStream, metrics: &std::sync::Arc<Metrics>) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HTTP_MAX_HEAD {
            if stream.read_buf(&mut head).await? == 0 {
                break;
            }
        }
        Ok::<_, std::io::Error>(())
    };
    tokio::time::timeout(HTTP_READ_TIMEOUT, read).await.map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head timed out"))??;
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4", metrics.render()),
        ("GET", "/health") if metrics.ready.load(Ordering::Relaxed) => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/health") => ("503 Service Unavailable", "text/plain", "not ready\n".to_owned()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => ("405 Method Not Allowed", "text/plain", "method not allowed\n".to_owned()),
    };
    let response = format!("HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters() {
        let m = std::sync::Arc::new(Metrics::default());
        m.count_request(0, 100);
        m.count_request(3, 10);
        m.count_request(3000, 1);
        let text = m.render();
        assert!(text.contains("kafka_mirror_proxy_requests_total{api=\"Produce\"} 1"), "{text}");
        assert!(text.contains("kafka_mirror_proxy_requests_total{api=\"Metadata\"} 1"), "{text}");
        assert!(text.contains("kafka_mirror_proxy_requests_total{api=\"other\"} 1"), "{text}");
        assert!(text.contains("kafka_mirror_proxy_request_bytes_total 111"), "{text}");
    }

    #[test]
    fn request_durations_render_as_cumulative_buckets() {
        let m = std::sync::Arc::new(Metrics::default());
        assert!(!m.render().contains("request_duration_seconds_count"), "no series before a request");
        for us in [100, 250, 251, 40_000, 31_000_000] {
            m.observe_duration(Some(ApiKey::Produce), Duration::from_micros(us));
        }
        m.observe_duration(None, Duration::from_millis(3));
        let text = m.render();
        let bucket = |api: &str, le: &str| format!("kafka_mirror_proxy_request_duration_seconds_bucket{{api=\"{api}\",le=\"{le}\"}} ");
        for (le, n) in [("0.00025", 2), ("0.0005", 3), ("0.025", 3), ("0.05", 4), ("30", 4), ("+Inf", 5)] {
            assert!(text.contains(&format!("{}{n}\n", bucket("Produce", le))), "le={le}: {text}");
        }
        assert!(text.contains("kafka_mirror_proxy_request_duration_seconds_count{api=\"Produce\"} 5\n"), "{text}");
        assert!(text.contains("kafka_mirror_proxy_request_duration_seconds_sum{api=\"Produce\"} 31.040601\n"), "{text}");
        assert!(text.contains(&format!("{}1\n", bucket("other", "0.005"))), "{text}");
        assert!(!text.contains("api=\"Fetch\",le"), "APIs without requests are left out");
        assert_eq!(m.durations_of(ApiKey::Produce, 500), (5, 3));
        assert_eq!(m.durations_of(ApiKey::Fetch, 500), (0, 0));
    }
}
