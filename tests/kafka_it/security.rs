//! TLS and SASL everywhere our code talks to Kafka (issue 5 "Security", spec §9), against real brokers
//! whose client listener is SASL_PLAINTEXT, SSL (client certificates required) or SASL_SSL
//! ([`kafka_harness::secure_cluster`], one per setup, started on first use by these tests only):
//!
//! - our client: metadata, produce and fetch back with every mechanism and protocol; wrong
//!   credentials, untrusted CAs and wrong host names as typed errors; SASL session expiry;
//! - the proxy with TLS on its listener in front of a SASL_SSL destination: the Java clients and
//!   librdkafka authenticate through it, the proxy records their principal (the mirror-API ACLs
//!   tell), and `kafka-mirrors --command-config` reaches it;
//! - a Java producer renewing its SASL sessions (KIP-368) through a plaintext proxy;
//! - a mirror whose source is a SASL_SSL cluster copies a topic exactly.

#![allow(clippy::result_large_err, reason = "the harness's HarnessError, returned from blocking closures")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafka_harness::{
    Cluster, ConsumeOptions, ListenerSecurity, ProduceLine, ProduceOptions as JavaProduceOptions, ProducerRecord, SaslLogin, certs, client_props, destination,
    java_client, librdkafka_consume, librdkafka_props, properties_text, provision_python, repo_root, sasl_password, secure_cluster, source, unique_name,
};
use kafka_mirror_proxy::admin::{AclAuthorizer, AdminHandler, MirrorAcl, MirrorAdminClient, MirrorOperation};
use kafka_mirror_proxy::client::{
    BackoffConfig, BrokerInfo, Client, ClientConfig, ClientError, ConnectionError, IsolationLevel, NewTopic, OffsetSpec, ProduceOptions, SecurityConfig,
};
use kafka_mirror_proxy::mirror::{MirrorManager, MirrorManagerConfig, PartitionState, SecretKey};
use kafka_mirror_proxy::protocol::ErrorCode;
use kafka_mirror_proxy::protocol::batch::{BatchBuilder, Record};
use kafka_mirror_proxy::protocol::mirror::{CreateMirrorRequest, ListMirrorsRequest, MirrorConfig, MirrorErrorCode};
use kafka_mirror_proxy::proxy::{Proxy, ProxySettings};
use kafka_mirror_proxy::report::error_chain;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::common::{partition_ready, poll_until};

/// The broker's message for a wrong SCRAM-SHA-256 password (Kafka's `ScramSaslServer`).
const SCRAM_256_REFUSED: &str = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn login<'a>(mechanism: &'a str, user: &'a str) -> Option<SaslLogin<'a>> {
    Some((mechanism, user, sasl_password(user)))
}

/// Our client's security settings from Java client properties, the way every caller builds them.
fn security(props: &[(String, String)]) -> SecurityConfig {
    let map: BTreeMap<String, String> = props.iter().cloned().collect();
    SecurityConfig::from_properties(&map).expect("valid security properties")
}

fn config(bootstrap: &str, props: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new(bootstrap);
    config.connection.security = security(props);
    config.backoff = BackoffConfig { deadline: Duration::from_secs(20), ..BackoffConfig::default() };
    config
}

async fn secure_client(bootstrap: &str, props: &[(String, String)]) -> Client {
    Client::connect(config(bootstrap, props)).await.unwrap_or_else(|e| panic!("client connects to {bootstrap}: {}", error_chain(&e)))
}

/// Runs blocking work (a client process) off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// Metadata names the brokers as the secure listener advertises them; a new topic takes a batch
/// at offset 0, and fetching returns that batch byte for byte (except the partition leader epoch,
/// which the leader stamps in).
async fn round_trip(client: &Client, cluster: &Cluster, tag: &str) {
    let md = client.metadata(&[]).await.expect("metadata");
    let brokers: Vec<String> = md.brokers.values().map(BrokerInfo::addr).collect();
    assert_eq!(brokers.join(","), cluster.bootstrap(), "brokers as the secure listener advertises them");
    let topic = unique_name(tag);
    let created = client
        .create_topics(&[NewTopic { name: topic.clone(), num_partitions: 1, replication_factor: 1, configs: vec![] }], Duration::from_secs(30))
        .await
        .expect("create topic");
    assert!(created[0].is_ok(), "{:?}", created[0]);
    assert_eq!(partition_ready(client, &topic, 0).await, 0, "the new partition is empty");
    let records = (0..25).map(|i| Record {
        key: Some(format!("{tag}-k{i}").into()),
        value: Some(format!("{tag}-v{i}-{}", "x".repeat(i * 7)).into()),
        headers: vec![("h".into(), Some(format!("{i}").into()))],
        ..Record::default()
    });
    let batch = BatchBuilder::new().with_base_timestamp(now_ms()).with_records(records).build().unwrap();
    let produced = client.produce(&topic, 0, batch.clone(), &ProduceOptions::default()).await.expect("produce");
    assert_eq!(produced.base_offset, 0);
    let fetched = client.fetch_partition(&topic, 0, 0, IsolationLevel::ReadUncommitted, 1 << 20).await.expect("fetch").records;
    assert_eq!(fetched.len(), batch.len(), "one batch back");
    assert_eq!(fetched[..12], batch[..12], "base offset and length");
    assert_eq!(fetched[16..], batch[16..], "magic, CRC, attributes, producer fields and records");
}

/// Our client over SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_over_sasl_plaintext_with_each_mechanism() {
    let cluster = secure_cluster(ListenerSecurity::SaslPlaintext);
    for (mechanism, user) in [("PLAIN", "alice"), ("SCRAM-SHA-256", "bob"), ("SCRAM-SHA-512", "admin")] {
        let props = client_props(ListenerSecurity::SaslPlaintext, login(mechanism, user));
        let client = secure_client(&cluster.bootstrap(), &props).await;
        round_trip(&client, cluster, &format!("sasl-{}", mechanism.to_ascii_lowercase())).await;
    }
}

/// Our client over SSL with a client certificate (the listener requires one), given both ways the
/// Java client takes it: one PEM keystore file with key and chain, or inline PEM properties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_over_mutual_tls() {
    let cluster = secure_cluster(ListenerSecurity::Ssl);
    let inline = client_props(ListenerSecurity::Ssl, None);
    assert!(inline.iter().any(|(k, _)| k == "ssl.keystore.key"));
    round_trip(&secure_client(&cluster.bootstrap(), &inline).await, cluster, "ssl-inline").await;
    let file: Vec<(String, String)> = inline
        .iter()
        .filter(|(k, _)| !k.starts_with("ssl.keystore."))
        .cloned()
        .chain([("ssl.keystore.type".to_owned(), "PEM".to_owned()), ("ssl.keystore.location".to_owned(), certs().client_keystore.display().to_string())])
        .collect();
    round_trip(&secure_client(&cluster.bootstrap(), &file).await, cluster, "ssl-file").await;
    // Without a certificate the broker refuses the connection (a TLS alert, after the handshake in
    // TLS 1.3): a security failure, not retried.
    let none: Vec<(String, String)> = inline.iter().filter(|(k, _)| !k.starts_with("ssl.keystore.")).cloned().collect();
    let error = refused(&cluster.bootstrap(), &none).await;
    assert!(error.security_failure().is_some(), "{error:?}");
    assert!(error_chain(&error).ends_with("received fatal alert: BadCertificate"), "{}", error_chain(&error));
}

/// Our client over SASL_SSL with SCRAM-SHA-512.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_over_sasl_ssl() {
    let cluster = secure_cluster(ListenerSecurity::SaslSsl);
    let props = client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-512", "alice"));
    round_trip(&secure_client(&cluster.bootstrap(), &props).await, cluster, "sasl-ssl").await;
}

/// Connects with a retry deadline of ten minutes and expects the connect to fail at once with a
/// security failure (a retry loop would outlive the 60 s guard).
async fn refused(bootstrap: &str, props: &[(String, String)]) -> ClientError {
    let mut config = config(bootstrap, props);
    config.backoff.deadline = Duration::from_secs(600);
    let outcome = tokio::time::timeout(Duration::from_secs(60), Client::connect(config)).await.expect("no retry loop: the refusal is final");
    let error = outcome.expect_err("connection refused");
    assert!(!error.is_retriable(), "{}", error_chain(&error));
    error
}

/// A wrong password is a typed, non-retriable authentication error carrying the broker's message,
/// for SCRAM and PLAIN, over SASL_PLAINTEXT and SASL_SSL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_typed_authentication_error() {
    let cases = [
        (ListenerSecurity::SaslPlaintext, "SCRAM-SHA-256", SCRAM_256_REFUSED),
        (
            ListenerSecurity::SaslSsl,
            "SCRAM-SHA-512",
            "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
        ),
        (ListenerSecurity::SaslPlaintext, "PLAIN", "Authentication failed: Invalid username or password"),
    ];
    for (listener, mechanism, broker_message) in cases {
        let cluster = secure_cluster(listener);
        let props = client_props(listener, Some((mechanism, "alice", "not-the-password")));
        let error = refused(&cluster.bootstrap(), &props).await;
        match error.security_failure() {
            Some(ConnectionError::Authentication { mechanism: m, code, message, addr }) => {
                assert_eq!(*m, mechanism);
                assert_eq!(*code, Some(ErrorCode::SaslAuthenticationFailed));
                assert_eq!(message, broker_message);
                assert_eq!(addr, &cluster.bootstrap());
            }
            other => panic!("{listener:?} {mechanism}: expected an authentication error, got {other:?}"),
        }
        let line = error_chain(&error);
        assert!(line.contains(broker_message) && !line.contains("not-the-password"), "{line}");
    }
}

/// TLS failures are clear errors naming the broker: an untrusted CA, and a host name the
/// certificate does not name (it names only 127.0.0.1; `localhost` is wrong) unless host name
/// verification is off, which still checks the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_certificates_and_wrong_host_names_are_clear_tls_errors() {
    let cluster = secure_cluster(ListenerSecurity::SaslSsl);
    let good = client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "alice"));
    let with = |key: &str, value: &str| -> Vec<(String, String)> {
        good.iter().filter(|(k, _)| k != key).cloned().chain([(key.to_owned(), value.to_owned())]).collect()
    };
    let port = cluster.bootstrap().rsplit_once(':').unwrap().1.to_owned();

    let untrusted = with("ssl.truststore.location", &certs().other_ca.display().to_string());
    let error = refused(&cluster.bootstrap(), &untrusted).await;
    assert!(matches!(error.security_failure(), Some(ConnectionError::Tls { addr, .. }) if *addr == cluster.bootstrap()), "{error:?}");
    let line = error_chain(&error);
    assert!(line.contains(&format!("TLS handshake with {} failed: invalid peer certificate: UnknownIssuer", cluster.bootstrap())), "{line}");

    let by_name = format!("localhost:{port}");
    let error = refused(&by_name, &good).await;
    assert!(matches!(error.security_failure(), Some(ConnectionError::Tls { addr, .. }) if *addr == by_name), "{error:?}");
    let line = error_chain(&error);
    assert!(line.contains(&format!("TLS handshake with {by_name} failed: invalid peer certificate: certificate not valid for name \"localhost\"")), "{line}");

    // Host name check off: the same name connects (the chain is still verified: the untrusted CA
    // still fails).
    let unchecked = with("ssl.endpoint.identification.algorithm", "");
    let client = secure_client(&by_name, &unchecked).await;
    assert_eq!(client.metadata(&[]).await.unwrap().brokers.len(), 1);
    let unchecked_untrusted: Vec<(String, String)> = unchecked
        .iter()
        .filter(|(k, _)| k != "ssl.truststore.location")
        .cloned()
        .chain([("ssl.truststore.location".to_owned(), certs().other_ca.display().to_string())])
        .collect();
    let error = refused(&by_name, &unchecked_untrusted).await;
    assert!(error_chain(&error).contains("UnknownIssuer"), "{}", error_chain(&error));
}

/// KIP-368: the SASL_PLAINTEXT cluster ends sessions after `connections.max.reauth.ms`. Past the
/// session's end, the next request goes over a new, re-authenticated connection and succeeds at the
/// first attempt (Produce is never retried by the client); on the old connection the broker would
/// close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sasl_sessions_are_replaced_before_use() {
    let cluster = secure_cluster(ListenerSecurity::SaslPlaintext);
    let props = client_props(ListenerSecurity::SaslPlaintext, login("SCRAM-SHA-512", "bob"));
    let client = secure_client(&cluster.bootstrap(), &props).await;
    let topic = unique_name("reauth");
    let created = client
        .create_topics(&[NewTopic { name: topic.clone(), num_partitions: 1, replication_factor: 1, configs: vec![] }], Duration::from_secs(30))
        .await
        .unwrap();
    assert!(created[0].is_ok(), "{:?}", created[0]);
    partition_ready(&client, &topic, 0).await;
    let batch = |tag: &str| {
        BatchBuilder::new().with_base_timestamp(now_ms()).with_records([Record { value: Some(tag.to_owned().into()), ..Record::default() }]).build().unwrap()
    };
    assert_eq!(client.produce(&topic, 0, batch("first"), &ProduceOptions::default()).await.unwrap().base_offset, 0);
    let leader = client.leader_of(&topic, 0).await.unwrap();
    let old = client.connection(leader).await.unwrap();
    let expires = old.session_expires_at().expect("the broker announced a session lifetime");
    let lifetime = Duration::from_millis(kafka_harness::SASL_SESSION_LIFETIME_MS);
    assert!(expires <= tokio::time::Instant::now() + lifetime, "{expires:?}");
    // Waiting for the session's end is the point of the test.
    tokio::time::sleep_until(expires + Duration::from_millis(500)).await;
    let second = client.produce(&topic, 0, batch("second"), &ProduceOptions::default()).await;
    assert_eq!(second.map(|p| p.base_offset).map_err(|e| error_chain(&e)), Ok(1), "produced at once on a new connection");
    assert!(!old.is_usable(), "an expired session is not used for new requests");
    let new = client.connection(leader).await.unwrap();
    assert!(!Arc::ptr_eq(&old, &new), "a new connection");
    assert!(new.session_expires_at().unwrap() > expires);
}

/// KIP-368 through the proxy: the SASL_PLAINTEXT cluster ends sessions after
/// `connections.max.reauth.ms` (8 s). A Java producer (SCRAM-SHA-512) writing through a plaintext
/// proxy for three session lifetimes renews its sessions on the connections it has, through the
/// proxy (a connection whose session ran out would be closed by the broker and its in-flight
/// requests retried): every record is acknowledged and on the broker once, and the proxy counted the
/// renewals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_reauthenticate_through_the_proxy() {
    let dst = secure_cluster(ListenerSecurity::SaslPlaintext);
    let mut settings = ProxySettings::for_bootstrap(&dst.bootstrap());
    settings.startup_timeout = Duration::from_secs(30);
    settings.destination_security = security(&client_props(ListenerSecurity::SaslPlaintext, login("SCRAM-SHA-512", "admin")));
    let shutdown = CancellationToken::new();
    let proxy = Proxy::start(settings, Arc::new(kafka_mirror_proxy::mirror::InMemoryMirrorLookup::new()), shutdown.clone()).await.expect("proxy starts");
    let topic = unique_name("reauth-proxy");
    let java = java_client();
    let (b, t) = (dst.plaintext_bootstrap(), topic.clone());
    blocking(move || java.create_topic(&b, &t, 1, 1, &[])).await.expect("create topic");

    const RECORDS: u64 = 2_000;
    let lifetime_s = kafka_harness::SASL_SESSION_LIFETIME_MS / 1000;
    let dir = tempfile::Builder::new().prefix("kmp-reauth-").tempdir().unwrap();
    let config = dir.path().join("producer.properties");
    std::fs::write(&config, properties_text(&client_props(ListenerSecurity::SaslPlaintext, login("SCRAM-SHA-512", "bob")))).unwrap();
    let (b, t) = (proxy.bootstrap_addr().to_string(), topic.clone());
    let (ok, stdout, stderr) = blocking(move || {
        let dist = kafka_harness::dist(&kafka_harness::default_version()).expect("kafka dist");
        let mut cmd = dist.java(&["-Xmx256m".to_owned(), "-XX:+UseSerialGC".to_owned()], None);
        // Three session lifetimes of writing.
        let rate = RECORDS / (3 * lifetime_s);
        cmd.arg("org.apache.kafka.tools.ProducerPerformance").args([
            "--topic",
            &t,
            "--num-records",
            &RECORDS.to_string(),
            "--record-size",
            "100",
            "--throughput",
            &rate.to_string(),
            "--producer.config",
            &config.display().to_string(),
            "--producer-props",
            &format!("bootstrap.servers={b}"),
            "acks=all",
        ]);
        output(cmd)
    })
    .await;
    assert!(ok, "ProducerPerformance through the proxy:\n{stdout}\n{stderr}");
    assert!(stdout.contains(&format!("{RECORDS} records sent")), "{stdout}");
    let renewals = proxy.metrics().client_reauthentications();
    assert!(renewals >= 2, "the producer's sessions were renewed through the proxy: {renewals} renewals");

    let client = secure_client(&dst.bootstrap(), &client_props(ListenerSecurity::SaslPlaintext, login("SCRAM-SHA-512", "admin"))).await;
    let end = client.list_offset(&topic, 0, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await.expect("end offset");
    assert_eq!(end, RECORDS as i64, "every record once: no session ran out under an in-flight request");
    shutdown.cancel();
}

/// A proxy with TLS on its listener in front of the SASL_SSL cluster: its own connections use the
/// admin user (SCRAM-SHA-512); client sessions authenticate themselves through it. The mirror APIs
/// allow `User:admin` everything and `User:alice` nothing.
struct SecureProxy {
    proxy: Proxy,
    manager: Arc<MirrorManager>,
}

impl SecureProxy {
    async fn start(destination: &Cluster) -> Self {
        let certs = certs();
        let mut settings = ProxySettings::for_bootstrap(&destination.bootstrap());
        settings.startup_timeout = Duration::from_secs(30);
        settings.tls = Some((certs.server_cert.clone(), certs.server_key.clone()));
        settings.destination_security = security(&client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-512", "admin")));
        let mut client_config = settings.destination_client_config("kmp-test-control");
        client_config.backoff.deadline = Duration::from_secs(20);
        let control = Client::connect(client_config).await.expect("control plane client");
        let config = MirrorManagerConfig { state_topic: unique_name("__mirror_state_sec"), ..MirrorManagerConfig::default() };
        let manager = Arc::new(MirrorManager::start(Arc::new(control), config).await.expect("manager starts"));
        let acls = MirrorOperation::ALL.iter().map(|op| MirrorAcl { principal: "User:admin".to_owned(), operation: *op, mirror: "*".to_owned() }).collect();
        let admin = Arc::new(AdminHandler::new(manager.clone(), Arc::new(AclAuthorizer::new(acls))));
        let proxy = Proxy::start_with_admin(settings, manager.lookup(), Some(admin), CancellationToken::new()).await.expect("proxy starts");
        Self { proxy, manager }
    }

    fn bootstrap(&self) -> String {
        self.proxy.bootstrap_addr().to_string()
    }
}

fn java_records(n: usize, partitions: i32, tag: &str) -> Vec<ProduceLine> {
    (0..n)
        .map(|i| ProducerRecord::to(i as i32 % partitions).key(format!("k-{tag}-{i}")).value(format!("v-{tag}-{i}")).header("n", format!("{i}")).into())
        .collect()
}

/// Runs `cmd` to its end; returns (success, stdout, stderr).
fn output(mut cmd: std::process::Command) -> (bool, String, String) {
    let out = cmd.stdin(std::process::Stdio::null()).output().expect("command runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs `kafka-mirrors ARGS`; returns (success, stdout, stderr).
async fn kafka_mirrors(args: Vec<String>) -> (bool, String, String) {
    blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-mirrors"));
        cmd.args(args);
        output(cmd)
    })
    .await
}

/// Through the TLS proxy to the SASL_SSL destination: the Java producer (SCRAM-SHA-256) and
/// librdkafka's producer (SCRAM-SHA-512) write, the Java consumer and librdkafka read the exact
/// records that are on the broker; a wrong password gets the broker's authentication error through
/// the proxy; the principal each client authenticated as decides what the mirror APIs allow it; and
/// `kafka-mirrors --command-config` with SASL_SSL properties lists and describes through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_authenticate_through_a_tls_proxy_to_a_sasl_ssl_destination() {
    let dst = secure_cluster(ListenerSecurity::SaslSsl);
    let p = SecureProxy::start(dst).await;
    let proxy = p.bootstrap();
    let java = java_client();
    let topic = unique_name("sec-proxy");
    let (b, t) = (dst.plaintext_bootstrap(), topic.clone());
    blocking(move || java.create_topic(&b, &t, 2, 1, &[])).await.expect("create topic");

    let alice_java = client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "alice"));
    let (b, t, props) = (proxy.clone(), topic.clone(), alice_java.clone());
    let acks = blocking(move || java.produce(&b, &t, &JavaProduceOptions { idempotent: true, props, ..Default::default() }, &java_records(30, 2, "java")))
        .await
        .expect("Java producer through the proxy");
    assert_eq!(acks.len(), 30);
    let rd_props: Vec<String> = librdkafka_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-512", "bob")).iter().map(|(k, v)| format!("{k}={v}")).collect();
    let (b, t, rd) = (proxy.clone(), topic.clone(), rd_props.clone());
    let delivered = blocking(move || {
        let mut cmd = std::process::Command::new(provision_python().expect("python"));
        cmd.arg(repo_root().unwrap().join("tests/interop/librdkafka/produce.py")).args(["--bootstrap", &b, "--topic", &t, "--count", "5", "--partition", "0"]);
        for prop in rd {
            cmd.args(["--prop", &prop]);
        }
        output(cmd)
    })
    .await;
    assert!(delivered.0, "librdkafka producer: {}\n{}", delivered.1, delivered.2);
    let offsets: Vec<i64> = delivered.1.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter_map(|v| v["offset"].as_i64()).collect();
    assert_eq!(offsets, (15..20).collect::<Vec<i64>>(), "{}", delivered.1);

    let (b, t) = (dst.plaintext_bootstrap(), topic.clone());
    let direct = blocking(move || java.consume(&b, &t, &ConsumeOptions::default())).await.expect("direct");
    assert_eq!(direct.len(), 35);
    let (b, t, props) = (proxy.clone(), topic.clone(), client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-512", "bob")));
    let via_java = blocking(move || java.consume(&b, &t, &ConsumeOptions { props, ..ConsumeOptions::default() })).await.expect("Java consumer");
    assert_eq!(via_java, direct);
    let (b, t, props) = (proxy.clone(), topic.clone(), librdkafka_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "alice")));
    let via_rdkafka = blocking(move || librdkafka_consume(&b, &t, &ConsumeOptions { props, ..ConsumeOptions::default() })).await.expect("librdkafka");
    assert_eq!(via_rdkafka, direct);

    // A wrong password: the broker's refusal reaches the Java client and ours through the proxy.
    let wrong = client_props(ListenerSecurity::SaslSsl, Some(("SCRAM-SHA-256", "alice", "wrong")));
    let (b, t, props) = (proxy.clone(), topic.clone(), wrong.clone());
    let (ok, _, stderr) = blocking(move || {
        let mut cmd = java.command();
        cmd.args(["consume", "--bootstrap", &b, "--topic", &t]);
        for (k, v) in props {
            cmd.args(["--prop", &format!("{k}={v}")]);
        }
        output(cmd)
    })
    .await;
    assert!(!ok);
    assert!(stderr.contains(&format!("SaslAuthenticationException: {SCRAM_256_REFUSED}")), "{stderr}");
    let error = refused(&proxy, &wrong).await;
    assert!(matches!(error.security_failure(), Some(ConnectionError::Authentication { message, .. }) if message == SCRAM_256_REFUSED), "{error:?}");

    // The principal decides: admin may create a mirror and sees it; alice may not and does not.
    let admin_sec = security(&client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-512", "admin")));
    let alice_sec = security(&client_props(ListenerSecurity::SaslSsl, login("PLAIN", "alice")));
    let timeout = Duration::from_secs(30);
    let mut as_admin = MirrorAdminClient::connect_with(&proxy, timeout, admin_sec).await.expect("admin connects");
    let mut as_alice = MirrorAdminClient::connect_with(&proxy, timeout, alice_sec).await.expect("alice connects");
    let mirror = unique_name("sec-dr");
    let create = |name: &str| CreateMirrorRequest {
        mirror_name: name.to_owned(),
        configs: vec![MirrorConfig { name: "bootstrap.servers".to_owned(), value: Some(source().bootstrap()) }],
        validate_only: false,
    };
    let r = as_alice.send(&create(&mirror)).await.unwrap();
    assert_eq!(
        (r.error_code, r.error_message.as_deref()),
        (MirrorErrorCode::MirrorAuthorizationFailed.code(), Some(format!("principal `User:alice` is not allowed CREATE on mirror `{mirror}`").as_str()))
    );
    let r = as_admin.send(&create(&mirror)).await.unwrap();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let listed = |r: kafka_mirror_proxy::protocol::mirror::ListMirrorsResponse| r.mirrors.into_iter().map(|m| m.mirror_name).collect::<Vec<_>>();
    assert!(listed(as_admin.send(&ListMirrorsRequest { include_topic_names: false }).await.unwrap()).contains(&mirror));
    assert!(!listed(as_alice.send(&ListMirrorsRequest { include_topic_names: false }).await.unwrap()).contains(&mirror));

    // kafka-mirrors with --command-config (SASL_SSL to the TLS proxy).
    let dir = tempfile::Builder::new().prefix("kmp-sec-cli-").tempdir().unwrap();
    let admin_file = dir.path().join("admin.properties");
    std::fs::write(&admin_file, properties_text(&client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "admin")))).unwrap();
    let alice_file = dir.path().join("alice.properties");
    std::fs::write(&alice_file, properties_text(&client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "alice")))).unwrap();
    let cli = |file: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--bootstrap-server".to_owned(), proxy.clone(), "--command-config".to_owned(), file.display().to_string()];
        all.extend(args.iter().map(|s| (*s).to_owned()));
        kafka_mirrors(all)
    };
    let (ok, out, err) = cli(&admin_file, &["--list", "--json"]).await;
    assert!(ok, "{err}");
    let rows: Vec<Value> = serde_json::from_str::<Value>(out.trim()).unwrap().as_array().unwrap().clone();
    let row = rows.iter().find(|r| r["mirror"] == mirror.as_str()).unwrap_or_else(|| panic!("{mirror} not listed: {out}"));
    assert_eq!(row["bootstrapServer"], source().bootstrap().as_str());
    let (ok, out, err) = cli(&admin_file, &["--describe", "--mirror", &mirror, "--json"]).await;
    assert!(ok, "{err}");
    assert_eq!(serde_json::from_str::<Value>(out.trim()).unwrap(), Value::Array(vec![]), "a mirror without topics has no partition rows");
    let (ok, out, _) = cli(&alice_file, &["--list", "--json"]).await;
    assert!(ok);
    assert!(!out.contains(&mirror), "alice may not see {mirror}: {out}");
    let (ok, _, err) = cli(&alice_file, &["--describe", "--mirror", &mirror]).await;
    assert!(!ok);
    assert_eq!(err.trim(), format!("Error: principal `User:alice` is not allowed DESCRIBE on mirror `{mirror}` (MIRROR_AUTHORIZATION_FAILED)"));
    // A wrong password: one error line with the broker's message.
    let wrong_file = dir.path().join("wrong.properties");
    std::fs::write(&wrong_file, properties_text(&wrong)).unwrap();
    let (ok, _, err) = cli(&wrong_file, &["--list"]).await;
    assert!(!ok);
    assert!(err.trim().starts_with("Error: connection to ") && err.contains(SCRAM_256_REFUSED), "{err}");

    p.manager.delete_mirror(&mirror).await.expect("delete the mirror");
    p.manager.shutdown().await;
}

/// A mirror whose source is the SASL_SSL cluster (SCRAM-SHA-512 over TLS, the CA as PEM
/// truststore) copies a topic into the shared destination at the same offsets, record for record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mirror_copies_from_a_sasl_ssl_source() {
    let (src, dst, java) = (secure_cluster(ListenerSecurity::SaslSsl), destination(), java_client());
    let topic = unique_name("sec-mirror");
    let (b, t) = (src.plaintext_bootstrap(), topic.clone());
    blocking(move || java.create_topic(&b, &t, 2, 1, &[])).await.expect("create source topic");
    let writer = client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "bob"));
    let (b, t, props) = (src.bootstrap(), topic.clone(), writer.clone());
    blocking(move || java.produce(&b, &t, &JavaProduceOptions { idempotent: true, props, ..Default::default() }, &java_records(40, 2, "src")))
        .await
        .expect("Java producer over SASL_SSL");

    let config = MirrorManagerConfig {
        state_topic: unique_name("__mirror_state_sec"),
        secret_key: Some(SecretKey::derive("security test passphrase")),
        fetch_max_wait: Duration::from_millis(100),
        ..MirrorManagerConfig::default()
    };
    let manager = MirrorManager::start(Arc::new(crate::common::client(&dst.bootstrap()).await), config).await.expect("manager");
    let mirror = unique_name("sec-src");
    let mut properties: BTreeMap<String, String> = client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-512", "admin")).into_iter().collect();
    properties.insert("bootstrap.servers".to_owned(), src.bootstrap());
    manager.create_mirror(&mirror, properties, false).await.unwrap_or_else(|e| panic!("create mirror: {e}"));
    manager.add_topics(&mirror, std::slice::from_ref(&topic), &[], -1).await.unwrap_or_else(|e| panic!("add topic: {e}"));
    let caught_up = poll_until(Duration::from_secs(90), || {
        let manager = &manager;
        let mirror = mirror.clone();
        async move {
            let described = manager.describe(Some(&[mirror])).await;
            let d = described.into_iter().next()?.1.ok()?;
            let partitions: Vec<_> = d.topics.iter().flat_map(|t| t.partitions.iter()).collect();
            for p in &partitions {
                assert!(!matches!(p.state, PartitionState::Failed { .. }), "{p:?}");
            }
            (partitions.len() == 2 && partitions.iter().all(|p| p.state == PartitionState::Mirroring && p.lag() == 0)).then_some(d)
        }
    })
    .await;
    let described = caught_up.expect("the mirror catches up");
    assert_eq!(described.topics[0].partitions.iter().map(|p| p.destination_offset).sum::<i64>(), 40);

    let (b, t) = (src.plaintext_bootstrap(), topic.clone());
    let at_source = blocking(move || java.consume(&b, &t, &ConsumeOptions::default())).await.expect("source");
    let (b, t) = (dst.bootstrap(), topic.clone());
    let at_destination = blocking(move || java.consume(&b, &t, &ConsumeOptions::default())).await.expect("destination");
    assert_eq!(at_source.len(), 40);
    assert_eq!(at_destination, at_source, "same offsets, keys, values, headers and timestamps");
    manager.shutdown().await;
}

/// The proxy's own credentials refused by the destination stop its start with an error naming
/// `destination.sasl` and carrying the broker's message; an untrusted destination certificate names
/// `destination.tls`. Neither is retried until the startup timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_names_the_key_of_refused_destination_security() {
    let dst = secure_cluster(ListenerSecurity::SaslSsl);
    let start = |props: Vec<(String, String)>| {
        let mut settings = ProxySettings::for_bootstrap(&dst.bootstrap());
        settings.startup_timeout = Duration::from_secs(600);
        settings.destination_security = security(&props);
        async move {
            let lookup = Arc::new(kafka_mirror_proxy::mirror::InMemoryMirrorLookup::new());
            let started = tokio::time::timeout(Duration::from_secs(60), Proxy::start(settings, lookup, CancellationToken::new())).await;
            started.expect("refused at once, not retried").expect_err("the proxy must not start")
        }
    };
    let error = start(client_props(ListenerSecurity::SaslSsl, Some(("SCRAM-SHA-256", "admin", "wrong")))).await;
    assert_eq!(error.key(), "destination.sasl");
    let line = error_chain(&error);
    assert!(line.starts_with("destination.sasl: the destination cluster at ") && line.ends_with(SCRAM_256_REFUSED), "{line}");
    let untrusted: Vec<(String, String)> = client_props(ListenerSecurity::SaslSsl, login("SCRAM-SHA-256", "admin"))
        .into_iter()
        .map(|(k, v)| if k == "ssl.truststore.location" { (k, certs().other_ca.display().to_string()) } else { (k, v) })
        .collect();
    let error = start(untrusted).await;
    assert_eq!(error.key(), "destination.tls");
    assert!(error_chain(&error).ends_with("invalid peer certificate: UnknownIssuer"), "{}", error_chain(&error));
}
