//! Records and client options shared by the Java client and the librdkafka reader: what is produced
//! ([`ProducerRecord`], [`ProduceLine`], [`ProduceOptions`]), what is read back ([`ConsumedRecord`],
//! [`ConsumeOptions`]), and the JSON line format both readers print (see `tests/java/TestClient.java`).

use serde_json::{Value, json};

use crate::error::{HarnessError, Result};
use crate::util;

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
        let int = |name: &str| v.get(name).and_then(Value::as_i64).ok_or_else(|| format!("missing integer {name:?}"));
        let mut headers = Vec::new();
        for h in v.get("headers").and_then(Value::as_array).ok_or("missing \"headers\" array")? {
            let key = h.get(0).and_then(Value::as_str).ok_or("header without a string key")?;
            headers.push((key.to_string(), opt_bytes(h.get(1))?));
        }
        Ok(ConsumedRecord {
            partition: int("partition")? as i32,
            offset: int("offset")?,
            key: opt_bytes(v.get("key"))?,
            value: opt_bytes(v.get("value"))?,
            headers,
            timestamp: int("timestamp")?,
            timestamp_type: v.get("timestampType").and_then(Value::as_str).ok_or("missing \"timestampType\"")?.to_string(),
        })
    }
}

fn opt_bytes(v: Option<&Value>) -> std::result::Result<Option<Vec<u8>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => util::base64_decode(s).map(Some).ok_or_else(|| format!("bad base64 {s:?}")),
        Some(other) => Err(format!("expected base64 string or null, got {other}")),
    }
}

fn json_bytes(bytes: &Option<Vec<u8>>) -> Value {
    bytes.as_ref().map_or(Value::Null, |b| Value::String(util::base64_encode(b)))
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
        ProducerRecord { partition: Some(partition), ..Default::default() }
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

    pub(crate) fn to_json(&self) -> Value {
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
    /// `flush()`, then sleep this long: one producer process writes over a stretch of time (a live
    /// producer during a fault).
    Pause(std::time::Duration),
    /// `flush()`, report, then exit without closing the producer, as if it crashed: an open
    /// transaction stays open (the LSO stays put) until `transaction.timeout.ms`. Must come last.
    Halt,
}

impl From<ProducerRecord> for ProduceLine {
    fn from(record: ProducerRecord) -> Self {
        ProduceLine::Record(record)
    }
}

impl ProduceLine {
    /// Two transactions: one with `committed`, which commits, then one with `aborted`, which aborts.
    pub fn commit_then_abort(committed: impl IntoIterator<Item = ProduceLine>, aborted: impl IntoIterator<Item = ProduceLine>) -> Vec<ProduceLine> {
        let mut lines = vec![ProduceLine::Begin];
        lines.extend(committed);
        lines.extend([ProduceLine::Commit, ProduceLine::Begin]);
        lines.extend(aborted);
        lines.push(ProduceLine::Abort);
        lines
    }

    pub(crate) fn to_json(&self) -> Value {
        match self {
            ProduceLine::Record(r) => r.to_json(),
            ProduceLine::Begin => json!({"txn": "begin"}),
            ProduceLine::Commit => json!({"txn": "commit"}),
            ProduceLine::Abort => json!({"txn": "abort"}),
            ProduceLine::Flush => json!({"flush": true}),
            ProduceLine::Pause(d) => json!({"pause_ms": d.as_millis() as u64}),
            ProduceLine::Halt => json!({"halt": true}),
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
    pub const ALL: [Compression; 5] = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd];

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
    /// Any other consumer configs, applied last. Passed as they are to whichever reader runs, and
    /// Java and librdkafka name some settings differently (`fetch.max.wait.ms` vs
    /// `fetch.wait.max.ms`), so props are reader-specific.
    pub props: Vec<(String, String)>,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions { isolation: Isolation::default(), partition: None, timeout_ms: 30_000, props: Vec::new() }
    }
}

impl ConsumeOptions {
    /// read_committed, all partitions.
    pub fn read_committed() -> Self {
        ConsumeOptions { isolation: Isolation::ReadCommitted, ..Default::default() }
    }

    pub(crate) fn args(&self) -> Vec<String> {
        let mut args = vec!["--isolation".to_string(), self.isolation.as_str().to_string()];
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
        assert_eq!(r.headers, vec![("h".to_string(), Some(vec![])), ("h".to_string(), None)]);
        assert!(ConsumedRecord::from_json(&json!({"partition": 1})).is_err());
    }

    #[test]
    fn producer_record_json() {
        let r = ProducerRecord::to(1).key("k").null_header("n").header("h", "");
        assert_eq!(
            ProduceLine::from(r).to_json(),
            json!({"partition": 1, "key": "aw==", "value": null, "headers": [["n", null], ["h", ""]], "timestamp": null})
        );
    }
}
