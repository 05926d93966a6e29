//! The proxy's configuration: one YAML file (`proxy.yaml` at the repository root is the commented
//! example), every key overridable by an environment variable.
//!
//! Two stages, so that an operator sees *every* problem at once, each with its key:
//!
//! ```text
//!   YAML file ─┐
//!              ├─► config crate ─► ProxyConfig (serde, deny_unknown_fields, raw strings and ms)
//!   KMP_* env ─┘                        │ validate()
//!                                       ▼
//!                                 ProxySettings (parsed addresses, typed durations)
//! ```
//!
//! Environment variables are `KMP_` + the key path in upper case with `__` between levels:
//! `proxy.listen` is `KMP_PROXY__LISTEN`, `destination.bootstrap_servers` is
//! `KMP_DESTINATION__BOOTSTRAP_SERVERS`. Loading takes the environment as a map ([`ConfigSource`]),
//! so tests never touch the process environment.
//!
//! Does not own: reaching the destination (an unreachable destination is found when the proxy starts,
//! see [`super::ProxyError::DestinationUnreachable`]).

use std::collections::HashMap;
use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::admin::{MirrorAcl, MirrorOperation};
use crate::client::{ClientConfig, ClientError, SaslMechanism, SaslSettings, SecurityConfig, SecurityProtocol, TlsConnector, TlsSettings};
use crate::mirror::PartitionState;
use crate::protocol::{ErrorCode, MAX_FRAME_BYTES_DEFAULT};

/// Default cap on one request frame from a client, bytes (Kafka's `socket.request.max.bytes`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = MAX_FRAME_BYTES_DEFAULT;
/// Default cap on one response frame from a broker, bytes. Fetch responses are bounded by the
/// client's `fetch.max.bytes` (default 50 MiB), so twice Kafka's request cap leaves room.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 2 * MAX_FRAME_BYTES_DEFAULT;
/// Default cap on client connections, over all listeners of one proxy.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// Default cap on requests in flight per client connection (Kafka clients use at most 5 for Produce,
/// a few more for admin; a client above this waits, it is not refused).
pub const DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;
/// Most runtime worker threads `proxy.worker_threads` takes (far above any useful count; a typo of
/// an extra digit gets an error instead of thousands of threads).
pub const MAX_WORKER_THREADS: usize = 1024;
/// Longest `proxy.tcp_congestion_control` Linux takes (its `TCP_CA_NAME_MAX` less the final zero).
pub const MAX_CONGESTION_NAME_LEN: usize = 15;
/// Default time sessions get to finish their in-flight requests on SIGTERM, ms.
pub const DEFAULT_SHUTDOWN_GRACE_PERIOD_MS: u64 = 30_000;
/// Default TCP connect timeout to a destination broker, ms.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Default time the proxy waits at startup for the destination to answer Metadata, ms.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;
/// Default interval of the proxy's own metadata refresh (broker additions and removals, topic ids), ms.
pub const DEFAULT_METADATA_REFRESH_INTERVAL_MS: u64 = 10_000;
/// Default time a broker must be missing from metadata before its listener closes, ms. Long enough
/// that a broker restart (it leaves metadata while down) keeps its listener and port.
pub const DEFAULT_BROKER_REMOVAL_DELAY_MS: u64 = 300_000;
/// Default error code of a refused write: POLICY_VIOLATION (44), non-retriable for every client
/// measured (see the table in `src/proxy/policy.rs`).
pub const DEFAULT_REFUSAL_ERROR_CODE: i16 = 44;

/// The file shape of the whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Client-facing side.
    pub proxy: ListenerConfig,
    /// The destination cluster the proxy fronts.
    pub destination: DestinationConfig,
    /// Operator endpoints.
    #[serde(default)]
    pub admin: AdminConfig,
    /// The write policy.
    #[serde(default)]
    pub policy: PolicyConfig,
    /// The mirror control plane (mirror APIs, `__mirror_state`, replication).
    #[serde(default)]
    pub mirrors: MirrorsConfig,
}

/// `mirrors.*`: the control plane the proxy runs (spec §2, §6, §8).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorsConfig {
    /// Serve the mirror APIs and run the mirrors recorded in the state topic (default true). When
    /// false, only `policy.static_mirror_topics` are read-only and mirror API requests are forwarded
    /// to the brokers like any unknown API.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// The compacted state topic on the destination (default `__mirror_state`).
    #[serde(default = "default_state_topic")]
    pub state_topic: String,
    /// A file whose contents (a passphrase) seal mirror secrets (SASL passwords) in the state topic.
    /// Every proxy instance needs the same one. Without it, mirror settings with secrets are refused.
    #[serde(default)]
    pub secret_key_file: Option<String>,
    /// The Kafka group the proxy instances sharing `state_topic` join to spread the copying of
    /// mirror topics and the mirrors' sync jobs (default `kafka-mirror-proxy.<state_topic>`).
    #[serde(default)]
    pub group_id: Option<String>,
    /// How long an instance may go silent before its work moves to the others, ms (default
    /// 10000; the broker's `group.min.session.timeout.ms` .. `group.max.session.timeout.ms` apply).
    #[serde(default = "default_session_timeout_ms")]
    pub session_timeout_ms: u64,
    /// Heartbeat spacing, ms (default 3000; less than `session_timeout_ms`).
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// Fetch sessions (each on a connection of its own) per source broker for each mirror copied
    /// here (the proposal's `mirror.num.replica.fetchers`; default 4). More carry more bandwidth
    /// where one fetch response at a time cannot.
    #[serde(default = "default_num_replica_fetchers")]
    pub num_replica_fetchers: usize,
    /// Memory for fetched data not yet written to the destination, per mirror copied here, bytes
    /// (default 268435456). Fetching waits while it is used up.
    #[serde(default = "default_mirror_buffer_bytes")]
    pub buffer_bytes: usize,
    /// Ceiling on the record data this instance writes to the destination for all its mirrors,
    /// bytes/s, on top of each mirror's `mirror.replication.throttled.rate` (spec §9). None (the
    /// default) or 0: no ceiling.
    #[serde(default)]
    pub replication_throttled_rate: Option<u64>,
    /// Who may do what with the mirror APIs (spec §9, the `ClusterMirror` resource): allow rules for
    /// the principal a client authenticated as through the proxy (`User:alice`; `User:ANONYMOUS`
    /// without SASL). None (the default): every principal may do everything.
    #[serde(default)]
    pub acls: Option<Vec<MirrorAclConfig>>,
}

/// One entry of `mirrors.acls`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorAclConfig {
    /// `User:name`, or `*` for every principal.
    pub principal: String,
    /// CREATE, DELETE, ALTER, DESCRIBE, ALTER_CONFIGS or DESCRIBE_CONFIGS.
    pub operation: String,
    /// A mirror name, or `*` (default) for every mirror.
    #[serde(default = "default_any")]
    pub mirror: String,
}

fn default_any() -> String {
    "*".to_owned()
}

impl Default for MirrorsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            state_topic: default_state_topic(),
            secret_key_file: None,
            group_id: None,
            session_timeout_ms: default_session_timeout_ms(),
            heartbeat_interval_ms: default_heartbeat_interval_ms(),
            num_replica_fetchers: default_num_replica_fetchers(),
            buffer_bytes: default_mirror_buffer_bytes(),
            replication_throttled_rate: None,
            acls: None,
        }
    }
}

fn default_num_replica_fetchers() -> usize {
    crate::replicator::config::DEFAULT_FETCHERS_PER_BROKER
}
fn default_mirror_buffer_bytes() -> usize {
    crate::replicator::config::DEFAULT_BUFFER_BYTES
}
fn default_session_timeout_ms() -> u64 {
    crate::mirror::ownership::DEFAULT_SESSION_TIMEOUT.as_millis() as u64
}
fn default_heartbeat_interval_ms() -> u64 {
    crate::mirror::ownership::DEFAULT_HEARTBEAT_INTERVAL.as_millis() as u64
}

fn default_true() -> bool {
    true
}
fn default_state_topic() -> String {
    "__mirror_state".to_owned()
}

/// `proxy.*`: listeners and per-connection limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// The bootstrap address clients use, `host:port`. Port 0 picks a free port (tests).
    pub listen: String,
    /// The host written into rewritten responses (what clients connect to). Default: the host of
    /// `listen`.
    #[serde(default)]
    pub advertised_host: Option<String>,
    /// Broker `N` gets its own listener on port `broker_port_base + N` (same interface as `listen`).
    /// Default: the `listen` port + 1; with `listen` on port 0, every broker listener gets a free
    /// port too. Deriving the port from the node id (not from the order brokers appear in) keeps each
    /// broker's port stable across broker additions, removals and restarts.
    #[serde(default)]
    pub broker_port_base: Option<u16>,
    /// Largest request frame a client may send, bytes (default 100 MiB). A larger announced size
    /// closes that connection before any memory is reserved.
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// Client connections at once, over all listeners (default 10000). Further clients wait in the
    /// kernel's accept queue.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Requests in flight per client connection (default 64); the proxy stops reading a client that
    /// has this many outstanding.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight_per_connection: usize,
    /// Time sessions get to finish in-flight requests on SIGTERM/SIGINT, ms (default 30000).
    #[serde(default = "default_grace_ms")]
    pub shutdown_grace_period_ms: u64,
    /// Worker threads of the runtime (default: tokio's, `TOKIO_WORKER_THREADS` or one per CPU the
    /// process may use), and with `session_threads` the number of session threads (default: as many
    /// as the runtime's workers).
    #[serde(default)]
    pub worker_threads: Option<usize>,
    /// Serve each client connection, from accept to close, on one of `worker_threads` threads with a
    /// single-threaded runtime of its own (default false: every connection on the shared
    /// multi-threaded runtime). Threads then never wake each other for a connection's work: on 2
    /// cores shared with a broker and clients, 5 to 15% less proxy CPU and faster reads, but a
    /// worse p99.9 under heavy load, since connections on a preempted thread wait for it
    /// (src/proxy/threads.rs; BENCHMARKS.md, "Session threads").
    #[serde(default)]
    pub session_threads: bool,
    /// TCP congestion control algorithm of the proxy's connections to clients and to brokers (e.g.
    /// `cubic`); unset or empty: the system's default. With BBR the kernel paces each socket with a
    /// timer unless the interface's queueing discipline is `fq`, which costs the proxy twice (it sends
    /// every byte again); see src/proxy/sockopt.rs and BENCHMARKS.md, "TCP congestion control".
    #[serde(default)]
    pub tcp_congestion_control: Option<String>,
    /// TLS on every client listener (bootstrap and brokers). None: plaintext.
    #[serde(default)]
    pub tls: Option<ListenerTlsConfig>,
}

/// `proxy.tls.*`: the proxy's server certificate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTlsConfig {
    /// PEM file with the certificate chain clients verify (leaf first). Its names must cover
    /// `proxy.advertised_host`, since clients connect to that host on every broker port.
    pub cert_file: String,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: String,
}

/// `destination.*`: how to reach the destination brokers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationConfig {
    /// Comma-separated `host:port` list of destination brokers.
    pub bootstrap_servers: String,
    /// TCP connect timeout per broker, ms (default 10000).
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// How long startup waits for the destination to answer, ms (default 30000); then the proxy exits
    /// with an error naming `destination.bootstrap_servers`.
    #[serde(default = "default_startup_timeout_ms")]
    pub startup_timeout_ms: u64,
    /// Interval of the proxy's own metadata refresh, ms (default 10000).
    #[serde(default = "default_refresh_ms")]
    pub metadata_refresh_interval_ms: u64,
    /// Time a broker must be missing from metadata before its listener closes, ms (default 300000).
    #[serde(default = "default_removal_ms")]
    pub broker_removal_delay_ms: u64,
    /// Largest response frame accepted from a broker, bytes (default 200 MiB).
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// TLS to the destination brokers (their listener is SSL or SASL_SSL): used by every connection
    /// the proxy opens to them, its own and those carrying client sessions, whether or not the client
    /// used TLS to the proxy. None: plaintext.
    #[serde(default)]
    pub tls: Option<DestinationTlsConfig>,
    /// The proxy's own SASL credentials (listener SASL_PLAINTEXT or SASL_SSL), for its own
    /// connections only: metadata refresh and the mirror control plane. Client sessions authenticate
    /// themselves; their SASL exchange passes through to the broker unchanged.
    #[serde(default)]
    pub sasl: Option<DestinationSaslConfig>,
}

/// `destination.tls.*`: TLS originated by the proxy towards the destination brokers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationTlsConfig {
    /// PEM file of the CA certificates that sign the brokers' certificates (required: no system
    /// trust store is used).
    pub ca_file: String,
    /// PEM file with the proxy's certificate chain, for brokers that require client certificates
    /// (`ssl.client.auth=required`); with `key_file`.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// PEM file with the private key of `cert_file` (unencrypted PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key_file: Option<String>,
    /// Check that a broker's certificate names the host connected to (default true). False checks
    /// only the chain, like an empty `ssl.endpoint.identification.algorithm` in the Java client.
    #[serde(default = "default_true")]
    pub verify_hostname: bool,
}

/// `destination.sasl.*`: the proxy's own credentials.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DestinationSaslConfig {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    /// The user name.
    pub username: String,
    /// A file holding the password (a trailing newline is ignored).
    #[serde(default)]
    pub password_file: Option<String>,
    /// The password itself: meant for the environment (`KMP_DESTINATION__SASL__PASSWORD`), not for
    /// the YAML file. Exactly one of `password_file` and `password`.
    #[serde(default)]
    pub password: Option<String>,
}

/// `admin.*`: operator endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `host:port` of the HTTP endpoint serving Prometheus `/metrics` and `/health`. None: no endpoint.
    #[serde(default)]
    pub metrics_listen: Option<String>,
}

/// `policy.*`: the write policy.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Kafka error code returned for a refused write (default 44, POLICY_VIOLATION). Must be a
    /// non-retriable code; see `src/proxy/policy.rs` for the per-client measurements.
    #[serde(default = "default_refusal_code")]
    pub refusal_error_code: i16,
    /// Topics treated as mirror topics without `__mirror_state`, for running the proxy before the
    /// control plane exists (issue 6) and for demos. Each entry: `{topic, mirror, state}`.
    #[serde(default)]
    pub static_mirror_topics: Vec<StaticMirrorTopic>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self { refusal_error_code: DEFAULT_REFUSAL_ERROR_CODE, static_mirror_topics: Vec::new() }
    }
}

/// One entry of `policy.static_mirror_topics`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticMirrorTopic {
    /// Topic name.
    pub topic: String,
    /// Mirror name shown in refusals.
    pub mirror: String,
    /// State name (`MIRRORING`, `PAUSED`, …; default `MIRRORING`).
    #[serde(default)]
    pub state: Option<String>,
}

fn default_max_frame_bytes() -> usize {
    DEFAULT_MAX_FRAME_BYTES
}
fn default_max_response_bytes() -> usize {
    DEFAULT_MAX_RESPONSE_BYTES
}
fn default_max_connections() -> usize {
    DEFAULT_MAX_CONNECTIONS
}
fn default_max_in_flight() -> usize {
    DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION
}
fn default_grace_ms() -> u64 {
    DEFAULT_SHUTDOWN_GRACE_PERIOD_MS
}
fn default_connect_timeout_ms() -> u64 {
    DEFAULT_CONNECT_TIMEOUT_MS
}
fn default_startup_timeout_ms() -> u64 {
    DEFAULT_STARTUP_TIMEOUT_MS
}
fn default_refresh_ms() -> u64 {
    DEFAULT_METADATA_REFRESH_INTERVAL_MS
}
fn default_removal_ms() -> u64 {
    DEFAULT_BROKER_REMOVAL_DELAY_MS
}
fn default_refusal_code() -> i16 {
    DEFAULT_REFUSAL_ERROR_CODE
}

/// One configuration problem, with the key it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The dotted key (`proxy.listen`), or `<file>` for problems with the file as a whole.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// The configuration could not be loaded. Its Display is one line naming every offending key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file is missing, unreadable, not YAML, or has wrong keys or types; or values are invalid.
    #[error("invalid configuration{}: {}", path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default(), join(problems))]
    Invalid {
        /// The file, if one was given.
        path: Option<PathBuf>,
        /// Every problem found.
        problems: Vec<ConfigProblem>,
    },
}

impl ConfigError {
    /// The problems found.
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            Self::Invalid { problems, .. } => problems,
        }
    }
}

fn join(problems: &[ConfigProblem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Prefixes of the environment variables read as configuration: `KMP_` + a top-level section + `__`.
const ENV_SECTIONS: &[&str] = &["KMP_PROXY__", "KMP_DESTINATION__", "KMP_ADMIN__", "KMP_POLICY__", "KMP_MIRRORS__"];

/// Where configuration comes from: a YAML file or text, and environment variables as a map.
#[derive(Debug, Default, Clone)]
pub struct ConfigSource {
    /// The YAML file.
    pub file: Option<PathBuf>,
    /// YAML text (used instead of `file` when set; for tests).
    pub yaml: Option<String>,
    /// Environment variables (all of them; only `KMP_*` are read).
    pub env: HashMap<String, String>,
}

impl ConfigSource {
    /// `file` plus the process environment.
    pub fn from_file_and_process_env(file: &Path) -> Self {
        Self { file: Some(file.to_owned()), yaml: None, env: std::env::vars().collect() }
    }

    /// Loads and validates.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every problem found.
    pub fn load(&self) -> Result<ProxySettings, ConfigError> {
        let raw = self.load_raw()?;
        raw.validate().map_err(|problems| ConfigError::Invalid { path: self.file.clone(), problems })
    }

    /// Loads without validating values (keys and types are checked).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a missing file, bad YAML, unknown keys or wrong types.
    pub fn load_raw(&self) -> Result<ProxyConfig, ConfigError> {
        let invalid = |key: String, message: String| ConfigError::Invalid { path: self.file.clone(), problems: vec![ConfigProblem { key, message }] };
        let mut builder = config::Config::builder();
        if let Some(yaml) = &self.yaml {
            builder = builder.add_source(config::File::from_str(yaml, config::FileFormat::Yaml));
        } else if let Some(file) = &self.file {
            if !file.is_file() {
                return Err(invalid("<file>".to_owned(), "no such file".to_owned()));
            }
            builder = builder.add_source(config::File::from(file.as_path()).format(config::FileFormat::Yaml));
        }
        // Only KMP_<SECTION>__… variables: other KMP_* names (the test harness's KMP_DEST_BOOTSTRAP,
        // KMP_PYTHON, …) are not configuration keys and must not be read as unknown ones.
        let env: config::Map<String, String> =
            self.env.iter().filter(|(k, _)| ENV_SECTIONS.iter().any(|s| k.starts_with(s))).map(|(k, v)| (k.clone(), v.clone())).collect();
        builder = builder.add_source(config::Environment::with_prefix("KMP").prefix_separator("_").separator("__").try_parsing(true).source(Some(env)));
        let built = builder.build().map_err(|e| {
            let (key, message) = describe_config_error(&e);
            invalid(key, message)
        })?;
        built.try_deserialize::<ProxyConfig>().map_err(|e| {
            let (key, message) = describe_config_error(&e);
            invalid(key, message)
        })
    }
}

/// Turns the config crate's error into (key, message), naming the key where the crate knows it.
fn describe_config_error(error: &config::ConfigError) -> (String, String) {
    match error {
        config::ConfigError::NotFound(key) => (key.clone(), "missing".to_owned()),
        config::ConfigError::Type { key, unexpected, expected, .. } => {
            (key.clone().unwrap_or_else(|| "<file>".to_owned()), format!("expected {expected}, found {unexpected}"))
        }
        config::ConfigError::At { error, key, .. } => {
            let (inner_key, message) = describe_config_error(error);
            match key {
                Some(k) if inner_key == "<file>" => (k.clone(), message),
                Some(k) if !inner_key.starts_with(k.as_str()) => (format!("{k}.{inner_key}"), message),
                _ => (inner_key, message),
            }
        }
        config::ConfigError::FileParse { cause, .. } => ("<file>".to_owned(), format!("not valid YAML: {cause}")),
        other => {
            // serde's messages name the field: "missing field `listen`", "unknown field `lisen`, expected …".
            let text = other.to_string();
            let key = text.split('`').nth(1).map(str::to_owned).unwrap_or_else(|| "<file>".to_owned());
            (key, text)
        }
    }
}

/// The validated configuration, as the proxy uses it.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// Bootstrap listener address.
    pub listen: SocketAddr,
    /// Host written into rewritten responses.
    pub advertised_host: String,
    /// Port of broker 0's listener (`None`: a free port per broker).
    pub broker_port_base: Option<u16>,
    /// Largest client request frame, bytes.
    pub max_frame_bytes: usize,
    /// Largest broker response frame, bytes.
    pub max_response_bytes: usize,
    /// Client connections at once.
    pub max_connections: usize,
    /// Requests in flight per client connection.
    pub max_in_flight_per_connection: usize,
    /// Drain time on shutdown.
    pub shutdown_grace_period: Duration,
    /// Runtime worker threads, and session threads if on (`None`: tokio's default, `TOKIO_WORKER_THREADS`
    /// or one per CPU).
    pub worker_threads: Option<usize>,
    /// Each connection on a session thread of its own runtime (`proxy.session_threads`).
    pub session_threads: bool,
    /// TCP congestion control of the proxy's connections (`None`: the system's default).
    pub tcp_congestion_control: Option<String>,
    /// Destination bootstrap `host:port` list.
    pub bootstrap_servers: Vec<String>,
    /// TCP connect timeout to brokers.
    pub connect_timeout: Duration,
    /// Startup wait for the destination.
    pub startup_timeout: Duration,
    /// Metadata refresh interval.
    pub metadata_refresh_interval: Duration,
    /// Delay before a vanished broker's listener closes.
    pub broker_removal_delay: Duration,
    /// `/metrics` and `/health` endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// Error code of refused writes.
    pub refusal_error_code: i16,
    /// Mirror topics from the configuration.
    pub static_mirror_topics: Vec<(String, String, PartitionState)>,
    /// Client-side TLS: (certificate chain file, private key file), both PEM.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Run the mirror control plane (`mirrors.enabled`).
    pub mirrors_enabled: bool,
    /// `mirrors.state_topic`.
    pub mirror_state_topic: String,
    /// `mirrors.secret_key_file`'s contents, trimmed (never logged).
    pub mirror_secret: Option<String>,
    /// `mirrors.group_id` (`None`: derived from the state topic).
    pub mirror_group_id: Option<String>,
    /// `mirrors.session_timeout_ms`.
    pub mirror_session_timeout: Duration,
    /// `mirrors.heartbeat_interval_ms`.
    pub mirror_heartbeat_interval: Duration,
    /// `mirrors.num_replica_fetchers`.
    pub mirror_fetchers_per_broker: usize,
    /// `mirrors.buffer_bytes`.
    pub mirror_buffer_bytes: usize,
    /// `mirrors.replication_throttled_rate` (bytes/s; `None`: no ceiling).
    pub mirror_throttled_rate: Option<u64>,
    /// TLS and SASL towards the destination (`destination.tls`, `destination.sasl`). The TLS part
    /// applies to every upstream connection; the SASL part to the proxy's own connections only.
    /// `Debug` hides the password and the private key.
    pub destination_security: SecurityConfig,
    /// `mirrors.acls`: the allow rules of the mirror APIs; `None` allows everything.
    pub mirror_acls: Option<Vec<MirrorAcl>>,
}

impl ProxySettings {
    /// Settings for a proxy on `127.0.0.1:0` (free ports) in front of `bootstrap`, with defaults
    /// elsewhere (tests and embedding).
    pub fn for_bootstrap(bootstrap: &str) -> Self {
        ProxyConfig {
            proxy: ListenerConfig {
                listen: "127.0.0.1:0".to_owned(),
                advertised_host: None,
                broker_port_base: None,
                max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
                max_connections: DEFAULT_MAX_CONNECTIONS,
                max_in_flight_per_connection: DEFAULT_MAX_IN_FLIGHT_PER_CONNECTION,
                shutdown_grace_period_ms: DEFAULT_SHUTDOWN_GRACE_PERIOD_MS,
                worker_threads: None,
                session_threads: false,
                tcp_congestion_control: None,
                tls: None,
            },
            destination: DestinationConfig {
                bootstrap_servers: bootstrap.to_owned(),
                connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
                startup_timeout_ms: DEFAULT_STARTUP_TIMEOUT_MS,
                metadata_refresh_interval_ms: DEFAULT_METADATA_REFRESH_INTERVAL_MS,
                broker_removal_delay_ms: DEFAULT_BROKER_REMOVAL_DELAY_MS,
                max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
                tls: None,
                sasl: None,
            },
            admin: AdminConfig::default(),
            policy: PolicyConfig::default(),
            mirrors: MirrorsConfig { enabled: false, ..MirrorsConfig::default() },
        }
        .validate()
        .expect("invariant: the built-in test settings are valid")
    }

    /// A client configuration for the proxy's own connections to the destination (metadata, control
    /// plane): its bootstrap servers, `destination.tls` and `destination.sasl`, and retries bounded
    /// by `destination.startup_timeout_ms`.
    pub fn destination_client_config(&self, client_id: &str) -> ClientConfig {
        let mut config = ClientConfig::new(&self.bootstrap_servers.join(","));
        config.connection.client_id = client_id.to_owned();
        config.connection.connect_timeout = self.connect_timeout;
        config.connection.security = self.destination_security.clone();
        config.backoff.deadline = self.startup_timeout;
        config
    }

    /// The effective configuration as one log-friendly line, without secrets (no password, no key).
    pub fn summary(&self) -> String {
        let security = &self.destination_security;
        let destination_tls = if security.protocol.uses_tls() {
            format!(
                "on (verify_hostname={}, client certificate: {})",
                security.tls.verify_hostname,
                if security.tls.keystore_key.is_some() { "yes" } else { "no" }
            )
        } else {
            "off".to_owned()
        };
        let destination_sasl = security.sasl.as_ref().map_or("off".to_owned(), |s| format!("{} as {}", s.mechanism, s.username));
        format!(
            "listen={} advertised_host={} broker_port_base={} destination={} destination_tls={destination_tls} \
             destination_sasl={destination_sasl} metrics_listen={} max_frame_bytes={} max_connections={} \
             max_in_flight_per_connection={} worker_threads={} session_threads={} tcp_congestion_control={} refusal_error_code={} static_mirror_topics={} tls={} mirror_acls={}",
            self.listen,
            self.advertised_host,
            self.broker_port_base.map_or("free".to_owned(), |p| p.to_string()),
            self.bootstrap_servers.join(","),
            self.metrics_listen.map_or("off".to_owned(), |a| a.to_string()),
            self.max_frame_bytes,
            self.max_connections,
            self.max_in_flight_per_connection,
            self.worker_threads.map_or("tokio's default".to_owned(), |n| n.to_string()),
            self.session_threads,
            self.tcp_congestion_control.as_deref().unwrap_or("system default"),
            self.refusal_error_code,
            self.static_mirror_topics.len(),
            self.tls.as_ref().map_or("off".to_owned(), |(c, _)| format!("on ({})", c.display())),
            self.mirror_acls.as_ref().map_or("allow-all".to_owned(), |a| format!("{} rules", a.len())),
        )
    }
}

fn parse_addr(key: &str, value: &str, problems: &mut Vec<ConfigProblem>) -> Option<SocketAddr> {
    let problem = |message: String| ConfigProblem { key: key.to_owned(), message };
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Some(addr);
    }
    if !value.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) {
        problems.push(problem(format!("{value:?} is not a host:port address")));
        return None;
    }
    match value.to_socket_addrs().map(|mut it| it.next()) {
        Ok(Some(addr)) => Some(addr),
        Ok(None) => {
            problems.push(problem(format!("{value:?} resolves to no address")));
            None
        }
        Err(e) => {
            problems.push(problem(format!("cannot resolve {value:?}: {e}")));
            None
        }
    }
}

fn parse_state(name: &str) -> Option<PartitionState> {
    Some(match name.to_ascii_uppercase().as_str() {
        "INITIALIZING" => PartitionState::Initializing,
        "PREPARING" => PartitionState::Preparing,
        "MIRRORING" => PartitionState::Mirroring,
        "PAUSED" => PartitionState::Paused,
        "STOPPING" => PartitionState::Stopping,
        "STOPPED" => PartitionState::Stopped,
        "FAILED" => PartitionState::Failed { reason: "configured as FAILED".to_owned() },
        _ => return None,
    })
}

impl ProxyConfig {
    /// Checks every value and returns the typed settings, or every problem found.
    ///
    /// # Errors
    /// The list of problems, each naming its key.
    pub fn validate(&self) -> Result<ProxySettings, Vec<ConfigProblem>> {
        let mut problems = Vec::new();
        let mut problem = |key: &str, message: String| problems.push(ConfigProblem { key: key.to_owned(), message });

        let mut addr_problems = Vec::new();
        let listen = parse_addr("proxy.listen", &self.proxy.listen, &mut addr_problems);
        let metrics_listen = self.admin.metrics_listen.as_deref().and_then(|a| parse_addr("admin.metrics_listen", a, &mut addr_problems));
        for p in addr_problems.drain(..) {
            problem(&p.key, p.message);
        }
        let advertised_host = match &self.proxy.advertised_host {
            Some(h) if h.trim().is_empty() || h.contains(':') && !h.starts_with('[') && h.parse::<std::net::Ipv6Addr>().is_err() => {
                problem("proxy.advertised_host", format!("{h:?} is not a host name or address"));
                String::new()
            }
            Some(h) => h.clone(),
            None => {
                let host = self.proxy.listen.rsplit_once(':').map(|(h, _)| h).unwrap_or_default();
                let host = host.trim_start_matches('[').trim_end_matches(']');
                if host.is_empty() || host == "0.0.0.0" || host == "::" {
                    problem("proxy.advertised_host", "required when proxy.listen is a wildcard address".to_owned());
                }
                host.to_owned()
            }
        };
        let broker_port_base = match (self.proxy.broker_port_base, listen) {
            (Some(0), _) => None,
            (Some(p), _) => Some(p),
            (None, Some(l)) if l.port() == 0 => None,
            (None, Some(l)) => match l.port().checked_add(1) {
                Some(p) => Some(p),
                None => {
                    problem("proxy.broker_port_base", "listen port 65535 leaves no room for broker ports".to_owned());
                    None
                }
            },
            (None, None) => None,
        };
        if self.proxy.max_frame_bytes < 1024 || self.proxy.max_frame_bytes > i32::MAX as usize {
            problem("proxy.max_frame_bytes", format!("{} is outside 1024..=2147483647", self.proxy.max_frame_bytes));
        }
        if self.destination.max_response_bytes < 1024 || self.destination.max_response_bytes > i32::MAX as usize {
            problem("destination.max_response_bytes", format!("{} is outside 1024..=2147483647", self.destination.max_response_bytes));
        }
        if self.proxy.max_connections == 0 {
            problem("proxy.max_connections", "must be at least 1".to_owned());
        }
        if self.proxy.max_in_flight_per_connection == 0 {
            problem("proxy.max_in_flight_per_connection", "must be at least 1".to_owned());
        }
        if let Some(n) = self.proxy.worker_threads.filter(|n| !(1..=MAX_WORKER_THREADS).contains(n)) {
            problem("proxy.worker_threads", format!("{n} is outside 1..={MAX_WORKER_THREADS}"));
        }
        let tcp_congestion_control = self.proxy.tcp_congestion_control.as_deref().map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned);
        if let Some(name) = &tcp_congestion_control {
            if name.len() > MAX_CONGESTION_NAME_LEN || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                problem(
                    "proxy.tcp_congestion_control",
                    format!("{name:?} is not an algorithm name (at most {MAX_CONGESTION_NAME_LEN} letters, digits, `_` or `-`; e.g. cubic)"),
                );
            } else if let Err(e) = super::sockopt::check_congestion(name) {
                // Like a host name, only this system can tell: tried on a socket of the process's own.
                let (available, allowed) = super::sockopt::congestion_choices();
                problem(
                    "proxy.tcp_congestion_control",
                    format!("cannot use {name:?} (this system has: {available}; allowed without CAP_NET_ADMIN: {allowed}): {e}"),
                );
            }
        }
        for (key, ms) in [
            ("destination.connect_timeout_ms", self.destination.connect_timeout_ms),
            ("destination.startup_timeout_ms", self.destination.startup_timeout_ms),
            ("destination.metadata_refresh_interval_ms", self.destination.metadata_refresh_interval_ms),
        ] {
            if ms == 0 {
                problem(key, "must be at least 1 ms".to_owned());
            }
        }
        let bootstrap_servers: Vec<String> = self.destination.bootstrap_servers.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect();
        if bootstrap_servers.is_empty() {
            problem("destination.bootstrap_servers", "no host:port given".to_owned());
        }
        for server in &bootstrap_servers {
            if !server.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0)) {
                problem("destination.bootstrap_servers", format!("{server:?} is not a host:port address"));
            }
        }
        let code = self.policy.refusal_error_code;
        match ErrorCode::try_from_code(code) {
            None => problem("policy.refusal_error_code", "0 is success, not an error".to_owned()),
            Some(e) if e.is_retriable() => problem("policy.refusal_error_code", format!("{code} ({e:?}) is retriable; clients would retry forever")),
            Some(_) => {}
        }
        let mut static_mirror_topics = Vec::new();
        for (i, t) in self.policy.static_mirror_topics.iter().enumerate() {
            let state = match t.state.as_deref() {
                None => Some(PartitionState::Mirroring),
                Some(s) => parse_state(s),
            };
            match state {
                Some(state) => static_mirror_topics.push((t.topic.clone(), t.mirror.clone(), state)),
                None => problem(
                    &format!("policy.static_mirror_topics[{i}].state"),
                    format!("{:?} is not a partition state", t.state.as_deref().unwrap_or_default()),
                ),
            }
        }
        let tls = self.proxy.tls.as_ref().map(|t| (PathBuf::from(&t.cert_file), PathBuf::from(&t.key_file)));
        if let Some((cert, key)) = &tls {
            for (k, path) in [("proxy.tls.cert_file", cert), ("proxy.tls.key_file", key)] {
                if !path.is_file() {
                    problem(k, format!("{} is not a readable file", path.display()));
                }
            }
        }
        let mirror_secret = match &self.mirrors.secret_key_file {
            None => None,
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
                Ok(_) => {
                    problem("mirrors.secret_key_file", format!("{path} is empty"));
                    None
                }
                Err(e) => {
                    problem("mirrors.secret_key_file", format!("cannot read {path}: {e}"));
                    None
                }
            },
        };
        if self.mirrors.state_topic.trim().is_empty() {
            problem("mirrors.state_topic", "must not be empty".to_owned());
        }
        if self.mirrors.group_id.as_deref().is_some_and(|g| g.trim().is_empty()) {
            problem("mirrors.group_id", "must not be empty".to_owned());
        }
        if self.mirrors.session_timeout_ms == 0 || self.mirrors.session_timeout_ms > i32::MAX as u64 {
            problem("mirrors.session_timeout_ms", format!("{} is not a usable timeout", self.mirrors.session_timeout_ms));
        }
        if self.mirrors.heartbeat_interval_ms == 0 || self.mirrors.heartbeat_interval_ms >= self.mirrors.session_timeout_ms {
            problem(
                "mirrors.heartbeat_interval_ms",
                format!("{} must be above 0 and below mirrors.session_timeout_ms ({})", self.mirrors.heartbeat_interval_ms, self.mirrors.session_timeout_ms),
            );
        }
        if self.mirrors.num_replica_fetchers == 0 || self.mirrors.num_replica_fetchers > 64 {
            problem("mirrors.num_replica_fetchers", format!("{} is not between 1 and 64", self.mirrors.num_replica_fetchers));
        }
        if self.mirrors.buffer_bytes < 1 << 20 {
            problem("mirrors.buffer_bytes", format!("{} is below 1048576 (1 MiB)", self.mirrors.buffer_bytes));
        }
        let (destination_security, security_problems) = self.destination_security();
        for p in security_problems {
            problem(&p.key, p.message);
        }
        let mirror_acls = self.mirrors.acls.as_ref().map(|acls| {
            acls.iter()
                .enumerate()
                .filter_map(|(i, a)| {
                    let operation = MirrorOperation::parse(&a.operation);
                    if operation.is_none() {
                        problem(
                            &format!("mirrors.acls[{i}].operation"),
                            format!("{:?} is not one of CREATE, DELETE, ALTER, DESCRIBE, ALTER_CONFIGS, DESCRIBE_CONFIGS", a.operation),
                        );
                    }
                    let principal = a.principal.trim();
                    if principal != "*" && !principal.split_once(':').is_some_and(|(t, n)| !t.is_empty() && !n.is_empty()) {
                        problem(&format!("mirrors.acls[{i}].principal"), format!("{principal:?} is not `*` or `Type:name` (e.g. User:alice)"));
                    }
                    if a.mirror.trim().is_empty() {
                        problem(&format!("mirrors.acls[{i}].mirror"), "must not be empty (use `*` for every mirror)".to_owned());
                    }
                    Some(MirrorAcl { principal: principal.to_owned(), operation: operation?, mirror: a.mirror.trim().to_owned() })
                })
                .collect()
        });
        let (Some(listen), true) = (listen, problems.is_empty()) else {
            return Err(problems);
        };
        Ok(ProxySettings {
            listen,
            advertised_host,
            broker_port_base,
            max_frame_bytes: self.proxy.max_frame_bytes,
            max_response_bytes: self.destination.max_response_bytes,
            max_connections: self.proxy.max_connections,
            max_in_flight_per_connection: self.proxy.max_in_flight_per_connection,
            shutdown_grace_period: Duration::from_millis(self.proxy.shutdown_grace_period_ms),
            worker_threads: self.proxy.worker_threads,
            session_threads: self.proxy.session_threads,
            tcp_congestion_control,
            bootstrap_servers,
            connect_timeout: Duration::from_millis(self.destination.connect_timeout_ms),
            startup_timeout: Duration::from_millis(self.destination.startup_timeout_ms),
            metadata_refresh_interval: Duration::from_millis(self.destination.metadata_refresh_interval_ms),
            broker_removal_delay: Duration::from_millis(self.destination.broker_removal_delay_ms),
            metrics_listen,
            refusal_error_code: code,
            static_mirror_topics,
            tls,
            mirrors_enabled: self.mirrors.enabled,
            mirror_state_topic: self.mirrors.state_topic.clone(),
            mirror_secret,
            mirror_group_id: self.mirrors.group_id.clone(),
            mirror_session_timeout: Duration::from_millis(self.mirrors.session_timeout_ms),
            mirror_heartbeat_interval: Duration::from_millis(self.mirrors.heartbeat_interval_ms),
            mirror_fetchers_per_broker: self.mirrors.num_replica_fetchers,
            mirror_buffer_bytes: self.mirrors.buffer_bytes,
            mirror_throttled_rate: self.mirrors.replication_throttled_rate.filter(|r| *r > 0),
            destination_security,
            mirror_acls,
        })
    }

    /// `destination.tls` and `destination.sasl` as the client's [`SecurityConfig`]; files are read and
    /// PEM parsed here, so every problem names its key.
    fn destination_security(&self) -> (SecurityConfig, Vec<ConfigProblem>) {
        let problems = std::cell::RefCell::new(Vec::new());
        let problem = |key: &str, message: String| problems.borrow_mut().push(ConfigProblem { key: key.to_owned(), message });
        let read = |key: &str, path: &str| match std::fs::read_to_string(path) {
            Ok(text) if !text.trim().is_empty() => Some(text),
            Ok(_) => {
                problem(key, format!("{path} is empty"));
                None
            }
            Err(e) => {
                problem(key, format!("cannot read {path}: {e}"));
                None
            }
        };
        let tls = self.destination.tls.as_ref().map(|t| {
            let ca = read("destination.tls.ca_file", &t.ca_file);
            let (cert, key) = match (&t.cert_file, &t.key_file) {
                (Some(c), Some(k)) => (read("destination.tls.cert_file", c), read("destination.tls.key_file", k)),
                (None, None) => (None, None),
                (Some(_), None) => {
                    problem("destination.tls.key_file", "required with destination.tls.cert_file".to_owned());
                    (None, None)
                }
                (None, Some(_)) => {
                    problem("destination.tls.cert_file", "required with destination.tls.key_file".to_owned());
                    (None, None)
                }
            };
            let complete = ca.is_some() && cert.is_some() == t.cert_file.is_some() && key.is_some() == t.key_file.is_some();
            let settings = TlsSettings {
                truststore_certificates: ca,
                keystore_certificate_chain: cert,
                keystore_key: key,
                verify_hostname: t.verify_hostname,
                ..TlsSettings::default()
            };
            if complete {
                if let Err(ClientError::Config { key, message }) = TlsConnector::new(&settings) {
                    let ours = match key.as_str() {
                        "ssl.keystore.certificate.chain" => "destination.tls.cert_file",
                        "ssl.keystore.key" => "destination.tls.key_file",
                        _ => "destination.tls.ca_file",
                    };
                    problem(ours, message);
                }
            }
            settings
        });
        let sasl = self.destination.sasl.as_ref().and_then(|s| {
            let mechanism = SaslMechanism::parse(&s.mechanism);
            if mechanism.is_none() {
                problem("destination.sasl.mechanism", format!("{:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", s.mechanism));
            }
            if s.username.trim().is_empty() {
                problem("destination.sasl.username", "must not be empty".to_owned());
            }
            let password = match (&s.password, &s.password_file) {
                (Some(p), None) if !p.is_empty() => Some(p.clone()),
                (Some(_), None) => {
                    problem("destination.sasl.password", "is empty".to_owned());
                    None
                }
                (None, Some(path)) => read("destination.sasl.password_file", path).map(|p| p.trim_end_matches(['\n', '\r']).to_owned()),
                (Some(_), Some(_)) => {
                    problem("destination.sasl.password", "give destination.sasl.password_file or the password, not both".to_owned());
                    None
                }
                (None, None) => {
                    problem("destination.sasl.password_file", "required (or the password in KMP_DESTINATION__SASL__PASSWORD)".to_owned());
                    None
                }
            };
            Some(SaslSettings { mechanism: mechanism?, username: s.username.trim().to_owned(), password: password? })
        });
        let protocol = match (tls.is_some(), self.destination.sasl.is_some()) {
            (false, false) => SecurityProtocol::Plaintext,
            (true, false) => SecurityProtocol::Ssl,
            (false, true) => SecurityProtocol::SaslPlaintext,
            (true, true) => SecurityProtocol::SaslSsl,
        };
        (SecurityConfig { protocol, tls: tls.unwrap_or_default(), sasl }, problems.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str, env: &[(&str, &str)]) -> Result<ProxySettings, ConfigError> {
        ConfigSource { file: None, yaml: Some(yaml.to_owned()), env: env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect() }.load()
    }

    const MINIMAL: &str = "proxy:\n  listen: \"127.0.0.1:9192\"\n  advertised_host: \"127.0.0.1\"\ndestination:\n  bootstrap_servers: \"127.0.0.1:9092\"\nadmin:\n  metrics_listen: \"127.0.0.1:9190\"\n";

    #[test]
    fn the_issue_keys_load() {
        let s = load(MINIMAL, &[]).unwrap();
        assert_eq!(s.listen, "127.0.0.1:9192".parse().unwrap());
        assert_eq!(s.advertised_host, "127.0.0.1");
        assert_eq!(s.broker_port_base, Some(9193));
        assert_eq!(s.bootstrap_servers, vec!["127.0.0.1:9092".to_owned()]);
        assert_eq!(s.metrics_listen, Some("127.0.0.1:9190".parse().unwrap()));
        assert_eq!(s.refusal_error_code, DEFAULT_REFUSAL_ERROR_CODE);
    }

    #[test]
    fn the_replication_ceiling_is_optional_and_zero_is_none() {
        assert_eq!(load(MINIMAL, &[]).unwrap().mirror_throttled_rate, None);
        let set = load(&format!("{MINIMAL}mirrors:\n  replication_throttled_rate: 1048576\n"), &[]).unwrap();
        assert_eq!(set.mirror_throttled_rate, Some(1_048_576));
        let env = load(MINIMAL, &[("KMP_MIRRORS__REPLICATION_THROTTLED_RATE", "2000")]).unwrap();
        assert_eq!(env.mirror_throttled_rate, Some(2000));
        assert_eq!(load(&format!("{MINIMAL}mirrors:\n  replication_throttled_rate: 0\n"), &[]).unwrap().mirror_throttled_rate, None);
        assert!(load(&format!("{MINIMAL}mirrors:\n  replication_throttled_rate: -1\n"), &[]).is_err());
    }

    #[test]
    fn env_overrides_every_key() {
        let s = load(
            MINIMAL,
            &[
                ("KMP_PROXY__LISTEN", "127.0.0.1:7000"),
                ("KMP_DESTINATION__BOOTSTRAP_SERVERS", "127.0.0.1:1111,127.0.0.1:2222"),
                ("KMP_PROXY__MAX_IN_FLIGHT_PER_CONNECTION", "7"),
                ("KMP_PROXY__WORKER_THREADS", "1"),
                ("OTHER_PROXY__LISTEN", "ignored"),
                ("KMP_DEST_BOOTSTRAP", "not a configuration key"),
                ("KMP_MIRRORS__ENABLED", "false"),
            ],
        )
        .unwrap();
        assert_eq!(s.listen.port(), 7000);
        assert_eq!(s.broker_port_base, Some(7001));
        assert_eq!(s.bootstrap_servers.len(), 2);
        assert_eq!(s.max_in_flight_per_connection, 7);
        assert_eq!(s.worker_threads, Some(1));
        assert!(!s.mirrors_enabled);
    }

    #[test]
    fn env_alone_is_enough() {
        let s = load("", &[("KMP_PROXY__LISTEN", "127.0.0.1:0"), ("KMP_DESTINATION__BOOTSTRAP_SERVERS", "127.0.0.1:9092")]).unwrap();
        assert_eq!(s.broker_port_base, None);
    }

    #[test]
    fn unknown_key_is_named() {
        let err = load(&MINIMAL.replace("listen:", "lisen:"), &[]).unwrap_err();
        let line = err.to_string();
        assert!(line.contains("lisen"), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
        let err = load(&format!("{MINIMAL}extra: 1\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }

    #[test]
    fn bad_values_are_all_named() {
        let yaml =
            MINIMAL.replace("\"127.0.0.1:9192\"", "\"nonsense\"").replace("\"127.0.0.1:9190\"", "\"also:bad:\"").replace("\"127.0.0.1:9092\"", "\"nohost\"");
        let err = load(&yaml, &[]).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert!(keys.contains(&"proxy.listen"), "{err}");
        assert!(keys.contains(&"admin.metrics_listen"), "{err}");
        assert!(keys.contains(&"destination.bootstrap_servers"), "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let err = load(&format!("{MINIMAL}policy:\n  refusal_error_code: lots\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("refusal_error_code"), "{err}");
    }

    #[test]
    fn worker_threads_default_to_one_per_cpu_and_zero_is_refused() {
        assert_eq!(load(MINIMAL, &[]).unwrap().worker_threads, None);
        assert!(!load(MINIMAL, &[]).unwrap().session_threads);
        assert!(load(MINIMAL, &[("KMP_PROXY__SESSION_THREADS", "true")]).unwrap().session_threads);
        for bad in ["0", "5000"] {
            let err = load(MINIMAL, &[("KMP_PROXY__WORKER_THREADS", bad)]).unwrap_err();
            assert_eq!(err.problems()[0].key, "proxy.worker_threads", "{err}");
            assert!(err.to_string().contains(&format!("{bad} is outside 1..=1024")), "{err}");
        }
        let err = load(MINIMAL, &[("KMP_PROXY__WORKER_THREADS", "many")]).unwrap_err();
        assert!(err.to_string().contains("worker_threads"), "{err}");
    }

    #[test]
    fn tcp_congestion_control_defaults_to_the_system_and_takes_only_algorithm_names() {
        assert_eq!(load(MINIMAL, &[]).unwrap().tcp_congestion_control, None);
        // Empty (an environment override clearing a value from the file) means the system's default.
        // `reno` is in every Linux kernel and allowed to every process, so this loads anywhere.
        let yaml = MINIMAL.replacen("proxy:\n", "proxy:\n  tcp_congestion_control: reno\n", 1);
        assert_eq!(load(&yaml, &[]).unwrap().tcp_congestion_control.as_deref(), Some("reno"));
        assert_eq!(load(&yaml, &[("KMP_PROXY__TCP_CONGESTION_CONTROL", "")]).unwrap().tcp_congestion_control, None);
        assert_eq!(load(MINIMAL, &[("KMP_PROXY__TCP_CONGESTION_CONTROL", " reno ")]).unwrap().tcp_congestion_control.as_deref(), Some("reno"));
        for bad in ["cubic; rm", "a-name-longer-than-15", "bbr/x"] {
            let err = load(MINIMAL, &[("KMP_PROXY__TCP_CONGESTION_CONTROL", bad)]).unwrap_err();
            assert_eq!(err.problems()[0].key, "proxy.tcp_congestion_control", "{err}");
            assert!(err.to_string().contains("is not an algorithm name"), "{err}");
        }
        let err = load(MINIMAL, &[("KMP_PROXY__TCP_CONGESTION_CONTROL", "no_such_algo")]).unwrap_err();
        assert_eq!(err.problems()[0].key, "proxy.tcp_congestion_control", "{err}");
        assert!(err.to_string().contains("cannot use \"no_such_algo\" (this system has: "), "{err}");
    }

    #[test]
    fn retriable_refusal_code_is_refused() {
        let err = load(&format!("{MINIMAL}policy:\n  refusal_error_code: 6\n"), &[]).unwrap_err();
        assert_eq!(err.problems()[0].key, "policy.refusal_error_code");
    }

    #[test]
    fn static_mirror_topics_parse() {
        let s = load(
            &format!("{MINIMAL}policy:\n  static_mirror_topics:\n    - {{topic: orders, mirror: dr, state: paused}}\n    - {{topic: x, mirror: dr}}\n"),
            &[],
        )
        .unwrap();
        assert_eq!(s.static_mirror_topics[0], ("orders".to_owned(), "dr".to_owned(), PartitionState::Paused));
        assert_eq!(s.static_mirror_topics[1].2, PartitionState::Mirroring);
    }

    #[test]
    fn tls_files_must_exist() {
        let err = load(&MINIMAL.replace("  advertised_host", "  tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}\n  advertised_host"), &[])
            .unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, vec!["proxy.tls.cert_file", "proxy.tls.key_file"], "{err}");
        let err = load(&MINIMAL.replace("  advertised_host", "  tls: {cert: x}\n  advertised_host"), &[]).unwrap_err();
        assert!(err.to_string().contains("cert"), "{err}");
    }

    /// Writes `text` to a fresh file named `…name`, removed when the returned path drops.
    fn temp_file(name: &str, text: &str) -> tempfile::TempPath {
        let path = tempfile::Builder::new().prefix("kmp-config-test-").suffix(name).tempfile().unwrap().into_temp_path();
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn destination_security_keys_load_and_hide_the_password() {
        let password = temp_file("password", "pa55-Word\n");
        let yaml = MINIMAL
            .replace("destination:\n", &format!("destination:\n  sasl: {{mechanism: SCRAM-SHA-512, username: kmp, password_file: {}}}\n", password.display()));
        let s = load(&yaml, &[]).unwrap();
        assert_eq!(s.destination_security.protocol, SecurityProtocol::SaslPlaintext);
        let sasl = s.destination_security.sasl.clone().unwrap();
        assert_eq!((sasl.mechanism, sasl.username.as_str(), sasl.password.as_str()), (SaslMechanism::ScramSha512, "kmp", "pa55-Word"));
        assert!(!format!("{s:?}").contains("pa55-Word"), "password in Debug");
        assert!(!s.summary().contains("pa55-Word"), "password in the summary");
        assert!(s.summary().contains("destination_sasl=SCRAM-SHA-512 as kmp"), "{}", s.summary());
        let client = s.destination_client_config("x");
        assert_eq!(client.connection.security, s.destination_security);

        // The password from the environment instead of a file.
        let yaml = MINIMAL.replace("destination:\n", "destination:\n  sasl: {mechanism: PLAIN, username: kmp}\n");
        let s = load(&yaml, &[("KMP_DESTINATION__SASL__PASSWORD", "from-env")]).unwrap();
        assert_eq!(s.destination_security.sasl.unwrap().password, "from-env");
    }

    #[test]
    fn destination_security_problems_name_their_keys() {
        let yaml = MINIMAL.replace(
            "destination:\n",
            "destination:\n  tls: {ca_file: /nonexistent/ca.pem, cert_file: /nonexistent/c.pem}\n  sasl: {mechanism: GSSAPI, username: \"\"}\n",
        );
        let err = load(&yaml, &[]).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        for key in
            ["destination.tls.ca_file", "destination.tls.key_file", "destination.sasl.mechanism", "destination.sasl.username", "destination.sasl.password_file"]
        {
            assert!(keys.contains(&key), "{key} not in {err}");
        }
        // A CA file that is not PEM.
        let not_pem = temp_file("ca.pem", "not a certificate\n");
        let yaml = MINIMAL.replace("destination:\n", &format!("destination:\n  tls: {{ca_file: {}}}\n", not_pem.display()));
        let err = load(&yaml, &[]).unwrap_err();
        assert_eq!(err.problems()[0].key, "destination.tls.ca_file", "{err}");
        // Unknown keys under destination.tls are named too.
        let err = load(&MINIMAL.replace("destination:\n", "destination:\n  tls: {ca: x}\n"), &[]).unwrap_err();
        assert!(err.to_string().contains("ca"), "{err}");
    }

    #[test]
    fn mirror_acls_parse_and_bad_entries_are_named() {
        let yaml = format!(
            "{MINIMAL}mirrors:\n  acls:\n    - {{principal: \"User:admin\", operation: ALTER}}\n    - {{principal: \"*\", operation: describe, mirror: dr}}\n"
        );
        let s = load(&yaml, &[]).unwrap();
        let acls = s.mirror_acls.unwrap();
        assert_eq!(acls[0], MirrorAcl { principal: "User:admin".to_owned(), operation: MirrorOperation::Alter, mirror: "*".to_owned() });
        assert_eq!(acls[1].operation, MirrorOperation::Describe);
        let yaml = format!("{MINIMAL}mirrors:\n  acls:\n    - {{principal: admin, operation: FLY}}\n");
        let err = load(&yaml, &[]).unwrap_err();
        let keys: Vec<&str> = err.problems().iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["mirrors.acls[0].operation", "mirrors.acls[0].principal"], "{err}");
    }

    #[test]
    fn missing_required_key_is_named() {
        let err = load("proxy:\n  listen: \"127.0.0.1:1\"\n", &[]).unwrap_err();
        assert!(err.to_string().contains("destination"), "{err}");
    }
}
