//! The route task: finds the source leader of every partition without a loop (new, moved, on a
//! failed connection, or with an unknown topic) with one metadata request for all of them, checks
//! that the source is still the one recorded (topic ids, cluster id), and now and then does the same
//! for every registered partition, moving those whose leader changed.
//!
//! ```text
//!   woken (unrouted partitions, topics to check) or every IDENTITY_INTERVAL
//!     └─► refresh metadata of those topics ─┬─ topic unknown for 10 s ► FAILED: deleted
//!                                           ├─ other topic id ──────► FAILED: re-created
//!                                           ├─ other cluster id ────► FAILED: cluster changed
//!                                           ├─ leader known ────────► its loop (started if new)
//!                                           └─ no leader yet ───────► stays; again after a backoff
//! ```
//!
//! A topic missing from one answer is not yet a deleted topic: a broker that has just restarted (a
//! rolling restart of the source) answers UNKNOWN_TOPIC_OR_PARTITION until it has caught up with
//! the controller, and other topic errors pass too. Only a topic unknown to every answer for
//! [`DELETION_CONFIRM`] fails its partitions; meanwhile they are checked again after a backoff.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use super::{Fetched, Key, Shared, Table, lock};
use crate::client::Backoff;
use crate::protocol::ErrorCode;
use crate::replicator::error::ReplicationError;

/// How often every registered topic's identity and leaders are checked without a reason.
const IDENTITY_INTERVAL: Duration = Duration::from_secs(30);
/// How long a topic must stay unknown to the source before its partitions fail as deleted.
pub(super) const DELETION_CONFIRM: Duration = Duration::from_secs(10);

pub(super) async fn run(shared: Arc<Shared>) {
    let mut backoff: Option<Backoff> = None;
    let mut next_check = Instant::now() + IDENTITY_INTERVAL;
    loop {
        let retry_at = backoff.as_mut().map(|b| Instant::now() + b.next_delay().unwrap_or(shared.config.backoff.max));
        tokio::select! {
            biased;
            () = shared.cancel.cancelled() => return,
            () = shared.route.notified(), if retry_at.is_none() => {}
            () = tokio::time::sleep_until(retry_at.unwrap_or(next_check)), if retry_at.is_some() => {}
            () = tokio::time::sleep_until(next_check) => {}
        }
        let periodic = Instant::now() >= next_check;
        if periodic {
            next_check = Instant::now() + IDENTITY_INTERVAL;
        }
        let (topics, checked) = {
            let mut table = lock(&shared.table);
            let mut checked: HashSet<String> = std::mem::take(&mut table.check_topics).into_iter().collect();
            if periodic {
                checked.extend(table.partitions.keys().map(|(t, _)| t.clone()));
            }
            let mut topics = checked.clone();
            topics.extend(table.unrouted.iter().map(|(t, _)| t.clone()));
            (topics, checked)
        };
        if topics.is_empty() {
            backoff = None;
            continue;
        }
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let metadata = match shared.control.refresh_metadata(&names).await {
            Ok(m) => m,
            Err(e) => {
                debug!(error = %crate::report::error_chain(&e), "source metadata refresh failed; retrying");
                lock(&shared.table).check_topics.extend(checked);
                backoff.get_or_insert_with(|| Backoff::new(&shared.config.backoff));
                continue;
            }
        };
        let mut table = lock(&shared.table);
        // Identity: a changed source fails its partitions (not retried).
        let mut suspects: Vec<Key> = table.partitions.keys().filter(|(t, _)| checked.contains(t)).cloned().collect();
        suspects.extend(table.unrouted.iter().cloned());
        suspects.sort();
        suspects.dedup();
        let now = Instant::now();
        let mut recheck: HashSet<String> = HashSet::new();
        for key in &suspects {
            let Some(identity) = table.partitions.get(key).map(|reg| reg.identity.clone()) else { continue };
            let failure = match (metadata.topics.get(&key.0), &metadata.cluster_id) {
                (_, Some(cluster)) if !identity.cluster_id.is_empty() && *cluster != identity.cluster_id => {
                    Some(ReplicationError::SourceClusterChanged { recorded: identity.cluster_id.clone(), now: cluster.clone() })
                }
                (None, _) => {
                    let error = metadata.topic_errors.get(&key.0);
                    let unknown = matches!(error, None | Some(ErrorCode::UnknownTopicOrPartition));
                    let since = if unknown { *table.missing.entry(key.0.clone()).or_insert(now) } else { now };
                    if unknown && now.duration_since(since) >= DELETION_CONFIRM {
                        Some(ReplicationError::SourceTopicChanged { topic: key.0.clone(), detail: "was deleted".to_owned() })
                    } else {
                        debug!(topic = %key.0, ?error, "source topic missing from the metadata; checking again");
                        recheck.insert(key.0.clone());
                        None
                    }
                }
                (Some(t), _) => {
                    table.missing.remove(&key.0);
                    (!t.topic_id.is_nil() && !identity.topic_id.is_nil() && t.topic_id != identity.topic_id).then(|| ReplicationError::SourceTopicChanged {
                        topic: key.0.clone(),
                        detail: format!("was re-created (topic id {} is now {})", identity.topic_id, t.topic_id),
                    })
                }
            };
            if let Some(e) = failure {
                tracing::error!(topic = %key.0, partition = key.1, reason = %e.reason(), "source changed; partition FAILED");
                table.end(key, Fetched::Failed(e));
            }
        }
        {
            let Table { missing, partitions, .. } = &mut *table;
            missing.retain(|topic, _| partitions.keys().any(|(t, _)| t == topic));
        }
        if !recheck.is_empty() {
            table.check_topics.extend(recheck.iter().cloned());
            backoff.get_or_insert_with(|| Backoff::new(&shared.config.backoff));
        }
        // Leaders: unrouted partitions to their leader's loop; on the periodic check, partitions
        // whose leader moved too (their loop would also learn it from a fetch error).
        let mut moves: Vec<(Key, i32)> = Vec::new();
        for key in table.unrouted.iter() {
            if let Some(leader) = metadata.leader_of(&key.0, key.1) {
                moves.push((key.clone(), leader));
            }
        }
        if periodic {
            for (key, reg) in &table.partitions {
                if let (Some(owner), Some(leader)) = (reg.owner, metadata.leader_of(&key.0, key.1)) {
                    if owner.broker != leader {
                        moves.push((key.clone(), leader));
                    }
                }
            }
        }
        if !moves.is_empty() {
            debug!(partitions = moves.len(), periodic, "source partitions to their leaders' fetch loops");
        }
        for (key, leader) in moves {
            shared.assign(&mut table, &key, leader);
        }
        if table.unrouted.is_empty() {
            if recheck.is_empty() {
                backoff = None;
            }
        } else {
            debug!(partitions = table.unrouted.len(), "source partitions without a leader; looking again");
            backoff.get_or_insert_with(|| Backoff::new(&shared.config.backoff));
        }
    }
}
