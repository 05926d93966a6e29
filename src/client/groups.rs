//! Group calls: finding a group's coordinator, listing groups, reading and committing offsets.
//!
//! Offsets are committed the way Kafka's admin client alters them for a group with no active member:
//! generation -1, no member id, and here without a leader epoch (spec §5: a source epoch means
//! nothing on the destination).

use std::collections::BTreeMap;

use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest, TopicName};
use kafka_protocol::messages::{offset_commit_request, offset_fetch_request};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Client;
use super::error::{ClientError, Target};
use crate::protocol::ErrorCode;

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    /// Group id.
    pub group_id: String,
    /// `consumer` for consumer groups (either protocol), `share`, `connect`, … (may be empty).
    pub protocol_type: String,
    /// `Stable`, `Empty`, `Dead`, … (ListGroups v4+).
    pub state: String,
    /// `classic`, `consumer`, `share`, `streams` (ListGroups v5+; empty before).
    pub group_type: String,
}

impl ListedGroup {
    /// True for share groups.
    pub fn is_share(&self) -> bool {
        self.group_type.eq_ignore_ascii_case("share") || self.protocol_type == "share"
    }

    /// True if members are active (a state other than Empty or Dead).
    pub fn has_active_members(&self) -> bool {
        !(self.state.eq_ignore_ascii_case("Empty") || self.state.eq_ignore_ascii_case("Dead") || self.state.is_empty())
    }
}

fn group_target(group: &str) -> Target {
    Target { topic: Some(format!("group {group}")), ..Target::default() }
}

impl Client {
    /// The broker coordinating `group` (key type 0), retried while coordinators load.
    ///
    /// # Errors
    /// The coordinator lookup's error once retries run out.
    pub async fn find_group_coordinator(&self, group: &str) -> Result<i32, ClientError> {
        self.retrying(&[], || async {
            let broker = self.any_broker()?;
            let conn = self.connection(broker).await?;
            let version = conn.version_for(ApiKey::FindCoordinator, None).map_err(|source| ClientError::Connection {
                broker,
                api_key: ApiKey::FindCoordinator,
                source,
            })?;
            // v4 replaced the single key by a list of keys.
            let key = StrBytes::from_string(group.to_owned());
            let request = if version >= 4 {
                FindCoordinatorRequest::default().with_key_type(0).with_coordinator_keys(vec![key])
            } else {
                FindCoordinatorRequest::default().with_key_type(0).with_key(key)
            };
            let response =
                conn.send(&request, Some(version)).await.map_err(|source| ClientError::Connection { broker, api_key: ApiKey::FindCoordinator, source })?;
            // v4+ answers per key; older versions at the top level.
            let (code, node, message) = match response.coordinators.first() {
                Some(c) => (c.error_code, c.node_id.0, c.error_message.clone()),
                None => (response.error_code, response.node_id.0, response.error_message.clone()),
            };
            if let Some(code) = ErrorCode::try_from_code(code) {
                return Err(ClientError::Broker {
                    api_key: ApiKey::FindCoordinator,
                    target: group_target(group),
                    code,
                    message: message.map(|m| m.to_string()),
                });
            }
            Ok(node)
        })
        .await
    }

    /// Every group of the cluster (ListGroups on each broker, merged).
    ///
    /// # Errors
    /// A broker's error once retries run out.
    pub async fn list_groups(&self) -> Result<Vec<ListedGroup>, ClientError> {
        let brokers: Vec<i32> = self.cached_metadata().brokers.keys().copied().collect();
        let mut all = BTreeMap::new();
        for broker in brokers {
            let groups = self
                .retrying(&[], || async {
                    let response = self.send_to(broker, &ListGroupsRequest::default(), None).await?;
                    if let Some(code) = ErrorCode::try_from_code(response.error_code) {
                        return Err(ClientError::Broker {
                            api_key: ApiKey::ListGroups,
                            target: Target { broker: Some(broker), ..Target::default() },
                            code,
                            message: None,
                        });
                    }
                    Ok(response.groups)
                })
                .await?;
            for g in groups {
                let listed = ListedGroup {
                    group_id: g.group_id.0.to_string(),
                    protocol_type: g.protocol_type.to_string(),
                    state: g.group_state.to_string(),
                    group_type: g.group_type.to_string(),
                };
                all.insert(listed.group_id.clone(), listed);
            }
        }
        Ok(all.into_values().collect())
    }

    /// The committed offsets of `group` (all topics), as `(topic, partition) -> offset`; partitions
    /// without a committed offset are left out.
    ///
    /// # Errors
    /// The group's error (e.g. `GroupAuthorizationFailed`) once retries run out.
    pub async fn offset_fetch(&self, group: &str) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
        self.retrying(&[], || async {
            let coordinator = self.find_group_coordinator(group).await?;
            let conn = self.connection(coordinator).await?;
            let version = conn.version_for(ApiKey::OffsetFetch, None).map_err(|source| ClientError::Connection {
                broker: coordinator,
                api_key: ApiKey::OffsetFetch,
                source,
            })?;
            let gid = GroupId(StrBytes::from_string(group.to_owned()));
            let request = if version >= 8 {
                OffsetFetchRequest::default().with_groups(vec![offset_fetch_request::OffsetFetchRequestGroup::default().with_group_id(gid).with_topics(None)])
            } else {
                OffsetFetchRequest::default().with_group_id(gid).with_topics(None)
            };
            let response = conn.send(&request, Some(version)).await.map_err(|source| ClientError::Connection {
                broker: coordinator,
                api_key: ApiKey::OffsetFetch,
                source,
            })?;
            let mut out = BTreeMap::new();
            let fail = |code: i16| match ErrorCode::try_from_code(code) {
                None => Ok(()),
                Some(code) => Err(ClientError::Broker { api_key: ApiKey::OffsetFetch, target: group_target(group), code, message: None }),
            };
            if version >= 8 {
                for g in response.groups {
                    fail(g.error_code)?;
                    for t in g.topics {
                        for p in t.partitions.into_iter().filter(|p| p.error_code == 0 && p.committed_offset >= 0) {
                            out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
                        }
                    }
                }
            } else {
                fail(response.error_code)?;
                for t in response.topics {
                    for p in t.partitions.into_iter().filter(|p| p.error_code == 0 && p.committed_offset >= 0) {
                        out.insert((t.name.0.to_string(), p.partition_index), p.committed_offset);
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// Commits `offsets` for `group`, which must have no active member (generation -1, no member
    /// id, no leader epoch). Idempotent, so retried.
    ///
    /// # Errors
    /// E.g. `UnknownMemberId` if the group has active members, or a partition's error.
    pub async fn offset_commit(&self, group: &str, offsets: &BTreeMap<(String, i32), i64>) -> Result<(), ClientError> {
        let mut topics: BTreeMap<&str, Vec<offset_commit_request::OffsetCommitRequestPartition>> = BTreeMap::new();
        for ((topic, partition), offset) in offsets {
            topics.entry(topic.as_str()).or_default().push(
                offset_commit_request::OffsetCommitRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_committed_offset(*offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(StrBytes::from_static_str(""))),
            );
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(StrBytes::from_static_str(""))
            .with_retention_time_ms(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, parts)| {
                        offset_commit_request::OffsetCommitRequestTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_owned())))
                            .with_partitions(parts)
                    })
                    .collect(),
            );
        self.retrying(&[], || async {
            let coordinator = self.find_group_coordinator(group).await?;
            let response = self.send_to(coordinator, &request, None).await?;
            for t in response.topics {
                for p in t.partitions {
                    if let Some(code) = ErrorCode::try_from_code(p.error_code) {
                        return Err(ClientError::Broker {
                            api_key: ApiKey::OffsetCommit,
                            target: Target { broker: Some(coordinator), topic: Some(t.name.0.to_string()), partition: Some(p.partition_index) },
                            code,
                            message: Some(format!("committing for group {group}")),
                        });
                    }
                }
            }
            Ok(())
        })
        .await
    }
}
