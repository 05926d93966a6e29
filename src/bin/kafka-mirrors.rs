//! `kafka-mirrors`: the operator's command line for mirrors (create, add topics, describe, stop, …).
//! Only prints its usage for now; the commands come with issue 6.

use clap::Parser;

/// Manage Cluster Mirroring through a kafka-mirror-proxy.
#[derive(Debug, Parser)]
#[command(name = "kafka-mirrors", version)]
struct Args {
    /// The proxy's bootstrap address (host:port).
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap_server: Option<String>,
}

fn main() -> std::process::ExitCode {
    let _args = Args::parse();
    let _ = <Args as clap::CommandFactory>::command().print_help();
    std::process::ExitCode::SUCCESS
}
