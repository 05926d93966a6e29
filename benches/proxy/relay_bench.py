#!/usr/bin/env python3
"""End-to-end latency, and optionally consumer throughput, directly, through kafka-mirror-proxy and
through a plain TCP relay, side by side: how much of what the proxy costs is the extra hop itself,
which no proxy can avoid.

    python3 benches/proxy/relay_bench.py [--trials 4] [--rate 40000] [--fetch-records 0] [--latency-tool java|go]

Starts two 1-broker destinations with the test harness:
- A: reached directly and through the release proxy;
- B: advertises the address of `relay` (benches/proxy/relay.rs, a tokio copy_bidirectional per
  connection: no framing, no rewriting), so that every client connection to it goes through the
  relay.
The two brokers have the same configuration; paths alternate their order between trials. Each
trial runs the latency tool (benches/proxy/ProxyLatency.java, or latency-go with --latency-tool go)
for 20 s after 5 s of warm-up on every path at --rate
records/s (linger.ms=5, 64 KiB batches, as ab.py), and prints p50 / p99 / p99.9 and the CPU per MB
(in + out) of the proxy and of the relay. With --fetch-records N, N records of 1 KiB are first
written into 3 partitions of each cluster, and each trial starts with Kafka's ConsumerPerformance
reading them whole on every path (fetch-phase MB/s, and the proxy's and the relay's CPU per MB).
"""

import argparse
import glob
import re
import subprocess
import time

import ab
from ab import fetch_mbps, latency, latency_cell, produce_mbps
from benchlib import ROOT, TARGET, VERSION, bootstrap_of, cpu_seconds, free_port, harness_up, logger, run, start_proxy, stop_all

log = logger("relay")


def broker_port(name, pid, deadline=120):
    """The PLAINTEXT port the harness gave cluster `name` (harness process `pid`), from its
    server.properties, which exists before the broker starts."""
    pattern = str(TARGET / f"kafka-clusters/{name}-{pid}-*/node-0/server.properties")
    start = time.monotonic()
    while time.monotonic() - start < deadline:
        for path in glob.glob(pattern):
            with open(path) as f:
                m = re.search(r"^listeners=PLAINTEXT://127\.0\.0\.1:(\d+)", f.read(), re.M)
            if m:
                return int(m.group(1))
        time.sleep(0.2)
    raise SystemExit(f"no server.properties for cluster {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--rate", type=int, default=40_000)
    ap.add_argument("--fetch-records", type=int, default=0)
    ap.add_argument("--latency-tool", choices=ab.LATENCY_TOOLS, default="java")
    args = ap.parse_args()
    ab.LATENCY_TOOL[:] = [args.latency_tool]

    run(["cargo", "build", "--release", "--quiet", "--bin", "kafka-mirror-proxy", "--example", "relay"])
    run(["cargo", "build", "--release", "--quiet", "-p", "kafka-harness"])
    run([str(TARGET / "release/kafka-harness"), "provision", "--version", VERSION])
    started = []
    try:
        a = harness_up("relay-a")
        started.append(a)
        direct = bootstrap_of(a)
        relay_port = free_port()
        b = harness_up("relay-b", props=[f"advertised.listeners=PLAINTEXT://127.0.0.1:{relay_port}"])
        started.append(b)
        # The relay must run before the broker answers metadata with its address.
        relay = subprocess.Popen([str(TARGET / "release/examples/relay"), f"127.0.0.1:{relay_port}",
                                  f"127.0.0.1:{broker_port('relay-b', b.pid)}"], cwd=ROOT)
        started.append(relay)
        bootstrap_of(b)
        proxy, via, _ = start_proxy(TARGET / "release/kafka-mirror-proxy", direct)
        started.append(proxy)
        paths = {"direct": (direct, None), "proxy": (via, proxy.pid), "relay": (f"127.0.0.1:{relay_port}", relay.pid)}
        for name, (addr, _) in paths.items():  # warm-up: JIT of each broker, page cache
            log(f"warm-up, {name}")
            latency(addr, f"relay-warmup-{name}-{int(time.time())}", args.rate // 4)
        fetch_topic = f"relay-fetch-{int(time.time())}"
        if args.fetch_records:
            for name in ("direct", "relay"):  # one topic per cluster; the proxy reads A's
                addr = paths[name][0]
                log(f"writing {args.fetch_records} records of 1 KiB through {name}")
                produce_mbps(addr, fetch_topic, args.fetch_records)
                fetch_mbps(addr, fetch_topic, args.fetch_records)  # warm-up: page cache
        for t in range(args.trials):
            names = list(paths)
            order = names[t % 3:] + names[:t % 3]
            if args.fetch_records:
                cells = []
                for name in order:
                    addr, pid = paths[name]
                    log(f"trial {t + 1}, {name}: fetch")
                    cpu0 = cpu_seconds(pid) if pid else 0
                    mbps = fetch_mbps(addr, fetch_topic, args.fetch_records)
                    mb = args.fetch_records * 1024 / 1e6
                    cpu = f", CPU {(cpu_seconds(pid) - cpu0) * 1000 / mb:.2f} ms/MB" if pid else ""
                    cells.append(f"{name} {mbps:.1f} MB/s{cpu}")
                print(f"trial {t + 1} fetch | " + " | ".join(cells), flush=True)
            cells = []
            for name in order:
                log(f"trial {t + 1}, {name}")
                cells.append(latency_cell(name, *paths[name], f"relay-lat-{name}-{t}-{int(time.time())}", args.rate, cpu_label="CPU"))
            print(f"trial {t + 1} at {args.rate}/s | " + " | ".join(cells), flush=True)
    finally:
        stop_all(started)


if __name__ == "__main__":
    main()
