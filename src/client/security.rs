//! Connection security settings, named as the Java client names them.
//!
//! The settings are parsed and validated here so that configurations written for Kafka's own tools
//! work unchanged. Only `PLAINTEXT` is carried out by this build; the connection refuses the others with
//! [`ConnectionError::UnsupportedSecurity`](super::ConnectionError::UnsupportedSecurity) until TLS
//! (rustls, PEM files) and SASL (PLAIN, SCRAM-SHA-256/512) land with the proxy's security work.

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
    /// PLAIN.
    Plain,
    /// SCRAM-SHA-256.
    ScramSha256,
    /// SCRAM-SHA-512.
    ScramSha512,
}

/// TLS material, as PEM files (`ssl.truststore.type=PEM`, `ssl.keystore.type=PEM`).
#[derive(Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `ssl.truststore.location`: CA certificates to trust; the system roots if absent.
    pub truststore: Option<PathBuf>,
    /// `ssl.keystore.location`: our certificate chain and private key, for mutual TLS.
    pub keystore: Option<PathBuf>,
    /// `ssl.endpoint.identification.algorithm`: empty disables host name checks.
    pub verify_hostname: bool,
}

impl Default for TlsSettings {
    /// System roots, no client certificate, host names checked (the Java client's `https` default).
    fn default() -> Self {
        Self { truststore: None, keystore: None, verify_hostname: true }
    }
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSettings")
            .field("truststore", &self.truststore)
            .field("keystore", &self.keystore)
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
        f.debug_struct("SaslSettings")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"[redacted]")
            .finish()
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
                    return Err(bad(
                        "security.protocol",
                        format!("`{other}` is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
                    ));
                }
            },
        };
        for key in ["ssl.truststore.type", "ssl.keystore.type"] {
            if let Some(t) = props.get(key) {
                if !t.eq_ignore_ascii_case("PEM") {
                    return Err(bad(key, format!("`{t}` is not supported; use PEM files")));
                }
            }
        }
        let tls = TlsSettings {
            truststore: props.get("ssl.truststore.location").map(PathBuf::from),
            keystore: props.get("ssl.keystore.location").map(PathBuf::from),
            verify_hostname: props
                .get("ssl.endpoint.identification.algorithm")
                .is_none_or(|v| !v.trim().is_empty()),
        };
        let sasl = match protocol {
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => {
                let mechanism = match props.get("sasl.mechanism").map(String::as_str).unwrap_or("GSSAPI") {
                    "PLAIN" => SaslMechanism::Plain,
                    "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
                    "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
                    other => {
                        return Err(bad(
                            "sasl.mechanism",
                            format!("`{other}` is not supported; use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
                        ));
                    }
                };
                let jaas = props
                    .get("sasl.jaas.config")
                    .ok_or_else(|| bad("sasl.jaas.config", "required with SASL".to_owned()))?;
                let (username, password) = parse_jaas_credentials(jaas)
                    .ok_or_else(|| bad("sasl.jaas.config", "needs username=\"…\" and password=\"…\"".to_owned()))?;
                Some(SaslSettings { mechanism, username, password })
            }
            _ => None,
        };
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
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="s3cr=t";"#,
            ),
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
        let err = SecurityConfig::from_properties(&props(&[("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "PLAIN")]))
            .unwrap_err();
        assert!(matches!(err, ClientError::Config { ref key, .. } if key == "sasl.jaas.config"), "{err}");
        let err = SecurityConfig::from_properties(&props(&[("ssl.keystore.type", "JKS")])).unwrap_err();
        assert!(matches!(err, ClientError::Config { ref key, .. } if key == "ssl.keystore.type"), "{err}");
    }
}
