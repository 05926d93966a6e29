//! Real Apache Kafka clusters in KRaft mode on loopback, one directory each.
//!
//! # Topology
//! Every node is a combined broker + controller (`process.roles=broker,controller`) and every node is a
//! voter of a static quorum (`controller.quorum.voters`). A 1-node cluster is the simplest thing that
//! works; a 3-node cluster keeps a quorum of 2 when any one node dies, so it survives `kill -9` of any
//! single node, the active controller included. Node ids are `0..brokers`. Spare nodes
//! ([`ClusterSpec::spare_brokers`]) are broker-only (`process.roles=broker`), not voters, and start only
//! when [`Cluster::start_broker`] adds them, so tests can add a broker with a new node id.
//!
//! # Layout
//! ```text
//! target/kafka-clusters/<name>-<pid>-<n>/
//!     log4j2-broker.properties, log4j-broker.properties   broker logging to stdout (4.x / 3.x)
//!     log4j2-tools.properties, log4j-tools.properties     storage tool logging to stderr
//!     node-<id>/server.properties
//!     node-<id>/data/        log.dirs, formatted by kafka.tools.StorageTool
//!     node-<id>/broker.log   the JVM's stdout+stderr, appended across restarts, with a
//!                            "=== kafka-harness:" line at each start and exit (with its status)
//! ```
//! Directories of processes that no longer exist are removed when the next cluster starts; a dropped
//! [`Cluster`] removes its own unless the thread is panicking. `KMP_KEEP_CLUSTERS=1` keeps everything.
//!
//! # Process lifetime
//! Each JVM runs under a small bash wrapper (see [`WRAPPER`]) whose stdin is a pipe held by this
//! process. The wrapper kills the JVM with SIGKILL as soon as that pipe closes, which happens when the
//! [`Cluster`] kills the node, is dropped, or when this process exits for any reason (panic, abort,
//! SIGKILL: the kernel closes the pipe). Wrappers run in their own process group, so a terminal's Ctrl-C
//! reaches only the test process, whose exit then tears the brokers down.
//!
//! # Ports
//! Each node has a client and a controller port on 127.0.0.1, picked by [`crate::ports`] and kept
//! across restarts. If a broker still fails to bind (another process won the race for a port), the
//! whole start is retried on new ports.

use std::fmt;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::broker_config::{broker_properties, format_storage, random_cluster_id, write_log_configs};
use crate::dist::{self, KafkaDist};
use crate::error::{HarnessError, Result};
use crate::ports::pick_port;
use crate::security::ListenerSecurity;
use crate::util::{self, TAIL_LINES};
use crate::wire;

/// How long a node may take from `java` to answering Metadata with the expected brokers.
pub const BROKER_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a graceful stop ([`Cluster::stop_broker`]) may take before the node is killed.
const GRACEFUL_STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Timeout of one readiness request.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts at starting a cluster when ports were taken under us.
const START_ATTEMPTS: usize = 3;

/// JVM options of each broker. A small heap, the serial collector and C1-only JIT keep startup fast and
/// CPU use low on a 2-core machine running several brokers and clients at once; test traffic is small.
pub const DEFAULT_BROKER_JVM_OPTS: &[&str] =
    &["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true"];

/// Runs the JVM given as arguments 2.. with output appended to the file in argument 1. Reads commands
/// from fd 3 (the harness's pipe): `term` sends SIGTERM (graceful shutdown); end of file sends SIGKILL.
/// Exits with the JVM's status once it is gone.
pub(crate) const WRAPPER: &str = r#"
log=$1; shift
exec 3<&0 </dev/null >>"$log" 2>&1
echo "=== kafka-harness: starting at $(date '+%F %T'): $*"
"$@" 3<&- &
jvm=$!
(
  while read -r cmd <&3; do
    if [ "$cmd" = term ]; then kill -TERM "$jvm" 2>/dev/null; fi
    if [ "$cmd" = stop ]; then kill -STOP "$jvm" 2>/dev/null; fi
    if [ "$cmd" = cont ]; then kill -CONT "$jvm" 2>/dev/null; fi
  done
  kill -KILL "$jvm" 2>/dev/null
) &
watcher=$!
exec 3<&-
wait "$jvm"; status=$?
kill "$watcher" 2>/dev/null
echo "=== kafka-harness: JVM exited with status $status at $(date '+%F %T')"
exit "$status"
"#;

/// What cluster to start. Build with [`ClusterSpec::new`] and the chained setters.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Used in the directory name and in errors; `[A-Za-z0-9_.-]` keeps paths tidy.
    pub name: String,
    /// Kafka version to run (provisioned on demand); defaults to [`dist::default_version`].
    pub version: String,
    /// Number of nodes (each broker + controller). 1 and 3 are what the harness tests.
    pub brokers: u32,
    /// Extra broker properties, applied after (and overriding) the harness defaults.
    pub broker_props: Vec<(String, String)>,
    /// JVM options for each broker; defaults to [`DEFAULT_BROKER_JVM_OPTS`].
    pub jvm_opts: Vec<String>,
    /// `metadata.version` to format with (`--release-version`, e.g. `3.7-IV4`), to behave like an
    /// older cluster; `None` is the version's latest.
    pub release_version: Option<String>,
    /// Feature levels to format with (`--feature name=level`), e.g. `("transaction.version", 0)` for
    /// pre-KIP-890 transactions on 4.x, whose default is 2.
    pub features: Vec<(String, u16)>,
    /// Broker-only nodes (`process.roles=broker`, not voters) with ids `brokers..brokers+spare`,
    /// configured and formatted but not started: [`Cluster::start_broker`] adds one to the running
    /// cluster later, as an operator adds a broker.
    pub spare_brokers: u32,
    /// A secure client listener (see [`crate::security`]); `None`: clients use the PLAINTEXT one.
    pub security: Option<ListenerSecurity>,
    /// A `RELAYED` plaintext listener on each broker, advertised at a relay address of its own
    /// ([`Cluster::relay_routes`], [`Cluster::relayed_bootstrap`]); brokers and controllers keep
    /// talking directly.
    pub relayed: bool,
}

impl ClusterSpec {
    /// A 1-broker cluster of the default version with the harness defaults.
    pub fn new(name: impl Into<String>) -> Self {
        ClusterSpec {
            name: name.into(),
            version: dist::default_version(),
            brokers: 1,
            broker_props: Vec::new(),
            jvm_opts: DEFAULT_BROKER_JVM_OPTS.iter().map(|s| s.to_string()).collect(),
            release_version: None,
            features: Vec::new(),
            spare_brokers: 0,
            security: None,
            relayed: false,
        }
    }

    /// Gives every broker a `RELAYED` listener advertised at a relay address: a client that
    /// bootstraps at [`Cluster::relayed_bootstrap`] reaches every broker through whatever listens on
    /// [`Cluster::relay_routes`] (a [`crate::FaultRelay`]), while the cluster's own traffic goes
    /// direct.
    pub fn relayed(mut self) -> Self {
        self.relayed = true;
        self
    }

    /// Gives the cluster a `CLIENT` listener with `security` on its own port, which
    /// [`Cluster::bootstrap`] then names (the PLAINTEXT listener stays, for the brokers themselves and
    /// [`Cluster::plaintext_bootstrap`]). SASL users are [`crate::SASL_USERS`]; certificates come from
    /// [`crate::certs`].
    pub fn secure(mut self, security: ListenerSecurity) -> Self {
        self.security = Some(security);
        self
    }

    /// Sets the Kafka version.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Sets the number of nodes.
    pub fn brokers(mut self, brokers: u32) -> Self {
        self.brokers = brokers;
        self
    }

    /// Adds (or overrides) one broker property.
    pub fn prop(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.broker_props.push((key.into(), value.into()));
        self
    }

    /// Formats with this `metadata.version` (see [`ClusterSpec::release_version`]).
    pub fn release_version(mut self, release_version: impl Into<String>) -> Self {
        self.release_version = Some(release_version.into());
        self
    }

    /// Formats with a feature level (see [`ClusterSpec::features`]).
    pub fn feature(mut self, name: impl Into<String>, level: u16) -> Self {
        self.features.push((name.into(), level));
        self
    }

    /// Prepares broker-only nodes to add later (see [`ClusterSpec::spare_brokers`]).
    pub fn spare_brokers(mut self, spare: u32) -> Self {
        self.spare_brokers = spare;
        self
    }
}

/// One node's fixed facts: they stay the same across kills and restarts.
#[derive(Debug)]
pub(crate) struct Node {
    /// KRaft `node.id`.
    pub(crate) id: i32,
    /// PLAINTEXT (client, or inter-broker on secure clusters) port on 127.0.0.1.
    pub(crate) port: u16,
    /// The secure `CLIENT` listener's port, on clusters with [`ClusterSpec::security`].
    pub(crate) client_port: Option<u16>,
    /// On relayed clusters: the `RELAYED` listener's port and the relay port it is advertised at.
    pub(crate) relay: Option<(u16, u16)>,
    /// CONTROLLER (KRaft quorum) port on 127.0.0.1.
    pub(crate) controller_port: u16,
    /// `node-<id>/`, holding the config, `data/` and the log.
    pub(crate) dir: PathBuf,
    /// `server.properties`.
    pub(crate) config: PathBuf,
    /// Captured stdout/stderr of the JVM.
    pub(crate) log: PathBuf,
    /// A spare broker-only node: no controller listener, not a voter, not started with the cluster.
    pub(crate) broker_only: bool,
}

impl Node {
    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client_port.unwrap_or(self.port))
    }
}

/// A running wrapper (and its JVM). Closing `control` kills the JVM.
#[derive(Debug)]
struct NodeProcess {
    child: Child,
    control: Option<ChildStdin>,
    command: String,
}

impl NodeProcess {
    /// SIGKILLs the JVM (by closing the control pipe) and reaps the wrapper.
    fn kill(mut self) {
        drop(self.control.take());
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Managed {
    dist: KafkaDist,
    dir: PathBuf,
    cluster_id: String,
    nodes: Vec<Node>,
    jvm_opts: Vec<String>,
    /// Index-aligned with `nodes`; `None` while a node is down.
    procs: Mutex<Vec<Option<NodeProcess>>>,
    /// Set when the directory must survive the drop (failed start).
    keep_dir: AtomicBool,
}

/// A Kafka cluster: started by the harness ([`Cluster::start`]), or an existing one given by address
/// ([`Cluster::external`]), which the harness never kills or restarts.
///
/// Methods take `&self` so shared (`&'static`) clusters can be used from many tests; kills and restarts
/// are serialised by an internal lock, but tests sharing a cluster still see each other's kills, so a
/// test that kills brokers should normally start its own cluster.
pub struct Cluster {
    name: String,
    /// What clients use: the secure listener if there is one.
    bootstrap: String,
    /// The PLAINTEXT listener (the same as `bootstrap` on plain clusters).
    plaintext_bootstrap: String,
    brokers: Vec<(i32, SocketAddr)>,
    managed: Option<Managed>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("bootstrap", &self.bootstrap)
            .field("dir", &self.managed.as_ref().map(|m| &m.dir))
            .field("version", &self.managed.as_ref().map(|m| m.dist.version()))
            .finish()
    }
}

impl Cluster {
    /// Provisions `spec.version`, formats storage and starts every node, then waits until each node
    /// answers Metadata listing all nodes as live brokers.
    ///
    /// # Errors
    /// Provisioning errors, or [`HarnessError::Broker`] with the tail of the failing node's log.
    pub fn start(spec: ClusterSpec) -> Result<Cluster> {
        if spec.brokers == 0 {
            return Err(HarnessError::InvalidArgument(format!("cluster {}: zero brokers", spec.name)));
        }
        let dist = dist::dist(&spec.version)?;
        let clusters_dir = util::target_dir()?.join("kafka-clusters");
        util::create_dir_all(&clusters_dir)?;
        remove_stale_cluster_dirs(&clusters_dir);
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = clusters_dir.join(format!("{}-{}-{n}", spec.name, std::process::id()));
        let mut last_error = None;
        for _attempt in 0..START_ATTEMPTS {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| HarnessError::io(format!("removing {}", dir.display()), e))?;
            }
            match Self::try_start(&spec, &dist, &dir) {
                Ok(cluster) => return Ok(cluster),
                Err((error, port_clash)) => {
                    if !port_clash {
                        return Err(*error);
                    }
                    last_error = Some(*error);
                }
            }
        }
        Err(last_error.expect("invariant: START_ATTEMPTS > 0"))
    }

    /// One start attempt; on failure says whether a port clash caused it (worth retrying).
    fn try_start(spec: &ClusterSpec, dist: &KafkaDist, dir: &Path) -> std::result::Result<Cluster, (Box<HarnessError>, bool)> {
        let fatal = |e| (Box::new(e), false);
        util::create_dir_all(dir).map_err(fatal)?;
        let broker_log_props = write_log_configs(dir, "INFO", false).map_err(fatal)?;
        let mut nodes = Vec::new();
        for id in 0..(spec.brokers + spec.spare_brokers) as i32 {
            let node_dir = dir.join(format!("node-{id}"));
            let port = pick_port().map_err(fatal)?;
            let controller_port = pick_port().map_err(fatal)?;
            let client_port = match spec.security {
                Some(_) => Some(pick_port().map_err(fatal)?),
                None => None,
            };
            let relay = if spec.relayed { Some((pick_port().map_err(fatal)?, pick_port().map_err(fatal)?)) } else { None };
            nodes.push(Node {
                id,
                port,
                client_port,
                relay,
                controller_port,
                config: node_dir.join("server.properties"),
                log: node_dir.join("broker.log"),
                dir: node_dir,
                broker_only: id >= spec.brokers as i32,
            });
        }
        let listener_props = match spec.security {
            Some(security) => crate::security::listener_properties(security, crate::security::certs()).map_err(fatal)?,
            None => Vec::new(),
        };
        for node in &nodes {
            util::create_dir_all(&node.dir).map_err(fatal)?;
            let mut props = broker_properties(spec, dist, &nodes, node);
            props.extend(listener_props.iter().cloned());
            let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            util::write_file(&node.config, text).map_err(fatal)?;
        }
        let cluster_id = random_cluster_id();
        format_storage(spec, dist, dir, &cluster_id, &nodes).map_err(fatal)?;
        let mut jvm_opts = spec.jvm_opts.clone();
        jvm_opts.extend(broker_log_props);
        let node_count = nodes.len();
        let cluster = Cluster {
            name: spec.name.clone(),
            bootstrap: nodes.iter().filter(|n| !n.broker_only).map(Node::client_addr).collect::<Vec<_>>().join(","),
            plaintext_bootstrap: nodes.iter().filter(|n| !n.broker_only).map(Node::addr).collect::<Vec<_>>().join(","),
            brokers: nodes.iter().map(|n| (n.id, SocketAddr::from(([127, 0, 0, 1], n.port)))).collect(),
            managed: Some(Managed {
                dist: dist.clone(),
                dir: dir.to_path_buf(),
                cluster_id,
                nodes,
                jvm_opts,
                procs: Mutex::new((0..node_count).map(|_| None).collect()),
                keep_dir: AtomicBool::new(false),
            }),
        };
        let started = (|| {
            let managed = cluster.managed.as_ref().expect("invariant: just built");
            let mut procs = managed.lock_procs();
            // Spare broker-only nodes wait for `start_broker`.
            let initial = || managed.nodes.iter().enumerate().filter(|(_, n)| !n.broker_only);
            for (index, node) in initial() {
                procs[index] = Some(managed.spawn(node)?);
            }
            let all: Vec<i32> = initial().map(|(_, n)| n.id).collect();
            for (index, node) in initial() {
                managed.wait_ready(&cluster.name, node, &mut procs[index], &all)?;
            }
            Ok(())
        })();
        match started {
            Ok(()) => Ok(cluster),
            Err(error) => {
                let managed = cluster.managed.as_ref().expect("invariant: just built");
                let clash = managed.nodes.iter().any(|n| std::fs::read_to_string(&n.log).is_ok_and(|log| log.contains("Address already in use")));
                // Dropping `cluster` kills the nodes; the directory stays for the post-mortem (a retry
                // starts by removing it).
                managed.keep_dir.store(true, Ordering::Relaxed);
                drop(cluster);
                Err((Box::new(error), clash))
            }
        }
    }

    /// A cluster that is already running elsewhere, e.g. from `KMP_SOURCE_BOOTSTRAP`. Its brokers are
    /// read with a Metadata request, which also checks that it is reachable.
    ///
    /// # Errors
    /// If no bootstrap address answers.
    pub fn external(name: impl Into<String>, bootstrap: impl Into<String>) -> Result<Cluster> {
        let name = name.into();
        let bootstrap = bootstrap.into();
        let mut last = None;
        for addr in bootstrap.split(',').map(str::trim).filter(|a| !a.is_empty()) {
            match wire::metadata(addr, Some(&[]), PROBE_TIMEOUT) {
                Ok(md) => {
                    let mut brokers = Vec::new();
                    for b in md.brokers {
                        let resolved = (b.host.as_str(), b.port as u16).to_socket_addrs().ok().and_then(|mut a| a.next());
                        if let Some(sock) = resolved {
                            brokers.push((b.node_id, sock));
                        }
                    }
                    brokers.sort();
                    return Ok(Cluster { name, plaintext_bootstrap: bootstrap.clone(), bootstrap, brokers, managed: None });
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::InvalidArgument(format!("cluster {name}: empty bootstrap"))))
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bootstrap servers of the client listener, `127.0.0.1:p1,127.0.0.1:p2,...`: the secure one on
    /// clusters started with [`ClusterSpec::secure`].
    pub fn bootstrap(&self) -> String {
        self.bootstrap.clone()
    }

    /// Bootstrap servers of the PLAINTEXT listener (the brokers' own; the same as
    /// [`Cluster::bootstrap`] unless the cluster is secure). For test setup that should not depend on
    /// the security under test, e.g. [`crate::wait_topic_ready`].
    pub fn plaintext_bootstrap(&self) -> String {
        self.plaintext_bootstrap.clone()
    }

    /// Every node's id and client (PLAINTEXT) address, sorted by id, whether or not it is running now
    /// (spare brokers included).
    pub fn broker_addrs(&self) -> Vec<(i32, SocketAddr)> {
        self.brokers.clone()
    }

    /// On a [`ClusterSpec::relayed`] cluster, for every node (spare brokers included): the relay
    /// address it is advertised at and the `RELAYED` listener behind it, for
    /// [`crate::FaultRelay::start`]. Empty otherwise.
    pub fn relay_routes(&self) -> Vec<(SocketAddr, SocketAddr)> {
        let Some(managed) = &self.managed else { return Vec::new() };
        managed
            .nodes
            .iter()
            .filter_map(|n| n.relay.map(|(port, relay)| (SocketAddr::from(([127, 0, 0, 1], relay)), SocketAddr::from(([127, 0, 0, 1], port)))))
            .collect()
    }

    /// The bootstrap list through the relay addresses (voters only), on a relayed cluster.
    pub fn relayed_bootstrap(&self) -> Option<String> {
        let managed = self.managed.as_ref()?;
        let addrs: Vec<String> =
            managed.nodes.iter().filter(|n| !n.broker_only).filter_map(|n| n.relay.map(|(_, relay)| format!("127.0.0.1:{relay}"))).collect();
        (!addrs.is_empty()).then(|| addrs.join(","))
    }

    /// Node ids, sorted.
    pub fn node_ids(&self) -> Vec<i32> {
        self.brokers.iter().map(|(id, _)| *id).collect()
    }

    /// True if the harness did not start this cluster and cannot kill or restart it.
    pub fn is_external(&self) -> bool {
        self.managed.is_none()
    }

    /// The Kafka version, if the harness started the cluster.
    pub fn version(&self) -> Option<&str> {
        self.managed.as_ref().map(|m| m.dist.version())
    }

    /// The cluster's directory, if the harness started the cluster.
    pub fn dir(&self) -> Option<&Path> {
        self.managed.as_ref().map(|m| m.dir.as_path())
    }

    /// The KRaft cluster id the storage was formatted with, if the harness started the cluster.
    pub fn cluster_id(&self) -> Option<&str> {
        self.managed.as_ref().map(|m| m.cluster_id.as_str())
    }

    /// The captured stdout/stderr of a node, if the harness started the cluster and has that node.
    pub fn log_path(&self, node_id: i32) -> Option<PathBuf> {
        self.managed.as_ref()?.nodes.iter().find(|n| n.id == node_id).map(|n| n.log.clone())
    }

    fn managed(&self, operation: &'static str) -> Result<&Managed> {
        self.managed.as_ref().ok_or_else(|| HarnessError::External { cluster: self.name.clone(), bootstrap: self.bootstrap.clone(), operation })
    }

    fn node_index(&self, managed: &Managed, node_id: i32) -> Result<usize> {
        managed.nodes.iter().position(|n| n.id == node_id).ok_or_else(|| HarnessError::UnknownNode {
            cluster: self.name.clone(),
            node_id,
            known: self.node_ids(),
        })
    }

    /// Kills one node with SIGKILL and waits until it is gone. Killing a node that is down is a no-op.
    ///
    /// # Errors
    /// External cluster or unknown node.
    pub fn kill_broker(&self, node_id: i32) -> Result<()> {
        let managed = self.managed("kill a broker of")?;
        let index = self.node_index(managed, node_id)?;
        let proc = managed.lock_procs()[index].take();
        if let Some(proc) = proc {
            proc.kill();
        }
        Ok(())
    }

    /// Freezes one node's JVM (SIGSTOP): its connections stay open and nothing answers, as a broker
    /// stuck in a long GC pause. [`Cluster::resume_broker`] lets it go on; killing it works too.
    ///
    /// # Errors
    /// External cluster, unknown node, or a node that is down.
    pub fn pause_broker(&self, node_id: i32) -> Result<()> {
        self.signal_broker(node_id, b"stop\n")
    }

    /// Lets a node frozen by [`Cluster::pause_broker`] go on (SIGCONT).
    ///
    /// # Errors
    /// As [`Cluster::pause_broker`].
    pub fn resume_broker(&self, node_id: i32) -> Result<()> {
        self.signal_broker(node_id, b"cont\n")
    }

    fn signal_broker(&self, node_id: i32, command: &[u8]) -> Result<()> {
        let managed = self.managed("signal a broker of")?;
        let index = self.node_index(managed, node_id)?;
        let mut procs = managed.lock_procs();
        let control = procs[index]
            .as_mut()
            .and_then(|p| p.control.as_mut())
            .ok_or_else(|| HarnessError::InvalidArgument(format!("cluster {}: node {node_id} is not running", self.name)))?;
        control.write_all(command).and_then(|()| control.flush()).map_err(|e| HarnessError::io("signalling a broker", e))
    }

    /// Stops one node gracefully (SIGTERM: controlled shutdown, leadership moves first) and waits until
    /// it is gone; kills it if that takes longer than 30 s. A node that is down is left alone.
    ///
    /// # Errors
    /// External cluster or unknown node.
    pub fn stop_broker(&self, node_id: i32) -> Result<()> {
        let managed = self.managed("stop a broker of")?;
        let index = self.node_index(managed, node_id)?;
        let Some(mut proc) = managed.lock_procs()[index].take() else {
            return Ok(());
        };
        if let Some(control) = proc.control.as_mut() {
            let _ = control.write_all(b"term\n").and_then(|()| control.flush());
        }
        let exited = util::poll("graceful broker stop", GRACEFUL_STOP_TIMEOUT, POLL_INTERVAL, |_| {
            proc.child.try_wait().map_err(|e| HarnessError::io("waiting for broker", e))
        });
        if exited.is_err() {
            proc.kill();
        }
        Ok(())
    }

    /// Starts a node that was killed or stopped (or a spare broker, for the first time), on the same
    /// ports and data, and waits until it answers Metadata listing itself as a live broker.
    ///
    /// # Errors
    /// External cluster, unknown node, node already running, or [`HarnessError::Broker`].
    pub fn start_broker(&self, node_id: i32) -> Result<()> {
        let managed = self.managed("start a broker of")?;
        let index = self.node_index(managed, node_id)?;
        let node = &managed.nodes[index];
        let mut procs = managed.lock_procs();
        if let Some(proc) = procs[index].as_mut()
            && proc.child.try_wait().ok().flatten().is_none()
        {
            return Err(HarnessError::InvalidArgument(format!("cluster {}: node {node_id} is already running", self.name)));
        }
        procs[index] = Some(managed.spawn(node)?);
        managed.wait_ready(&self.name, node, &mut procs[index], &[node_id])
    }

    /// [`Cluster::kill_broker`] then [`Cluster::start_broker`].
    ///
    /// # Errors
    /// As those two.
    pub fn restart_broker(&self, node_id: i32) -> Result<()> {
        self.kill_broker(node_id)?;
        self.start_broker(node_id)
    }

    /// Kills every node (SIGKILL) and waits for them. The directory stays until the `Cluster` is dropped.
    ///
    /// # Errors
    /// External cluster.
    pub fn stop(&self) -> Result<()> {
        self.managed("stop")?;
        self.kill_all();
        Ok(())
    }

    fn kill_all(&self) {
        if let Some(managed) = &self.managed {
            let procs: Vec<NodeProcess> = managed.lock_procs().iter_mut().filter_map(Option::take).collect();
            // Close every pipe first so the JVMs die in parallel, then reap.
            let mut procs = procs;
            for proc in &mut procs {
                drop(proc.control.take());
            }
            for proc in procs {
                proc.kill();
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        if let Some(managed) = &self.managed
            && !std::thread::panicking()
            && !keep_clusters()
            && !managed.keep_dir.load(Ordering::Relaxed)
        {
            let _ = std::fs::remove_dir_all(&managed.dir);
        }
    }
}

impl Managed {
    fn lock_procs(&self) -> MutexGuard<'_, Vec<Option<NodeProcess>>> {
        // A panic while holding the lock leaves the Vec consistent (each slot is one assignment).
        self.procs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn spawn(&self, node: &Node) -> Result<NodeProcess> {
        let mut java = self.dist.java(&self.jvm_opts, None);
        java.arg("kafka.Kafka").arg(&node.config);
        let command = util::describe_command(&java);
        let mut wrapper = Command::new("bash");
        wrapper
            .arg("-c")
            .arg(WRAPPER)
            .arg("kafka-harness-node")
            .arg(&node.log)
            .arg(java.get_program())
            .args(java.get_args())
            .current_dir(&node.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = wrapper.spawn().map_err(|e| HarnessError::io(format!("spawning {command}"), e))?;
        let control = child.stdin.take();
        Ok(NodeProcess { child, control, command })
    }

    /// Polls `node` until Metadata from it lists every id in `expect` as a live broker.
    fn wait_ready(&self, cluster: &str, node: &Node, slot: &mut Option<NodeProcess>, expect: &[i32]) -> Result<()> {
        let broker_error = |reason: String, command: String| HarnessError::Broker {
            cluster: cluster.to_string(),
            node_id: node.id,
            reason,
            command,
            log_path: node.log.clone(),
            log_tail: util::file_tail(&node.log, TAIL_LINES),
        };
        let Some(proc) = slot.as_mut() else {
            return Err(broker_error("not running".into(), String::new()));
        };
        let addr = node.addr();
        let command = proc.command.clone();
        let outcome = util::poll(&format!("node {} at {addr} to list brokers {expect:?}", node.id), BROKER_START_TIMEOUT, POLL_INTERVAL, |last| {
            if let Some(status) = proc.child.try_wait().map_err(|e| HarnessError::io("polling broker", e))? {
                return Err(broker_error(format!("exited during startup ({status})"), command.clone()));
            }
            match wire::metadata(&addr, Some(&[]), PROBE_TIMEOUT) {
                Ok(md) => {
                    let live: Vec<i32> = md.brokers.iter().map(|b| b.node_id).collect();
                    if expect.iter().all(|id| live.contains(id)) {
                        return Ok(Some(()));
                    }
                    *last = format!("live brokers {live:?}");
                }
                Err(e) => *last = e.to_string(),
            }
            Ok(None)
        });
        let error = match outcome {
            Ok(()) => return Ok(()),
            Err(HarnessError::Timeout { what, waited_ms, last }) => {
                broker_error(format!("not ready after {waited_ms} ms (waited for {what}; last: {last})"), command)
            }
            Err(other) => other,
        };
        if let Some(proc) = slot.take() {
            proc.kill();
        }
        Err(error)
    }
}

fn keep_clusters() -> bool {
    std::env::var_os("KMP_KEEP_CLUSTERS").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Removes `<name>-<pid>-<n>` directories whose process is gone (left by processes that could not
/// clean up: killed, or holding shared clusters in statics, which are never dropped).
fn remove_stale_cluster_dirs(clusters_dir: &Path) {
    if keep_clusters() {
        return;
    }
    util::remove_dirs_of_dead_processes(clusters_dir, |name| {
        let mut parts = name.rsplitn(3, '-');
        let (_n, pid) = (parts.next(), parts.next());
        pid?.parse().ok()
    });
}
