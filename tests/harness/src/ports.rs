//! Loopback ports for brokers.
//!
//! Ports are chosen at random below the kernel's ephemeral range (`ip_local_port_range`) and checked by
//! binding them: an outgoing connection can never take such a port, so a killed broker can be restarted
//! on its old port. Within one process no port is handed out twice. Two processes can still race for a
//! port between the check and the broker's bind; [`crate::Cluster::start`] then retries on new ports.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use crate::error::{HarnessError, Result};
use crate::util;

/// A free loopback port, never the same one twice within this process.
pub(crate) fn pick_port() -> Result<u16> {
    static USED: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let used = USED.get_or_init(Default::default);
    let mut used = used.lock().unwrap_or_else(|p| p.into_inner());
    let range = port_range();
    for _ in 0..1000 {
        let port = match range {
            Some((low, high)) => low + (util::random_u64() % u64::from(high - low)) as u16,
            None => {
                // No room below the ephemeral range: let the kernel pick (restarts may then race).
                let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| HarnessError::io("binding a port", e))?;
                listener.local_addr().map_err(|e| HarnessError::io("binding a port", e))?.port()
            }
        };
        if used.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            used.insert(port);
            return Ok(port);
        }
    }
    Err(HarnessError::InvalidArgument("no free loopback port found in 1000 tries".into()))
}

/// Ports to choose from: `[10000, start of the ephemeral range)`, if that range has room.
fn port_range() -> Option<(u16, u16)> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse::<u16>().ok()))
        .unwrap_or(32768);
    (ephemeral_low >= 12000).then_some((10000, ephemeral_low))
}
