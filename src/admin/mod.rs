//! The mirror admin APIs (CreateMirror, DescribeMirrors, AddTopicsToMirror, …; spec §8): their
//! handler, their authorization on the `ClusterMirror` resource, a small server for them, and the
//! client `kafka-mirrors` uses.
//!
//! ```text
//!   proxy bootstrap listener ─┐
//!   AdminServer (server.rs) ──┴─► AdminHandler::handle (handler.rs) ─► auth (auth.rs)
//!                                                                   └─► mirror::MirrorManager
//!   kafka-mirrors ─► MirrorAdminClient (client/mirror_admin.rs) ─► any of the above
//! ```
//!
//! Must not touch: the replicator directly; it changes mirror state through `mirror`. Message
//! encoding is `protocol::mirror`'s.
//!
//! Wiring into a listener: for a request whose api key is a mirror api
//! ([`crate::protocol::mirror::MirrorApiKey::from_key`]), call [`AdminHandler::handle`] with the
//! request body (after header v2) and the authenticated principal, and answer with response
//! header v1 (`correlation_id`, empty tagged fields) followed by the returned body. Add
//! [`api_versions`] to the ApiVersions response.

mod auth;
mod handler;
mod server;

/// The client of the mirror APIs lives with our other Kafka client code; re-exported here for the
/// admin tools.
pub use crate::client::{AdminClientError, MirrorAdminClient};
pub use auth::{AclAuthorizer, AllowAll, MirrorAcl, MirrorAuthorizer, MirrorOperation};
pub use handler::{AdminHandler, api_versions};
pub use server::{ANONYMOUS, AdminServer, MAX_REQUEST_BYTES};
