//! `kafka-harness`: the test harness from the command line.
//!
//! ```text
//! kafka-harness provision [--version V]...        jars for each version (default $KAFKA_VERSION or 4.4.0),
//!                                                 the compiled Java test client, and the Python venv
//! kafka-harness up [--brokers N] [--version V] [--name NAME] [--prop KEY=VALUE]...
//!                  [--jvm-opt OPTION]... [--secure SASL_PLAINTEXT|SSL|SASL_SSL] [--relayed true]
//!                                                 (--jvm-opt replaces the brokers' default JVM
//!                                                 options; repeat it for each)
//!                                                 start a cluster, print its bootstrap, run until Ctrl-C
//! ```
//!
//! `up` prints `bootstrap=…` and one `log=…` per node, then blocks. On Ctrl-C (or any other death of this
//! process) the brokers are killed, because their wrappers watch a pipe held by this process. Point
//! tests at it with `KMP_SOURCE_BOOTSTRAP=…` / `KMP_DEST_BOOTSTRAP=…`.
//!
//! With `--relayed true` the brokers are also advertised through a fault relay
//! (`kafka_harness::FaultRelay`): `up` prints `relayed_bootstrap=…` as well and takes commands on
//! stdin, one per line, answering `ok …` or `error …`: `cut`, `black-hole`, `half-open`, `heal`,
//! `latency MS`, `bandwidth BYTES_PER_S|none`, `reset-rate PER_S`, `stats` (benches/faults/soak.py).

#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr, reason = "a command-line tool reporting to its user")]

use std::io::Write;
use std::process::ExitCode;

use kafka_harness::{Cluster, ClusterSpec, FaultRelay, JavaClient, ListenerSecurity, SASL_USERS, client_props, default_version, dist, provision_python};

const USAGE: &str = "usage:
  kafka-harness provision [--version V]...
  kafka-harness up [--brokers N] [--version V] [--name NAME] [--prop KEY=VALUE]... [--jvm-opt OPTION]... [--secure SASL_PLAINTEXT|SSL|SASL_SSL] [--relayed true]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("kafka-harness: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let Some((command, rest)) = args.split_first() else {
        return Err(USAGE.into());
    };
    let options = parse_options(rest)?;
    let versions: Vec<String> = options.iter().filter(|(k, _)| k == "version").map(|(_, v)| v.clone()).collect();
    match command.as_str() {
        "provision" => {
            let versions = if versions.is_empty() { vec![default_version()] } else { versions };
            for version in versions {
                let d = dist(&version).map_err(|e| e.to_string())?;
                JavaClient::new(&d).map_err(|e| e.to_string())?;
                println!("kafka {version}: {}", d.libs_dir().display());
            }
            let python = provision_python().map_err(|e| e.to_string())?;
            println!("python with confluent-kafka: {}", python.display());
            Ok(())
        }
        "up" => {
            let mut spec = ClusterSpec::new(option(&options, "name").unwrap_or("dev"));
            if let Some(v) = versions.last() {
                spec = spec.version(v.clone());
            }
            if let Some(n) = option(&options, "brokers") {
                spec = spec.brokers(n.parse().map_err(|_| format!("--brokers {n:?} is not a number"))?);
            }
            let security = match option(&options, "secure").map(str::to_ascii_uppercase).as_deref() {
                None => None,
                Some("SASL_PLAINTEXT") => Some(ListenerSecurity::SaslPlaintext),
                Some("SSL") => Some(ListenerSecurity::Ssl),
                Some("SASL_SSL") => Some(ListenerSecurity::SaslSsl),
                Some(other) => return Err(format!("--secure {other:?} is not SASL_PLAINTEXT, SSL or SASL_SSL")),
            };
            if let Some(security) = security {
                spec = spec.secure(security);
            }
            let jvm: Vec<String> = options.iter().filter(|(k, _)| k == "jvm-opt").map(|(_, v)| v.clone()).collect();
            if !jvm.is_empty() {
                // Instead of the harness's start-up oriented defaults (benchmarks want Kafka's own).
                spec.jvm_opts = jvm;
            }
            let relayed = match option(&options, "relayed") {
                None | Some("false") => false,
                Some("true") => true,
                Some(other) => return Err(format!("--relayed {other:?} is not true or false")),
            };
            if relayed {
                spec = spec.relayed();
            }
            for (key, value) in options.iter().filter(|(k, _)| k == "prop") {
                let (k, v) = value.split_once('=').ok_or_else(|| format!("--{key} takes KEY=VALUE"))?;
                spec = spec.prop(k, v);
            }
            let cluster = Cluster::start(spec).map_err(|e| e.to_string())?;
            // Print errors are ignored: `kafka-harness up | head -1` must keep the cluster running.
            say(format_args!("bootstrap={}", cluster.bootstrap()));
            if let Some(security) = security {
                // What a Java client (or kafka-mirrors --command-config) needs, for the first user.
                let (user, password) = SASL_USERS[0];
                say(format_args!("plaintext_bootstrap={}", cluster.plaintext_bootstrap()));
                for (k, v) in client_props(security, Some(("SCRAM-SHA-512", user, password))) {
                    if !k.starts_with("ssl.keystore.") {
                        say(format_args!("client.{k}={v}"));
                    }
                }
            }
            for id in cluster.node_ids() {
                if let Some(log) = cluster.log_path(id) {
                    say(format_args!("log={}", log.display()));
                }
            }
            let relay = if relayed {
                let relay = FaultRelay::start(&cluster.relay_routes()).map_err(|e| e.to_string())?;
                say(format_args!("relayed_bootstrap={}", cluster.relayed_bootstrap().unwrap_or_default()));
                Some(relay)
            } else {
                None
            };
            say(format_args!("running; Ctrl-C stops the cluster"));
            if let Some(relay) = &relay {
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { break };
                    match relay_command(relay, line.trim()) {
                        Ok(answer) => say(format_args!("ok {answer}")),
                        Err(e) => say(format_args!("error {e}")),
                    }
                }
            }
            loop {
                std::thread::park();
            }
        }
        _ => Err(format!("unknown command {command:?}\n{USAGE}")),
    }
}

/// One command to the relay of `up --relayed true`.
fn relay_command(relay: &FaultRelay, line: &str) -> Result<String, String> {
    let mut words = line.split_whitespace();
    let command = words.next().unwrap_or_default();
    let arg = words.next();
    let number = |what: &str| -> Result<f64, String> {
        arg.ok_or_else(|| format!("{command} needs {what}"))?.parse::<f64>().map_err(|_| format!("{command}: {arg:?} is not a number"))
    };
    match command {
        "cut" => relay.cut(),
        "black-hole" => relay.black_hole(),
        "half-open" => relay.half_open(),
        "heal" => relay.heal(),
        "latency" => relay.set_latency(std::time::Duration::from_secs_f64(number("milliseconds")?.max(0.0) / 1000.0)),
        "bandwidth" if arg == Some("none") => relay.set_bandwidth(None),
        "bandwidth" => relay.set_bandwidth(Some(number("bytes per second")?.max(1.0) as u64)),
        "reset-rate" => relay.set_reset_rate(number("a chance per second")?),
        "stats" => {}
        other => return Err(format!("unknown relay command {other:?}")),
    }
    let s = relay.stats();
    Ok(format!("mode={:?} accepted={} reset={} bytes={}", relay.mode(), s.accepted, s.reset, s.bytes))
}

/// Prints a line to stdout, ignoring a closed pipe.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn parse_options(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let name = arg.strip_prefix("--").ok_or_else(|| format!("unexpected argument {arg:?}\n{USAGE}"))?;
        let value = iter.next().ok_or_else(|| format!("--{name} needs a value"))?;
        out.push((name.to_string(), value.clone()));
    }
    Ok(out)
}

fn option<'a>(options: &'a [(String, String)], name: &str) -> Option<&'a str> {
    options.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}
