//! Provisioning: Apache Kafka jars from Maven Central, one directory per version.
//!
//! `dist("4.4.0")` makes sure `<root>/target/kafka/4.4.0/libs/` holds the broker, tools and clients jars
//! and their dependencies, by running Maven on `tests/kafka/pom.xml` the first time. There is no Kafka
//! tarball and no `bin/*.sh`: the harness runs the main classes directly with `java -cp 'libs/*'`.
//!
//! ```text
//! target/kafka/<version>.lock       flock taken while provisioning <version>
//! target/kafka/<version>/libs/      the jars; libs/.provisioned marks them complete
//! target/kafka/<version>/testclient the compiled tests/java/TestClient.java (see client.rs)
//! ```
//!
//! Concurrency: readers look for the marker first; a provisioner takes the lock, looks again, and
//! downloads into a staging directory that it renames into place with the marker already inside.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::util::{self, FileLock};

/// The Kafka version used when `KAFKA_VERSION` is not set.
pub const DEFAULT_KAFKA_VERSION: &str = "4.4.0";

/// Longest the Maven download may take.
const MAVEN_TIMEOUT: Duration = Duration::from_secs(900);

/// Marker written inside `libs/` once Maven has copied every jar.
const MARKER: &str = ".provisioned";

/// The Kafka version tests run against: `KAFKA_VERSION`, or [`DEFAULT_KAFKA_VERSION`].
pub fn default_version() -> String {
    std::env::var("KAFKA_VERSION").ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| DEFAULT_KAFKA_VERSION.to_string())
}

/// A provisioned Kafka version: a directory of jars that `java -cp 'libs/*'` can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaDist {
    version: String,
    major: u32,
    home: PathBuf,
}

impl KafkaDist {
    /// The version string, e.g. `4.4.0`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The major version (3 or 4), which decides logging and storage-format details.
    pub fn major(&self) -> u32 {
        self.major
    }

    /// `<root>/target/kafka/<version>`.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The directory of jars.
    pub fn libs_dir(&self) -> PathBuf {
        self.home.join("libs")
    }

    /// The classpath for `java -cp`: `<libs>/*`.
    pub fn classpath(&self) -> String {
        format!("{}/*", self.libs_dir().display())
    }

    /// A `java` command with this version's jars on the classpath and the given JVM options; append the
    /// main class and its arguments.
    pub fn java(&self, jvm_opts: &[String], extra_classpath: Option<&Path>) -> Command {
        let mut cmd = Command::new(util::java_tool("java"));
        cmd.args(jvm_opts);
        let mut classpath = self.classpath();
        if let Some(extra) = extra_classpath {
            classpath.push(':');
            classpath.push_str(&extra.to_string_lossy());
        }
        cmd.arg("-cp").arg(classpath);
        cmd
    }
}

#[cfg(test)]
impl KafkaDist {
    pub(crate) fn for_tests(version: &str, major: u32) -> Self {
        KafkaDist { version: version.into(), major, home: PathBuf::from("/nonexistent") }
    }
}

/// Provisions Kafka `version` (downloading with Maven on first use) and returns where it is.
///
/// # Errors
/// If the version string is not `MAJOR.MINOR.PATCH`-like, or Maven fails (the error carries its command
/// line and output).
pub fn dist(version: &str) -> Result<KafkaDist> {
    let major = parse_major(version)?;
    let home = util::target_dir()?.join("kafka").join(version);
    let dist = KafkaDist { version: version.to_string(), major, home };
    let libs = dist.libs_dir();
    if libs.join(MARKER).is_file() {
        return Ok(dist);
    }
    let _lock = FileLock::acquire(&dist.home.with_file_name(format!("{version}.lock")))?;
    if libs.join(MARKER).is_file() {
        return Ok(dist);
    }
    let staged = dist.home.join(format!("libs.tmp-{}", std::process::id()));
    if staged.exists() {
        std::fs::remove_dir_all(&staged).map_err(|e| HarnessError::io(format!("removing {}", staged.display()), e))?;
    }
    util::create_dir_all(&staged)?;
    let root = util::repo_root()?;
    let mut cmd = Command::new("mvn");
    cmd.arg("-q")
        .arg("-B")
        .arg("-f")
        .arg(root.join("tests/kafka/pom.xml"))
        .arg("dependency:copy-dependencies")
        .arg(format!("-Dkafka.version={version}"))
        .arg(format!("-DoutputDirectory={}", staged.display()));
    if major < 4 {
        // Kafka 3.x brings its own SLF4J binding (reload4j); see the profile in the pom.
        cmd.arg("-Dkafka.logging=reload4j");
    }
    util::run_captured(cmd, None, false, MAVEN_TIMEOUT)?;
    let kafka_jar = staged.join(format!("kafka_2.13-{version}.jar"));
    if !kafka_jar.is_file() {
        return Err(HarnessError::InvalidArgument(format!("Maven finished but {} is missing; is {version} a released Kafka version?", kafka_jar.display())));
    }
    util::write_file(&staged.join(MARKER), version)?;
    util::replace_dir(&staged, &libs)?;
    Ok(dist)
}

fn parse_major(version: &str) -> Result<u32> {
    let bad = || HarnessError::InvalidArgument(format!("Kafka version {version:?} is not like 4.4.0"));
    let mut parts = version.split('.');
    let major: u32 = parts.next().and_then(|m| m.parse().ok()).ok_or_else(bad)?;
    let minor_ok = parts.next().is_some_and(|m| m.parse::<u32>().is_ok());
    if !minor_ok || !(3..=9).contains(&major) || version.contains('/') {
        return Err(bad());
    }
    Ok(major)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_major("4.4.0").ok(), Some(4));
        assert_eq!(parse_major("3.9.1").ok(), Some(3));
        assert!(parse_major("4").is_err());
        assert!(parse_major("../x").is_err());
        assert!(parse_major("2.8.0").is_err());
    }
}
