//! The harness's one error type.
//!
//! Every variant that comes from running something names the command line that was run and carries the
//! tail of its output or log, so a failing test shows why without anyone digging through `target/`.

use std::path::PathBuf;

/// Anything that went wrong while provisioning Kafka, running a cluster or running a test client.
///
/// `Debug` prints the same as `Display` (plus the source chain), so `.expect()` in tests shows the
/// command and log tail readably instead of one escaped line.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// A filesystem or process-spawn operation failed.
    #[error("{context}")]
    Io {
        /// What the harness was doing, e.g. `creating /repo/target/kafka-clusters/src-1-0`.
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// An external command (mvn, javac, java TestClient, python) exited unsuccessfully.
    #[error("command failed ({status}): {command}\n--- output (tail) ---\n{output_tail}")]
    Command {
        /// The command line, shell-quoted for copy and paste.
        command: String,
        /// How it ended, e.g. `exit status: 1`.
        status: String,
        /// The last lines of its stderr (and stdout, where it is not the data channel).
        output_tail: String,
    },

    /// A command succeeded but printed something the harness could not understand.
    #[error("unexpected output from {command}: {reason}\n--- output (head) ---\n{output_head}")]
    BadOutput {
        /// The command line.
        command: String,
        /// What was wrong.
        reason: String,
        /// The first lines of the output.
        output_head: String,
    },

    /// A broker did not become ready, or its process exited.
    #[error(
        "cluster {cluster}: node {node_id}: {reason}\ncommand: {command}\n--- {} (tail) ---\n{log_tail}",
        log_path.display()
    )]
    Broker {
        /// Cluster name.
        cluster: String,
        /// KRaft node id.
        node_id: i32,
        /// What happened (timeout, exit status).
        reason: String,
        /// The java command line of the broker.
        command: String,
        /// The broker's captured stdout/stderr.
        log_path: PathBuf,
        /// The last lines of that log.
        log_tail: String,
    },

    /// The Kafka wire protocol exchange the harness uses for readiness checks failed.
    #[error("kafka request to {addr} failed: {reason}")]
    Wire {
        /// Broker address.
        addr: String,
        /// What went wrong.
        reason: String,
    },

    /// Waiting for a condition ran past its deadline.
    #[error("timed out after {waited_ms} ms waiting for {what}; last state: {last}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long the harness waited, in ms.
        waited_ms: u128,
        /// The last observed state or error.
        last: String,
    },

    /// The operation needs a cluster the harness started, but this one was given by address
    /// (`KMP_SOURCE_BOOTSTRAP` and friends).
    #[error("cluster {cluster} is external ({bootstrap}); the harness cannot {operation} it")]
    External {
        /// Cluster name.
        cluster: String,
        /// Its bootstrap servers.
        bootstrap: String,
        /// What was asked, e.g. `kill a broker of`.
        operation: &'static str,
    },

    /// A node id that the cluster does not have.
    #[error("cluster {cluster} has no node {node_id} (nodes: {known:?})")]
    UnknownNode {
        /// Cluster name.
        cluster: String,
        /// The id asked for.
        node_id: i32,
        /// The ids it has.
        known: Vec<i32>,
    },

    /// The caller passed something unusable (bad version string, zero brokers, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl std::fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        while let Some(error) = source {
            write!(f, "\ncaused by: {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

impl HarnessError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { context: context.into(), source }
    }
}

/// Shorthand used throughout the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;

/// `map_err` helper: `fs::create_dir_all(&d).io_context(|| format!("creating {}", d.display()))?`.
pub(crate) trait IoContext<T> {
    fn io_context<F: FnOnce() -> String>(self, f: F) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn io_context<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|e| HarnessError::io(f(), e))
    }
}
