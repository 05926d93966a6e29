//! The Kafka Java clients as a test tool: `tests/java/TestClient.java`, compiled per Kafka version and
//! run once per call, with JSON lines in and out (the protocol is documented at the top of that file).
//!
//! ```text
//! JavaClient::produce  --stdin JSON lines-->  java TestClient produce  --stdout {"partition","offset"}-->  Vec<(i32, i64)>
//! JavaClient::consume                         java TestClient consume  --stdout record JSON-->             Vec<ConsumedRecord>
//! JavaClient::create_topic, offsets, ...      java TestClient admin …  --stdout JSON-->                    typed results
//! ```
//!
//! Compilation is cached in `target/kafka/<version>/testclient/`, keyed by a hash of the source, and
//! guarded by a file lock like provisioning.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::{self, TOOL_JVM_OPTS};
use crate::dist::KafkaDist;
use crate::error::{HarnessError, Result};
use crate::util::{self, FileLock};
use crate::wire;

/// How long [`JavaClient::create_topic`] waits for the new topic's leaders: see [`wait_topic_ready`].
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Client logs go to stderr, which the harness shows only when a command fails.
const CLIENT_LOG_LEVEL: &str = "WARN";

/// A record as read back by a consumer. Equal records compare equal whichever client read them (Java
/// or librdkafka), so tests can compare the two readers with `==`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConsumedRecord {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Key; `None` is a null key, distinct from an empty one.
    pub key: Option<Vec<u8>>,
    /// Value; `None` is a null value (tombstone), distinct from an empty one.
    pub value: Option<Vec<u8>>,
    /// Headers in record order, repeated keys kept; a `None` value is a null header value.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Timestamp, ms since the epoch.
    pub timestamp: i64,
    /// `CreateTime` or `LogAppendTime` (Java's `TimestampType` names).
    pub timestamp_type: String,
}

impl ConsumedRecord {
    /// Parses one line of the shared record format (see `tests/java/TestClient.java`).
    pub(crate) fn from_json(v: &Value) -> std::result::Result<ConsumedRecord, String> {
        let int = |name: &str| {
            v.get(name)
                .and_then(Value::as_i64)
                .ok_or_else(|| format!("missing integer {name:?}"))
        };
        let mut headers = Vec::new();
        for h in v
            .get("headers")
            .and_then(Value::as_array)
            .ok_or("missing \"headers\" array")?
        {
            let key = h
                .get(0)
                .and_then(Value::as_str)
                .ok_or("header without a string key")?;
            headers.push((key.to_string(), opt_bytes(h.get(1))?));
        }
        Ok(ConsumedRecord {
            partition: int("partition")? as i32,
            offset: int("offset")?,
            key: opt_bytes(v.get("key"))?,
            value: opt_bytes(v.get("value"))?,
            headers,
            timestamp: int("timestamp")?,
            timestamp_type: v
                .get("timestampType")
                .and_then(Value::as_str)
                .ok_or("missing \"timestampType\"")?
                .to_string(),
        })
    }
}

fn opt_bytes(v: Option<&Value>) -> std::result::Result<Option<Vec<u8>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => util::base64_decode(s)
            .map(Some)
            .ok_or_else(|| format!("bad base64 {s:?}")),
        Some(other) => Err(format!("expected base64 string or null, got {other}")),
    }
}

fn json_bytes(bytes: &Option<Vec<u8>>) -> Value {
    bytes
        .as_ref()
        .map_or(Value::Null, |b| Value::String(util::base64_encode(b)))
}

/// A record to produce. Build with [`ProducerRecord::to`] or [`ProducerRecord::any_partition`] and the
/// chained setters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Target partition; `None` lets the producer's partitioner choose.
    pub partition: Option<i32>,
    /// Key; `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// Value; `None` is a null value (tombstone).
    pub value: Option<Vec<u8>>,
    /// Headers, in order; repeated keys allowed.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Create time in ms; `None` means the producer's clock.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record for `partition` with null key and value.
    pub fn to(partition: i32) -> Self {
        ProducerRecord {
            partition: Some(partition),
            ..Default::default()
        }
    }

    /// A record placed by the partitioner.
    pub fn any_partition() -> Self {
        ProducerRecord::default()
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets the value.
    pub fn value(mut self, value: impl Into<Vec<u8>>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Appends a header with a value.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((key.into(), Some(value.into())));
        self
    }

    /// Appends a header with a null value.
    pub fn null_header(mut self, key: impl Into<String>) -> Self {
        self.headers.push((key.into(), None));
        self
    }

    /// Sets the timestamp (ms).
    pub fn timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    fn to_json(&self) -> Value {
        json!({
            "partition": self.partition,
            "key": json_bytes(&self.key),
            "value": json_bytes(&self.value),
            "headers": self.headers.iter().map(|(k, v)| json!([k, json_bytes(v)])).collect::<Vec<_>>(),
            "timestamp": self.timestamp,
        })
    }
}

/// One line of producer input: a record, or a transaction/flush control.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProduceLine {
    /// Send a record.
    Record(ProducerRecord),
    /// `beginTransaction()`.
    Begin,
    /// `commitTransaction()`.
    Commit,
    /// `flush()` then `abortTransaction()`.
    Abort,
    /// `flush()`: ends the current batches.
    Flush,
}

impl From<ProducerRecord> for ProduceLine {
    fn from(record: ProducerRecord) -> Self {
        ProduceLine::Record(record)
    }
}

impl ProduceLine {
    fn to_json(&self) -> Value {
        match self {
            ProduceLine::Record(r) => r.to_json(),
            ProduceLine::Begin => json!({"txn": "begin"}),
            ProduceLine::Commit => json!({"txn": "commit"}),
            ProduceLine::Abort => json!({"txn": "abort"}),
            ProduceLine::Flush => json!({"flush": true}),
        }
    }
}

/// `compression.type` of the producer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    #[default]
    None,
    /// gzip.
    Gzip,
    /// Snappy.
    Snappy,
    /// LZ4.
    Lz4,
    /// Zstandard.
    Zstd,
}

impl Compression {
    /// All of them, for tests that loop over codecs.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The Kafka config value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Producer settings. The defaults are: acks=all, not idempotent, no compression, client defaults for
/// linger and batch size.
#[derive(Debug, Clone, Default)]
pub struct ProduceOptions {
    /// `compression.type`.
    pub compression: Compression,
    /// `enable.idempotence=true` (implied by `transactional_id`).
    pub idempotent: bool,
    /// `transactional.id`; needed for [`ProduceLine::Begin`] and friends.
    pub transactional_id: Option<String>,
    /// `linger.ms`.
    pub linger_ms: Option<u32>,
    /// `batch.size`, bytes.
    pub batch_size: Option<u32>,
    /// `acks`: `all`, `1` or `0` (default `all`).
    pub acks: Option<String>,
    /// `max.in.flight.requests.per.connection`.
    pub max_in_flight: Option<u32>,
    /// Any other producer configs, applied last.
    pub props: Vec<(String, String)>,
}

/// `isolation.level` of a consumer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Read everything up to the high watermark, aborted records included.
    #[default]
    ReadUncommitted,
    /// Read up to the last stable offset, skipping aborted records.
    ReadCommitted,
}

impl Isolation {
    /// The Kafka config value.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::ReadUncommitted => "read_uncommitted",
            Isolation::ReadCommitted => "read_committed",
        }
    }
}

/// Consumer settings. The consumer reads from the log start to the end offsets it sees at start.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    /// Isolation level (default read_uncommitted).
    pub isolation: Isolation,
    /// Read only this partition (default: all).
    pub partition: Option<i32>,
    /// Deadline for the whole read, ms (default 30000).
    pub timeout_ms: u64,
    /// Any other consumer configs, applied last.
    pub props: Vec<(String, String)>,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions {
            isolation: Isolation::default(),
            partition: None,
            timeout_ms: 30_000,
            props: Vec::new(),
        }
    }
}

impl ConsumeOptions {
    /// read_committed, all partitions.
    pub fn read_committed() -> Self {
        ConsumeOptions {
            isolation: Isolation::ReadCommitted,
            ..Default::default()
        }
    }

    pub(crate) fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--isolation".to_string(),
            self.isolation.as_str().to_string(),
        ];
        if let Some(p) = self.partition {
            args.extend(["--partition".to_string(), p.to_string()]);
        }
        args.extend(["--timeout-ms".to_string(), self.timeout_ms.to_string()]);
        for (k, v) in &self.props {
            args.extend(["--prop".to_string(), format!("{k}={v}")]);
        }
        args
    }
}

/// One partition of [`TopicDescription`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// Partition index.
    pub partition: i32,
    /// Leader node id, -1 if none.
    pub leader: i32,
    /// Replica node ids.
    pub replicas: Vec<i32>,
    /// In-sync replica node ids.
    pub isr: Vec<i32>,
}

/// `admin describe-topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Topic name.
    pub topic: String,
    /// Topic id (base64 UUID as Kafka prints it).
    pub topic_id: String,
    /// Internal topic (`__consumer_offsets`, ...).
    pub internal: bool,
    /// Partitions by index.
    pub partitions: Vec<PartitionState>,
    /// The topic's own (non-default) configs.
    pub configs: BTreeMap<String, String>,
}

/// `admin offsets`, one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// Partition index.
    pub partition: i32,
    /// Log start offset.
    pub earliest: i64,
    /// High watermark.
    pub latest: i64,
    /// Last stable offset.
    pub last_stable: i64,
}

/// An active producer on a partition (`admin describe-producers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    /// Producer id.
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i32,
    /// Last sequence number written.
    pub last_sequence: i32,
    /// Timestamp of the last write, ms.
    pub last_timestamp: i64,
    /// Coordinator epoch of the last transaction marker, if any.
    pub coordinator_epoch: Option<i32>,
    /// First offset of the ongoing transaction, if any.
    pub current_transaction_start_offset: Option<i64>,
}

/// `admin describe-producers`, one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionProducers {
    /// Partition index.
    pub partition: i32,
    /// Its active producers.
    pub producers: Vec<ProducerState>,
}

/// A committed group offset (`admin group-offsets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Committed offset.
    pub offset: i64,
    /// Commit metadata string.
    pub metadata: String,
    /// Leader epoch stored with the commit, if any.
    pub leader_epoch: Option<i32>,
}

/// The Java test client of one Kafka version. Cheap to clone.
#[derive(Debug, Clone)]
pub struct JavaClient {
    dist: KafkaDist,
    class_dir: PathBuf,
    jvm_opts: Vec<String>,
}

impl JavaClient {
    /// Compiles `tests/java/TestClient.java` against `dist` unless a build of the same source exists.
    ///
    /// # Errors
    /// If the source is missing or `javac` fails.
    pub fn new(dist: &KafkaDist) -> Result<JavaClient> {
        let source_path = util::repo_root()?.join("tests/java/TestClient.java");
        let source = std::fs::read(&source_path)
            .map_err(|e| HarnessError::io(format!("reading {}", source_path.display()), e))?;
        let class_dir = dist.home().join("testclient");
        let mut hashed = source.clone();
        for (name, text) in cluster::log_config_texts(CLIENT_LOG_LEVEL, true) {
            hashed.extend_from_slice(name.as_bytes());
            hashed.extend_from_slice(text.as_bytes());
        }
        let hash = format!("{:016x}", util::fnv1a(&hashed));
        let marker = class_dir.join(".source-hash");
        let fresh = || std::fs::read_to_string(&marker).is_ok_and(|h| h == hash);
        if !fresh() {
            let _lock = FileLock::acquire(&dist.home().join("testclient.lock"))?;
            if !fresh() {
                let staged = dist
                    .home()
                    .join(format!("testclient.tmp-{}", std::process::id()));
                if staged.exists() {
                    std::fs::remove_dir_all(&staged).map_err(|e| {
                        HarnessError::io(format!("removing {}", staged.display()), e)
                    })?;
                }
                util::create_dir_all(&staged)?;
                let mut javac = std::process::Command::new(util::java_tool("javac"));
                javac
                    .args(["--release", "17", "-encoding", "UTF-8", "-cp"])
                    .arg(dist.classpath())
                    .arg("-d")
                    .arg(&staged)
                    .arg(&source_path);
                util::run_captured(javac, None, false)?;
                util::replace_dir(&staged, &class_dir)?;
                cluster::write_log_configs(&class_dir, CLIENT_LOG_LEVEL, true)?;
                util::write_file(&marker, &hash)?;
            }
        }
        let mut jvm_opts: Vec<String> = TOOL_JVM_OPTS.iter().map(|s| s.to_string()).collect();
        jvm_opts.extend(cluster::log_config_props(&class_dir, true));
        Ok(JavaClient {
            dist: dist.clone(),
            class_dir,
            jvm_opts,
        })
    }

    /// The Kafka version of the client jars.
    pub fn version(&self) -> &str {
        self.dist.version()
    }

    /// A ready `java … TestClient` command: append a command and its options (see the top of
    /// `tests/java/TestClient.java`) for cases the typed methods do not cover.
    pub fn command(&self) -> std::process::Command {
        let mut cmd = self.dist.java(&self.jvm_opts, Some(&self.class_dir));
        cmd.arg("TestClient");
        cmd
    }

    fn run(&self, args: &[String], stdin: Option<Vec<u8>>) -> Result<(String, Vec<Value>)> {
        let mut cmd = self.command();
        cmd.args(args);
        let described = util::describe_command(&cmd);
        let output = util::run_captured(cmd, stdin, true)?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let values = parse_json_lines(&described, &stdout)?;
        Ok((described, values))
    }

    /// Produces `lines` to `topic` and returns where each record landed, in input order (control lines
    /// return nothing).
    ///
    /// # Errors
    /// If the producer fails (the error has its stderr) or prints an unexpected number of results.
    pub fn produce(
        &self,
        bootstrap: &str,
        topic: &str,
        opts: &ProduceOptions,
        lines: &[ProduceLine],
    ) -> Result<Vec<(i32, i64)>> {
        let mut args = strings(&["produce", "--bootstrap", bootstrap, "--topic", topic]);
        args.extend(strings(&["--compression", opts.compression.as_str()]));
        if opts.idempotent {
            args.push("--idempotent".into());
        }
        let numeric = [
            ("--linger-ms", opts.linger_ms),
            ("--batch-size", opts.batch_size),
            ("--max-in-flight", opts.max_in_flight),
        ];
        for (flag, value) in numeric {
            if let Some(v) = value {
                args.extend([flag.to_string(), v.to_string()]);
            }
        }
        if let Some(id) = &opts.transactional_id {
            args.extend(strings(&["--transactional-id", id]));
        }
        if let Some(acks) = &opts.acks {
            args.extend(strings(&["--acks", acks]));
        }
        for (k, v) in &opts.props {
            args.extend(["--prop".to_string(), format!("{k}={v}")]);
        }
        let mut stdin = String::new();
        for line in lines {
            stdin.push_str(&line.to_json().to_string());
            stdin.push('\n');
        }
        let (described, values) = self.run(&args, Some(stdin.into_bytes()))?;
        let expected = lines
            .iter()
            .filter(|l| matches!(l, ProduceLine::Record(_)))
            .count();
        let bad = |reason: String| HarnessError::BadOutput {
            command: described.clone(),
            reason,
            output_head: util::head(&format!("{values:?}"), 20),
        };
        if values.len() != expected {
            return Err(bad(format!(
                "{} results for {expected} records",
                values.len()
            )));
        }
        values
            .iter()
            .map(|v| {
                let p = v.get("partition").and_then(Value::as_i64);
                let o = v.get("offset").and_then(Value::as_i64);
                p.zip(o)
                    .map(|(p, o)| (p as i32, o))
                    .ok_or_else(|| bad(format!("bad result {v}")))
            })
            .collect()
    }

    /// Reads `topic` from the beginning to the end offsets seen at start. Sorted by (partition, offset).
    ///
    /// # Errors
    /// If the consumer fails or times out (the error has its stderr).
    pub fn consume(
        &self,
        bootstrap: &str,
        topic: &str,
        opts: &ConsumeOptions,
    ) -> Result<Vec<ConsumedRecord>> {
        let mut args = strings(&["consume", "--bootstrap", bootstrap, "--topic", topic]);
        args.extend(opts.args());
        let (described, values) = self.run(&args, None)?;
        records_from_json(&described, &values)
    }

    /// Runs `admin <subcommand> --bootstrap <bootstrap> <args>` and returns its JSON lines.
    ///
    /// # Errors
    /// If the command fails.
    pub fn admin(&self, bootstrap: &str, subcommand: &str, args: &[&str]) -> Result<Vec<Value>> {
        let mut all = strings(&["admin", subcommand, "--bootstrap", bootstrap]);
        all.extend(strings(args));
        Ok(self.run(&all, None)?.1)
    }

    fn admin_typed<T>(
        &self,
        bootstrap: &str,
        subcommand: &str,
        args: &[&str],
        parse: impl Fn(&Value) -> Option<T>,
    ) -> Result<Vec<T>> {
        let mut all = strings(&["admin", subcommand, "--bootstrap", bootstrap]);
        all.extend(strings(args));
        let (described, values) = self.run(&all, None)?;
        values
            .iter()
            .map(|v| {
                parse(v).ok_or_else(|| HarnessError::BadOutput {
                    command: described.clone(),
                    reason: format!("cannot parse {v}"),
                    output_head: String::new(),
                })
            })
            .collect()
    }

    /// Creates a topic, then waits until every live broker knows a leader for each partition. A
    /// `replication_factor` of -1 means the broker default (1, or 3 on 3-broker clusters).
    ///
    /// # Errors
    /// If creation fails (e.g. it exists) or the topic does not become ready within 30 s.
    pub fn create_topic(
        &self,
        bootstrap: &str,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let mut args = strings(&["--topic", topic, "--partitions", &partitions.to_string()]);
        if replication_factor > 0 {
            args.extend(strings(&[
                "--replication-factor",
                &replication_factor.to_string(),
            ]));
        }
        for (k, v) in configs {
            args.extend(["--config".to_string(), format!("{k}={v}")]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.admin(bootstrap, "create-topic", &refs)?;
        wait_topic_ready(bootstrap, topic, partitions, TOPIC_READY_TIMEOUT)
    }

    /// Deletes a topic.
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn delete_topic(&self, bootstrap: &str, topic: &str) -> Result<()> {
        self.admin(bootstrap, "delete-topic", &["--topic", topic])
            .map(drop)
    }

    /// Deletes records of one partition before `before_offset`; returns the new low watermark.
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn delete_records(
        &self,
        bootstrap: &str,
        topic: &str,
        partition: i32,
        before_offset: i64,
    ) -> Result<i64> {
        let (p, o) = (partition.to_string(), before_offset.to_string());
        let lows = self.admin_typed(
            bootstrap,
            "delete-records",
            &["--topic", topic, "--partition", &p, "--offset", &o],
            |v| v.get("lowWatermark").and_then(Value::as_i64),
        )?;
        Ok(lows.first().copied().unwrap_or(-1))
    }

    /// Describes a topic: partitions, leaders, replicas, ISR and non-default configs.
    ///
    /// # Errors
    /// If the admin call fails (e.g. unknown topic).
    pub fn describe_topic(&self, bootstrap: &str, topic: &str) -> Result<TopicDescription> {
        let parsed = self.admin_typed(bootstrap, "describe-topic", &["--topic", topic], |v| {
            let ints = |v: &Value| -> Option<Vec<i32>> {
                v.as_array()?
                    .iter()
                    .map(|x| x.as_i64().map(|x| x as i32))
                    .collect()
            };
            let mut partitions = Vec::new();
            for p in v.get("partitions")?.as_array()? {
                partitions.push(PartitionState {
                    partition: p.get("partition")?.as_i64()? as i32,
                    leader: p.get("leader")?.as_i64()? as i32,
                    replicas: ints(p.get("replicas")?)?,
                    isr: ints(p.get("isr")?)?,
                });
            }
            let configs = v
                .get("configs")?
                .as_object()?
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect();
            Some(TopicDescription {
                topic: v.get("topic")?.as_str()?.to_string(),
                topic_id: v.get("topicId")?.as_str()?.to_string(),
                internal: v.get("internal")?.as_bool()?,
                partitions,
                configs,
            })
        })?;
        parsed
            .into_iter()
            .next()
            .ok_or_else(|| HarnessError::BadOutput {
                command: format!("admin describe-topic --topic {topic}"),
                reason: "no output".into(),
                output_head: String::new(),
            })
    }

    /// Log start offset, high watermark and last stable offset of every partition.
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn offsets(&self, bootstrap: &str, topic: &str) -> Result<Vec<PartitionOffsets>> {
        self.admin_typed(bootstrap, "offsets", &["--topic", topic], |v| {
            Some(PartitionOffsets {
                partition: v.get("partition")?.as_i64()? as i32,
                earliest: v.get("earliest")?.as_i64()?,
                latest: v.get("latest")?.as_i64()?,
                last_stable: v.get("lastStable")?.as_i64()?,
            })
        })
    }

    /// Active producers (ids, epochs, sequences, open transactions) of every partition.
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn describe_producers(
        &self,
        bootstrap: &str,
        topic: &str,
    ) -> Result<Vec<PartitionProducers>> {
        self.admin_typed(bootstrap, "describe-producers", &["--topic", topic], |v| {
            let mut producers = Vec::new();
            for s in v.get("producers")?.as_array()? {
                producers.push(ProducerState {
                    producer_id: s.get("producerId")?.as_i64()?,
                    producer_epoch: s.get("producerEpoch")?.as_i64()? as i32,
                    last_sequence: s.get("lastSequence")?.as_i64()? as i32,
                    last_timestamp: s.get("lastTimestamp")?.as_i64()?,
                    coordinator_epoch: s.get("coordinatorEpoch")?.as_i64().map(|x| x as i32),
                    current_transaction_start_offset: s
                        .get("currentTransactionStartOffset")?
                        .as_i64(),
                });
            }
            Some(PartitionProducers {
                partition: v.get("partition")?.as_i64()? as i32,
                producers,
            })
        })
    }

    /// Committed offsets of a consumer group.
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn group_offsets(&self, bootstrap: &str, group: &str) -> Result<Vec<GroupOffset>> {
        self.admin_typed(bootstrap, "group-offsets", &["--group", group], |v| {
            Some(GroupOffset {
                topic: v.get("topic")?.as_str()?.to_string(),
                partition: v.get("partition")?.as_i64()? as i32,
                offset: v.get("offset")?.as_i64()?,
                metadata: v.get("metadata")?.as_str().unwrap_or_default().to_string(),
                leader_epoch: v.get("leaderEpoch")?.as_i64().map(|x| x as i32),
            })
        })
    }

    /// Commits `offset` for `group` on one partition (the group must have no active members).
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn commit_offset(
        &self,
        bootstrap: &str,
        group: &str,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<()> {
        let (p, o) = (partition.to_string(), offset.to_string());
        let args = [
            "--group",
            group,
            "--topic",
            topic,
            "--partition",
            &p,
            "--offset",
            &o,
        ];
        self.admin(bootstrap, "commit-offsets", &args).map(drop)
    }
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

/// Parses stdout of a client: one JSON value per non-empty line.
pub(crate) fn parse_json_lines(command: &str, stdout: &str) -> Result<Vec<Value>> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line).map_err(|e| HarnessError::BadOutput {
                command: command.to_string(),
                reason: format!("line {line:?} is not JSON: {e}"),
                output_head: util::head(stdout, 20),
            })
        })
        .collect()
}

/// Parses record lines and sorts them by (partition, offset).
pub(crate) fn records_from_json(command: &str, values: &[Value]) -> Result<Vec<ConsumedRecord>> {
    let mut records = values
        .iter()
        .map(|v| {
            ConsumedRecord::from_json(v).map_err(|reason| HarnessError::BadOutput {
                command: command.to_string(),
                reason: format!("{reason} in {v}"),
                output_head: String::new(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    records.sort_by_key(|r| (r.partition, r.offset));
    Ok(records)
}

/// Waits until every live broker of the cluster behind `bootstrap` reports `topic` with `partitions`
/// partitions, each with a leader. Producing right after topic creation is then safe for clients that
/// do not retry on UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER.
///
/// # Errors
/// [`HarnessError::Timeout`] or a connection error.
pub fn wait_topic_ready(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<()> {
    let first = bootstrap
        .split(',')
        .map(str::trim)
        .find(|a| !a.is_empty())
        .unwrap_or_default();
    let interval = Duration::from_millis(50);
    let probe = Duration::from_secs(5);
    let brokers = util::poll(
        &format!("metadata from {bootstrap}"),
        timeout,
        interval,
        |last| match wire::metadata(first, Some(&[]), probe) {
            Ok(md) => Ok(Some(md.brokers)),
            Err(e) => {
                *last = e.to_string();
                Ok(None)
            }
        },
    )?;
    for broker in brokers {
        let addr = format!("{}:{}", broker.host, broker.port);
        util::poll(
            &format!("topic {topic} on broker {} ({addr})", broker.node_id),
            timeout,
            interval,
            |last| match wire::metadata(&addr, Some(&[topic]), probe) {
                Ok(md) => {
                    let ready = md.topics.iter().any(|t| {
                        t.name == topic
                            && t.error_code == 0
                            && t.partitions.len() == partitions as usize
                            && t.partitions
                                .iter()
                                .all(|p| p.leader_id >= 0 && p.error_code == 0)
                    });
                    *last = format!("{:?}", md.topics);
                    Ok(ready.then_some(()))
                }
                Err(e) => {
                    *last = e.to_string();
                    Ok(None)
                }
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_json_round_trip() {
        let v = json!({
            "partition": 2, "offset": 7, "key": "AA==", "value": null,
            "headers": [["h", ""], ["h", null]], "timestamp": 5, "timestampType": "CreateTime"
        });
        let r = ConsumedRecord::from_json(&v).expect("valid");
        assert_eq!(r.key, Some(vec![0]));
        assert_eq!(r.value, None);
        assert_eq!(
            r.headers,
            vec![("h".to_string(), Some(vec![])), ("h".to_string(), None)]
        );
        assert!(ConsumedRecord::from_json(&json!({"partition": 1})).is_err());
    }

    #[test]
    fn producer_record_json() {
        let r = ProducerRecord::to(1)
            .key("k")
            .null_header("n")
            .header("h", "");
        assert_eq!(
            ProduceLine::from(r).to_json(),
            json!({"partition": 1, "key": "aw==", "value": null, "headers": [["n", null], ["h", ""]], "timestamp": null})
        );
    }
}
