//! Secure client listeners for test clusters: TLS certificates made once per test process with the
//! `openssl` command, SASL users (PLAIN in the listener's JAAS line, SCRAM-SHA-256/512 written into
//! the KRaft storage at format time), and the client properties that match.
//!
//! ```text
//!   certs() ── openssl, once per process ──► target/kafka-certs/<pid>/
//!       ca.pem            the test CA (clients trust it)
//!       broker.crt/.key   signed by the CA, SAN IP:127.0.0.1 only (so `localhost` is a wrong name)
//!       client.pem        key + certificate signed by the CA (mutual TLS), also .crt/.key
//!       other-ca.pem      a CA nobody trusts (untrusted-certificate tests)
//!
//!   ClusterSpec::secure(ListenerSecurity) ──► a CLIENT listener with that protocol, advertised to
//!       clients; the inter-broker PLAINTEXT listener and the CONTROLLER listener stay plaintext on
//!       their own ports (readiness checks and the harness's own probes use PLAINTEXT)
//! ```
//!
//! The brokers get their key and chain inline (`ssl.keystore.key`, `ssl.keystore.certificate.chain`)
//! because Kafka's file-based PEM keystore insists on an encrypted key (`ssl.key.password`), while
//! inline PEM may be unencrypted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::util;

/// Users of every secure cluster, as (name, password). Each exists for PLAIN, SCRAM-SHA-256 and
/// SCRAM-SHA-512.
pub const SASL_USERS: &[(&str, &str)] = &[("admin", "admin-secret"), ("alice", "alice-secret"), ("bob", "bob-secret")];

/// The SASL mechanisms every SASL listener enables.
pub const SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// The password of `user` in [`SASL_USERS`].
///
/// # Panics
/// If there is no such user (a test bug).
pub fn sasl_password(user: &str) -> &'static str {
    SASL_USERS.iter().find(|(u, _)| *u == user).map(|(_, p)| *p).unwrap_or_else(|| panic!("no SASL test user {user:?}"))
}

/// Longest one `openssl` run may take.
const OPENSSL_TIMEOUT: Duration = Duration::from_secs(60);

/// The security of a cluster's client listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerSecurity {
    /// SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) without TLS.
    SaslPlaintext,
    /// TLS with client certificates required (mutual TLS), no SASL.
    Ssl,
    /// SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over TLS, no client certificates.
    SaslSsl,
}

impl ListenerSecurity {
    /// `security.protocol`.
    pub fn protocol(self) -> &'static str {
        match self {
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// Certificates of this test process.
#[derive(Debug, Clone)]
pub struct Certs {
    /// The directory holding them.
    pub dir: PathBuf,
    /// The CA certificate clients trust (PEM).
    pub ca: PathBuf,
    /// The brokers' (and the proxy's) certificate, SAN `IP:127.0.0.1` only.
    pub server_cert: PathBuf,
    /// Its unencrypted PKCS#8 key.
    pub server_key: PathBuf,
    /// A client certificate signed by the CA.
    pub client_cert: PathBuf,
    /// Its key.
    pub client_key: PathBuf,
    /// Key and certificate in one file: Kafka's PEM keystore layout.
    pub client_keystore: PathBuf,
    /// A CA certificate that signed nothing here.
    pub other_ca: PathBuf,
}

/// The certificates, made on first use in `target/kafka-certs/<pid>/` (directories of processes that
/// have ended are removed then).
///
/// # Panics
/// If `openssl` is missing or fails (the message has its stderr).
pub fn certs() -> &'static Certs {
    static CERTS: OnceLock<std::result::Result<Certs, String>> = OnceLock::new();
    match CERTS.get_or_init(|| make_certs().map_err(|e| e.to_string())) {
        Ok(c) => c,
        Err(message) => panic!("test certificates are unavailable: {message}"),
    }
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("openssl");
    cmd.args(args).current_dir(dir);
    util::run_captured(cmd, None, false, OPENSSL_TIMEOUT).map(drop)
}

fn make_certs() -> Result<Certs> {
    let certs_dir = util::target_dir()?.join("kafka-certs");
    // Each test process makes its own; those of processes that have ended are not needed any more.
    util::remove_dirs_of_dead_processes(&certs_dir, |name| name.parse().ok());
    let dir = certs_dir.join(std::process::id().to_string());
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| HarnessError::io(format!("removing {}", dir.display()), e))?;
    }
    util::create_dir_all(&dir)?;
    let days = "7";
    for (name, cn) in [("ca", "kmp-test-ca"), ("other-ca", "kmp-untrusted-ca")] {
        let (key, pem, subj) = (format!("{name}.key"), format!("{name}.pem"), format!("/CN={cn}"));
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                days,
                "-subj",
                &subj,
                "-keyout",
                &key,
                "-out",
                &pem,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        )?;
    }
    util::write_file(
        &dir.join("server.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:127.0.0.1\n",
    )?;
    util::write_file(&dir.join("client.ext"), "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n")?;
    for (name, cn) in [("server", "127.0.0.1"), ("client", "kmp-test-client")] {
        let (key, csr, crt, ext, subj) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"), format!("{name}.ext"), format!("/CN={cn}"));
        openssl(&dir, &["req", "-newkey", "rsa:2048", "-nodes", "-subj", &subj, "-keyout", &key, "-out", &csr])?;
        openssl(&dir, &["x509", "-req", "-in", &csr, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", days, "-extfile", &ext, "-out", &crt])?;
    }
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).map_err(|e| HarnessError::io(format!("reading {name}"), e));
    util::write_file(&dir.join("client.pem"), format!("{}{}", read("client.key")?, read("client.crt")?))?;
    Ok(Certs {
        ca: dir.join("ca.pem"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        client_cert: dir.join("client.crt"),
        client_key: dir.join("client.key"),
        client_keystore: dir.join("client.pem"),
        other_ca: dir.join("other-ca.pem"),
        dir,
    })
}

/// A properties-file value with newlines as `\n` escapes (java.util.Properties reads them back).
fn escaped(text: &str) -> String {
    text.trim_end().replace('\\', "\\\\").replace('\n', "\\n")
}

/// Broker properties of the `CLIENT` listener with `security`.
pub(crate) fn listener_properties(security: ListenerSecurity, certs: &Certs) -> Result<Vec<(String, String)>> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| HarnessError::io(format!("reading {}", p.display()), e));
    let mut props = Vec::new();
    let mut set = |k: &str, v: String| props.push((format!("listener.name.client.{k}"), v));
    if security.tls() {
        set("ssl.keystore.type", "PEM".into());
        set("ssl.keystore.certificate.chain", escaped(&format!("{}{}", read(&certs.server_cert)?, read(&certs.ca)?)));
        set("ssl.keystore.key", escaped(&read(&certs.server_key)?));
        set("ssl.truststore.type", "PEM".into());
        set("ssl.truststore.location", certs.ca.display().to_string());
        if security == ListenerSecurity::Ssl {
            set("ssl.client.auth", "required".into());
        }
    }
    if security.sasl() {
        set("sasl.enabled.mechanisms", SASL_MECHANISMS.join(","));
        let users: Vec<String> = SASL_USERS.iter().map(|(u, p)| format!("user_{u}=\"{p}\"")).collect();
        set("plain.sasl.jaas.config", format!("org.apache.kafka.common.security.plain.PlainLoginModule required {};", users.join(" ")));
        for m in ["scram-sha-256", "scram-sha-512"] {
            set(&format!("{m}.sasl.jaas.config"), "org.apache.kafka.common.security.scram.ScramLoginModule required;".into());
        }
    }
    Ok(props)
}

/// `--add-scram` arguments of `StorageTool format`: every user for both SCRAM mechanisms.
pub(crate) fn scram_format_args() -> Vec<String> {
    let mut args = Vec::new();
    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        for (user, password) in SASL_USERS {
            args.push("--add-scram".to_owned());
            args.push(format!("{mechanism}=[name={user},password={password}]"));
        }
    }
    args
}

/// SASL credentials for [`client_props`]: mechanism (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`),
/// user, password.
pub type SaslLogin<'a> = (&'a str, &'a str, &'a str);

/// Java client properties for a listener with `security` (the names our own client reads too):
/// the CA as PEM truststore, the client certificate inline for mutual TLS, and `sasl` as JAAS line.
///
/// # Panics
/// If the certificates cannot be made.
pub fn client_props(security: ListenerSecurity, sasl: Option<SaslLogin<'_>>) -> Vec<(String, String)> {
    let certs = certs();
    let mut props = vec![("security.protocol".to_owned(), security.protocol().to_owned())];
    if security.tls() {
        props.push(("ssl.truststore.type".into(), "PEM".into()));
        props.push(("ssl.truststore.location".into(), certs.ca.display().to_string()));
    }
    if security == ListenerSecurity::Ssl {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        props.push(("ssl.keystore.type".into(), "PEM".into()));
        props.push(("ssl.keystore.certificate.chain".into(), read(&certs.client_cert)));
        props.push(("ssl.keystore.key".into(), read(&certs.client_key)));
    }
    if let (true, Some((mechanism, user, password))) = (security.sasl(), sasl) {
        let module = if mechanism == "PLAIN" { "plain.PlainLoginModule" } else { "scram.ScramLoginModule" };
        props.push(("sasl.mechanism".into(), mechanism.to_owned()));
        props.push(("sasl.jaas.config".into(), format!("org.apache.kafka.common.security.{module} required username=\"{user}\" password=\"{password}\";")));
    }
    props
}

/// The same for librdkafka (confluent-kafka's names).
///
/// # Panics
/// If the certificates cannot be made.
pub fn librdkafka_props(security: ListenerSecurity, sasl: Option<SaslLogin<'_>>) -> Vec<(String, String)> {
    let certs = certs();
    let mut props = vec![("security.protocol".to_owned(), security.protocol().to_ascii_lowercase())];
    if security.tls() {
        props.push(("ssl.ca.location".into(), certs.ca.display().to_string()));
    }
    if security == ListenerSecurity::Ssl {
        props.push(("ssl.certificate.location".into(), certs.client_cert.display().to_string()));
        props.push(("ssl.key.location".into(), certs.client_key.display().to_string()));
    }
    if let (true, Some((mechanism, user, password))) = (security.sasl(), sasl) {
        props.push(("sasl.mechanisms".into(), mechanism.to_owned()));
        props.push(("sasl.username".into(), user.to_owned()));
        props.push(("sasl.password".into(), password.to_owned()));
    }
    props
}

/// `props` as a Java properties file's text (values escaped as java.util.Properties reads them).
pub fn properties_text(props: &[(String, String)]) -> String {
    props.iter().map(|(k, v)| format!("{k}={}\n", escaped(v))).collect()
}
