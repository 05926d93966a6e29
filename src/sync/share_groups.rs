//! Share group start offsets (KIP-932), copied from the source to the destination without
//! translation (offsets are equal on both sides, spec §7), read with DescribeShareGroupOffsets and
//! written with AlterShareGroupOffsets. Needs Kafka 4.1 or newer on both sides.
//!
//! One run, for the share groups of the source matching `groups.include`/`groups.exclude`:
//! 1. A cluster that does not serve the share APIs (older than 4.1, or share groups off) ends the
//!    run at once, successfully, with the reason in [`ShareGroupSyncReport::unsupported`]: consumer
//!    group offsets and data mirroring go on.
//! 2. Skipped, each with its reason: a name that is a share group on the source and a group of
//!    another type on the destination; a destination share group with members
//!    (ShareGroupDescribe), which owns its offsets there.
//! 3. Each group's start offsets for the mirror topics are clamped into the destination partition's
//!    valid range (log start to what has been mirrored so far), as consumer offsets are, and only
//!    those that differ from the destination's are written.
//!
//! What a broker reports as start offset is the share-partition state it last persisted, and a
//! share-partition leader persists the state *before* it moves the start offset past newly
//! acknowledged records (seen with Kafka 4.4: after acknowledging offsets 0–9 the reported start
//! offset stays 0 until the next acknowledgement). The acknowledged-but-not-yet-reflected records
//! are not visible through any admin API, so after a failover the destination group delivers them
//! again: at least once, as share groups deliver anyway.
//!
//! Must not touch consumer groups ([`super::groups`]) or record data.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::ApiKey;

use super::groups::{GroupFilter, SkippedGroup, SyncError, ValidRanges, is_consumer_group, on};
use crate::client::{Client, ListedGroup};

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareGroupSyncReport {
    /// Start offsets written on the destination: `(group, topic, partition, start offset)`.
    pub altered: Vec<(String, String, i32, i64)>,
    /// Groups left alone, and why.
    pub skipped: Vec<SkippedGroup>,
    /// Why no share group was synced at all (a cluster without the share APIs), if so.
    pub unsupported: Option<String>,
}

/// The share APIs each side needs.
const SOURCE_APIS: &[ApiKey] = &[ApiKey::DescribeShareGroupOffsets];
const DESTINATION_APIS: &[ApiKey] = &[ApiKey::ShareGroupDescribe, ApiKey::DescribeShareGroupOffsets, ApiKey::AlterShareGroupOffsets];

/// The first of `apis` that `client` cannot serve, if any.
async fn missing_api(client: &Client, side: &'static str, apis: &[ApiKey]) -> Result<Option<ApiKey>, SyncError> {
    let versions = client.broker_versions().await.map_err(on(side, "reading its ApiVersions"))?;
    Ok(apis.iter().copied().find(|api| versions.choose(*api, None).is_none()))
}

/// One sync run of share group start offsets for the mirror topics `topics`.
///
/// # Errors
/// [`SyncError::Cluster`] if a cluster cannot be read; a problem with one group only skips that
/// group (in the report).
pub async fn sync_share_group_offsets(
    source: &Client,
    destination: &Client,
    topics: &BTreeSet<String>,
    filter: &GroupFilter,
) -> Result<ShareGroupSyncReport, SyncError> {
    let mut report = ShareGroupSyncReport::default();
    if topics.is_empty() {
        return Ok(report);
    }
    if let Some(api) = missing_api(source, "source", SOURCE_APIS).await? {
        report.unsupported = Some(format!("the source cluster does not serve {api:?} (share groups need Kafka 4.1 or newer with share groups enabled)"));
        return Ok(report);
    }
    let groups: Vec<ListedGroup> =
        source.list_groups().await.map_err(on("source", "listing groups"))?.into_iter().filter(|g| g.is_share() && filter.matches(&g.group_id)).collect();
    if groups.is_empty() {
        return Ok(report);
    }
    if let Some(api) = missing_api(destination, "destination", DESTINATION_APIS).await? {
        report.unsupported = Some(format!(
            "the destination cluster does not serve {api:?} (share groups need Kafka 4.1 or newer with share groups enabled); {} share group(s) not synced",
            groups.len()
        ));
        return Ok(report);
    }
    let destination_groups: BTreeMap<String, ListedGroup> =
        destination.list_groups().await.map_err(on("destination", "listing groups"))?.into_iter().map(|g| (g.group_id.clone(), g)).collect();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let partitions: BTreeMap<String, Vec<i32>> = source
        .refresh_metadata(&names)
        .await
        .map_err(on("source", "reading metadata"))?
        .topics
        .into_iter()
        .map(|(name, t)| (name, t.partitions.iter().map(|p| p.partition).collect()))
        .collect();
    let mut ranges = ValidRanges::new(destination, topics).await?;
    for group in &groups {
        let id = &group.group_id;
        let skip = |reason: String| SkippedGroup { group: id.clone(), reason };
        let there = destination_groups.get(id);
        if let Some(other) = there.filter(|t| !t.is_share()) {
            let kind = if is_consumer_group(other) {
                "consumer"
            } else if other.group_type.is_empty() {
                other.protocol_type.as_str()
            } else {
                other.group_type.as_str()
            };
            report.skipped.push(skip(format!("a share group on the source and a {kind} group on the destination")));
            continue;
        }
        if there.is_some() {
            match destination.describe_share_group(id).await.map_err(on("destination", format!("describing share group {id}")))? {
                Some(d) if !d.members.is_empty() => {
                    report.skipped.push(skip(format!("has {} active member(s) on the destination (state {})", d.members.len(), d.state)));
                    continue;
                }
                _ => {}
            }
        }
        let start_offsets = match source.describe_share_group_offsets(id, &partitions).await {
            Ok(o) => o,
            Err(e) => {
                report.skipped.push(skip(format!("cannot read its start offsets on the source: {e}")));
                continue;
            }
        };
        let mut wanted: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for ((topic, partition), offset) in start_offsets {
            if let Some(clamped) = ranges.clamp(&topic, partition, offset).await {
                wanted.insert((topic, partition), clamped);
            }
        }
        if wanted.is_empty() {
            continue;
        }
        if there.is_some() {
            let mut asked: BTreeMap<String, Vec<i32>> = BTreeMap::new();
            for (topic, partition) in wanted.keys() {
                asked.entry(topic.clone()).or_default().push(*partition);
            }
            let current =
                destination.describe_share_group_offsets(id, &asked).await.map_err(on("destination", format!("reading start offsets of share group {id}")))?;
            wanted.retain(|k, v| current.get(k) != Some(v));
            if wanted.is_empty() {
                continue;
            }
        }
        match destination.alter_share_group_offsets(id, &wanted).await {
            Ok(()) => report.altered.extend(wanted.into_iter().map(|((t, p), o)| (id.clone(), t, p, o))),
            // A member joined on the destination meanwhile (NON_EMPTY_GROUP): its offsets are its own.
            Err(e) => report.skipped.push(skip(format!("alter refused: {e}"))),
        }
    }
    Ok(report)
}
