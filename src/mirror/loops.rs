//! Mirror loops (spec §7, issue 7): a source topic that is itself the destination topic of a mirror
//! on the source cluster, and not STOPPED there, is refused, so that mirrors cannot loop
//! (A → B → A would write a topic's copy back into the topic). Owns finding such topics; the
//! manager refuses them, per topic, in `add_topics` (and so in the sync's adding of new topics).
//!
//! ```text
//!   source_mirror_topics(source, state_topic)
//!     ├─ the source cluster's own state topic (metadata first: absent = none), read whole
//!     │    (store::read_state_topic) ─► Model ─► topics whose summary state is not STOPPED
//!     └─ if the source announces the mirror APIs in ApiVersions (it is a kafka-mirror-proxy):
//!          ListMirrors (topic names) ─► DescribeMirrors of the mirrors that have topics
//!          ─► topics with a partition not STOPPED
//!   the two answers merged: topic ─► the source's mirror name
//! ```
//!
//! Each way covers what the other misses: a state topic under another name than ours is found
//! only by asking the proxy; a proxy that lists no mirror to our principal only through its state
//! topic. The proxy is asked with the mirror's own connection settings (TLS, SASL).
//!
//! The mirror APIs are asked with [`crate::client::MirrorAdminClient`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::PartitionState;
use super::model::Model;
use super::store::{StoreError, read_state_topic};
use crate::client::{AdminClientError, MirrorAdminClient};
use crate::client::{Client, ClientError};
use crate::protocol::mirror::{DecodeError, DescribeMirrorsRequest, ListMirrorsRequest, MirrorApiKey, MirrorErrorCode};

/// Time for each mirror-API call to the source's proxy (a DescribeMirrors there reads offsets of
/// its own source and destination, which takes a few seconds per mirror at worst).
pub const MIRROR_API_TIMEOUT: Duration = Duration::from_secs(30);

/// The check could not tell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopCheckError {
    /// A call to the source failed (metadata, ApiVersions, reading its state topic).
    #[error("{what} on the source failed")]
    Source {
        what: String,
        #[source]
        source: Box<ClientError>,
    },
    /// A record of the source's state topic does not decode (a newer build wrote it?).
    #[error("`{topic}` on the source, offset {offset}: record does not decode")]
    CorruptState {
        topic: String,
        offset: i64,
        #[source]
        source: DecodeError,
    },
    /// The source's state topic could not be read, for another reason.
    #[error("reading `{topic}` on the source")]
    State {
        topic: String,
        #[source]
        source: Box<StoreError>,
    },
    /// The source's proxy announces the mirror APIs but could not be asked.
    #[error("asking the source's kafka-mirror-proxy for its mirrors")]
    Proxy {
        #[source]
        source: Box<AdminClientError>,
    },
    /// The source's proxy answered a mirror API with an error.
    #[error("the source's kafka-mirror-proxy answered {api} with {}: {}", code.name(), message.as_deref().unwrap_or(""))]
    ProxyRefused { api: MirrorApiKey, code: MirrorErrorCode, message: Option<String> },
}

/// The source's mirror topics that are not STOPPED, each with the name of its mirror at the
/// source: from the source's state topic `state_topic` and, if the source is a
/// kafka-mirror-proxy, from its ListMirrors/DescribeMirrors. An absent state topic and a source
/// without the mirror APIs mean no mirror topics.
///
/// # Errors
/// [`LoopCheckError`] if either way cannot be read; the caller cannot tell and should not add.
pub async fn source_mirror_topics(source: &Client, state_topic: &str) -> Result<BTreeMap<String, String>, LoopCheckError> {
    let mut found = from_state_topic(source, state_topic).await?;
    for (topic, mirror) in from_proxy(source).await? {
        found.entry(topic).or_insert(mirror);
    }
    Ok(found)
}

async fn from_state_topic(source: &Client, topic: &str) -> Result<BTreeMap<String, String>, LoopCheckError> {
    let fail = |action: &str| {
        let what = format!("reading `{topic}`: {action}");
        move |e: ClientError| LoopCheckError::Source { what, source: Box::new(e) }
    };
    // Metadata leaves out a topic that does not exist (or that we may not describe).
    if !source.refresh_metadata(&[topic]).await.map_err(fail("Metadata"))?.topics.contains_key(topic) {
        return Ok(BTreeMap::new());
    }
    let (records, _) = read_state_topic(source, topic).await.map_err(|e| match e {
        StoreError::Destination { action, source, .. } => fail(action)(*source),
        StoreError::Corrupt { offset, source, .. } => LoopCheckError::CorruptState { topic: topic.to_owned(), offset, source },
        other => LoopCheckError::State { topic: topic.to_owned(), source: Box::new(other) },
    })?;
    let mut model = Model::default();
    for record in &records {
        // No secret key: sealed settings stay closed, and only topics are read here.
        model.apply(record, None);
    }
    Ok(model.topics.iter().filter(|(_, t)| t.summary_state() != PartitionState::Stopped).map(|(name, t)| (name.clone(), t.record.mirror.clone())).collect())
}

async fn from_proxy(source: &Client) -> Result<BTreeMap<String, String>, LoopCheckError> {
    let versions = source.broker_versions().await.map_err(|e| LoopCheckError::Source { what: "reading its ApiVersions".to_owned(), source: Box::new(e) })?;
    let announced = [MirrorApiKey::ListMirrors, MirrorApiKey::DescribeMirrors].iter().all(|k| versions.range_of_key(k.key()).is_some());
    if !announced {
        return Ok(BTreeMap::new());
    }
    let config = source.config();
    let proxy = |source| LoopCheckError::Proxy { source: Box::new(source) };
    let bootstrap = config.bootstrap_servers.join(",");
    let mut admin = MirrorAdminClient::connect_with(&bootstrap, MIRROR_API_TIMEOUT, config.connection.security.clone()).await.map_err(proxy)?;
    let listed = admin.send(&ListMirrorsRequest { include_topic_names: true }).await.map_err(proxy)?;
    refused(MirrorApiKey::ListMirrors, listed.error_code, listed.error_message)?;
    let with_topics: Vec<String> = listed.mirrors.into_iter().filter(|m| m.topic_count > 0).map(|m| m.mirror_name).collect();
    if with_topics.is_empty() {
        return Ok(BTreeMap::new());
    }
    let described = admin.send(&DescribeMirrorsRequest { mirror_names: Some(with_topics) }).await.map_err(proxy)?;
    refused(MirrorApiKey::DescribeMirrors, described.error_code, described.error_message)?;
    let mut found = BTreeMap::new();
    for mirror in described.mirrors {
        // A mirror deleted since the listing has nothing left to loop with.
        if MirrorErrorCode::from_code(mirror.error_code) == MirrorErrorCode::UnknownMirror {
            continue;
        }
        refused(MirrorApiKey::DescribeMirrors, mirror.error_code, mirror.error_message)?;
        for topic in mirror.topics {
            if topic.partitions.is_empty() || topic.partitions.iter().any(|p| p.state != "STOPPED") {
                found.insert(topic.topic_name, mirror.mirror_name.clone());
            }
        }
    }
    Ok(found)
}

fn refused(api: MirrorApiKey, code: i16, message: Option<String>) -> Result<(), LoopCheckError> {
    let code = MirrorErrorCode::from_code(code);
    if code.is_ok() { Ok(()) } else { Err(LoopCheckError::ProxyRefused { api, code, message }) }
}
