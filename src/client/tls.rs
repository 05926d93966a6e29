//! TLS towards brokers (`security.protocol=SSL` / `SASL_SSL`): a rustls client configuration (ring
//! provider) from PEM trust and key material, and the handshake on an open TCP stream.
//!
//! ```text
//!   TlsSettings ─► TlsConnector::new (read + parse PEM once; errors name the Java key)
//!                      │ connect(addr, tcp)
//!                      ▼
//!   TCP stream ─► rustls handshake (SNI = host of addr; chain checked against the truststore;
//!                 host name checked unless ssl.endpoint.identification.algorithm is empty)
//!              ─► MaybeTlsStream::Tls
//! ```
//!
//! Trust: only the CA certificates given (`ssl.truststore.location` or `ssl.truststore.certificates`).
//! There is no fallback to a system trust store or to bundled web roots: Kafka clusters almost always
//! use a private CA, the machines this runs on may have no system store, and silently trusting the web
//! PKI for a broker connection would be a surprise. A TLS setting without trust anchors is a
//! configuration error naming `ssl.truststore.location`.
//!
//! Host name check off: the certificate chain is still verified against the trust anchors; only the
//! final name comparison is skipped ([`ChainOnlyVerifier`]), as the Java client does with an empty
//! `ssl.endpoint.identification.algorithm`.
//!
//! Does not own: which stream carries SASL or Kafka frames (see [`super::connection`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::error::{ClientError, ConnectionError};
use super::security::TlsSettings;

/// Builds TLS client sessions to brokers from one parsed configuration. Cheap to clone.
#[derive(Clone)]
pub struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnector").field("client_auth", &self.config.client_auth_cert_resolver.has_certs()).finish()
    }
}

impl TlsConnector {
    /// Reads and parses the trust anchors and, for mutual TLS, the certificate chain and key.
    ///
    /// # Errors
    /// [`ClientError::Config`] naming the Java key whose file or PEM text is unreadable, holds no
    /// certificate or key, or does not fit (a key that does not match its certificate).
    pub fn new(settings: &TlsSettings) -> Result<Self, ClientError> {
        let bad = |key: &str, message: String| ClientError::Config { key: key.to_owned(), message };
        let (trust_key, trust_pem) = match (&settings.truststore, &settings.truststore_certificates) {
            (Some(path), _) => ("ssl.truststore.location", read_pem_file("ssl.truststore.location", path)?),
            (None, Some(text)) => ("ssl.truststore.certificates", text.as_bytes().to_vec()),
            (None, None) => {
                return Err(bad(
                    "ssl.truststore.location",
                    "required for TLS: give the CA certificates to trust as a PEM file (there is no system trust store)".to_owned(),
                ));
            }
        };
        let mut roots = rustls::RootCertStore::empty();
        let certs = certificates(trust_key, &trust_pem)?;
        for cert in certs {
            roots.add(cert).map_err(|e| bad(trust_key, format!("not a usable CA certificate: {e}")))?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().map_err(|e| bad(trust_key, e.to_string()))?;
        let verifier: Arc<dyn ServerCertVerifier> = if settings.verify_hostname { webpki } else { Arc::new(ChainOnlyVerifier { inner: webpki }) };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(trust_key, e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let identity = match (&settings.keystore, &settings.keystore_certificate_chain, &settings.keystore_key) {
            (Some(path), _, _) => {
                let pem = read_pem_file("ssl.keystore.location", path)?;
                Some((certificates("ssl.keystore.location", &pem)?, private_key("ssl.keystore.location", &pem)?, "ssl.keystore.location"))
            }
            (None, Some(chain), Some(key)) => {
                Some((certificates("ssl.keystore.certificate.chain", chain.as_bytes())?, private_key("ssl.keystore.key", key.as_bytes())?, "ssl.keystore.key"))
            }
            _ => None,
        };
        let config = match identity {
            None => builder.with_no_client_auth(),
            Some((chain, key, key_name)) => {
                builder.with_client_auth_cert(chain, key).map_err(|e| bad(key_name, format!("the private key does not fit the certificate chain: {e}")))?
            }
        };
        Ok(Self { config: Arc::new(config) })
    }

    /// Runs the TLS handshake on `tcp`, connected to `addr` (`host:port`; the host is the name sent
    /// in SNI and checked against the certificate).
    ///
    /// # Errors
    /// [`ConnectionError::Tls`] with the cause (untrusted certificate, wrong host name, a peer that
    /// does not speak TLS), or [`ConnectionError::ConnectTimeout`] after `timeout`.
    ///
    /// # Cancel safety
    /// Not cancel safe: a cancelled handshake leaves the stream unusable (it is dropped with it).
    pub async fn connect(&self, addr: &str, tcp: TcpStream, timeout: Duration) -> Result<TlsStream<TcpStream>, ConnectionError> {
        let name = server_name(addr).map_err(|source| ConnectionError::Tls { addr: addr.to_owned(), source })?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        tokio::time::timeout(timeout, connector.connect(name, tcp))
            .await
            .map_err(|_| ConnectionError::ConnectTimeout { addr: addr.to_owned(), timeout })?
            .map_err(|source| ConnectionError::Tls { addr: addr.to_owned(), source })
    }
}

/// The host of `addr` as rustls wants it: an IP address (checked against IP SANs, no SNI sent) or a
/// DNS name.
fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("`{host}` is not a valid TLS server name: {e}")))
}

fn read_pem_file(key: &str, path: &std::path::Path) -> Result<Vec<u8>, ClientError> {
    std::fs::read(path).map_err(|e| ClientError::Config { key: key.to_owned(), message: format!("cannot read {}: {e}", path.display()) })
}

fn certificates(key: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, ClientError> {
    let bad = |message: String| ClientError::Config { key: key.to_owned(), message };
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad(format!("not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(bad("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned()));
    }
    Ok(certs)
}

fn private_key(key: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, ClientError> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| ClientError::Config { key: key.to_owned(), message: format!("holds no unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1): {e}") })
}

/// `ssl.endpoint.identification.algorithm=` (empty): verifies the chain like [`WebPkiServerVerifier`]
/// and accepts a certificate whose names do not match the host connected to. Relies on the webpki
/// verifier checking the name last, after the chain, validity dates and key usage (rustls 0.23
/// `WebPkiServerVerifier::verify_server_cert`), so only a name mismatch is forgiven.
#[derive(Debug)]
struct ChainOnlyVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// True if a TLS handshake failed because of TLS itself (certificate, protocol, alert), not because
/// the socket failed underneath: retrying will not help.
pub(crate) fn is_tls_failure(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
}

/// True if the peer refused us with a certificate alert (e.g. a broker requiring a client certificate,
/// which in TLS 1.3 says so only after the handshake, at the first read). Retrying will not help.
pub(crate) fn is_certificate_refusal(error: &io::Error) -> bool {
    use rustls::AlertDescription as A;
    error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()).is_some_and(|e| {
        matches!(
            e,
            rustls::Error::AlertReceived(
                A::BadCertificate | A::CertificateRequired | A::CertificateUnknown | A::UnknownCA | A::CertificateRevoked | A::AccessDenied
            )
        )
    })
}

/// A broker connection's stream: plain TCP, or TLS over TCP.
#[derive(Debug)]
pub enum MaybeTlsStream {
    /// `PLAINTEXT` / `SASL_PLAINTEXT`.
    Plain(TcpStream),
    /// `SSL` / `SASL_SSL`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for MaybeTlsStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for MaybeTlsStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Self::Plain(s) => s.is_write_vectored(),
            Self::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_from_addresses() {
        assert!(matches!(server_name("127.0.0.1:9093").unwrap(), ServerName::IpAddress(_)));
        assert!(matches!(server_name("[::1]:9093").unwrap(), ServerName::IpAddress(_)));
        assert!(matches!(server_name("broker-1.example:9093").unwrap(), ServerName::DnsName(_)));
        assert!(server_name("bad name:1").is_err());
    }

    #[test]
    fn missing_or_bad_material_names_the_key() {
        let key_of = |s: &TlsSettings| match TlsConnector::new(s) {
            Err(ClientError::Config { key, .. }) => key,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(key_of(&TlsSettings::default()), "ssl.truststore.location");
        let missing = TlsSettings { truststore: Some("/nonexistent/ca.pem".into()), ..TlsSettings::default() };
        assert_eq!(key_of(&missing), "ssl.truststore.location");
        let not_pem = TlsSettings { truststore_certificates: Some("hello".to_owned()), ..TlsSettings::default() };
        assert_eq!(key_of(&not_pem), "ssl.truststore.certificates");
    }
}
