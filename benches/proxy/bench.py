#!/usr/bin/env python3
"""Proxy vs direct benchmark for BENCHMARKS.md: the same load against the destination broker directly
and through kafka-mirror-proxy (release build), side by side.

    python3 benches/proxy/bench.py [--records 400000] [--record-size 1024] [--partitions 3]
                                   [--latency-seconds 30] [--rounds 2] [--out target/bench/proxy.md]
                                   [--pin-proxy-cpu CPU] [--latency-tool java|go]
                                   [--proxy-tcp-congestion NAME]

1. Producer throughput: Kafka's ProducerPerformance at full speed (acks=all, linger.ms=5,
   batch.size=64 KiB), direct then through the proxy, each into its own fresh topic.
2. Consumer throughput: Kafka's ConsumerPerformance reading those topics back (whole run, and the
   fetch phase after the group join, which ConsumerPerformance reports apart).
   A warm-up run each way comes first; then --rounds rounds alternate which path goes first, and the
   table shows medians (every round is in the JSON below it). A second table pairs the two paths
   within each round (they run back to back) and gives the median of those per-round ratios, which
   the machine's drift between rounds moves less than the ratio of the two medians.
3. End-to-end latency at half of the direct maximum: benches/proxy/ProxyLatency.java (producer and
   consumer in one JVM, HdrHistogram p50/p99/p99.9), direct then through the proxy, with the producer
   settings of the throughput run (linger.ms=5, batch.size=64 KiB). The maximum is that of this same
   load, measured directly in every round just before that round's two latency runs, with the tool
   unpaced (--latency-basis e2e, the default; the same unpaced run through the proxy gives a third
   throughput ratio, with producer and consumer at once; with --latency-tool go it is bound by the
   round trip as well, since franz-go's idempotent producer keeps one Produce request in flight per
   broker where Java's keeps five): this machine's speed drifts up to 2x within minutes,
   so the producer's maximum from the throughput phase (--latency-basis producer, the earlier
   method) can be stale by the time the latency runs start. The p99 the proxy adds is also given per round and as
   the median of those pairs, next to the proxy's own p50 / p99 of that run's Produce requests (from
   its kafka_mirror_proxy_request_duration_seconds histogram, scraped before and after). A second latency run at --low-rate (default 2000 records/s) with
   linger.ms=0 (one record per request) shows the proxy's own added latency per request below
   saturation. With --latency-tool go, the latency runs use benches/proxy/latency-go instead (the
   same measurement and flags with franz-go, built with `go build` on first use): less CPU taken from
   the broker and the proxy, and no JVM pauses of the measuring client in either path's tail.
4. Proxy CPU per MB: the proxy process's user+system CPU time (/proc/PID/stat) over each proxied
   run, divided by the megabytes moved.

Starts a 1-broker destination with the test harness (`kafka-harness up`) unless KMP_DEST_BOOTSTRAP
names a running one, and stops what it started. Prints one Markdown table (also written to --out, with
every round as JSON): throughput proxy/direct ratios, p50/p99/p99.9 end-to-end and ack latency of both
paths at half of the direct maximum (and at --low-rate), and the proxy's CPU per MB. Everything runs on
this machine: broker, proxy and client JVMs share its cores, so run it on a quiet machine.

Full runs (the commands of the latest runs BENCHMARKS.md records; runs K and L of 2026-12-05 first):
    python3 benches/proxy/bench.py --records 1000000 --latency-seconds 30 --rounds 5 --latency-tool go --proxy-tcp-congestion cubic
    python3 benches/proxy/bench.py --records 1000000 --latency-seconds 30 --rounds 5 --latency-tool go --proxy-tcp-congestion cubic --pin-proxy-cpu 1
    python3 benches/proxy/bench.py --records 300000 --latency-seconds 30 --rounds 3 --latency-tool go
    python3 benches/proxy/bench.py --records 1000000 --latency-seconds 30 --rounds 3 --latency-tool go --latency-basis producer
    python3 benches/proxy/bench.py --records 1000000 --latency-seconds 30 --rounds 3 --latency-tool go --latency-basis producer --pin-proxy-cpu 1
With --proxy-tcp-congestion NAME, the proxy's connections use that TCP congestion control
(proxy.tcp_congestion_control) while the broker and the clients keep the system's; the table's first
line says which each side used. The other runs of 2026-12-05 added `--proxy-tcp-congestion cubic`
to the third and fourth commands above: with the system's bbr on loopback, the kernel arms a pacing timer per
socket burst, which costs the proxy twice (src/proxy/sockopt.rs).
With --pin-proxy-cpu CPU, the proxy runs on that CPU alone and the broker and every client JVM on the
others (taskset), in both paths: the proxy then takes no CPU from them, as on a host of its own.
Smoke run (only checks that the script works; its numbers mean nothing):
    python3 benches/proxy/bench.py --records 20000 --latency-seconds 5 --rounds 1 --low-rate 500

The proxy's own cost per request, independent of machine load, is measured by
benches/proxy/request_cost.py (callgrind instruction counts). The p99 the proxy adds is measured
with less of the machine's drift by benches/proxy/latency_interleaved.py (both paths in one run, in
alternating 100 ms windows).
"""

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

from benchlib import (JAVA, LATENCY_TOOLS, ROOT, TARGET, VERSION, bootstrap_of, create_topic, cpu_seconds, delete_topic, duration_quantile,
                      harness_up, latency_command, logger, pin_prefixes, request_durations, run, start_proxy, stop_all,
                      system_congestion_control)

# With --pin-proxy-cpu: `taskset -c CPUS` for the broker and the client JVMs (every CPU but the proxy's).
CLIENT_PREFIX = []
# --latency-tool: which end-to-end latency tool latency() runs (benchlib.LATENCY_TOOLS).
LATENCY_TOOL = ["java"]


def java():
    return CLIENT_PREFIX + JAVA


log = logger("bench")






PRODUCER_LINE = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
    r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def produce(bootstrap, topic, records, size):
    out = run(java() + ["org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
                      "--record-size", str(size), "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
                      "acks=all", f"linger.ms={THROUGHPUT_LINGER_MS}", f"batch.size={THROUGHPUT_BATCH_SIZE}"])
    m = [PRODUCER_LINE.search(l) for l in out.splitlines()]
    m = [x for x in m if x][-1]
    return {"rps": float(m[2]), "mbps": float(m[3]), "avg_ms": float(m[4]), "p50_ms": int(m[6]), "p99_ms": int(m[8]),
            "p999_ms": int(m[9])}


def consume(bootstrap, topic, records):
    out = run(java() + ["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                      "--messages", str(records), "--timeout", "120000"])
    header, values = None, None
    for line in out.splitlines():
        if line.startswith("start.time"):
            header = [h.strip() for h in line.split(",")]
        elif header and line.strip():
            values = [v.strip() for v in line.split(",")]
    row = dict(zip(header, values))
    # MB.sec counts from before the group join; fetch.MB.sec only the fetching after it.
    return {"mbps": float(row["MB.sec"]), "rps": float(row["nMsg.sec"]), "mb": float(row["data.consumed.in.MB"]),
            "fetch_mbps": float(row["fetch.MB.sec"]), "rebalance_ms": float(row["rebalance.time.ms"])}


# The producer settings of the throughput run: the latency run at half of its maximum uses the same,
# so that "half of the direct maximum" is a rate that client configuration sustains directly.
THROUGHPUT_LINGER_MS, THROUGHPUT_BATCH_SIZE = 5, 65536


def latency(admin, partitions, target, topic, rate, seconds, size, linger_ms=0, batch_size=16384):
    """One run of the latency tool against `target` into a fresh `topic` of `partitions`, created and
    deleted through the `admin` bootstrap (the broker directly, so that the proxy's CPU and request
    durations around the run count the tool's traffic only)."""
    create_topic(java(), admin, topic, partitions)
    out = run(latency_command(LATENCY_TOOL[0], CLIENT_PREFIX) + ["--bootstrap", target, "--topic", topic,
                      "--rate", str(rate), "--duration-s", str(seconds), "--warmup-s", "5", "--record-size", str(size),
                      "--linger-ms", str(linger_ms), "--batch-size", str(batch_size)],
              timeout=seconds + 180)
    delete_topic(java(), admin, topic)
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def merge(rounds):
    """The median over rounds of every number (nested dicts of the same shape)."""
    out = {}
    for k, v in rounds[0].items():
        if isinstance(v, dict):
            out[k] = merge([r[k] for r in rounds])
        elif isinstance(v, (int, float)):
            out[k] = statistics.median(r[k] for r in rounds)
    return out



def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--latency-seconds", type=int, default=30)
    ap.add_argument("--low-rate", type=int, default=2000, help="a second latency run at this rate (records/s), below saturation")
    ap.add_argument("--rounds", type=int, default=2, help="measurements per path, alternating which goes first; medians reported")
    ap.add_argument("--out", default=str(ROOT / "target/bench/proxy.md"))
    ap.add_argument("--latency-basis", choices=["e2e", "producer"], default="e2e",
                    help="the maximum whose half the latency run uses: of the end-to-end load itself (producer and "
                         "consumer at once, measured directly with the latency tool unpaced), or of the producer alone "
                         "(ProducerPerformance; the latency run's consumer then competes for the same cores)")
    ap.add_argument("--pin-proxy-cpu", type=int, metavar="CPU",
                    help="run the proxy on this CPU alone and the broker and clients on the others (taskset), "
                         "in both paths: the proxy then has a core of its own, as on a host of its own")
    ap.add_argument("--latency-tool", choices=LATENCY_TOOLS, default="java",
                    help="the end-to-end latency tool: ProxyLatency.java (Kafka's Java clients) or latency-go (franz-go, "
                         "less CPU and no JVM pauses in the measuring client)")
    ap.add_argument("--proxy-tcp-congestion", metavar="NAME",
                    help="the proxy's proxy.tcp_congestion_control (e.g. cubic); default: the system's, as for the broker "
                         "and the clients, which keep it in both paths")
    args = ap.parse_args()
    CLIENT_PREFIX[:], proxy_prefix = pin_prefixes(args.pin_proxy_cpu)
    LATENCY_TOOL[:] = [args.latency_tool]
    if proxy_prefix:
        log(f"proxy on CPU {args.pin_proxy_cpu}, broker and clients on CPUs {CLIENT_PREFIX[2]}")

    log("building the release proxy and the harness")
    run(["cargo", "build", "--release", "--quiet", "--bin", "kafka-mirror-proxy", "-p", "kafka-mirror-proxy"])
    run(["cargo", "build", "--release", "--quiet", "-p", "kafka-harness"])
    run([str(TARGET / "release/kafka-harness"), "provision", "--version", VERSION])

    started = []
    try:
        bootstrap = os.environ.get("KMP_DEST_BOOTSTRAP")
        if not bootstrap:
            log("starting a 1-broker destination")
            cluster = harness_up("bench", CLIENT_PREFIX)
            started.append(cluster)
            bootstrap = bootstrap_of(cluster)
        proxy, via, metrics = start_proxy(TARGET / "release/kafka-mirror-proxy", bootstrap, proxy_prefix, args.proxy_tcp_congestion)
        started.append(proxy)
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        tag = str(int(time.time()))
        log("warm-up: 50000 records each way (not measured)")
        for name, target in [("direct", bootstrap), ("proxy", via)]:
            create_topic(java(), bootstrap, f"bench-warmup-{name}-{tag}", args.partitions)
            produce(target, f"bench-warmup-{name}-{tag}", 50_000, args.record_size)
        rounds = {"direct": [], "proxy": []}
        mb = args.records * args.record_size / 1e6
        for r in range(args.rounds):
            order = [("direct", bootstrap), ("proxy", via)]
            if r % 2:
                order.reverse()
            for name, target in order:
                topic = f"bench-{name}-{tag}-{r}"
                create_topic(java(), bootstrap, topic, args.partitions)
                log(f"round {r + 1}, {name}: producer throughput ({args.records} x {args.record_size} B)")
                cpu0 = cpu_seconds(proxy.pid)
                p = produce(target, topic, args.records, args.record_size)
                cpu1 = cpu_seconds(proxy.pid)
                log(f"round {r + 1}, {name}: consumer throughput")
                c = consume(target, topic, args.records)
                cpu2 = cpu_seconds(proxy.pid)
                delete_topic(java(), bootstrap, topic)
                rounds[name].append({"produce": p, "consume": c, "cpu_produce_ms_per_mb": (cpu1 - cpu0) * 1000 / mb,
                                     "cpu_consume_ms_per_mb": (cpu2 - cpu1) * 1000 / mb})
        direct_rps = statistics.median(x["produce"]["rps"] for x in rounds["direct"])
        # With --latency-basis e2e, every round first measures the end-to-end load's own maximum on
        # both paths (the latency tool unpaced: asked for ten times the producer's maximum, it sends as
        # fast as the producer's buffer drains) and runs both paths at half of the direct one right
        # after: this machine's speed drifts within minutes, so a maximum measured in the throughput
        # phase would be stale by then.
        rates = []
        for r in range(args.rounds):
            order = [("direct", bootstrap), ("proxy", via)]
            if r % 2:
                order.reverse()
            if args.latency_basis == "e2e":
                # Both paths unpaced, in this round's order: the direct one gives the latency runs'
                # rate, and the pair is a throughput ratio with producer and consumer running at once,
                # from a client that takes less of the shared cores than Kafka's Java perf tools.
                for name, target in order:
                    log(f"round {r + 1}, {name}: end-to-end maximum (unpaced latency tool, {args.latency_seconds} s)")
                    cpu0 = cpu_seconds(proxy.pid)
                    m = latency(bootstrap, args.partitions, target, f"bench-e2e-max-{name}-{tag}-{r}", int(direct_rps * 10), args.latency_seconds,
                                args.record_size, THROUGHPUT_LINGER_MS, THROUGHPUT_BATCH_SIZE)
                    cpu = cpu_seconds(proxy.pid) - cpu0
                    # Records the consumer had not read within the tool's grace period do not count.
                    rounds[name][r]["e2e_max_rps"] = m["rate_achieved"] * min(1.0, m["received"] / max(1, m["sent"]))
                    if name == "proxy":
                        rounds[name][r]["cpu_e2e_max_ms_per_mb"] = cpu * 1000 / (m["sent_all"] * args.record_size * 2 / 1e6)
                rate = int(rounds["direct"][r]["e2e_max_rps"] / 2)
            else:
                rate = int(direct_rps / 2)
            rates.append(rate)
            for name, target in order:
                rounds[name][r]["latency_rate"] = rate
                log(f"round {r + 1}, {name}: end-to-end latency at {rate} records/s for {args.latency_seconds} s")
                cpu0 = cpu_seconds(proxy.pid)
                durations0 = request_durations(metrics_url)
                lat_result = latency(bootstrap, args.partitions, target, f"bench-latency-{name}-{tag}-{r}", rate, args.latency_seconds,
                                     args.record_size, THROUGHPUT_LINGER_MS, THROUGHPUT_BATCH_SIZE)
                if name == "proxy":
                    # The proxy's own view of the same run: each Produce request's time from its
                    # forwarding to its response written (broker included), as a bucket bound.
                    durations1 = request_durations(metrics_url)
                    for q, key in [(0.5, "proxy_produce_p50_ms"), (0.99, "proxy_produce_p99_ms")]:
                        lat_result[key] = duration_quantile(durations0, durations1, "Produce", q)
                # The CPU covers the tool's warm-up too, so the megabytes do as well (sent_all).
                lat_result["cpu_ms_per_mb"] = (cpu_seconds(proxy.pid) - cpu0) * 1000 / (lat_result["sent_all"] * args.record_size * 2 / 1e6)
                rounds[name][r]["latency"] = lat_result
                log(f"round {r + 1}, {name}: end-to-end latency at {args.low_rate} records/s for {args.latency_seconds} s")
                rounds[name][r]["latency_low"] = latency(bootstrap, args.partitions, target, f"bench-latency-low-{name}-{tag}-{r}", args.low_rate,
                                                         args.latency_seconds, args.record_size)
        results = {name: merge(rs) for name, rs in rounds.items()}
        results["rounds"] = rounds
    finally:
        stop_all(started)

    d, x = results["direct"], results["proxy"]
    basis = "half the direct end-to-end max" if args.latency_basis == "e2e" else "half the direct producer max"
    rate_text = str(rates[0]) if len(set(rates)) == 1 else f"{min(rates)} to {max(rates)}"
    x["cpu_latency_ms_per_mb"] = x["latency"]["cpu_ms_per_mb"]
    ratio = lambda a, b: f"{b / a:.3f}" if a else "n/a"
    lat = lambda r, k: f"{r['latency'][k] / 1000:.2f}"
    low = lambda r, k: f"{r['latency_low'][k] / 1000:.2f}"
    rows = [
        ("producer throughput, records/s", f"{d['produce']['rps']:.0f}", f"{x['produce']['rps']:.0f}", ratio(d['produce']['rps'], x['produce']['rps'])),
        ("producer throughput, MB/s", f"{d['produce']['mbps']:.1f}", f"{x['produce']['mbps']:.1f}", ratio(d['produce']['mbps'], x['produce']['mbps'])),
        ("producer ack latency at full speed p50 / p99 / p99.9, ms", f"{d['produce']['p50_ms']} / {d['produce']['p99_ms']} / {d['produce']['p999_ms']}",
         f"{x['produce']['p50_ms']} / {x['produce']['p99_ms']} / {x['produce']['p999_ms']}", ""),
        ("consumer throughput, records/s", f"{d['consume']['rps']:.0f}", f"{x['consume']['rps']:.0f}", ratio(d['consume']['rps'], x['consume']['rps'])),
        ("consumer throughput, MB/s", f"{d['consume']['mbps']:.1f}", f"{x['consume']['mbps']:.1f}", ratio(d['consume']['mbps'], x['consume']['mbps'])),
        ("consumer throughput after the group join (fetch phase), MB/s", f"{d['consume']['fetch_mbps']:.1f}", f"{x['consume']['fetch_mbps']:.1f}",
         ratio(d['consume']['fetch_mbps'], x['consume']['fetch_mbps'])),
        *([("end-to-end maximum (unpaced latency tool: producer and consumer at once), records/s", f"{d['e2e_max_rps']:.0f}",
            f"{x['e2e_max_rps']:.0f}", ratio(d['e2e_max_rps'], x['e2e_max_rps']))] if "e2e_max_rps" in d else []),
        (f"end-to-end latency at {basis} ({rate_text} records/s, linger.ms={THROUGHPUT_LINGER_MS}): p50, ms", lat(d, "e2e_p50_us"), lat(x, "e2e_p50_us"), ""),
        ("end-to-end latency p99, ms", lat(d, "e2e_p99_us"), lat(x, "e2e_p99_us"), f"{(x['latency']['e2e_p99_us'] - d['latency']['e2e_p99_us']) / 1000:+.2f} ms"),
        ("end-to-end latency p99.9, ms", lat(d, "e2e_p999_us"), lat(x, "e2e_p999_us"), ""),
        ("produce ack latency at that rate p50 / p99 / p99.9, ms",
         f"{lat(d, 'ack_p50_us')} / {lat(d, 'ack_p99_us')} / {lat(d, 'ack_p999_us')}",
         f"{lat(x, 'ack_p50_us')} / {lat(x, 'ack_p99_us')} / {lat(x, 'ack_p999_us')}", ""),
        (f"end-to-end latency at {args.low_rate} records/s (linger.ms=0): p50, ms", low(d, "e2e_p50_us"), low(x, "e2e_p50_us"), f"{(x['latency_low']['e2e_p50_us'] - d['latency_low']['e2e_p50_us']) / 1000:+.2f} ms"),
        ("end-to-end latency p99, ms", low(d, "e2e_p99_us"), low(x, "e2e_p99_us"), f"{(x['latency_low']['e2e_p99_us'] - d['latency_low']['e2e_p99_us']) / 1000:+.2f} ms"),
        ("end-to-end latency p99.9, ms", low(d, "e2e_p999_us"), low(x, "e2e_p999_us"), ""),
        ("produce ack latency at that rate p50 / p99 / p99.9, ms",
         f"{low(d, 'ack_p50_us')} / {low(d, 'ack_p99_us')} / {low(d, 'ack_p999_us')}",
         f"{low(x, 'ack_p50_us')} / {low(x, 'ack_p99_us')} / {low(x, 'ack_p999_us')}", ""),
        ("records sent / received in the latency run", f"{d['latency']['sent']:.0f} / {d['latency']['received']:.0f}",
         f"{x['latency']['sent']:.0f} / {x['latency']['received']:.0f}", ""),
        ("proxy CPU per MB produced / consumed, ms", "", f"{x['cpu_produce_ms_per_mb']:.2f} / {x['cpu_consume_ms_per_mb']:.2f}", ""),
        ("proxy CPU per MB in the latency run (in + out), ms", "", f"{x['cpu_latency_ms_per_mb']:.2f}", ""),
        *([("proxy CPU per MB at the end-to-end maximum (in + out), ms", "", f"{x['cpu_e2e_max_ms_per_mb']:.2f}", "")]
          if "cpu_e2e_max_ms_per_mb" in x else []),
    ]
    system_cc = system_congestion_control()
    table = [f"TCP congestion control: {system_cc} for the broker and the clients (the system's default); "
             f"{args.proxy_tcp_congestion or system_cc} for the proxy's connections"
             f"{' (proxy.tcp_congestion_control)' if args.proxy_tcp_congestion else ''}.", "",
             "| measure | direct | through the proxy | proxy / direct |", "|---|---|---|---|"]
    table += [f"| {a} | {b} | {c} | {r} |" for a, b, c, r in rows]
    # The rounds pair a direct and a proxy run minutes apart; the difference within a round is less
    # exposed to the machine's drift than the difference of the two medians.
    per_round = ["", f"Per round, end-to-end latency at {basis} (ms):", "",
                 "| round | rate, records/s | direct p50 / p99 | proxy p50 / p99 | p99 added by the proxy | Produce requests in the proxy, p50 / p99 (bucket bounds) |",
                 "|---|---|---|---|---|---|"]
    added = []
    for i, (dr, xr) in enumerate(zip(results["rounds"]["direct"], results["rounds"]["proxy"])):
        dl, xl = dr["latency"], xr["latency"]
        added.append((xl["e2e_p99_us"] - dl["e2e_p99_us"]) / 1000)
        per_round.append(f"| {i + 1} | {dr['latency_rate']} | {dl['e2e_p50_us'] / 1000:.2f} / {dl['e2e_p99_us'] / 1000:.2f} | "
                         f"{xl['e2e_p50_us'] / 1000:.2f} / {xl['e2e_p99_us'] / 1000:.2f} | {added[-1]:+.2f} | "
                         f"<= {xl.get('proxy_produce_p50_ms')} / <= {xl.get('proxy_produce_p99_ms')} ms |")
    per_round += ["", f"Median p99 added by the proxy, paired by round: {statistics.median(added):+.2f} ms"]
    # The same pairing for throughput: within a round the two paths run back to back, so their ratio
    # is less exposed to the machine's drift than the ratio of the two medians in the table above.
    measures = [("producer", lambda r: r["produce"]["mbps"]), ("consumer", lambda r: r["consume"]["mbps"]),
                ("consumer fetch phase", lambda r: r["consume"]["fetch_mbps"])]
    if "e2e_max_rps" in d:
        measures.append(("end-to-end maximum", lambda r: r["e2e_max_rps"]))
    pairs = list(zip(results["rounds"]["direct"], results["rounds"]["proxy"]))
    paired = {name: [get(xr) / get(dr) if get(dr) else float("nan") for dr, xr in pairs] for name, get in measures}
    per_round += ["", "Per round, throughput through the proxy / direct (MB/s, or records/s for the end-to-end maximum; "
                  "odd rounds run direct first, even rounds the proxy first):", "",
                  "| round | " + " | ".join(name for name, _ in measures) + " |", "|---|" + "---|" * len(measures)]
    for i, (dr, xr) in enumerate(pairs):
        per_round.append(f"| {i + 1} | " + " | ".join(f"{get(xr):.1f} / {get(dr):.1f} = {paired[name][i]:.3f}" for name, get in measures) + " |")
    per_round += ["", "Median of the per-round ratios: " + ", ".join(f"{name} {statistics.median(paired[name]):.3f}" for name, _ in measures)]
    results["paired_ratios"] = paired
    text = "\n".join(table + per_round) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n```json\n" + json.dumps(results, indent=1) + "\n```\n")
    print(text)


if __name__ == "__main__":
    main()
