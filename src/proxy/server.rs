//! Starting, running and stopping the proxy.
//!
//! ```text
//!   Proxy::start ── Client::connect(destination) ─ fails ─► ProxyError::DestinationUnreachable
//!        │
//!        ├── bind proxy.listen ──────────► bootstrap listener ─┐
//!        ├── one listener per broker ────► broker listeners ───┼─► sessions (task tracker; with
//!        │                                                         proxy.session_threads on `super::threads`)
//!        ├── metadata refresh task (brokers come and go, topic ids)
//!        └── admin.metrics_listen ───────► /metrics, /health
//!
//!   shutdown token cancelled (SIGTERM/SIGINT in the binary):
//!     listeners stop accepting ─► sessions answer what is in flight and close
//!     ─► all under shutdown_grace_period; then the rest is dropped (hard stop)
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info, info_span, warn};

use super::config::ProxySettings;
use super::error::ProxyError;
use super::listener::{Target, run_listener};
use super::metrics::{Metrics, serve_http};
use super::mirror_apis::MirrorApiHandler;
use super::policy::WritePolicy;
use super::registry::Registry;
use super::rewrite::{BrokerEndpoint, Endpoint};
use super::threads::SessionThreads;
use crate::client::{Client, ClientError, ConnectionError, TlsConnector};
use crate::mirror::MirrorLookup;

/// Shortest time between two metadata refreshes triggered by requests (unknown topic ids).
const MIN_ON_DEMAND_REFRESH: Duration = Duration::from_secs(1);

/// The future of [`Shared::endpoints_for`].
type EndpointsFuture<'a> = Pin<Box<dyn Future<Output = Result<HashMap<i32, Endpoint>, ProxyError>> + Send + 'a>>;

/// What every listener and session shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) settings: ProxySettings,
    pub(crate) policy: WritePolicy,
    pub(crate) registry: Registry,
    pub(crate) metrics: Arc<Metrics>,
    /// `proxy.max_connections` permits.
    pub(crate) connections: Arc<Semaphore>,
    /// Listeners, sessions, the refresh task and the metrics endpoint.
    pub(crate) tracker: TaskTracker,
    /// The threads sessions run on with `proxy.session_threads` (see `super::threads`); `None`:
    /// on the runtime that started the proxy.
    pub(crate) sessions: Option<SessionThreads>,
    /// Graceful shutdown: stop accepting, drain.
    pub(crate) shutdown: CancellationToken,
    /// End of the grace period: drop whatever is left.
    pub(crate) hard_stop: CancellationToken,
    /// Our own client of the destination, for metadata. `None` only in session unit tests, which
    /// have no destination (metadata refreshes are then skipped).
    client: Option<Client>,
    /// TLS on client connections (`proxy.tls`).
    pub(crate) tls: Option<super::tls::ClientTls>,
    /// TLS on connections to the destination brokers (`destination.tls`).
    pub(crate) upstream_tls: Option<TlsConnector>,
    /// The mirror APIs, served by the proxy itself (none: forwarded like any unknown API).
    pub(crate) admin: Option<Arc<dyn MirrorApiHandler>>,
    /// `(api_key, min, max)` of the APIs served here, added to ApiVersions responses.
    pub(crate) served_api_versions: Vec<(i16, i16, i16)>,
    last_on_demand_refresh: tokio::sync::Mutex<Option<Instant>>,
}

impl Shared {
    /// Shared state for session unit tests: no destination client, no listeners, an in-memory
    /// mirror lookup with nothing mirrored.
    #[cfg(test)]
    pub(crate) fn for_tests(settings: ProxySettings, admin: Option<Arc<dyn MirrorApiHandler>>) -> Arc<Self> {
        Arc::new(Self {
            connections: Arc::new(Semaphore::new(settings.max_connections)),
            policy: WritePolicy::new(Arc::new(crate::mirror::InMemoryMirrorLookup::new()), settings.refusal_error_code),
            registry: Registry::default(),
            metrics: Arc::new(Metrics::default()),
            tracker: TaskTracker::new(),
            sessions: None,
            shutdown: CancellationToken::new(),
            hard_stop: CancellationToken::new(),
            client: None,
            tls: None,
            upstream_tls: None,
            served_api_versions: Vec::new(),
            admin,
            last_on_demand_refresh: tokio::sync::Mutex::new(None),
            settings,
        })
    }

    /// The proxy endpoints of `nodes`, creating listeners for brokers seen for the first time.
    ///
    /// # Errors
    /// [`ProxyError::BrokerListener`] if a listener cannot be bound.
    ///
    /// The future is boxed with an explicit `Send` bound: sessions call this, and it may start a
    /// listener that starts sessions, a cycle the compiler cannot check through opaque types.
    pub(crate) fn endpoints_for<'a>(self: &'a Arc<Self>, nodes: &'a [BrokerEndpoint]) -> EndpointsFuture<'a> {
        Box::pin(async move {
            let mut map = HashMap::with_capacity(nodes.len());
            for (id, host, port) in nodes {
                let upstream = format!("{host}:{port}");
                let endpoint = match self.registry.touch(*id, &upstream, &self.settings.advertised_host) {
                    Some(e) => e,
                    None => self.add_broker(*id, &upstream).await?,
                };
                map.insert(*id, endpoint);
            }
            Ok(map)
        })
    }

    /// Binds and starts the listener of broker `node_id` (unless another caller just did).
    async fn add_broker(self: &Arc<Self>, node_id: i32, upstream: &str) -> Result<Endpoint, ProxyError> {
        let _guard = self.registry.bind_lock().lock().await;
        if let Some(e) = self.registry.touch(node_id, upstream, &self.settings.advertised_host) {
            return Ok(e);
        }
        let port = match self.settings.broker_port_base {
            None => 0,
            Some(base) => u16::try_from(i64::from(base) + i64::from(node_id))
                .map_err(|_| ProxyError::BrokerListener { node_id, reason: format!("port {base} + node id {node_id} is not a TCP port") })?,
        };
        let addr = SocketAddr::new(self.settings.listen.ip(), port);
        let listener = TcpListener::bind(addr).await.map_err(|e| ProxyError::BrokerListener { node_id, reason: format!("cannot listen on {addr}: {e}") })?;
        let bound = listener.local_addr().map_err(|e| ProxyError::BrokerListener { node_id, reason: format!("no local address: {e}") })?;
        let stop = self.shutdown.child_token();
        self.registry.insert(node_id, upstream, bound.port(), stop.clone());
        self.metrics.brokers.store(self.registry.len() as i64, Ordering::Relaxed);
        info!(broker.id = node_id, broker.addr = %upstream, listen = %bound, "broker listener started");
        self.tracker.spawn(run_listener(self.clone(), listener, Target::Broker(node_id), stop).instrument(info_span!("listener", broker.id = node_id)));
        Ok(Endpoint { host: self.settings.advertised_host.clone(), port: i32::from(bound.port()) })
    }

    /// Refreshes brokers and topic ids from the destination; at most once per second when asked by
    /// requests. Failures are logged; the next refresh tries again.
    pub(crate) async fn refresh_metadata(self: &Arc<Self>) {
        {
            let mut last = self.last_on_demand_refresh.lock().await;
            if last.is_some_and(|t| t.elapsed() < MIN_ON_DEMAND_REFRESH) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.refresh_once().await;
    }

    async fn refresh_once(self: &Arc<Self>) {
        let Some(client) = &self.client else { return };
        match client.metadata(&[]).await {
            Ok(md) => {
                let nodes: Vec<BrokerEndpoint> = md.brokers.values().map(|b| (b.id, b.host.clone(), b.port)).collect();
                if let Err(error) = self.endpoints_for(&nodes).await {
                    warn!(%error, "broker listener not created");
                }
                self.registry.set_topic_ids(md.topics.values().filter(|t| !t.topic_id.is_nil()).map(|t| (t.topic_id, t.name.clone())));
            }
            Err(error) => warn!(error = %error, "metadata refresh failed"),
        }
    }

    async fn refresh_loop(self: Arc<Self>) {
        let interval = self.settings.metadata_refresh_interval;
        loop {
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            self.refresh_once().await;
            let cutoff = Instant::now().checked_sub(self.settings.broker_removal_delay);
            if let Some(cutoff) = cutoff {
                for id in self.registry.remove_unseen_since(cutoff) {
                    info!(broker.id = id, "broker left the cluster; its listener stopped");
                }
                self.metrics.brokers.store(self.registry.len() as i64, Ordering::Relaxed);
            }
        }
    }
}

/// A running proxy. Dropping it stops everything at once; [`Proxy::wait`] stops it gracefully.
#[derive(Debug)]
pub struct Proxy {
    shared: Arc<Shared>,
    bootstrap_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
}

impl Proxy {
    /// Connects to the destination, binds the listeners and starts serving. Returns once clients can
    /// connect. The proxy stops when `shutdown` is cancelled (see [`Proxy::wait`]).
    ///
    /// # Errors
    /// [`ProxyError::DestinationUnreachable`] if no destination broker answers within
    /// `destination.startup_timeout_ms`; [`ProxyError::DestinationRefused`] if one refuses the proxy's
    /// credentials or TLS; [`ProxyError::Tls`] for unusable TLS files; [`ProxyError::Bind`] / [`ProxyError::BrokerListener`] if a
    /// listener cannot be bound.
    pub async fn start(settings: ProxySettings, lookup: Arc<dyn MirrorLookup>, shutdown: CancellationToken) -> Result<Self, ProxyError> {
        Self::start_with_admin(settings, lookup, None, shutdown).await
    }

    /// As [`Proxy::start`], also serving the mirror APIs through `admin` on every listener (and
    /// announcing them in ApiVersions).
    ///
    /// # Errors
    /// As [`Proxy::start`].
    pub async fn start_with_admin(
        settings: ProxySettings,
        lookup: Arc<dyn MirrorLookup>,
        admin: Option<Arc<crate::admin::AdminHandler>>,
        shutdown: CancellationToken,
    ) -> Result<Self, ProxyError> {
        info!(config = %settings.summary(), "starting");
        let tls = match &settings.tls {
            Some((cert, key)) => Some(super::tls::acceptor(cert, key)?),
            None => None,
        };
        let upstream_tls = if settings.destination_security.protocol.uses_tls() {
            Some(TlsConnector::new(&settings.destination_security.tls).map_err(|e| match e {
                ClientError::Config { key, message } => ProxyError::Tls {
                    key: match key.as_str() {
                        "ssl.keystore.certificate.chain" => "destination.tls.cert_file",
                        "ssl.keystore.key" => "destination.tls.key_file",
                        _ => "destination.tls.ca_file",
                    },
                    reason: message,
                },
                other => ProxyError::Tls { key: "destination.tls.ca_file", reason: other.to_string() },
            })?)
        } else {
            None
        };
        // The proxy's own client: destination.tls and destination.sasl (its own credentials).
        let mut client_config = settings.destination_client_config("kafka-mirror-proxy-metadata");
        client_config.connection.connect_timeout = settings.connect_timeout.min(settings.startup_timeout);
        client_config.connection.request_timeout = settings.startup_timeout;
        let bootstrap = settings.bootstrap_servers.join(",");
        let client = Client::connect(client_config).await.map_err(|source| match source.security_failure() {
            Some(ConnectionError::Authentication { .. }) => ProxyError::DestinationRefused { key: "destination.sasl", bootstrap, source: Box::new(source) },
            Some(_) => ProxyError::DestinationRefused { key: "destination.tls", bootstrap, source: Box::new(source) },
            None => ProxyError::DestinationUnreachable { bootstrap, source },
        })?;
        let bootstrap_listener =
            TcpListener::bind(settings.listen).await.map_err(|source| ProxyError::Bind { key: "proxy.listen", addr: settings.listen, source })?;
        let bootstrap_addr = bootstrap_listener.local_addr().map_err(|source| ProxyError::Bind { key: "proxy.listen", addr: settings.listen, source })?;
        let metrics_listener = match settings.metrics_listen {
            None => None,
            Some(addr) => Some(TcpListener::bind(addr).await.map_err(|source| ProxyError::Bind { key: "admin.metrics_listen", addr, source })?),
        };
        let metrics_addr = metrics_listener.as_ref().and_then(|l| l.local_addr().ok());
        let policy = WritePolicy::new(lookup, settings.refusal_error_code);
        let mut metrics = Metrics::default();
        if let Some(admin) = &admin {
            // The control plane's metrics (instance group, mirror partitions, sync) on the same endpoint.
            let manager = admin.manager().clone();
            metrics.extra = Some(Arc::new(manager.metrics()));
        }
        let sessions = if settings.session_threads {
            // Unset: as many as the runtime's workers, which follow TOKIO_WORKER_THREADS as tokio does.
            let count = settings.worker_threads.unwrap_or_else(|| tokio::runtime::Handle::current().metrics().num_workers());
            Some(SessionThreads::start(count).map_err(|source| ProxyError::SessionThreads { count, source })?)
        } else {
            None
        };
        let shared = Arc::new(Shared {
            connections: Arc::new(Semaphore::new(settings.max_connections)),
            policy,
            registry: Registry::default(),
            metrics: Arc::new(metrics),
            tracker: TaskTracker::new(),
            sessions,
            // A child: dropping the proxy stops it without cancelling the caller's token.
            shutdown: shutdown.child_token(),
            hard_stop: CancellationToken::new(),
            client: Some(client),
            tls,
            upstream_tls,
            served_api_versions: if admin.is_some() { crate::admin::api_versions() } else { Vec::new() },
            admin: admin.map(|a| a as Arc<dyn MirrorApiHandler>),
            last_on_demand_refresh: tokio::sync::Mutex::new(None),
            settings,
        });
        // Listeners for every broker known now, before the bootstrap listener accepts anyone.
        let md = shared.client.as_ref().map(Client::cached_metadata).unwrap_or_default();
        let nodes: Vec<BrokerEndpoint> = md.brokers.values().map(|b| (b.id, b.host.clone(), b.port)).collect();
        shared.endpoints_for(&nodes).await?;
        shared.registry.set_topic_ids(md.topics.values().filter(|t| !t.topic_id.is_nil()).map(|t| (t.topic_id, t.name.clone())));

        shared.tracker.spawn(
            run_listener(shared.clone(), bootstrap_listener, Target::Bootstrap, shared.shutdown.child_token())
                .instrument(info_span!("listener", broker.id = "bootstrap")),
        );
        shared.tracker.spawn(shared.clone().refresh_loop().instrument(info_span!("metadata_refresh")));
        if let Some(listener) = metrics_listener {
            shared.tracker.spawn(serve_http(listener, shared.metrics.clone(), shared.shutdown.child_token(), shared.tracker.clone()));
        }
        shared.metrics.ready.store(true, Ordering::Relaxed);
        info!(listen = %bootstrap_addr, metrics = ?metrics_addr, brokers = shared.registry.len(), session_threads = shared.sessions.as_ref().map_or(0, SessionThreads::len), "proxy ready");
        Ok(Self { shared, bootstrap_addr, metrics_addr })
    }

    /// The bootstrap address clients use.
    pub fn bootstrap_addr(&self) -> SocketAddr {
        self.bootstrap_addr
    }

    /// The `/metrics` endpoint's address, if configured.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.shared.metrics
    }

    /// The proxy endpoint of broker `node_id` (`host:port`), if it has a listener. Asking does not
    /// count as seeing the broker (it does not postpone the removal of a broker that left).
    pub fn broker_endpoint(&self, node_id: i32) -> Option<String> {
        self.shared.registry.endpoint_of(node_id, &self.shared.settings.advertised_host).map(|e| format!("{}:{}", e.host, e.port))
    }

    /// Waits for the shutdown token, then drains: listeners stop accepting, sessions answer what is
    /// in flight, all within `shutdown_grace_period`. Returns true if everything finished in time.
    pub async fn wait(self) -> bool {
        self.shared.shutdown.cancelled().await;
        self.shared.metrics.ready.store(false, Ordering::Relaxed);
        let active = self.shared.metrics.connections_active();
        info!(sessions = active, grace = ?self.shared.settings.shutdown_grace_period, "shutting down: stopped accepting, draining sessions");
        self.shared.tracker.close();
        let graceful = tokio::time::timeout(self.shared.settings.shutdown_grace_period, self.shared.tracker.wait()).await.is_ok();
        if graceful {
            info!("shut down gracefully");
        } else {
            warn!(sessions = self.shared.metrics.connections_active(), "grace period over; closing the remaining connections");
            self.shared.hard_stop.cancel();
            self.shared.tracker.wait().await;
        }
        debug!("all tasks ended");
        graceful
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Owned tasks: nothing outlives the proxy. Also the end of `wait`, which consumes the proxy:
        // the session threads, empty by then, end with their runtimes.
        self.shared.shutdown.cancel();
        self.shared.hard_stop.cancel();
        if let Some(threads) = &self.shared.sessions {
            threads.stop();
        }
    }
}

/// Runs a proxy until `shutdown` is cancelled and it has drained.
///
/// # Errors
/// As [`Proxy::start`].
pub async fn run(settings: ProxySettings, lookup: Arc<dyn MirrorLookup>, shutdown: CancellationToken) -> Result<bool, ProxyError> {
    Ok(Proxy::start(settings, lookup, shutdown).await?.wait().await)
}
