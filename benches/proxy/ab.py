#!/usr/bin/env python3
"""Two proxy builds side by side on the consumer or the producer path: throughput and the proxy's CPU
per run, and optionally end-to-end latency, directly and through each build, for BENCHMARKS.md.

    python3 benches/proxy/ab.py --before BIN --after BIN [--load fetch|produce] [--rounds 5]
                                [--records 1500000] [--latency-trials 0] [--latency-rate 40000[,RATE...]]
                                [--pin-proxy-cpu CPU] [--latency-tool java|go]

BIN is a `kafka-mirror-proxy` binary (for example `git worktree add /tmp/before REV && cargo build
--release` there, then /tmp/before/target/release/kafka-mirror-proxy). Starts a 1-broker destination
with the test harness and both proxies. Then each round runs the load directly, through `before` and
through `after`, in an order that changes between rounds (see `order_of`), and prints per round the MB/s and the
CPU (user + system) each proxy spent on its run, then the medians and, for each build, the ratios to
direct paired within each round (median, mean with its 95% interval, range; pass the same binary as
`before` and `after` to measure one build's loss against direct with two samples per round):

- `--load fetch` (the default): --records records of 1 KiB are written into 3 partitions once, and
  each run reads the whole topic with Kafka's ConsumerPerformance (fetch-phase MB/s, after the group
  join).
- `--load produce`: each run writes --records records of 1 KiB into a fresh topic of 3 partitions
  with Kafka's ProducerPerformance at full speed (acks=all, linger.ms=5, batch.size=64 KiB, as in
  bench.py).

With --latency-trials N, N trials of benches/proxy/ProxyLatency.java (or, with --latency-tool go,
of benches/proxy/latency-go, the same measurement with franz-go) at --latency-rate records/s (a
comma-separated list: every trial at each rate, lowest first)
(linger.ms=5, 64 KiB batches) on each path follow, with each proxy's CPU per MB it moved (in + out) in
its trial. With --pin-proxy-cpu CPU, both proxies run on that
CPU and the broker and clients on the others (taskset). Everything shares this machine's cores: run
it on a quiet machine. (Named fetch_ab.py, with only the fetch load, until 2026-12-03.)
"""

import argparse
import json
import re
import statistics
import time

from benchlib import (JAVA, LATENCY_TOOLS, TARGET, VERSION, bootstrap_of, cpu_seconds, create_topic, delete_topic, harness_up, latency_command,
                      logger, pin_prefixes, run, start_proxy, stop_all)

log = logger("ab")
# With --pin-proxy-cpu: `taskset -c CPUS` for the broker and the client JVMs.
CLIENT_PREFIX = []
# --latency-tool: which end-to-end latency tool latency() runs (benchlib.LATENCY_TOOLS).
LATENCY_TOOL = ["java"]


def java():
    return CLIENT_PREFIX + JAVA




def fetch_mbps(bootstrap, topic, records):
    out = run(java() + ["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                      "--messages", str(records), "--timeout", "120000"])
    lines = [l for l in out.splitlines() if l.strip()]
    header = [h.strip() for h in next(l for l in lines if l.startswith("start.time")).split(",")]
    return float(dict(zip(header, [v.strip() for v in lines[-1].split(",")]))["fetch.MB.sec"])


def produce_mbps(bootstrap, topic, records):
    create_topic(java(), bootstrap, topic, 3)
    out = run(java() + ["org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
                        "--record-size", "1024", "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
                        "acks=all", "linger.ms=5", "batch.size=65536"])
    return float(re.findall(r"records/sec \(([\d.]+) MB/sec\)", out)[-1])


def latency(bootstrap, topic, rate):
    create_topic(java(), bootstrap, topic, 3)
    out = run(latency_command(LATENCY_TOOL[0], CLIENT_PREFIX) + ["--bootstrap", bootstrap, "--topic", topic, "--rate", str(rate),
                      "--duration-s", "20", "--warmup-s", "5", "--record-size", "1024", "--linger-ms", "5", "--batch-size", "65536"],
              timeout=300)
    delete_topic(java(), bootstrap, topic)
    d = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    return {**{k: d[k] / 1000 for k in ("e2e_p50_us", "e2e_p99_us", "e2e_p999_us")}, "sent_all": d["sent_all"]}


def latency_cell(name, addr, pid, topic, rate, cpu_label="proxy CPU"):
    """One latency trial on one path, as a table cell: `name p50 .. p99 .. p99.9 .. ms`, with the CPU
    that process `pid` (if any) spent over the whole trial per MB moved in and out (warm-up included
    in both)."""
    cpu0 = cpu_seconds(pid) if pid else 0
    lat = latency(addr, topic, rate)
    cpu = f", {cpu_label} {(cpu_seconds(pid) - cpu0) * 1000 / (lat['sent_all'] * 1024 * 2 / 1e6):.2f} ms/MB" if pid else ""
    return f"{name} p50 {lat['e2e_p50_us']:.2f} p99 {lat['e2e_p99_us']:.2f} p99.9 {lat['e2e_p999_us']:.2f} ms{cpu}"


def order_of(paths, r):
    """The order of the paths in round (or latency trial) `r`: the three rotations of (direct, before,
    after), then the three of its reverse. So over every three rounds each path runs once first, once
    in the middle and once last, and over six each runs right after each other path twice. (Until
    2026-12-05 the order only alternated with its reverse, so `before` always ran in the middle and
    `after` always at an end; the two proxies' tails then differed by position, even with one build
    in both slots.)"""
    names = list(paths) if (r // len(paths)) % 2 == 0 else list(reversed(paths))
    k = r % len(names)
    return names[k:] + names[:k]


def paired_summary(label, ratios):
    """One line on the per-round ratios of two paths: median, mean with the 95% interval of the mean
    (normal approximation, so meaningful from about 10 rounds), and range. The paths of a round run
    back to back, so the machine's drift between rounds moves these less than the ratio of medians."""
    mean = statistics.fmean(ratios)
    half = statistics.NormalDist().inv_cdf(0.975) * statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else float("nan")
    return (f"{label}, {len(ratios)} rounds paired: median {statistics.median(ratios):.3f}, mean {mean:.3f} "
            f"(95% interval {mean - half:.3f} to {mean + half:.3f}), range {min(ratios):.3f} to {max(ratios):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=1_500_000)
    ap.add_argument("--latency-trials", type=int, default=0)
    ap.add_argument("--latency-rate", type=lambda v: sorted(int(x) for x in v.split(",")), default=[40_000])
    ap.add_argument("--load", choices=["fetch", "produce"], default="fetch")
    ap.add_argument("--pin-proxy-cpu", type=int, metavar="CPU")
    ap.add_argument("--latency-tool", choices=LATENCY_TOOLS, default="java")
    args = ap.parse_args()
    CLIENT_PREFIX[:], proxy_prefix = pin_prefixes(args.pin_proxy_cpu)
    LATENCY_TOOL[:] = [args.latency_tool]

    run(["cargo", "build", "--release", "--quiet", "-p", "kafka-harness"])
    run([str(TARGET / "release/kafka-harness"), "provision", "--version", VERSION])
    started = []
    try:
        cluster = harness_up("ab", CLIENT_PREFIX)
        started.append(cluster)
        bootstrap = bootstrap_of(cluster)
        paths = {"direct": (bootstrap, None)}
        for name in ("before", "after"):
            proc, addr, _ = start_proxy(getattr(args, name), bootstrap, proxy_prefix)
            started.append(proc)
            paths[name] = (addr, proc.pid)
        topic = f"ab-{int(time.time())}"
        if args.load == "fetch":
            create_topic(java(), bootstrap, topic, 3)
            log(f"writing {args.records} records of 1 KiB")
            run(java() + ["org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(args.records),
                          "--record-size", "1024", "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
                          "acks=all", "linger.ms=5", "batch.size=65536"])
            fetch_mbps(bootstrap, topic, args.records)  # warm-up: page cache, JIT of the broker
        else:
            for name in paths:  # warm-up: JIT of the broker and of each path
                produce_mbps(paths[name][0], f"{topic}-warmup-{name}", 100_000)
        results = {name: [] for name in paths}
        for r in range(args.rounds):
            order = order_of(paths, r)
            line = [f"round {r + 1}"]
            for name in order:
                addr, pid = paths[name]
                cpu0 = cpu_seconds(pid) if pid else 0
                if args.load == "fetch":
                    mbps = fetch_mbps(addr, topic, args.records)
                else:
                    mbps = produce_mbps(addr, f"{topic}-{name}-{r}", args.records)
                cpu_ms = (cpu_seconds(pid) - cpu0) * 1000 if pid else 0
                results[name].append({"mbps": mbps, "proxy_cpu_ms": cpu_ms})
                line.append(f"{name} {mbps:.1f} MB/s" + (f", proxy CPU {cpu_ms:.0f} ms" if pid else ""))
            print(" | ".join(line), flush=True)
        for name, rs in results.items() if args.rounds else ():
            mbps = statistics.median(x["mbps"] for x in rs)
            cpu = statistics.median(x["proxy_cpu_ms"] for x in rs)
            print(f"median {name}: {mbps:.1f} MB/s" + (f", proxy CPU {cpu:.0f} ms per run of {args.records} records" if paths[name][1] else ""))
        for name in ("before", "after") if args.rounds else ():
            print(paired_summary(f"{name} / direct", [b["mbps"] / a["mbps"] for a, b in zip(results["direct"], results[name])]))
        for t in range(args.latency_trials):
            order = order_of(paths, t)
            for rate in args.latency_rate:
                cells = [latency_cell(name, *paths[name], f"ab-lat-{name}-{t}-{int(time.time())}", rate) for name in order]
                print(f"latency trial {t + 1} at {rate}/s | " + " | ".join(cells), flush=True)
    finally:
        stop_all(started)


if __name__ == "__main__":
    main()
