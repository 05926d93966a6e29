//! The seam between the proxy and whoever answers the mirror admin APIs (spec §8): the proxy recognises
//! a mirror API request by its key, hands the body to a [`MirrorApiHandler`] and frames the answer.
//!
//! In the binary the handler is [`crate::admin::AdminHandler`]; session tests use a slow fake to show
//! that a long call does not hold up the connection's other requests.
//!
//! Owns nothing: what a call does, and its authorization, belong to `src/admin`.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

/// The future of one mirror API call.
pub(crate) type MirrorApiFuture<'a> = Pin<Box<dyn Future<Output = Option<Bytes>> + Send + 'a>>;

/// Answers mirror API requests for a principal.
pub(crate) trait MirrorApiHandler: Send + Sync + std::fmt::Debug {
    /// The response body (without header) of one request body of mirror API `api_key`; `None` if
    /// `api_key` is not a mirror API.
    ///
    /// # Cancel safety
    /// Not cancel safe (see [`crate::admin::AdminHandler::handle`]): the proxy runs each call to
    /// completion in its own task, even if the client goes away, and drops it only at the end of the
    /// shutdown grace period.
    fn handle<'a>(&'a self, api_key: i16, api_version: i16, body: Bytes, principal: &'a str) -> MirrorApiFuture<'a>;
}

impl MirrorApiHandler for crate::admin::AdminHandler {
    fn handle<'a>(&'a self, api_key: i16, api_version: i16, body: Bytes, principal: &'a str) -> MirrorApiFuture<'a> {
        Box::pin(crate::admin::AdminHandler::handle(self, api_key, api_version, body, principal))
    }
}
