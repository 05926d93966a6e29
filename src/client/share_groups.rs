//! Share group calls (KIP-932, Kafka 4.1+): describing a share group, reading and altering its
//! share-partition start offsets (SPSO); and what a cluster supports (its ApiVersions), so callers
//! can tell a cluster without share groups from a failing one.
//!
//! Start offsets are altered the way Kafka's admin client does it: AlterShareGroupOffsets to the
//! group coordinator, which refuses a group with members (`NON_EMPTY_GROUP`) and creates the group
//! if it does not exist. No leader epoch travels (spec §5).
//!
//! # References
//! - KIP-932 (Queues for Kafka): <https://cwiki.apache.org/confluence/display/KAFKA/KIP-932%3A+Queues+for+Kafka>
//! - Messages: `ShareGroupDescribe` (key 77, v1), `DescribeShareGroupOffsets` (key 90, v0 here: the
//!   `kafka-protocol` crate does not know v1, which only adds `Lag`), `AlterShareGroupOffsets` (key
//!   91, v0), in Kafka's `clients/src/main/resources/common/message/`.

use std::collections::BTreeMap;

use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, ApiKey, DescribeShareGroupOffsetsRequest, GroupId, ShareGroupDescribeRequest, TopicName};
use kafka_protocol::messages::{alter_share_group_offsets_request, describe_share_group_offsets_request};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Client;
use super::error::{ClientError, Target};
use super::versions::BrokerVersions;
use crate::protocol::ErrorCode;

/// A share group as ShareGroupDescribe shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    /// Group id.
    pub group_id: String,
    /// `Empty`, `Stable`, `Dead`, …
    pub state: String,
    /// Member ids of the members now in the group.
    pub members: Vec<String>,
}

fn group_target(group: &str) -> Target {
    Target { topic: Some(format!("share group {group}")), ..Target::default() }
}

fn fail(api_key: ApiKey, target: Target, code: i16, message: Option<&StrBytes>) -> Result<(), ClientError> {
    match ErrorCode::try_from_code(code) {
        None => Ok(()),
        Some(code) => Err(ClientError::Broker { api_key, target, code, message: message.map(ToString::to_string) }),
    }
}

impl Client {
    /// What a live broker of the cluster supports (the ApiVersions it answered when connected).
    /// In a cluster being upgraded brokers may differ; this is one broker's view.
    ///
    /// # Errors
    /// [`ClientError::Connection`] if no broker can be connected to.
    pub async fn broker_versions(&self) -> Result<BrokerVersions, ClientError> {
        self.retrying(&[], || async {
            let broker = self.any_broker()?;
            Ok(self.connection(broker).await?.versions().clone())
        })
        .await
    }

    /// True if the cluster can serve `api_key` at a version this client speaks.
    ///
    /// # Errors
    /// As [`Client::broker_versions`].
    pub async fn supports(&self, api_key: ApiKey) -> Result<bool, ClientError> {
        Ok(self.broker_versions().await?.choose(api_key, None).is_some())
    }

    /// The share group `group`, or `None` if there is no share group by that name (none at all, or
    /// a group of another type).
    ///
    /// # Errors
    /// The group's error (e.g. `GroupAuthorizationFailed`) once retries run out.
    pub async fn describe_share_group(&self, group: &str) -> Result<Option<ShareGroupDescription>, ClientError> {
        let request = ShareGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_owned()))])
            .with_include_authorized_operations(false);
        self.retrying(&[], || async {
            let coordinator = self.find_group_coordinator(group).await?;
            let response = self.send_to(coordinator, &request, None).await?;
            let Some(described) = response.groups.into_iter().find(|g| g.group_id.0.as_str() == group) else {
                return Err(ClientError::MissingInResponse { api_key: ApiKey::ShareGroupDescribe, target: group_target(group) });
            };
            if described.error_code == ErrorCode::GroupIdNotFound.code() {
                return Ok(None);
            }
            fail(ApiKey::ShareGroupDescribe, group_target(group), described.error_code, described.error_message.as_ref())?;
            Ok(Some(ShareGroupDescription {
                group_id: group.to_owned(),
                state: described.group_state.to_string(),
                members: described.members.iter().map(|m| m.member_id.to_string()).collect(),
            }))
        })
        .await
    }

    /// The share-partition start offsets of `group` for `topics` (topic → partitions), as
    /// `(topic, partition) -> start offset`. Partitions the group has no start offset for (never
    /// initialized) are left out; so is everything if the group does not exist.
    ///
    /// # Errors
    /// The group's error once retries run out.
    pub async fn describe_share_group_offsets(&self, group: &str, topics: &BTreeMap<String, Vec<i32>>) -> Result<BTreeMap<(String, i32), i64>, ClientError> {
        if topics.is_empty() {
            return Ok(BTreeMap::new());
        }
        let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
                .with_topics(Some(
                    topics
                        .iter()
                        .map(|(t, partitions)| {
                            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default()
                                .with_topic_name(TopicName(StrBytes::from_string(t.clone())))
                                .with_partitions(partitions.clone())
                        })
                        .collect(),
                )),
        ]);
        self.retrying(&[], || async {
            let coordinator = self.find_group_coordinator(group).await?;
            let response = self.send_to(coordinator, &request, None).await?;
            let mut out = BTreeMap::new();
            for g in response.groups.into_iter().filter(|g| g.group_id.0.as_str() == group) {
                if g.error_code == ErrorCode::GroupIdNotFound.code() {
                    return Ok(BTreeMap::new());
                }
                fail(ApiKey::DescribeShareGroupOffsets, group_target(group), g.error_code, g.error_message.as_ref())?;
                for t in g.topics {
                    for p in t.partitions {
                        let target = Target { broker: Some(coordinator), topic: Some(t.topic_name.0.to_string()), partition: Some(p.partition_index) };
                        // A topic the group has no state for answers per partition with an error
                        // (UNKNOWN_TOPIC_OR_PARTITION) or a start offset of -1: nothing to read.
                        if p.error_code == ErrorCode::UnknownTopicOrPartition.code() {
                            continue;
                        }
                        fail(ApiKey::DescribeShareGroupOffsets, target, p.error_code, p.error_message.as_ref())?;
                        if p.start_offset >= 0 {
                            out.insert((t.topic_name.0.to_string(), p.partition_index), p.start_offset);
                        }
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    /// Sets the share-partition start offsets of `group` (which must have no members; it is
    /// created if it does not exist). Idempotent, so retried.
    ///
    /// # Errors
    /// E.g. `NonEmptyGroup` if members joined, `GroupIdNotFound` if the name is a group of another
    /// type, or a partition's error.
    pub async fn alter_share_group_offsets(&self, group: &str, offsets: &BTreeMap<(String, i32), i64>) -> Result<(), ClientError> {
        let mut topics: BTreeMap<&str, Vec<alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition>> = BTreeMap::new();
        for ((topic, partition), offset) in offsets {
            topics.entry(topic.as_str()).or_default().push(
                alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                    .with_partition_index(*partition)
                    .with_start_offset(*offset),
            );
        }
        let request = AlterShareGroupOffsetsRequest::default().with_group_id(GroupId(StrBytes::from_string(group.to_owned()))).with_topics(
            topics
                .into_iter()
                .map(|(t, partitions)| {
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(StrBytes::from_string(t.to_owned())))
                        .with_partitions(partitions)
                })
                .collect(),
        );
        self.retrying(&[], || async {
            let coordinator = self.find_group_coordinator(group).await?;
            let response = self.send_to(coordinator, &request, None).await?;
            fail(ApiKey::AlterShareGroupOffsets, group_target(group), response.error_code, response.error_message.as_ref())?;
            for t in response.responses {
                for p in t.partitions {
                    let target = Target { broker: Some(coordinator), topic: Some(t.topic_name.0.to_string()), partition: Some(p.partition_index) };
                    fail(ApiKey::AlterShareGroupOffsets, target, p.error_code, p.error_message.as_ref())?;
                }
            }
            Ok(())
        })
        .await
    }
}
