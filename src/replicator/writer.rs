//! Coalescing Produce batches of many partitions into one request per destination broker.
//!
//! Each partition has at most one write in flight (writes of a partition are strictly ordered), so
//! the batches waiting for a broker belong to distinct partitions and can share a request, as the
//! broker requires (one batch per partition per request). While a request is in flight, the next
//! batches queue up and go together in the following one.
//!
//! ```text
//!   PartitionCopier ─┐
//!   PartitionCopier ─┼─► bounded queue ─► BrokerWriter task ─► Produce(p1, p2, p3…) ─► broker
//!   PartitionCopier ─┘        ▲                                     │
//!                             └──────── per-batch oneshot reply ◄───┘
//! ```
//!
//! A request carries the transactional batches of at most one (producer id, epoch): the broker
//! rejects a request that mixes several (`notes/broker-constraints.md` §2.1). Transactional requests
//! go as Produce v11 with the mirror's transactional id (§4 there).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kafka_protocol::messages::ApiKey;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::config::ReplicatorConfig;
use crate::client::{Client, ClientError, ConnectionError, ProduceOptions, ProducePartition, Produced};

/// Batches in one Produce request at most.
const MAX_BATCHES_PER_REQUEST: usize = 64;

type Reply = oneshot::Sender<Result<Produced, ClientError>>;

/// A batch waiting for its broker.
#[derive(Debug)]
struct Submission {
    batch: ProducePartition,
    /// (producer id, epoch) of a transactional batch.
    transactional: Option<(i64, i16)>,
    reply: Reply,
}

/// The writers of one replicator: `writers_per_broker` per destination broker, each on a
/// connection of its own, started on first use. A broker works through one connection's requests
/// one at a time, so one connection bounds a broker's write rate to what one of its request threads
/// validates; several let it use its cores. A partition always goes through the same one.
#[derive(Debug)]
pub struct Writers {
    /// One client (connections) per writer index.
    clients: Vec<Arc<Client>>,
    config: ReplicatorConfig,
    cancel: CancellationToken,
    queues: Mutex<HashMap<(i32, usize), mpsc::Sender<Submission>>>,
    tasks: tokio_util::task::TaskTracker,
}

impl Writers {
    /// Writers into `destination`, stopped by `cancel`.
    pub fn new(destination: Arc<Client>, config: ReplicatorConfig, cancel: CancellationToken) -> Self {
        let n = config.writers_per_broker.max(1);
        let clients = (0..n).map(|i| Arc::new(destination.sibling(&format!("{}-writer-{i}", destination.config().connection.client_id)))).collect();
        Self { clients, config, cancel, queues: Mutex::new(HashMap::new()), tasks: tokio_util::task::TaskTracker::new() }
    }

    fn index_of(&self, batch: &ProducePartition) -> usize {
        let n = self.clients.len();
        let hash = batch.topic.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        (hash.wrapping_add(batch.partition as u64) % n as u64) as usize
    }

    /// Produces `batch` through `broker`'s writer and waits for its outcome. **No retry.**
    ///
    /// # Errors
    /// As [`Client::produce_to`]; a transport failure of the shared request is reported to every
    /// batch in it (as ambiguous).
    pub async fn produce(&self, broker: i32, batch: ProducePartition, transactional: Option<(i64, i16)>) -> Result<Produced, ClientError> {
        let index = self.index_of(&batch);
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            // A writer that ended (it cannot, but if it panicked) is replaced, not used forever.
            queues.retain(|_, q| !q.is_closed());
            queues
                .entry((broker, index))
                .or_insert_with(|| {
                    let (tx, rx) = mpsc::channel(MAX_BATCHES_PER_REQUEST);
                    let task = run_writer(self.clients[index].clone(), broker, self.config.clone(), rx);
                    let cancel = self.cancel.clone();
                    self.tasks.spawn(async move {
                        tokio::select! {
                            () = cancel.cancelled() => {}
                            () = task => {}
                        }
                    });
                    tx
                })
                .clone()
        };
        let (reply, outcome) = oneshot::channel();
        let closed =
            || ClientError::Connection { broker, api_key: ApiKey::Produce, source: ConnectionError::Closed { addr: format!("writer of broker {broker}") } };
        queue.send(Submission { batch, transactional, reply }).await.map_err(|_| closed())?;
        outcome.await.unwrap_or_else(|_| Err(closed()))
    }
}

async fn run_writer(destination: Arc<Client>, broker: i32, config: ReplicatorConfig, mut queue: mpsc::Receiver<Submission>) {
    let mut waiting: Vec<Submission> = Vec::new();
    loop {
        if waiting.is_empty() {
            match queue.recv().await {
                Some(s) => waiting.push(s),
                None => return,
            }
        }
        while waiting.len() < MAX_BATCHES_PER_REQUEST {
            match queue.try_recv() {
                Ok(s) => waiting.push(s),
                Err(_) => break,
            }
        }
        // This request: every non-transactional batch, plus the transactional batches of the first
        // (producer id, epoch) waiting. The others wait for the next request.
        let producer = waiting.iter().find_map(|s| s.transactional);
        let (now, later): (Vec<Submission>, Vec<Submission>) = waiting.drain(..).partition(|s| s.transactional.is_none() || s.transactional == producer);
        waiting = later;
        let options = ProduceOptions {
            timeout: config.write_timeout,
            transactional_id: producer.map(|_| config.transactional_id.clone()),
            version: producer.map(|_| 11),
            ..ProduceOptions::default()
        };
        let batches: Vec<ProducePartition> = now.iter().map(|s| s.batch.clone()).collect();
        let sent = tokio::time::Instant::now();
        let produced = destination.produce_to(broker, &batches, &options).await;
        config.stats.produce_latency.observe(sent.elapsed().as_secs_f64());
        match produced {
            Ok(results) => {
                for (s, r) in now.into_iter().zip(results) {
                    let _ = s.reply.send(r);
                }
            }
            Err(error) => {
                let shared = Arc::new(error);
                for s in now {
                    let _ = s.reply.send(Err(share(&shared, broker)));
                }
            }
        }
    }
}

/// One copy of a request-level failure for each batch of the request, keeping its classification
/// (ambiguous transport failure, or what the client said).
fn share(error: &Arc<ClientError>, broker: i32) -> ClientError {
    match &**error {
        ClientError::Broker { api_key, target, code, message } => {
            ClientError::Broker { api_key: *api_key, target: target.clone(), code: *code, message: message.clone() }
        }
        ClientError::NoLeader { topic, partition } => ClientError::NoLeader { topic: topic.clone(), partition: *partition },
        ClientError::UnknownBroker { broker } => ClientError::UnknownBroker { broker: *broker },
        // Transport and everything else: the request may or may not have been applied.
        _ => ClientError::Connection {
            broker,
            api_key: ApiKey::Produce,
            source: ConnectionError::Poisoned { addr: format!("broker {broker}"), source: Arc::new(ConnectionError::Closed { addr: error.to_string() }) },
        },
    }
}
