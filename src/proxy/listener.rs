//! Accept loops: the bootstrap listener and one listener per destination broker.
//!
//! A connection permit (`proxy.max_connections`, shared by all listeners) is acquired *before*
//! `accept`, so a proxy at its cap leaves further clients in the kernel's backlog instead of
//! accepting and dropping them. The permit moves into the session task and is released when it ends.
//! Sessions are spawned on the proxy's task tracker (with `proxy.session_threads`, each on one of
//! the session threads, `super::threads`, round-robin), and each gets a child of the shutdown token.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, debug_span, warn};

use super::cancel::Cancelled;
use super::server::Shared;
use super::session::run_session;

/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Which broker a listener's connections go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The bootstrap listener: any broker.
    Bootstrap,
    /// The listener of one broker (node id).
    Broker(i32),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bootstrap => f.write_str("bootstrap"),
            Self::Broker(id) => write!(f, "{id}"),
        }
    }
}

/// An accepted connection: on this runtime, or taken off it for a session thread.
enum Accepted {
    Here(TcpStream),
    Moved(std::net::TcpStream),
}

/// Accepts connections on `listener` until `stop` is cancelled.
pub(crate) async fn run_listener(shared: Arc<Shared>, listener: TcpListener, target: Target, stop: CancellationToken) {
    loop {
        let permit = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            p = shared.connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            a = listener.accept() => a,
        };
        let (socket, peer) = match accepted {
            Ok(a) => a,
            Err(error) => {
                warn!(%error, listener = %target, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        debug!(client.addr = %peer, listener = %target, "accepted");
        // With session threads, handed to one as a standard socket, which its runtime registers.
        let (socket, thread) = match &shared.sessions {
            None => (Accepted::Here(socket), None),
            Some(threads) => match socket.into_std() {
                Ok(s) => (Accepted::Moved(s), Some(threads.next().clone())),
                Err(error) => {
                    warn!(%error, client.addr = %peer, listener = %target, "cannot hand the connection to a session thread; closed");
                    continue;
                }
            },
        };
        let span = debug_span!("session", client.addr = %peer, broker.id = %target);
        let session_shared = shared.clone();
        let session_stop = shared.shutdown.child_token();
        let hard_stop = shared.hard_stop.clone();
        let session = async move {
            let _permit = permit;
            let socket = match socket {
                Accepted::Here(s) => s,
                Accepted::Moved(s) => match TcpStream::from_std(s) {
                    Ok(s) => s,
                    Err(error) => {
                        warn!(%error, "cannot register the connection on its session thread; closed");
                        return;
                    }
                },
            };
            tokio::select! {
                // Past the grace period: drop the connection. (Polled on every wake-up of the
                // session: `Cancelled` keeps that cheap.)
                () = Cancelled::new(hard_stop) => debug!("closed at the end of the grace period"),
                () = run_session(session_shared, socket, peer, target, session_stop) => {}
            }
        }
        .instrument(span);
        match thread {
            Some(thread) => shared.tracker.spawn_on(session, &thread),
            None => shared.tracker.spawn(session),
        };
    }
    debug!(listener = %target, "listener stopped");
}
