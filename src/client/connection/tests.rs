//! Byte-level tests of one connection against a scripted fake broker on an in-memory duplex stream.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsResponse, MetadataRequest, MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::protocol::FrameError;

/// Reads one request frame; returns (api key, api version, correlation id).
async fn read_request(io: &mut DuplexStream) -> Option<(i16, i16, i32)> {
    let len = io.read_i32().await.ok()?;
    let mut body = vec![0u8; usize::try_from(len).ok()?];
    io.read_exact(&mut body).await.ok()?;
    let key = i16::from_be_bytes([body[0], body[1]]);
    let version = i16::from_be_bytes([body[2], body[3]]);
    let correlation_id = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
    Some((key, version, correlation_id))
}

fn response_frame<M: Encodable>(correlation_id: i32, header_version: i16, body: &M, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i32(0);
    ResponseHeader::default().with_correlation_id(correlation_id).encode(&mut buf, header_version).unwrap();
    body.encode(&mut buf, version).unwrap();
    let len = (buf.len() - 4) as i32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
    buf.to_vec()
}

fn api_versions(error_code: i16) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_error_code(error_code).with_api_keys(vec![
        ApiVersion::default().with_api_key(ApiKey::ApiVersions as i16).with_min_version(0).with_max_version(3),
        ApiVersion::default().with_api_key(ApiKey::Metadata as i16).with_min_version(0).with_max_version(12),
    ])
}

/// Answers the handshake and returns the broker side of the stream.
async fn connected(config: ConnectionConfig) -> (BrokerConnection, DuplexStream) {
    let (client, mut broker) = tokio::io::duplex(1 << 16);
    let handshake = tokio::spawn(async move {
        let (key, version, cid) = read_request(&mut broker).await.unwrap();
        assert_eq!((key, version), (ApiKey::ApiVersions as i16, 3));
        broker.write_all(&response_frame(cid, 0, &api_versions(0), 3)).await.unwrap();
        broker
    });
    let conn = BrokerConnection::handshake("fake:9092", client, config).await.unwrap();
    (conn, handshake.await.unwrap())
}

fn metadata_request() -> MetadataRequest {
    MetadataRequest::default().with_topics(Some(vec![]))
}

/// Sends a Metadata request on `conn` from a task of its own, so the test can play the broker.
fn spawn_metadata(conn: &Arc<BrokerConnection>) -> tokio::task::JoinHandle<Result<MetadataResponse, ConnectionError>> {
    let conn = conn.clone();
    tokio::spawn(async move { conn.send(&metadata_request(), None).await })
}

#[tokio::test]
async fn negotiates_highest_common_version() {
    let (conn, _broker) = connected(ConnectionConfig::default()).await;
    assert_eq!(conn.version_for(ApiKey::Metadata, None).unwrap(), 12);
    let err = conn.version_for(ApiKey::Produce, None).unwrap_err();
    assert!(matches!(err, ConnectionError::UnsupportedVersion { api_key: ApiKey::Produce, .. }), "{err}");
    let pinned = ConnectionConfig { pins: VersionPins::new().with_pin(ApiKey::Metadata, 9), ..Default::default() };
    let (conn, _broker) = connected(pinned).await;
    assert_eq!(conn.version_for(ApiKey::Metadata, None).unwrap(), 9);
    assert_eq!(conn.version_for(ApiKey::Metadata, Some(4)).unwrap(), 4);
}

#[tokio::test]
async fn matches_out_of_order_responses_by_correlation_id() {
    let (conn, mut broker) = connected(ConnectionConfig::default()).await;
    let conn = Arc::new(conn);
    let a = spawn_metadata(&conn);
    let b = spawn_metadata(&conn);
    let (_, v1, c1) = read_request(&mut broker).await.unwrap();
    let (_, v2, c2) = read_request(&mut broker).await.unwrap();
    assert_eq!((v1, v2), (12, 12));
    // Answer in reverse order, each with a cluster id naming its correlation id.
    for cid in [c2, c1] {
        let body = MetadataResponse::default().with_cluster_id(Some(StrBytes::from_string(format!("c{cid}"))));
        broker.write_all(&response_frame(cid, 1, &body, 12)).await.unwrap();
    }
    let ra = a.await.unwrap().unwrap();
    let rb = b.await.unwrap().unwrap();
    let mut got = vec![ra.cluster_id.unwrap().to_string(), rb.cluster_id.unwrap().to_string()];
    got.sort();
    let mut want = vec![format!("c{c1}"), format!("c{c2}")];
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test]
async fn oversized_frame_poisons_without_allocating() {
    let config = ConnectionConfig { max_frame_bytes: 1024, ..Default::default() };
    let (conn, mut broker) = connected(config).await;
    let pending = tokio::spawn(async move {
        let r = conn.send(&metadata_request(), None).await;
        (r, conn)
    });
    read_request(&mut broker).await.unwrap();
    broker.write_all(&(1i32 << 30).to_be_bytes()).await.unwrap();
    let (result, conn) = pending.await.unwrap();
    let err = result.unwrap_err();
    match &err {
        ConnectionError::Poisoned { source, .. } => {
            assert!(matches!(&**source, ConnectionError::Frame { source: FrameError::TooLarge { len, max: 1024 }, .. } if *len == 1 << 30), "{source:?}")
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.is_ambiguous());
    assert!(conn.is_poisoned());
    // Later requests fail at once with the same cause.
    let again = conn.send(&metadata_request(), None).await.unwrap_err();
    assert!(matches!(again, ConnectionError::Poisoned { .. }), "{again:?}");
}

#[tokio::test]
async fn peer_closing_mid_response_fails_in_flight_requests() {
    let (conn, mut broker) = connected(ConnectionConfig::default()).await;
    let pending = tokio::spawn(async move { conn.send(&metadata_request(), None).await });
    let (_, _, cid) = read_request(&mut broker).await.unwrap();
    let full = response_frame(cid, 1, &MetadataResponse::default(), 12);
    broker.write_all(&full[..full.len() / 2]).await.unwrap();
    drop(broker);
    let err = pending.await.unwrap().unwrap_err();
    match err {
        ConnectionError::Poisoned { source, .. } => {
            assert!(matches!(&*source, ConnectionError::Frame { source: FrameError::Truncated { .. }, .. }), "{source:?}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn truncated_body_is_a_decode_error() {
    let (conn, mut broker) = connected(ConnectionConfig::default()).await;
    let pending = tokio::spawn(async move { conn.send(&metadata_request(), None).await });
    let (_, _, cid) = read_request(&mut broker).await.unwrap();
    // A well-framed response whose body stops after the header.
    let mut buf = BytesMut::new();
    buf.put_i32(5);
    buf.put_i32(cid);
    buf.put_u8(0);
    broker.write_all(&buf).await.unwrap();
    let err = pending.await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectionError::Decode { api_key: ApiKey::Metadata, api_version: 12, .. }), "{err:?}");
}

/// A response that claims 4 billion brokers in nine bytes (what a corrupt or hostile source
/// cluster could send) is a decode error of that request, and the connection keeps working: it
/// must not abort the process. `kafka-protocol` reserves the claimed count up front, which the
/// system allocator refuses (an abort); the crate's allocator (src/lib.rs) reserves it without
/// committing it.
#[tokio::test]
async fn an_impossible_array_count_is_a_decode_error() {
    let (conn, mut broker) = connected(ConnectionConfig::default()).await;
    let conn = Arc::new(conn);
    let pending = spawn_metadata(&conn);
    let (_, _, cid) = read_request(&mut broker).await.unwrap();
    let mut buf = BytesMut::new();
    buf.put_i32(14);
    buf.put_i32(cid);
    buf.put_u8(0); // header tagged fields
    buf.put_i32(0); // throttle_time_ms
    buf.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]); // brokers: u32::MAX - 1 entries, none sent
    broker.write_all(&buf).await.unwrap();
    let err = pending.await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectionError::Decode { api_key: ApiKey::Metadata, api_version: 12, .. }), "{err:?}");
    // The frame was whole, so the connection is still in step: the next request is answered.
    let next = spawn_metadata(&conn);
    let (_, _, cid) = read_request(&mut broker).await.unwrap();
    broker.write_all(&response_frame(cid, 1, &MetadataResponse::default(), 12)).await.unwrap();
    next.await.unwrap().expect("the next request is answered");
}

#[tokio::test]
async fn unknown_error_code_in_handshake_is_typed() {
    let (client, mut broker) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let (_, _, cid) = read_request(&mut broker).await.unwrap();
        broker.write_all(&response_frame(cid, 0, &api_versions(9999), 3)).await.unwrap();
        // Keep the stream open until the client is done.
        let _ = read_request(&mut broker).await;
    });
    let err = BrokerConnection::handshake("fake:9092", client, ConnectionConfig::default()).await.unwrap_err();
    assert!(matches!(err, ConnectionError::Handshake { code: ErrorCode::Unknown(9999), .. }), "{err:?}");
}

/// A request that times out gives the connection up (as Kafka's NetworkClient does): a broker
/// answers in order, so nothing behind it comes sooner, and a peer gone without FIN or RST (a
/// black hole, a half-open link) never answers. Later calls fail at once; the client reconnects.
#[tokio::test(start_paused = true)]
async fn a_timeout_gives_the_connection_up() {
    let config = ConnectionConfig { request_timeout: Duration::from_secs(5), ..Default::default() };
    let (conn, mut broker) = connected(config).await;
    let err = conn.send(&metadata_request(), None).await.unwrap_err();
    assert!(matches!(err, ConnectionError::Timeout { api_key: ApiKey::Metadata, .. }), "{err:?}");
    assert!(err.is_ambiguous());
    assert!(conn.is_poisoned() && !conn.is_usable());
    // A late answer changes nothing, and nothing more is sent on this connection.
    let (_, _, late) = read_request(&mut broker).await.unwrap();
    let _ = broker.write_all(&response_frame(late, 1, &MetadataResponse::default(), 12)).await;
    let again = conn.send(&metadata_request(), None).await.unwrap_err();
    assert!(matches!(again, ConnectionError::Poisoned { .. }), "{again:?}");
}

#[tokio::test]
async fn unexpected_correlation_id_poisons() {
    let (conn, mut broker) = connected(ConnectionConfig::default()).await;
    let pending = tokio::spawn(async move { conn.send(&metadata_request(), None).await });
    read_request(&mut broker).await.unwrap();
    broker.write_all(&response_frame(123_456, 1, &MetadataResponse::default(), 12)).await.unwrap();
    let err = pending.await.unwrap().unwrap_err();
    match err {
        ConnectionError::Poisoned { source, .. } => {
            assert!(matches!(&*source, ConnectionError::UnexpectedCorrelationId { correlation_id: 123_456, .. }));
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Log lines, for checking what never appears in them.
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads one request frame whole (header and body).
async fn read_frame(io: &mut DuplexStream) -> Vec<u8> {
    let len = io.read_i32().await.unwrap();
    let mut body = vec![0u8; usize::try_from(len).unwrap()];
    io.read_exact(&mut body).await.unwrap();
    body
}

/// The SASL exchange against a scripted broker: ApiVersions, SaslHandshake v1 naming PLAIN, one
/// SaslAuthenticate carrying `\0user\0password`, and the broker's refusal as a typed error with its
/// message. The password appears in no log line (TRACE level) and in no error text.
#[tokio::test]
async fn sasl_refusal_is_typed_and_the_password_is_never_logged() {
    use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeResponse};
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt().with_max_level(tracing::Level::TRACE).with_ansi(false).with_writer(move || writer.clone()).finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (client, mut broker) = tokio::io::duplex(1 << 16);
    let script = tokio::spawn(async move {
        let (key, version, cid) = read_request(&mut broker).await.unwrap();
        assert_eq!((key, version), (ApiKey::ApiVersions as i16, 3));
        let versions = ApiVersionsResponse::default().with_api_keys(vec![
            ApiVersion::default().with_api_key(ApiKey::ApiVersions as i16).with_max_version(3),
            ApiVersion::default().with_api_key(ApiKey::SaslHandshake as i16).with_max_version(1),
            ApiVersion::default().with_api_key(ApiKey::SaslAuthenticate as i16).with_max_version(2),
        ]);
        broker.write_all(&response_frame(cid, 0, &versions, 3)).await.unwrap();
        let frame = read_frame(&mut broker).await;
        assert_eq!(frame[..4], [0, 17, 0, 1], "SaslHandshake v1");
        assert!(frame.ends_with(b"PLAIN"), "{frame:?}");
        let cid = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let handshake = SaslHandshakeResponse::default().with_mechanisms(vec![StrBytes::from_static_str("PLAIN")]);
        broker.write_all(&response_frame(cid, 0, &handshake, 1)).await.unwrap();
        let frame = read_frame(&mut broker).await;
        assert_eq!(frame[..4], [0, 36, 0, 2], "SaslAuthenticate v2");
        assert!(frame.windows(16).any(|w| w == b"\0alice\0s3cret-pw"), "PLAIN token: {frame:?}");
        let cid = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let refusal = SaslAuthenticateResponse::default()
            .with_error_code(58)
            .with_error_message(Some(StrBytes::from_static_str("Authentication failed: Invalid username or password")));
        broker.write_all(&response_frame(cid, 1, &refusal, 2)).await.unwrap();
        broker
    });
    let mut conn = BrokerConnection::handshake("fake:9092", client, ConnectionConfig::default()).await.unwrap();
    // Other tests running in parallel may have registered the request callsites while no
    // subscriber was interested, caching "never" (tracing's interest cache is global). The
    // handshake above has registered them by now; recompute their interest with ours in place.
    tracing::callsite::rebuild_interest_cache();
    let sasl = SaslSettings { mechanism: super::super::SaslMechanism::Plain, username: "alice".to_owned(), password: "s3cret-pw".to_owned() };
    let err = conn.authenticate(&sasl).await.unwrap_err();
    let _broker = script.await.unwrap();
    match &err {
        ConnectionError::Authentication { addr, mechanism, code, message } => {
            assert_eq!((addr.as_str(), *mechanism), ("fake:9092", "PLAIN"));
            assert_eq!(*code, Some(ErrorCode::SaslAuthenticationFailed));
            assert_eq!(message, "Authentication failed: Invalid username or password");
        }
        other => panic!("expected an authentication error, got {other:?}"),
    }
    assert!(err.is_security_failure() && !err.is_transport());
    let logged = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logged.contains("api_key=36"), "the SaslAuthenticate request was traced: {logged}");
    for text in [logged, err.to_string(), format!("{err:?}"), format!("{sasl:?}")] {
        assert!(!text.contains("s3cret-pw"), "password leaked: {text}");
    }
}

/// A panic in a decode becomes an error naming it, and a decode that returns is passed through.
/// (No response bytes are known to make `kafka-protocol` panic, so the guard is tested on its own.)
#[test]
fn a_panicking_decode_is_an_error() {
    let err = super::unpanicked(|| -> u8 { panic!("index out of bounds") }).unwrap_err();
    assert_eq!(err, "the decoder panicked: index out of bounds");
    assert_eq!(super::unpanicked(|| 7), Ok(7));
}
