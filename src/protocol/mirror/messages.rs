//! The mirror request and response bodies, version 0 (flexible). Field order is wire order.
//!
//! Every response starts with `throttle_time_ms`, `error_code` and `error_message` (the top-level
//! outcome); requests that act on several topics report per-topic outcomes in [`TopicResult`]s.
//!
//! # References
//! - KIP-1279 message schemas, `../shared/spec/notes/proposal-digest.md` §3.2 (the first
//!   generation's names: CreateMirror, AddTopicsToMirror, …; later generations' fields where useful:
//!   per-topic results, `IncludeTopicNames`, failure reasons and retry counts in describe).

use bytes::Bytes;
use uuid::Uuid;

use super::MirrorApiKey;
use super::wire::{DecodeError, Field, Reader, Writer, flexible_struct};

/// A request body, with its api key and response type.
pub trait MirrorRequest: Field + std::fmt::Debug + Clone + PartialEq + Send + Sync {
    /// The api this request belongs to.
    const API_KEY: MirrorApiKey;
    /// The response body type.
    type Response: Field + std::fmt::Debug + Clone + PartialEq + Send;
}

/// Encodes a body (request or response) at `version`.
///
/// # Errors
/// [`DecodeError::UnsupportedVersion`] for a version this build does not have.
pub fn encode_body<T: Field>(api: MirrorApiKey, version: i16, body: &T) -> Result<Bytes, DecodeError> {
    check_version(api, version)?;
    let mut w = Writer::new();
    body.write(&mut w);
    Ok(w.into_bytes())
}

/// Decodes a body (request or response) at `version`; every byte must be used.
///
/// # Errors
/// Unsupported version, malformed bytes, trailing bytes.
pub fn decode_body<T: Field>(api: MirrorApiKey, version: i16, bytes: &[u8]) -> Result<T, DecodeError> {
    check_version(api, version)?;
    let mut r = Reader::new(bytes);
    let body = T::read(&mut r, api.name())?;
    r.finish()?;
    Ok(body)
}

fn check_version(api: MirrorApiKey, version: i16) -> Result<(), DecodeError> {
    let (min, max) = api.versions();
    if version < min || version > max {
        return Err(DecodeError::UnsupportedVersion { api: api.name(), version });
    }
    Ok(())
}

/// One mirror setting: a Java client property name and its value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MirrorConfig {
    /// Property name (`bootstrap.servers`, `security.protocol`, …).
    pub name: String,
    /// Value; null only in describe output, for secrets.
    pub value: Option<String>,
}
flexible_struct!(MirrorConfig { name, value });

/// The outcome of a request for one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicResult {
    /// Topic name.
    pub topic_name: String,
    /// Error code, 0 on success.
    pub error_code: i16,
    /// Why it failed, or null.
    pub error_message: Option<String>,
}
flexible_struct!(TopicResult { topic_name, error_code, error_message });

/// The response of requests that have nothing but the top-level outcome.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimpleResponse {
    /// Time the request was throttled, ms (always 0: the proxy does not throttle admin requests).
    pub throttle_time_ms: i32,
    /// Error code, 0 on success.
    pub error_code: i16,
    /// Why it failed, or null.
    pub error_message: Option<String>,
}
flexible_struct!(SimpleResponse { throttle_time_ms, error_code, error_message });

/// The response of requests acting on topics: a top-level outcome (for errors about the mirror
/// itself) and one result per topic the request resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicsResponse {
    /// Throttle time, ms.
    pub throttle_time_ms: i32,
    /// Top-level error code (unknown mirror, bad pattern, not authorized, …).
    pub error_code: i16,
    /// Top-level error message.
    pub error_message: Option<String>,
    /// Per-topic outcomes, sorted by topic name.
    pub topics: Vec<TopicResult>,
}
flexible_struct!(TopicsResponse { throttle_time_ms, error_code, error_message, topics });

/// CreateMirror: create a mirror of a source cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateMirrorRequest {
    /// The mirror's name (topic-name rules; no `.removed`/`.paused` suffix).
    pub mirror_name: String,
    /// Source connection settings (`bootstrap.servers` required).
    pub configs: Vec<MirrorConfig>,
    /// Only validate (names, settings, source reachable); create nothing.
    pub validate_only: bool,
}
flexible_struct!(CreateMirrorRequest { mirror_name, configs, validate_only });
impl MirrorRequest for CreateMirrorRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::CreateMirror;
    type Response = SimpleResponse;
}

/// DeleteMirror: delete a mirror whose topics are all STOPPED (or that has none).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteMirrorRequest {
    /// The mirror.
    pub mirror_name: String,
}
flexible_struct!(DeleteMirrorRequest { mirror_name });
impl MirrorRequest for DeleteMirrorRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::DeleteMirror;
    type Response = SimpleResponse;
}

/// ListMirrors: every mirror the principal may describe.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListMirrorsRequest {
    /// Also return each mirror's topic names.
    pub include_topic_names: bool,
}
flexible_struct!(ListMirrorsRequest { include_topic_names });
impl MirrorRequest for ListMirrorsRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::ListMirrors;
    type Response = ListMirrorsResponse;
}

/// One mirror in a ListMirrors response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedMirror {
    /// Name.
    pub mirror_name: String,
    /// The source's `bootstrap.servers`.
    pub source_bootstrap: String,
    /// The source cluster id ("" if not known yet).
    pub source_cluster_id: String,
    /// Topics in the mirror (any state).
    pub topic_count: i32,
    /// The topics, when asked for; null otherwise.
    pub topic_names: Option<Vec<String>>,
}
flexible_struct!(ListedMirror { mirror_name, source_bootstrap, source_cluster_id, topic_count, topic_names });

/// ListMirrors response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListMirrorsResponse {
    /// Throttle time, ms.
    pub throttle_time_ms: i32,
    /// Error code.
    pub error_code: i16,
    /// Error message.
    pub error_message: Option<String>,
    /// Mirrors, sorted by name.
    pub mirrors: Vec<ListedMirror>,
}
flexible_struct!(ListMirrorsResponse { throttle_time_ms, error_code, error_message, mirrors });

/// DescribeMirrors: per-partition state and lag.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeMirrorsRequest {
    /// Mirrors to describe; null for all.
    pub mirror_names: Option<Vec<String>>,
}
flexible_struct!(DescribeMirrorsRequest { mirror_names });
impl MirrorRequest for DescribeMirrorsRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::DescribeMirrors;
    type Response = DescribeMirrorsResponse;
}

/// One partition in a DescribeMirrors response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedPartition {
    /// Partition index.
    pub partition_index: i32,
    /// Where copying is bounded at the source: its last stable offset when copying
    /// read_committed, else its high watermark; -1 if not known yet.
    pub source_offset: i64,
    /// The destination's end offset as the mirror wrote it; -1 if not known yet.
    pub destination_offset: i64,
    /// `source_offset - destination_offset` (at least 0); -1 if either is unknown.
    pub lag: i64,
    /// State name: INITIALIZING, PREPARING, MIRRORING, PAUSED, STOPPING, STOPPED, FAILED.
    pub state: String,
    /// The failure reason in FAILED, else null.
    pub error_message: Option<String>,
    /// Automatic retries so far in FAILED; -1 when the failure is not retried.
    pub retry_attempt: i16,
}
flexible_struct!(DescribedPartition { partition_index, source_offset, destination_offset, lag, state, error_message, retry_attempt });

/// One topic in a DescribeMirrors response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedTopic {
    /// Topic name (same on both sides).
    pub topic_name: String,
    /// The source topic id (nil before the topic was first described).
    pub source_topic_id: Uuid,
    /// Partitions, by index.
    pub partitions: Vec<DescribedPartition>,
}
flexible_struct!(DescribedTopic { topic_name, source_topic_id, partitions });

/// One mirror in a DescribeMirrors response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedMirror {
    /// Per-mirror error (unknown mirror, not authorized).
    pub error_code: i16,
    /// Per-mirror error message.
    pub error_message: Option<String>,
    /// Name.
    pub mirror_name: String,
    /// The source's `bootstrap.servers`.
    pub source_bootstrap: String,
    /// The source cluster id ("" if not known yet).
    pub source_cluster_id: String,
    /// Topics, by name.
    pub topics: Vec<DescribedTopic>,
}
flexible_struct!(DescribedMirror { error_code, error_message, mirror_name, source_bootstrap, source_cluster_id, topics });

/// DescribeMirrors response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeMirrorsResponse {
    /// Throttle time, ms.
    pub throttle_time_ms: i32,
    /// Error code.
    pub error_code: i16,
    /// Error message.
    pub error_message: Option<String>,
    /// Mirrors, by name.
    pub mirrors: Vec<DescribedMirror>,
}
flexible_struct!(DescribeMirrorsResponse { throttle_time_ms, error_code, error_message, mirrors });

/// AddTopicsToMirror: start mirroring the source topics matching the patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddTopicsToMirrorRequest {
    /// The mirror.
    pub mirror_name: String,
    /// Topic names or regular expressions (full match), e.g. `orders` or `test-.*`. Internal
    /// topics (`__…`) match only when named exactly.
    pub topics: Vec<String>,
    /// Regular expressions of topics to leave out.
    pub exclude: Vec<String>,
    /// Replication factor of the destination topics created for the topics added, now and later
    /// by these patterns; -1 (the default) is the destination's `default.replication.factor`,
    /// capped by its broker count. Tagged field 0: requests without it mean -1.
    pub replication_factor: i16,
}
impl Default for AddTopicsToMirrorRequest {
    fn default() -> Self {
        Self { mirror_name: String::new(), topics: Vec::new(), exclude: Vec::new(), replication_factor: -1 }
    }
}
flexible_struct!(AddTopicsToMirrorRequest { mirror_name, topics, exclude } tagged { 0 => replication_factor = -1 });
impl MirrorRequest for AddTopicsToMirrorRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::AddTopicsToMirror;
    type Response = TopicsResponse;
}

/// RemoveTopicsFromMirror: stop mirroring (failover); the topics become writable once STOPPED.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveTopicsFromMirrorRequest {
    /// The mirror.
    pub mirror_name: String,
    /// Topic names or regular expressions, matched against the mirror's topics.
    pub topics: Vec<String>,
}
flexible_struct!(RemoveTopicsFromMirrorRequest { mirror_name, topics });
impl MirrorRequest for RemoveTopicsFromMirrorRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::RemoveTopicsFromMirror;
    type Response = TopicsResponse;
}

/// PauseMirrorTopics: suspend copying; the topics stay read-only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PauseMirrorTopicsRequest {
    /// The mirror.
    pub mirror_name: String,
    /// Topic names or regular expressions, matched against the mirror's topics.
    pub topics: Vec<String>,
}
flexible_struct!(PauseMirrorTopicsRequest { mirror_name, topics });
impl MirrorRequest for PauseMirrorTopicsRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::PauseMirrorTopics;
    type Response = TopicsResponse;
}

/// ResumeMirrorTopics: resume copying of paused topics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResumeMirrorTopicsRequest {
    /// The mirror.
    pub mirror_name: String,
    /// Topic names or regular expressions, matched against the mirror's topics.
    pub topics: Vec<String>,
}
flexible_struct!(ResumeMirrorTopicsRequest { mirror_name, topics });
impl MirrorRequest for ResumeMirrorTopicsRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::ResumeMirrorTopics;
    type Response = TopicsResponse;
}

/// DescribeMirrorConfigs: a mirror's settings, secrets hidden.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeMirrorConfigsRequest {
    /// The mirror.
    pub mirror_name: String,
}
flexible_struct!(DescribeMirrorConfigsRequest { mirror_name });
impl MirrorRequest for DescribeMirrorConfigsRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::DescribeMirrorConfigs;
    type Response = DescribeMirrorConfigsResponse;
}

/// One setting in a DescribeMirrorConfigs response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedConfig {
    /// Property name.
    pub name: String,
    /// Value; null for secrets.
    pub value: Option<String>,
    /// The value is a secret (never returned).
    pub is_sensitive: bool,
}
flexible_struct!(DescribedConfig { name, value, is_sensitive });

/// DescribeMirrorConfigs response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeMirrorConfigsResponse {
    /// Throttle time, ms.
    pub throttle_time_ms: i32,
    /// Error code.
    pub error_code: i16,
    /// Error message.
    pub error_message: Option<String>,
    /// Settings, by name.
    pub configs: Vec<DescribedConfig>,
}
flexible_struct!(DescribeMirrorConfigsResponse { throttle_time_ms, error_code, error_message, configs });

/// One change in an AlterMirrorConfigs request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterableConfig {
    /// Property name.
    pub name: String,
    /// 0 = SET, 1 = DELETE (as IncrementalAlterConfigs).
    pub op: i8,
    /// New value for SET; ignored for DELETE.
    pub value: Option<String>,
}
flexible_struct!(AlterableConfig { name, op, value });

/// The `op` of an [`AlterableConfig`] that sets a value.
pub const ALTER_OP_SET: i8 = 0;
/// The `op` of an [`AlterableConfig`] that removes a setting.
pub const ALTER_OP_DELETE: i8 = 1;

/// AlterMirrorConfigs: change settings incrementally; the mirror reconnects to its source.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AlterMirrorConfigsRequest {
    /// The mirror.
    pub mirror_name: String,
    /// Changes.
    pub configs: Vec<AlterableConfig>,
    /// Only validate.
    pub validate_only: bool,
}
flexible_struct!(AlterMirrorConfigsRequest { mirror_name, configs, validate_only });
impl MirrorRequest for AlterMirrorConfigsRequest {
    const API_KEY: MirrorApiKey = MirrorApiKey::AlterMirrorConfigs;
    type Response = SimpleResponse;
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A proptest strategy for every message type.
    trait Arb: Sized + std::fmt::Debug {
        fn arb() -> BoxedStrategy<Self>;
    }

    impl Arb for i8 {
        fn arb() -> BoxedStrategy<Self> {
            any::<i8>().boxed()
        }
    }
    impl Arb for i16 {
        fn arb() -> BoxedStrategy<Self> {
            any::<i16>().boxed()
        }
    }
    impl Arb for i32 {
        fn arb() -> BoxedStrategy<Self> {
            any::<i32>().boxed()
        }
    }
    impl Arb for i64 {
        fn arb() -> BoxedStrategy<Self> {
            any::<i64>().boxed()
        }
    }
    impl Arb for bool {
        fn arb() -> BoxedStrategy<Self> {
            any::<bool>().boxed()
        }
    }
    impl Arb for Uuid {
        fn arb() -> BoxedStrategy<Self> {
            any::<u128>().prop_map(Uuid::from_u128).boxed()
        }
    }
    impl Arb for String {
        fn arb() -> BoxedStrategy<Self> {
            prop_oneof![".{0,20}", "[a-z0-9._-]{0,300}"].boxed()
        }
    }
    impl<T: Arb + 'static> Arb for Option<T> {
        fn arb() -> BoxedStrategy<Self> {
            proptest::option::of(T::arb()).boxed()
        }
    }
    impl<T: Arb + 'static> Arb for Vec<T> {
        fn arb() -> BoxedStrategy<Self> {
            proptest::collection::vec(T::arb(), 0..4).boxed()
        }
    }

    macro_rules! arb_struct {
        ($($name:ident { $($field:ident: $ty:ty),* $(,)? })*) => {$(
            impl Arb for $name {
                fn arb() -> BoxedStrategy<Self> {
                    ($(<$ty as Arb>::arb(),)*).prop_map(|($($field,)*)| Self { $($field),* }).boxed()
                }
            }
        )*};
    }

    arb_struct! {
        MirrorConfig { name: String, value: Option<String> }
        TopicResult { topic_name: String, error_code: i16, error_message: Option<String> }
        SimpleResponse { throttle_time_ms: i32, error_code: i16, error_message: Option<String> }
        TopicsResponse { throttle_time_ms: i32, error_code: i16, error_message: Option<String>, topics: Vec<TopicResult> }
        CreateMirrorRequest { mirror_name: String, configs: Vec<MirrorConfig>, validate_only: bool }
        DeleteMirrorRequest { mirror_name: String }
        ListMirrorsRequest { include_topic_names: bool }
        ListedMirror { mirror_name: String, source_bootstrap: String, source_cluster_id: String, topic_count: i32, topic_names: Option<Vec<String>> }
        ListMirrorsResponse { throttle_time_ms: i32, error_code: i16, error_message: Option<String>, mirrors: Vec<ListedMirror> }
        DescribeMirrorsRequest { mirror_names: Option<Vec<String>> }
        DescribedPartition { partition_index: i32, source_offset: i64, destination_offset: i64, lag: i64, state: String, error_message: Option<String>, retry_attempt: i16 }
        DescribedTopic { topic_name: String, source_topic_id: Uuid, partitions: Vec<DescribedPartition> }
        DescribedMirror { error_code: i16, error_message: Option<String>, mirror_name: String, source_bootstrap: String, source_cluster_id: String, topics: Vec<DescribedTopic> }
        DescribeMirrorsResponse { throttle_time_ms: i32, error_code: i16, error_message: Option<String>, mirrors: Vec<DescribedMirror> }
        AddTopicsToMirrorRequest { mirror_name: String, topics: Vec<String>, exclude: Vec<String>, replication_factor: i16 }
        RemoveTopicsFromMirrorRequest { mirror_name: String, topics: Vec<String> }
        PauseMirrorTopicsRequest { mirror_name: String, topics: Vec<String> }
        ResumeMirrorTopicsRequest { mirror_name: String, topics: Vec<String> }
        DescribeMirrorConfigsRequest { mirror_name: String }
        DescribedConfig { name: String, value: Option<String>, is_sensitive: bool }
        DescribeMirrorConfigsResponse { throttle_time_ms: i32, error_code: i16, error_message: Option<String>, configs: Vec<DescribedConfig> }
        AlterableConfig { name: String, op: i8, value: Option<String> }
        AlterMirrorConfigsRequest { mirror_name: String, configs: Vec<AlterableConfig>, validate_only: bool }
    }

    /// Encodes, decodes, compares; then checks that every strict prefix fails to decode and that a
    /// trailing byte is refused, without panicking.
    fn round_trip<T: Field + PartialEq + std::fmt::Debug>(api: MirrorApiKey, value: &T) -> Result<(), TestCaseError> {
        let bytes = encode_body(api, 0, value).unwrap();
        let back: T = decode_body(api, 0, &bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, value);
        for cut in 0..bytes.len() {
            prop_assert!(decode_body::<T>(api, 0, &bytes[..cut]).is_err());
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        let trailing = matches!(decode_body::<T>(api, 0, &longer), Err(DecodeError::TrailingBytes { .. }));
        prop_assert!(trailing, "trailing byte accepted");
        Ok(())
    }

    macro_rules! round_trip_tests {
        ($($test:ident: $req:ty => $resp:ty;)*) => {
            proptest! {
                #![proptest_config(ProptestConfig::with_cases(64))]
                $(
                    #[test]
                    fn $test(request in <$req as Arb>::arb(), response in <$resp as Arb>::arb()) {
                        round_trip(<$req as MirrorRequest>::API_KEY, &request)?;
                        round_trip(<$req as MirrorRequest>::API_KEY, &response)?;
                    }
                )*
            }
        };
    }

    round_trip_tests! {
        create_mirror: CreateMirrorRequest => SimpleResponse;
        delete_mirror: DeleteMirrorRequest => SimpleResponse;
        list_mirrors: ListMirrorsRequest => ListMirrorsResponse;
        describe_mirrors: DescribeMirrorsRequest => DescribeMirrorsResponse;
        add_topics: AddTopicsToMirrorRequest => TopicsResponse;
        remove_topics: RemoveTopicsFromMirrorRequest => TopicsResponse;
        pause_topics: PauseMirrorTopicsRequest => TopicsResponse;
        resume_topics: ResumeMirrorTopicsRequest => TopicsResponse;
        describe_configs: DescribeMirrorConfigsRequest => DescribeMirrorConfigsResponse;
        alter_configs: AlterMirrorConfigsRequest => SimpleResponse;
    }

    #[test]
    fn the_replication_factor_is_a_tagged_field_older_peers_skip() {
        let api = MirrorApiKey::AddTopicsToMirror;
        let plain = AddTopicsToMirrorRequest { mirror_name: "m".into(), topics: vec!["t".into()], ..AddTopicsToMirrorRequest::default() };
        // Without a replication factor the bytes are those of the request before the field existed.
        let bytes = encode_body(api, 0, &plain).unwrap();
        assert_eq!(bytes.as_ref(), &[2, b'm', 2, 2, b't', 1, 0]);
        assert_eq!(decode_body::<AddTopicsToMirrorRequest>(api, 0, &bytes).unwrap().replication_factor, -1);
        // With one: tag 0, 2 bytes, big-endian i16.
        let with = AddTopicsToMirrorRequest { replication_factor: 2, ..plain.clone() };
        let bytes = encode_body(api, 0, &with).unwrap();
        assert_eq!(&bytes[bytes.len() - 5..], &[1, 0, 2, 0, 2]);
        assert_eq!(decode_body::<AddTopicsToMirrorRequest>(api, 0, &bytes).unwrap(), with);
        // An unknown tag next to it is skipped; a known tag with the wrong size is an error.
        let unknown = [2, b'm', 2, 2, b't', 1, 2, 0, 2, 0, 3, 7, 1, 9];
        assert_eq!(decode_body::<AddTopicsToMirrorRequest>(api, 0, &unknown).unwrap().replication_factor, 3);
        let short = [2, b'm', 2, 2, b't', 1, 1, 0, 1, 3];
        assert!(decode_body::<AddTopicsToMirrorRequest>(api, 0, &short).is_err());
    }

    proptest! {
        /// Arbitrary bytes never panic any decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_body::<CreateMirrorRequest>(MirrorApiKey::CreateMirror, 0, &bytes);
            let _ = decode_body::<DescribeMirrorsResponse>(MirrorApiKey::DescribeMirrors, 0, &bytes);
            let _ = decode_body::<AlterMirrorConfigsRequest>(MirrorApiKey::AlterMirrorConfigs, 0, &bytes);
            let _ = decode_body::<ListMirrorsResponse>(MirrorApiKey::ListMirrors, 0, &bytes);
        }
    }

    #[test]
    fn create_mirror_bytes_by_hand() {
        let request = CreateMirrorRequest {
            mirror_name: "dr".to_owned(),
            configs: vec![MirrorConfig { name: "a".to_owned(), value: Some("b".to_owned()) }],
            validate_only: false,
        };
        let bytes = encode_body(MirrorApiKey::CreateMirror, 0, &request).unwrap();
        #[rustfmt::skip]
        let expected: &[u8] = &[
            3, b'd', b'r',          // mirror_name
            2,                      // configs: 1 element
              2, b'a', 2, b'b', 0,  //   name, value, tagged fields
            0,                      // validate_only
            0,                      // tagged fields
        ];
        assert_eq!(bytes.as_ref(), expected);
        assert!(matches!(decode_body::<CreateMirrorRequest>(MirrorApiKey::CreateMirror, 1, expected), Err(DecodeError::UnsupportedVersion { version: 1, .. })));
    }
}
