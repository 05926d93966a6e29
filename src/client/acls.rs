//! ACL calls: describe, create and delete bindings (KIP-140), with Kafka's numeric codes kept as
//! they are on the wire.

use kafka_protocol::messages::{ApiKey, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::messages::{create_acls_request, delete_acls_request};
use kafka_protocol::protocol::StrBytes;

use super::cluster::Client;
use super::error::{ClientError, Target};
use crate::protocol::ErrorCode;

/// Resource type codes (`ResourceType`): topic.
pub const RESOURCE_TOPIC: i8 = 2;
/// Resource type code: group.
pub const RESOURCE_GROUP: i8 = 3;
/// Resource type code: cluster.
pub const RESOURCE_CLUSTER: i8 = 4;
/// Resource type code: transactional id.
pub const RESOURCE_TRANSACTIONAL_ID: i8 = 5;
/// `ANY` for resource type, pattern type, operation and permission filters.
pub const ANY: i8 = 1;
/// Pattern type code: literal.
pub const PATTERN_LITERAL: i8 = 3;
/// Pattern type code: prefixed.
pub const PATTERN_PREFIXED: i8 = 4;
/// Pattern type code `MATCH`: in a filter, every pattern that matches the name.
pub const PATTERN_MATCH: i8 = 2;

/// One ACL binding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    /// Resource type code.
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: String,
    /// Pattern type code (literal or prefixed).
    pub pattern_type: i8,
    /// `User:alice`.
    pub principal: String,
    /// Host, `*` for any.
    pub host: String,
    /// Operation code.
    pub operation: i8,
    /// Permission code (2 deny, 3 allow).
    pub permission_type: i8,
}

/// Which bindings to describe: resource type, pattern type and name (`None`: any name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    /// Resource type code or [`ANY`].
    pub resource_type: i8,
    /// Pattern type code, [`ANY`] or [`PATTERN_MATCH`].
    pub pattern_type: i8,
    /// Resource name, `None` for any.
    pub resource_name: Option<String>,
}

fn acl_error(api_key: ApiKey, code: i16, message: Option<&StrBytes>) -> Result<(), ClientError> {
    match ErrorCode::try_from_code(code) {
        None => Ok(()),
        Some(code) => Err(ClientError::Broker { api_key, target: Target::default(), code, message: message.map(|m| m.to_string()) }),
    }
}

impl Client {
    /// The bindings matching `filter` (any principal, host, operation and permission).
    ///
    /// # Errors
    /// E.g. `SecurityDisabled` on a cluster without an authorizer.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>, ClientError> {
        let request = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type)
            .with_resource_name_filter(filter.resource_name.clone().map(StrBytes::from_string))
            .with_pattern_type_filter(filter.pattern_type)
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(ANY)
            .with_permission_type(ANY);
        self.retrying(&[], || async {
            let broker = self.any_broker()?;
            let response = self.send_to(broker, &request, None).await?;
            acl_error(ApiKey::DescribeAcls, response.error_code, response.error_message.as_ref())?;
            let mut out = Vec::new();
            for r in response.resources {
                for a in r.acls {
                    out.push(AclBinding {
                        resource_type: r.resource_type,
                        resource_name: r.resource_name.to_string(),
                        pattern_type: r.pattern_type,
                        principal: a.principal.to_string(),
                        host: a.host.to_string(),
                        operation: a.operation,
                        permission_type: a.permission_type,
                    });
                }
            }
            out.sort();
            Ok(out)
        })
        .await
    }

    /// Creates `bindings` (creating an existing one is a no-op in Kafka).
    ///
    /// # Errors
    /// The first binding's error.
    pub async fn create_acls(&self, bindings: &[AclBinding]) -> Result<(), ClientError> {
        if bindings.is_empty() {
            return Ok(());
        }
        let request = CreateAclsRequest::default().with_creations(
            bindings
                .iter()
                .map(|b| {
                    create_acls_request::AclCreation::default()
                        .with_resource_type(b.resource_type)
                        .with_resource_name(StrBytes::from_string(b.resource_name.clone()))
                        .with_resource_pattern_type(b.pattern_type)
                        .with_principal(StrBytes::from_string(b.principal.clone()))
                        .with_host(StrBytes::from_string(b.host.clone()))
                        .with_operation(b.operation)
                        .with_permission_type(b.permission_type)
                })
                .collect(),
        );
        self.retrying(&[], || async {
            let broker = self.any_broker()?;
            let response = self.send_to(broker, &request, None).await?;
            for r in &response.results {
                acl_error(ApiKey::CreateAcls, r.error_code, r.error_message.as_ref())?;
            }
            Ok(())
        })
        .await
    }

    /// Deletes exactly `bindings`.
    ///
    /// # Errors
    /// The first filter's error.
    pub async fn delete_acls(&self, bindings: &[AclBinding]) -> Result<(), ClientError> {
        if bindings.is_empty() {
            return Ok(());
        }
        let request = DeleteAclsRequest::default().with_filters(
            bindings
                .iter()
                .map(|b| {
                    delete_acls_request::DeleteAclsFilter::default()
                        .with_resource_type_filter(b.resource_type)
                        .with_resource_name_filter(Some(StrBytes::from_string(b.resource_name.clone())))
                        .with_pattern_type_filter(b.pattern_type)
                        .with_principal_filter(Some(StrBytes::from_string(b.principal.clone())))
                        .with_host_filter(Some(StrBytes::from_string(b.host.clone())))
                        .with_operation(b.operation)
                        .with_permission_type(b.permission_type)
                })
                .collect(),
        );
        self.retrying(&[], || async {
            let broker = self.any_broker()?;
            let response = self.send_to(broker, &request, None).await?;
            for r in &response.filter_results {
                acl_error(ApiKey::DeleteAcls, r.error_code, r.error_message.as_ref())?;
            }
            Ok(())
        })
        .await
    }
}
