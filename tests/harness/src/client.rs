//! The Kafka Java clients as a test tool: `tests/java/TestClient.java`, compiled per Kafka version and
//! run once per call, with JSON lines in and out (the protocol is documented at the top of that file).
//!
//! ```text
//! JavaClient::produce  --stdin JSON lines-->  java TestClient produce  --stdout {"partition","offset"}-->  Vec<(i32, i64)>
//! JavaClient::consume                         java TestClient consume  --stdout record JSON-->             Vec<ConsumedRecord>
//! JavaClient::share_consume                   java TestClient share-consume --stdout record JSON-->        Vec<ConsumedRecord>
//! JavaClient::share_member                    java TestClient share-consume --hold  (until dropped)        ShareMember
//! JavaClient::create_topic, offsets, ...      java TestClient admin …  --stdout JSON-->                    typed results
//! ```
//!
//! Compilation is cached in `target/kafka/<version>/testclient/`, keyed by a hash of the source, and
//! guarded by a file lock like provisioning.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::broker_config::{self, TOOL_JVM_OPTS};
use crate::dist::KafkaDist;
use crate::error::{HarnessError, Result};
use crate::records::{ConsumeOptions, ConsumedRecord, ProduceLine, ProduceOptions, parse_json_lines, records_from_json};
use crate::util::{self, FileLock};
use crate::wire;

/// How long [`JavaClient::create_topic`] waits for the new topic's leaders: see [`wait_topic_ready`].
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a `javac` run may take.
const JAVAC_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest one client command may take; the client's own deadlines are 30 s per wait.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(180);
/// Client logs go to stderr, which the harness shows only when a command fails.
const CLIENT_LOG_LEVEL: &str = "WARN";

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

/// What [`JavaClient::follow`] saw.
#[derive(Debug, Clone, Default)]
pub struct Followed {
    /// Records in arrival order.
    pub records: Vec<ConsumedRecord>,
    /// Exceptions `poll` threw (the consumer went on polling).
    pub errors: Vec<String>,
    /// `poll` calls, and how many threw.
    pub polls: u64,
    pub poll_errors: u64,
    /// Longest time between two polls that returned records.
    pub longest_gap: Duration,
    /// The consumer's connection-creation-total, connection-close-total and request-total.
    pub connections_created: u64,
    pub connections_closed: u64,
    pub requests: u64,
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
        let source = std::fs::read(&source_path).map_err(|e| HarnessError::io(format!("reading {}", source_path.display()), e))?;
        let class_dir = dist.home().join("testclient");
        let mut hashed = source.clone();
        for (name, text) in broker_config::log_config_texts(CLIENT_LOG_LEVEL, true) {
            hashed.extend_from_slice(name.as_bytes());
            hashed.extend_from_slice(text.as_bytes());
        }
        let hash = format!("{:016x}", util::fnv1a(&hashed));
        let marker = class_dir.join(".source-hash");
        let fresh = || std::fs::read_to_string(&marker).is_ok_and(|h| h == hash);
        if !fresh() {
            let _lock = FileLock::acquire(&dist.home().join("testclient.lock"))?;
            if !fresh() {
                let staged = dist.home().join(format!("testclient.tmp-{}", std::process::id()));
                if staged.exists() {
                    std::fs::remove_dir_all(&staged).map_err(|e| HarnessError::io(format!("removing {}", staged.display()), e))?;
                }
                util::create_dir_all(&staged)?;
                let mut javac = std::process::Command::new(util::java_tool("javac"));
                javac.args(["--release", "17", "-encoding", "UTF-8", "-cp"]).arg(dist.classpath()).arg("-d").arg(&staged).arg(&source_path);
                util::run_captured(javac, None, false, JAVAC_TIMEOUT)?;
                util::replace_dir(&staged, &class_dir)?;
                broker_config::write_log_configs(&class_dir, CLIENT_LOG_LEVEL, true)?;
                util::write_file(&marker, &hash)?;
            }
        }
        let mut jvm_opts: Vec<String> = TOOL_JVM_OPTS.iter().map(|s| s.to_string()).collect();
        jvm_opts.extend(broker_config::log_config_props(&class_dir, true));
        Ok(JavaClient { dist: dist.clone(), class_dir, jvm_opts })
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
        self.run_within(args, stdin, CLIENT_TIMEOUT)
    }

    fn run_within(&self, args: &[String], stdin: Option<Vec<u8>>, timeout: Duration) -> Result<(String, Vec<Value>)> {
        let mut cmd = self.command();
        cmd.args(args);
        let described = util::describe_command(&cmd);
        let output = util::run_captured(cmd, stdin, true, timeout)?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let values = parse_json_lines(&described, &stdout)?;
        Ok((described, values))
    }

    /// Produces `lines` to `topic` and returns where each record landed, in input order (control lines
    /// return nothing).
    ///
    /// # Errors
    /// If the producer fails (the error has its stderr) or prints an unexpected number of results.
    pub fn produce(&self, bootstrap: &str, topic: &str, opts: &ProduceOptions, lines: &[ProduceLine]) -> Result<Vec<(i32, i64)>> {
        let mut args = strings(&["produce", "--bootstrap", bootstrap, "--topic", topic]);
        args.extend(strings(&["--compression", opts.compression.as_str()]));
        if opts.idempotent {
            args.push("--idempotent".into());
        }
        let numeric = [("--linger-ms", opts.linger_ms), ("--batch-size", opts.batch_size), ("--max-in-flight", opts.max_in_flight)];
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
        let expected = lines.iter().filter(|l| matches!(l, ProduceLine::Record(_))).count();
        let bad = |reason: String| HarnessError::BadOutput { command: described.clone(), reason, output_head: util::head(&format!("{values:?}"), 20) };
        if values.len() != expected {
            return Err(bad(format!("{} results for {expected} records", values.len())));
        }
        values
            .iter()
            .map(|v| {
                let p = v.get("partition").and_then(Value::as_i64);
                let o = v.get("offset").and_then(Value::as_i64);
                p.zip(o).map(|(p, o)| (p as i32, o)).ok_or_else(|| bad(format!("bad result {v}")))
            })
            .collect()
    }

    /// Reads `topic` from the beginning to the end offsets seen at start. Sorted by (partition, offset).
    ///
    /// # Errors
    /// If the consumer fails or times out (the error has its stderr).
    pub fn consume(&self, bootstrap: &str, topic: &str, opts: &ConsumeOptions) -> Result<Vec<ConsumedRecord>> {
        let mut args = strings(&["consume", "--bootstrap", bootstrap, "--topic", topic]);
        args.extend(opts.args());
        let (described, values) = self.run(&args, None)?;
        records_from_json(&described, &values)
    }

    /// Tails every partition of `topic` from its beginning for `follow`, then reads up to the end
    /// offsets seen at that moment (`opts.timeout_ms` bounds the whole), as a client of the cluster
    /// would during an incident: records in the order they arrived (not sorted, duplicates kept),
    /// and what the consumer lived through.
    ///
    /// # Errors
    /// If the consumer fails or does not reach the end offsets in time (the error has its stderr).
    pub fn follow(&self, bootstrap: &str, topic: &str, opts: &ConsumeOptions, follow: Duration) -> Result<Followed> {
        let mut args = strings(&["consume", "--bootstrap", bootstrap, "--topic", topic, "--follow-ms", &follow.as_millis().to_string()]);
        args.extend(opts.args());
        let (described, values) = self.run_within(&args, None, Duration::from_millis(opts.timeout_ms) + Duration::from_secs(30))?;
        let mut followed = Followed::default();
        for v in values {
            if let Some(summary) = v.get("summary") {
                let count = |name: &str| summary.get(name).and_then(Value::as_u64).unwrap_or(0);
                followed.polls = count("polls");
                followed.poll_errors = count("pollErrors");
                followed.longest_gap = Duration::from_millis(count("longestGapMs"));
                followed.connections_created = count("connection-creation-total");
                followed.connections_closed = count("connection-close-total");
                followed.requests = count("request-total");
            } else if let Some(error) = v.get("error").and_then(Value::as_str) {
                followed.errors.push(error.to_owned());
            } else {
                followed.records.push(ConsumedRecord::from_json(&v).map_err(|reason| HarnessError::BadOutput {
                    command: described.clone(),
                    reason: format!("{reason} in {v}"),
                    output_head: String::new(),
                })?);
            }
        }
        Ok(followed)
    }

    /// A share consumer (Kafka 4.1+) in share group `group` receives `count` records of `topic`,
    /// accepts them (releasing any others delivered with them), commits and leaves. With
    /// `offset_reset`, the group's `share.auto.offset.reset` is set first. Sorted by (partition,
    /// offset).
    ///
    /// # Errors
    /// If the consumer fails or `count` records do not arrive within 30 s (the error has its stderr).
    pub fn share_consume(&self, bootstrap: &str, topic: &str, group: &str, count: usize, offset_reset: Option<&str>) -> Result<Vec<ConsumedRecord>> {
        let count = count.to_string();
        let mut args = strings(&["share-consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group, "--count", &count]);
        if let Some(reset) = offset_reset {
            args.extend(strings(&["--offset-reset", reset]));
        }
        let (described, values) = self.run(&args, None)?;
        records_from_json(&described, &values)
    }

    /// A share consumer that joins share group `group` on `topic` and stays a member (accepting
    /// whatever it receives) until the returned handle is dropped. Returns once the process runs;
    /// whether it has joined is for the caller to check (ShareGroupDescribe).
    ///
    /// # Errors
    /// If the JVM cannot be started.
    pub fn share_member(&self, bootstrap: &str, topic: &str, group: &str) -> Result<ShareMember> {
        let mut cmd = self.command();
        cmd.args(["share-consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group, "--count", "0", "--hold"]);
        cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::null());
        let described = util::describe_command(&cmd);
        let child = cmd.spawn().map_err(|e| HarnessError::io(format!("starting {described}"), e))?;
        Ok(ShareMember { child })
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

    fn admin_typed<T>(&self, bootstrap: &str, subcommand: &str, args: &[&str], parse: impl Fn(&Value) -> Option<T>) -> Result<Vec<T>> {
        let mut all = strings(&["admin", subcommand, "--bootstrap", bootstrap]);
        all.extend(strings(args));
        let (described, values) = self.run(&all, None)?;
        values
            .iter()
            .map(|v| {
                parse(v).ok_or_else(|| HarnessError::BadOutput { command: described.clone(), reason: format!("cannot parse {v}"), output_head: String::new() })
            })
            .collect()
    }

    /// Creates a topic, then waits until every live broker knows a leader for each partition. A
    /// `replication_factor` of -1 means the broker default (1, or 3 on 3-broker clusters).
    ///
    /// # Errors
    /// If creation fails (e.g. it exists) or the topic does not become ready within 30 s.
    pub fn create_topic(&self, bootstrap: &str, topic: &str, partitions: i32, replication_factor: i16, configs: &[(&str, &str)]) -> Result<()> {
        let mut args = strings(&["--topic", topic, "--partitions", &partitions.to_string()]);
        if replication_factor > 0 {
            args.extend(strings(&["--replication-factor", &replication_factor.to_string()]));
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
        self.admin(bootstrap, "delete-topic", &["--topic", topic]).map(drop)
    }

    /// Deletes records of one partition before `before_offset`; returns the new low watermark.
    ///
    /// # Errors
    /// If the admin call fails.
    pub fn delete_records(&self, bootstrap: &str, topic: &str, partition: i32, before_offset: i64) -> Result<i64> {
        let (p, o) = (partition.to_string(), before_offset.to_string());
        let lows = self.admin_typed(bootstrap, "delete-records", &["--topic", topic, "--partition", &p, "--offset", &o], |v| {
            v.get("lowWatermark").and_then(Value::as_i64)
        })?;
        Ok(lows.first().copied().unwrap_or(-1))
    }

    /// Moves `topic`-`partition` to the brokers `replicas` (the first leads once it is moved: the
    /// preferred leader is elected), waiting until the move is done. Returns the new leader.
    ///
    /// # Errors
    /// If the admin calls fail or the move does not finish within the client's timeout.
    pub fn reassign(&self, bootstrap: &str, topic: &str, partition: i32, replicas: &[i32]) -> Result<i32> {
        let p = partition.to_string();
        let r = replicas.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
        let leaders = self.admin_typed(bootstrap, "reassign", &["--topic", topic, "--partition", &p, "--replicas", &r], |v| {
            v.get("leader").and_then(Value::as_i64).map(|l| l as i32)
        })?;
        Ok(leaders.first().copied().unwrap_or(-1))
    }

    /// Describes a topic: partitions, leaders, replicas, ISR and non-default configs.
    ///
    /// # Errors
    /// If the admin call fails (e.g. unknown topic).
    pub fn describe_topic(&self, bootstrap: &str, topic: &str) -> Result<TopicDescription> {
        let parsed = self.admin_typed(bootstrap, "describe-topic", &["--topic", topic], |v| {
            let ints = |v: &Value| -> Option<Vec<i32>> { v.as_array()?.iter().map(|x| x.as_i64().map(|x| x as i32)).collect() };
            let mut partitions = Vec::new();
            for p in v.get("partitions")?.as_array()? {
                partitions.push(PartitionState {
                    partition: p.get("partition")?.as_i64()? as i32,
                    leader: p.get("leader")?.as_i64()? as i32,
                    replicas: ints(p.get("replicas")?)?,
                    isr: ints(p.get("isr")?)?,
                });
            }
            let configs = v.get("configs")?.as_object()?.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect();
            Some(TopicDescription {
                topic: v.get("topic")?.as_str()?.to_string(),
                topic_id: v.get("topicId")?.as_str()?.to_string(),
                internal: v.get("internal")?.as_bool()?,
                partitions,
                configs,
            })
        })?;
        parsed.into_iter().next().ok_or_else(|| HarnessError::BadOutput {
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
    pub fn describe_producers(&self, bootstrap: &str, topic: &str) -> Result<Vec<PartitionProducers>> {
        self.admin_typed(bootstrap, "describe-producers", &["--topic", topic], |v| {
            let mut producers = Vec::new();
            for s in v.get("producers")?.as_array()? {
                producers.push(ProducerState {
                    producer_id: s.get("producerId")?.as_i64()?,
                    producer_epoch: s.get("producerEpoch")?.as_i64()? as i32,
                    last_sequence: s.get("lastSequence")?.as_i64()? as i32,
                    last_timestamp: s.get("lastTimestamp")?.as_i64()?,
                    coordinator_epoch: s.get("coordinatorEpoch")?.as_i64().map(|x| x as i32),
                    current_transaction_start_offset: s.get("currentTransactionStartOffset")?.as_i64(),
                });
            }
            Some(PartitionProducers { partition: v.get("partition")?.as_i64()? as i32, producers })
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
    pub fn commit_offset(&self, bootstrap: &str, group: &str, topic: &str, partition: i32, offset: i64) -> Result<()> {
        let (p, o) = (partition.to_string(), offset.to_string());
        let args = ["--group", group, "--topic", topic, "--partition", &p, "--offset", &o];
        self.admin(bootstrap, "commit-offsets", &args).map(drop)
    }
}

/// A share group member started by [`JavaClient::share_member`]. Dropping it ends the member's
/// stdin: it commits, leaves the group and exits (killed if it has not within 30 s).
#[derive(Debug)]
pub struct ShareMember {
    child: std::process::Child,
}

impl Drop for ShareMember {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

/// Waits until every live broker of the cluster behind `bootstrap` reports `topic` with `partitions`
/// partitions, each with a leader. Producing right after topic creation is then safe for clients that
/// do not retry on UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER.
///
/// # Errors
/// [`HarnessError::Timeout`] or a connection error.
pub fn wait_topic_ready(bootstrap: &str, topic: &str, partitions: i32, timeout: Duration) -> Result<()> {
    let first = bootstrap.split(',').map(str::trim).find(|a| !a.is_empty()).unwrap_or_default();
    let interval = Duration::from_millis(50);
    let probe = Duration::from_secs(5);
    let brokers = util::poll(&format!("metadata from {bootstrap}"), timeout, interval, |last| match wire::metadata(first, Some(&[]), probe) {
        Ok(md) => Ok(Some(md.brokers)),
        Err(e) => {
            *last = e.to_string();
            Ok(None)
        }
    })?;
    for broker in brokers {
        let addr = format!("{}:{}", broker.host, broker.port);
        util::poll(&format!("topic {topic} on broker {} ({addr})", broker.node_id), timeout, interval, |last| {
            match wire::metadata(&addr, Some(&[topic]), probe) {
                Ok(md) => {
                    let ready = md.topics.iter().any(|t| {
                        t.name == topic
                            && t.error_code == 0
                            && t.partitions.len() == partitions as usize
                            && t.partitions.iter().all(|p| p.leader_id >= 0 && p.error_code == 0)
                    });
                    *last = format!("{:?}", md.topics);
                    Ok(ready.then_some(()))
                }
                Err(e) => {
                    *last = e.to_string();
                    Ok(None)
                }
            }
        })?;
    }
    Ok(())
}
