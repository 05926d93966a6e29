//! [`AdminHandler::handle`]: one mirror request body in, one response body out.
//!
//! ```text
//!   (api_key, api_version, body, principal)
//!     ├─ not a mirror api key ─────────────► None (the caller forwards the request as before)
//!     ├─ version not served ───────────────► UNSUPPORTED_VERSION response (v0 layout)
//!     ├─ body does not decode ─────────────► INVALID_REQUEST response
//!     ├─ principal not allowed on the mirror ► MIRROR_AUTHORIZATION_FAILED
//!     └─ MirrorManager operation ──────────► response with the outcome (per topic where it applies)
//! ```
//!
//! The caller owns the framing: it reads request header v2 and writes response header v1
//! (`correlation_id` + empty tagged fields) before the returned body.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use tracing::{debug, info};

use super::auth::{MirrorAuthorizer, MirrorOperation};
use crate::mirror::{ConfigChange, MirrorError, MirrorManager, PartitionState, TopicOutcomes};
use crate::protocol::mirror::wire::Field;
use crate::protocol::mirror::{
    ALTER_OP_DELETE, ALTER_OP_SET, AddTopicsToMirrorRequest, AlterMirrorConfigsRequest, CreateMirrorRequest, DeleteMirrorRequest, DescribeMirrorConfigsRequest,
    DescribeMirrorConfigsResponse, DescribeMirrorsRequest, DescribeMirrorsResponse, DescribedConfig, DescribedMirror, DescribedPartition, DescribedTopic,
    ListMirrorsRequest, ListMirrorsResponse, ListedMirror, MirrorApiKey, MirrorErrorCode, PauseMirrorTopicsRequest, RemoveTopicsFromMirrorRequest,
    ResumeMirrorTopicsRequest, SimpleResponse, TopicResult, TopicsResponse, decode_body, encode_body,
};

/// Serves the mirror admin APIs from a [`MirrorManager`].
#[derive(Debug, Clone)]
pub struct AdminHandler {
    manager: Arc<MirrorManager>,
    authorizer: Arc<dyn MirrorAuthorizer>,
}

/// `(api_key, min_version, max_version)` of every mirror api, for the ApiVersions response.
pub fn api_versions() -> Vec<(i16, i16, i16)> {
    MirrorApiKey::ALL
        .iter()
        .map(|k| {
            let (min, max) = k.versions();
            (k.key(), min, max)
        })
        .collect()
}

/// A failure shaped as every response's top-level fields.
struct Failure {
    code: MirrorErrorCode,
    message: String,
}

impl From<MirrorError> for Failure {
    fn from(e: MirrorError) -> Self {
        Self { code: e.code(), message: e.message() }
    }
}

fn denied(principal: &str, operation: MirrorOperation, mirror: &str) -> Failure {
    Failure { code: MirrorErrorCode::MirrorAuthorizationFailed, message: format!("principal `{principal}` is not allowed {operation} on mirror `{mirror}`") }
}

fn simple(result: Result<(), Failure>) -> SimpleResponse {
    match result {
        Ok(()) => SimpleResponse::default(),
        Err(f) => SimpleResponse { throttle_time_ms: 0, error_code: f.code.code(), error_message: Some(f.message) },
    }
}

fn topics_response(result: Result<TopicOutcomes, Failure>) -> TopicsResponse {
    match result {
        Ok(outcomes) => TopicsResponse {
            topics: outcomes
                .into_iter()
                .map(|(topic_name, r)| match r {
                    Ok(()) => TopicResult { topic_name, error_code: 0, error_message: None },
                    Err(e) => TopicResult { topic_name, error_code: e.code().code(), error_message: Some(e.message()) },
                })
                .collect(),
            ..TopicsResponse::default()
        },
        Err(f) => TopicsResponse { error_code: f.code.code(), error_message: Some(f.message), ..TopicsResponse::default() },
    }
}

impl AdminHandler {
    /// A handler for `manager`, authorizing with `authorizer`.
    pub fn new(manager: Arc<MirrorManager>, authorizer: Arc<dyn MirrorAuthorizer>) -> Self {
        Self { manager, authorizer }
    }

    /// The manager.
    pub fn manager(&self) -> &Arc<MirrorManager> {
        &self.manager
    }

    fn check(&self, principal: &str, operation: MirrorOperation, mirror: &str) -> Result<(), Failure> {
        if self.authorizer.authorize(principal, operation, mirror) { Ok(()) } else { Err(denied(principal, operation, mirror)) }
    }

    /// Handles one request body of a mirror api; `None` if `api_key` is not a mirror api.
    ///
    /// # Cancel safety
    /// Not cancel safe: an operation cancelled after it wrote to `__mirror_state` has happened
    /// (the log is the truth), but its runners may not have been told until the next restart.
    /// Callers let it run to completion even if the client goes away.
    pub async fn handle(&self, api_key: i16, api_version: i16, body: Bytes, principal: &str) -> Option<Bytes> {
        let api = MirrorApiKey::from_key(api_key)?;
        let (min, max) = api.versions();
        let version = if (min..=max).contains(&api_version) { api_version } else { min };
        let failure = |code: MirrorErrorCode, message: String| Failure { code, message };
        if version != api_version {
            let f = failure(MirrorErrorCode::UnsupportedVersion, format!("{api} v{api_version} is not served (versions {min}–{max})"));
            return Some(self.error_body(api, f));
        }
        debug!(api = %api, api_version, principal, "mirror admin request");
        let response = match api {
            MirrorApiKey::CreateMirror => self.decode_then(api, &body, |r| self.create(r, principal)).await,
            MirrorApiKey::DeleteMirror => self.decode_then(api, &body, |r| self.delete(r, principal)).await,
            MirrorApiKey::ListMirrors => self.decode_then(api, &body, |r| self.list(r, principal)).await,
            MirrorApiKey::DescribeMirrors => self.decode_then(api, &body, |r| self.describe(r, principal)).await,
            MirrorApiKey::AddTopicsToMirror => self.decode_then(api, &body, |r| self.add(r, principal)).await,
            MirrorApiKey::RemoveTopicsFromMirror => self.decode_then(api, &body, |r| self.remove(r, principal)).await,
            MirrorApiKey::PauseMirrorTopics => self.decode_then(api, &body, |r| self.pause(r, principal)).await,
            MirrorApiKey::ResumeMirrorTopics => self.decode_then(api, &body, |r| self.resume(r, principal)).await,
            MirrorApiKey::DescribeMirrorConfigs => self.decode_then(api, &body, |r| self.describe_configs(r, principal)).await,
            MirrorApiKey::AlterMirrorConfigs => self.decode_then(api, &body, |r| self.alter_configs(r, principal)).await,
        };
        Some(response)
    }

    async fn decode_then<Req, Resp, Fut>(&self, api: MirrorApiKey, body: &[u8], op: impl FnOnce(Req) -> Fut) -> Bytes
    where
        Req: Field,
        Resp: Field,
        Fut: std::future::Future<Output = Resp>,
    {
        match decode_body::<Req>(api, 0, body) {
            Ok(request) => {
                let response = op(request).await;
                encode_body(api, 0, &response).expect("invariant: version 0 encodes")
            }
            Err(e) => self.error_body(api, Failure { code: MirrorErrorCode::InvalidRequest, message: format!("{api} request does not decode: {e}") }),
        }
    }

    /// A response of `api` carrying only a top-level error.
    fn error_body(&self, api: MirrorApiKey, f: Failure) -> Bytes {
        let (code, message) = (f.code.code(), Some(f.message));
        let encoded = match api {
            MirrorApiKey::CreateMirror | MirrorApiKey::DeleteMirror | MirrorApiKey::AlterMirrorConfigs => {
                encode_body(api, 0, &SimpleResponse { throttle_time_ms: 0, error_code: code, error_message: message })
            }
            MirrorApiKey::ListMirrors => {
                encode_body(api, 0, &ListMirrorsResponse { error_code: code, error_message: message, ..ListMirrorsResponse::default() })
            }
            MirrorApiKey::DescribeMirrors => {
                encode_body(api, 0, &DescribeMirrorsResponse { error_code: code, error_message: message, ..DescribeMirrorsResponse::default() })
            }
            MirrorApiKey::DescribeMirrorConfigs => {
                encode_body(api, 0, &DescribeMirrorConfigsResponse { error_code: code, error_message: message, ..DescribeMirrorConfigsResponse::default() })
            }
            _ => encode_body(api, 0, &TopicsResponse { error_code: code, error_message: message, ..TopicsResponse::default() }),
        };
        encoded.expect("invariant: version 0 encodes")
    }

    async fn create(&self, r: CreateMirrorRequest, principal: &str) -> SimpleResponse {
        let result = async {
            self.check(principal, MirrorOperation::Create, &r.mirror_name)?;
            let mut props = BTreeMap::new();
            for c in r.configs {
                props.insert(c.name, c.value.unwrap_or_default());
            }
            self.manager.create_mirror(&r.mirror_name, props, r.validate_only).await?;
            if !r.validate_only {
                info!(mirror = %r.mirror_name, principal, "CreateMirror");
            }
            Ok(())
        };
        simple(result.await)
    }

    async fn delete(&self, r: DeleteMirrorRequest, principal: &str) -> SimpleResponse {
        let result = async {
            self.check(principal, MirrorOperation::Delete, &r.mirror_name)?;
            self.manager.delete_mirror(&r.mirror_name).await?;
            info!(mirror = %r.mirror_name, principal, "DeleteMirror");
            Ok(())
        };
        simple(result.await)
    }

    async fn list(&self, r: ListMirrorsRequest, principal: &str) -> ListMirrorsResponse {
        let mirrors = self
            .manager
            .list_mirrors()
            .into_iter()
            .filter(|m| self.authorizer.authorize(principal, MirrorOperation::Describe, &m.name))
            .map(|m| ListedMirror {
                topic_count: i32::try_from(m.topics.len()).unwrap_or(i32::MAX),
                topic_names: r.include_topic_names.then_some(m.topics),
                mirror_name: m.name,
                source_bootstrap: m.source_bootstrap,
                source_cluster_id: m.source_cluster_id,
            })
            .collect();
        ListMirrorsResponse { mirrors, ..ListMirrorsResponse::default() }
    }

    async fn describe(&self, r: DescribeMirrorsRequest, principal: &str) -> DescribeMirrorsResponse {
        let all = r.mirror_names.is_none();
        let names: Vec<String> = match r.mirror_names {
            Some(names) => names,
            None => {
                self.manager.list_mirrors().into_iter().map(|m| m.name).filter(|n| self.authorizer.authorize(principal, MirrorOperation::Describe, n)).collect()
            }
        };
        let mut mirrors = Vec::new();
        let (allowed, refused): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|n| all || self.authorizer.authorize(principal, MirrorOperation::Describe, n));
        for name in refused {
            let f = denied(principal, MirrorOperation::Describe, &name);
            mirrors.push(DescribedMirror { error_code: f.code.code(), error_message: Some(f.message), mirror_name: name, ..DescribedMirror::default() });
        }
        for (name, described) in self.manager.describe(Some(&allowed)).await {
            match described {
                Ok(d) => mirrors.push(DescribedMirror {
                    error_code: 0,
                    error_message: None,
                    mirror_name: d.name,
                    source_bootstrap: d.source_bootstrap,
                    source_cluster_id: d.source_cluster_id,
                    topics: d
                        .topics
                        .into_iter()
                        .map(|t| DescribedTopic {
                            topic_name: t.name,
                            source_topic_id: t.source_topic_id,
                            partitions: t
                                .partitions
                                .into_iter()
                                .map(|p| DescribedPartition {
                                    partition_index: p.partition,
                                    source_offset: p.source_offset,
                                    destination_offset: p.destination_offset,
                                    lag: p.lag(),
                                    error_message: match &p.state {
                                        PartitionState::Failed { reason } => Some(reason.clone()),
                                        _ => None,
                                    },
                                    state: p.state.name().to_owned(),
                                    retry_attempt: p.retry_attempt,
                                })
                                .collect(),
                        })
                        .collect(),
                }),
                Err(e) => mirrors.push(DescribedMirror {
                    error_code: e.code().code(),
                    error_message: Some(e.message()),
                    mirror_name: name,
                    ..DescribedMirror::default()
                }),
            }
        }
        mirrors.sort_by(|a, b| a.mirror_name.cmp(&b.mirror_name));
        DescribeMirrorsResponse { mirrors, ..DescribeMirrorsResponse::default() }
    }

    async fn add(&self, r: AddTopicsToMirrorRequest, principal: &str) -> TopicsResponse {
        let result = async {
            self.check(principal, MirrorOperation::Alter, &r.mirror_name)?;
            Ok(self.manager.add_topics(&r.mirror_name, &r.topics, &r.exclude, r.replication_factor).await?)
        };
        topics_response(result.await)
    }

    async fn remove(&self, r: RemoveTopicsFromMirrorRequest, principal: &str) -> TopicsResponse {
        let result = async {
            self.check(principal, MirrorOperation::Alter, &r.mirror_name)?;
            Ok(self.manager.remove_topics(&r.mirror_name, &r.topics).await?)
        };
        topics_response(result.await)
    }

    async fn pause(&self, r: PauseMirrorTopicsRequest, principal: &str) -> TopicsResponse {
        let result = async {
            self.check(principal, MirrorOperation::Alter, &r.mirror_name)?;
            Ok(self.manager.pause_topics(&r.mirror_name, &r.topics).await?)
        };
        topics_response(result.await)
    }

    async fn resume(&self, r: ResumeMirrorTopicsRequest, principal: &str) -> TopicsResponse {
        let result = async {
            self.check(principal, MirrorOperation::Alter, &r.mirror_name)?;
            Ok(self.manager.resume_topics(&r.mirror_name, &r.topics).await?)
        };
        topics_response(result.await)
    }

    async fn describe_configs(&self, r: DescribeMirrorConfigsRequest, principal: &str) -> DescribeMirrorConfigsResponse {
        let result = self
            .check(principal, MirrorOperation::DescribeConfigs, &r.mirror_name)
            .and_then(|()| self.manager.describe_configs(&r.mirror_name).map_err(Failure::from));
        match result {
            Ok(settings) => DescribeMirrorConfigsResponse {
                configs: settings.into_iter().map(|s| DescribedConfig { name: s.name, value: s.value, is_sensitive: s.is_sensitive }).collect(),
                ..DescribeMirrorConfigsResponse::default()
            },
            Err(f) => DescribeMirrorConfigsResponse { error_code: f.code.code(), error_message: Some(f.message), ..DescribeMirrorConfigsResponse::default() },
        }
    }

    async fn alter_configs(&self, r: AlterMirrorConfigsRequest, principal: &str) -> SimpleResponse {
        let result = async {
            self.check(principal, MirrorOperation::AlterConfigs, &r.mirror_name)?;
            let mut changes = Vec::new();
            for c in r.configs {
                match c.op {
                    ALTER_OP_SET => changes.push(ConfigChange::Set(c.name, c.value.unwrap_or_default())),
                    ALTER_OP_DELETE => changes.push(ConfigChange::Delete(c.name)),
                    other => {
                        return Err(Failure { code: MirrorErrorCode::InvalidRequest, message: format!("unknown config operation {other} for `{}`", c.name) });
                    }
                }
            }
            self.manager.alter_configs(&r.mirror_name, &changes, r.validate_only).await?;
            Ok(())
        };
        simple(result.await)
    }
}
