//! Authorization of mirror operations on the `ClusterMirror` resource (spec §9): an operation, a
//! mirror name (or `*` for operations on all mirrors), and the principal the client authenticated
//! as (`User:alice`; `User:ANONYMOUS` without authentication).

use std::fmt;

/// An operation on the `ClusterMirror` resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MirrorOperation {
    /// CreateMirror.
    Create,
    /// DeleteMirror.
    Delete,
    /// Add/Remove/Pause/ResumeMirrorTopics.
    Alter,
    /// ListMirrors, DescribeMirrors.
    Describe,
    /// AlterMirrorConfigs.
    AlterConfigs,
    /// DescribeMirrorConfigs.
    DescribeConfigs,
}

impl MirrorOperation {
    /// Every operation.
    pub const ALL: [Self; 6] = [Self::Create, Self::Delete, Self::Alter, Self::Describe, Self::AlterConfigs, Self::DescribeConfigs];

    /// Kafka's spelling (`ALTER_CONFIGS`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "CREATE",
            Self::Delete => "DELETE",
            Self::Alter => "ALTER",
            Self::Describe => "DESCRIBE",
            Self::AlterConfigs => "ALTER_CONFIGS",
            Self::DescribeConfigs => "DESCRIBE_CONFIGS",
        }
    }

    /// Parses Kafka's spelling (case-insensitive; `AlterConfigs` as the ACL tool writes it works too).
    pub fn parse(s: &str) -> Option<Self> {
        let normal: String = s.chars().filter(|c| *c != '_').collect::<String>().to_ascii_uppercase();
        Some(match normal.as_str() {
            "CREATE" => Self::Create,
            "DELETE" => Self::Delete,
            "ALTER" => Self::Alter,
            "DESCRIBE" => Self::Describe,
            "ALTERCONFIGS" => Self::AlterConfigs,
            "DESCRIBECONFIGS" => Self::DescribeConfigs,
            _ => return None,
        })
    }
}

impl fmt::Display for MirrorOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Decides whether a principal may do an operation on a mirror.
pub trait MirrorAuthorizer: Send + Sync + fmt::Debug {
    /// True if `principal` may do `operation` on `mirror`.
    fn authorize(&self, principal: &str, operation: MirrorOperation, mirror: &str) -> bool;
}

/// Lets everyone do everything: for deployments that restrict who reaches the proxy otherwise, and
/// for tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl MirrorAuthorizer for AllowAll {
    fn authorize(&self, _principal: &str, _operation: MirrorOperation, _mirror: &str) -> bool {
        true
    }
}

/// One allow rule: principal (or `*`), operation, mirror name (or `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorAcl {
    /// `User:name` or `*`.
    pub principal: String,
    /// The operation allowed.
    pub operation: MirrorOperation,
    /// A mirror name or `*`.
    pub mirror: String,
}

/// Allows exactly what its rules allow (like `kafka-acls --cluster-mirror`, allow rules only).
#[derive(Debug, Clone, Default)]
pub struct AclAuthorizer {
    rules: Vec<MirrorAcl>,
}

impl AclAuthorizer {
    /// An authorizer with `rules`.
    pub fn new(rules: Vec<MirrorAcl>) -> Self {
        Self { rules }
    }
}

impl MirrorAuthorizer for AclAuthorizer {
    fn authorize(&self, principal: &str, operation: MirrorOperation, mirror: &str) -> bool {
        self.rules.iter().any(|r| (r.principal == "*" || r.principal == principal) && r.operation == operation && (r.mirror == "*" || r.mirror == mirror))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_rules() {
        let acls = AclAuthorizer::new(vec![
            MirrorAcl { principal: "User:admin".to_owned(), operation: MirrorOperation::Alter, mirror: "*".to_owned() },
            MirrorAcl { principal: "*".to_owned(), operation: MirrorOperation::Describe, mirror: "dr".to_owned() },
        ]);
        assert!(acls.authorize("User:admin", MirrorOperation::Alter, "anything"));
        assert!(!acls.authorize("User:bob", MirrorOperation::Alter, "dr"));
        assert!(acls.authorize("User:bob", MirrorOperation::Describe, "dr"));
        assert!(!acls.authorize("User:bob", MirrorOperation::Describe, "other"));
        assert_eq!(MirrorOperation::parse("AlterConfigs"), Some(MirrorOperation::AlterConfigs));
        assert_eq!(MirrorOperation::parse("describe_configs"), Some(MirrorOperation::DescribeConfigs));
    }
}
