//! A minimal, blocking Kafka client for one request: `Metadata` v4. The harness uses it to tell when a
//! broker is ready (it answers and lists the expected live brokers) and when a new topic has leaders on
//! every broker, without starting a JVM per poll.
//!
//! It deliberately does not use the crate under test, so a bug there cannot hide a bug here.
//!
//! # References
//! - <https://kafka.apache.org/protocol#The_Messages_Metadata> (request and response v4)
//! - <https://kafka.apache.org/protocol#protocol_messages> (request header v1, response header v0)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::{HarnessError, Result};

const API_KEY_METADATA: i16 = 3;
const METADATA_VERSION: i16 = 4;
/// Refuse responses larger than this (bytes); ours are tiny.
const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// A broker as listed in a Metadata response: only live (unfenced) brokers are listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataBroker {
    /// KRaft node id.
    pub node_id: i32,
    /// Advertised host.
    pub host: String,
    /// Advertised port.
    pub port: i32,
}

/// One partition of a topic in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataPartition {
    /// Kafka error code; 0 is none.
    pub error_code: i16,
    /// Partition index.
    pub partition_index: i32,
    /// Leader node id, -1 if none.
    pub leader_id: i32,
    /// Replica node ids.
    pub replica_nodes: Vec<i32>,
    /// In-sync replica node ids.
    pub isr_nodes: Vec<i32>,
}

/// One topic in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataTopic {
    /// Kafka error code; 3 is UNKNOWN_TOPIC_OR_PARTITION.
    pub error_code: i16,
    /// Topic name.
    pub name: String,
    /// Partitions, in the order the broker sent them.
    pub partitions: Vec<MetadataPartition>,
}

/// The parts of a Metadata v4 response the harness uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// Live brokers.
    pub brokers: Vec<MetadataBroker>,
    /// The active controller as brokers see it (in KRaft a random broker id), -1 if unknown.
    pub controller_id: i32,
    /// Requested topics (all topics if none were named).
    pub topics: Vec<MetadataTopic>,
}

/// Sends one Metadata v4 request to `addr` (`host:port`) and parses the reply. `topics: None` asks for
/// every topic; `Some(&[])` for none (cheapest: brokers only). Auto topic creation is never requested.
///
/// # Errors
/// [`HarnessError::Wire`] on connect, I/O or parse failure, or if `timeout` passes.
pub fn metadata(addr: &str, topics: Option<&[&str]>, timeout: Duration) -> Result<Metadata> {
    let wire = |reason: String| HarnessError::Wire { addr: addr.to_string(), reason };
    let socket: SocketAddr = addr.to_socket_addrs().map_err(|e| wire(format!("resolving: {e}")))?.next().ok_or_else(|| wire("resolves to nothing".into()))?;
    let mut stream = TcpStream::connect_timeout(&socket, timeout).map_err(|e| wire(format!("connect: {e}")))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| wire(e.to_string()))?;
    stream.set_write_timeout(Some(timeout)).map_err(|e| wire(e.to_string()))?;
    let correlation_id = 0x4b4d_5031; // "KMP1"
    stream.write_all(&encode_request(correlation_id, topics)).map_err(|e| wire(format!("write: {e}")))?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).map_err(|e| wire(format!("read: {e}")))?;
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size).ok().filter(|s| *s <= MAX_RESPONSE_BYTES).ok_or_else(|| wire(format!("bad response size {size}")))?;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).map_err(|e| wire(format!("read: {e}")))?;
    let mut reader = Reader { buf: &body };
    let got = reader.i32().map_err(&wire)?;
    if got != correlation_id {
        return Err(wire(format!("correlation id {got}, expected {correlation_id}")));
    }
    decode_response(&mut reader).map_err(wire)
}

fn encode_request(correlation_id: i32, topics: Option<&[&str]>) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&API_KEY_METADATA.to_be_bytes());
    body.extend_from_slice(&METADATA_VERSION.to_be_bytes());
    body.extend_from_slice(&correlation_id.to_be_bytes());
    put_string(&mut body, "kafka-harness");
    match topics {
        None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        Some(names) => {
            body.extend_from_slice(&(names.len() as i32).to_be_bytes());
            for name in names {
                put_string(&mut body, name);
            }
        }
    }
    body.push(0); // allow_auto_topic_creation = false
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as i16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn decode_response(r: &mut Reader<'_>) -> std::result::Result<Metadata, String> {
    let _throttle_time_ms = r.i32()?;
    let mut brokers = Vec::new();
    for _ in 0..r.count()? {
        let node_id = r.i32()?;
        let host = r.string()?.unwrap_or_default();
        let port = r.i32()?;
        let _rack = r.string()?;
        brokers.push(MetadataBroker { node_id, host, port });
    }
    let _cluster_id = r.string()?;
    let controller_id = r.i32()?;
    let mut topics = Vec::new();
    for _ in 0..r.count()? {
        let error_code = r.i16()?;
        let name = r.string()?.unwrap_or_default();
        let _is_internal = r.bytes(1)?;
        let mut partitions = Vec::new();
        for _ in 0..r.count()? {
            let error_code = r.i16()?;
            let partition_index = r.i32()?;
            let leader_id = r.i32()?;
            let replica_nodes = r.i32_array()?;
            let isr_nodes = r.i32_array()?;
            partitions.push(MetadataPartition { error_code, partition_index, leader_id, replica_nodes, isr_nodes });
        }
        topics.push(MetadataTopic { error_code, name, partitions });
    }
    if !r.buf.is_empty() {
        return Err(format!("{} trailing bytes", r.buf.len()));
    }
    Ok(Metadata { brokers, controller_id, topics })
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if self.buf.len() < n {
            return Err(format!("truncated response: need {n} bytes, have {}", self.buf.len()));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn i16(&mut self) -> std::result::Result<i16, String> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> std::result::Result<i32, String> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// An array length; -1 (null) reads as empty. Bounded by the bytes left, so a bad length cannot make
    /// the loop run long.
    fn count(&mut self) -> std::result::Result<usize, String> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(0);
        }
        let n = n as usize;
        if n > self.buf.len() {
            return Err(format!("array length {n} exceeds remaining {} bytes", self.buf.len()));
        }
        Ok(n)
    }
    fn string(&mut self) -> std::result::Result<Option<String>, String> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.bytes(len as usize)?;
        Ok(Some(String::from_utf8_lossy(b).into_owned()))
    }
    fn i32_array(&mut self) -> std::result::Result<Vec<i32>, String> {
        let n = self.count()?;
        (0..n).map(|_| self.i32()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bytes() {
        let frame = encode_request(7, Some(&["t"]));
        let expected: Vec<u8> = [
            &[0, 0, 0, 31][..], // size
            &[0, 3, 0, 4],      // api key, version
            &[0, 0, 0, 7],      // correlation id
            &[0, 13],           // client id length
            b"kafka-harness",
            &[0, 0, 0, 1, 0, 1, b't'], // topics
            &[0],                      // allow_auto_topic_creation
        ]
        .concat();
        assert_eq!(frame, expected);
    }

    #[test]
    fn response_parses_and_rejects_truncation() {
        let body: Vec<u8> = [
            &[0, 0, 0, 0][..],                                       // throttle
            &[0, 0, 0, 1],                                           // 1 broker
            &[0, 0, 0, 2, 0, 1, b'h', 0, 0, 0x23, 0x84, 0xff, 0xff], // id 2, "h", 9092, null rack
            &[0xff, 0xff],                                           // null cluster id
            &[0, 0, 0, 2],                                           // controller
            &[0, 0, 0, 1, 0, 0, 0, 1, b't', 0],                      // 1 topic "t", not internal
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0],
        ]
        .concat();
        let parsed = decode_response(&mut Reader { buf: &body }).expect("valid");
        assert_eq!(parsed.brokers, vec![MetadataBroker { node_id: 2, host: "h".into(), port: 9092 }]);
        assert_eq!(parsed.topics[0].partitions[0].leader_id, 2);
        assert_eq!(parsed.topics[0].partitions[0].isr_nodes, Vec::<i32>::new());
        for cut in 0..body.len() {
            assert!(decode_response(&mut Reader { buf: &body[..cut] }).is_err(), "cut at {cut}");
        }
    }
}
