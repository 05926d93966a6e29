//! Which proxy instance copies which mirror topic, and runs which mirror's sync: every instance
//! sharing a `__mirror_state` joins one Kafka group (classic protocol, our own protocol type), the
//! way Kafka Connect workers share connectors. The broker's group coordinator notices a dead instance
//! when its session times out and rebalances the rest (spec §2: "an instance that dies loses its
//! share to others").
//!
//! ```text
//!   run_membership ── FindCoordinator ─► JoinGroup ─► (leader: every member id, sorted) ─► SyncGroup
//!        ▲                                                    │
//!        │                                                    ▼ Some(Ownership): owns(key) by
//!        │                                                      rendezvous hashing over the members
//!        │     Heartbeat every heartbeat_interval ◄───────────┘
//!        └── REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, or no heartbeat answered
//!            for 2/3 of the session timeout: publish None, revoke (stop every runner, wait), rejoin
//! ```
//!
//! The assignment is the member list itself, not a list of topics: each instance decides what it
//! owns from the key (`topic:NAME`, `mirror:NAME`) and the members, so a topic added after the
//! rebalance has an owner at once, on every instance alike, without another rebalance.
//!
//! Exclusivity: work is revoked (and its runners have stopped) before an instance rejoins, and the
//! coordinator only completes a rebalance once every live member rejoined, so two instances never
//! hold the same generation's work. An instance cut off from the coordinator stops its work after
//! 2/3 of the session timeout, before the coordinator hands its work to the others at the full
//! timeout.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::{Backoff, BackoffConfig, Client, ClientError, JoinGroupSpec, JoinedGroup};
use crate::protocol::ErrorCode;
use crate::protocol::mirror::wire::{DecodeError, Reader, Writer};

/// The group protocol type of proxy instances (a consumer group of that name cannot join).
pub const PROTOCOL_TYPE: &str = "kafka-mirror-proxy";
/// The one assignment protocol, with its version.
const PROTOCOL_NAME: &str = "rendezvous-v0";
/// Default session timeout: a killed instance's work moves after this long.
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// Default heartbeat interval (a third of the session timeout, as Kafka's clients do).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(3);
/// Default rebalance timeout: how long the coordinator waits for every member to stop its work and
/// rejoin.
pub const DEFAULT_REBALANCE_TIMEOUT: Duration = Duration::from_secs(60);

/// Settings of the membership.
#[derive(Debug, Clone)]
pub struct MembershipConfig {
    /// The group every instance sharing the state topic joins.
    pub group_id: String,
    /// Time without a heartbeat after which the coordinator drops an instance.
    pub session_timeout: Duration,
    /// Heartbeat spacing.
    pub heartbeat_interval: Duration,
    /// Time the coordinator waits for every instance to rejoin.
    pub rebalance_timeout: Duration,
    /// What this instance calls itself in the group (member metadata, logs).
    pub instance: String,
    /// Spacing of retries when the coordinator cannot be reached.
    pub retry_backoff: BackoffConfig,
}

impl MembershipConfig {
    /// Defaults for the group of `state_topic` (`kafka-mirror-proxy.<state topic>`).
    pub fn for_state_topic(state_topic: &str) -> Self {
        Self {
            group_id: format!("kafka-mirror-proxy.{state_topic}"),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            rebalance_timeout: DEFAULT_REBALANCE_TIMEOUT,
            instance: String::new(),
            retry_backoff: BackoffConfig {
                initial: Duration::from_millis(100),
                max: Duration::from_secs(2),
                deadline: Duration::MAX,
                ..BackoffConfig::default()
            },
        }
    }
}

/// One generation's view of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// Group generation.
    pub generation: i32,
    /// This instance's member id.
    pub me: String,
    /// Every member id, sorted.
    pub members: Vec<String>,
}

impl Ownership {
    /// The member owning `key`: the highest `hash(key, member)` (rendezvous hashing, so a member
    /// leaving moves only its own keys).
    pub fn owner_of(&self, key: &str) -> Option<&str> {
        self.members.iter().max_by_key(|m| (score(key, m), m.as_str())).map(String::as_str)
    }

    /// True if this instance owns `key`.
    pub fn owns(&self, key: &str) -> bool {
        self.owner_of(key) == Some(self.me.as_str())
    }
}

/// The ownership key of a mirror topic's copying.
pub fn topic_key(topic: &str) -> String {
    format!("topic:{topic}")
}

/// The ownership key of a mirror's sync jobs.
pub fn mirror_key(mirror: &str) -> String {
    format!("mirror:{mirror}")
}

/// FNV-1a, 64 bits, over key, a separator and member: stable across builds and platforms (every
/// instance must compute the same owner).
fn score(key: &str, member: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes().chain(std::iter::once(0)).chain(member.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits mix poorly for short inputs; a final avalanche (splitmix64) spreads them.
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Assignment version written by this build.
const ASSIGNMENT_VERSION: i16 = 0;

fn encode_members(members: &[String]) -> Bytes {
    let mut w = Writer::new();
    w.i16(ASSIGNMENT_VERSION);
    w.array_len(Some(members.len()));
    for m in members {
        w.string(m);
    }
    w.empty_tagged_fields();
    w.into_bytes()
}

fn decode_members(bytes: &[u8]) -> Result<Vec<String>, DecodeError> {
    let mut r = Reader::new(bytes);
    let version = r.i16("assignment version")?;
    if version != ASSIGNMENT_VERSION {
        return Err(DecodeError::UnsupportedVersion { api: "group assignment", version });
    }
    let n = r.array_len("members")?.unwrap_or(0);
    let mut members = Vec::new();
    for _ in 0..n {
        members.push(r.string("member")?);
    }
    r.skip_tagged_fields()?;
    r.finish()?;
    Ok(members)
}

/// Stops every piece of owned work and returns once it has stopped.
pub type Revoke = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// Why a generation ended.
#[derive(Debug)]
enum Ended {
    /// Rejoin, keeping the member id.
    Rejoin,
    /// Rejoin as a new member.
    RejoinAsNew,
    /// Shutting down.
    Leave,
}

/// Keeps this instance in the group until `cancel`, publishing what it owns to `assigned` (`None`
/// while it owns nothing), and calling `revoke` before each rejoin. Leaves the group on `cancel`.
pub async fn run_membership(
    client: Arc<Client>,
    config: MembershipConfig,
    assigned: watch::Sender<Option<Ownership>>,
    revoke: Revoke,
    cancel: CancellationToken,
) {
    let mut member_id = String::new();
    let mut backoff = Backoff::new(&config.retry_backoff);
    let mut coordinator: Option<i32>;
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let attempt = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            a = join_once(&client, &config, &member_id) => a,
        };
        let (joined, members, broker) = match attempt {
            Ok(j) => j,
            Err(e) => {
                if e.code() == Some(ErrorCode::UnknownMemberId) {
                    member_id.clear();
                }
                let delay =
                    if e.code() == Some(ErrorCode::RebalanceInProgress) { Duration::ZERO } else { backoff.next_delay().unwrap_or(config.retry_backoff.max) };
                // A rebalance in progress or a coordinator moving is routine; failing again and
                // again (a group id used by consumers, no access to the group) needs an operator.
                if backoff.attempts() > 3 {
                    warn!(group = %config.group_id, error = %crate::report::error_chain(&e), ?delay, "cannot join the instance group; this instance copies nothing until it does");
                } else {
                    debug!(group = %config.group_id, error = %crate::report::error_chain(&e), ?delay, "joining the instance group failed; retrying");
                }
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(delay) => {}
                }
                continue;
            }
        };
        backoff = Backoff::new(&config.retry_backoff);
        member_id = joined.member_id.clone();
        coordinator = Some(broker);
        let ownership = Ownership { generation: joined.generation_id, me: member_id.clone(), members };
        info!(
            group = %config.group_id,
            generation = ownership.generation,
            member = %ownership.me,
            instances = ownership.members.len(),
            "joined the instance group; taking over the work it assigns"
        );
        assigned.send_replace(Some(ownership.clone()));
        let ended = heartbeat_until_ended(&client, &config, &ownership, &mut coordinator, &cancel).await;
        assigned.send_replace(None);
        revoke().await;
        match ended {
            Ended::Leave => {
                if let Some(broker) = coordinator {
                    if let Err(e) = client.leave_group(broker, &config.group_id, &member_id).await {
                        debug!(group = %config.group_id, error = %e, "leaving the instance group failed; the session expires instead");
                    }
                }
                return;
            }
            Ended::RejoinAsNew => member_id.clear(),
            Ended::Rejoin => {}
        }
    }
}

/// One join: find the coordinator, JoinGroup, SyncGroup (the leader assigning the sorted member
/// list to everybody). Returns the join, the members and the coordinator.
async fn join_once(client: &Client, config: &MembershipConfig, member_id: &str) -> Result<(JoinedGroup, Vec<String>, i32), ClientError> {
    let coordinator = client.find_group_coordinator(&config.group_id).await?;
    let spec = JoinGroupSpec {
        group_id: config.group_id.clone(),
        member_id: member_id.to_owned(),
        session_timeout: config.session_timeout,
        rebalance_timeout: config.rebalance_timeout,
        protocol_type: PROTOCOL_TYPE.to_owned(),
        protocols: vec![(PROTOCOL_NAME.to_owned(), encode_members(std::slice::from_ref(&config.instance)))],
    };
    let joined = client.join_group(coordinator, &spec).await?;
    let assignments = if joined.is_leader() {
        let mut members: Vec<String> = joined.members.iter().map(|(id, _)| id.clone()).collect();
        members.sort();
        let bytes = encode_members(&members);
        members.into_iter().map(|m| (m, bytes.clone())).collect()
    } else {
        Vec::new()
    };
    let assignment = client.sync_group(coordinator, &config.group_id, &joined, PROTOCOL_TYPE, assignments).await?;
    let members = decode_members(&assignment).map_err(|e| ClientError::Broker {
        api_key: kafka_protocol::messages::ApiKey::SyncGroup,
        target: crate::client::Target { broker: Some(coordinator), ..crate::client::Target::default() },
        code: ErrorCode::InconsistentGroupProtocol,
        message: Some(format!("the group leader's assignment does not decode: {e}")),
    })?;
    if !members.contains(&joined.member_id) {
        return Err(ClientError::Broker {
            api_key: kafka_protocol::messages::ApiKey::SyncGroup,
            target: crate::client::Target { broker: Some(coordinator), ..crate::client::Target::default() },
            code: ErrorCode::RebalanceInProgress,
            message: Some("the assignment does not name this member".to_owned()),
        });
    }
    Ok((joined, members, coordinator))
}

async fn heartbeat_until_ended(
    client: &Client,
    config: &MembershipConfig,
    ownership: &Ownership,
    coordinator: &mut Option<i32>,
    cancel: &CancellationToken,
) -> Ended {
    let mut last_ok = Instant::now();
    let give_up = config.session_timeout * 2 / 3;
    loop {
        tokio::select! {
            biased;
            () = cancel.cancelled() => return Ended::Leave,
            () = tokio::time::sleep(config.heartbeat_interval) => {}
        }
        let broker = match *coordinator {
            Some(b) => b,
            None => match client.find_group_coordinator(&config.group_id).await {
                Ok(b) => {
                    *coordinator = Some(b);
                    b
                }
                Err(e) => {
                    if last_ok.elapsed() >= give_up {
                        warn!(group = %config.group_id, error = %e, "no group coordinator for 2/3 of the session timeout; stopping owned work");
                        return Ended::Rejoin;
                    }
                    continue;
                }
            },
        };
        let beat = tokio::time::timeout(
            config.heartbeat_interval.max(Duration::from_secs(1)),
            client.heartbeat(broker, &config.group_id, ownership.generation, &ownership.me),
        )
        .await;
        match beat {
            Ok(Ok(())) => last_ok = Instant::now(),
            Ok(Err(e)) => match e.code() {
                Some(ErrorCode::RebalanceInProgress) => {
                    info!(group = %config.group_id, generation = ownership.generation, "instance group rebalancing; handing back owned work");
                    return Ended::Rejoin;
                }
                Some(ErrorCode::IllegalGeneration) => return Ended::Rejoin,
                Some(ErrorCode::UnknownMemberId | ErrorCode::FencedInstanceId) => {
                    warn!(group = %config.group_id, member = %ownership.me, "no longer a member of the instance group (session expired?); stopping owned work and rejoining");
                    return Ended::RejoinAsNew;
                }
                _ => {
                    debug!(group = %config.group_id, error = %e, "heartbeat failed");
                    *coordinator = None;
                }
            },
            Err(_) => *coordinator = None,
        }
        if last_ok.elapsed() >= give_up {
            warn!(group = %config.group_id, "no heartbeat answered for 2/3 of the session timeout; stopping owned work");
            return Ended::Rejoin;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ownership(me: &str, members: &[&str]) -> Ownership {
        Ownership { generation: 1, me: me.to_owned(), members: members.iter().map(|m| (*m).to_owned()).collect() }
    }

    #[test]
    fn every_key_has_exactly_one_owner() {
        let members = ["a-1", "b-2", "c-3"];
        let views: Vec<Ownership> = members.iter().map(|m| ownership(m, &members)).collect();
        let mut counts = [0usize; 3];
        for i in 0..300 {
            let key = topic_key(&format!("orders.{i}"));
            let owners: Vec<usize> = views.iter().enumerate().filter(|(_, v)| v.owns(&key)).map(|(n, _)| n).collect();
            assert_eq!(owners.len(), 1, "{key}");
            counts[owners[0]] += 1;
        }
        // Spread: no member gets less than a fifth of 300 keys.
        assert!(counts.iter().all(|&c| c > 60), "{counts:?}");
    }

    #[test]
    fn a_member_leaving_moves_only_its_keys() {
        let before = ownership("a", &["a", "b", "c"]);
        let after = ownership("a", &["a", "b"]);
        for i in 0..200 {
            let key = format!("topic:t{i}");
            let was = before.owner_of(&key).unwrap();
            if was != "c" {
                assert_eq!(after.owner_of(&key), Some(was), "{key} moved though its owner stayed");
            }
        }
    }

    #[test]
    fn assignments_round_trip_and_garbage_is_an_error() {
        let members = vec!["x".to_owned(), "y-é".to_owned()];
        assert_eq!(decode_members(&encode_members(&members)).unwrap(), members);
        let bytes = encode_members(&members);
        for cut in 0..bytes.len() {
            assert!(decode_members(&bytes[..cut]).is_err());
        }
        let mut newer = bytes.to_vec();
        newer[1] = 9;
        assert!(decode_members(&newer).is_err());
    }
}
