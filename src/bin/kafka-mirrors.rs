//! `kafka-mirrors`: the operator's command line for mirrors (spec §8), with the options and output
//! of the proposal's `kafka-mirrors.sh`. It talks the mirror APIs to a kafka-mirror-proxy (or any
//! server of them) at `--bootstrap-server`; `--dump-state` decodes `__mirror_state` log segments
//! offline.
//!
//! Output goes to stdout; on any error one line `Error: …` goes to stderr and the exit status is 1.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use kafka_mirror_proxy::admin::{AdminClientError, MirrorAdminClient};
use kafka_mirror_proxy::client::{Client, ClientConfig, SecurityConfig};
use kafka_mirror_proxy::mirror::MirrorSettings;
use kafka_mirror_proxy::mirror::records::StateRecord;
use kafka_mirror_proxy::mirror::settings::parse_properties;
use kafka_mirror_proxy::mirror::store::decode_segment;
use kafka_mirror_proxy::mirror::verify::{Outcome, PartitionReport, VerifyOptions, verify_partitions};
use kafka_mirror_proxy::protocol::mirror::{
    ALTER_OP_DELETE, ALTER_OP_SET, AddTopicsToMirrorRequest, AlterMirrorConfigsRequest, AlterableConfig, CreateMirrorRequest, DeleteMirrorRequest,
    DescribeMirrorConfigsRequest, DescribeMirrorsRequest, ListMirrorsRequest, MirrorConfig, MirrorErrorCode, PauseMirrorTopicsRequest,
    RemoveTopicsFromMirrorRequest, ResumeMirrorTopicsRequest, TopicsResponse,
};
use kafka_mirror_proxy::report::error_chain;

/// This tool helps to create cluster mirrors and add topics to them.
#[derive(Debug, Parser)]
#[command(name = "kafka-mirrors", version, about = "This tool helps to create cluster mirrors and add topics to them.")]
#[command(group(ArgGroup::new("action").required(true).args([
    "create", "delete", "add", "remove", "pause", "resume", "list", "describe", "alter", "describe_config", "dump_state", "verify",
])))]
struct Args {
    /// REQUIRED (except with --dump-state): the kafka-mirror-proxy to connect to (host:port[,host:port…]).
    #[arg(long, value_name = "String: server to connect to")]
    bootstrap_server: Option<String>,
    /// Property file containing configs for the connection to the proxy: security.protocol (PLAINTEXT,
    /// SSL, SASL_PLAINTEXT, SASL_SSL), ssl.truststore.location (PEM), ssl.keystore.location (PEM),
    /// ssl.endpoint.identification.algorithm, sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512),
    /// sasl.jaas.config.
    #[arg(long, value_name = "String: command config property file")]
    command_config: Option<String>,
    /// Create a new cluster mirror from a source cluster.
    #[arg(long)]
    create: bool,
    /// Delete a cluster mirror (all its topics must be removed first).
    #[arg(long)]
    delete: bool,
    /// Add topic(s) to an existing cluster mirror (supports regex).
    #[arg(long)]
    add: bool,
    /// Remove topic(s) from an existing cluster mirror (supports regex): failover, the topics become writable.
    #[arg(long)]
    remove: bool,
    /// Pause mirroring for topic(s) matching the pattern (supports regex).
    #[arg(long)]
    pause: bool,
    /// Resume mirroring for previously paused topic(s) matching the pattern (supports regex).
    #[arg(long)]
    resume: bool,
    /// List all cluster mirrors.
    #[arg(long)]
    list: bool,
    /// Describe cluster mirrors including partition lag and state (all, or --mirror).
    #[arg(long)]
    describe: bool,
    /// Alter the configuration of an existing cluster mirror (--mirror-config sets, --delete-config removes).
    #[arg(long)]
    alter: bool,
    /// Show the configuration of a cluster mirror (secrets hidden).
    #[arg(long)]
    describe_config: bool,
    /// Decode __mirror_state log segment files (with --files).
    #[arg(long)]
    dump_state: bool,
    /// Read the mirror's partitions (or those of the --topic patterns) on both clusters up to the
    /// mirrored point and compare them record by record: offsets, keys, values, headers,
    /// timestamps, transaction outcomes, batch boundaries. Exit status 2 if any partition differs
    /// or cannot be read. The source is reached with --mirror-config if given (the file given to
    /// --create), else with the mirror's bootstrap.servers.
    #[arg(long)]
    verify: bool,
    /// With --verify: at most this many bytes per second read from both clusters together.
    #[arg(long, value_name = "Long: bytes per second")]
    throttle: Option<String>,
    /// The name of the cluster mirror.
    #[arg(long, value_name = "String: mirror")]
    mirror: Option<String>,
    /// Property file containing source cluster configs for mirroring (with --verify: how to reach
    /// the source, when the mirror's connection needs secrets).
    #[arg(long, value_name = "String: mirror config property file")]
    mirror_config: Option<String>,
    /// Setting to remove with --alter (repeatable).
    #[arg(long, value_name = "String: config name")]
    delete_config: Vec<String>,
    /// Topic name or regex pattern to match topics (e.g. 'my-topic' or 'test-.*'); repeatable, or comma-separated.
    #[arg(long, value_name = "String: topic")]
    topic: Vec<String>,
    /// Regex of topics to leave out (with --add; repeatable, or comma-separated).
    #[arg(long, value_name = "String: topic")]
    exclude: Vec<String>,
    /// With --add: the replication factor of the mirror topics created (also for topics the patterns
    /// add later). If not specified, uses the destination cluster's default.replication.factor,
    /// capped by its broker count.
    #[arg(long, value_name = "Short: replication-factor")]
    replication_factor: Option<String>,
    /// Print --list and --describe as JSON.
    #[arg(long)]
    json: bool,
    /// With --describe: only FAILED partitions, with their retry count and reason.
    #[arg(long)]
    failed: bool,
    /// With --dump-state: the segment files (…/__mirror_state-0/00000000000000000000.log).
    #[arg(long, value_name = "String: file", num_args = 1..)]
    files: Vec<String>,
    /// Time to wait for the proxy, per request (ms). Removing waits for STOPPED up to the proxy's limit.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
}

/// What went wrong, as one line.
#[derive(Debug)]
struct CliError(String);

impl From<AdminClientError> for CliError {
    fn from(e: AdminClientError) -> Self {
        Self(kafka_mirror_proxy::report::error_chain(&e))
    }
}

fn fail<T>(message: impl Into<String>) -> Result<T, CliError> {
    Err(CliError(message.into()))
}

fn check(code: i16, message: Option<String>) -> Result<(), CliError> {
    if code == 0 {
        return Ok(());
    }
    let name = MirrorErrorCode::from_code(code);
    fail(format!("{} ({name})", message.unwrap_or_else(|| name.to_string())))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return report(&CliError(format!("cannot start: {e}"))),
    };
    let outcome = if args.verify { runtime.block_on(verify(&args)) } else { runtime.block_on(run(&args)).map(|lines| (lines, ExitCode::SUCCESS)) };
    match outcome {
        Ok((lines, code)) => {
            let mut out = std::io::stdout().lock();
            for line in lines {
                let _ = writeln!(out, "{line}");
            }
            code
        }
        Err(e) => report(&e),
    }
}

fn report(e: &CliError) -> ExitCode {
    let _ = writeln!(std::io::stderr().lock(), "Error: {}", e.0);
    ExitCode::FAILURE
}

fn require<'a>(value: &'a Option<String>, option: &str, action: &str) -> Result<&'a str, CliError> {
    value.as_deref().ok_or_else(|| CliError(format!("{action} needs {option}")))
}

fn read_properties(path: &str) -> Result<BTreeMap<String, String>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| CliError(format!("cannot read {path}: {e}")))?;
    parse_properties(&text).map_err(|e| CliError(format!("{path}: {e}")))
}

/// `--replication-factor`: a short of at least 1 (the proxy checks it against the destination's
/// brokers).
fn parse_replication_factor(text: &str) -> Result<i16, CliError> {
    match text.trim().parse::<i16>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => fail(format!("--replication-factor must be a number from 1 to {}, not `{text}`", i16::MAX)),
    }
}

fn split_patterns(values: &[String]) -> Vec<String> {
    values.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

async fn run(args: &Args) -> Result<Vec<String>, CliError> {
    if args.dump_state {
        if args.files.is_empty() {
            return fail("--dump-state needs --files");
        }
        return dump_state(&args.files);
    }
    if args.replication_factor.is_some() && !args.add {
        return fail("--replication-factor is only used with --add");
    }
    if args.throttle.is_some() {
        return fail("--throttle is only used with --verify");
    }
    let (bootstrap, security) = proxy_connection(args)?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut client = MirrorAdminClient::connect_with(bootstrap, timeout, security).await?;
    let topics = split_patterns(&args.topic);
    let action = |name: &str| format!("--{name}");
    if args.create {
        let mirror = require(&args.mirror, "--mirror", &action("create"))?;
        let path = require(&args.mirror_config, "--mirror-config", &action("create"))?;
        let configs = read_properties(path)?.into_iter().map(|(name, value)| MirrorConfig { name, value: Some(value) }).collect();
        let r = client.send(&CreateMirrorRequest { mirror_name: mirror.to_owned(), configs, validate_only: false }).await?;
        check(r.error_code, r.error_message)?;
        return Ok(vec![format!("Created mirror {mirror}")]);
    }
    if args.delete {
        let mirror = require(&args.mirror, "--mirror", &action("delete"))?;
        let r = client.send(&DeleteMirrorRequest { mirror_name: mirror.to_owned() }).await?;
        check(r.error_code, r.error_message)?;
        return Ok(vec![format!("Deleted mirror {mirror}")]);
    }
    if args.alter {
        let mirror = require(&args.mirror, "--mirror", &action("alter"))?;
        let mut configs: Vec<AlterableConfig> = match &args.mirror_config {
            Some(path) => read_properties(path)?.into_iter().map(|(name, value)| AlterableConfig { name, op: ALTER_OP_SET, value: Some(value) }).collect(),
            None => Vec::new(),
        };
        configs.extend(args.delete_config.iter().map(|name| AlterableConfig { name: name.clone(), op: ALTER_OP_DELETE, value: None }));
        if configs.is_empty() {
            return fail("--alter needs --mirror-config or --delete-config");
        }
        let r = client.send(&AlterMirrorConfigsRequest { mirror_name: mirror.to_owned(), configs, validate_only: false }).await?;
        check(r.error_code, r.error_message)?;
        return Ok(vec![format!("Completed updating config for mirror {mirror}.")]);
    }
    if args.describe_config {
        let mirror = require(&args.mirror, "--mirror", &action("describe-config"))?;
        let r = client.send(&DescribeMirrorConfigsRequest { mirror_name: mirror.to_owned() }).await?;
        check(r.error_code, r.error_message)?;
        return Ok(r
            .configs
            .into_iter()
            .map(|c| format!("{}={}", c.name, if c.is_sensitive { "[hidden]".to_owned() } else { c.value.unwrap_or_default() }))
            .collect());
    }
    if args.add || args.remove || args.pause || args.resume {
        let verb = if args.add {
            "add"
        } else if args.remove {
            "remove"
        } else if args.pause {
            "pause"
        } else {
            "resume"
        };
        let mirror = require(&args.mirror, "--mirror", &action(verb))?.to_owned();
        if topics.is_empty() {
            return fail(format!("--{verb} needs --topic"));
        }
        let response = if args.add {
            let replication_factor = args.replication_factor.as_deref().map_or(Ok(-1), parse_replication_factor)?;
            client.send(&AddTopicsToMirrorRequest { mirror_name: mirror.clone(), topics, exclude: split_patterns(&args.exclude), replication_factor }).await?
        } else if args.remove {
            client.send(&RemoveTopicsFromMirrorRequest { mirror_name: mirror.clone(), topics }).await?
        } else if args.pause {
            client.send(&PauseMirrorTopicsRequest { mirror_name: mirror.clone(), topics }).await?
        } else {
            client.send(&ResumeMirrorTopicsRequest { mirror_name: mirror.clone(), topics }).await?
        };
        return topics_outcome(verb, &mirror, response);
    }
    if args.list {
        let r = client.send(&ListMirrorsRequest { include_topic_names: args.json }).await?;
        check(r.error_code, r.error_message)?;
        if args.json {
            let items: Vec<String> = r
                .mirrors
                .iter()
                .map(|m| {
                    let topics: Vec<String> = m.topic_names.iter().flatten().map(|t| json_str(t)).collect();
                    format!(
                        "{{\"mirror\":{},\"topics\":{},\"topicNames\":[{}],\"clusterId\":{},\"bootstrapServer\":{}}}",
                        json_str(&m.mirror_name),
                        m.topic_count,
                        topics.join(","),
                        json_str(&m.source_cluster_id),
                        json_str(&m.source_bootstrap)
                    )
                })
                .collect();
            return Ok(vec![format!("[{}]", items.join(","))]);
        }
        let rows =
            r.mirrors.iter().map(|m| vec![m.mirror_name.clone(), m.topic_count.to_string(), m.source_cluster_id.clone(), m.source_bootstrap.clone()]).collect();
        return Ok(table(&["MIRROR", "TOPICS", "CLUSTER-ID", "BOOTSTRAP-SERVER"], rows));
    }
    // --describe
    let r = client.send(&DescribeMirrorsRequest { mirror_names: args.mirror.clone().map(|m| vec![m]) }).await?;
    check(r.error_code, r.error_message)?;
    for m in &r.mirrors {
        check(m.error_code, m.error_message.clone())?;
    }
    let mut rows = Vec::new();
    let mut json = Vec::new();
    for m in &r.mirrors {
        for t in &m.topics {
            for p in &t.partitions {
                if args.failed && p.state != "FAILED" {
                    continue;
                }
                if args.json {
                    json.push(format!(
                        "{{\"mirror\":{},\"topic\":{},\"partition\":{},\"sourceOffset\":{},\"destinationOffset\":{},\"lag\":{},\"state\":{},\"retryAttempt\":{},\"errorMessage\":{}}}",
                        json_str(&m.mirror_name),
                        json_str(&t.topic_name),
                        p.partition_index,
                        p.source_offset,
                        p.destination_offset,
                        p.lag,
                        json_str(&p.state),
                        p.retry_attempt,
                        p.error_message.as_deref().map_or_else(|| "null".to_owned(), json_str)
                    ));
                } else if args.failed {
                    let retry = if p.retry_attempt < 0 { "NonRetryable".to_owned() } else { p.retry_attempt.to_string() };
                    rows.push(vec![
                        m.mirror_name.clone(),
                        t.topic_name.clone(),
                        p.partition_index.to_string(),
                        retry,
                        p.error_message.clone().unwrap_or_default(),
                    ]);
                } else {
                    let dash = |v: i64| if v < 0 { "-".to_owned() } else { v.to_string() };
                    rows.push(vec![
                        m.mirror_name.clone(),
                        t.topic_name.clone(),
                        p.partition_index.to_string(),
                        dash(p.source_offset),
                        dash(p.destination_offset),
                        dash(p.lag),
                        p.state.clone(),
                    ]);
                }
            }
        }
    }
    if args.json {
        return Ok(vec![format!("[{}]", json.join(","))]);
    }
    if args.failed {
        return Ok(table(&["MIRROR", "TOPIC", "PARTITION", "RETRY", "ERROR"], rows));
    }
    Ok(table(&["MIRROR", "TOPIC", "PARTITION", "SOURCE-OFFSET", "DESTINATION-OFFSET", "LAG", "STATE"], rows))
}

/// `--bootstrap-server` and the security of connections to it: TLS and SASL with the Java client's
/// property names (security.protocol, ssl.*, sasl.mechanism, sasl.jaas.config) from
/// `--command-config`; other keys of the file are ignored, as Kafka's tools do.
fn proxy_connection(args: &Args) -> Result<(&str, SecurityConfig), CliError> {
    let bootstrap = require(&args.bootstrap_server, "--bootstrap-server", "this command")?;
    let security = match &args.command_config {
        None => SecurityConfig::default(),
        Some(path) => {
            let props = read_properties(path)?;
            SecurityConfig::from_properties(&props).map_err(|e| CliError(format!("{path}: {e}")))?
        }
    };
    Ok((bootstrap, security))
}

/// `--throttle`: a positive number of bytes per second.
fn parse_throttle(text: &str) -> Result<u64, CliError> {
    match text.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => fail(format!("--throttle must be a positive number of bytes per second, not `{text}`")),
    }
}

/// Topic patterns as full-match regexes (like the Java tools' `Pattern.matches`).
fn topic_patterns(patterns: &[String]) -> Result<Vec<regex::Regex>, CliError> {
    patterns
        .iter()
        .map(|p| {
            regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| {
                // The parser's message draws the pattern over several lines; its last says what is wrong.
                let text = e.to_string();
                let reason = text.lines().last().unwrap_or_default().trim().trim_start_matches("error: ").to_owned();
                CliError(format!("--topic `{p}` is not a valid regular expression: {reason}"))
            })
        })
        .collect()
}

/// `--verify`: the mirror's partitions read on both sides and compared (`mirror::verify`). The
/// table (or `--json`) goes to stdout as partitions finish; the exit status is 2 if any partition
/// differs or could not be read.
async fn verify(args: &Args) -> Result<(Vec<String>, ExitCode), CliError> {
    if args.replication_factor.is_some() {
        return fail("--replication-factor is only used with --add");
    }
    let mirror = require(&args.mirror, "--mirror", "--verify")?;
    let throttle = args.throttle.as_deref().map(parse_throttle).transpose()?;
    let patterns = topic_patterns(&split_patterns(&args.topic))?;
    let (bootstrap, security) = proxy_connection(args)?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut admin = MirrorAdminClient::connect_with(bootstrap, timeout, security.clone()).await?;
    let r = admin.send(&DescribeMirrorsRequest { mirror_names: Some(vec![mirror.to_owned()]) }).await?;
    check(r.error_code, r.error_message)?;
    let described = r.mirrors.into_iter().find(|m| m.mirror_name == mirror).ok_or_else(|| CliError(format!("the proxy did not describe mirror {mirror}")))?;
    check(described.error_code, described.error_message.clone())?;
    let mut partitions: Vec<(String, i32)> = described
        .topics
        .iter()
        .filter(|t| patterns.is_empty() || patterns.iter().any(|p| p.is_match(&t.topic_name)))
        .flat_map(|t| t.partitions.iter().map(|p| (t.topic_name.clone(), p.partition_index)))
        .collect();
    partitions.sort();
    if partitions.is_empty() {
        return fail(if patterns.is_empty() { format!("mirror {mirror} has no topics") } else { format!("no topic of mirror {mirror} matches --topic") });
    }

    // The source: the operator's file, or what the proxy shows of the mirror's connection.
    let source_props = match &args.mirror_config {
        Some(path) => read_properties(path)?,
        None => {
            let r = admin.send(&DescribeMirrorConfigsRequest { mirror_name: mirror.to_owned() }).await?;
            check(r.error_code, r.error_message)?;
            let hidden: Vec<String> = r.configs.iter().filter(|c| c.is_sensitive).map(|c| c.name.clone()).collect();
            if !hidden.is_empty() {
                return fail(format!(
                    "the source connection of mirror {mirror} uses secrets the proxy does not show ({}): pass --mirror-config with the file given to --create",
                    hidden.join(", ")
                ));
            }
            r.configs.into_iter().filter_map(|c| c.value.map(|v| (c.name, v))).collect()
        }
    };
    let settings =
        MirrorSettings::from_properties(source_props).map_err(|errors| CliError(errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))?;
    let mut source_config = settings.client_config(mirror);
    source_config.connection.client_id = format!("kafka-mirrors-verify-{mirror}");
    let source = Client::connect(source_config).await.map_err(|e| CliError(format!("the source cluster of mirror {mirror}: {}", error_chain(&e))))?;
    let mut destination_config = ClientConfig::new(bootstrap);
    destination_config.connection.security = security;
    destination_config.connection.client_id = format!("kafka-mirrors-verify-{mirror}");
    let destination = Client::connect(destination_config).await.map_err(|e| CliError(format!("the destination through {bootstrap}: {}", error_chain(&e))))?;

    // Compacted on either side: offsets on one side only are allowed.
    let mut topics: Vec<String> = partitions.iter().map(|(t, _)| t.clone()).collect();
    topics.dedup();
    let mut compacted = HashSet::new();
    for client in [&source, &destination] {
        for (topic, configs) in client.describe_topic_configs_bulk(&topics).await {
            let configs = configs.map_err(|e| CliError(format!("describing the configs of {topic}: {}", error_chain(&e))))?;
            if configs.get("cleanup.policy").and_then(|c| c.value.as_deref()).is_some_and(|p| p.contains("compact")) {
                compacted.insert(topic);
            }
        }
    }

    let options = VerifyOptions { throttle, ..VerifyOptions::default() };
    let headers = ["TOPIC", "PARTITION", "CHECKED", "RECORDS", "LAG", "RESULT", "FIRST-DIFFERENCE", "DETAIL"];
    let reports = verify_partitions(&source, &destination, &partitions, &compacted, options, |_| {}).await;
    let identical = reports.iter().filter(|r| r.outcome == Outcome::Identical).count();
    let different = reports.iter().filter(|r| matches!(r.outcome, Outcome::Different { .. })).count();
    let errors = reports.len() - identical - different;
    let code = if identical == reports.len() { ExitCode::SUCCESS } else { ExitCode::from(2) };
    if args.json {
        return Ok((vec![format!("[{}]", reports.iter().map(|r| verify_json(mirror, r)).collect::<Vec<_>>().join(","))], code));
    }
    let rows = reports
        .iter()
        .map(|r| {
            let (first, detail) = match &r.outcome {
                Outcome::Identical => ("-".to_owned(), verify_note(r)),
                Outcome::Different { offset, detail } => (offset.to_string(), detail.clone()),
                Outcome::Error(e) => ("-".to_owned(), e.clone()),
            };
            let checked = if r.start < 0 {
                "-".to_owned()
            } else if r.end <= r.start {
                format!("{}..{} (empty)", r.start, r.start)
            } else {
                format!("{}..{}", r.start, r.end)
            };
            let lag = if r.source_end < 0 { "-".to_owned() } else { (r.source_end - r.destination_end).max(0).to_string() };
            vec![r.topic.clone(), r.partition.to_string(), checked, r.counts.records.to_string(), lag, r.outcome.name().to_owned(), first, detail]
        })
        .collect();
    let mut lines = table(&headers, rows);
    lines.push(format!("Verified {} partition(s) of mirror {mirror}: {identical} identical, {different} different, {errors} not readable.", reports.len()));
    Ok((lines, code))
}

/// The detail of an identical partition: what was allowed rather than matched, if anything.
fn verify_note(r: &PartitionReport) -> String {
    let c = &r.counts;
    let mut parts = Vec::new();
    if c.markers > 0 {
        parts.push(format!("{} marker(s)", c.markers));
    }
    if c.fillers > 0 {
        parts.push(format!("{} filler(s) over source gaps", c.fillers));
    }
    if c.only_source + c.only_destination > 0 {
        parts.push(format!("compacted: {} offset(s) only on the source, {} only on the destination", c.only_source, c.only_destination));
    }
    parts.join("; ")
}

fn verify_json(mirror: &str, r: &PartitionReport) -> String {
    let (first, detail) = match &r.outcome {
        Outcome::Identical => ("null".to_owned(), "null".to_owned()),
        Outcome::Different { offset, detail } => (offset.to_string(), json_str(detail)),
        Outcome::Error(e) => ("null".to_owned(), json_str(e)),
    };
    let c = &r.counts;
    format!(
        "{{\"mirror\":{},\"topic\":{},\"partition\":{},\"startOffset\":{},\"endOffset\":{},\"sourceEndOffset\":{},\"destinationEndOffset\":{},\"result\":{},\"firstDifferingOffset\":{first},\"detail\":{detail},\"records\":{},\"markers\":{},\"fillers\":{},\"onlySource\":{},\"onlyDestination\":{},\"compacted\":{},\"bytesRead\":{},\"digest\":{}}}",
        json_str(mirror),
        json_str(&r.topic),
        r.partition,
        r.start,
        r.end,
        r.source_end,
        r.destination_end,
        json_str(r.outcome.name()),
        c.records,
        c.markers,
        c.fillers,
        c.only_source,
        c.only_destination,
        r.compacted,
        c.bytes_read,
        json_str(&r.digest)
    )
}

/// The summary line of add/remove/pause/resume, or the first per-topic error.
fn topics_outcome(verb: &str, mirror: &str, r: TopicsResponse) -> Result<Vec<String>, CliError> {
    check(r.error_code, r.error_message)?;
    let done: Vec<&str> = r.topics.iter().filter(|t| t.error_code == 0).map(|t| t.topic_name.as_str()).collect();
    let n = done.len();
    let list = done.join(", ");
    let mut lines = Vec::new();
    if n > 0 || r.topics.is_empty() {
        lines.push(match verb {
            "add" => format!("Added {n} topic(s) to mirror {mirror}: [{list}]"),
            "remove" => format!("Removed {n} topic(s) from mirror {mirror}: [{list}]"),
            "pause" => format!("Paused mirroring for {n} topic(s) in mirror {mirror}: [{list}]"),
            _ => format!("Resumed mirroring for {n} topic(s) in mirror {mirror}: [{list}]"),
        });
    }
    if let Some(bad) = r.topics.iter().find(|t| t.error_code != 0) {
        // The successes are printed before the error line.
        let mut out = std::io::stdout().lock();
        for line in &lines {
            let _ = writeln!(out, "{line}");
        }
        let others = r.topics.iter().filter(|t| t.error_code != 0).count() - 1;
        let more = if others > 0 { format!(" (and {others} more topic error(s))") } else { String::new() };
        check(bad.error_code, bad.error_message.clone().map(|m| format!("{m}{more}")))?;
    }
    Ok(lines)
}

/// Left-aligned columns, each as wide as its widest cell, separated by spaces.
fn table(headers: &[&str], rows: Vec<Vec<String>>) -> Vec<String> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = *w));
            }
        }
        s
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(rows.iter().map(|r| line(r.iter().map(String::as_str).collect())));
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `--dump-state`: every record of each segment, key and payload as JSON (secrets as their size).
fn dump_state(files: &[String]) -> Result<Vec<String>, CliError> {
    let mut lines = Vec::new();
    for path in files {
        let bytes = std::fs::read(path).map_err(|e| CliError(format!("cannot read {path}: {e}")))?;
        lines.push(format!("Dumping {path}"));
        for (offset, record) in decode_segment(bytes.into()) {
            match record {
                Ok(r) => lines.push(format!("| offset: {offset} key: {} payload: {}", key_json(&r), payload_json(&r))),
                Err(e) => lines.push(format!("| offset: {offset} undecodable: {e}")),
            }
        }
    }
    Ok(lines)
}

fn key_json(r: &StateRecord) -> String {
    match r {
        StateRecord::Mirror { name, .. } => format!("{{\"type\":\"mirror\",\"mirror\":{}}}", json_str(name)),
        StateRecord::Topic { topic, .. } => format!("{{\"type\":\"topic\",\"topic\":{}}}", json_str(topic)),
        StateRecord::Partition { topic, partition, .. } => {
            format!("{{\"type\":\"partition\",\"topic\":{},\"partition\":{partition}}}", json_str(topic))
        }
        StateRecord::Acl { mirror, binding: b, .. } => format!(
            "{{\"type\":\"acl\",\"mirror\":{},\"resourceType\":{},\"patternType\":{},\"resourceName\":{},\"principal\":{},\"host\":{},\"operation\":{},\"permissionType\":{}}}",
            json_str(mirror),
            code_name(b.resource_type, RESOURCE_TYPES),
            code_name(b.pattern_type, PATTERN_TYPES),
            json_str(&b.resource_name),
            json_str(&b.principal),
            json_str(&b.host),
            code_name(b.operation, OPERATIONS),
            code_name(b.permission_type, PERMISSIONS),
        ),
        StateRecord::Filter { mirror, .. } => format!("{{\"type\":\"filter\",\"mirror\":{}}}", json_str(mirror)),
    }
}

/// Kafka's names of the ACL codes (`ResourceType`, `PatternType`, `AclOperation`,
/// `AclPermissionType` in kafka-clients), for dumps.
const RESOURCE_TYPES: &[(i8, &str)] =
    &[(0, "UNKNOWN"), (1, "ANY"), (2, "TOPIC"), (3, "GROUP"), (4, "CLUSTER"), (5, "TRANSACTIONAL_ID"), (6, "DELEGATION_TOKEN"), (7, "USER")];
const PATTERN_TYPES: &[(i8, &str)] = &[(0, "UNKNOWN"), (1, "ANY"), (2, "MATCH"), (3, "LITERAL"), (4, "PREFIXED")];
const OPERATIONS: &[(i8, &str)] = &[
    (0, "UNKNOWN"),
    (1, "ANY"),
    (2, "ALL"),
    (3, "READ"),
    (4, "WRITE"),
    (5, "CREATE"),
    (6, "DELETE"),
    (7, "ALTER"),
    (8, "DESCRIBE"),
    (9, "CLUSTER_ACTION"),
    (10, "DESCRIBE_CONFIGS"),
    (11, "ALTER_CONFIGS"),
    (12, "IDEMPOTENT_WRITE"),
    (13, "CREATE_TOKENS"),
    (14, "DESCRIBE_TOKENS"),
    (15, "TWO_PHASE_COMMIT"),
];
const PERMISSIONS: &[(i8, &str)] = &[(0, "UNKNOWN"), (1, "ANY"), (2, "DENY"), (3, "ALLOW")];

/// `"NAME"` for a known code, else the number.
fn code_name(code: i8, names: &[(i8, &str)]) -> String {
    names.iter().find(|(c, _)| *c == code).map_or_else(|| code.to_string(), |(_, n)| format!("\"{n}\""))
}

fn payload_json(r: &StateRecord) -> String {
    match r {
        StateRecord::Mirror { value: Some(d), .. } => {
            let configs: Vec<String> = d
                .configs
                .iter()
                .map(|c| match (&c.value, &c.sealed) {
                    (Some(v), _) => format!("{}:{}", json_str(&c.name), json_str(v)),
                    (None, Some(s)) => format!("{}:{}", json_str(&c.name), json_str(&format!("[sealed, {} bytes]", s.len()))),
                    (None, None) => format!("{}:null", json_str(&c.name)),
                })
                .collect();
            format!(
                "{{\"version\":0,\"configs\":{{{}}},\"sourceClusterId\":{},\"createdMs\":{}}}",
                configs.join(","),
                json_str(&d.source_cluster_id),
                d.created_ms
            )
        }
        StateRecord::Topic { value: Some(t), .. } => format!(
            "{{\"version\":0,\"mirror\":{},\"sourceTopicId\":\"{}\",\"partitions\":{},\"goal\":\"{}\",\"updatedMs\":{},\"replicationFactor\":{}}}",
            json_str(&t.mirror),
            t.source_topic_id,
            t.partitions,
            t.goal.name(),
            t.updated_ms,
            t.replication_factor
        ),
        StateRecord::Partition { value: Some(p), .. } => {
            let reason = match &p.state {
                kafka_mirror_proxy::mirror::PartitionState::Failed { reason } => json_str(reason),
                _ => "null".to_owned(),
            };
            format!(
                "{{\"version\":0,\"mirror\":{},\"state\":\"{}\",\"reason\":{reason},\"retryAttempt\":{},\"updatedMs\":{}}}",
                json_str(&p.mirror),
                p.state.name(),
                p.retry_attempt,
                p.updated_ms
            )
        }
        StateRecord::Acl { value: Some(a), .. } => format!("{{\"version\":0,\"createdMs\":{}}}", a.created_ms),
        StateRecord::Filter { value: Some(f), .. } => {
            let list = |v: &[String]| v.iter().map(|p| json_str(p)).collect::<Vec<_>>().join(",");
            let factors = f.replication_factors.iter().map(|r| format!("{}:{}", json_str(&r.pattern), r.replication_factor)).collect::<Vec<_>>().join(",");
            format!("{{\"version\":0,\"include\":[{}],\"exclude\":[{}],\"replicationFactors\":{{{factors}}}}}", list(&f.include), list(&f.exclude))
        }
        _ => "null".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_aligned() {
        let lines = table(&["MIRROR", "TOPICS"], vec![vec!["a-long-mirror".to_owned(), "2".to_owned()], vec!["b".to_owned(), "10".to_owned()]]);
        assert_eq!(lines, ["MIRROR         TOPICS", "a-long-mirror  2", "b              10"]);
    }

    #[test]
    fn acl_records_dump_with_kafka_names() {
        use kafka_mirror_proxy::client::AclBinding;
        use kafka_mirror_proxy::mirror::records::AclRecord;
        let binding = AclBinding {
            resource_type: 2,
            resource_name: "orders".to_owned(),
            pattern_type: 4,
            principal: "User:alice".to_owned(),
            host: "*".to_owned(),
            operation: 3,
            permission_type: 3,
        };
        let record = StateRecord::Acl { mirror: "dr".to_owned(), binding: binding.clone(), value: Some(AclRecord { created_ms: 42 }) };
        assert_eq!(
            key_json(&record),
            r#"{"type":"acl","mirror":"dr","resourceType":"TOPIC","patternType":"PREFIXED","resourceName":"orders","principal":"User:alice","host":"*","operation":"READ","permissionType":"ALLOW"}"#
        );
        assert_eq!(payload_json(&record), r#"{"version":0,"createdMs":42}"#);
        let odd = StateRecord::Acl { mirror: "dr".to_owned(), binding: AclBinding { operation: 99, ..binding }, value: None };
        assert!(key_json(&odd).contains(r#""operation":99"#));
        assert_eq!(payload_json(&odd), "null");
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_str("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
    }

    #[test]
    fn options_parse() {
        let args = Args::try_parse_from(["kafka-mirrors", "--bootstrap-server", "h:1", "--add", "--mirror", "m", "--topic", "a,b", "--topic", "c"]).unwrap();
        assert_eq!(split_patterns(&args.topic), ["a", "b", "c"]);
        assert!(Args::try_parse_from(["kafka-mirrors", "--bootstrap-server", "h:1"]).is_err(), "an action is required");
        assert!(Args::try_parse_from(["kafka-mirrors", "--list", "--describe"]).is_err(), "one action only");
    }

    #[test]
    fn the_replication_factor_is_a_positive_short() {
        assert_eq!(parse_replication_factor("3").unwrap(), 3);
        for bad in ["0", "-1", "x", "40000", ""] {
            let e = parse_replication_factor(bad).unwrap_err();
            assert_eq!(e.0, format!("--replication-factor must be a number from 1 to 32767, not `{bad}`"));
        }
    }
}
