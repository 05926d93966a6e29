//! ACL bindings, from the source to the destination (spec §7), when `sync.acls.enabled` is true.
//!
//! `acls.include` lists resource-pattern filters, each `TYPE:PATTERN:NAME`: TYPE one of `topic`,
//! `group`, `cluster`, `transactional_id`, `any`; PATTERN one of `literal`, `prefixed`, `match`,
//! `any`; NAME a resource name or `*` for any name (e.g. `topic:prefixed:orders`,
//! `group:any:*`). Matching source bindings are created on the destination; a binding the mirror
//! created and the source no longer has is deleted there. Bindings created on the destination by
//! anyone else are never touched.

use std::collections::BTreeSet;

use super::groups::SyncError;
use crate::client::{
    ANY, AclBinding, AclFilter, Client, ClientError, PATTERN_LITERAL, PATTERN_MATCH, PATTERN_PREFIXED, RESOURCE_CLUSTER,
    RESOURCE_GROUP, RESOURCE_TOPIC, RESOURCE_TRANSACTIONAL_ID,
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

/// The ACL sync of one mirror: remembers which bindings it created, so that it deletes only those.
#[derive(Debug, Default)]
pub struct AclSync {
    created: BTreeSet<AclBinding>,
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
    /// A sync that has created nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bindings this sync created and has not deleted.
    pub fn created(&self) -> &BTreeSet<AclBinding> {
        &self.created
    }

    /// One run over `filters`.
    ///
    /// # Errors
    /// [`SyncError::Cluster`] if either side cannot be read or written.
    pub async fn run(&mut self, source: &Client, destination: &Client, filters: &[AclFilter]) -> Result<AclSyncReport, SyncError> {
        let err = |side: &'static str, what: &str| {
            let what = what.to_owned();
            move |source: ClientError| SyncError::Cluster { side, what, source: Box::new(source) }
        };
        let mut wanted = BTreeSet::new();
        let mut present = BTreeSet::new();
        for f in filters {
            wanted.extend(source.describe_acls(f).await.map_err(err("source", "describing ACLs"))?);
            present.extend(destination.describe_acls(f).await.map_err(err("destination", "describing ACLs"))?);
        }
        let create: Vec<AclBinding> = wanted.difference(&present).cloned().collect();
        let delete: Vec<AclBinding> = self.created.iter().filter(|b| !wanted.contains(*b)).cloned().collect();
        destination.create_acls(&create).await.map_err(err("destination", "creating ACLs"))?;
        self.created.extend(create.iter().cloned());
        destination.delete_acls(&delete).await.map_err(err("destination", "deleting ACLs"))?;
        for b in &delete {
            self.created.remove(b);
        }
        Ok(AclSyncReport { created: create, deleted: delete })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
