//! The client requests the write policy inspects, read as byte ranges and rebuilt without the
//! entries it refuses.
//!
//! ```text
//!   frame ─► scan_request ─► ScannedRequest { entries: [Entry { topic, partitions: [(index, range)] }] }
//!                                   │ policy decides what to refuse
//!                                   ▼
//!            rebuild(frame, keep) ─► same header and fields, only the kept entries' original bytes
//! ```
//!
//! Scanning never decodes record data (Produce records are skipped by their length) and never
//! allocates from a count on the wire (see [`super::wire`]). The rebuilt request keeps the client's
//! header (correlation id included) and copies kept entries byte for byte.
//!
//! # References
//! - Produce (v3–13), DeleteRecords (v0–2), CreatePartitions (v0–3), AlterConfigs (v0–2),
//!   IncrementalAlterConfigs (v0–1): <https://kafka.apache.org/protocol.html#protocol_messages> and
//!   `clients/src/main/resources/common/message/*Request.json` in Apache Kafka. Produce v13 names
//!   topics by id (KIP-516).

use std::ops::Range;

use kafka_protocol::messages::ApiKey;

use super::wire::{Reader, WireError, put_array_len, request_body_offset};

/// How a request entry names its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicRef {
    /// By name.
    Name(String),
    /// By topic id (Produce v13+).
    Id(uuid::Uuid),
    /// Not a topic (a broker or logger config resource).
    NotATopic,
}

/// One partition of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionEntry {
    pub index: i32,
}

/// One top-level entry: a topic (Produce, DeleteRecords, CreatePartitions) or a config resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// All bytes of the entry.
    pub range: Range<usize>,
    pub topic: TopicRef,
    /// Produce and DeleteRecords: the partitions. Empty for the other APIs.
    pub partitions: Vec<PartitionEntry>,
    /// AlterConfigs / IncrementalAlterConfigs: the config names the entry sets.
    pub config_names: Vec<String>,
    /// AlterConfigs / IncrementalAlterConfigs: `resource_type` (2 = topic).
    pub resource_type: i8,
}

/// A request of one of the inspected APIs, as byte ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScannedRequest {
    pub api_key: ApiKey,
    pub api_version: i16,
    /// Flexible (compact) encoding.
    pub flexible: bool,
    /// Header and body fields before the entries array.
    pub before: Range<usize>,
    pub entries: Vec<Entry>,
    /// Everything after the entries array.
    pub after: Range<usize>,
    /// Produce `acks` (None for other APIs).
    pub acks: Option<i16>,
    /// Produce `transactional_id`.
    pub transactional_id: Option<String>,
}

/// `resource_type` of a topic in config requests.
pub(crate) const RESOURCE_TYPE_TOPIC: i8 = 2;

/// The versions of each inspected API that [`scan_request`] reads.
pub(crate) fn scan_range(api_key: ApiKey) -> Option<(i16, i16)> {
    match api_key {
        ApiKey::Produce => Some((3, 13)),
        ApiKey::DeleteRecords => Some((0, 2)),
        ApiKey::CreatePartitions => Some((0, 3)),
        ApiKey::AlterConfigs => Some((0, 2)),
        ApiKey::IncrementalAlterConfigs => Some((0, 1)),
        _ => None,
    }
}

/// Why a request could not be scanned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// The bytes do not form a valid request of that API and version.
    #[error("malformed {api_key:?} v{api_version} request")]
    Malformed {
        api_key: ApiKey,
        api_version: i16,
        #[source]
        source: WireError,
    },
    /// The version is outside what the proxy reads.
    #[error("{api_key:?} v{api_version} is not supported by the proxy")]
    UnsupportedVersion { api_key: ApiKey, api_version: i16 },
}

/// Scans `frame` (a whole request, header included) of `api_key` at `api_version`.
///
/// # Errors
/// [`ScanError`] for an unsupported version or bytes that do not match the schema (including
/// trailing bytes).
pub(crate) fn scan_request(frame: &[u8], api_key: ApiKey, api_version: i16) -> Result<ScannedRequest, ScanError> {
    let Some((min, max)) = scan_range(api_key) else {
        return Err(ScanError::UnsupportedVersion { api_key, api_version });
    };
    if api_version < min || api_version > max {
        return Err(ScanError::UnsupportedVersion { api_key, api_version });
    }
    let flexible = api_key.request_header_version(api_version) >= 2;
    scan_body(frame, api_key, api_version, flexible).map_err(|source| ScanError::Malformed { api_key, api_version, source })
}

fn scan_body(frame: &[u8], api_key: ApiKey, v: i16, flexible: bool) -> Result<ScannedRequest, WireError> {
    let (body, _client_id) = request_body_offset(frame, flexible)?;
    let mut r = Reader::at(frame, body);
    let mut acks = None;
    let mut transactional_id = None;
    if api_key == ApiKey::Produce {
        let (id, produce_acks) = produce_fields(&mut r, flexible)?;
        transactional_id = id.map(|b| String::from_utf8_lossy(b).into_owned());
        acks = Some(produce_acks);
    }
    let before = 0..r.pos();
    // Not nullable in any of these APIs (Kafka's own parser refuses a null here too). Read as empty,
    // a null would also come back as an empty array from `rebuild`.
    let offset = r.pos();
    let count = r.array_len(flexible, 1, "entries")?.ok_or(WireError::UnexpectedNull { what: "entries", offset })?;
    let mut entries = Vec::new();
    for _ in 0..count {
        let entry = match api_key {
            ApiKey::Produce => scan_topic_with_partitions(&mut r, flexible, v >= 13, true)?,
            ApiKey::DeleteRecords => scan_topic_with_partitions(&mut r, flexible, false, false)?,
            ApiKey::CreatePartitions => scan_create_partitions_topic(&mut r, flexible)?,
            _ => scan_config_resource(&mut r, flexible, api_key == ApiKey::IncrementalAlterConfigs)?,
        };
        entries.push(entry);
    }
    let after_start = r.pos();
    match api_key {
        ApiKey::Produce => {}
        ApiKey::DeleteRecords => {
            r.i32("timeout_ms")?;
        }
        ApiKey::CreatePartitions => {
            r.i32("timeout_ms")?;
            r.i8("validate_only")?;
        }
        _ => {
            r.i8("validate_only")?;
        }
    }
    if flexible {
        r.skip_tagged_fields()?;
    }
    r.finish()?;
    Ok(ScannedRequest { api_key, api_version: v, flexible, before, entries, after: after_start..frame.len(), acks, transactional_id })
}

/// The first fields of a Produce request, enough to decide whether it can be forwarded whole without
/// reading its records (see `session.rs`, streamed Produce requests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProducePrefix {
    pub acks: i16,
    /// How many topics the request writes to.
    pub topics: usize,
    /// The first topic (`None` when there is none).
    pub first_topic: Option<TopicRef>,
}

/// Reads the [`ProducePrefix`] of a Produce request at `api_version` from the start of its frame
/// (`frame` may hold only part of it).
///
/// # Errors
/// When `frame` ends before the first topic (a string cut short is [`WireError::BadLength`], not
/// only [`WireError::Truncated`]), for bytes that cannot be a Produce request, and for a version
/// [`scan_request`] does not read ([`WireError::BadLength`] of `api_version`).
pub(crate) fn produce_prefix(frame: &[u8], api_version: i16) -> Result<ProducePrefix, WireError> {
    let (min, max) = scan_range(ApiKey::Produce).unwrap_or((0, -1));
    if api_version < min || api_version > max {
        return Err(WireError::BadLength { what: "api_version", offset: 2, len: i64::from(api_version) });
    }
    let flexible = ApiKey::Produce.request_header_version(api_version) >= 2;
    let (body, _client_id) = request_body_offset(frame, flexible)?;
    let mut r = Reader::at(frame, body);
    let (_, acks) = produce_fields(&mut r, flexible)?;
    // Unchecked against the bytes left (they are only part of the request): only compared.
    let topics = match flexible {
        true => (r.uvarint()? as usize).saturating_sub(1),
        false => usize::try_from(r.i32("topic_data")?).unwrap_or(0),
    };
    let first_topic = match topics {
        0 => None,
        _ if api_version >= 13 => Some(TopicRef::Id(r.uuid("topic_id")?)),
        _ => Some(TopicRef::Name(r.string(flexible, "name")?)),
    };
    Ok(ProducePrefix { acks, topics, first_topic })
}

/// Produce's fields before its topics: `transactional_id` (its bytes) and `acks`; `timeout_ms` is
/// skipped.
fn produce_fields<'a>(r: &mut Reader<'a>, flexible: bool) -> Result<(Option<&'a [u8]>, i16), WireError> {
    let transactional_id = r.nullable_string(flexible, "transactional_id")?;
    let acks = r.i16("acks")?;
    r.i32("timeout_ms")?;
    Ok((transactional_id, acks))
}

/// Produce `TopicProduceData` or DeleteRecords `DeleteRecordsTopic`.
fn scan_topic_with_partitions(r: &mut Reader<'_>, flexible: bool, by_id: bool, produce: bool) -> Result<Entry, WireError> {
    let start = r.pos();
    let topic = if by_id { TopicRef::Id(r.uuid("topic_id")?) } else { TopicRef::Name(r.string(flexible, "name")?) };
    let count = r.array_len(flexible, 1, "partitions")?.unwrap_or(0);
    let mut partitions = Vec::new();
    for _ in 0..count {
        let index = r.i32("partition index")?;
        if produce {
            r.skip_bytes(flexible, "records")?;
        } else {
            r.i64("offset")?;
        }
        if flexible {
            r.skip_tagged_fields()?;
        }
        partitions.push(PartitionEntry { index });
    }
    if flexible {
        r.skip_tagged_fields()?;
    }
    Ok(Entry { range: start..r.pos(), topic, partitions, config_names: Vec::new(), resource_type: RESOURCE_TYPE_TOPIC })
}

/// CreatePartitions `CreatePartitionsTopic`.
fn scan_create_partitions_topic(r: &mut Reader<'_>, flexible: bool) -> Result<Entry, WireError> {
    let start = r.pos();
    let name = r.string(flexible, "name")?;
    r.i32("count")?;
    if let Some(n) = r.array_len(flexible, 1, "assignments")? {
        for _ in 0..n {
            let ids = r.array_len(flexible, 4, "broker_ids")?.unwrap_or(0);
            for _ in 0..ids {
                r.i32("broker_id")?;
            }
            if flexible {
                r.skip_tagged_fields()?;
            }
        }
    }
    if flexible {
        r.skip_tagged_fields()?;
    }
    let end = r.pos();
    Ok(Entry { range: start..end, topic: TopicRef::Name(name), partitions: Vec::new(), config_names: Vec::new(), resource_type: RESOURCE_TYPE_TOPIC })
}

/// AlterConfigs `AlterConfigsResource` or IncrementalAlterConfigs `AlterConfigsResource`.
fn scan_config_resource(r: &mut Reader<'_>, flexible: bool, incremental: bool) -> Result<Entry, WireError> {
    let start = r.pos();
    let resource_type = r.i8("resource_type")?;
    let name = r.string(flexible, "resource_name")?;
    let mut config_names = Vec::new();
    let count = r.array_len(flexible, 1, "configs")?.unwrap_or(0);
    for _ in 0..count {
        config_names.push(r.string(flexible, "config name")?);
        if incremental {
            r.i8("config_operation")?;
        }
        r.nullable_string(flexible, "config value")?;
        if flexible {
            r.skip_tagged_fields()?;
        }
    }
    if flexible {
        r.skip_tagged_fields()?;
    }
    let end = r.pos();
    Ok(Entry {
        range: start..end,
        topic: if resource_type == RESOURCE_TYPE_TOPIC { TopicRef::Name(name) } else { TopicRef::NotATopic },
        partitions: Vec::new(),
        config_names,
        resource_type,
    })
}

/// What to keep of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Keep {
    /// The whole entry.
    All,
    /// Nothing of it. (The mirror lookup answers per topic, so a topic is kept or refused whole;
    /// the refusal is still reported per partition.)
    None,
}

/// Rebuilds the request with only what `keep` (one per entry) keeps. Entries whose partitions are all
/// dropped are dropped. The entries' count is written anew only when it changes: a client may encode
/// it in more bytes than needed (a varint with trailing zero groups, which Kafka reads), and what
/// the proxy need not change it forwards as it came.
pub(crate) fn rebuild(frame: &[u8], scanned: &ScannedRequest, keep: &[Keep]) -> Vec<u8> {
    let slice = |r: &Range<usize>| frame.get(r.clone()).unwrap_or_default();
    let mut out = Vec::with_capacity(frame.len());
    out.extend_from_slice(slice(&scanned.before));
    let kept: Vec<(&Entry, &Keep)> = scanned.entries.iter().zip(keep).filter(|(_, k)| **k == Keep::All).collect();
    if kept.len() == scanned.entries.len() {
        let count = scanned.before.end..scanned.entries.first().map_or(scanned.after.start, |e| e.range.start);
        out.extend_from_slice(slice(&count));
    } else {
        put_array_len(&mut out, scanned.flexible, kept.len());
    }
    for (entry, _) in kept {
        out.extend_from_slice(slice(&entry.range));
    }
    out.extend_from_slice(slice(&scanned.after));
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::{CreatePartitionsRequest, DeleteRecordsRequest, IncrementalAlterConfigsRequest, ProduceRequest, RequestHeader, TopicName};
    use kafka_protocol::messages::{create_partitions_request, delete_records_request, incremental_alter_configs_request, produce_request};
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

    use super::*;

    /// Encodes `request` with a header, as a client would (no length prefix).
    pub(crate) fn encode<R: Request + HeaderVersion>(request: &R, version: i16, correlation_id: i32) -> Bytes {
        let mut buf = BytesMut::new();
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        header.encode(&mut buf, R::header_version(version)).unwrap();
        request.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    pub(crate) fn decode<R: Request + HeaderVersion + Decodable>(frame: &[u8], version: i16) -> R {
        let mut buf = Bytes::copy_from_slice(frame);
        RequestHeader::decode(&mut buf, R::header_version(version)).unwrap();
        let r = R::decode(&mut buf, version).unwrap();
        assert_eq!(buf.len(), 0);
        r
    }

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    pub(crate) fn produce(version: i16, topics: &[(&str, &[i32])]) -> ProduceRequest {
        ProduceRequest::default().with_acks(-1).with_timeout_ms(1000).with_topic_data(
            topics
                .iter()
                .map(|(t, parts)| {
                    let topic = produce_request::TopicProduceData::default();
                    // v13 names topics by id only; older versions by name only.
                    let topic = if version >= 13 { topic.with_topic_id(uuid::Uuid::from_u128(t.len() as u128)) } else { topic.with_name(name(t)) };
                    topic.with_partition_data(
                        parts
                            .iter()
                            .map(|p| {
                                produce_request::PartitionProduceData::default()
                                    .with_index(*p)
                                    .with_records(Some(Bytes::from(vec![*p as u8; 10 + *p as usize])))
                            })
                            .collect(),
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn produce_every_version_scans_and_rebuilds() {
        for v in 3..=13 {
            let request = produce(v, &[("keep", &[0, 1]), ("mirror", &[0, 1, 2]), ("mixed", &[5, 6])]);
            let frame = encode(&request, v, 7);
            let scanned = scan_request(&frame, ApiKey::Produce, v).unwrap();
            assert_eq!(scanned.acks, Some(-1));
            assert_eq!(scanned.entries.len(), 3);
            if v < 13 {
                assert_eq!(scanned.entries[1].topic, TopicRef::Name("mirror".to_owned()));
            } else {
                assert_eq!(scanned.entries[1].topic, TopicRef::Id(uuid::Uuid::from_u128(6)));
            }
            let indexes: Vec<i32> = scanned.entries[1].partitions.iter().map(|p| p.index).collect();
            assert_eq!(indexes, vec![0, 1, 2]);

            // Keeping everything reproduces the frame exactly.
            let all = rebuild(&frame, &scanned, &[Keep::All, Keep::All, Keep::All]);
            assert_eq!(all, frame.to_vec(), "v{v}");

            let rebuilt = rebuild(&frame, &scanned, &[Keep::All, Keep::None, Keep::All]);
            let expected = produce(v, &[("keep", &[0, 1]), ("mixed", &[5, 6])]);
            let decoded: ProduceRequest = decode(&rebuilt, v);
            assert_eq!(decoded, expected, "v{v}");
        }
    }

    /// `parse_request`, the fuzz target's entry, on real requests of every version: the whole frame
    /// reads, with its head read alone from any cut; a frame cut short is malformed, never a
    /// disagreement between the two readings.
    #[test]
    fn parse_request_reads_real_produce_requests_consistently() {
        use crate::proxy::{ParseError, parse_request};
        for v in 3..=13 {
            let frame = encode(&produce(v, &[("a", &[0, 1]), ("b", &[1])]), v, 7);
            for cut in 0..=frame.len() {
                assert!(parse_request(&frame, cut).is_ok(), "v{v}, head cut at {cut}");
                let short = parse_request(&frame[..cut], cut);
                assert!(!matches!(short, Err(ParseError::Inconsistent(_))), "v{v}, frame cut at {cut}: {short:?}");
            }
        }
    }

    #[test]
    fn produce_prefix_of_every_version_and_of_part_of_a_request() {
        for v in 3..=13 {
            for topics in [&[("one", &[0, 1][..])][..], &[("a", &[0][..]), ("b", &[1][..])][..]] {
                let frame = encode(&produce(v, topics), v, 7);
                let prefix = produce_prefix(&frame, v).unwrap();
                assert_eq!((prefix.acks, prefix.topics), (-1, topics.len()), "v{v}");
                let scanned = scan_request(&frame, ApiKey::Produce, v).unwrap();
                assert_eq!(prefix.first_topic.as_ref(), Some(&scanned.entries[0].topic), "v{v}");
                // The prefix ends with the first topic's name or id: any cut before that is an error.
                let name = topics[0].0.len();
                let end = scanned.entries[0].range.start
                    + if v >= 13 {
                        16
                    } else if v >= 9 {
                        1 + name
                    } else {
                        2 + name
                    };
                for cut in 0..end {
                    assert!(produce_prefix(&frame[..cut], v).is_err(), "v{v} cut at {cut}");
                }
                assert!(produce_prefix(&frame[..end + 2], v).is_ok(), "v{v}: the records need not be there");
            }
        }
        assert!(produce_prefix(&encode(&produce(9, &[("t", &[0])]), 9, 1), 14).is_err());
    }

    #[test]
    fn delete_records_create_partitions_configs_scan() {
        for v in 0..=2 {
            let request = DeleteRecordsRequest::default().with_timeout_ms(5).with_topics(vec![
                delete_records_request::DeleteRecordsTopic::default()
                    .with_name(name("a"))
                    .with_partitions(vec![delete_records_request::DeleteRecordsPartition::default().with_partition_index(3).with_offset(9)]),
                delete_records_request::DeleteRecordsTopic::default().with_name(name("b")),
            ]);
            let frame = encode(&request, v, 1);
            let scanned = scan_request(&frame, ApiKey::DeleteRecords, v).unwrap();
            assert_eq!(scanned.entries[0].partitions[0].index, 3);
            let rebuilt = rebuild(&frame, &scanned, &[Keep::None, Keep::All]);
            let decoded: DeleteRecordsRequest = decode(&rebuilt, v);
            assert_eq!(decoded.topics.len(), 1);
            assert_eq!(decoded.timeout_ms, 5);
        }
        for v in 0..=3 {
            let request = CreatePartitionsRequest::default().with_validate_only(true).with_topics(vec![
                create_partitions_request::CreatePartitionsTopic::default().with_name(name("a")).with_count(4).with_assignments(Some(vec![
                    create_partitions_request::CreatePartitionsAssignment::default().with_broker_ids(vec![kafka_protocol::messages::BrokerId(1)]),
                ])),
                create_partitions_request::CreatePartitionsTopic::default().with_name(name("b")).with_count(2),
            ]);
            let frame = encode(&request, v, 1);
            let scanned = scan_request(&frame, ApiKey::CreatePartitions, v).unwrap();
            let rebuilt = rebuild(&frame, &scanned, &[Keep::All, Keep::None]);
            let decoded: CreatePartitionsRequest = decode(&rebuilt, v);
            assert_eq!(decoded.topics.len(), 1);
            assert!(decoded.validate_only);
        }
        for v in 0..=1 {
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
                incremental_alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_static_str("t"))
                    .with_configs(vec![
                        incremental_alter_configs_request::AlterableConfig::default()
                            .with_name(StrBytes::from_static_str("retention.ms"))
                            .with_value(Some(StrBytes::from_static_str("1"))),
                    ]),
                incremental_alter_configs_request::AlterConfigsResource::default().with_resource_type(4).with_resource_name(StrBytes::from_static_str("1")),
            ]);
            let frame = encode(&request, v, 1);
            let scanned = scan_request(&frame, ApiKey::IncrementalAlterConfigs, v).unwrap();
            assert_eq!(scanned.entries[0].topic, TopicRef::Name("t".to_owned()));
            assert_eq!(scanned.entries[0].config_names, vec!["retention.ms".to_owned()]);
            assert_eq!(scanned.entries[1].topic, TopicRef::NotATopic);
        }
    }

    #[test]
    fn truncations_and_trailing_bytes_are_errors() {
        let frame = encode(&produce(9, &[("t", &[0])]), 9, 1);
        for cut in 0..frame.len() {
            assert!(scan_request(&frame[..cut], ApiKey::Produce, 9).is_err(), "cut at {cut}");
        }
        let mut long = frame.to_vec();
        long.push(0);
        assert!(scan_request(&long, ApiKey::Produce, 9).is_err());
        assert!(matches!(scan_request(&frame, ApiKey::Produce, 14), Err(ScanError::UnsupportedVersion { .. })));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(proptest::num::u8::ANY, 0..80), v in 0i16..14, cut in 0usize..100) {
            for key in [ApiKey::Produce, ApiKey::DeleteRecords, ApiKey::CreatePartitions, ApiKey::AlterConfigs, ApiKey::IncrementalAlterConfigs] {
                let mut frame = vec![0u8, key as u8, 0, v as u8, 0, 0, 0, 1, 0xff, 0xff];
                frame.extend_from_slice(&body);
                // The fuzz target's checks: a scanned request rebuilds to its own bytes, and a
                // Produce head read alone agrees with the whole scan.
                let parsed = crate::proxy::parse_request(&frame, cut);
                proptest::prop_assert!(!matches!(parsed, Err(crate::proxy::ParseError::Inconsistent(_))), "{:?}", parsed);
            }
        }
    }

    /// Fuzz finding (proxy_request): a null top-level array (here IncrementalAlterConfigs v1's
    /// `resources`) was read as empty, and `rebuild` wrote it back as an empty array, changing the
    /// request. No scanned API lets it be null, so the request is malformed, as Kafka's parser says.
    #[test]
    fn a_null_entries_array_is_malformed() {
        let frame = [0, 44, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0x40, 0];
        let err = scan_request(&frame, ApiKey::IncrementalAlterConfigs, 1).unwrap_err();
        assert!(matches!(err, ScanError::Malformed { source: WireError::UnexpectedNull { what: "entries", offset: 11 }, .. }), "{err:?}");
        assert!(matches!(crate::proxy::parse_request(&frame, 0), Err(crate::proxy::ParseError::Malformed(_))));
        // The same in a non-flexible version: a count of -1.
        let frame = [0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 255, 255, 0, 1, 0, 0, 0, 0, 255, 255, 255, 255];
        let err = scan_request(&frame, ApiKey::Produce, 3).unwrap_err();
        assert!(matches!(err, ScanError::Malformed { source: WireError::UnexpectedNull { what: "entries", .. }, .. }), "{err:?}");
    }

    /// Fuzz finding (proxy_request): an AlterConfigs v2 request whose (empty) `resources` count is
    /// the varint 0x81 0x00, one value in two bytes, which Kafka reads as 1 (an empty compact
    /// array). Rebuilt with everything kept, the count was written in one byte, changing the request;
    /// it is now kept as it came, and written anew only when entries are dropped.
    #[test]
    fn a_count_in_more_bytes_than_needed_is_kept_as_it_came() {
        let frame = [0, 33, 0, 2, 0, 0, 0, 1, 0xff, 0xff, 0, 0x81, 0, 4, 0];
        let scanned = scan_request(&frame, ApiKey::AlterConfigs, 2).unwrap();
        assert!(scanned.entries.is_empty());
        assert_eq!(rebuild(&frame, &scanned, &[]), frame);
        assert!(crate::proxy::parse_request(&frame, 0).is_ok());
        // With an entry dropped, the count is written anew (canonically).
        let frame = encode(&produce(9, &[("a", &[0][..]), ("b", &[1][..])]), 9, 7);
        let scanned = scan_request(&frame, ApiKey::Produce, 9).unwrap();
        let rebuilt = rebuild(&frame, &scanned, &[Keep::All, Keep::None]);
        let again = scan_request(&rebuilt, ApiKey::Produce, 9).unwrap();
        assert_eq!(again.entries.iter().map(|e| e.topic.clone()).collect::<Vec<_>>(), [TopicRef::Name("a".into())]);
    }
}
