//! Classic group membership calls (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for a group of our
//! own protocol type, the way Kafka Connect workers share work: the broker's group coordinator
//! tracks who is alive, the elected leader hands out an assignment, and every member learns it.
//!
//! Only the calls live here, one request each, no retry: the membership loop that decides what to do
//! on `REBALANCE_IN_PROGRESS`, `UNKNOWN_MEMBER_ID` and friends is the caller's (`mirror::ownership`).
//!
//! JoinGroup blocks at the coordinator until every member rejoined or the rebalance timeout passed,
//! so the client sending it needs a request timeout longer than the rebalance timeout.
//!
//! # References
//! KIP-394 (member id required on first join), KIP-345 (static membership, not used),
//! `JoinGroupRequest.json` … `LeaveGroupRequest.json` in Kafka's `clients/src/main/resources/common/message`.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest, join_group_request, leave_group_request, sync_group_request,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Client;
use super::error::{ClientError, Target};
use crate::protocol::ErrorCode;

/// What a member sends to join.
#[derive(Debug, Clone)]
pub struct JoinGroupSpec {
    /// Group id.
    pub group_id: String,
    /// The member id from the previous join, or empty for a new member.
    pub member_id: String,
    /// Time without a heartbeat after which the coordinator drops the member.
    pub session_timeout: Duration,
    /// Time the coordinator waits for every member to rejoin during a rebalance.
    pub rebalance_timeout: Duration,
    /// The protocol type every member of the group must share (ours, not `consumer`).
    pub protocol_type: String,
    /// Supported protocols by preference: name and member metadata.
    pub protocols: Vec<(String, Bytes)>,
}

/// A completed JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedGroup {
    /// The generation this join belongs to.
    pub generation_id: i32,
    /// Our member id.
    pub member_id: String,
    /// The leader's member id.
    pub leader: String,
    /// The protocol the coordinator chose.
    pub protocol_name: String,
    /// Every member with its metadata (only the leader receives them; empty for the others).
    pub members: Vec<(String, Bytes)>,
}

impl JoinedGroup {
    /// True if this member is the leader and must compute the assignment.
    pub fn is_leader(&self) -> bool {
        self.member_id == self.leader
    }
}

/// Versions used: the highest of each that `kafka-protocol` 0.18 speaks, all served by every broker
/// this project supports as a destination (3.7+). Pinned rather than negotiated because the request
/// fields differ between versions (LeaveGroup names members in a list from v3 on).
const JOIN_GROUP_VERSION: i16 = 9;
const SYNC_GROUP_VERSION: i16 = 5;
const HEARTBEAT_VERSION: i16 = 4;
const LEAVE_GROUP_VERSION: i16 = 5;

fn group_target(broker: i32, group: &str) -> Target {
    Target { broker: Some(broker), topic: Some(format!("group {group}")), ..Target::default() }
}

fn broker_error(api_key: ApiKey, broker: i32, group: &str, code: i16) -> Result<(), ClientError> {
    match ErrorCode::try_from_code(code) {
        None => Ok(()),
        Some(code) => Err(ClientError::Broker { api_key, target: group_target(broker, group), code, message: None }),
    }
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

impl Client {
    /// Joins `spec.group_id` at its coordinator `coordinator`. A first join without a member id is
    /// answered by the coordinator with `MEMBER_ID_REQUIRED` and a member id (KIP-394); the join is
    /// then sent again with it, so callers see one call.
    ///
    /// # Errors
    /// The coordinator's error (`REBALANCE_IN_PROGRESS`, `NOT_COORDINATOR`, `UNKNOWN_MEMBER_ID`, …)
    /// or a transport error.
    pub async fn join_group(&self, coordinator: i32, spec: &JoinGroupSpec) -> Result<JoinedGroup, ClientError> {
        let mut member_id = spec.member_id.clone();
        for _ in 0..2 {
            let request = JoinGroupRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(spec.group_id.clone())))
                .with_session_timeout_ms(millis(spec.session_timeout))
                .with_rebalance_timeout_ms(millis(spec.rebalance_timeout))
                .with_member_id(StrBytes::from_string(member_id.clone()))
                .with_protocol_type(StrBytes::from_string(spec.protocol_type.clone()))
                .with_protocols(
                    spec.protocols
                        .iter()
                        .map(|(name, metadata)| {
                            join_group_request::JoinGroupRequestProtocol::default()
                                .with_name(StrBytes::from_string(name.clone()))
                                .with_metadata(metadata.clone())
                        })
                        .collect(),
                );
            let response = self.send_to(coordinator, &request, Some(JOIN_GROUP_VERSION)).await?;
            if ErrorCode::try_from_code(response.error_code) == Some(ErrorCode::MemberIdRequired) && member_id.is_empty() {
                member_id = response.member_id.to_string();
                continue;
            }
            broker_error(ApiKey::JoinGroup, coordinator, &spec.group_id, response.error_code)?;
            return Ok(JoinedGroup {
                generation_id: response.generation_id,
                member_id: response.member_id.to_string(),
                leader: response.leader.to_string(),
                protocol_name: response.protocol_name.map(|p| p.to_string()).unwrap_or_default(),
                members: response.members.into_iter().map(|m| (m.member_id.to_string(), m.metadata)).collect(),
            });
        }
        Err(ClientError::Broker {
            api_key: ApiKey::JoinGroup,
            target: group_target(coordinator, &spec.group_id),
            code: ErrorCode::MemberIdRequired,
            message: Some("the coordinator asked for a member id twice".to_owned()),
        })
    }

    /// Completes a join: the leader sends every member's assignment, the others send none; each
    /// gets its own back.
    ///
    /// # Errors
    /// The coordinator's error or a transport error.
    pub async fn sync_group(
        &self,
        coordinator: i32,
        group: &str,
        joined: &JoinedGroup,
        protocol_type: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<Bytes, ClientError> {
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_generation_id(joined.generation_id)
            .with_member_id(StrBytes::from_string(joined.member_id.clone()))
            .with_protocol_type(Some(StrBytes::from_string(protocol_type.to_owned())))
            .with_protocol_name(Some(StrBytes::from_string(joined.protocol_name.clone())))
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(member, assignment)| {
                        sync_group_request::SyncGroupRequestAssignment::default().with_member_id(StrBytes::from_string(member)).with_assignment(assignment)
                    })
                    .collect(),
            );
        let response = self.send_to(coordinator, &request, Some(SYNC_GROUP_VERSION)).await?;
        broker_error(ApiKey::SyncGroup, coordinator, group, response.error_code)?;
        Ok(response.assignment)
    }

    /// Tells the coordinator that this member of generation `generation_id` is alive.
    ///
    /// # Errors
    /// `REBALANCE_IN_PROGRESS` (rejoin), `UNKNOWN_MEMBER_ID` / `ILLEGAL_GENERATION` (join anew), or a
    /// coordinator or transport error.
    pub async fn heartbeat(&self, coordinator: i32, group: &str, generation_id: i32, member_id: &str) -> Result<(), ClientError> {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_generation_id(generation_id)
            .with_member_id(StrBytes::from_string(member_id.to_owned()));
        let response = self.send_to(coordinator, &request, Some(HEARTBEAT_VERSION)).await?;
        broker_error(ApiKey::Heartbeat, coordinator, group, response.error_code)
    }

    /// Leaves the group at once (the others rebalance without waiting for our session to expire).
    ///
    /// # Errors
    /// The coordinator's error or a transport error.
    pub async fn leave_group(&self, coordinator: i32, group: &str, member_id: &str) -> Result<(), ClientError> {
        let request = LeaveGroupRequest::default().with_group_id(GroupId(StrBytes::from_string(group.to_owned()))).with_members(vec![
            leave_group_request::MemberIdentity::default()
                .with_member_id(StrBytes::from_string(member_id.to_owned()))
                .with_reason(Some(StrBytes::from_static_str("the proxy instance is shutting down"))),
        ]);
        let response = self.send_to(coordinator, &request, Some(LEAVE_GROUP_VERSION)).await?;
        broker_error(ApiKey::LeaveGroup, coordinator, group, response.error_code)?;
        for member in response.members {
            broker_error(ApiKey::LeaveGroup, coordinator, group, member.error_code)?;
        }
        Ok(())
    }
}
