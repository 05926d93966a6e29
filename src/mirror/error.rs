//! Why a mirror operation was refused or failed, each with the wire error code the admin API sends.

use super::loops::LoopCheckError;
use super::settings::SettingError;
use super::store::StoreError;
use crate::protocol::mirror::MirrorErrorCode;

/// A mirror operation's failure. Who failed: the caller (names, patterns, states, settings) or the
/// clusters (`Store`, `SourceUnreachable`); [`MirrorError::is_retriable`] tells which may pass.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MirrorError {
    /// The mirror name breaks the rules.
    #[error("{0}")]
    InvalidName(String),
    /// No mirror by this name.
    #[error("mirror `{0}` does not exist")]
    UnknownMirror(String),
    /// A mirror by this name exists.
    #[error("mirror `{0}` already exists")]
    MirrorExists(String),
    /// Bad settings, each naming its key.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    InvalidSettings(Vec<SettingError>),
    /// The source cannot be reached with the mirror's settings.
    #[error("mirror setting `bootstrap.servers`: the source cluster at {bootstrap} cannot be reached: {reason}")]
    SourceUnreachable { bootstrap: String, reason: String },
    /// A topic pattern is not a regular expression.
    #[error("`{pattern}` is not a valid regular expression: {reason}")]
    InvalidPattern { pattern: String, reason: String },
    /// No source topic matches.
    #[error("no topic of the source cluster matches {0}")]
    NoMatchingTopic(String),
    /// The topic already belongs to a mirror.
    #[error("topic `{topic}` is already in mirror `{mirror}` ({state})")]
    TopicInMirror { topic: String, mirror: String, state: String },
    /// The source topic is itself a mirror topic (not STOPPED) of a mirror at the source:
    /// mirroring it would make mirrors loop.
    #[error("topic `{topic}` is a mirror topic of mirror `{source_mirror}` on the source cluster; mirroring it would make mirrors loop (stop it there first)")]
    MirrorLoop { topic: String, source_mirror: String },
    /// Whether source topics are mirror topics there could not be checked.
    #[error("cannot check whether the source's topics are mirror topics there")]
    LoopCheck(#[source] Box<LoopCheckError>),
    /// No topic of the mirror matches.
    #[error("no topic of mirror `{mirror}` matches {pattern}")]
    TopicNotInMirror { mirror: String, pattern: String },
    /// Pause of a paused topic.
    #[error("topic `{0}` is already paused")]
    AlreadyPaused(String),
    /// Resume of a topic that is not paused.
    #[error("topic `{topic}` is not paused ({state})")]
    NotPaused { topic: String, state: String },
    /// The topic is being stopped or is stopped.
    #[error("topic `{topic}` is {state}")]
    BeingStopped { topic: String, state: String },
    /// Delete of a mirror with topics not STOPPED.
    #[error("mirror `{mirror}` still has {count} topic(s) not STOPPED (remove them first): {topics}")]
    NotEmpty { mirror: String, count: usize, topics: String },
    /// A `--replication-factor` the destination cannot have.
    #[error("{0}")]
    InvalidReplicationFactor(String),
    /// The principal may not do this.
    #[error("principal `{principal}` may not {operation} mirror `{mirror}`")]
    NotAuthorized { principal: String, operation: &'static str, mirror: String },
    /// The state is still loading.
    #[error("the mirror state is still loading")]
    Loading,
    /// `__mirror_state` could not be written or read.
    #[error(transparent)]
    Store(Box<StoreError>),
}

impl From<StoreError> for MirrorError {
    fn from(e: StoreError) -> Self {
        Self::Store(Box::new(e))
    }
}

impl MirrorError {
    /// The wire error code.
    pub fn code(&self) -> MirrorErrorCode {
        match self {
            Self::InvalidName(_) => MirrorErrorCode::InvalidMirrorName,
            Self::UnknownMirror(_) => MirrorErrorCode::UnknownMirror,
            Self::MirrorExists(_) => MirrorErrorCode::MirrorAlreadyExists,
            Self::InvalidSettings(_) | Self::SourceUnreachable { .. } => MirrorErrorCode::InvalidConfig,
            Self::InvalidPattern { .. } => MirrorErrorCode::InvalidRegularExpression,
            Self::NoMatchingTopic(_) => MirrorErrorCode::UnknownTopicOrPartition,
            Self::TopicInMirror { .. } | Self::MirrorLoop { .. } => MirrorErrorCode::TopicAlreadyInMirror,
            Self::TopicNotInMirror { .. } => MirrorErrorCode::TopicNotInMirror,
            Self::AlreadyPaused(_) => MirrorErrorCode::MirrorTopicAlreadyPaused,
            Self::NotPaused { .. } => MirrorErrorCode::MirrorTopicNotPaused,
            Self::BeingStopped { .. } => MirrorErrorCode::MirrorTopicBeingStopped,
            Self::NotEmpty { .. } => MirrorErrorCode::MirrorNotEmpty,
            Self::InvalidReplicationFactor(_) => MirrorErrorCode::InvalidReplicationFactor,
            Self::NotAuthorized { .. } => MirrorErrorCode::MirrorAuthorizationFailed,
            Self::Loading => MirrorErrorCode::CoordinatorLoadInProgress,
            Self::Store(_) | Self::LoopCheck(_) => MirrorErrorCode::UnknownServerError,
        }
    }

    /// True if the same request may succeed later without changes.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::Loading | Self::Store(_) | Self::SourceUnreachable { .. } | Self::LoopCheck(_))
    }

    /// The message sent to clients: the error and its causes on one line.
    pub fn message(&self) -> String {
        crate::report::error_chain(self)
    }
}
