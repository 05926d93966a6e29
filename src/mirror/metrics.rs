//! The mirror metrics on the proxy's `/metrics` (spec §10), encoded at each scrape with
//! `prometheus-client` from what the control plane already holds: partition states from the state
//! log (the same on every instance), and for the work this instance runs: per-partition lag in
//! records and in time, copy counters, fetch and produce latency, throttling, the sync jobs' runs,
//! and how far this instance is behind `__mirror_state`.
//!
//! Labels stay bounded: `mirror`, `state`, a FAILED reason's class (never its text), a sync kind,
//! and topic and partition only on the lag series of partitions copied here, two series each.
//! Encoding costs O(partitions copied here) per scrape and nothing between scrapes.
//!
//! Owns: the names, help texts and labels. Does not own the numbers (the replicator counts, the
//! model and the sync jobs hold them).

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::PartitionState;
use super::manager::Shared;
use super::ownership::topic_key;
use super::records::TopicGoal;
use crate::replicator::error::reason_class;

/// The mirror control plane's metrics collector (register it with the proxy's registry).
#[derive(Debug)]
pub struct MirrorMetrics {
    shared: Arc<Shared>,
}

impl MirrorMetrics {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

type Result = std::result::Result<(), std::fmt::Error>;

/// Writes one gauge without labels.
fn gauge(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: i64) -> Result {
    encoder.encode_descriptor(name, help, None, MetricType::Gauge)?.encode_gauge(&value)
}

/// Writes one gauge family: a descriptor, then a sample per (labels, value).
fn gauges<L, V>(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, rows: impl IntoIterator<Item = (L, V)>) -> Result
where
    L: prometheus_client::encoding::EncodeLabelSet,
    V: prometheus_client::encoding::EncodeGaugeValue,
{
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in rows {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

/// Writes one counter family (the encoder appends `_total`).
fn counters<L, V>(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, rows: impl IntoIterator<Item = (L, V)>) -> Result
where
    L: prometheus_client::encoding::EncodeLabelSet,
    V: prometheus_client::encoding::EncodeCounterValue,
{
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in rows {
        metric.encode_family(&labels)?.encode_counter::<NoLabelSet, V, f64>(&value, None)?;
    }
    Ok(())
}

impl Collector for MirrorMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result {
        let shared = &self.shared;
        let ownership = shared.ownership.borrow().clone();
        gauge(
            &mut encoder,
            "mirror_group_member",
            "1 while this instance is a settled member of the instance group and runs its share of the work.",
            i64::from(ownership.is_some()),
        )?;
        gauge(
            &mut encoder,
            "mirror_group_instances",
            "Proxy instances in the instance group (0 while not a member).",
            ownership.as_ref().map_or(0, |o| o.members.len() as i64),
        )?;

        // Partition states as the state log has them.
        let (states, failed, owned) = {
            let model = shared.model();
            let mut states: BTreeMap<(String, &'static str), i64> = BTreeMap::new();
            let mut failed: BTreeMap<(String, &'static str), i64> = BTreeMap::new();
            let mut owned = Vec::new();
            for (topic, entry) in &model.topics {
                for p in 0..entry.record.partitions {
                    let state = match (entry.record.goal, entry.partitions.get(&p)) {
                        (TopicGoal::Stopped, _) => "STOPPED",
                        (_, Some(r)) => {
                            if let PartitionState::Failed { reason } = &r.state {
                                *failed.entry((entry.record.mirror.clone(), reason_class(reason))).or_default() += 1;
                            }
                            r.state.name()
                        }
                        (TopicGoal::Pause, None) => "PAUSED",
                        (TopicGoal::Stop, None) => "STOPPING",
                        _ => "INITIALIZING",
                    };
                    *states.entry((entry.record.mirror.clone(), state)).or_default() += 1;
                }
                if entry.record.goal != TopicGoal::Stopped && ownership.as_ref().is_some_and(|o| o.owns(&topic_key(topic))) {
                    owned.push((entry.record.mirror.clone(), topic.clone()));
                }
            }
            (states, failed, owned)
        };
        gauges(
            &mut encoder,
            "mirror_partitions",
            "Mirror partitions by mirror and state, as recorded in the mirror state topic.",
            states.iter().map(|((mirror, state), n)| ([("mirror", mirror.as_str()), ("state", state)], *n)),
        )?;
        gauges(
            &mut encoder,
            "mirror_failed_partitions",
            "FAILED mirror partitions by mirror and the class of their reason (kafka-mirrors --describe --failed shows each reason).",
            failed.iter().map(|((mirror, reason), n)| ([("mirror", mirror.as_str()), ("reason", reason)], *n)),
        )?;
        gauges(
            &mut encoder,
            "mirror_topic_owned",
            "Mirror topics this instance copies (1 each).",
            owned.iter().map(|(mirror, topic)| ([("mirror", mirror.as_str()), ("topic", topic.as_str())], 1_i64)),
        )?;

        // Lag of the partitions copied here.
        let now_ms = super::now_ms();
        let running = shared.running_replicators();
        let copied: Vec<(String, bool, Vec<crate::replicator::PartitionStatus>)> =
            running.iter().map(|(m, r)| (m.clone(), r.reads_committed(), r.status())).collect();
        let lag_rows =
            || copied.iter().flat_map(|(mirror, committed, statuses)| statuses.iter().map(move |s| (mirror.as_str(), *committed, s, s.partition.to_string())));
        {
            let mut metric = encoder.encode_descriptor(
                "mirror_partition_lag_records",
                "Offsets not copied yet (to the source LSO under read_committed, else its high watermark), per partition copied here.",
                None,
                MetricType::Gauge,
            )?;
            for (mirror, committed, status, partition) in lag_rows() {
                let labels = [("mirror", mirror), ("topic", status.topic.as_str()), ("partition", partition.as_str())];
                metric.encode_family(&labels)?.encode_gauge(&status.lag(committed))?;
            }
        }
        {
            let mut metric = encoder.encode_descriptor(
                "mirror_partition_lag_seconds",
                "How far behind in time each partition copied here is: 0 when nothing is to be copied, else the age of the newest record it wrote.",
                None,
                MetricType::Gauge,
            )?;
            for (mirror, committed, status, partition) in lag_rows() {
                let labels = [("mirror", mirror), ("topic", status.topic.as_str()), ("partition", partition.as_str())];
                metric.encode_family(&labels)?.encode_gauge(&status.lag_seconds(committed, now_ms))?;
            }
        }
        let per_mirror = |f: fn(bool, &crate::replicator::PartitionStatus, i64) -> f64, max: bool| {
            copied.iter().map(move |(mirror, committed, statuses)| {
                let values = statuses.iter().map(|s| f(*committed, s, now_ms));
                let v = if max { values.fold(0.0, f64::max) } else { values.sum() };
                ([("mirror", mirror.as_str())], v)
            })
        };
        gauges(
            &mut encoder,
            "mirror_lag_records",
            "Offsets not copied yet, summed over the mirror's partitions copied here.",
            per_mirror(|c, s, _| s.lag(c) as f64, false),
        )?;
        gauges(
            &mut encoder,
            "mirror_lag_seconds",
            "The largest mirror_partition_lag_seconds of the mirror's partitions copied here.",
            per_mirror(|c, s, now| s.lag_seconds(c, now), true),
        )?;

        gauges(
            &mut encoder,
            "mirror_source_staleness_seconds",
            "How long ago the source last answered for the mirror's partition copied here that has waited longest: the lag figures are as old as this. Under fetch.wait.max.ms plus a round trip while the source is reachable; grows while it is cut off or a leader is missing, when the lag says nothing of what the source got since.",
            running.iter().filter_map(|(m, r)| r.source_staleness().map(|d| ([("mirror", m.as_str())], d.as_secs_f64()))),
        )?;

        // What the copying counted.
        let counted = shared.copy_counters();
        let by_mirror = |mirror: &str| [("mirror", mirror.to_owned())];
        counters(
            &mut encoder,
            "mirror_copied_records",
            "Source records written to the destination.",
            counted.iter().map(|(m, s, _)| (by_mirror(m), s.records())),
        )?;
        counters(
            &mut encoder,
            "mirror_copied_bytes",
            "Record batch bytes written to the destination.",
            counted.iter().map(|(m, s, _)| (by_mirror(m), s.bytes())),
        )?;
        {
            let mut metric = encoder.encode_descriptor(
                "mirror_fetch_duration_seconds",
                "Fetch requests to source brokers, from sending to the whole response (an idle fetch waits up to fetch.wait.max.ms).",
                None,
                MetricType::Histogram,
            )?;
            for (mirror, stats, _) in &counted {
                stats.fetch_latency.encode(metric.encode_family(&by_mirror(mirror))?)?;
            }
        }
        {
            let mut metric = encoder.encode_descriptor(
                "mirror_produce_duration_seconds",
                "Produce requests to destination brokers, from sending to the response.",
                None,
                MetricType::Histogram,
            )?;
            for (mirror, stats, _) in &counted {
                stats.produce_latency.encode(metric.encode_family(&by_mirror(mirror))?)?;
            }
        }
        counters(
            &mut encoder,
            "mirror_throttle_seconds",
            "Time copying waited for bandwidth limits: side=destination for mirror.replication.throttled.rate and the proxy's ceiling, side=source for the source brokers' throttle_time_ms (client quotas).",
            counted.iter().flat_map(|(m, s, t)| {
                let destination = t.as_ref().map_or(0.0, |t| t.waited().as_secs_f64());
                [
                    ([("mirror", m.clone()), ("side", "destination".to_owned())], destination),
                    ([("mirror", m.clone()), ("side", "source".to_owned())], s.source_throttle().as_secs_f64()),
                ]
            }),
        )?;
        gauges(
            &mut encoder,
            "mirror_throttle_rate_bytes",
            "The mirror's mirror.replication.throttled.rate, bytes/s (0: unlimited).",
            counted.iter().map(|(m, _, t)| (by_mirror(m), t.as_ref().and_then(|t| t.rate()).map_or(0_i64, |r| i64::try_from(r).unwrap_or(i64::MAX)))),
        )?;

        // The sync jobs run here.
        let syncs: Vec<(String, Vec<(&'static str, crate::sync::SyncStatus)>)> = {
            let all = shared.sync_statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            all.iter()
                .map(|(m, s)| (m.clone(), s.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(|(k, v)| (k.name(), v.clone())).collect()))
                .collect()
        };
        let sync_rows =
            || syncs.iter().flat_map(|(mirror, kinds)| kinds.iter().map(move |(kind, status)| ([("mirror", mirror.as_str()), ("kind", *kind)], status)));
        let seconds = |t: &std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        counters(
            &mut encoder,
            "mirror_sync_runs",
            "Runs of each kind of sync of a mirror run here (successes and failures).",
            sync_rows().map(|(l, s)| (l, s.runs)),
        )?;
        counters(&mut encoder, "mirror_sync_failures", "Failed runs of each kind of sync of a mirror run here.", sync_rows().map(|(l, s)| (l, s.failures)))?;
        gauges(
            &mut encoder,
            "mirror_sync_last_success_timestamp_seconds",
            "When each kind of sync of a mirror run here last succeeded (Unix seconds).",
            sync_rows().filter_map(|(l, s)| s.last_success.as_ref().map(|t| (l, seconds(t)))),
        )?;
        gauges(
            &mut encoder,
            "mirror_sync_last_failure_timestamp_seconds",
            "When each kind of sync of a mirror run here last failed (Unix seconds).",
            sync_rows().filter_map(|(l, s)| s.last_failure.as_ref().map(|(t, _)| (l, seconds(t)))),
        )?;
        gauges(
            &mut encoder,
            "mirror_sync_consecutive_failures",
            "Failed runs of each kind of sync since its last success.",
            sync_rows().map(|(l, s)| (l, i64::from(s.consecutive_failures))),
        )?;
        gauge(
            &mut encoder,
            "mirror_state_apply_lag_records",
            "Records of the mirror state topic written but not applied on this instance yet (as of its last fetch of it).",
            shared.state_apply_lag(),
        )?;
        Ok(())
    }
}
