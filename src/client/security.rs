//! Connection security settings, named as the Java client names them, so that a properties file written
//! for Kafka's own tools works unchanged.
//!
//! All four `security.protocol`s are carried out: `PLAINTEXT`; `SSL` and `SASL_SSL` through rustls
//! (ring) with PEM trust and key material ([`super::tls`]); `SASL_PLAINTEXT` and `SASL_SSL` with the
//! mechanisms PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 ([`super::sasl`]). GSSAPI (Kerberos) and
//! OAUTHBEARER are refused here with an error naming `sasl.mechanism`; JKS and PKCS12 stores with an
//! error naming the `*.type` key; encrypted private keys with one naming `ssl.key.password`.
//!
//! ```text
//!   properties ─► SecurityConfig::from_properties ─► ConnectionConfig.security
//!                                                       │ BrokerConnection::connect
//!                                                       ▼
//!                              TCP ─► TLS (SSL, SASL_SSL) ─► ApiVersions ─► SASL (SASL_*) ─► requests
//! ```
//!
//! Secrets (the SASL password, an inline private key) never appear in `Debug` output.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::ClientError;

/// `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL over plaintext.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// True for `SSL` and `SASL_SSL`.
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    /// True for `SASL_PLAINTEXT` and `SASL_SSL`.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }

    /// The Java client's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }
}

/// `sasl.mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// PLAIN (RFC 4616): user name and password in clear, so only over TLS outside tests.
    Plain,
    /// SCRAM-SHA-256 (RFC 5802, RFC 7677).
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

impl SaslMechanism {
    /// The name the broker knows it by (`SaslHandshake`'s `mechanism`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// Parses the broker's name (exact spelling, as Kafka requires).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim() {
            "PLAIN" => Some(Self::Plain),
            "SCRAM-SHA-256" => Some(Self::ScramSha256),
            "SCRAM-SHA-512" => Some(Self::ScramSha512),
            _ => None,
        }
    }
}

impl std::fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// TLS material, as PEM (`ssl.truststore.type=PEM`, `ssl.keystore.type=PEM`): files, or the PEM text
/// itself in the properties (Java's `ssl.truststore.certificates`, `ssl.keystore.certificate.chain`,
/// `ssl.keystore.key`).
///
/// There is no fallback to a system trust store: a TLS connection needs [`TlsSettings::truststore`] or
/// [`TlsSettings::truststore_certificates`] (see [`super::tls`] for why).
#[derive(Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.truststore.location`: a PEM file of the CA certificates to trust.
    pub truststore: Option<PathBuf>,
    /// `ssl.truststore.certificates`: the same as PEM text.
    pub truststore_certificates: Option<String>,
    /// `ssl.keystore.location`: a PEM file holding our private key and certificate chain (leaf first),
    /// for mutual TLS. Kafka's PEM keystore is one file with both; that is what is read here.
    pub keystore: Option<PathBuf>,
    /// `ssl.keystore.certificate.chain`: our certificate chain as PEM text (with `keystore_key`).
    pub keystore_certificate_chain: Option<String>,
    /// `ssl.keystore.key`: our private key as PEM text (a secret: never in `Debug`).
    pub keystore_key: Option<String>,
    /// `ssl.endpoint.identification.algorithm`: empty disables the host name check (the certificate
    /// chain is still verified).
    pub verify_hostname: bool,
}

impl Default for TlsSettings {
    /// No trust anchors yet (TLS then fails with a configuration error naming
    /// `ssl.truststore.location`), no client certificate, host names checked (the Java client's
    /// `https` default).
    fn default() -> Self {
        Self { truststore: None, truststore_certificates: None, keystore: None, keystore_certificate_chain: None, keystore_key: None, verify_hostname: true }
    }
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("truststore", &self.truststore)
            .field("truststore_certificates", &self.truststore_certificates.as_ref().map(|_| "<PEM>"))
            .field("keystore", &self.keystore)
            .field("keystore_certificate_chain", &self.keystore_certificate_chain.as_ref().map(|_| "<PEM>"))
            .field("keystore_key", &self.keystore_key.as_ref().map(|_| "[redacted]"))
            .field("verify_hostname", &self.verify_hostname)
            .finish()
    }
}

/// SASL credentials from `sasl.jaas.config`. The password never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslSettings {
    /// `sasl.mechanism`.
    pub mechanism: SaslMechanism,
    /// `username=` of the JAAS line.
    pub username: String,
    /// `password=` of the JAAS line.
    pub password: String,
}

impl std::fmt::Debug for SaslSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSettings").field("mechanism", &self.mechanism).field("username", &self.username).field("password", &"[redacted]").finish()
    }
}

/// Everything about how to secure a connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityConfig {
    /// `security.protocol`.
    pub protocol: SecurityProtocol,
    /// TLS settings, used with `SSL` and `SASL_SSL`.
    pub tls: TlsSettings,
    /// SASL settings, required with `SASL_*`.
    pub sasl: Option<SaslSettings>,
}

impl SecurityConfig {
    /// Checks that the settings can be carried out: SASL credentials present with `SASL_*`, and the
    /// TLS material readable and well formed with `SSL` / `SASL_SSL` (files are read here).
    ///
    /// # Errors
    /// [`ClientError::Config`] naming the offending key.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.protocol.uses_sasl() && self.sasl.is_none() {
            return Err(ClientError::Config {
                key: "sasl.jaas.config".to_owned(),
                message: format!("required with security.protocol={}", self.protocol.as_str()),
            });
        }
        if self.protocol.uses_tls() {
            super::tls::TlsConnector::new(&self.tls)?;
        }
        Ok(())
    }

    /// Reads the Java client's property names from `props`; keys not about security are ignored.
    ///
    /// # Errors
    /// [`ClientError::Config`] naming the first bad key.
    pub fn from_properties(props: &BTreeMap<String, String>) -> Result<Self, ClientError> {
        let bad = |key: &str, message: String| ClientError::Config { key: key.to_owned(), message };
        let protocol = match props.get("security.protocol").map(|s| s.trim().to_ascii_uppercase()) {
            None => SecurityProtocol::Plaintext,
            Some(p) => match p.as_str() {
                "PLAINTEXT" => SecurityProtocol::Plaintext,
                "SSL" => SecurityProtocol::Ssl,
                "SASL_PLAINTEXT" => SecurityProtocol::SaslPlaintext,
                "SASL_SSL" => SecurityProtocol::SaslSsl,
                other => {
                    return Err(bad("security.protocol", format!("`{other}` is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")));
                }
            },
        };
        for key in ["ssl.truststore.type", "ssl.keystore.type"] {
            if let Some(t) = props.get(key) {
                if !t.trim().eq_ignore_ascii_case("PEM") {
                    return Err(bad(key, format!("`{t}` is not supported; use PEM files")));
                }
            }
        }
        if props.get("ssl.key.password").is_some_and(|p| !p.is_empty()) {
            return Err(bad("ssl.key.password", "encrypted private keys are not supported; give an unencrypted PEM key".to_owned()));
        }
        let text = |key: &str| props.get(key).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let tls = TlsSettings {
            truststore: text("ssl.truststore.location").map(PathBuf::from),
            truststore_certificates: text("ssl.truststore.certificates"),
            keystore: text("ssl.keystore.location").map(PathBuf::from),
            keystore_certificate_chain: text("ssl.keystore.certificate.chain"),
            keystore_key: text("ssl.keystore.key"),
            verify_hostname: props.get("ssl.endpoint.identification.algorithm").is_none_or(|v| !v.trim().is_empty()),
        };
        let sasl = if protocol.uses_sasl() {
            let name = props.get("sasl.mechanism").map_or("GSSAPI", |m| m.trim());
            let mechanism = SaslMechanism::parse(name)
                .ok_or_else(|| bad("sasl.mechanism", format!("`{name}` is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")))?;
            let jaas = props.get("sasl.jaas.config").ok_or_else(|| bad("sasl.jaas.config", "required with SASL".to_owned()))?;
            let (username, password) =
                parse_jaas_credentials(jaas).ok_or_else(|| bad("sasl.jaas.config", "needs username=\"…\" and password=\"…\"".to_owned()))?;
            Some(SaslSettings { mechanism, username, password })
        } else {
            None
        };
        if protocol.uses_tls() && tls.truststore.is_none() && tls.truststore_certificates.is_none() {
            return Err(bad(
                "ssl.truststore.location",
                format!(
                    "required with security.protocol={}: give the CA certificates to trust as a PEM file \
                     (ssl.truststore.type=PEM); there is no system trust store",
                    protocol.as_str()
                ),
            ));
        }
        if tls.keystore.is_some() && (tls.keystore_certificate_chain.is_some() || tls.keystore_key.is_some()) {
            return Err(bad(
                "ssl.keystore.location",
                "give either a keystore file or ssl.keystore.certificate.chain and ssl.keystore.key, not both".to_owned(),
            ));
        }
        if tls.keystore_certificate_chain.is_some() != tls.keystore_key.is_some() {
            let missing = if tls.keystore_key.is_none() { "ssl.keystore.key" } else { "ssl.keystore.certificate.chain" };
            return Err(bad(missing, "ssl.keystore.certificate.chain and ssl.keystore.key go together".to_owned()));
        }
        Ok(Self { protocol, tls, sasl })
    }
}

/// Extracts `username="…"` and `password="…"` from a JAAS configuration line such as
/// `org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";`.
fn parse_jaas_credentials(jaas: &str) -> Option<(String, String)> {
    let value_of = |name: &str| -> Option<String> {
        let mut rest = jaas;
        while let Some(pos) = rest.find(name) {
            let before_ok = pos == 0 || rest[..pos].ends_with(char::is_whitespace);
            let after = rest[pos + name.len()..].trim_start();
            if before_ok {
                if let Some(after_eq) = after.strip_prefix('=') {
                    let after_eq = after_eq.trim_start();
                    let quoted = after_eq.strip_prefix('"')?;
                    let end = quoted.find('"')?;
                    return Some(quoted[..end].to_owned());
                }
            }
            rest = &rest[pos + name.len()..];
        }
        None
    };
    Some((value_of("username")?, value_of("password")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn defaults_to_plaintext() {
        assert_eq!(SecurityConfig::from_properties(&props(&[])).unwrap(), SecurityConfig::default());
    }

    #[test]
    fn parses_sasl_scram() {
        let c = SecurityConfig::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.jaas.config", r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="s3cr=t";"#),
            ("ssl.truststore.location", "/etc/ca.pem"),
            ("ssl.truststore.type", "PEM"),
        ]))
        .unwrap();
        assert_eq!(c.protocol, SecurityProtocol::SaslSsl);
        let sasl = c.sasl.clone().unwrap();
        assert_eq!((sasl.mechanism, sasl.username.as_str(), sasl.password.as_str()), (SaslMechanism::ScramSha512, "mirror", "s3cr=t"));
        assert!(!format!("{c:?}").contains("s3cr=t"), "password leaked into Debug");
    }

    #[test]
    fn names_the_bad_key() {
        let err = SecurityConfig::from_properties(&props(&[("security.protocol", "TLS")])).unwrap_err();
        assert!(matches!(err, ClientError::Config { ref key, .. } if key == "security.protocol"), "{err}");
        let err = SecurityConfig::from_properties(&props(&[("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN")])).unwrap_err();
        assert!(matches!(err, ClientError::Config { ref key, .. } if key == "sasl.jaas.config"), "{err}");
        let err = SecurityConfig::from_properties(&props(&[("ssl.keystore.type", "JKS")])).unwrap_err();
        assert!(matches!(err, ClientError::Config { ref key, .. } if key == "ssl.keystore.type"), "{err}");
    }
}
