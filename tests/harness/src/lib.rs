//! Test harness for kafka-mirror-proxy: real Apache Kafka brokers and independent Kafka clients.
//!
//! Components:
//! - [`dist()`]: provisions a Kafka version's jars from Maven Central (`tests/kafka/pom.xml`) into
//!   `target/kafka/<version>/libs`, once, safely across concurrent test processes.
//! - [`Cluster`]: starts KRaft clusters (1 or 3 combined broker+controller nodes) on loopback ports,
//!   with kill/restart of single nodes; JVMs die with the test process whatever ends it.
//! - [`source`], [`destination`], [`destination3`]: clusters shared by all tests of one test binary,
//!   started on first use. Tests keep apart by topic names from [`unique_name`].
//! - [`JavaClient`]: the Kafka Java clients (`tests/java/TestClient.java`) for produce, consume and
//!   admin, with JSON in and out.
//! - [`librdkafka_consume`]: an independent reader (librdkafka through confluent-kafka,
//!   `tests/clients/dump_records.py`) printing the same records as the Java consumer, for comparisons.
//! - [`metadata`]: a minimal Metadata v4 request, used for readiness checks.
//! - [`FaultRelay`]: a TCP relay that cuts, black-holes, half-opens, delays and throttles the links
//!   to a cluster started with [`ClusterSpec::relayed`] (the fault tests).
//! - [`secure_cluster`]: clusters whose client listener is SASL_PLAINTEXT, SSL (mutual TLS) or
//!   SASL_SSL, started on first use by the security tests only; [`certs`], [`SASL_USERS`],
//!   [`client_props`] and [`librdkafka_props`] give clients the matching settings.
//!
//! Costs, for planning tests (2 cores): a 1-node cluster starts in about 3 s, a 3-node one in about
//! 6 s; each [`JavaClient`] call starts a JVM (about 1.3 s); [`librdkafka_consume`] about 0.5 s. So
//! share clusters through [`source`] and friends, and batch many records into one `produce` call.
//!
//! Shared clusters live as long as the test process, so run tests with `cargo test` (one process per
//! test binary); a runner with one process per test (nextest) would start clusters for every test.
//!
//! Environment:
//! - `KAFKA_VERSION`: Kafka version of the shared clusters and of [`java_client`] (default 4.4.0).
//! - `KMP_SOURCE_BOOTSTRAP`, `KMP_DEST_BOOTSTRAP`, `KMP_DEST3_BOOTSTRAP`: use clusters that are already
//!   running instead of starting them (the harness then never kills or restarts them).
//! - `KMP_KEEP_CLUSTERS=1`: keep cluster directories (data and logs) after the tests.
//! - `KMP_PYTHON`: the Python that has confluent-kafka (default: a venv in `target/py-venv`, created on
//!   first use from `tests/clients/requirements.txt`).
//! - `KMP_ROOT`: the repository root, if it cannot be found from the working directory.

#![allow(clippy::disallowed_methods, reason = "synchronous test code driving processes: std::time::Instant is right here")]
#![forbid(unsafe_code)]

mod broker_config;
mod client;
mod cluster;
mod dist;
mod error;
mod librdkafka;
mod ports;
mod records;
mod relay;
mod security;
mod util;
mod wire;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

pub use client::{
    Followed, GroupOffset, JavaClient, PartitionOffsets, PartitionProducers, PartitionState, ProducerState, ShareMember, TopicDescription, wait_topic_ready,
};
pub use cluster::{BROKER_START_TIMEOUT, Cluster, ClusterSpec, DEFAULT_BROKER_JVM_OPTS};
pub use dist::{DEFAULT_KAFKA_VERSION, KafkaDist, default_version, dist};
pub use error::{HarnessError, Result};
pub use librdkafka::{librdkafka_consume, provision_python};
pub use records::{Compression, ConsumeOptions, ConsumedRecord, Isolation, ProduceLine, ProduceOptions, ProducerRecord};
pub use relay::{FaultRelay, LinkMode, RelayStats};
pub use security::{Certs, ListenerSecurity, SASL_MECHANISMS, SASL_USERS, SaslLogin, certs, client_props, librdkafka_props, properties_text, sasl_password};
pub use util::repo_root;
pub use wire::{Metadata, MetadataBroker, MetadataPartition, MetadataTopic, metadata};

/// A name no other test (in this or another process) uses: `<prefix>-<8 random hex>-<counter>`. Valid
/// as a Kafka topic, group or transactional id when `prefix` is.
pub fn unique_name(prefix: &str) -> String {
    static PROCESS_TAG: OnceLock<u32> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tag = PROCESS_TAG.get_or_init(|| util::random_u64() as u32);
    format!("{prefix}-{tag:08x}-{}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// The shared source cluster: 1 broker of `KAFKA_VERSION`, started on first use, or `KMP_SOURCE_BOOTSTRAP`.
///
/// # Panics
/// If it cannot be started or reached (every later call panics with the same message).
pub fn source() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    shared(&CLUSTER, "source", "KMP_SOURCE_BOOTSTRAP", || ClusterSpec::new("source"))
}

/// The shared destination cluster: 1 broker of `KAFKA_VERSION` with
/// `transaction.partition.verification.enable=false` (the replicator writes transactional batches without
/// the AddPartitionsToTxn step that verification expects), or `KMP_DEST_BOOTSTRAP`.
///
/// # Panics
/// If it cannot be started or reached.
pub fn destination() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    shared(&CLUSTER, "destination", "KMP_DEST_BOOTSTRAP", || ClusterSpec::new("destination").prop("transaction.partition.verification.enable", "false"))
}

/// A shared 3-broker destination cluster (verification off, as [`destination`]), started on first use,
/// or `KMP_DEST3_BOOTSTRAP`. Tests that kill brokers should start their own cluster instead.
///
/// # Panics
/// If it cannot be started or reached.
pub fn destination3() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    shared(&CLUSTER, "destination3", "KMP_DEST3_BOOTSTRAP", || {
        ClusterSpec::new("destination3").brokers(3).prop("transaction.partition.verification.enable", "false")
    })
}

/// The shared cluster whose client listener has `security` (1 broker of `KAFKA_VERSION`,
/// `transaction.partition.verification.enable=false` like [`destination`], so it can also be a
/// mirror destination), started on first use. Only the security tests use these: every other test
/// stays on the PLAINTEXT clusters. The SASL_PLAINTEXT one ends SASL sessions after 8 s
/// (`connections.max.reauth.ms`), so that tests see KIP-368 session expiry.
///
/// # Panics
/// If it cannot be started.
pub fn secure_cluster(security: ListenerSecurity) -> &'static Cluster {
    static SASL_PLAINTEXT: OnceLock<Result<Cluster, String>> = OnceLock::new();
    static SSL: OnceLock<Result<Cluster, String>> = OnceLock::new();
    static SASL_SSL: OnceLock<Result<Cluster, String>> = OnceLock::new();
    let (cell, name) = match security {
        ListenerSecurity::SaslPlaintext => (&SASL_PLAINTEXT, "sasl-plaintext"),
        ListenerSecurity::Ssl => (&SSL, "ssl"),
        ListenerSecurity::SaslSsl => (&SASL_SSL, "sasl-ssl"),
    };
    let result = cell.get_or_init(|| {
        let mut spec = ClusterSpec::new(name).secure(security).prop("transaction.partition.verification.enable", "false");
        if security == ListenerSecurity::SaslPlaintext {
            spec = spec.prop("connections.max.reauth.ms", SASL_SESSION_LIFETIME_MS.to_string());
        }
        Cluster::start(spec).map_err(|e| e.to_string())
    });
    match result {
        Ok(cluster) => cluster,
        Err(message) => panic!("secure Kafka cluster {name:?} is unavailable: {message}"),
    }
}

/// `connections.max.reauth.ms` of the SASL_PLAINTEXT [`secure_cluster`].
pub const SASL_SESSION_LIFETIME_MS: u64 = 8_000;

fn shared(cell: &'static OnceLock<Result<Cluster, String>>, name: &str, env: &str, spec: impl FnOnce() -> ClusterSpec) -> &'static Cluster {
    let result = cell.get_or_init(|| {
        let outcome = match std::env::var(env) {
            Ok(bootstrap) if !bootstrap.trim().is_empty() => Cluster::external(name, bootstrap),
            _ => Cluster::start(spec()),
        };
        outcome.map_err(|e| e.to_string())
    });
    match result {
        Ok(cluster) => cluster,
        Err(message) => panic!("shared Kafka cluster {name:?} is unavailable: {message}"),
    }
}

/// The [`JavaClient`] of `KAFKA_VERSION`, compiled on first use.
///
/// # Panics
/// If Kafka cannot be provisioned or the client does not compile.
pub fn java_client() -> &'static JavaClient {
    static CLIENT: OnceLock<Result<JavaClient, String>> = OnceLock::new();
    let result = CLIENT.get_or_init(|| dist(&default_version()).and_then(|d| JavaClient::new(&d)).map_err(|e| e.to_string()));
    match result {
        Ok(client) => client,
        Err(message) => panic!("Java test client is unavailable: {message}"),
    }
}
