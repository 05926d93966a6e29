//! The client side of SASL mechanisms, as pure message logic: PLAIN (RFC 4616) and SCRAM-SHA-256 /
//! SCRAM-SHA-512 (RFC 5802, RFC 7677), on `ring`'s HMAC, PBKDF2 and SHA-2.
//!
//! ```text
//!   SaslHandshake(mechanism) ─► SaslAuthenticate(first()) ─► challenge ─► step(challenge) ─► …
//!   PLAIN:  "\0user\0password"                            ─► done (empty challenge)
//!   SCRAM:  client-first ─► server-first ─► client-final (proof) ─► server-final (signature checked)
//! ```
//!
//! The Kafka exchange (which requests carry these bytes, error codes, session lifetime) is
//! [`super::connection`]'s. Channel binding is not used (`n,,` / `c=biws`), as Kafka does not offer it;
//! passwords are used as their UTF-8 bytes without SASLprep, as Kafka's own SCRAM client does
//! (`ScramFormatter.normalize`), so what works with the Java client works here.
//!
//! References: <https://www.rfc-editor.org/rfc/rfc4616>, <https://www.rfc-editor.org/rfc/rfc5802>,
//! <https://www.rfc-editor.org/rfc/rfc7677>, KIP-84 (SCRAM in Kafka).

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, hmac, pbkdf2};

use super::security::{SaslMechanism, SaslSettings};

/// Fewest PBKDF2 iterations accepted from a server: Kafka's own minimum (`ScramMechanism`), and RFC
/// 7677's recommendation.
pub(crate) const MIN_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations accepted from a server, so a hostile server cannot make the client burn CPU
/// for minutes. Kafka's maximum is 16384.
pub(crate) const MAX_ITERATIONS: u32 = 1 << 20;

/// The server's messages did not follow the mechanism (not a wrong password: that is the broker's
/// error code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SaslError {
    /// A server message could not be read.
    #[error("malformed {mechanism} server message: {reason}")]
    Malformed { mechanism: &'static str, reason: String },
    /// The server sent `e=…` in its final message.
    #[error("the server refused the {mechanism} exchange: {message}")]
    ServerError { mechanism: &'static str, message: String },
    /// The server's signature does not prove it knows the password: a server in the middle, or a
    /// credential store out of sync.
    #[error("the server's {mechanism} signature does not verify; the server is not who it claims")]
    BadServerSignature { mechanism: &'static str },
    /// More challenges than the mechanism has.
    #[error("the server sent a {mechanism} challenge after the exchange was complete")]
    UnexpectedChallenge { mechanism: &'static str },
}

/// One authentication in progress.
pub(crate) enum SaslSession {
    Plain { done: bool },
    Scram(Box<ScramClient>),
}

impl std::fmt::Debug for SaslSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plain { done } => f.debug_struct("Plain").field("done", done).finish(),
            Self::Scram(s) => f.debug_struct("Scram").field("hash", &s.hash).field("state", &s.state_name()).finish(),
        }
    }
}

impl SaslSession {
    /// Starts an exchange with `settings`; returns the session and the client's first message.
    pub(crate) fn start(settings: &SaslSettings) -> (Self, Vec<u8>) {
        match settings.mechanism {
            SaslMechanism::Plain => {
                let mut msg = Vec::with_capacity(settings.username.len() + settings.password.len() + 2);
                msg.push(0);
                msg.extend_from_slice(settings.username.as_bytes());
                msg.push(0);
                msg.extend_from_slice(settings.password.as_bytes());
                (Self::Plain { done: false }, msg)
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let hash = if settings.mechanism == SaslMechanism::ScramSha256 { ScramHash::Sha256 } else { ScramHash::Sha512 };
                let client = ScramClient::new(hash, &settings.username, &settings.password, &random_nonce());
                let first = client.client_first();
                (Self::Scram(Box::new(client)), first)
            }
        }
    }

    /// Answers the server's `challenge`: `Some(bytes)` to send next, `None` when the exchange is
    /// complete on the client side.
    ///
    /// # Errors
    /// [`SaslError`] when the server's message is malformed or does not verify.
    pub(crate) fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, SaslError> {
        match self {
            Self::Plain { done } => {
                // PLAIN has one message; the broker answers with an empty challenge.
                if *done || !challenge.is_empty() {
                    return Err(SaslError::UnexpectedChallenge { mechanism: "PLAIN" });
                }
                *done = true;
                Ok(None)
            }
            Self::Scram(client) => client.step(challenge),
        }
    }

    /// True once the client has verified the end of the exchange.
    pub(crate) fn is_complete(&self) -> bool {
        match self {
            Self::Plain { done } => *done,
            Self::Scram(c) => matches!(c.state, ScramState::Done),
        }
    }
}

/// A fresh client nonce: 24 random bytes, base64 (printable, never a comma, as RFC 5802 requires).
fn random_nonce() -> String {
    let mut bytes = [0u8; 24];
    SystemRandom::new().fill(&mut bytes).expect("invariant: the system RNG is available");
    BASE64.encode(bytes)
}

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn mechanism(self) -> &'static str {
        match self {
            Self::Sha256 => "SCRAM-SHA-256",
            Self::Sha512 => "SCRAM-SHA-512",
        }
    }
    fn hmac(self) -> hmac::Algorithm {
        match self {
            Self::Sha256 => hmac::HMAC_SHA256,
            Self::Sha512 => hmac::HMAC_SHA512,
        }
    }
    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Self::Sha256 => &digest::SHA256,
            Self::Sha512 => &digest::SHA512,
        }
    }
    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Self::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Self::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
    fn len(self) -> usize {
        self.digest().output_len()
    }
}

enum ScramState {
    /// client-first sent; waiting for server-first.
    First,
    /// client-final sent; waiting for server-final, whose signature is HMAC(server key, auth message).
    Final {
        server_key: hmac::Key,
        auth_message: String,
    },
    Done,
}

/// The client side of one SCRAM exchange (RFC 5802 §3, §5).
pub(crate) struct ScramClient {
    hash: ScramHash,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    state: ScramState,
}

impl ScramClient {
    pub(crate) fn new(hash: ScramHash, username: &str, password: &str, client_nonce: &str) -> Self {
        let client_first_bare = format!("n={},r={client_nonce}", escape_saslname(username));
        Self { hash, password: password.to_owned(), client_nonce: client_nonce.to_owned(), client_first_bare, state: ScramState::First }
    }

    fn state_name(&self) -> &'static str {
        match self.state {
            ScramState::First => "first",
            ScramState::Final { .. } => "final",
            ScramState::Done => "done",
        }
    }

    /// `client-first-message`: GS2 header without channel binding, then the bare message.
    pub(crate) fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    fn malformed(&self, reason: impl Into<String>) -> SaslError {
        SaslError::Malformed { mechanism: self.hash.mechanism(), reason: reason.into() }
    }

    pub(crate) fn step(&mut self, challenge: &[u8]) -> Result<Option<Vec<u8>>, SaslError> {
        match std::mem::replace(&mut self.state, ScramState::Done) {
            ScramState::First => {
                let (reply, server_key, auth_message) = self.client_final(challenge)?;
                self.state = ScramState::Final { server_key, auth_message };
                Ok(Some(reply))
            }
            ScramState::Final { server_key, auth_message } => {
                self.verify_server_final(challenge, &server_key, &auth_message)?;
                Ok(None)
            }
            ScramState::Done => Err(SaslError::UnexpectedChallenge { mechanism: self.hash.mechanism() }),
        }
    }

    /// Reads `server-first-message` and computes `client-final-message`, plus the server key and auth
    /// message that the server's signature must be made of.
    fn client_final(&self, server_first: &[u8]) -> Result<(Vec<u8>, hmac::Key, String), SaslError> {
        let text = std::str::from_utf8(server_first).map_err(|_| self.malformed("server-first-message is not UTF-8"))?;
        let attrs = attributes(text);
        if let Some(m) = attrs.iter().find(|(k, _)| *k == 'm') {
            return Err(self.malformed(format!("unsupported mandatory extension m={}", m.1)));
        }
        let get = |k: char| attrs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let nonce = get('r').ok_or_else(|| self.malformed("no nonce (r=)"))?;
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err(self.malformed("the server nonce does not extend the client nonce"));
        }
        let salt = BASE64.decode(get('s').ok_or_else(|| self.malformed("no salt (s=)"))?).map_err(|_| self.malformed("salt is not base64"))?;
        let iterations: u32 = get('i').and_then(|i| i.parse().ok()).ok_or_else(|| self.malformed("no iteration count (i=)"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(self.malformed(format!("iteration count {iterations} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}")));
        }
        let iterations = NonZeroU32::new(iterations).ok_or_else(|| self.malformed("iteration count 0"))?;

        let mut salted = vec![0u8; self.hash.len()];
        pbkdf2::derive(self.hash.pbkdf2(), iterations, &salt, self.password.as_bytes(), &mut salted);
        let salted_key = hmac::Key::new(self.hash.hmac(), &salted);
        let client_key = hmac::sign(&salted_key, b"Client Key");
        let stored_key = digest::digest(self.hash.digest(), client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{without_proof}", self.client_first_bare);
        let client_signature = hmac::sign(&hmac::Key::new(self.hash.hmac(), stored_key.as_ref()), auth_message.as_bytes());
        let proof: Vec<u8> = client_key.as_ref().iter().zip(client_signature.as_ref()).map(|(a, b)| a ^ b).collect();
        let server_key = hmac::sign(&salted_key, b"Server Key");
        let reply = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
        Ok((reply, hmac::Key::new(self.hash.hmac(), server_key.as_ref()), auth_message))
    }

    fn verify_server_final(&self, server_final: &[u8], server_key: &hmac::Key, auth_message: &str) -> Result<(), SaslError> {
        let text = std::str::from_utf8(server_final).map_err(|_| self.malformed("server-final-message is not UTF-8"))?;
        let attrs = attributes(text);
        if let Some((_, e)) = attrs.iter().find(|(k, _)| *k == 'e') {
            return Err(SaslError::ServerError { mechanism: self.hash.mechanism(), message: (*e).to_owned() });
        }
        let verifier = attrs.iter().find(|(k, _)| *k == 'v').ok_or_else(|| self.malformed("no verifier (v=)"))?.1;
        let verifier = BASE64.decode(verifier).map_err(|_| self.malformed("verifier is not base64"))?;
        // hmac::verify compares in constant time.
        hmac::verify(server_key, auth_message.as_bytes(), &verifier).map_err(|_| SaslError::BadServerSignature { mechanism: self.hash.mechanism() })
    }
}

/// `a=value,b=value` pairs of a SCRAM message (values may contain `=`).
fn attributes(text: &str) -> Vec<(char, &str)> {
    text.split(',')
        .filter_map(|part| {
            let mut chars = part.chars();
            let key = chars.next()?;
            let value = part.get(key.len_utf8()..)?.strip_prefix('=')?;
            Some((key, value))
        })
        .collect()
}

/// RFC 5802 `saslname`: `=` as `=3D` and `,` as `=2C`.
fn escape_saslname(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 §3: the SCRAM-SHA-256 example exchange, byte for byte.
    #[test]
    fn rfc7677_sha256_vector() {
        let mut c = ScramClient::new(ScramHash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = c.step(server_first).unwrap().unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(c.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").unwrap(), None);
        assert!(matches!(c.state, ScramState::Done));
    }

    /// SCRAM-SHA-512 has no RFC example; this exchange (the RFC 7677 inputs with SHA-512) was
    /// computed with Python's `hashlib.pbkdf2_hmac` and `hmac`, an implementation independent of
    /// `ring`. Real brokers check the rest (tests/kafka_it/security.rs).
    #[test]
    fn sha512_vector_from_an_independent_implementation() {
        let mut c = ScramClient::new(ScramHash::Sha512, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        let server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = String::from_utf8(c.step(server_first).unwrap().unwrap()).unwrap();
        assert_eq!(client_final, SHA512_CLIENT_FINAL);
        assert_eq!(c.step(SHA512_SERVER_FINAL.as_bytes()).unwrap(), None);
    }

    const SHA512_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ==";
    const SHA512_SERVER_FINAL: &str = "v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==";

    #[test]
    fn a_wrong_server_signature_is_refused() {
        let mut c = ScramClient::new(ScramHash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        c.step(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096").unwrap();
        let err = c.step(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").unwrap_err();
        assert_eq!(err, SaslError::BadServerSignature { mechanism: "SCRAM-SHA-256" });
    }

    #[test]
    fn hostile_or_broken_server_messages_are_errors() {
        let first = |msg: &[u8]| ScramClient::new(ScramHash::Sha256, "user", "pencil", "abc").step(msg).unwrap_err();
        // A nonce that does not extend ours, or is only ours.
        assert!(matches!(first(b"r=xyz123,s=QUJD,i=4096"), SaslError::Malformed { .. }));
        assert!(matches!(first(b"r=abc,s=QUJD,i=4096"), SaslError::Malformed { .. }));
        // Too few or absurdly many iterations, no salt, a mandatory extension, not UTF-8.
        assert!(matches!(first(b"r=abcdef,s=QUJD,i=1"), SaslError::Malformed { .. }));
        assert!(matches!(first(b"r=abcdef,s=QUJD,i=999999999"), SaslError::Malformed { .. }));
        assert!(matches!(first(b"r=abcdef,i=4096"), SaslError::Malformed { .. }));
        assert!(matches!(first(b"m=ext,r=abcdef,s=QUJD,i=4096"), SaslError::Malformed { .. }));
        assert!(matches!(first(&[0xff, 0xfe]), SaslError::Malformed { .. }));
        // The server's e= in the final message.
        let mut c = ScramClient::new(ScramHash::Sha256, "user", "pencil", "abc");
        c.step(b"r=abcdef,s=QUJD,i=4096").unwrap();
        assert_eq!(c.step(b"e=invalid-proof").unwrap_err(), SaslError::ServerError { mechanism: "SCRAM-SHA-256", message: "invalid-proof".to_owned() });
    }

    #[test]
    fn user_names_are_escaped() {
        let c = ScramClient::new(ScramHash::Sha256, "a=b,c", "p", "n0nce");
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=n0nce");
    }

    #[test]
    fn plain_is_one_message() {
        let settings = SaslSettings { mechanism: SaslMechanism::Plain, username: "alice".to_owned(), password: "s3cret".to_owned() };
        let (mut s, first) = SaslSession::start(&settings);
        assert_eq!(first, b"\0alice\0s3cret");
        assert_eq!(s.step(b"").unwrap(), None);
        assert!(s.is_complete());
        assert!(s.step(b"").is_err());
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn scram_nonces_are_fresh_and_printable() {
        let settings = SaslSettings { mechanism: SaslMechanism::ScramSha512, username: "u".to_owned(), password: "secret-pw".to_owned() };
        let (s1, a) = SaslSession::start(&settings);
        let (_, b) = SaslSession::start(&settings);
        assert_ne!(a, b);
        let text = String::from_utf8(a).unwrap();
        assert!(text.starts_with("n,,n=u,r=") && text.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{text}");
        assert!(!format!("{s1:?}").contains("secret-pw"));
    }
}
