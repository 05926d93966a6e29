//! The librdkafka reader: `tests/clients/dump_records.py` (confluent-kafka), an implementation of the
//! Kafka protocol independent of both the Java clients and the crate under test. It prints the record
//! format of the Java consumer, so `java_client().consume(..) == librdkafka_consume(..)` is a test.
//!
//! Python comes from `KMP_PYTHON`, or from a venv in `target/py-venv` that [`provision_python`] creates
//! on first use from `tests/clients/requirements.txt` (pip, PyPI), under a file lock.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Longest venv creation or `pip install` may take.
const PIP_TIMEOUT: Duration = Duration::from_secs(900);

use crate::client;
use crate::error::{HarnessError, Result};
use crate::records::{self, ConsumeOptions, ConsumedRecord};
use crate::util::{self, FileLock};

/// Returns a Python interpreter that can `import confluent_kafka`, creating `target/py-venv` if needed.
///
/// # Errors
/// If venv creation or `pip install` fails (the error carries pip's output).
pub fn provision_python() -> Result<PathBuf> {
    if let Some(python) = std::env::var_os("KMP_PYTHON").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(python));
    }
    let root = util::repo_root()?;
    let requirements = root.join("tests/clients/requirements.txt");
    let wanted = std::fs::read(&requirements).map_err(|e| HarnessError::io(format!("reading {}", requirements.display()), e))?;
    let hash = format!("{:016x}", util::fnv1a(&wanted));
    let venv = root.join("target/py-venv");
    let python = venv.join("bin/python");
    let marker = venv.join(".requirements-hash");
    let fresh = || std::fs::read_to_string(&marker).is_ok_and(|h| h == hash);
    if fresh() {
        return Ok(python);
    }
    let _lock = FileLock::acquire(&root.join("target/py-venv.lock"))?;
    if fresh() {
        return Ok(python);
    }
    if !python.is_file() {
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "venv"]).arg(&venv);
        util::run_captured(cmd, None, false, PIP_TIMEOUT)?;
    }
    let mut pip = Command::new(&python);
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r"]).arg(&requirements);
    util::run_captured(pip, None, false, PIP_TIMEOUT)?;
    util::write_file(&marker, &hash)?;
    Ok(python)
}

/// Reads `topic` with librdkafka from the beginning to the end offsets seen at start (last stable
/// offsets under read_committed). Sorted by (partition, offset), like [`crate::JavaClient::consume`].
///
/// # Errors
/// If Python cannot be provisioned, or the reader fails or times out (the error has its stderr).
pub fn librdkafka_consume(bootstrap: &str, topic: &str, opts: &ConsumeOptions) -> Result<Vec<ConsumedRecord>> {
    let python = provision_python()?;
    let script = util::repo_root()?.join("tests/clients/dump_records.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).args(["--bootstrap", bootstrap, "--topic", topic]).args(opts.args());
    let described = util::describe_command(&cmd);
    let output = util::run_captured(cmd, None, true, client::CLIENT_TIMEOUT)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let values = records::parse_json_lines(&described, &stdout)?;
    records::records_from_json(&described, &values)
}
