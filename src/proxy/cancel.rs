//! A cancellation signal that is cheap to poll again and again.
//!
//! Every session waits for two tokens (shutdown, and the end of the grace period) next to its I/O,
//! so both futures are polled on every wake-up of the session task, several times per request.
//! Polling tokio-util's `WaitForCancellationFuture` locks the token's waiter list each time; under
//! callgrind that was about 1,200 instructions per Produce request. [`Cancelled`] registers its waker
//! once and afterwards only loads the token's flag, unless the task's waker changed.
//!
//! Owns nothing but the registration; the tokens belong to the server and the listeners.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Completes once `token` is cancelled, like `token.cancelled_owned()`.
///
/// # Cancel safety
/// Cancel safe, and reusable across `select!` loops: it holds no data, only a registration.
#[derive(Debug)]
pub(crate) struct Cancelled {
    token: CancellationToken,
    wait: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The waker the registration was made with.
    registered: Option<Waker>,
}

impl Cancelled {
    pub(crate) fn new(token: CancellationToken) -> Self {
        Self { wait: Box::pin(token.clone().cancelled_owned()), token, registered: None }
    }
}

impl Future for Cancelled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.token.is_cancelled() {
            return Poll::Ready(());
        }
        if this.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            // Still registered with this task's waker: cancelling the token wakes it.
            return Poll::Pending;
        }
        let poll = this.wait.as_mut().poll(cx);
        if poll.is_pending() {
            this.registered = Some(cx.waker().clone());
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn completes_when_cancelled_after_many_polls() {
        let token = CancellationToken::new();
        let mut signal = Cancelled::new(token.clone());
        for _ in 0..3 {
            tokio::select! {
                biased;
                () = &mut signal => panic!("not cancelled yet"),
                () = tokio::task::yield_now() => {}
            }
        }
        let canceller = {
            let token = token.clone();
            tokio::spawn(async move { token.cancel() })
        };
        signal.await;
        canceller.await.expect("canceller");
        // Already cancelled: ready at once.
        Cancelled::new(token).await;
    }
}
