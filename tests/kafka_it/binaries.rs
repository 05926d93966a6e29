//! The real binaries as an operator runs them: `kafka-mirror-proxy` processes (started, killed with
//! SIGKILL, restarted on the same ports) and `kafka-mirrors` calls against them.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A `kafka-mirror-proxy` process, killed when dropped.
pub struct ProxyProcess {
    child: Option<Child>,
    config: PathBuf,
    /// Holds `config`; removed when the process is dropped.
    _dir: tempfile::TempDir,
    /// The bootstrap address clients use.
    pub bootstrap: String,
    /// The `/metrics` address.
    pub metrics: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl ProxyProcess {
    /// Starts a proxy in front of `destination` with the control plane on `state_topic`; `mirrors`
    /// is extra YAML under `mirrors:` (indented two spaces per line).
    pub fn start(destination: &str, state_topic: &str, mirrors: &str) -> Self {
        let (port, metrics) = (free_port(), free_port());
        let dir = tempfile::Builder::new().prefix("kmp-proxy-").tempdir().unwrap();
        let config = dir.path().join("proxy.yaml");
        let yaml = format!(
            "proxy:\n  listen: \"127.0.0.1:{port}\"\n  advertised_host: \"127.0.0.1\"\n  broker_port_base: 0\ndestination:\n  bootstrap_servers: \"{destination}\"\nadmin:\n  metrics_listen: \"127.0.0.1:{metrics}\"\nmirrors:\n  state_topic: \"{state_topic}\"\n{mirrors}"
        );
        std::fs::write(&config, yaml).unwrap();
        let mut process = Self { child: None, config, _dir: dir, bootstrap: format!("127.0.0.1:{port}"), metrics: format!("127.0.0.1:{metrics}") };
        process.restart();
        process
    }

    /// Starts the process again with the same configuration (and ports).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "the proxy still runs");
        let child = Command::new(env!("CARGO_BIN_EXE_kafka-mirror-proxy"))
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "warn,kafka_mirror_proxy::mirror=info")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL: the process gets no chance to write, leave its group or close connections cleanly.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The `/metrics` exposition, if the proxy answers.
    pub async fn scrape(&self) -> Option<String> {
        let mut stream = tokio::net::TcpStream::connect(&self.metrics).await.ok()?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n").await.ok()?;
        let mut body = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut body)).await.ok()?.ok()?;
        body.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The value of the sample `name{labels}` (labels exactly as rendered), if present.
pub fn sample(exposition: &str, name_and_labels: &str) -> Option<f64> {
    exposition.lines().find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Runs `kafka-mirrors ARGS`; returns (success, stdout, stderr).
pub fn cli(args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = cli_code(args);
    (code == Some(0), out, err)
}

/// Runs `kafka-mirrors ARGS`; returns (exit status, stdout, stderr).
pub fn cli_code(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kafka-mirrors")).args(args).output().expect("kafka-mirrors runs");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// [`cli`] off the async runtime's threads.
pub async fn cli_async(args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = cli_code_async(args).await;
    (code == Some(0), out, err)
}

/// [`cli_code`] off the async runtime's threads.
pub async fn cli_code_async(args: &[&str]) -> (Option<i32>, String, String) {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    tokio::task::spawn_blocking(move || cli_code(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap()
}

/// `--describe --mirror MIRROR --json` rows, if the call succeeds.
pub async fn describe(proxy: &str, mirror: &str) -> Option<Vec<Value>> {
    let (ok, out, _) = cli_async(&["--bootstrap-server", proxy, "--describe", "--mirror", mirror, "--json"]).await;
    if !ok {
        return None;
    }
    match serde_json::from_str::<Value>(out.trim()).ok()? {
        Value::Array(rows) => Some(rows),
        _ => None,
    }
}

/// A properties file for `--mirror-config`, removed when dropped; it derefs to its path.
pub struct PropertiesFile {
    path: String,
    _file: tempfile::TempPath,
}

impl std::ops::Deref for PropertiesFile {
    type Target = str;
    fn deref(&self) -> &str {
        &self.path
    }
}

/// A properties file with `content`, for `--mirror-config`.
pub fn properties_file(content: &str) -> PropertiesFile {
    let file = tempfile::Builder::new().prefix("kmp-mirror-").suffix(".properties").tempfile().unwrap().into_temp_path();
    std::fs::write(&file, content).unwrap();
    PropertiesFile { path: file.to_string_lossy().into_owned(), _file: file }
}
