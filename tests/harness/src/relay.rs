//! A fault-injecting TCP relay: the network between two data centres, for the fault tests.
//!
//! [`FaultRelay::start`] listens on every route's address and forwards each accepted connection to
//! the route's target. A cluster started with [`crate::ClusterSpec::relayed`] advertises the relay's
//! addresses to clients on a listener of its own (its brokers keep talking among themselves
//! directly), so every connection a client makes after bootstrapping goes through the relay too.
//!
//! The faults, on all routes at once and until [`FaultRelay::heal`]:
//! - [`cut`](FaultRelay::cut): every open connection is reset (RST, both sides) and new ones are
//!   reset as soon as they are accepted: a link that is down and says so.
//! - [`black_hole`](FaultRelay::black_hole): connections are accepted and kept, nothing moves in
//!   either direction; bytes already read wait in the relay and move on after healing (TCP would
//!   retransmit them), unless an end gave up first. A link that silently drops everything.
//! - [`half_open`](FaultRelay::half_open): the server side of every connection is gone (reset),
//!   the client side stays open and its bytes are read and dropped, with no answer, no FIN, no RST;
//!   new connections are the same. A client only learns from its own timeouts. Healing lets new
//!   connections through; the half-open ones stay dead.
//!
//! And the link's quality, which holds while passing: [`set_latency`](FaultRelay::set_latency)
//! (each chunk delivered that much later, in order), [`set_bandwidth`](FaultRelay::set_bandwidth)
//! (bytes per second per direction over all connections), [`set_reset_rate`]
//! (FaultRelay::set_reset_rate) (each connection is reset with this probability per second: a
//! lossy link whose middleboxes drop connections now and then).
//!
//! Threads, not async: the harness has no runtime, and a test has tens of connections. Each
//! connection has a reader and a writer thread per direction.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};
use crate::util;

/// Chunks read and not yet delivered, each with the instant it is due, and its wake-up.
type Queue = (Mutex<VecDeque<(Instant, Vec<u8>)>>, Condvar);

/// How often blocked threads look at the mode.
const TICK: Duration = Duration::from_millis(10);
/// Largest chunk moved at once.
const CHUNK: usize = 64 * 1024;

/// What the link does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkMode {
    /// Bytes flow (with the latency and bandwidth set).
    Pass,
    /// Connections reset, new ones too.
    Cut,
    /// Nothing moves; connections stay open.
    BlackHole,
    /// Server sides gone, client sides open and unanswered.
    HalfOpen,
}

/// Counters of what the relay did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections reset by the relay (cut, half-open, reset probability).
    pub reset: u64,
    /// Bytes forwarded, both directions.
    pub bytes: u64,
}

#[derive(Debug)]
struct Quality {
    latency: Duration,
    /// Bytes per second per direction; 0: no limit.
    bandwidth: u64,
    /// Chance per second that a connection is reset.
    reset_rate: f64,
}

#[derive(Debug)]
struct Shared {
    mode: Mutex<LinkMode>,
    /// Bumped on every change of mode, so connections act on a new fault once.
    generation: AtomicU64,
    quality: Mutex<Quality>,
    /// Token buckets, one per direction (client to server, server to client): next free instant.
    buckets: [Mutex<Instant>; 2],
    accepted: AtomicU64,
    reset: AtomicU64,
    bytes: AtomicU64,
    stopped: AtomicBool,
}

impl Shared {
    fn mode(&self) -> LinkMode {
        *self.mode.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn latency(&self) -> Duration {
        self.quality.lock().unwrap_or_else(|p| p.into_inner()).latency
    }

    /// Waits until `n` bytes may pass in `direction`.
    fn pace(&self, direction: usize, n: usize) {
        let rate = self.quality.lock().unwrap_or_else(|p| p.into_inner()).bandwidth;
        if rate == 0 {
            return;
        }
        let due = {
            let mut next = self.buckets[direction].lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(n as f64 / rate as f64);
            start
        };
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
    }
}

/// The relay of one cluster (or any set of routes). Stops when dropped.
#[derive(Debug)]
pub struct FaultRelay {
    shared: Arc<Shared>,
    routes: Vec<(SocketAddr, SocketAddr)>,
}

impl FaultRelay {
    /// Listens on each route's first address and forwards to its second.
    ///
    /// # Errors
    /// If a listen address cannot be bound.
    pub fn start(routes: &[(SocketAddr, SocketAddr)]) -> Result<Self> {
        let shared = Arc::new(Shared {
            mode: Mutex::new(LinkMode::Pass),
            generation: AtomicU64::new(0),
            quality: Mutex::new(Quality { latency: Duration::ZERO, bandwidth: 0, reset_rate: 0.0 }),
            buckets: [Mutex::new(Instant::now()), Mutex::new(Instant::now())],
            accepted: AtomicU64::new(0),
            reset: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        for &(listen, target) in routes {
            let listener = TcpListener::bind(listen).map_err(|e| HarnessError::io(format!("binding the relay at {listen}"), e))?;
            listener.set_nonblocking(true).map_err(|e| HarnessError::io("a non-blocking relay listener", e))?;
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name(format!("relay-{listen}"))
                .spawn(move || accept_loop(&listener, target, &shared))
                .map_err(|e| HarnessError::io("starting a relay thread", e))?;
        }
        Ok(Self { shared, routes: routes.to_vec() })
    }

    /// The routes: (listen, target).
    pub fn routes(&self) -> &[(SocketAddr, SocketAddr)] {
        &self.routes
    }

    fn set_mode(&self, mode: LinkMode) {
        *self.shared.mode.lock().unwrap_or_else(|p| p.into_inner()) = mode;
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Resets every connection, and every new one until healed.
    pub fn cut(&self) {
        self.set_mode(LinkMode::Cut);
    }

    /// Nothing moves until healed; connections stay open.
    pub fn black_hole(&self) {
        self.set_mode(LinkMode::BlackHole);
    }

    /// Server sides reset, client sides left open and unanswered.
    pub fn half_open(&self) {
        self.set_mode(LinkMode::HalfOpen);
    }

    /// Back to passing bytes (latency, bandwidth and reset probability stay as set).
    pub fn heal(&self) {
        self.set_mode(LinkMode::Pass);
    }

    /// The current mode.
    pub fn mode(&self) -> LinkMode {
        self.shared.mode()
    }

    /// Added one-way delay of every chunk.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.quality.lock().unwrap_or_else(|p| p.into_inner()).latency = latency;
    }

    /// Bytes per second per direction over all connections; `None` for no limit.
    pub fn set_bandwidth(&self, bytes_per_second: Option<u64>) {
        self.shared.quality.lock().unwrap_or_else(|p| p.into_inner()).bandwidth = bytes_per_second.unwrap_or(0);
    }

    /// The chance per second that a connection is reset (0 for never).
    pub fn set_reset_rate(&self, per_second: f64) {
        self.shared.quality.lock().unwrap_or_else(|p| p.into_inner()).reset_rate = per_second.clamp(0.0, 1.0);
    }

    /// What the relay did so far.
    pub fn stats(&self) -> RelayStats {
        RelayStats {
            accepted: self.shared.accepted.load(Ordering::Relaxed),
            reset: self.shared.reset.load(Ordering::Relaxed),
            bytes: self.shared.bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for FaultRelay {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, shared: &Arc<Shared>) {
    while !shared.stopped.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                let shared = Arc::clone(shared);
                let _ = thread::Builder::new().name("relay-conn".into()).spawn(move || connection(client, target, &shared));
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(TICK),
            Err(_) => thread::sleep(TICK),
        }
    }
}

/// Makes the close of `stream` (when its last handle drops) a reset (SO_LINGER 0), not a FIN.
fn arm_reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

/// One client connection: connect the server side, then pump both directions until either end
/// closes or a fault ends it.
fn connection(client: TcpStream, target: SocketAddr, shared: &Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let mut generation = shared.generation.load(Ordering::SeqCst);
    // Before connecting: a fault in force applies at once.
    loop {
        match shared.mode() {
            LinkMode::Pass => break,
            LinkMode::Cut => {
                shared.reset.fetch_add(1, Ordering::Relaxed);
                arm_reset(&client);
                return;
            }
            LinkMode::HalfOpen => return swallow(client, shared),
            LinkMode::BlackHole => {
                if shared.stopped.load(Ordering::SeqCst) {
                    return;
                }
                thread::sleep(TICK);
            }
        }
        generation = shared.generation.load(Ordering::SeqCst);
    }
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) else {
        arm_reset(&client);
        return;
    };
    let _ = server.set_nodelay(true);
    let ended = Arc::new(AtomicBool::new(false));
    let pumps: Vec<_> = [(0usize, &client, &server), (1, &server, &client)]
        .into_iter()
        .filter_map(|(direction, from, to)| {
            let (from, to) = (from.try_clone().ok()?, to.try_clone().ok()?);
            let (shared, ended) = (Arc::clone(shared), Arc::clone(&ended));
            thread::Builder::new().name("relay-pump".into()).spawn(move || pump(direction, from, to, &shared, &ended)).ok()
        })
        .collect();
    // Watch for faults that end the connection.
    loop {
        if ended.load(Ordering::SeqCst) || shared.stopped.load(Ordering::SeqCst) {
            break;
        }
        let rate = shared.quality.lock().unwrap_or_else(|p| p.into_inner()).reset_rate;
        if rate > 0.0 && ((util::random_u64() % 1_000_000) as f64 / 1_000_000.0) < rate * TICK.as_secs_f64() {
            shared.reset.fetch_add(1, Ordering::Relaxed);
            break;
        }
        let now = shared.generation.load(Ordering::SeqCst);
        if now != generation {
            generation = now;
            match shared.mode() {
                LinkMode::Cut => {
                    shared.reset.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                LinkMode::HalfOpen => {
                    shared.reset.fetch_add(1, Ordering::Relaxed);
                    ended.store(true, Ordering::SeqCst);
                    arm_reset(&server);
                    for p in pumps {
                        let _ = p.join();
                    }
                    drop(server);
                    return swallow(client, shared);
                }
                LinkMode::Pass | LinkMode::BlackHole => {}
            }
        }
        thread::sleep(TICK);
    }
    // Every handle of both sockets is closed once the pumps are gone: the resets go out then.
    ended.store(true, Ordering::SeqCst);
    arm_reset(&client);
    arm_reset(&server);
    for p in pumps {
        let _ = p.join();
    }
}

/// Reads and drops the client's bytes until it closes or the relay stops: no answer, no FIN.
fn swallow(mut client: TcpStream, shared: &Shared) {
    let _ = client.set_read_timeout(Some(TICK * 10));
    let mut buf = vec![0u8; CHUNK];
    while !shared.stopped.load(Ordering::SeqCst) {
        match client.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

/// One direction: read chunks, hold them while black-holed, deliver each `latency` after it was
/// read, within the bandwidth.
fn pump(direction: usize, mut from: TcpStream, to: TcpStream, shared: &Arc<Shared>, ended: &Arc<AtomicBool>) {
    let _ = from.set_read_timeout(Some(TICK));
    // The writer runs apart so that latency delays bytes without slowing the reading.
    let queue: Arc<Queue> = Arc::new((Mutex::new(VecDeque::new()), Condvar::new()));
    let writer = {
        let (queue, shared, ended) = (Arc::clone(&queue), Arc::clone(shared), Arc::clone(ended));
        thread::Builder::new().name("relay-write".into()).spawn(move || deliver(direction, to, &queue, &shared, &ended))
    };
    let mut buf = vec![0u8; CHUNK];
    while !ended.load(Ordering::SeqCst) {
        if shared.mode() == LinkMode::BlackHole {
            thread::sleep(TICK);
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let (lock, ready) = &*queue;
                lock.lock().unwrap_or_else(|p| p.into_inner()).push_back((Instant::now() + shared.latency(), buf[..n].to_vec()));
                ready.notify_one();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    ended.store(true, Ordering::SeqCst);
    queue.1.notify_all();
    if let Ok(w) = writer {
        let _ = w.join();
    }
}

fn deliver(direction: usize, mut to: TcpStream, queue: &Queue, shared: &Shared, ended: &AtomicBool) {
    let (lock, ready) = queue;
    loop {
        let next = {
            let mut q = lock.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if ended.load(Ordering::SeqCst) {
                    return;
                }
                if shared.mode() != LinkMode::BlackHole
                    && let Some((due, _)) = q.front()
                    && *due <= Instant::now()
                {
                    break q.pop_front();
                }
                let wait = q.front().map_or(TICK, |(due, _)| due.saturating_duration_since(Instant::now()).min(TICK));
                q = ready.wait_timeout(q, wait.max(Duration::from_millis(1))).unwrap_or_else(|p| p.into_inner()).0;
            }
        };
        let Some((_, bytes)) = next else { continue };
        shared.pace(direction, bytes.len());
        if to.write_all(&bytes).is_err() {
            ended.store(true, Ordering::SeqCst);
            return;
        }
        shared.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread::spawn(move || {
                    let mut s = stream;
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn relay_to(target: SocketAddr) -> (FaultRelay, SocketAddr) {
        let listen = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        (FaultRelay::start(&[(listen, target)]).unwrap(), listen)
    }

    fn round_trip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn passes_then_cuts_then_heals() {
        let (relay, addr) = relay_to(echo_server());
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut s, b"hello").unwrap(), b"hello");
        relay.cut();
        let err = loop {
            match round_trip(&mut s, b"x") {
                Err(e) => break e,
                Ok(_) => thread::sleep(TICK),
            }
        };
        assert!(matches!(err.kind(), ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof | ErrorKind::BrokenPipe), "{err:?}");
        relay.heal();
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut s, b"again").unwrap(), b"again");
        assert!(relay.stats().reset >= 1);
    }

    #[test]
    fn a_black_hole_holds_bytes_until_healed() {
        let (relay, addr) = relay_to(echo_server());
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert_eq!(round_trip(&mut s, b"a").unwrap(), b"a");
        relay.black_hole();
        s.write_all(b"held").unwrap();
        let mut buf = [0u8; 4];
        assert!(s.read_exact(&mut buf).is_err(), "nothing comes back through a black hole");
        relay.heal();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");
    }

    #[test]
    fn half_open_connections_never_answer() {
        let (relay, addr) = relay_to(echo_server());
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert_eq!(round_trip(&mut s, b"a").unwrap(), b"a");
        relay.half_open();
        thread::sleep(TICK * 5);
        s.write_all(b"b").unwrap();
        let mut buf = [0u8; 1];
        let err = s.read_exact(&mut buf).unwrap_err();
        assert!(matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut), "no FIN, no RST, just silence: {err:?}");
        relay.heal();
        let mut fresh = TcpStream::connect(addr).unwrap();
        fresh.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut fresh, b"c").unwrap(), b"c");
        assert!(s.read_exact(&mut buf).is_err(), "the half-open one stays dead after healing");
    }

    #[test]
    fn latency_delays_each_chunk() {
        let (relay, addr) = relay_to(echo_server());
        relay.set_latency(Duration::from_millis(100));
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let start = Instant::now();
        assert_eq!(round_trip(&mut s, b"slow").unwrap(), b"slow");
        // Both directions pass the relay: at least twice the one-way latency.
        assert!(start.elapsed() >= Duration::from_millis(200), "{:?}", start.elapsed());
    }
}
