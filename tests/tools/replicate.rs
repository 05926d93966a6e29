//! A stand-alone replicator process for tests that kill it (`kill -9`) mid-copy: mirrors the named
//! topics from `--source` to `--destination` and prints every partition's status as a JSON line each
//! 200 ms. Not a product binary: the proxy drives the replicator (issue 6).
//!
//! `replicate --source HOST:PORT --destination HOST:PORT [--read-uncommitted] TOPIC...`

#![allow(clippy::print_stdout, reason = "the status lines are this tool's output")]

use std::sync::Arc;
use std::time::Duration;

use kafka_mirror_proxy::client::{Client, ClientConfig, IsolationLevel};
use kafka_mirror_proxy::replicator::{Replicator, ReplicatorConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut source, mut destination, mut topics, mut isolation) = (None, None, Vec::new(), IsolationLevel::ReadCommitted);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--source" => source = args.next(),
            "--destination" => destination = args.next(),
            "--read-uncommitted" => isolation = IsolationLevel::ReadUncommitted,
            _ => topics.push(arg),
        }
    }
    let (Some(source), Some(destination)) = (source, destination) else {
        anyhow::bail!("usage: replicate --source HOST:PORT --destination HOST:PORT [--read-uncommitted] TOPIC...");
    };
    let source = Arc::new(Client::connect(ClientConfig::new(&source)).await?);
    let destination = Arc::new(Client::connect(ClientConfig::new(&destination)).await?);
    let mut config = ReplicatorConfig::new("replicate-tool");
    config.isolation = isolation;
    config.fetch_max_wait = Duration::from_millis(100);
    let replicator = Replicator::start(source, destination, &topics, config).await;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = tick.tick() => {
                for s in replicator.status() {
                    println!(
                        "{}",
                        serde_json::json!({
                            "topic": s.topic, "partition": s.partition, "state": s.state.name(),
                            "reason": match &s.state { kafka_mirror_proxy::replicator::CopyState::Failed { reason } => reason.clone(), _ => String::new() },
                            "destination_offset": s.destination_offset,
                            "source_high_watermark": s.source_high_watermark,
                        })
                    );
                }
            }
        }
    }
    replicator.shutdown().await;
    Ok(())
}
