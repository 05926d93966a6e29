//! Session threads (`proxy.session_threads: true`): every client connection is served, from accept
//! to close, by one of `proxy.worker_threads` threads (unset: as many as the runtime has workers),
//! each running a single-threaded tokio runtime of its own. Off by default (see the price below).
//!
//! Why not one multi-threaded runtime: its idle workers are woken to look for work whenever a busy
//! worker has more than one task ready, and on a proxy nearly every such wake-up finds nothing (a
//! session is one task, and the worker that was woken by its socket runs it). Measured with
//! `perf stat` at 60,000 records/s through the proxy on 2 cores: 52,000 futex calls and 93,000
//! context switches in 25 s, against 61,000 context switches and no futex calls with one thread.
//! Here each connection stays on one thread for its whole life, so the saving holds with any
//! number of threads: they share no work, only the proxy's shared state. The price: connections on
//! a preempted thread wait for it (no other thread takes them over): at 125,000 records/s on 2
//! shared cores, p99 was about the same but p99.9 worse in every trial. BENCHMARKS.md ("Session
//! threads") has the measurements.
//!
//! The accepting runtime hands a connection over as a standard socket, which the chosen thread
//! registers with its own I/O driver (a tokio socket belongs to the driver that registered it).
//!
//! Must not touch: what runs on the threads (the listener decides); the proxy's other tasks
//! (listeners, metadata refresh, metrics, the control plane) stay on the runtime that started it.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;

use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

/// The session threads of one proxy. They stop when [`SessionThreads::stop`] is called or this is
/// dropped; what still runs on them is then dropped with their runtimes.
#[derive(Debug)]
pub(crate) struct SessionThreads {
    handles: Vec<Handle>,
    /// Round-robin position of the next connection.
    next: AtomicUsize,
    stop: CancellationToken,
    threads: Vec<JoinHandle<()>>,
}

impl SessionThreads {
    /// Starts `count` threads (at least one).
    ///
    /// # Errors
    /// A thread or its runtime could not be created (the ones already started are stopped).
    pub(crate) fn start(count: usize) -> io::Result<Self> {
        let stop = CancellationToken::new();
        let mut this = Self { handles: Vec::new(), next: AtomicUsize::new(0), stop: stop.clone(), threads: Vec::new() };
        for i in 0..count.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            this.handles.push(runtime.handle().clone());
            let stop = stop.clone();
            let thread = std::thread::Builder::new().name(format!("kmp-session-{i}")).spawn(move || {
                runtime.block_on(stop.cancelled());
            })?;
            this.threads.push(thread);
        }
        Ok(this)
    }

    /// The runtime of the thread that serves the next connection.
    pub(crate) fn next(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }

    /// How many threads there are.
    pub(crate) fn len(&self) -> usize {
        self.handles.len()
    }

    /// Stops the threads; tasks still on them are dropped. Does not wait for the threads to end.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Stops the threads and waits for them to end (tasks still on them are dropped first).
    /// Blocks: call it outside async code.
    #[cfg(test)]
    pub(crate) fn join(mut self) {
        self.stop.cancel();
        for thread in self.threads.drain(..) {
            // A panic on a session thread was logged by the panic hook; nothing more to report.
            let _ = thread.join();
        }
    }
}

impl Drop for SessionThreads {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// Connections go round the threads, each task runs on its thread, and stopping ends them.
    #[test]
    fn tasks_run_on_their_thread_round_robin() {
        let threads = SessionThreads::start(3).expect("start");
        assert_eq!(threads.len(), 3);
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..6 {
            let tx = tx.clone();
            threads.next().spawn(async move {
                tx.send(std::thread::current().name().map(str::to_owned)).expect("send");
            });
        }
        let names: Vec<_> = (0..6).map(|_| rx.recv().expect("recv").expect("named thread")).collect();
        let distinct: HashSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), 3, "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("kmp-session-")), "{names:?}");
        threads.join();
    }

    /// A socket accepted on one runtime is served on a session thread once re-registered there.
    #[test]
    fn a_socket_moves_to_a_session_thread() {
        let threads = SessionThreads::start(1).expect("start");
        let main = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        main.block_on(async {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let mut client = tokio::net::TcpStream::connect(listener.local_addr().expect("addr")).await.expect("connect");
            let (accepted, _) = listener.accept().await.expect("accept");
            let std_socket = accepted.into_std().expect("into_std");
            threads.next().spawn(async move {
                let mut socket = tokio::net::TcpStream::from_std(std_socket).expect("from_std");
                let mut buf = [0; 4];
                socket.read_exact(&mut buf).await.expect("read");
                socket.write_all(&buf).await.expect("write");
            });
            client.write_all(b"ping").await.expect("write");
            let mut back = [0; 4];
            client.read_exact(&mut back).await.expect("read");
            assert_eq!(&back, b"ping");
        });
        threads.join();
    }
}
