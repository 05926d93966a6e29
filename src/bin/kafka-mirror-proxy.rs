//! `kafka-mirror-proxy --config FILE`: the proxy in front of the destination cluster, serving the
//! mirror APIs and running the mirrors recorded in `__mirror_state` (`mirrors.enabled`).
//!
//! Thin on purpose: parse the configuration, initialise tracing, register SIGTERM/SIGINT, then run the
//! proxy until a signal and drain. Any startup problem is one line on stderr naming the configuration
//! key, and exit status 1 (2 for bad command-line usage).

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use kafka_mirror_proxy::admin::{AclAuthorizer, AdminHandler, AllowAll, MirrorAuthorizer};
use kafka_mirror_proxy::client::{Client, ConnectionError};
use kafka_mirror_proxy::mirror::{InMemoryMirrorLookup, MembershipConfig, MirrorLookup, MirrorManager, MirrorManagerConfig, SecretKey};
use kafka_mirror_proxy::proxy::{ConfigSource, Proxy, ProxySettings};
use kafka_mirror_proxy::report::error_chain as chain;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// Cluster Mirroring for unmodified Apache Kafka: a Kafka-protocol proxy in front of the destination
/// cluster. Every configuration key can be overridden by an environment variable: KMP_ + the key path
/// in upper case with `__` between levels (proxy.listen is KMP_PROXY__LISTEN). Logs go to stderr,
/// filtered by RUST_LOG (default info).
#[derive(Debug, Parser)]
#[command(name = "kafka-mirror-proxy", version)]
struct Args {
    /// The YAML configuration file (see proxy.yaml).
    #[arg(long, value_name = "FILE")]
    config: std::path::PathBuf,
}

#[allow(clippy::print_stderr, reason = "the one line a failed start prints, before or instead of logging")]
fn fail(message: &str) -> ExitCode {
    eprintln!("kafka-mirror-proxy: {message}");
    ExitCode::FAILURE
}

/// The mirror control plane: its own client of the destination (with `destination.tls` and the
/// proxy's `destination.sasl` credentials), the manager (loads `__mirror_state`, resumes mirrors) and
/// the handler of the mirror APIs, authorizing by `mirrors.acls` (every principal may do everything
/// without it).
async fn start_control_plane(settings: &ProxySettings) -> Result<(Arc<MirrorManager>, Arc<AdminHandler>), String> {
    let client_config = settings.destination_client_config("kafka-mirror-proxy-control");
    let destination = Client::connect(client_config).await.map_err(|e| {
        let key = match e.security_failure() {
            Some(ConnectionError::Authentication { .. }) => "destination.sasl",
            Some(_) => "destination.tls",
            None => "destination.bootstrap_servers",
        };
        format!("{key}: {}", chain(&e))
    })?;
    let mut membership = MembershipConfig::for_state_topic(&settings.mirror_state_topic);
    if let Some(group) = &settings.mirror_group_id {
        membership.group_id = group.clone();
    }
    membership.session_timeout = settings.mirror_session_timeout;
    membership.heartbeat_interval = settings.mirror_heartbeat_interval;
    membership.instance = format!("{}:{}", settings.advertised_host, settings.listen.port());
    let config = MirrorManagerConfig {
        state_topic: settings.mirror_state_topic.clone(),
        secret_key: settings.mirror_secret.as_deref().map(SecretKey::derive),
        instance_id: membership.instance.clone(),
        fetchers_per_broker: settings.mirror_fetchers_per_broker,
        buffer_bytes: settings.mirror_buffer_bytes,
        replication_throttled_rate: settings.mirror_throttled_rate,
        membership,
        ..MirrorManagerConfig::default()
    };
    let manager = Arc::new(MirrorManager::start(Arc::new(destination), config).await.map_err(|e| format!("mirrors: {}", chain(&e)))?);
    let authorizer: Arc<dyn MirrorAuthorizer> = match &settings.mirror_acls {
        Some(rules) => Arc::new(AclAuthorizer::new(rules.clone())),
        None => Arc::new(AllowAll),
    };
    let admin = Arc::new(AdminHandler::new(manager.clone(), authorizer));
    Ok((manager, admin))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let settings = match ConfigSource::from_file_and_process_env(&args.config).load() {
        Ok(s) => s,
        Err(e) => return fail(&e.to_string()),
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    std::panic::set_hook(Box::new(|info| {
        error!(panic = %info, "panic");
    }));
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = settings.worker_threads {
        runtime.worker_threads(n);
    }
    let runtime = match runtime.enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}")),
    };
    runtime.block_on(run(settings))
}

async fn run(settings: ProxySettings) -> ExitCode {
    // Signals first, before anything is spawned.
    let shutdown = CancellationToken::new();
    let (mut sigterm, mut sigint) = match (
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()),
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => return fail(&format!("cannot register signal handlers: {e}")),
    };
    info!(worker_threads = tokio::runtime::Handle::current().metrics().num_workers(), "runtime started");
    let on_signal = shutdown.clone();
    let signals = tokio::spawn(async move {
        let name = tokio::select! {
            _ = sigterm.recv() => "SIGTERM",
            _ = sigint.recv() => "SIGINT",
        };
        info!(signal = name, "received signal");
        on_signal.cancel();
    });
    let (lookup, admin, manager) = if settings.mirrors_enabled {
        match start_control_plane(&settings).await {
            Ok((manager, admin)) => (manager.lookup(), Some(admin), Some(manager)),
            Err(message) => {
                signals.abort();
                return fail(&message);
            }
        }
    } else {
        let lookup = Arc::new(InMemoryMirrorLookup::new());
        for (topic, mirror, state) in &settings.static_mirror_topics {
            lookup.set(topic, mirror, state.clone());
        }
        (lookup as Arc<dyn MirrorLookup>, None, None)
    };
    let proxy = match Proxy::start_with_admin(settings, lookup, admin, shutdown).await {
        Ok(p) => p,
        Err(e) => {
            signals.abort();
            return fail(&chain(&e));
        }
    };
    let graceful = proxy.wait().await;
    if let Some(manager) = manager {
        manager.shutdown().await;
    }
    signals.abort();
    info!(graceful, "stopped");
    ExitCode::SUCCESS
}
