//! ACL bindings, from the source to the destination (spec §7), when `sync.acls.enabled` is true.
//!
//! `acls.include` lists resource-pattern filters, each `TYPE:PATTERN:NAME`: TYPE one of `topic`,
//! `group`, `cluster`, `transactional_id`, `any`; PATTERN one of `literal`, `prefixed`, `match`,
//! `any`; NAME a resource name or `*` for any name (e.g. `topic:prefixed:orders`,
//! `group:any:*`). Matching source bindings are created on the destination; a binding the mirror
//! created and the source no longer has is deleted there. Bindings created on the destination by
//! anyone else are never touched. Which bindings the mirror created is kept in an [`AclLedger`]
//! (the mirror manager's is `__mirror_state`), so this survives restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::groups::SyncError;
use crate::client::{
    ANY, AclBinding, AclFilter, Client, ClientError, PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED, RESOURCE_CLUSTER, RESOURCE_GROUP, RESOURCE_TOPIC,
    RESOURCE_TRANSACTIONAL_ID,
};

/// Parses `acls.include`.
///
/// # Errors
/// [`SyncError::InvalidPattern`] naming `acls.include` and the bad entry.
pub fn parse_acl_filters(include: &[&str]) -> Result<Vec<AclFilter>, SyncError> {
    include
        .iter()
        .map(|entry| {
            let bad = |message: &str| SyncError::InvalidPattern { key: "acls.include", pattern: (*entry).to_owned(), message: message.to_owned() };
            let mut parts = entry.splitn(3, ':');
            let (Some(t), Some(p), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
                return Err(bad("expected TYPE:PATTERN:NAME"));
            };
            let resource_type = match t.to_ascii_lowercase().as_str() {
                "topic" => RESOURCE_TOPIC,
                "group" => RESOURCE_GROUP,
                "cluster" => RESOURCE_CLUSTER,
                "transactional_id" => RESOURCE_TRANSACTIONAL_ID,
                "any" => ANY,
                _ => return Err(bad("TYPE must be topic, group, cluster, transactional_id or any")),
            };
            let pattern_type = match p.to_ascii_lowercase().as_str() {
                "literal" => PATTERN_LITERAL,
                "prefixed" => PATTERN_PREFIXED,
                "match" => PATTERN_MATCH,
                "any" => ANY,
                _ => return Err(bad("PATTERN must be literal, prefixed, match or any")),
            };
            let resource_name = (name != "*" || pattern_type == PATTERN_LITERAL).then(|| name.to_owned());
            Ok(AclFilter { resource_type, pattern_type, resource_name })
        })
        .collect()
}

/// Where a mirror's ACL sync keeps the bindings it created on the destination, so that after a
/// restart it still knows them as its own: it deletes them when the source deletes them, and never
/// touches bindings it did not create. The mirror manager keeps them in `__mirror_state` (key type
/// 3, see `mirror::records`); [`InMemoryAclLedger`] keeps them for the life of the process.
///
/// Order of writes, so that a crash at any point is safe: a binding is recorded as created *before*
/// it is created (a crash in between leaves a record of a binding that may not exist, and deleting
/// a missing binding is a no-op), and recorded as deleted *after* it is deleted (a crash in between
/// leaves a record the next run deletes again).
pub trait AclLedger: Send + Sync + std::fmt::Debug {
    /// The bindings `mirror` created and has not deleted.
    fn load<'a>(&'a self, mirror: &'a str) -> BoxFuture<'a, Result<BTreeSet<AclBinding>, LedgerError>>;
    /// Records that `mirror` is about to create `bindings`.
    fn record_created<'a>(&'a self, mirror: &'a str, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), LedgerError>>;
    /// Records that `mirror` deleted `bindings`.
    fn record_deleted<'a>(&'a self, mirror: &'a str, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), LedgerError>>;
}

/// The ledger could not be read or written. The implementation (which lives in an upper layer, the
/// mirror manager) describes its cause in `reason`, with its whole error chain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ACL ledger of mirror `{mirror}`: {reason}")]
pub struct LedgerError {
    /// The mirror.
    pub mirror: String,
    /// What failed, with its causes.
    pub reason: String,
}

/// An [`AclLedger`] in memory: lost with the process. For tests, and for a runner that is not given
/// a persistent one.
#[derive(Debug, Default)]
pub struct InMemoryAclLedger {
    created: Mutex<BTreeMap<String, BTreeSet<AclBinding>>>,
}

impl InMemoryAclLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, BTreeSet<AclBinding>>> {
        self.created.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl AclLedger for InMemoryAclLedger {
    fn load<'a>(&'a self, mirror: &'a str) -> BoxFuture<'a, Result<BTreeSet<AclBinding>, LedgerError>> {
        let bindings = self.lock().get(mirror).cloned().unwrap_or_default();
        Box::pin(std::future::ready(Ok(bindings)))
    }

    fn record_created<'a>(&'a self, mirror: &'a str, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), LedgerError>> {
        self.lock().entry(mirror.to_owned()).or_default().extend(bindings.iter().cloned());
        Box::pin(std::future::ready(Ok(())))
    }

    fn record_deleted<'a>(&'a self, mirror: &'a str, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), LedgerError>> {
        let mut all = self.lock();
        if let Some(mine) = all.get_mut(mirror) {
            for b in bindings {
                mine.remove(b);
            }
            if mine.is_empty() {
                all.remove(mirror);
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The ACL calls the sync makes on a cluster. [`Client`] is one; the unit tests fake it.
pub trait AclCluster: Send + Sync {
    /// See [`Client::describe_acls`].
    fn describe_acls<'a>(&'a self, filter: &'a AclFilter) -> BoxFuture<'a, Result<Vec<AclBinding>, ClientError>>;
    /// See [`Client::create_acls`].
    fn create_acls<'a>(&'a self, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), ClientError>>;
    /// See [`Client::delete_acls`].
    fn delete_acls<'a>(&'a self, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), ClientError>>;
}

impl AclCluster for Client {
    fn describe_acls<'a>(&'a self, filter: &'a AclFilter) -> BoxFuture<'a, Result<Vec<AclBinding>, ClientError>> {
        Box::pin(Client::describe_acls(self, filter))
    }

    fn create_acls<'a>(&'a self, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(Client::create_acls(self, bindings))
    }

    fn delete_acls<'a>(&'a self, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(Client::delete_acls(self, bindings))
    }
}

/// The ACL sync of one mirror: creates on the destination the source bindings the filters select,
/// and deletes from it the bindings it created (as its [`AclLedger`] says) that the source no
/// longer has.
#[derive(Debug)]
pub struct AclSync {
    mirror: String,
    ledger: Arc<dyn AclLedger>,
    /// The ledger's content, loaded on the first run (and again after a failed run).
    created: Option<BTreeSet<AclBinding>>,
}

/// What one ACL sync run changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclSyncReport {
    /// Created on the destination.
    pub created: Vec<AclBinding>,
    /// Deleted from the destination.
    pub deleted: Vec<AclBinding>,
}

impl AclSync {
    /// The ACL sync of `mirror`, remembering what it creates in `ledger`.
    pub fn new(mirror: impl Into<String>, ledger: Arc<dyn AclLedger>) -> Self {
        Self { mirror: mirror.into(), ledger, created: None }
    }

    /// Bindings this sync created and has not deleted, as of its last run (empty before the first).
    pub fn created(&self) -> BTreeSet<AclBinding> {
        self.created.clone().unwrap_or_default()
    }

    /// One run over `filters`.
    ///
    /// # Errors
    /// [`SyncError::Cluster`] if either side cannot be read or written, [`SyncError::Ledger`] if
    /// the ledger cannot; the next run starts again from the ledger.
    pub async fn run<S, D>(&mut self, source: &S, destination: &D, filters: &[AclFilter]) -> Result<AclSyncReport, SyncError>
    where
        S: AclCluster + ?Sized,
        D: AclCluster + ?Sized,
    {
        let outcome = self.run_once(source, destination, filters).await;
        if outcome.is_err() {
            // What was written is unknown: read the ledger again next time.
            self.created = None;
        }
        outcome
    }

    async fn run_once<S, D>(&mut self, source: &S, destination: &D, filters: &[AclFilter]) -> Result<AclSyncReport, SyncError>
    where
        S: AclCluster + ?Sized,
        D: AclCluster + ?Sized,
    {
        let err = |side: &'static str, what: &str| {
            let what = what.to_owned();
            move |source: ClientError| SyncError::Cluster { side, what, source: Box::new(source) }
        };
        let mut created = match self.created.take() {
            Some(c) => c,
            None => self.ledger.load(&self.mirror).await?,
        };
        let mut wanted = BTreeSet::new();
        let mut present = BTreeSet::new();
        for f in filters {
            wanted.extend(source.describe_acls(f).await.map_err(err("source", "describing ACLs"))?);
            present.extend(destination.describe_acls(f).await.map_err(err("destination", "describing ACLs"))?);
        }
        let create: Vec<AclBinding> = wanted.difference(&present).cloned().collect();
        let delete: Vec<AclBinding> = created.iter().filter(|b| !wanted.contains(*b)).cloned().collect();
        if !create.is_empty() {
            self.ledger.record_created(&self.mirror, &create).await?;
            created.extend(create.iter().cloned());
            destination.create_acls(&create).await.map_err(err("destination", "creating ACLs"))?;
        }
        if !delete.is_empty() {
            destination.delete_acls(&delete).await.map_err(err("destination", "deleting ACLs"))?;
            self.ledger.record_deleted(&self.mirror, &delete).await?;
            for b in &delete {
                created.remove(b);
            }
        }
        self.created = Some(created);
        Ok(AclSyncReport { created: create, deleted: delete })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;
    use crate::protocol::ErrorCode;

    /// A cluster's ACLs in memory; creations can be made to fail.
    #[derive(Debug, Default)]
    struct FakeCluster {
        bindings: Mutex<BTreeSet<AclBinding>>,
        refuse_creates: AtomicBool,
    }

    impl FakeCluster {
        fn with(bindings: &[AclBinding]) -> Self {
            Self { bindings: Mutex::new(bindings.iter().cloned().collect()), ..Self::default() }
        }

        fn all(&self) -> BTreeSet<AclBinding> {
            self.bindings.lock().unwrap().clone()
        }
    }

    impl AclCluster for FakeCluster {
        fn describe_acls<'a>(&'a self, f: &'a AclFilter) -> BoxFuture<'a, Result<Vec<AclBinding>, ClientError>> {
            let matching = self
                .all()
                .into_iter()
                .filter(|b| {
                    (f.resource_type == ANY || f.resource_type == b.resource_type)
                        && (f.pattern_type == ANY || f.pattern_type == b.pattern_type)
                        && f.resource_name.as_ref().is_none_or(|n| *n == b.resource_name)
                })
                .collect();
            Box::pin(std::future::ready(Ok(matching)))
        }

        fn create_acls<'a>(&'a self, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), ClientError>> {
            if self.refuse_creates.load(Ordering::Relaxed) {
                let refused = ClientError::Broker {
                    api_key: kafka_protocol::messages::ApiKey::CreateAcls,
                    target: Default::default(),
                    code: ErrorCode::ClusterAuthorizationFailed,
                    message: None,
                };
                return Box::pin(std::future::ready(Err(refused)));
            }
            self.bindings.lock().unwrap().extend(bindings.iter().cloned());
            Box::pin(std::future::ready(Ok(())))
        }

        fn delete_acls<'a>(&'a self, bindings: &'a [AclBinding]) -> BoxFuture<'a, Result<(), ClientError>> {
            let mut all = self.bindings.lock().unwrap();
            for b in bindings {
                all.remove(b);
            }
            Box::pin(std::future::ready(Ok(())))
        }
    }

    fn binding(name: &str, principal: &str) -> AclBinding {
        AclBinding {
            resource_type: RESOURCE_TOPIC,
            resource_name: name.to_owned(),
            pattern_type: PATTERN_PREFIXED,
            principal: principal.to_owned(),
            host: "*".to_owned(),
            operation: 3,
            permission_type: 3,
        }
    }

    fn set(bindings: &[&AclBinding]) -> BTreeSet<AclBinding> {
        bindings.iter().map(|b| (*b).clone()).collect()
    }

    /// After a restart (a new sync over the same ledger), bindings the mirror created are still its
    /// own: deleted when the source deletes them; a binding someone else created on the destination
    /// is never touched, even when the source has (and then deletes) the same binding.
    #[tokio::test]
    async fn the_ledger_survives_a_restart_and_only_own_bindings_are_deleted() {
        let (alice, bob, carol) = (binding("orders", "User:alice"), binding("orders", "User:bob"), binding("orders", "User:carol"));
        let source = FakeCluster::with(&[alice.clone(), bob.clone(), carol.clone()]);
        // carol's binding was created on the destination by an operator.
        let destination = FakeCluster::with(std::slice::from_ref(&carol));
        let filters = parse_acl_filters(&["topic:prefixed:orders"]).unwrap();
        let ledger = Arc::new(InMemoryAclLedger::new());

        let mut sync = AclSync::new("dr", ledger.clone());
        let report = sync.run(&source, &destination, &filters).await.unwrap();
        assert_eq!(report, AclSyncReport { created: vec![alice.clone(), bob.clone()], deleted: vec![] });
        assert_eq!(ledger.load("dr").await.unwrap(), set(&[&alice, &bob]));
        assert!(ledger.load("other").await.unwrap().is_empty());
        drop(sync);

        // Restart: the source deletes alice's and carol's bindings meanwhile.
        source.delete_acls(&[alice.clone(), carol.clone()]).await.unwrap();
        let mut restarted = AclSync::new("dr", ledger.clone());
        let report = restarted.run(&source, &destination, &filters).await.unwrap();
        assert_eq!(report, AclSyncReport { created: vec![], deleted: vec![alice.clone()] });
        assert_eq!(destination.all(), set(&[&bob, &carol]), "carol's binding is not the mirror's");
        assert_eq!(ledger.load("dr").await.unwrap(), set(&[&bob]));
        assert_eq!(restarted.created(), set(&[&bob]));

        // A sync with an empty ledger (what an in-memory-only sync had after a restart) deletes nothing.
        source.delete_acls(std::slice::from_ref(&bob)).await.unwrap();
        let mut forgetful = AclSync::new("dr", Arc::new(InMemoryAclLedger::new()));
        assert_eq!(forgetful.run(&source, &destination, &filters).await.unwrap(), AclSyncReport::default());
        assert_eq!(restarted.run(&source, &destination, &filters).await.unwrap().deleted, vec![bob.clone()]);
        assert_eq!(destination.all(), set(&[&carol]));
        assert!(ledger.load("dr").await.unwrap().is_empty());
    }

    /// A binding is in the ledger before it is created: a failed creation leaves it recorded, the
    /// next run creates it, and it is deleted like any other once the source deletes it.
    #[tokio::test]
    async fn recorded_before_created() {
        let alice = binding("orders", "User:alice");
        let source = FakeCluster::with(std::slice::from_ref(&alice));
        let destination = FakeCluster::default();
        let filters = parse_acl_filters(&["topic:any:*"]).unwrap();
        let ledger = Arc::new(InMemoryAclLedger::new());
        let mut sync = AclSync::new("dr", ledger.clone());
        destination.refuse_creates.store(true, Ordering::Relaxed);
        let err = sync.run(&source, &destination, &filters).await.unwrap_err();
        assert!(matches!(err, SyncError::Cluster { side: "destination", .. }), "{err}");
        assert_eq!(ledger.load("dr").await.unwrap(), set(&[&alice]));
        assert!(destination.all().is_empty());

        destination.refuse_creates.store(false, Ordering::Relaxed);
        assert_eq!(sync.run(&source, &destination, &filters).await.unwrap().created, vec![alice.clone()]);
        assert_eq!(destination.all(), set(&[&alice]));
        source.delete_acls(std::slice::from_ref(&alice)).await.unwrap();
        assert_eq!(sync.run(&source, &destination, &filters).await.unwrap().deleted, vec![alice.clone()]);
        assert!(destination.all().is_empty() && ledger.load("dr").await.unwrap().is_empty());
    }

    #[test]
    fn parses_filters_and_names_bad_entries() {
        let f = parse_acl_filters(&["topic:prefixed:orders", "group:any:*"]).unwrap();
        assert_eq!(f[0], AclFilter { resource_type: RESOURCE_TOPIC, pattern_type: PATTERN_PREFIXED, resource_name: Some("orders".into()) });
        assert_eq!(f[1], AclFilter { resource_type: RESOURCE_GROUP, pattern_type: ANY, resource_name: None });
        for bad in ["topic:orders", "table:any:*", "topic:glob:x"] {
            assert!(matches!(parse_acl_filters(&[bad]), Err(SyncError::InvalidPattern { key: "acls.include", .. })), "{bad}");
        }
    }
}
