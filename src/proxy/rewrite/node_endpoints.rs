//! The `node_endpoints` list that Fetch (v16+, in a tagged field), ShareFetch and ShareAcknowledge
//! responses end with: the leaders of partitions answered NOT_LEADER_OR_FOLLOWER (KIP-951), read as
//! the broker's bytes and written back with the hosts and ports the proxy maps them to.
//!
//! Used where the proxy walks a response instead of decoding it: streamed Fetch responses
//! ([`crate::proxy::stream`]) and share responses ([`super::share`]). An entry the proxy does not map
//! is written back byte for byte (rack and tagged fields are kept raw).

use std::collections::HashMap;

use bytes::BufMut as _;

use super::{BrokerEndpoint, Endpoint};
use crate::proxy::wire::{Reader, WireError, put_array_len, put_uvarint};

/// One entry: `node_id`, `host`, `port`, `rack`, tagged fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeEndpoint {
    node_id: i32,
    host: Vec<u8>,
    port: i32,
    /// The rack as a compact nullable string, as it was.
    rack: Vec<u8>,
    /// The tagged-field section, as it was.
    tags: Vec<u8>,
}

impl NodeEndpoint {
    /// `(node_id, host, port)`.
    pub(crate) fn broker_endpoint(&self) -> BrokerEndpoint {
        (self.node_id, String::from_utf8_lossy(&self.host).into_owned(), self.port)
    }

    /// Takes the host and port `map` has for this node, if it has one.
    fn apply(&mut self, map: &HashMap<i32, Endpoint>) {
        if let Some(to) = map.get(&self.node_id) {
            self.host = to.host.as_bytes().to_vec();
            self.port = to.port;
        }
    }
}

/// Reads a compact array of entries (a null array reads as empty).
///
/// # Errors
/// Truncated or malformed entries.
pub(crate) fn read(r: &mut Reader<'_>) -> Result<Vec<NodeEndpoint>, WireError> {
    // node_id + host + port + rack + tags: 11 bytes at least.
    let count = r.array_len(true, 11, "node_endpoints")?.unwrap_or(0);
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        let node_id = r.i32("node_id")?;
        let at = r.pos();
        let host = r.nullable_string(true, "host")?.ok_or(WireError::UnexpectedNull { what: "host", offset: at })?.to_vec();
        let port = r.i32("port")?;
        let rack = r.raw(|r| r.nullable_string(true, "rack").map(drop))?.to_vec();
        let tags = r.raw(Reader::skip_tagged_fields)?.to_vec();
        nodes.push(NodeEndpoint { node_id, host, port, rack, tags });
    }
    Ok(nodes)
}

/// Maps every entry through `map` (node id to the proxy's endpoint); entries not in it stay.
pub(crate) fn apply(nodes: &mut [NodeEndpoint], map: &HashMap<i32, Endpoint>) {
    nodes.iter_mut().for_each(|n| n.apply(map));
}

/// Appends `nodes` as a compact array.
pub(crate) fn write(out: &mut Vec<u8>, nodes: &[NodeEndpoint]) {
    put_array_len(out, true, nodes.len());
    for n in nodes {
        out.put_i32(n.node_id);
        put_uvarint(out, u32::try_from(n.host.len() + 1).unwrap_or(u32::MAX));
        out.extend_from_slice(&n.host);
        out.put_i32(n.port);
        out.extend_from_slice(&n.rack);
        out.extend_from_slice(&n.tags);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_only_mapped_ones_change() {
        let mut bytes = Vec::new();
        put_array_len(&mut bytes, true, 2);
        for (id, host, port, rack) in [(1, "b-1", 9092, None), (2, "b-2", 9093, Some("r"))] {
            bytes.put_i32(id);
            put_uvarint(&mut bytes, host.len() as u32 + 1);
            bytes.extend_from_slice(host.as_bytes());
            bytes.put_i32(port);
            match rack {
                None => put_uvarint(&mut bytes, 0),
                Some(r) => {
                    put_uvarint(&mut bytes, r.len() as u32 + 1);
                    bytes.extend_from_slice(r.as_bytes());
                }
            }
            bytes.extend_from_slice(&[1, 5, 1, 0xAA]); // one tagged field, tag 5, one byte
        }
        let mut r = Reader::new(&bytes);
        let mut nodes = read(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(nodes.iter().map(NodeEndpoint::broker_endpoint).collect::<Vec<_>>(), vec![(1, "b-1".to_owned(), 9092), (2, "b-2".to_owned(), 9093)]);
        let mut out = Vec::new();
        write(&mut out, &nodes);
        assert_eq!(out, bytes, "unmapped: the broker's bytes");

        apply(&mut nodes, &HashMap::from([(2, Endpoint { host: "proxy-host".to_owned(), port: 7002 })]));
        out.clear();
        write(&mut out, &nodes);
        let again = read(&mut Reader::new(&out)).unwrap();
        assert_eq!(again[0], nodes[0]);
        assert_eq!(again[1].broker_endpoint(), (2, "proxy-host".to_owned(), 7002));
        assert_eq!((again[1].rack.as_slice(), again[1].tags.as_slice()), (&[2, b'r'][..], &[1, 5, 1, 0xAA][..]));
        for len in 0..bytes.len() {
            assert!(read(&mut Reader::new(&bytes[..len])).is_err(), "cut at {len}");
        }
    }
}
