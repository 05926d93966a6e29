//! A cancellation signal that is cheap to poll again and again.
//!
//! Every session waits for two tokens (shutdown, and the end of the grace period) next to its I/O,
//! so both futures are polled on every wake-up of the session task, several times per request.
//! Polling tokio-util's `WaitForCancellationFuture` locks the token's waiter list each time, and
//! `CancellationToken::is_cancelled` locks the token too; under callgrind that was about 1,200
//! instructions per Produce request. [`Cancelled`] registers once, with a waker of its own that
//! records that the token woke it; later polls only load that flag (and re-register if the task's
//! waker changed).
//!
//! ```text
//!   poll ─► fired? ──yes──► poll the token's future (ready) ─► Ready
//!             │ no
//!             └─► registered with this task's waker? ──yes──► Pending (one atomic load)
//!                          │ no
//!                          └─► poll the token's future with a FlagWaker(task waker) ─► Pending
//!   token cancelled ─► FlagWaker: fired = true, wake the task
//! ```
//!
//! Owns nothing but the registration; the tokens belong to the server and the listeners.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Completes once `token` is cancelled, like `token.cancelled_owned()`.
///
/// # Cancel safety
/// Cancel safe, and reusable across `select!` loops: it holds no data, only a registration.
#[derive(Debug)]
pub(crate) struct Cancelled {
    wait: Pin<Box<WaitForCancellationFutureOwned>>,
    /// The registration: our waker around the task's, and the task waker it wraps.
    registered: Option<(Arc<FlagWaker>, Waker)>,
}

/// Wakes the task and remembers that it did.
#[derive(Debug)]
struct FlagWaker {
    fired: AtomicBool,
    task: Waker,
}

impl Wake for FlagWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.fired.store(true, Ordering::Release);
        self.task.wake_by_ref();
    }
}

impl Cancelled {
    pub(crate) fn new(token: CancellationToken) -> Self {
        Self { wait: Box::pin(token.cancelled_owned()), registered: None }
    }
}

impl Future for Cancelled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if let Some((flag, task)) = &this.registered {
            if !flag.fired.load(Ordering::Acquire) && task.will_wake(cx.waker()) {
                // Not woken by the token, and still registered with this task: nothing to do.
                return Poll::Pending;
            }
        }
        let flag = Arc::new(FlagWaker { fired: AtomicBool::new(false), task: cx.waker().clone() });
        let waker = Waker::from(flag.clone());
        let poll = this.wait.as_mut().poll(&mut Context::from_waker(&waker));
        this.registered = poll.is_pending().then(|| (flag, cx.waker().clone()));
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

    #[derive(Default)]
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_new_task_waker_is_registered_and_woken() {
        let token = CancellationToken::new();
        let mut signal = Cancelled::new(token.clone());
        let (first, second) = (Arc::new(CountingWaker::default()), Arc::new(CountingWaker::default()));
        let (first_waker, second_waker) = (Waker::from(first.clone()), Waker::from(second.clone()));
        for waker in [&first_waker, &first_waker, &second_waker] {
            assert!(Pin::new(&mut signal).poll(&mut Context::from_waker(waker)).is_pending());
        }
        token.cancel();
        assert_eq!((first.0.load(Ordering::SeqCst), second.0.load(Ordering::SeqCst)), (0, 1), "the latest waker is woken, once");
        assert!(Pin::new(&mut signal).poll(&mut Context::from_waker(&second_waker)).is_ready());
    }
}
