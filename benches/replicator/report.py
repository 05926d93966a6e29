#!/usr/bin/env python3
"""Summarises a benchmark output directory (benches/replicator/run.sh) as Markdown, and writes
summary.json next to it.

usage: report.py BENCH_OUT RECORDS RECORD_SIZE COMMIT

Run directories: replicator-N, proxy-N, mm2-N, raw-N (bulk copies, round N), lag-<copier>-<hi|lo> (lag
phases); replicator-1 also holds the lag phase with idle partitions (lag-replicator-idle).
"""
import glob
import json
import os
import statistics
import sys


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def time_file(path):
    """/usr/bin/time -f '%e %U %S %M' output: (elapsed s, cpu s, max rss KiB)."""
    try:
        with open(path, encoding="ascii") as f:
            e, u, s, m = f.read().split()[-4:]
        return float(e), float(u) + float(s), int(m)
    except (OSError, ValueError):
        return None


def consumer_perf(path):
    """ConsumerPerformance's result line: (records/s over the fetch time, i.e. group join excluded;
    records/s over its whole run)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [l.strip() for l in f if l.strip()]
        header = next(i for i, l in enumerate(lines) if l.startswith("start.time"))
        names = [n.strip() for n in lines[header].split(",")]
        values = [v.strip() for v in lines[header + 1].split(",")]
        row = dict(zip(names, values))
        return float(row["fetch.nMsg.sec"]), float(row["nMsg.sec"])
    except (OSError, StopIteration, KeyError, ValueError, IndexError):
        return None


def jmx(path):
    """A jmx_snapshot file: {(request, metric): (count, mean)} and its time (epoch ms)."""
    values, t = {}, None
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("time="):
                    t = int(line[5:])
                    continue
                name, _, rest = line.rpartition(":")
                attr, _, v = rest.partition("=")
                fields = dict(kv.split("=", 1) for kv in name.split(",") if "=" in kv)
                key = (fields.get("request"), fields.get("name"))
                count, mean = values.get(key, (0, 0.0))
                if attr == "Count":
                    count = int(float(v))
                elif attr == "Mean":
                    mean = float(v)
                values[key] = (count, mean)
    except OSError:
        return None, None
    return values, t


def jmx_window(run_dir, label0, label1):
    """Requests and mean broker times between two snapshots (the histograms' means are over all
    samples, so count x mean differences give the window's mean)."""
    out = {}
    for side, request in (("dest", "Produce"), ("source", "Fetch")):
        a, t0 = jmx(os.path.join(run_dir, f"jmx-{label0}-{side}.txt"))
        b, t1 = jmx(os.path.join(run_dir, f"jmx-{label1}-{side}.txt"))
        if not a or not b or t1 is None or t0 is None or t1 <= t0:
            continue
        for metric in ("TotalTimeMs", "LocalTimeMs", "RequestQueueTimeMs"):
            key = (request, metric)
            if key not in a or key not in b:
                continue
            (c0, m0), (c1, m1) = a[key], b[key]
            n = c1 - c0
            out[f"{side}_{request}_{metric}"] = ((c1 * m1 - c0 * m0) / n) if n > 0 else None
            if metric == "TotalTimeMs":
                out[f"{side}_{request}_requests"] = n
                out[f"{side}_{request}_per_s"] = n / ((t1 - t0) / 1000.0)
        out["seconds"] = (t1 - t0) / 1000.0
    return out


def fmt(v, digits=1):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v if not v.startswith(">") else f"> {int(v[1:]):,}"
    return f"{v:,.{digits}f}"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def spread(values):
    values = [v for v in values if v is not None]
    return f"{min(values):,.1f}-{max(values):,.1f}" if values else "n/a"


def main():
    out, records, size, commit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    gb = records * size / 1e9
    runs = {}
    for d in sorted(glob.glob(os.path.join(out, "*", ""))):
        name = os.path.basename(os.path.dirname(d))
        entry = {"bulk": load(os.path.join(d, "bulk.json")), "lag": {}, "requests": {}}
        for f in sorted(glob.glob(os.path.join(d, "lag-*.json"))):
            entry["lag"][os.path.basename(f)[4:-5]] = load(f)
        scan = {}
        for f in glob.glob(os.path.join(d, "logscan-*.json")):
            scan.update(load(f) or {})
        entry["dest_batches"] = scan
        phases = [("bulk0", "bulk1", "bench")] + [
            (f"lag0-{t}", f"lag1-{t}", t) for t in entry["lag"]]
        for l0, l1, topic in phases:
            w = jmx_window(d, l0, l1)
            if w:
                n = w.get("dest_Produce_requests")
                batches = (scan.get(topic) or {}).get("batches")
                w["batches_per_produce"] = batches / n if batches and n else None
                w["records_per_batch"] = (scan.get(topic) or {}).get("records_per_batch")
                entry["requests"][topic] = w
        try:
            with open(os.path.join(d, "copier-rss.txt"), encoding="ascii") as f:
                entry["rss_kib"] = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            pass
        if name.startswith("raw"):
            entry["consumer_time"] = time_file(os.path.join(d, "consumer.txt.time"))
            entry["producer_time"] = time_file(os.path.join(d, "producer.txt.time"))
            entry["consumer_perf"] = consumer_perf(os.path.join(d, "consumer.txt"))
            b = entry["bulk"] or {}
            consumer = entry["consumer_perf"][0] * size / 1e6 if entry["consumer_perf"] else None
            producer = b.get("steady_mb_s")
            entry["raw_consumer_mb_s"], entry["raw_producer_mb_s"] = consumer, producer
            entry["raw_limit_mb_s"] = min(x for x in (consumer, producer) if x) if (consumer or producer) else None
            if entry["consumer_time"] and entry["producer_time"]:
                entry["raw_cpu_s_per_gb"] = (entry["consumer_time"][1] + entry["producer_time"][1]) / gb
        runs[name] = entry
    summary = {"records": records, "record_size": size, "commit": commit, "runs": runs}

    def cpu(b, key, kind="steady"):
        return ((b or {}).get(f"cpu_s_per_gb_{kind}") or {}).get(key)

    def cores(b, *keys):
        c = (b or {}).get("cores_busy_steady") or {}
        return sum(c.get(k, 0) for k in keys) if c else None

    def brokers_cost(b):
        """The source and destination brokers' CPU-s per GB, steady state."""
        return (cpu(b, "source_broker") or 0) + (cpu(b, "dest_broker") or 0)

    def others(b):
        c = (b or {}).get("cores_busy_steady")
        if not c:
            return None
        return c.get("machine_busy", 0) - sum(v for k, v in c.items() if not k.startswith("machine"))

    def path_cost(e, with_copier):
        """CPU-s per GB of one bulk copy's whole path, steady state: the brokers, everything else on the
        machine and (with_copier) the copier itself."""
        b = e["bulk"]
        mb_s = b.get("steady_mb_s")
        rest = others(b)
        if not mb_s or rest is None:
            return None
        total = brokers_cost(b) + rest / (mb_s / 1000)
        return total + (cpu(b, "copier") or 0) if with_copier else total

    def machine_ceiling(ours, mm2):
        """The best throughput ratio against MM2 that any copier could reach on this machine: when every
        run is CPU-bound, throughput is cores / CPU-s per GB, and a copier that costs nothing still pays
        for the brokers (and the rest of the machine) under its own traffic."""
        if any((cores(e["bulk"], "machine_busy") or 0) < 0.9 * os.cpu_count() for e in ours + mm2):
            return None  # a run that left cores idle was not CPU-bound; the bound does not apply
        mine = median(path_cost(e, False) for e in ours)
        theirs = median(path_cost(e, True) for e in mm2)
        return {"ratio": theirs / mine, "mm2": theirs, "ours": mine} if mine and theirs else None

    lines = [f"{records:,} records x {size} B = {gb:.2f} GB of payload; replicator commit {commit}", ""]
    lines.append("Bulk copies (each into a fresh destination cluster):")
    lines.append("")
    lines.append("| run | MB/s steady (5%-95%) | MB/s incl. startup | copier CPU-s/GB steady | copier CPU-s/GB whole process | copier peak RSS (MiB) | brokers CPU-s/GB steady (src + dst) | cores busy steady: copier / brokers / everything else on the machine |")
    lines.append("|---|---|---|---|---|---|---|---|")
    bulk = {"replicator": [], "proxy": [], "mm2": [], "raw": []}
    for name, e in runs.items():
        b = e["bulk"]
        if not b or "steady_mb_s" not in b:
            continue
        kind = name.rsplit("-", 1)[0]
        if kind not in bulk:
            continue
        bulk[kind].append(e)
        if kind == "raw":
            mbs = f"{fmt(e['raw_limit_mb_s'])} (consumer {fmt(e['raw_consumer_mb_s'])}, producer {fmt(e['raw_producer_mb_s'])})"
            copier_cores = cores(b, "consumer", "producer")
            steady_cpu, whole_cpu = "n/a", f"{fmt(e.get('raw_cpu_s_per_gb'))} (consumer + producer)"
            rss = " + ".join(fmt(t[2] / 1024, 0) for t in (e["consumer_time"], e["producer_time"]) if t)
        else:
            mbs = fmt(b["steady_mb_s"])
            copier_cores = cores(b, "copier")
            steady_cpu, whole_cpu = fmt(cpu(b, "copier")), fmt(cpu(b, "copier", "whole"))
            rss = fmt(e.get("rss_kib") / 1024, 0) if e.get("rss_kib") else "n/a"
        brokers = brokers_cost(b)
        lines.append(
            f"| {name} | {mbs} | {fmt(b.get('wall_mb_s'))} | {steady_cpu} | {whole_cpu} | {rss} | {fmt(brokers)}"
            f" | {fmt(copier_cores, 2)} / {fmt(cores(b, 'source_broker', 'dest_broker'), 2)} / {fmt(others(b), 2)} |")
    rep = median(e["bulk"]["steady_mb_s"] for e in bulk["replicator"])
    mm2 = median(e["bulk"]["steady_mb_s"] for e in bulk["mm2"])
    raw = median(e["raw_limit_mb_s"] for e in bulk["raw"])
    rep_cpu = median(cpu(e["bulk"], "copier") for e in bulk["replicator"])
    mm2_cpu = median(cpu(e["bulk"], "copier") for e in bulk["mm2"])
    rep_cpu_w = median(cpu(e["bulk"], "copier", "whole") for e in bulk["replicator"])
    mm2_cpu_w = median(cpu(e["bulk"], "copier", "whole") for e in bulk["mm2"])
    raw_cpu = median(e.get("raw_cpu_s_per_gb") for e in bulk["raw"])
    prx = median(e["bulk"]["steady_mb_s"] for e in bulk["proxy"])
    prx_cpu = median(cpu(e["bulk"], "copier") for e in bulk["proxy"])
    summary["medians"] = {"replicator_mb_s": rep, "mm2_mb_s": mm2, "raw_limit_mb_s": raw,
                        "replicator_cpu_s_per_gb": rep_cpu, "mm2_cpu_s_per_gb": mm2_cpu,
                        "replicator_cpu_s_per_gb_whole": rep_cpu_w, "mm2_cpu_s_per_gb_whole": mm2_cpu_w,
                        "raw_cpu_s_per_gb_whole": raw_cpu, "proxy_mb_s": prx, "proxy_cpu_s_per_gb": prx_cpu}
    lines.append("")
    lines.append(f"Medians over rounds (range): replicator {fmt(rep)} MB/s ({spread(e['bulk']['steady_mb_s'] for e in bulk['replicator'])}),"
                 f" {fmt(rep_cpu, 2)} CPU-s/GB steady ({fmt(rep_cpu_w, 2)} whole);"
                 f" MM2 {fmt(mm2)} MB/s ({spread(e['bulk']['steady_mb_s'] for e in bulk['mm2'])}), {fmt(mm2_cpu)} CPU-s/GB steady ({fmt(mm2_cpu_w)} whole);"
                 f" raw limit {fmt(raw)} MB/s ({spread(e['raw_limit_mb_s'] for e in bulk['raw'])}), {fmt(raw_cpu)} CPU-s/GB (consumer + producer, whole processes).")
    lines.append("")
    if rep and mm2:
        lines.append(f"- replicator / MM2 throughput: {rep / mm2:.2f}x (target >= 3x)")
    if prx and mm2:
        lines.append(f"- product path (proxy binary, mirror made with kafka-mirrors) / MM2 throughput: {prx / mm2:.2f}x (target >= 5x);"
                     f" {fmt(prx)} MB/s ({spread(e['bulk']['steady_mb_s'] for e in bulk['proxy'])}), {fmt(prx_cpu, 2)} CPU-s/GB steady"
                     + (f", {prx_cpu / mm2_cpu:.3f} of MM2's CPU per GB" if prx_cpu and mm2_cpu else ""))
    ceiling = machine_ceiling(bulk["proxy"] or bulk["replicator"], bulk["mm2"])
    if ceiling:
        lines.append(f"- ceiling of the ratio on this machine, for a copier that took no CPU at all: {ceiling['ratio']:.2f}x"
                     f" (MM2's path {ceiling['mm2']:.1f} CPU-s/GB: copier + brokers + the rest; the brokers and the rest"
                     f" under the proxy's copy {ceiling['ours']:.1f}). The brokers share the machine's cores with the"
                     " copier, and both kinds are CPU-bound, so no copier can beat this ratio here.")
        summary["medians"]["ratio_ceiling"] = ceiling["ratio"]
    if rep and raw:
        lines.append(f"- replicator / raw limit: {100 * rep / raw:.0f}% (target >= 70%)")
    if rep_cpu and mm2_cpu:
        lines.append(f"- replicator CPU per GB / MM2's: {rep_cpu / mm2_cpu:.3f} steady, "
                     f"{(rep_cpu_w / mm2_cpu_w) if rep_cpu_w and mm2_cpu_w else float('nan'):.3f} whole process (target < 0.25)")
    lines.append("")
    lines.append("Lag while a producer writes to the source (offset lag: sum over partitions of source end offset minus"
                 " destination end offset; catch-up delay: time until the destination holds everything the source held"
                 f" at a sample; probe every {os.environ.get('PROBE_MS', '50')} ms):")
    lines.append("")
    lines.append("| run: topic | source records/s | offset lag p50 / p99 / max (records) | catch-up delay p50 / p99 / max (ms) | samples never caught up | cores busy: copier / brokers / everything else |")
    lines.append("|---|---|---|---|---|---|")
    for name, e in runs.items():
        for topic, l in e["lag"].items():
            if not l:
                continue
            c = l.get("cores_busy") or {}
            ours = sum(v for k, v in c.items() if not k.startswith("machine"))
            lines.append(
                f"| {name}: {topic} | {fmt(l['source_records_s'], 0)} | {fmt(l['offset_lag_p50'], 0)} / {fmt(l['offset_lag_p99'], 0)} / {fmt(l['offset_lag_max'], 0)}"
                f" | {fmt(l['delay_ms_p50'], 0)} / {fmt(l['delay_ms_p99'], 0)} / {fmt(l['delay_ms_max'], 0)} | {l['samples_never_caught_up']} of {l['samples']}"
                f" | {fmt(c.get('copier'), 2)} / {fmt(c.get('source_broker', 0) + c.get('dest_broker', 0), 2)} / {fmt(c.get('machine_busy', 0) - ours, 2)} |")
    lines.append("")
    lines.append("Broker-side request figures (JMX RequestMetrics between phase boundaries, catch-up included; batches from the destination log):")
    lines.append("")
    lines.append("| run: topic | destination Produce requests/s | record batches per Produce request | records per batch | Produce time at the broker, mean ms (total / local / request queue) | source Fetch requests/s | source Fetch time at the broker, mean ms |")
    lines.append("|---|---|---|---|---|---|---|")
    for name, e in runs.items():
        for topic, w in e["requests"].items():
            lines.append(
                f"| {name}: {topic} | {fmt(w.get('dest_Produce_per_s'), 0)} | {fmt(w.get('batches_per_produce'), 2)} | {fmt(w.get('records_per_batch'), 1)}"
                f" | {fmt(w.get('dest_Produce_TotalTimeMs'), 2)} / {fmt(w.get('dest_Produce_LocalTimeMs'), 2)} / {fmt(w.get('dest_Produce_RequestQueueTimeMs'), 2)}"
                f" | {fmt(w.get('source_Fetch_per_s'), 0)} | {fmt(w.get('source_Fetch_TotalTimeMs'), 1)} |")
    src = load(os.path.join(out, "logscan-source.json"))
    if src:
        lines.append("")
        lines.append("Source batches: " + "; ".join(
            f"{t}: {v['batches']:,} batches, {fmt(v['records_per_batch'], 1)} records and {fmt((v['bytes_per_batch'] or 0) / 1024, 1)} KiB (lz4) per batch"
            for t, v in src.items() if v["batches"]))
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
