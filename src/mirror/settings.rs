//! Mirror names and mirror settings: what CreateMirror and AlterMirrorConfigs accept, and how
//! secrets are kept out of `__mirror_state` in clear and out of every response and log.
//!
//! Settings use the Java client's property names (spec §9), so a properties file written for Kafka's
//! tools works as is. Every key is checked against [`KNOWN_SETTINGS`]: an unknown key or a malformed
//! value is an error naming the key. Secrets ([`SettingKind::Secret`]) are sealed with
//! ChaCha20-Poly1305 under the proxy's secret key before they are stored, bound to the mirror and
//! property name, and are never returned by describe nor printed by `Debug`.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

use super::records::StoredConfig;
use crate::client::{ClientConfig, IsolationLevel, SecurityConfig};
use crate::replicator::throttle::ThrottledReplicas;

/// Longest mirror name (Kafka's topic-name limit).
pub const MAX_MIRROR_NAME_LEN: usize = 249;
/// Suffixes a mirror name may not end with: the proposal's first design encoded topic states with
/// them in the `mirror.name` topic config, and keeping them reserved keeps names portable.
pub const FORBIDDEN_MIRROR_NAME_SUFFIXES: [&str; 2] = [".removed", ".paused"];

/// Checks a mirror name against the topic-name rules and the forbidden suffixes.
///
/// # Errors
/// A sentence saying what is wrong, naming the name.
pub fn validate_mirror_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("mirror name is empty".to_owned());
    }
    if name == "." || name == ".." {
        return Err(format!("mirror name `{name}` is not allowed"));
    }
    if name.len() > MAX_MIRROR_NAME_LEN {
        return Err(format!("mirror name is {} characters long; at most {MAX_MIRROR_NAME_LEN} are allowed", name.len()));
    }
    if let Some(bad) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        return Err(format!("mirror name `{name}` contains `{bad}`; only ASCII letters, digits, `.`, `_` and `-` are allowed"));
    }
    if let Some(suffix) = FORBIDDEN_MIRROR_NAME_SUFFIXES.iter().find(|s| name.ends_with(*s)) {
        return Err(format!("mirror name `{name}` ends with the reserved suffix `{suffix}`"));
    }
    Ok(())
}

/// How a setting's value is checked and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingKind {
    /// Any non-empty text.
    Text,
    /// A secret: stored sealed, never returned or printed.
    Secret,
    /// An integer in `[min, max]`.
    Int { min: i64, max: i64 },
    /// One of these words (case-insensitive).
    OneOf(&'static [&'static str]),
}

/// Every setting a mirror accepts: the source connection (Java client names) and the mirror's own.
pub const KNOWN_SETTINGS: &[(&str, SettingKind)] = &[
    ("bootstrap.servers", SettingKind::Text),
    ("client.id", SettingKind::Text),
    ("security.protocol", SettingKind::OneOf(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])),
    ("sasl.mechanism", SettingKind::OneOf(&["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])),
    ("sasl.jaas.config", SettingKind::Secret),
    ("ssl.truststore.location", SettingKind::Text),
    ("ssl.truststore.type", SettingKind::OneOf(&["PEM"])),
    ("ssl.truststore.password", SettingKind::Secret),
    ("ssl.truststore.certificates", SettingKind::Text),
    ("ssl.keystore.location", SettingKind::Text),
    ("ssl.keystore.certificate.chain", SettingKind::Text),
    ("ssl.keystore.key", SettingKind::Secret),
    ("ssl.keystore.type", SettingKind::OneOf(&["PEM"])),
    ("ssl.keystore.password", SettingKind::Secret),
    ("ssl.key.password", SettingKind::Secret),
    ("ssl.endpoint.identification.algorithm", SettingKind::Text),
    ("request.timeout.ms", SettingKind::Int { min: 1, max: i32::MAX as i64 }),
    ("fetch.wait.max.ms", SettingKind::Int { min: 0, max: 60_000 }),
    ("fetch.max.bytes", SettingKind::Int { min: 1024, max: i32::MAX as i64 }),
    ("fetch.response.max.bytes", SettingKind::Int { min: 1024, max: i32::MAX as i64 }),
    ("fetch.min.bytes", SettingKind::Int { min: 1, max: i32::MAX as i64 }),
    ("mirror.isolation.level", SettingKind::OneOf(&["read_committed", "read_uncommitted"])),
    // Bandwidth control (spec §9, `replicator/throttle.rs`): applied while copying, no restart.
    ("mirror.replication.throttled.rate", SettingKind::Int { min: 0, max: i64::MAX }),
    ("mirror.replication.throttled.replicas", SettingKind::Text),
    // The sync jobs (spec §7, `sync/`): filters are comma-separated regexes; all checked there too.
    ("topics.exclude", SettingKind::Text),
    ("topic.properties.exclude", SettingKind::Text),
    ("groups.include", SettingKind::Text),
    ("groups.exclude", SettingKind::Text),
    ("acls.include", SettingKind::Text),
    ("sync.group.offsets.enabled", SettingKind::OneOf(&["true", "false"])),
    ("sync.group.offsets.interval.ms", SettingKind::Int { min: 1, max: i32::MAX as i64 }),
    ("sync.topic.configs.enabled", SettingKind::OneOf(&["true", "false"])),
    ("metadata.refresh.interval.ms", SettingKind::Int { min: 1, max: i32::MAX as i64 }),
    ("sync.acls.enabled", SettingKind::OneOf(&["true", "false"])),
];

/// Settings that only the sync jobs read: changing them restarts the mirror's sync, never its
/// copying.
const SYNC_ONLY: &[&str] = &[
    "topics.exclude",
    "topic.properties.exclude",
    "groups.include",
    "groups.exclude",
    "acls.include",
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.ms",
    "sync.topic.configs.enabled",
    "metadata.refresh.interval.ms",
    "sync.acls.enabled",
];

/// Settings the copying instance applies while it copies (the throttle): changing them neither
/// restarts the copying nor the sync.
const LIVE: &[&str] = &["mirror.replication.throttled.rate", "mirror.replication.throttled.replicas"];

/// The kind of `key`, if it is a known setting.
pub fn setting_kind(key: &str) -> Option<SettingKind> {
    KNOWN_SETTINGS.iter().find(|(k, _)| *k == key).map(|(_, kind)| *kind)
}

/// A bad setting, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("mirror setting `{key}`: {message}")]
pub struct SettingError {
    /// The property name.
    pub key: String,
    /// What is wrong (never contains a secret value).
    pub message: String,
}

fn bad(key: &str, message: impl Into<String>) -> SettingError {
    SettingError { key: key.to_owned(), message: message.into() }
}

/// A mirror's validated settings. `Debug` hides secret values.
#[derive(Clone, PartialEq, Eq)]
pub struct MirrorSettings {
    props: BTreeMap<String, String>,
}

impl fmt::Debug for MirrorSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.redacted()).finish()
    }
}

impl MirrorSettings {
    /// Validates `props`: every key known, every value well formed, `bootstrap.servers` present,
    /// and the security settings consistent.
    ///
    /// # Errors
    /// Every problem, each naming its key (sorted by key).
    pub fn from_properties(props: BTreeMap<String, String>) -> Result<Self, Vec<SettingError>> {
        let mut problems = Vec::new();
        for (key, value) in &props {
            let Some(kind) = setting_kind(key) else {
                problems.push(bad(key, "unknown setting"));
                continue;
            };
            let value = value.trim();
            match kind {
                SettingKind::Text | SettingKind::Secret => {
                    let may_be_empty = matches!(
                        key.as_str(),
                        "ssl.endpoint.identification.algorithm"
                            | "topics.exclude"
                            | "topic.properties.exclude"
                            | "groups.exclude"
                            | "mirror.replication.throttled.replicas"
                    );
                    if value.is_empty() && !may_be_empty {
                        problems.push(bad(key, "is empty"));
                    }
                }
                SettingKind::Int { min, max } => match value.parse::<i64>() {
                    Ok(n) if (min..=max).contains(&n) => {}
                    Ok(n) => problems.push(bad(key, format!("{n} is outside {min}..={max}"))),
                    Err(_) => problems.push(bad(key, format!("`{value}` is not an integer"))),
                },
                SettingKind::OneOf(words) => {
                    if !words.iter().any(|w| w.eq_ignore_ascii_case(value)) {
                        problems.push(bad(key, format!("`{value}` is not one of {}", words.join(", "))));
                    }
                }
            }
        }
        if let Some(Err(message)) = props.get("mirror.replication.throttled.replicas").map(|v| ThrottledReplicas::parse(v)) {
            problems.push(bad("mirror.replication.throttled.replicas", message));
        }
        match props.get("bootstrap.servers") {
            None => problems.push(bad("bootstrap.servers", "is required")),
            Some(servers) => {
                for server in servers.split(',').map(str::trim) {
                    let ok = server.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
                    if !ok {
                        problems.push(bad("bootstrap.servers", format!("`{server}` is not host:port")));
                    }
                }
            }
        }
        if problems.is_empty() {
            if let Err(crate::client::ClientError::Config { key, message }) = SecurityConfig::from_properties(&props) {
                problems.push(SettingError { key, message });
            }
            if let Err(e) = crate::sync::SyncSettings::from_properties(&props, None) {
                problems.push(SettingError { key: e.key, message: format!("`{}`: {}", e.value, e.message) });
            }
        }
        problems.dedup();
        if problems.is_empty() { Ok(Self { props }) } else { Err(problems) }
    }

    /// The settings without those only the sync jobs read and those applied live (the throttle):
    /// what the copying has to restart for.
    pub fn for_copying(&self) -> Self {
        let restart = |k: &String| !SYNC_ONLY.contains(&k.as_str()) && !LIVE.contains(&k.as_str());
        Self { props: self.props.iter().filter(|(k, _)| restart(k)).map(|(k, v)| (k.clone(), v.clone())).collect() }
    }

    /// The settings without those applied live (the throttle): what the sync jobs restart for.
    pub fn for_sync(&self) -> Self {
        Self { props: self.props.iter().filter(|(k, _)| !LIVE.contains(&k.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect() }
    }

    /// The throttle of the mirror's writes: `mirror.replication.throttled.rate` (bytes/s; absent
    /// or 0: unlimited) and `mirror.replication.throttled.replicas` (absent: every partition).
    pub fn throttle(&self) -> (Option<u64>, ThrottledReplicas) {
        let rate = self.int("mirror.replication.throttled.rate").and_then(|r| u64::try_from(r).ok()).filter(|r| *r > 0);
        // Validated in `from_properties`.
        let replicas = self.get("mirror.replication.throttled.replicas").map_or(Ok(ThrottledReplicas::All), ThrottledReplicas::parse).unwrap_or_default();
        (rate, replicas)
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.props.get(key).map(String::as_str)
    }

    /// The source's `bootstrap.servers`.
    pub fn bootstrap_servers(&self) -> &str {
        self.get("bootstrap.servers").unwrap_or_default()
    }

    /// `mirror.isolation.level` (read_committed by default).
    pub fn isolation(&self) -> IsolationLevel {
        match self.get("mirror.isolation.level") {
            Some(v) if v.trim().eq_ignore_ascii_case("read_uncommitted") => IsolationLevel::ReadUncommitted,
            _ => IsolationLevel::ReadCommitted,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(|v| v.trim().parse().ok())
    }

    /// `fetch.wait.max.ms`.
    pub fn fetch_max_wait(&self) -> Option<Duration> {
        self.int("fetch.wait.max.ms").map(|ms| Duration::from_millis(ms as u64))
    }

    /// `fetch.max.bytes` (per partition).
    pub fn partition_fetch_bytes(&self) -> Option<i32> {
        self.int("fetch.max.bytes").and_then(|b| i32::try_from(b).ok())
    }

    /// `fetch.response.max.bytes` (a whole fetch response).
    pub fn fetch_response_max_bytes(&self) -> Option<i32> {
        self.int("fetch.response.max.bytes").and_then(|b| i32::try_from(b).ok())
    }

    /// `fetch.min.bytes`.
    pub fn fetch_min_bytes(&self) -> Option<i32> {
        self.int("fetch.min.bytes").and_then(|b| i32::try_from(b).ok())
    }

    /// The client configuration for the source, with `mirror` in its client id (so source quotas
    /// can throttle one mirror), and every security setting (`security.protocol`, `ssl.*`,
    /// `sasl.mechanism`, `sasl.jaas.config`) as [`SecurityConfig::from_properties`] reads them.
    pub fn client_config(&self, mirror: &str) -> ClientConfig {
        let mut config = ClientConfig::new(self.bootstrap_servers());
        config.connection.client_id = self.get("client.id").map_or_else(|| format!("kafka-mirror-proxy-mirror-{mirror}"), str::to_owned);
        if let Some(ms) = self.int("request.timeout.ms") {
            config.connection.request_timeout = Duration::from_millis(ms as u64);
        }
        // Validated in `from_properties`.
        config.connection.security = SecurityConfig::from_properties(&self.props).unwrap_or_default();
        config
    }

    /// Every setting, secrets as `None`, sorted by key.
    pub fn redacted(&self) -> Vec<(String, Option<String>)> {
        self.props
            .iter()
            .map(|(k, v)| {
                let shown = (setting_kind(k) != Some(SettingKind::Secret)).then(|| v.clone());
                (k.clone(), shown)
            })
            .collect()
    }

    /// The properties, secrets included (for building a new set on alter).
    pub fn properties(&self) -> &BTreeMap<String, String> {
        &self.props
    }

    /// The settings as stored: secrets sealed with `key`.
    ///
    /// # Errors
    /// A secret setting with no key to seal it.
    pub fn seal(&self, mirror: &str, key: Option<&SecretKey>) -> Result<Vec<StoredConfig>, SettingError> {
        self.props
            .iter()
            .map(|(name, value)| {
                if setting_kind(name) == Some(SettingKind::Secret) {
                    let key = key.ok_or_else(|| bad(name, "is a secret, and this proxy has no secret key to store it encrypted (configure one)"))?;
                    Ok(StoredConfig { name: name.clone(), value: None, sealed: Some(key.seal(mirror, name, value)) })
                } else {
                    Ok(StoredConfig { name: name.clone(), value: Some(value.clone()), sealed: None })
                }
            })
            .collect()
    }

    /// The settings from their stored form.
    ///
    /// # Errors
    /// A sealed value that cannot be opened (no key, another key, tampered), or stored settings
    /// that no longer validate.
    pub fn unseal(mirror: &str, stored: &[StoredConfig], key: Option<&SecretKey>) -> Result<Self, SettingError> {
        let mut props = BTreeMap::new();
        for c in stored {
            let value = match (&c.value, &c.sealed) {
                (Some(v), _) => v.clone(),
                (None, Some(sealed)) => {
                    let key = key.ok_or_else(|| bad(&c.name, "is stored encrypted and this proxy has no secret key"))?;
                    key.open(mirror, &c.name, sealed).ok_or_else(|| bad(&c.name, "cannot be decrypted with this proxy's secret key"))?
                }
                (None, None) => return Err(bad(&c.name, "is stored without a value")),
            };
            props.insert(c.name.clone(), value);
        }
        Self::from_properties(props).map_err(|mut e| e.remove(0))
    }
}

/// The key sealing mirror secrets in `__mirror_state`. Every proxy instance sharing the state topic
/// needs the same key. `Debug` never shows it.
#[derive(Clone)]
pub struct SecretKey([u8; 32]);

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey([redacted])")
    }
}

impl SecretKey {
    /// A key from 32 bytes of key material.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A key derived from a passphrase (SHA-256, domain-separated). Use a long random passphrase:
    /// this is not a password hash.
    pub fn derive(passphrase: &str) -> Self {
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        ctx.update(b"kafka-mirror-proxy mirror secrets v1\0");
        ctx.update(passphrase.as_bytes());
        let digest = ctx.finish();
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        Self(key)
    }

    fn cipher(&self) -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &self.0).expect("invariant: 32-byte ChaCha20-Poly1305 key"))
    }

    fn aad(mirror: &str, name: &str) -> Vec<u8> {
        let mut aad = Vec::with_capacity(mirror.len() + name.len() + 1);
        aad.extend_from_slice(mirror.as_bytes());
        aad.push(0);
        aad.extend_from_slice(name.as_bytes());
        aad
    }

    /// Seals `value` for setting `name` of `mirror`: random nonce followed by ciphertext and tag.
    pub fn seal(&self, mirror: &str, name: &str, value: &str) -> Bytes {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).expect("invariant: the system RNG works");
        let mut data = value.as_bytes().to_vec();
        self.cipher()
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(Self::aad(mirror, name)), &mut data)
            .expect("invariant: sealing a short value cannot fail");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Bytes::from(out)
    }

    /// Opens what [`SecretKey::seal`] produced; `None` if the key, mirror or name do not match or
    /// the bytes were changed.
    pub fn open(&self, mirror: &str, name: &str, sealed: &[u8]) -> Option<String> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, data) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut data = data.to_vec();
        let plain = self.cipher().open_in_place(nonce, Aad::from(Self::aad(mirror, name)), &mut data).ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// Reads a Java properties file's text: `key=value` or `key: value` lines, `#`/`!` comments, blank
/// lines, and backslash line continuations.
///
/// # Errors
/// A line with no `=` or `:`, by line number.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut props = BTreeMap::new();
    let mut logical = String::new();
    let mut start_line = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_start();
        if logical.is_empty() {
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            start_line = i + 1;
        }
        if let Some(stripped) = line.strip_suffix('\\') {
            logical.push_str(stripped);
            continue;
        }
        logical.push_str(line);
        let entry = std::mem::take(&mut logical);
        let Some(pos) = entry.find(['=', ':']) else {
            return Err(format!("line {start_line}: `{}` is not key=value", entry.split_whitespace().next().unwrap_or("")));
        };
        props.insert(entry[..pos].trim().to_owned(), entry[pos + 1..].trim().to_owned());
    }
    if !logical.is_empty() {
        return Err(format!("line {start_line}: continued past the end of the file"));
    }
    Ok(props)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn mirror_names() {
        for ok in ["dr", "my-mirror", "a.b_c-9", &"x".repeat(249)] {
            validate_mirror_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a b", "é", "dr.removed", "dr.paused", "a/b", &"x".repeat(250)] {
            assert!(validate_mirror_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_name_each_bad_key() {
        let errors = MirrorSettings::from_properties(props(&[
            ("bootstrap.servers", "localhost"),
            ("fetch.max.bytes", "lots"),
            ("mirror.isolation.level", "snapshot"),
            ("no.such.setting", "1"),
        ]))
        .unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["fetch.max.bytes", "mirror.isolation.level", "no.such.setting", "bootstrap.servers"]);
        let errors = MirrorSettings::from_properties(props(&[])).unwrap_err();
        assert_eq!(errors[0].key, "bootstrap.servers");
        let errors = MirrorSettings::from_properties(props(&[("bootstrap.servers", "h:1"), ("security.protocol", "SASL_SSL"), ("sasl.mechanism", "PLAIN")]))
            .unwrap_err();
        assert_eq!(errors[0].key, "sasl.jaas.config");
    }

    #[test]
    fn the_throttle_is_applied_live() {
        let base = [("bootstrap.servers", "h:1")];
        let plain = MirrorSettings::from_properties(props(&base)).unwrap();
        assert_eq!(plain.throttle(), (None, ThrottledReplicas::All));
        let throttled = MirrorSettings::from_properties(props(&[
            ("bootstrap.servers", "h:1"),
            ("mirror.replication.throttled.rate", "1000000"),
            ("mirror.replication.throttled.replicas", "orders:0,orders:2"),
        ]))
        .unwrap();
        let (rate, replicas) = throttled.throttle();
        assert_eq!(rate, Some(1_000_000));
        assert!(replicas.contains("orders", 2) && !replicas.contains("orders", 1));
        // Neither the copying nor the sync restarts for a throttle change.
        assert_eq!(throttled.for_copying(), plain.for_copying());
        assert_eq!(throttled.for_sync(), plain.for_sync());
        let zero = MirrorSettings::from_properties(props(&[("bootstrap.servers", "h:1"), ("mirror.replication.throttled.rate", "0")])).unwrap();
        assert_eq!(zero.throttle().0, None, "0 is unlimited");
        let errors = MirrorSettings::from_properties(props(&[
            ("bootstrap.servers", "h:1"),
            ("mirror.replication.throttled.rate", "-5"),
            ("mirror.replication.throttled.replicas", "orders"),
        ]))
        .unwrap_err();
        let keys: Vec<&str> = errors.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["mirror.replication.throttled.rate", "mirror.replication.throttled.replicas"], "{errors:?}");
    }

    #[test]
    fn secrets_are_sealed_and_hidden() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="hunter2";"#;
        let settings = MirrorSettings::from_properties(props(&[
            ("bootstrap.servers", "h:9092"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", jaas),
        ]))
        .unwrap();
        assert!(!format!("{settings:?}").contains("hunter2"));
        assert!(settings.redacted().iter().any(|(k, v)| k == "sasl.jaas.config" && v.is_none()));
        assert_eq!(settings.seal("dr", None).unwrap_err().key, "sasl.jaas.config");

        let key = SecretKey::derive("test passphrase");
        let stored = settings.seal("dr", Some(&key)).unwrap();
        let sealed = stored.iter().find(|c| c.name == "sasl.jaas.config").unwrap();
        assert!(sealed.value.is_none());
        assert!(!String::from_utf8_lossy(sealed.sealed.as_ref().unwrap()).contains("hunter2"));
        assert_eq!(MirrorSettings::unseal("dr", &stored, Some(&key)).unwrap(), settings);
        // Another mirror's record, another key, or no key: refused.
        assert!(MirrorSettings::unseal("other", &stored, Some(&key)).is_err());
        assert!(MirrorSettings::unseal("dr", &stored, Some(&SecretKey::derive("other"))).is_err());
        assert!(MirrorSettings::unseal("dr", &stored, None).is_err());
    }

    /// The source connection of a SASL_SSL mirror gets every security setting, exactly.
    #[test]
    fn client_config_carries_tls_and_sasl() {
        let jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="pw=1";"#;
        let settings = MirrorSettings::from_properties(props(&[
            ("bootstrap.servers", "src:9093"),
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.jaas.config", jaas),
            ("ssl.truststore.location", "/etc/kmp/ca.pem"),
            ("ssl.truststore.type", "PEM"),
            ("ssl.keystore.location", "/etc/kmp/me.pem"),
            ("ssl.endpoint.identification.algorithm", ""),
        ]))
        .unwrap();
        let security = settings.client_config("dr").connection.security;
        assert_eq!(security.protocol, crate::client::SecurityProtocol::SaslSsl);
        let sasl = security.sasl.clone().unwrap();
        assert_eq!((sasl.mechanism, sasl.username.as_str(), sasl.password.as_str()), (crate::client::SaslMechanism::ScramSha512, "mirror", "pw=1"));
        assert_eq!(security.tls.truststore.as_deref(), Some(std::path::Path::new("/etc/kmp/ca.pem")));
        assert_eq!(security.tls.keystore.as_deref(), Some(std::path::Path::new("/etc/kmp/me.pem")));
        assert!(!security.tls.verify_hostname);
        // Inline PEM: the key is a secret.
        assert_eq!(setting_kind("ssl.keystore.key"), Some(SettingKind::Secret));
        let errors = MirrorSettings::from_properties(props(&[("bootstrap.servers", "h:1"), ("security.protocol", "SSL")])).unwrap_err();
        assert_eq!(errors[0].key, "ssl.truststore.location");
    }

    #[test]
    fn properties_files() {
        let text = "# source\nbootstrap.servers = a:1,\\\n   b:2\n! comment\n\nsecurity.protocol:PLAINTEXT\n";
        let p = parse_properties(text).unwrap();
        assert_eq!(p["bootstrap.servers"], "a:1,b:2");
        assert_eq!(p["security.protocol"], "PLAINTEXT");
        assert!(parse_properties("just-a-word\n").unwrap_err().contains("line 1"));
    }
}
