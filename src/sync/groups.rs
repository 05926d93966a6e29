//! Consumer group offsets, copied from the source to the destination without translation (offsets
//! are equal on both sides) and without a leader epoch (spec §5, §7).
//!
//! One run: list the source's consumer groups matching the filter; skip groups that have active
//! members on the destination (they own their offsets there) and names that are a consumer group on
//! the source and a share group on the destination (the opposite conflict is reported by
//! [`super::share_groups`], so each conflict is reported once); read each group's committed offsets
//! for the mirror's topics; clamp each into the destination partition's valid range (log start to
//! what has been mirrored so far, [`ValidRanges`]); commit what differs from the destination's
//! current offsets. Share groups are synced by [`super::share_groups`].

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use crate::client::{Client, ClientError, IsolationLevel, ListedGroup, OffsetSpec};

/// Which groups are synced: `groups.include` and `groups.exclude`, regex lists matched against the
/// whole group id (default: all included, none excluded).
#[derive(Debug, Clone)]
pub struct GroupFilter {
    include: Vec<Regex>,
    exclude: Vec<Regex>,
}

impl Default for GroupFilter {
    fn default() -> Self {
        Self { include: vec![Regex::new("^(?:.*)$").expect("invariant: constant regex")], exclude: Vec::new() }
    }
}

impl GroupFilter {
    /// From the two lists of patterns; each must match a whole group id.
    ///
    /// # Errors
    /// [`SyncError::InvalidPattern`] naming the setting and the pattern.
    pub fn new(include: &[&str], exclude: &[&str]) -> Result<Self, SyncError> {
        let compile = |key: &'static str, patterns: &[&str]| -> Result<Vec<Regex>, SyncError> {
            patterns
                .iter()
                .map(|p| Regex::new(&format!("^(?:{p})$")).map_err(|e| SyncError::InvalidPattern { key, pattern: (*p).to_owned(), message: e.to_string() }))
                .collect()
        };
        Ok(Self { include: compile("groups.include", include)?, exclude: compile("groups.exclude", exclude)? })
    }

    /// True if `group` is synced.
    pub fn matches(&self, group: &str) -> bool {
        self.include.iter().any(|r| r.is_match(group)) && !self.exclude.iter().any(|r| r.is_match(group))
    }
}

/// A group left alone in a run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedGroup {
    /// Group id.
    pub group: String,
    /// Why.
    pub reason: String,
}

/// What one run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSyncReport {
    /// Offsets committed on the destination: `(group, topic, partition, offset)`.
    pub committed: Vec<(String, String, i32, i64)>,
    /// Groups left alone.
    pub skipped: Vec<SkippedGroup>,
}

/// A sync run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// A pattern setting does not compile.
    #[error("invalid regex `{pattern}` in `{key}`: {message}")]
    InvalidPattern { key: &'static str, pattern: String, message: String },
    /// A cluster call failed.
    #[error("{side} cluster: {what}")]
    Cluster {
        side: &'static str,
        what: String,
        #[source]
        source: Box<ClientError>,
    },
    /// The ACL ledger could not be read or written.
    #[error(transparent)]
    Ledger(#[from] super::acls::LedgerError),
}

pub(crate) fn on(side: &'static str, what: impl Into<String>) -> impl FnOnce(ClientError) -> SyncError {
    let what = what.into();
    move |source| SyncError::Cluster { side, what, source: Box::new(source) }
}

/// The valid offset range of each destination partition of the mirror topics (log start offset to
/// log end offset, which is what has been mirrored so far), read on first use and kept for one run.
/// Partitions the destination does not have (yet) have none, so nothing is written for them.
pub(crate) struct ValidRanges<'a> {
    destination: &'a Client,
    /// Partitions per topic in the destination's metadata at the start of the run.
    known: BTreeMap<String, BTreeSet<i32>>,
    ranges: BTreeMap<(String, i32), Option<(i64, i64)>>,
}

impl<'a> ValidRanges<'a> {
    /// Reads the destination's metadata for `topics` (which must not be empty: an empty list asks
    /// for every topic).
    pub(crate) async fn new(destination: &'a Client, topics: &BTreeSet<String>) -> Result<Self, SyncError> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let metadata = destination.refresh_metadata(&names).await.map_err(on("destination", "reading metadata"))?;
        let known = metadata.topics.into_iter().map(|(name, t)| (name, t.partitions.iter().map(|p| p.partition).collect())).collect();
        Ok(Self { destination, known, ranges: BTreeMap::new() })
    }

    /// `offset` clamped into the valid range of `topic`-`partition` on the destination, or `None`
    /// if that partition is not there (or its offsets cannot be read now: the next run retries).
    pub(crate) async fn clamp(&mut self, topic: &str, partition: i32, offset: i64) -> Option<i64> {
        let key = (topic.to_owned(), partition);
        if !self.ranges.contains_key(&key) {
            let range = if self.known.get(topic).is_some_and(|p| p.contains(&partition)) {
                let start = self.destination.list_offset(topic, partition, OffsetSpec::Earliest, IsolationLevel::ReadUncommitted).await;
                let end = self.destination.list_offset(topic, partition, OffsetSpec::Latest, IsolationLevel::ReadUncommitted).await;
                start.ok().zip(end.ok())
            } else {
                None
            };
            self.ranges.insert(key.clone(), range);
        }
        self.ranges.get(&key).copied().flatten().map(|(start, end)| offset.clamp(start, end))
    }
}

/// Consumer groups (classic or KIP-848 protocol), not share, connect or streams groups.
pub(crate) fn is_consumer_group(g: &ListedGroup) -> bool {
    !g.is_share() && (g.protocol_type == "consumer" || g.protocol_type.is_empty() || g.group_type.eq_ignore_ascii_case("consumer"))
}

/// One sync run for the mirror topics `topics`.
///
/// # Errors
/// [`SyncError::Cluster`] if a cluster cannot be read or written; a problem with one group only
/// skips that group (in the report).
pub async fn sync_group_offsets(source: &Client, destination: &Client, topics: &BTreeSet<String>, filter: &GroupFilter) -> Result<GroupSyncReport, SyncError> {
    let mut report = GroupSyncReport::default();
    if topics.is_empty() {
        return Ok(report);
    }
    let source_groups = source.list_groups().await.map_err(on("source", "listing groups"))?;
    let destination_groups: BTreeMap<String, ListedGroup> =
        destination.list_groups().await.map_err(on("destination", "listing groups"))?.into_iter().map(|g| (g.group_id.clone(), g)).collect();
    let mut ranges = ValidRanges::new(destination, topics).await?;
    for group in source_groups.iter().filter(|g| filter.matches(&g.group_id)) {
        let skip = |reason: String| SkippedGroup { group: group.group_id.clone(), reason };
        let there = destination_groups.get(&group.group_id);
        // Share groups, and their name conflicts, are the share group sync's.
        if group.is_share() || !is_consumer_group(group) {
            continue;
        }
        if there.is_some_and(ListedGroup::is_share) {
            report.skipped.push(skip("a consumer group on the source and a share group on the destination".to_owned()));
            continue;
        }
        if let Some(t) = there.filter(|t| t.has_active_members()) {
            report.skipped.push(skip(format!("has active members on the destination (state {})", t.state)));
            continue;
        }
        let committed = match source.offset_fetch(&group.group_id).await {
            Ok(c) => c,
            Err(e) => {
                report.skipped.push(skip(format!("cannot read its offsets on the source: {e}")));
                continue;
            }
        };
        let mut wanted: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for ((topic, partition), offset) in committed {
            if !topics.contains(&topic) {
                continue;
            }
            if let Some(clamped) = ranges.clamp(&topic, partition, offset).await {
                wanted.insert((topic, partition), clamped);
            }
        }
        if wanted.is_empty() {
            continue;
        }
        let current = if there.is_some() {
            destination.offset_fetch(&group.group_id).await.map_err(on("destination", format!("reading offsets of {}", group.group_id)))?
        } else {
            BTreeMap::new()
        };
        wanted.retain(|k, v| current.get(k) != Some(v));
        if wanted.is_empty() {
            continue;
        }
        match destination.offset_commit(&group.group_id, &wanted).await {
            Ok(()) => report.committed.extend(wanted.into_iter().map(|((t, p), o)| (group.group_id.clone(), t, p, o))),
            // A member joined on the destination meanwhile: its offsets are its own.
            Err(e) => report.skipped.push(skip(format!("commit refused: {e}"))),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_matches_whole_ids() {
        let f = GroupFilter::new(&["app-.*", "billing"], &["app-test-.*"]).unwrap();
        assert!(f.matches("app-orders"));
        assert!(f.matches("billing"));
        assert!(!f.matches("billing-2"));
        assert!(!f.matches("app-test-1"));
        assert!(GroupFilter::default().matches("anything"));
        let err = GroupFilter::new(&["("], &[]).unwrap_err();
        assert!(matches!(err, SyncError::InvalidPattern { key: "groups.include", .. }), "{err}");
    }

    #[test]
    fn active_and_share_groups() {
        let g = |state: &str, t: &str, p: &str| ListedGroup { group_id: "g".into(), protocol_type: p.into(), state: state.into(), group_type: t.into() };
        assert!(g("Stable", "classic", "consumer").has_active_members());
        assert!(!g("Empty", "consumer", "consumer").has_active_members());
        assert!(g("Empty", "share", "share").is_share());
        assert!(is_consumer_group(&g("Empty", "consumer", "consumer")));
        assert!(!is_consumer_group(&g("Empty", "classic", "connect")));
    }
}
