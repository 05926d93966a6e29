//! TLS on the client side of the proxy (`proxy.tls`): a rustls server configuration from PEM files.
//!
//! The same certificate serves the bootstrap listener and every broker listener: clients connect
//! to `proxy.advertised_host` on each port, so the certificate must name that host (DNS or IP SAN).
//! TLS towards the destination brokers (`destination.tls`) is independent of this: see
//! `super::upstream` and [`crate::client::TlsConnector`].

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::error::ProxyError;

/// The TLS acceptor of client connections.
#[derive(Clone)]
pub(crate) struct ClientTls(pub(crate) TlsAcceptor);

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

/// Builds the acceptor from a PEM certificate chain and a PEM private key.
///
/// # Errors
/// [`ProxyError::Tls`] naming the key (`proxy.tls.cert_file` / `proxy.tls.key_file`) whose file is
/// unreadable, empty or does not match.
pub(crate) fn acceptor(cert_file: &Path, key_file: &Path) -> Result<ClientTls, ProxyError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ProxyError::Tls { key: "proxy.tls.cert_file", reason: format!("{}: {e}", cert_file.display()) })?;
    if certs.is_empty() {
        return Err(ProxyError::Tls { key: "proxy.tls.cert_file", reason: format!("{}: no certificate", cert_file.display()) });
    }
    let key =
        PrivateKeyDer::from_pem_file(key_file).map_err(|e| ProxyError::Tls { key: "proxy.tls.key_file", reason: format!("{}: {e}", key_file.display()) })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ProxyError::Tls { key: "proxy.tls.cert_file", reason: e.to_string() })?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ProxyError::Tls { key: "proxy.tls.key_file", reason: format!("does not match the certificate: {e}") })?;
    Ok(ClientTls(TlsAcceptor::from(Arc::new(config))))
}
