#!/usr/bin/env python3
"""End-to-end latency directly and through the proxy, measured in alternation within one run, for
BENCHMARKS.md: the p99 the proxy adds at half of the direct maximum (issue 5), with the machine's
drift taken out.

    python3 benches/proxy/latency_interleaved.py [--trials 5] [--seconds 60] [--window-ms 100]
                                                 [--rate RATE] [--pin-proxy-cpu CPU]
                                                 [--proxy-tcp-congestion NAME] [--proxy BIN] [--control]

Why: bench.py runs each path for 30 s, one after the other. On this shared VM the speed drifts by up
to 2x within minutes, and the p99 of two back-to-back 30 s runs of the *same* path differs by
several milliseconds, more than the 1 ms being measured. Here one process of benches/proxy/
latency-go (franz-go) holds a producer and a consumer on each path and sends one paced schedule of
records (linger.ms=5, 64 KiB batches, 1 KiB records, as bench.py) to the direct path for
--window-ms, then to the proxy for as long, and so on: both paths see the same minutes of the
machine at the same total rate. Each path has its own histograms. Windows of 100 ms (the default):
with 1 s windows, a stall of a few hundred ms still lands on one path's records, and the p99 of
two paths in the same run differed by 10 ms (BENCHMARKS.md, "Latency with the paths interleaved").

Each trial first measures the direct end-to-end maximum (the same tool unpaced on the direct path
alone, 20 s, as bench.py's e2e basis) and then runs both paths interleaved at half of it, or at
--rate for every trial. (On this VM the unpaced maximum moved from 115,000 to 237,000 records/s
between trials, and half of a fast trial's maximum saturated the machine a minute later; a fixed
--rate keeps the trials comparable.) Which path gets the first window alternates between trials. Per trial it prints both
paths' p50 / p99 / p99.9 and the differences, and the proxy's CPU per MB it moved (in + out, over
the whole run, warm-up included); then the medians of the per-trial differences.

With --control, the second path is the broker directly as well (a second producer and consumer on
a topic of their own, still labelled "proxy"): what the method reports when the two paths are the
same, i.e. its noise floor.

Starts a 1-broker destination (`kafka-harness up`) and the release proxy (cubic for the proxy's
connections with --proxy-tcp-congestion cubic, as the latest bench.py runs), and stops them after.
"""

import argparse
import json
import statistics
import time

from benchlib import (JAVA, TARGET, VERSION, bootstrap_of, cpu_seconds, create_topic, delete_topic, harness_up, latency_command, logger,
                      pin_prefixes, run, start_proxy, stop_all)

log = logger("interleaved")
PARTITIONS, RECORD_SIZE, LINGER_MS, BATCH_SIZE = 3, 1024, 5, 65536


def tool(prefix, bootstrap, topic, rate, seconds, extra=()):
    """One run of latency-go; its JSON line."""
    out = run(latency_command("go", prefix) + ["--bootstrap", bootstrap, "--topic", topic, "--rate", str(rate), "--duration-s", str(seconds),
                                               "--warmup-s", "5", "--record-size", str(RECORD_SIZE), "--linger-ms", str(LINGER_MS),
                                               "--batch-size", str(BATCH_SIZE), *extra], timeout=seconds + 300)
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def ms(path, key):
    return path[key] / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=60, help="measured seconds per trial, both paths together")
    ap.add_argument("--window-ms", type=int, default=100)
    ap.add_argument("--rate", type=int, help="records/s of every trial (default: half of each trial's direct maximum)")
    ap.add_argument("--pin-proxy-cpu", type=int, metavar="CPU")
    ap.add_argument("--proxy-tcp-congestion", metavar="NAME")
    ap.add_argument("--proxy", default=str(TARGET / "release/kafka-mirror-proxy"))
    ap.add_argument("--control", action="store_true", help="the second path is the broker directly too (noise floor)")
    args = ap.parse_args()
    client_prefix, proxy_prefix = pin_prefixes(args.pin_proxy_cpu)
    java = client_prefix + JAVA

    run(["cargo", "build", "--release", "--quiet", "-p", "kafka-harness"])
    if args.proxy == str(TARGET / "release/kafka-mirror-proxy"):
        run(["cargo", "build", "--release", "--quiet", "--bin", "kafka-mirror-proxy"])
    run([str(TARGET / "release/kafka-harness"), "provision", "--version", VERSION])
    started = []
    diffs = {"p50": [], "p99": [], "p99.9": []}
    try:
        cluster = harness_up("interleaved", client_prefix)
        started.append(cluster)
        direct = bootstrap_of(cluster)
        proxy, via, _ = start_proxy(args.proxy, direct, proxy_prefix, args.proxy_tcp_congestion)
        started.append(proxy)
        if args.control:
            via = direct
        tag = int(time.time())

        def topics(name):
            a, b = f"il-{name}-direct-{tag}", f"il-{name}-proxy-{tag}"
            for t in (a, b):
                create_topic(java, direct, t, PARTITIONS)
            return a, b

        def drop(*ts):
            for t in ts:
                delete_topic(java, direct, t)

        log("warm-up: both paths interleaved at 20000 records/s for 20 s (not reported)")
        a, b = topics("warmup")
        tool(client_prefix, direct, a, 20_000, 20, ["--bootstrap-b", via, "--topic-b", b, "--window-ms", str(args.window_ms)])
        drop(a, b)
        for t in range(args.trials):
            rate = args.rate
            if rate is None:
                log(f"trial {t + 1}: direct end-to-end maximum (unpaced, 20 s)")
                topic = f"il-max-{t}-{tag}"
                create_topic(java, direct, topic, PARTITIONS)
                m = tool(client_prefix, direct, topic, 1_000_000, 20)
                drop(topic)
                rate = int(m["rate_achieved"] * min(1.0, m["received"] / max(1, m["sent"])) / 2)
            a, b = topics(str(t))
            pair = [("direct", direct, a), ("proxy", via, b)]
            if t % 2:
                pair.reverse()
            log(f"trial {t + 1}: {pair[0][0]} and {pair[1][0]} interleaved at {rate} records/s for {args.seconds} s, {args.window_ms} ms windows")
            cpu0 = cpu_seconds(proxy.pid)
            out = tool(client_prefix, pair[0][1], pair[0][2], rate, args.seconds,
                       ["--bootstrap-b", pair[1][1], "--topic-b", pair[1][2], "--window-ms", str(args.window_ms)])
            cpu = cpu_seconds(proxy.pid) - cpu0
            drop(a, b)
            res = {pair[0][0]: out["paths"][0], pair[1][0]: out["paths"][1]}
            d, x = res["direct"], res["proxy"]
            # The proxy path had about half of all records (warm-up included): its bytes, in and out.
            proxy_mb = out["sent_all"] / 2 * RECORD_SIZE * 2 / 1e6
            row = [f"trial {t + 1} at {rate}/s (achieved {out['rate_achieved']:.0f}), {pair[0][0]} first"]
            for name, p in (("direct", d), ("proxy", x)):
                row.append(f"{name} p50 {ms(p, 'e2e_p50_us'):.2f} p99 {ms(p, 'e2e_p99_us'):.2f} p99.9 {ms(p, 'e2e_p999_us'):.2f} ms"
                           f" ({p['received']}/{p['sent']} received)")
            added = {q: ms(x, k) - ms(d, k) for q, k in (("p50", "e2e_p50_us"), ("p99", "e2e_p99_us"), ("p99.9", "e2e_p999_us"))}
            for q, v in added.items():
                diffs[q].append(v)
            row.append("added " + ", ".join(f"{q} {v:+.2f}" for q, v in added.items()) + " ms")
            row.append(f"proxy CPU {cpu * 1000 / proxy_mb:.2f} ms/MB")
            print(" | ".join(row), flush=True)
        if args.trials:
            print(f"median added over {args.trials} trials: " + ", ".join(f"{q} {statistics.median(v):+.2f} ms" for q, v in diffs.items())
                  + f"; p99 added per trial: {', '.join(f'{v:+.2f}' for v in diffs['p99'])}")
    finally:
        stop_all(started)


if __name__ == "__main__":
    main()
