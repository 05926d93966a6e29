//! What goes into a broker: its `server.properties`, its logging config, its formatted storage.
//!
//! The defaults make single-node clusters work (replication factors of 1 for internal topics) and
//! make startup and tests fast (no initial rebalance delay, few threads, small buffers, quick fencing
//! of dead brokers). Tests add or override properties with [`ClusterSpec::prop`].

use std::path::Path;
#[cfg(test)]
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::{ClusterSpec, Node};
use crate::dist::KafkaDist;
use crate::error::Result;
use crate::util;

/// Longest a storage format may take.
const FORMAT_TIMEOUT: Duration = Duration::from_secs(120);

/// JVM options of short-lived tools (storage format, the Java test client): startup time dominates.
pub(crate) const TOOL_JVM_OPTS: &[&str] =
    &["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true"];

/// The broker properties for `node`: harness defaults, then `spec.broker_props` (later keys win).
pub(crate) fn broker_properties(spec: &ClusterSpec, dist: &KafkaDist, nodes: &[Node], node: &Node) -> Vec<(String, String)> {
    // Spare broker-only nodes are added later: replication factors and the quorum count the others.
    let n = nodes.iter().filter(|x| !x.broker_only).count();
    let min_isr = n.min(2);
    let internal_partitions = if n == 1 { 1 } else { 3 };
    let voters: Vec<String> = nodes.iter().filter(|x| !x.broker_only).map(|x| format!("{}@127.0.0.1:{}", x.id, x.controller_port)).collect();
    // A secure cluster adds a CLIENT listener (advertised to clients on it); the brokers keep talking
    // PLAINTEXT among themselves, and the controllers too.
    let (listeners, advertised, protocol_map) = match (spec.security, node.client_port) {
        (Some(security), Some(client_port)) => (
            format!("PLAINTEXT://127.0.0.1:{},CLIENT://127.0.0.1:{client_port},CONTROLLER://127.0.0.1:{}", node.port, node.controller_port),
            format!("PLAINTEXT://127.0.0.1:{},CLIENT://127.0.0.1:{client_port}", node.port),
            format!("PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,CLIENT:{}", security.protocol()),
        ),
        _ => (
            format!("PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}", node.port, node.controller_port),
            format!("PLAINTEXT://127.0.0.1:{}", node.port),
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT".to_owned(),
        ),
    };
    let (listeners, advertised, protocol_map) = match node.relay {
        Some((port, relay_port)) => (
            format!("{listeners},RELAYED://127.0.0.1:{port}"),
            format!("{advertised},RELAYED://127.0.0.1:{relay_port}"),
            format!("{protocol_map},RELAYED:PLAINTEXT"),
        ),
        None => (listeners, advertised, protocol_map),
    };
    let mut props: Vec<(String, String)> = vec![
        ("process.roles".into(), "broker,controller".into()),
        ("node.id".into(), node.id.to_string()),
        ("controller.quorum.voters".into(), voters.join(",")),
        ("listeners".into(), listeners),
        ("advertised.listeners".into(), advertised),
        ("listener.security.protocol.map".into(), protocol_map),
        ("controller.listener.names".into(), "CONTROLLER".into()),
        ("inter.broker.listener.name".into(), "PLAINTEXT".into()),
        ("log.dirs".into(), node.dir.join("data").display().to_string()),
        ("num.partitions".into(), "1".into()),
        ("default.replication.factor".into(), n.to_string()),
        ("min.insync.replicas".into(), "1".into()),
        ("offsets.topic.replication.factor".into(), n.to_string()),
        ("offsets.topic.num.partitions".into(), internal_partitions.to_string()),
        ("transaction.state.log.replication.factor".into(), n.to_string()),
        ("transaction.state.log.min.isr".into(), min_isr.to_string()),
        ("transaction.state.log.num.partitions".into(), internal_partitions.to_string()),
        ("group.initial.rebalance.delay.ms".into(), "0".into()),
        ("auto.create.topics.enable".into(), "false".into()),
        // Fewer threads: several brokers share 2 cores.
        ("num.network.threads".into(), "2".into()),
        ("num.io.threads".into(), "2".into()),
        ("background.threads".into(), "2".into()),
        ("log.cleaner.threads".into(), "1".into()),
        // The default 128 MiB dedupe buffer is allocated at startup; compaction tests need far less.
        ("log.cleaner.dedupe.buffer.size".into(), "16777216".into()),
        // Retention and the cleaner act within seconds, so retention and compaction tests stay short.
        ("log.retention.check.interval.ms".into(), "1000".into()),
        ("log.cleaner.backoff.ms".into(), "1000".into()),
        ("log.initial.task.delay.ms".into(), "1000".into()),
        // Index files are preallocated sparse (10 MiB each by default) and mmapped; on a disk with a large
        // read-ahead (8 MiB on some VMs) every first touch of an index page zero-fills the whole window,
        // which at 1,000 partitions took half of a broker's CPU and ~12 GB of page cache. A 1 MiB index
        // still covers 341 MiB of log per segment (the time index, 12-byte entries), more than any test writes.
        ("log.index.size.max.bytes".into(), "1048576".into()),
        // A killed broker is fenced (and loses leadership) after 4 s instead of 9 s.
        ("broker.heartbeat.interval.ms".into(), "500".into()),
        ("broker.session.timeout.ms".into(), "4000".into()),
    ];
    if dist.major() >= 4 {
        props.push(("share.coordinator.state.topic.replication.factor".into(), n.to_string()));
        props.push(("share.coordinator.state.topic.min.isr".into(), min_isr.to_string()));
    }
    if node.broker_only {
        for (key, value) in &mut props {
            match key.as_str() {
                "process.roles" => *value = "broker".into(),
                // A broker-only node has no controller listener; it reaches the quorum through
                // `controller.quorum.voters` and `controller.listener.names`.
                "listeners" => *value = value.split(',').filter(|l| !l.starts_with("CONTROLLER://")).collect::<Vec<_>>().join(","),
                _ => {}
            }
        }
    }
    for (key, value) in &spec.broker_props {
        props.retain(|(k, _)| k != key);
        props.push((key.clone(), value.clone()));
    }
    props
}

/// Logging configs for both Kafka generations: log4j2 (Kafka 4.x) and log4j 1 via reload4j (Kafka 3.x),
/// as (file name, text) pairs. Output goes to stdout, or to stderr with `to_stderr` (tools whose stdout
/// is data).
pub(crate) fn log_config_texts(level: &str, to_stderr: bool) -> [(String, String); 2] {
    let suffix = if to_stderr { "tools" } else { "broker" };
    let pattern = "[%d] %p %m (%c)%n";
    let (target2, target1) = if to_stderr { ("SYSTEM_ERR", "System.err") } else { ("SYSTEM_OUT", "System.out") };
    let log4j2 = format!(
        "status = warn\n\
         appender.console.type = Console\n\
         appender.console.name = console\n\
         appender.console.target = {target2}\n\
         appender.console.layout.type = PatternLayout\n\
         appender.console.layout.pattern = {pattern}\n\
         rootLogger.level = {level}\n\
         rootLogger.appenderRef.console.ref = console\n"
    );
    let log4j1 = format!(
        "log4j.rootLogger={level}, console\n\
         log4j.appender.console=org.apache.log4j.ConsoleAppender\n\
         log4j.appender.console.Target={target1}\n\
         log4j.appender.console.layout=org.apache.log4j.PatternLayout\n\
         log4j.appender.console.layout.ConversionPattern={pattern}\n"
    );
    [(format!("log4j2-{suffix}.properties"), log4j2), (format!("log4j-{suffix}.properties"), log4j1)]
}

/// The JVM system properties that select the configs of [`log_config_texts`] in `dir`. Each logging
/// backend ignores the other's property.
pub(crate) fn log_config_props(dir: &Path, to_stderr: bool) -> Vec<String> {
    let [(log4j2, _), (log4j1, _)] = log_config_texts("INFO", to_stderr);
    vec![format!("-Dlog4j2.configurationFile={}", dir.join(log4j2).display()), format!("-Dlog4j.configuration=file:{}", dir.join(log4j1).display())]
}

/// Writes the configs of [`log_config_texts`] into `dir` and returns [`log_config_props`].
pub(crate) fn write_log_configs(dir: &Path, level: &str, to_stderr: bool) -> Result<Vec<String>> {
    for (name, text) in log_config_texts(level, to_stderr) {
        util::write_file(&dir.join(name), text)?;
    }
    Ok(log_config_props(dir, to_stderr))
}

/// Formats every node's storage with `kafka.tools.StorageTool format` (same jars as the broker), the
/// nodes in parallel, with the spec's release version and features. With a static quorum (`controller.quorum.voters`) neither `--standalone` nor
/// `--initial-controllers` applies; this works the same on 3.9 and 4.x.
pub(crate) fn format_storage(spec: &ClusterSpec, dist: &KafkaDist, dir: &Path, cluster_id: &str, nodes: &[Node]) -> Result<()> {
    let log_props = write_log_configs(dir, "WARN", true)?;
    let mut jvm: Vec<String> = TOOL_JVM_OPTS.iter().map(|s| s.to_string()).collect();
    jvm.extend(log_props);
    let handles: Vec<_> = nodes
        .iter()
        .map(|node| {
            let mut cmd = dist.java(&jvm, None);
            cmd.arg("kafka.tools.StorageTool")
                .arg("format")
                // `=` form: a random cluster id may start with '-', which argparse would read as a flag.
                .arg(format!("--cluster-id={cluster_id}"))
                .arg("--config")
                .arg(&node.config);
            if let Some(release) = &spec.release_version {
                cmd.arg("--release-version").arg(release);
            }
            for (name, level) in &spec.features {
                cmd.arg("--feature").arg(format!("{name}={level}"));
            }
            if spec.security.is_some() {
                // SCRAM credentials go into the metadata log at format time (KRaft has no ZooKeeper
                // to write them to later); PLAIN users live in the listener's JAAS line.
                cmd.args(crate::security::scram_format_args());
            }
            std::thread::spawn(move || util::run_captured(cmd, None, false, FORMAT_TIMEOUT))
        })
        .collect();
    for handle in handles {
        handle.join().expect("invariant: run_captured does not panic")?;
    }
    Ok(())
}

/// A random KRaft cluster id: 16 random bytes in URL-safe base64 without padding (22 characters), the
/// format `kafka-storage random-uuid` prints. Like Kafka's `Uuid.randomUuid`, it never starts with `-`,
/// which the storage tool's argument parser would take for an option.
pub(crate) fn random_cluster_id() -> String {
    loop {
        let bytes = [util::random_u64().to_le_bytes(), util::random_u64().to_le_bytes()].concat();
        let id = util::base64_encode(&bytes).replace('+', "-").replace('/', "_").trim_end_matches('=').to_string();
        if !id.starts_with('-') {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::ClusterSpec;

    #[test]
    fn cluster_ids_look_like_kafka_uuids() {
        for _ in 0..2000 {
            assert!(!random_cluster_id().starts_with('-'));
        }
        let id = random_cluster_id();
        assert_eq!(id.len(), 22, "{id}");
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{id}");
    }

    #[test]
    fn user_props_override_defaults() {
        let spec = ClusterSpec::new("t").prop("num.io.threads", "8").prop("x.y", "z");
        let dist = KafkaDist::for_tests("4.4.0", 4);
        let node = Node {
            id: 0,
            port: 1,
            client_port: None,
            relay: None,
            controller_port: 2,
            dir: PathBuf::from("/n"),
            config: PathBuf::new(),
            log: PathBuf::new(),
            broker_only: false,
        };
        let props = broker_properties(&spec, &dist, std::slice::from_ref(&node), &node);
        assert_eq!(props.iter().filter(|(k, _)| k == "num.io.threads").count(), 1);
        assert!(props.contains(&("num.io.threads".into(), "8".into())));
        assert!(props.contains(&("x.y".into(), "z".into())));
        assert!(props.contains(&("controller.quorum.voters".into(), "0@127.0.0.1:2".into())));
        assert!(props.contains(&("log.dirs".into(), "/n/data".into())));
    }
}
