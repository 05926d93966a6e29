//! The destination brokers as the proxy knows them: for each node id, the broker's real address and
//! the proxy listener that fronts it; and the topic ids of the destination (Produce v13 names topics
//! by id, the write policy needs names).
//!
//! ```text
//!   metadata refresh task ─┐
//!                          ├─► Registry::observe(brokers) ─► new node: bind a listener (port_for)
//!   Metadata / FindCoordinator / … responses ─┘                  known node: update address, last seen
//!
//!   refresh task: node missing for broker_removal_delay ─► its listener stops accepting
//! ```
//!
//! Ports: broker `N` listens on `broker_port_base + N` (default: bootstrap port + 1), so a broker
//! keeps its port across restarts and additions of others; with no base (bootstrap on port 0), each
//! broker listener gets a free port, kept for the life of the process.
//!
//! Does not own: accepting connections (that is [`super::listener`]); it only records the listener's
//! port and its stop token.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::rewrite::Endpoint;

/// One destination broker.
#[derive(Debug)]
struct BrokerEntry {
    /// The broker's own `host:port`.
    upstream: String,
    /// The proxy listener's port.
    port: u16,
    /// Last time metadata named it.
    last_seen: Instant,
    /// Stops the listener.
    stop: CancellationToken,
}

/// Brokers, their listeners, and topic ids.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    brokers: Mutex<HashMap<i32, BrokerEntry>>,
    topic_ids: RwLock<HashMap<uuid::Uuid, String>>,
    /// Serialises listener creation, so two responses naming a new broker bind it once.
    bind_lock: tokio::sync::Mutex<()>,
    next_bootstrap: AtomicUsize,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, BrokerEntry>> {
        self.brokers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The listener creation lock (held across a bind).
    pub(crate) fn bind_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.bind_lock
    }

    /// The proxy endpoint of `node_id` if it has a listener; updates its address and last-seen time.
    pub(crate) fn touch(&self, node_id: i32, upstream: &str, advertised_host: &str) -> Option<Endpoint> {
        let mut brokers = self.lock();
        let entry = brokers.get_mut(&node_id)?;
        if entry.upstream != upstream {
            entry.upstream = upstream.to_owned();
        }
        entry.last_seen = Instant::now();
        Some(Endpoint { host: advertised_host.to_owned(), port: i32::from(entry.port) })
    }

    /// The proxy endpoint of `node_id` if it has a listener, without counting as a sighting.
    pub(crate) fn endpoint_of(&self, node_id: i32, advertised_host: &str) -> Option<Endpoint> {
        self.lock().get(&node_id).map(|e| Endpoint { host: advertised_host.to_owned(), port: i32::from(e.port) })
    }

    /// Records a new broker listener.
    pub(crate) fn insert(&self, node_id: i32, upstream: &str, port: u16, stop: CancellationToken) {
        self.lock().insert(node_id, BrokerEntry { upstream: upstream.to_owned(), port, last_seen: Instant::now(), stop });
    }

    /// The real address of `node_id`.
    pub(crate) fn upstream_of(&self, node_id: i32) -> Option<String> {
        self.lock().get(&node_id).map(|e| e.upstream.clone())
    }

    /// Broker addresses for a bootstrap connection, starting at a rotating position so bootstrap
    /// connections spread over brokers.
    pub(crate) fn bootstrap_candidates(&self) -> Vec<String> {
        let mut all: Vec<(i32, String)> = self.lock().iter().map(|(id, e)| (*id, e.upstream.clone())).collect();
        all.sort();
        if all.is_empty() {
            return Vec::new();
        }
        let start = self.next_bootstrap.fetch_add(1, Ordering::Relaxed) % all.len();
        all.rotate_left(start);
        all.into_iter().map(|(_, a)| a).collect()
    }

    /// Number of brokers with a listener.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Stops the listeners of brokers not seen since `cutoff`; returns their ids.
    pub(crate) fn remove_unseen_since(&self, cutoff: Instant) -> Vec<i32> {
        let mut brokers = self.lock();
        let gone: Vec<i32> = brokers.iter().filter(|(_, e)| e.last_seen < cutoff).map(|(id, _)| *id).collect();
        for id in &gone {
            if let Some(e) = brokers.remove(id) {
                e.stop.cancel();
            }
        }
        gone
    }

    /// Replaces the topic id map (a full metadata refresh).
    pub(crate) fn set_topic_ids(&self, ids: impl IntoIterator<Item = (uuid::Uuid, String)>) {
        let fresh: HashMap<uuid::Uuid, String> = ids.into_iter().collect();
        *self.topic_ids.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    }

    /// Adds topic ids seen in a response.
    pub(crate) fn add_topic_ids(&self, ids: Vec<(uuid::Uuid, String)>) {
        if ids.is_empty() {
            return;
        }
        let mut map = self.topic_ids.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.extend(ids);
    }

    /// True if topic `id` is known.
    pub(crate) fn knows_topic(&self, id: &uuid::Uuid) -> bool {
        self.topic_ids.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(id)
    }

    /// The name of topic `id`, if known.
    pub(crate) fn topic_name(&self, id: &uuid::Uuid) -> Option<String> {
        self.topic_ids.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touch_insert_remove() {
        let r = Registry::default();
        assert!(r.touch(1, "a:1", "p").is_none());
        let stop = CancellationToken::new();
        r.insert(1, "a:1", 5000, stop.clone());
        assert_eq!(r.touch(1, "b:1", "p"), Some(Endpoint { host: "p".to_owned(), port: 5000 }));
        assert_eq!(r.endpoint_of(1, "q"), Some(Endpoint { host: "q".to_owned(), port: 5000 }));
        assert_eq!(r.upstream_of(1).as_deref(), Some("b:1"));
        assert_eq!(r.bootstrap_candidates(), vec!["b:1".to_owned()]);
        assert_eq!(r.remove_unseen_since(Instant::now() + std::time::Duration::from_secs(1)), vec![1]);
        assert!(stop.is_cancelled());
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn topic_ids() {
        let r = Registry::default();
        let id = uuid::Uuid::from_u128(9);
        r.add_topic_ids(vec![(id, "t".to_owned())]);
        assert_eq!(r.topic_name(&id).as_deref(), Some("t"));
        assert!(r.knows_topic(&id));
        r.set_topic_ids([]);
        assert_eq!(r.topic_name(&id), None);
    }
}
