//! `kafka-mirror-proxy`: the proxy and replicator process. Only prints its usage for now; the proxy
//! comes with issue 5.

use clap::Parser;

/// Cluster Mirroring for unmodified Apache Kafka: a Kafka-protocol proxy in front of the destination
/// cluster, with an offset-exact replicator from the source cluster.
#[derive(Debug, Parser)]
#[command(name = "kafka-mirror-proxy", version)]
struct Args {
    /// The YAML configuration file (see proxy.yaml).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match args.config {
        None => {
            let _ = <Args as clap::CommandFactory>::command().print_help();
            std::process::ExitCode::SUCCESS
        }
        Some(path) => {
            #[allow(clippy::print_stderr, reason = "a binary's one line of error output")]
            {
                eprintln!("kafka-mirror-proxy: the proxy is not implemented yet (config {})", path.display());
            }
            std::process::ExitCode::FAILURE
        }
    }
}
