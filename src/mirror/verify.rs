//! `kafka-mirrors --verify`: proof that a mirror's partitions are identical on both clusters, read
//! independently of the replicator that wrote them.
//!
//! For each partition the checked range is `[max(log starts), min(last stable offsets))`: what both
//! sides still hold and have decided. Both sides are read `read_committed` (so the brokers report
//! the aborted transactions of every range) one fetch at a time, decoded into [`Entry`]s in offset
//! order and merged by offset: memory is bounded by two fetches, whatever the topic's size.
//!
//! What "identical" means is what a consumer can observe, and what the replicator promises to keep
//! (spec §4): at every offset the same kind of entry; for data records the same timestamp, key,
//! value, headers, and transaction outcome (committed, aborted, or not transactional); for
//! markers the same type; and the same batch boundaries wherever the source batch has no holes.
//! Left out, because the mirror cannot keep them on an unmodified broker: producer ids and
//! sequences (mapped and renumbered), marker timestamps (stamped by the destination), the
//! timestamp type of LogAppendTime batches (copied as CreateTime with the same values). An abort
//! marker on the destination where the source has no offset at all is the filler the mirror writes
//! over a source gap, and not a difference. On compacted topics either side may have removed
//! records the other still holds: offsets present on one side only are counted, not reported.
//!
//! Beyond the range, a destination that ends past the source's high watermark holds offsets the
//! source never had: reported at the source's end.
//!
//! Owns only reading and comparing; it changes nothing on either cluster.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use ring::digest;

use crate::client::{Client, IsolationLevel, OffsetSpec, Outcomes, TopicPartition};
use crate::protocol::batch::{BatchError, ControlType, RecordBatches};

/// How much one fetch of one side may return (the broker still returns one whole batch if it is
/// larger).
pub const DEFAULT_FETCH_BYTES: i32 = 1 << 20;

/// Settings of a verification run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Cap of one fetch, bytes.
    pub fetch_bytes: i32,
    /// Bytes per second read from both clusters together; `None` for no limit.
    pub throttle: Option<u64>,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self { fetch_bytes: DEFAULT_FETCH_BYTES, throttle: None }
    }
}

/// The result of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every entry of the range matched.
    Identical,
    /// The first difference in offset order.
    Different {
        /// Offset of the first difference.
        offset: i64,
        /// What differs there.
        detail: String,
    },
    /// The partition could not be read to the end of its range.
    Error(String),
}

impl Outcome {
    /// The result column: IDENTICAL, DIFFERENT or ERROR.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Identical => "IDENTICAL",
            Self::Different { .. } => "DIFFERENT",
            Self::Error(_) => "ERROR",
        }
    }
}

/// What was checked of one partition and how it came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    /// First offset checked.
    pub start: i64,
    /// First offset not checked (the range is empty when `end <= start`).
    pub end: i64,
    /// The source's high watermark when the check began.
    pub source_end: i64,
    /// The destination's high watermark when the check began.
    pub destination_end: i64,
    /// The topic is compacted on either side.
    pub compacted: bool,
    /// Counts of what was compared.
    pub counts: Counts,
    /// SHA-256 over the matched entries, hex: equal for equal ranges across runs.
    pub digest: String,
    pub outcome: Outcome,
}

/// What a comparison saw, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Data records that matched.
    pub records: u64,
    /// Transaction markers that matched.
    pub markers: u64,
    /// Abort markers on the destination over a gap of the source.
    pub fillers: u64,
    /// Offsets only the source holds (compacted topics).
    pub only_source: u64,
    /// Offsets only the destination holds (compacted topics).
    pub only_destination: u64,
    /// Bytes fetched from both sides.
    pub bytes_read: u64,
}

/// A transaction outcome as a read_committed consumer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// Not in a transaction.
    None,
    Committed,
    Aborted,
}

impl fmt::Display for TxnOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "not transactional",
            Self::Committed => "committed",
            Self::Aborted => "aborted",
        })
    }
}

/// One offset of one side, as compared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub offset: i64,
    /// The first and last offset of the batch holding it.
    pub batch: (i64, i64),
    /// The batch has a record at every offset of its span.
    pub batch_whole: bool,
    pub kind: EntryKind,
}

/// A data record or a transaction marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Data { timestamp: i64, key: Option<Bytes>, value: Option<Bytes>, headers: Vec<(Bytes, Option<Bytes>)>, txn: TxnOutcome },
    Marker(ControlType),
}

impl EntryKind {
    fn describe(&self) -> String {
        match self {
            Self::Data { .. } => "a data record".to_owned(),
            Self::Marker(ControlType::Commit) => "a COMMIT marker".to_owned(),
            Self::Marker(ControlType::Abort) => "an ABORT marker".to_owned(),
        }
    }
}

/// Decodes the batches of one read_committed fetch answer into entries at `from..end`, with the
/// transaction outcome of each data record from the answer's aborted transactions (the algorithm of
/// Kafka's consumer: a transactional batch is aborted when its producer has an aborted transaction
/// that began at or before the batch's last offset and whose ABORT marker has not been seen yet).
///
/// Returns the entries and the offset after the last batch decoded (`from` if none).
///
/// # Errors
/// A batch with a bad CRC or records that do not decode, named by its base offset.
pub fn decode_fetch(records: Bytes, aborted_transactions: &[(i64, i64)], from: i64, end: i64) -> Result<(Vec<Entry>, i64), BatchError> {
    let mut aborted: Vec<(i64, i64)> = aborted_transactions.to_vec();
    aborted.sort_by_key(|&(_, first)| first);
    let mut pending = aborted.into_iter().peekable();
    let mut aborting: HashSet<i64> = HashSet::new();
    let mut entries = Vec::new();
    let mut next = from;
    for batch in RecordBatches::new(records) {
        let batch = batch?;
        batch.verify_crc()?;
        next = next.max(batch.next_offset());
        let pid = batch.producer_id();
        if batch.has_producer_id() {
            while let Some((p, _)) = pending.next_if(|&(_, first)| first <= batch.last_offset()) {
                aborting.insert(p);
            }
        }
        let span = (batch.base_offset(), batch.last_offset());
        let whole = i64::from(batch.records_count()) == batch.last_offset() - batch.base_offset() + 1;
        if batch.is_control() {
            let marker = batch.control_marker()?;
            if let Some((marker, _)) = marker {
                if marker == ControlType::Abort {
                    aborting.remove(&pid);
                }
                let offset = batch.base_offset();
                if offset >= from && offset < end {
                    entries.push(Entry { offset, batch: span, batch_whole: whole, kind: EntryKind::Marker(marker) });
                }
            }
            continue;
        }
        if batch.last_offset() < from || batch.base_offset() >= end {
            continue;
        }
        let txn = match (batch.is_transactional(), batch.has_producer_id() && aborting.contains(&pid)) {
            (false, _) => TxnOutcome::None,
            (true, true) => TxnOutcome::Aborted,
            (true, false) => TxnOutcome::Committed,
        };
        for record in batch.records()? {
            let record = record?;
            let offset = batch.record_offset(&record);
            if offset < from || offset >= end {
                continue;
            }
            let timestamp = batch.record_timestamp(&record);
            entries.push(Entry {
                offset,
                batch: span,
                batch_whole: whole,
                kind: EntryKind::Data { timestamp, key: record.key, value: record.value, headers: record.headers, txn },
            });
        }
    }
    Ok((entries, next))
}

/// What the merge decided at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Both sides have this offset and it matched: consume both.
    Matched,
    /// Only the source has the offset and that is allowed: consume the source's.
    SourceOnly,
    /// Only the destination has the offset and that is allowed: consume the destination's.
    DestinationOnly { filler: bool },
    /// A difference: stop.
    Differs { offset: i64, detail: String },
}

/// Compares the next entries of both sides (`None`: that side has nothing more in the range, which
/// starts at `start`).
fn step(source: Option<&Entry>, destination: Option<&Entry>, compacted: bool, start: i64) -> Option<Step> {
    match (source, destination) {
        (None, None) => None,
        (Some(s), d) if d.is_none_or(|d| s.offset < d.offset) => Some(if compacted {
            Step::SourceOnly
        } else {
            Step::Differs { offset: s.offset, detail: format!("the destination has no offset {} (skipped); the source has {}", s.offset, s.kind.describe()) }
        }),
        (s, Some(d)) if s.is_none_or(|s| d.offset < s.offset) => Some(match &d.kind {
            EntryKind::Marker(ControlType::Abort) => Step::DestinationOnly { filler: true },
            _ if compacted => Step::DestinationOnly { filler: false },
            kind => {
                Step::Differs { offset: d.offset, detail: format!("the destination has {} at offset {} where the source has none", kind.describe(), d.offset) }
            }
        }),
        (Some(s), Some(d)) => Some(match entry_difference(s, d, compacted, start) {
            None => Step::Matched,
            Some(detail) => Step::Differs { offset: s.offset, detail },
        }),
        // The guards above cover every case with one side absent.
        (None, Some(_)) | (Some(_), None) => None,
    }
}

/// How two entries at the same offset differ, or `None`. Batch spans are compared from `start`, the
/// range's first offset: a source batch cut by a log start inside it is copied from there.
fn entry_difference(s: &Entry, d: &Entry, compacted: bool, start: i64) -> Option<String> {
    match (&s.kind, &d.kind) {
        (
            EntryKind::Data { timestamp: st, key: sk, value: sv, headers: sh, txn: stx },
            EntryKind::Data { timestamp: dt, key: dk, value: dv, headers: dh, txn: dtx },
        ) => {
            if sk != dk {
                return Some(format!("key differs: source {}, destination {}", show(sk.as_ref()), show(dk.as_ref())));
            }
            if sv != dv {
                return Some(format!("value differs: source {}, destination {}", show(sv.as_ref()), show(dv.as_ref())));
            }
            if sh != dh {
                return Some(format!("headers differ: source {} header(s), destination {}", sh.len(), dh.len()));
            }
            if st != dt {
                return Some(format!("timestamp differs: source {st}, destination {dt}"));
            }
            if stx != dtx {
                return Some(format!("transaction outcome differs: source {stx}, destination {dtx}"));
            }
            let (s_span, d_span) = ((s.batch.0.max(start), s.batch.1), (d.batch.0.max(start), d.batch.1));
            if !compacted && s.batch_whole && s_span != d_span && s.offset == s_span.0.max(d_span.0) {
                return Some(format!("batch boundaries differ: source batch {}..={}, destination batch {}..={}", s.batch.0, s.batch.1, d.batch.0, d.batch.1));
            }
            None
        }
        (EntryKind::Marker(a), EntryKind::Marker(b)) if a == b => None,
        (EntryKind::Data { .. }, EntryKind::Marker(ControlType::Abort)) => {
            Some(format!("the destination skipped offset {}: an ABORT marker where the source has a data record", s.offset))
        }
        (a, b) => Some(format!("the source has {}, the destination {}", a.describe(), b.describe())),
    }
}

/// A value for a message: its length and, if short and printable, the text.
fn show(bytes: Option<&Bytes>) -> String {
    match bytes {
        None => "null".to_owned(),
        Some(b) if b.len() <= 32 && b.iter().all(|c| c.is_ascii_graphic() || *c == b' ') => format!("\"{}\" ({} bytes)", String::from_utf8_lossy(b), b.len()),
        Some(b) => format!("{} bytes", b.len()),
    }
}

/// Adds one matched entry to the range digest.
fn digest_entry(ctx: &mut digest::Context, e: &Entry) {
    ctx.update(&e.offset.to_be_bytes());
    let part = |ctx: &mut digest::Context, b: Option<&Bytes>| match b {
        None => ctx.update(&(-1i64).to_be_bytes()),
        Some(b) => {
            ctx.update(&(b.len() as u64).to_be_bytes());
            ctx.update(b);
        }
    };
    match &e.kind {
        EntryKind::Data { timestamp, key, value, headers, txn } => {
            ctx.update(&[0, *txn as u8]);
            ctx.update(&timestamp.to_be_bytes());
            part(ctx, key.as_ref());
            part(ctx, value.as_ref());
            ctx.update(&(headers.len() as u64).to_be_bytes());
            for (k, v) in headers {
                part(ctx, Some(k));
                part(ctx, v.as_ref());
            }
        }
        EntryKind::Marker(m) => ctx.update(&[1, (m.id() & 0xff) as u8]),
    }
}

/// Paces reads to the throttle across both clusters and all partitions.
#[derive(Debug)]
struct Pacer {
    rate: Option<u64>,
    start: tokio::time::Instant,
    bytes: u64,
}

impl Pacer {
    fn new(rate: Option<u64>) -> Self {
        Self { rate: rate.filter(|r| *r > 0), start: tokio::time::Instant::now(), bytes: 0 }
    }

    async fn read(&mut self, bytes: usize) {
        self.bytes += bytes as u64;
        if let Some(rate) = self.rate {
            let due = self.start + Duration::from_secs_f64(self.bytes as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
    }
}

/// One side of one partition being read in offset order.
struct Side<'a> {
    client: &'a Client,
    cluster: &'static str,
    topic: &'a str,
    partition: i32,
    fetch_bytes: i32,
    next_fetch: i64,
    end: i64,
    queue: VecDeque<Entry>,
}

impl<'a> Side<'a> {
    /// The next entry of the range, fetching when the queue is empty.
    async fn peek(&mut self, pacer: &mut Pacer, counts: &mut Counts) -> Result<Option<&Entry>, String> {
        while self.queue.is_empty() && self.next_fetch < self.end {
            let fetched = self
                .client
                .fetch_partition(self.topic, self.partition, self.next_fetch, IsolationLevel::ReadCommitted, self.fetch_bytes)
                .await
                .map_err(|e| format!("fetching offset {} from the {}: {}", self.next_fetch, self.cluster, crate::report::error_chain(&e)))?;
            counts.bytes_read += fetched.records.len() as u64;
            pacer.read(fetched.records.len()).await;
            let (entries, next) = decode_fetch(fetched.records, &fetched.aborted_transactions, self.next_fetch, self.end)
                .map_err(|e| format!("the {}'s batch near offset {}: {e}", self.cluster, self.next_fetch))?;
            if next <= self.next_fetch {
                // Nothing below the stable offset from here: the rest of the range is a gap
                // (records the cleaner removed), not an error.
                let stable = if fetched.last_stable_offset >= 0 { fetched.last_stable_offset } else { fetched.high_watermark };
                if stable >= self.end {
                    self.next_fetch = self.end;
                    break;
                }
                return Err(format!(
                    "the {} returned nothing at offset {} (high watermark {}, last stable offset {})",
                    self.cluster, self.next_fetch, fetched.high_watermark, fetched.last_stable_offset
                ));
            }
            self.next_fetch = next;
            self.queue.extend(entries);
        }
        Ok(self.queue.front())
    }
}

/// The bounds of one partition on one side.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    start: i64,
    high_watermark: i64,
    stable: i64,
}

async fn bounds(client: &Client, partitions: &[TopicPartition]) -> Vec<Result<Bounds, String>> {
    let mut start = client.list_offsets_bulk(partitions, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await;
    let mut hw = client.list_offsets_bulk(partitions, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
    let mut stable = client.list_offsets_bulk(partitions, OffsetSpec::Latest, IsolationLevel::ReadCommitted).await;
    partitions
        .iter()
        .map(|tp| {
            let take = |m: &mut Outcomes<TopicPartition, i64>, what: &str| match m.remove(tp) {
                Some(Ok(offset)) => Ok(offset),
                Some(Err(e)) => Err(format!("listing its {what}: {}", crate::report::error_chain(&e))),
                None => Err(format!("listing its {what}: no answer")),
            };
            Ok(Bounds {
                start: take(&mut start, "log start offset")?,
                high_watermark: take(&mut hw, "high watermark")?,
                stable: take(&mut stable, "last stable offset")?,
            })
        })
        .collect()
}

/// Verifies `partitions` (of topics in `compacted` if compacted on either side), one after the
/// other, calling `done` with each report as it is ready.
pub async fn verify_partitions(
    source: &Client,
    destination: &Client,
    partitions: &[TopicPartition],
    compacted: &HashSet<String>,
    options: VerifyOptions,
    mut done: impl FnMut(&PartitionReport),
) -> Vec<PartitionReport> {
    let source_bounds = bounds(source, partitions).await;
    let destination_bounds = bounds(destination, partitions).await;
    let mut pacer = Pacer::new(options.throttle);
    let mut reports = Vec::with_capacity(partitions.len());
    for ((tp, s), d) in partitions.iter().zip(source_bounds).zip(destination_bounds) {
        let (topic, partition) = (tp.0.as_str(), tp.1);
        let compacted = compacted.contains(topic);
        let mut report = PartitionReport {
            topic: topic.to_owned(),
            partition,
            start: -1,
            end: -1,
            source_end: -1,
            destination_end: -1,
            compacted,
            counts: Counts::default(),
            digest: String::new(),
            outcome: Outcome::Identical,
        };
        match (s, d) {
            (Err(e), _) => report.outcome = Outcome::Error(format!("the source: {e}")),
            (_, Err(e)) => report.outcome = Outcome::Error(format!("the destination: {e}")),
            (Ok(s), Ok(d)) => {
                report.start = s.start.max(d.start);
                report.end = s.stable.min(d.stable);
                report.source_end = s.high_watermark;
                report.destination_end = d.high_watermark;
                compare_range(source, destination, &mut report, options.fetch_bytes, &mut pacer).await;
                if report.outcome == Outcome::Identical && d.high_watermark > s.high_watermark {
                    report.outcome = Outcome::Different {
                        offset: s.high_watermark,
                        detail: format!(
                            "the destination ends at {}, past the source's end {}: it holds offsets the source never had",
                            d.high_watermark, s.high_watermark
                        ),
                    };
                }
            }
        }
        done(&report);
        reports.push(report);
    }
    reports
}

async fn compare_range(source: &Client, destination: &Client, report: &mut PartitionReport, fetch_bytes: i32, pacer: &mut Pacer) {
    let (start, end) = (report.start, report.end);
    let side = |client, cluster| Side {
        client,
        cluster,
        topic: &report.topic,
        partition: report.partition,
        fetch_bytes,
        next_fetch: start,
        end,
        queue: VecDeque::new(),
    };
    let mut src = side(source, "source");
    let mut dst = side(destination, "destination");
    let mut counts = Counts::default();
    let mut ctx = digest::Context::new(&digest::SHA256);
    let outcome = loop {
        let s = match src.peek(pacer, &mut counts).await {
            Ok(s) => s.cloned(),
            Err(e) => break Outcome::Error(e),
        };
        let d = match dst.peek(pacer, &mut counts).await {
            Ok(d) => d.cloned(),
            Err(e) => break Outcome::Error(e),
        };
        match step(s.as_ref(), d.as_ref(), report.compacted, start) {
            None => break Outcome::Identical,
            Some(Step::Matched) => {
                let entry = s.expect("matched entries exist");
                if matches!(entry.kind, EntryKind::Marker(_)) {
                    counts.markers += 1;
                } else {
                    counts.records += 1;
                }
                digest_entry(&mut ctx, &entry);
                src.queue.pop_front();
                dst.queue.pop_front();
            }
            Some(Step::SourceOnly) => {
                counts.only_source += 1;
                src.queue.pop_front();
            }
            Some(Step::DestinationOnly { filler }) => {
                if filler {
                    counts.fillers += 1;
                } else {
                    counts.only_destination += 1;
                }
                dst.queue.pop_front();
            }
            Some(Step::Differs { offset, detail }) => break Outcome::Different { offset, detail },
        }
    };
    report.counts = counts;
    report.digest = ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect();
    report.outcome = outcome;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::{BatchBuilder, ControlBatchSpec, RawBatch, Record, build_control_batch};

    fn data(base: i64, values: &[&str], pid: i64, transactional: bool) -> Bytes {
        let mut b = BatchBuilder::new().with_base_offset(base).with_base_timestamp(1_000).with_max_timestamp(1_000 + values.len() as i64);
        if pid >= 0 {
            b = b.with_producer_id(pid).with_producer_epoch(0).with_base_sequence(0).with_transactional(transactional);
        }
        for (i, v) in values.iter().enumerate() {
            b = b.with_record(Record {
                timestamp_delta: i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
                ..Record::default()
            });
        }
        b.build().unwrap()
    }

    fn marker(offset: i64, pid: i64, commit: bool) -> Bytes {
        let batch = build_control_batch(ControlBatchSpec {
            producer_id: pid,
            producer_epoch: 0,
            coordinator_epoch: 0,
            marker: if commit { ControlType::Commit } else { ControlType::Abort },
            timestamp: 5,
        });
        let mut raw = RawBatch::from_bytes(batch).unwrap().to_mut();
        raw.set_base_offset(offset);
        raw.finish()
    }

    fn concat(parts: &[Bytes]) -> Bytes {
        parts.iter().flat_map(|b| b.iter().copied()).collect::<Vec<u8>>().into()
    }

    fn compare(s: &[Entry], d: &[Entry], compacted: bool) -> (Option<(i64, String)>, Counts) {
        let (mut i, mut j) = (0, 0);
        let mut counts = Counts::default();
        loop {
            match step(s.get(i), d.get(j), compacted, 0) {
                None => return (None, counts),
                Some(Step::Matched) => {
                    counts.records += 1;
                    i += 1;
                    j += 1;
                }
                Some(Step::SourceOnly) => {
                    counts.only_source += 1;
                    i += 1;
                }
                Some(Step::DestinationOnly { filler }) => {
                    if filler {
                        counts.fillers += 1;
                    } else {
                        counts.only_destination += 1;
                    }
                    j += 1;
                }
                Some(Step::Differs { offset, detail }) => return (Some((offset, detail)), counts),
            }
        }
    }

    fn entries(bytes: Bytes, aborted: &[(i64, i64)]) -> Vec<Entry> {
        decode_fetch(bytes, aborted, 0, i64::MAX).unwrap().0
    }

    /// The transaction outcome follows the aborted list the way a read_committed consumer reads it,
    /// and a mapped producer id on the destination does not matter.
    #[test]
    fn outcomes_follow_the_aborted_transactions() {
        let src = concat(&[data(0, &["a", "b"], 7, true), marker(2, 7, false), data(3, &["c"], 7, true), marker(4, 7, true), data(5, &["d"], -1, false)]);
        let e = entries(src.clone(), &[(7, 0)]);
        let txn: Vec<(i64, TxnOutcome)> =
            e.iter().filter_map(|e| if let EntryKind::Data { txn, .. } = e.kind { Some((e.offset, txn)) } else { None }).collect();
        assert_eq!(txn, vec![(0, TxnOutcome::Aborted), (1, TxnOutcome::Aborted), (3, TxnOutcome::Committed), (5, TxnOutcome::None)]);
        let pid = 7 | (1 << 62);
        let dst =
            concat(&[data(0, &["a", "b"], pid, true), marker(2, pid, false), data(3, &["c"], pid, true), marker(4, pid, true), data(5, &["d"], -1, false)]);
        let (diff, counts) = compare(&e, &entries(dst, &[(pid, 0)]), false);
        assert_eq!(diff, None);
        assert_eq!(counts.records, 6);
        // The same bytes where the destination committed what the source aborted.
        let dst = concat(&[data(0, &["a", "b"], pid, true), marker(2, pid, true)]);
        let (diff, _) = compare(&e, &entries(dst, &[]), false);
        let (offset, detail) = diff.unwrap();
        assert_eq!(offset, 0);
        assert!(detail.contains("transaction outcome differs: source aborted, destination committed"), "{detail}");
    }

    /// A record written on the destination past the source, a skipped offset, a changed value and
    /// a split batch are named at their offset; an abort marker over a source gap is a filler.
    #[test]
    fn differences_are_named_at_their_offset() {
        let src = entries(concat(&[data(0, &["a", "b", "c"], -1, false), data(4, &["e"], -1, false)]), &[]);
        let same = entries(concat(&[data(0, &["a", "b", "c"], -1, false), marker(3, 99, false), data(4, &["e"], -1, false)]), &[]);
        let (diff, counts) = compare(&src, &same, false);
        assert_eq!((diff, counts.records, counts.fillers), (None, 4, 1));

        let extra = entries(concat(&[data(0, &["a", "b", "c"], -1, false), data(3, &["x"], -1, false), data(4, &["e"], -1, false)]), &[]);
        let (diff, _) = compare(&src, &extra, false);
        assert_eq!(diff.unwrap().0, 3);

        let skipped = entries(concat(&[data(0, &["a", "b", "c"], -1, false), marker(3, 1, false), marker(4, 1, false)]), &[]);
        let (diff, _) = compare(&src, &skipped, false);
        let (offset, detail) = diff.unwrap();
        assert_eq!(offset, 4);
        assert!(detail.contains("the destination skipped offset 4: an ABORT marker where the source has a data record"), "{detail}");

        let changed = entries(concat(&[data(0, &["a", "B", "c"], -1, false), data(4, &["e"], -1, false)]), &[]);
        let (diff, _) = compare(&src, &changed, false);
        let (offset, detail) = diff.unwrap();
        assert_eq!(offset, 1);
        assert!(detail.starts_with("value differs: source \"b\" (1 bytes), destination \"B\" (1 bytes)"), "{detail}");

        let split = entries(concat(&[data(0, &["a", "b"], -1, false), data(2, &["c"], -1, false), data(4, &["e"], -1, false)]), &[]);
        let (diff, _) = compare(&src, &split, false);
        let (offset, detail) = diff.unwrap();
        assert_eq!(offset, 0);
        assert!(detail.contains("batch boundaries differ: source batch 0..=2, destination batch 0..=1"), "{detail}");

        // A log start inside a source batch: the destination's batch starts there.
        let from_one = decode_fetch(concat(&[data(0, &["a", "b", "c"], -1, false), data(4, &["e"], -1, false)]), &[], 1, i64::MAX).unwrap().0;
        let mut cut = from_one.clone();
        for e in cut.iter_mut().filter(|e| e.batch.0 == 0) {
            e.batch = (1, 2);
        }
        let mut i = 0;
        let mut diff = None;
        while let Some(step) = step(from_one.get(i), cut.get(i), false, 1) {
            if let Step::Differs { offset, detail } = step {
                diff = Some((offset, detail));
                break;
            }
            i += 1;
        }
        assert_eq!(diff, None, "a batch cut by the log start is not a boundary difference");

        let missing = entries(data(0, &["a", "b", "c"], -1, false), &[]);
        let (diff, _) = compare(&src, &missing, false);
        let (offset, detail) = diff.unwrap();
        assert_eq!(offset, 4);
        assert!(detail.contains("skipped"), "{detail}");
        // Compacted: the destination has cleaned offset 4 away, the source still holds it.
        let (diff, counts) = compare(&src, &missing, true);
        assert_eq!((diff, counts.only_source), (None, 1));
    }

    /// Entries outside `from..end` are left out, and the returned offset is past the last batch.
    #[test]
    fn the_range_bounds_the_entries() {
        let bytes = concat(&[data(0, &["a", "b", "c"], -1, false), data(3, &["d", "e"], -1, false)]);
        let (e, next) = decode_fetch(bytes, &[], 1, 4).unwrap();
        assert_eq!(e.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(next, 5);
    }

    /// A corrupted batch is an error naming its offset, not a difference or a panic.
    #[test]
    fn a_bad_crc_is_an_error() {
        let mut bytes = data(10, &["a"], -1, false).to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let err = decode_fetch(bytes.into(), &[], 0, 100).unwrap_err();
        assert!(err.to_string().contains("10"), "{err}");
    }
}
