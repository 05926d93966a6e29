//! Coalescing many callers' requests into one bulk call: whoever asks while a bulk call is running
//! waits for the next one, which takes everything queued meanwhile (up to a cap). So a thousand
//! partitions starting at once cost a handful of round trips, and a lone partition still goes at once.
//!
//! ```text
//!   call(req) ─┐
//!   call(req) ─┼─► bounded queue ─► batch task: take all queued (≤ max) ─► run(batch) ─► replies
//!   call(req) ─┘                     (one batch at a time: bounded concurrency)
//! ```

use std::future::Future;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Queued requests at most (callers beyond it wait to queue).
pub(crate) const QUEUE_CAPACITY: usize = 4096;

type Pending<Req, Resp> = (Req, oneshot::Sender<Resp>);

/// A handle to a batch task.
#[derive(Debug)]
pub(crate) struct Batcher<Req, Resp> {
    queue: mpsc::Sender<Pending<Req, Resp>>,
}

impl<Req: Send + 'static, Resp: Send + 'static> Batcher<Req, Resp> {
    /// Starts the batch task on `tasks`, stopped by `cancel`. `run` gets up to `max_batch`
    /// requests and returns one response per request, in the same order.
    pub(crate) fn spawn<F, Fut>(tasks: &TaskTracker, cancel: CancellationToken, max_batch: usize, run: F) -> Self
    where
        F: Fn(Vec<Req>) -> Fut + Send + 'static,
        Fut: Future<Output = Vec<Resp>> + Send,
    {
        let (queue, mut rx) = mpsc::channel::<Pending<Req, Resp>>(QUEUE_CAPACITY);
        tasks.spawn(async move {
            loop {
                let first = tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    first = rx.recv() => match first {
                        Some(f) => f,
                        None => return,
                    },
                };
                let mut batch = vec![first];
                while batch.len() < max_batch.max(1) {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                let (requests, replies): (Vec<Req>, Vec<oneshot::Sender<Resp>>) = batch.into_iter().unzip();
                let responses = tokio::select! {
                    biased;
                    () = cancel.cancelled() => return,
                    r = run(requests) => r,
                };
                for (reply, response) in replies.into_iter().zip(responses) {
                    let _ = reply.send(response);
                }
            }
        });
        Self { queue }
    }

    /// Queues `request` and waits for its response; `None` if the batch task is gone (stopped, or
    /// `run` returned fewer responses than requests, a bug).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call's response is discarded.
    pub(crate) async fn call(&self, request: Req) -> Option<Resp> {
        let (reply, response) = oneshot::channel();
        self.queue.send((request, reply)).await.ok()?;
        response.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Calls made while a batch runs go together in the next one; each caller gets its own answer.
    #[tokio::test]
    async fn queued_calls_share_the_next_batch() {
        let tasks = TaskTracker::new();
        let cancel = CancellationToken::new();
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let (gate_tx, gate_rx) = tokio::sync::watch::channel(false);
        let seen = sizes.clone();
        let batcher = Arc::new(Batcher::spawn(&tasks, cancel.clone(), 100, move |requests: Vec<u32>| {
            let seen = seen.clone();
            let mut gate = gate_rx.clone();
            async move {
                seen.lock().unwrap().push(requests.len());
                // The first batch waits until every other call is queued.
                let _ = gate.wait_for(|open| *open).await;
                requests.into_iter().map(|r| r * 2).collect()
            }
        }));
        let first = tokio::spawn({
            let b = batcher.clone();
            async move { b.call(1).await }
        });
        while sizes.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let rest: Vec<_> = (2..=10)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { b.call(i).await })
            })
            .collect();
        while batcher.queue.capacity() > QUEUE_CAPACITY - 9 {
            tokio::task::yield_now().await;
        }
        gate_tx.send(true).unwrap();
        assert_eq!(first.await.unwrap(), Some(2));
        for (i, r) in rest.into_iter().enumerate() {
            assert_eq!(r.await.unwrap(), Some((i as u32 + 2) * 2));
        }
        assert_eq!(*sizes.lock().unwrap(), vec![1, 9]);
        cancel.cancel();
        tasks.close();
        tasks.wait().await;
        assert_eq!(batcher.call(3).await, None, "a stopped batcher answers None");
    }
}
