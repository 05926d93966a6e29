//! Our Kafka client: connections, version negotiation, metadata, leader routing, and the typed calls
//! the replicator and the control plane need, with record data kept as raw `Bytes`.
//!
//! Owns sockets to brokers and everything about talking to one cluster. Does not own: what to copy or
//! when (that is `replicator/`), nor serving clients (`proxy/`). Uses `protocol/` for framing and
//! batches, and the `kafka-protocol` crate for message bodies.
//!
//! ```text
//!   Client (cluster.rs, calls.rs)
//!     ├── Metadata cache ── leader routing, refreshed on NotLeader / unknown topic
//!     └── BrokerConnection per broker (connection.rs)
//!           ├── opened: TCP ─► TLS (tls.rs) ─► ApiVersions ─► SASL (sasl.rs), per security.rs
//!           ├── writer task: whole frames from a bounded queue
//!           └── reader task: responses matched by correlation id
//! ```

mod acls;
mod backoff;
mod bulk;
mod calls;
mod cluster;
mod connection;
mod error;
mod fetch;
mod groups;
mod membership;
mod mirror_admin;
mod sasl;
mod security;
mod share_groups;
mod tls;
mod versions;

pub use acls::{
    ANY, AclBinding, AclFilter, PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED, RESOURCE_CLUSTER, RESOURCE_GROUP, RESOURCE_TOPIC, RESOURCE_TRANSACTIONAL_ID,
};
pub use backoff::{Backoff, BackoffConfig};
pub use bulk::{Outcomes, TopicPartition};
pub use calls::{
    AlterConfigOp, ClusterDescription, ConfigEntry, ConfigResource, IsolationLevel, NewTopic, OffsetSpec, ProduceOptions, ProducePartition, Produced,
    ProducerState, TxnMarker,
};
pub use cluster::{BrokerInfo, Client, ClientConfig, Metadata, PartitionInfo, TopicInfo};
pub use connection::{BrokerConnection, ConnectionConfig, REAUTH_FRACTION};
pub use error::{ClientError, ConnectionError, Target};
pub use fetch::{FetchOptions, FetchPartitionSpec, FetchSession, FetchSpec, Fetched, FetchedPartition};
pub use groups::ListedGroup;
pub use membership::{JoinGroupSpec, JoinedGroup};
pub use mirror_admin::{AdminClientError, MirrorAdminClient};
pub use sasl::SaslError;
pub use security::{SaslMechanism, SaslSettings, SecurityConfig, SecurityProtocol, TlsSettings};
pub use share_groups::ShareGroupDescription;
pub use tls::{MaybeTlsStream, TlsConnector};
pub use versions::{BrokerVersions, VersionPins};
